/* test_python.c: unit tests of src/python/ against the interpreters of this
 * machine: Debian's /usr/bin/python3.11 (always expected) and the pyenv
 * builds 3.10-3.13 (`pyenv root`; each skipped loudly when absent).
 * py_inspect_file's findings are checked against nm and readelf (the loop's
 * symbol and size, _PyRuntime) and, for Debian's 3.11, its known cold part.
 * Each interpreter then runs a script (written to a temporary directory)
 * that prints the ids, names, first lines, line tables and co_lines()
 * ranges of its code objects and blocks reading stdin: py_code_read must
 * give the same names, file and lines, py_line_of the same lines from the
 * printed tables, and a walk of the blocked thread's Python frames with
 * py_inspect_file's layout (as the BPF unwinder does it: thread pointer,
 * pthread key, frames) must find the functions on its stack at the lines
 * of their calls. Then hand-made line tables, py_frame_name, and the
 * errors: a non-code address, a dead process. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "symbolize/maps.h"
#include "common/xalloc.h"
#include "python/names.h"
#include "python/python.h"

#include "fixture_child.h"

/* Debian 12's python3.11 3.11.2-6+deb12u6: its cold part of the loop, an
 * FDE with no symbol (readelf -wF, objdump: unwinding.md section 0). */
#define DEBIAN_BUILD_ID "571d98e01096d5c1c32420d229a6731a0a50d2a0"
#define DEBIAN_COLD_LO 0x430f05
#define DEBIAN_COLD_HI 0x43455e

#define MAX_CODES 16
#define MAX_LINES 512
#define MAX_CALLS 64

struct interp {
	const char *what; /* "Debian 3.11", "pyenv 3.10" */
	int minor;
	char exe[PATH_MAX]; /* the python to run; "" when absent */
	char lib[PATH_MAX]; /* the file holding the interpreter */
	char why[2 * PATH_MAX + 64];
};

static struct interp interps[] = {
	{.what = "Debian 3.11", .minor = 11}, {.what = "pyenv 3.10", .minor = 10},
	{.what = "pyenv 3.11", .minor = 11},  {.what = "pyenv 3.12", .minor = 12},
	{.what = "pyenv 3.13", .minor = 13},
};

/* The script each interpreter runs. It prints, for each code object: its
 * id, first line and name ("code"), its line table in hex ("table"), the
 * ranges co_lines() gives as first and last instruction index and line
 * ("line"), and its CALL instructions as first index and length in code
 * units ("call"); then a list and an int ("other", not code), "ready", and
 * blocks in leaf()'s readline, called from Outer.method, called from the
 * module. The markers name the lines the walk expects. */
static const char script[] =
	"import dis, sys\n"
	"\n"
	"class Outer:\n"
	"    def method(self, n):\n"
	"        total = 0\n"
	"        for i in range(n):\n"
	"            total += i\n"
	"        return leaf(total)  # call-leaf\n"
	"\n"
	"def leaf(x):\n"
	"    s = 'caf\\u00e9 \\u20ac \\U0001f600'\n"
	"    return sys.stdin.readline()  # call-readline\n"
	"\n"
	"def top():\n"
	"    def inner(y):\n"
	"        return y * 2\n"
	"    return inner\n"
	"\n"
	/* Names of 1, 2 and 4 bytes a character: "\u00e9t\u00e9",
	 * "\u51fd\u6570", "\U00020000x" (a CJK ideograph past the BMP). */
	"def \xc3\xa9"
	"t"
	"\xc3\xa9():\n"
	"    return 1\n"
	"def \xe5\x87\xbd\xe6\x95\xb0():\n"
	"    return 2\n"
	"def \xf0\xa0\x80\x80"
	"x():\n"
	"    return 3\n"
	"\n"
	"def show(c):\n"
	"    name = getattr(c, 'co_qualname', c.co_name)\n"
	"    print('code', id(c), c.co_firstlineno, name)\n"
	"    print('table', id(c), c.co_linetable.hex() or '-')\n"
	"    for start, end, line in c.co_lines():\n"
	"        if end > start:\n"
	"            print('line', id(c), start // 2, end // 2 - 1, line or 0)\n"
	"    ins = list(dis.get_instructions(c))\n"
	"    for a, b in zip(ins, ins[1:] + [None]):\n"
	"        if a.opname.startswith('CALL'):\n"
	"            end = b.offset if b else len(c.co_code)\n"
	"            print('call', id(c), a.offset // 2, (end - a.offset) // 2)\n"
	"\n"
	"uni = [globals()[n] for n in ('\\u00e9t\\u00e9', '\\u51fd\\u6570', '\\U00020000x')]\n"
	"for f in [Outer.method, leaf, top, top()] + uni:\n"
	"    show(f.__code__)\n"
	"show(sys._getframe().f_code)\n"
	"keep = [1, 2, 3]\n"
	"print('other', id(keep), id(12345678901234))\n"
	"print('ready', flush=True)\n"
	"Outer().method(3)  # call-method\n";

/* What the script printed. */
struct code_rec {
	uint64_t id;
	int firstlineno;
	char name[128];
	uint8_t table[4096];
	size_t table_len;
};

struct line_rec {
	uint64_t id;
	uint32_t first, last;
	int line;
};

struct call_rec {
	uint64_t id;
	uint32_t at, len;
};

struct run {
	pid_t pid;
	int stdin_fd;
	char dir[64], path[128];
	struct code_rec code[MAX_CODES];
	struct line_rec line[MAX_LINES];
	struct call_rec call[MAX_CALLS];
	size_t ncode, nline, ncall;
	uint64_t other[2];
};

/* ---- Helpers ---- */

static void sleep_ms(long ms)
{
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};

	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

/* The first line of a command's output, into out. */
static bool command_line(const char *cmd, char *out, size_t size)
{
	FILE *p = popen(cmd, "r");
	bool ok;

	if (!p)
		return false;
	ok = fgets(out, (int)size, p) != NULL;
	pclose(p);
	if (ok)
		out[strcspn(out, "\n")] = '\0';
	return ok && out[0];
}

/* The pyenv build of 3.minor: the newest patch release under `pyenv
 * root`/versions (or ~/.pyenv), with its python and libpython. */
static void find_pyenv(struct interp *in)
{
	char root[PATH_MAX - 128] = "", pat[PATH_MAX];
	glob_t g;

	if (!command_line("pyenv root 2>/dev/null", root, sizeof(root)))
		snprintf(root, sizeof(root), "%.64s/.pyenv",
			 getenv("HOME") ? getenv("HOME") : "/root");
	snprintf(pat, sizeof(pat), "%s/versions/3.%d.*", root, in->minor);
	if (glob(pat, 0, NULL, &g) || !g.gl_pathc) {
		snprintf(in->why, sizeof(in->why), "no %s under %s/versions", in->what, root);
		return;
	}
	snprintf(in->exe, sizeof(in->exe), "%s/bin/python3.%d", g.gl_pathv[g.gl_pathc - 1],
		 in->minor);
	snprintf(in->lib, sizeof(in->lib), "%s/lib/libpython3.%d.so.1.0",
		 g.gl_pathv[g.gl_pathc - 1], in->minor);
	globfree(&g);
	if (access(in->exe, X_OK) || access(in->lib, R_OK)) {
		snprintf(in->why, sizeof(in->why), "%s or %s is missing", in->exe, in->lib);
		in->exe[0] = '\0';
	}
}

static void find_interps(void)
{
	snprintf(interps[0].exe, sizeof(interps[0].exe), "/usr/bin/python3.11");
	snprintf(interps[0].lib, sizeof(interps[0].lib), "/usr/bin/python3.11");
	for (size_t i = 1; i < (size_t)ARRAY_SIZE(interps); i++)
		find_pyenv(&interps[i]);
}

/* The interpreter of a test; skips it loudly when absent (Debian's must
 * be there). */
static struct interp *need(void **state)
{
	struct interp *in = *state;

	if (in == &interps[0] && access(in->exe, X_OK))
		fail_msg("%s is missing: the Debian 12 image has it (apt install python3.11)",
			 in->exe);
	if (!in->exe[0]) {
		print_message("skipped: %s\n", in->why);
		skip();
	}
	return in;
}

/* The file offset of ELF address vaddr in file, from readelf's PT_LOAD
 * lines; exec: executable segments only. */
static uint64_t readelf_offset(const char *file, uint64_t vaddr, bool exec)
{
	char cmd[PATH_MAX + 64], line[512];
	uint64_t off, va, pa, filesz, memsz, res = UINT64_MAX;
	FILE *p;

	snprintf(cmd, sizeof(cmd), "readelf -lW '%s'", file);
	p = popen(cmd, "r");
	assert_non_null(p);
	while (fgets(line, sizeof(line), p)) {
		if (sscanf(line,
			   " LOAD 0x%" SCNx64 " 0x%" SCNx64 " 0x%" SCNx64 " 0x%" SCNx64
			   " 0x%" SCNx64,
			   &off, &va, &pa, &filesz, &memsz) != 5)
			continue;
		if ((!exec || strstr(line, " E ")) && vaddr >= va && vaddr < va + filesz)
			res = vaddr - va + off;
	}
	pclose(p);
	if (res == UINT64_MAX)
		fail_msg("readelf finds no segment of %s holding %#" PRIx64, file, vaddr);
	return res;
}

/* The size nm gives a dynamic symbol. */
static uint64_t nm_size(const char *file, const char *sym)
{
	char cmd[PATH_MAX + 64], line[512], name[256], type;
	uint64_t v, size = 0;
	FILE *p;

	snprintf(cmd, sizeof(cmd), "nm -DS '%s' 2>/dev/null", file);
	p = popen(cmd, "r");
	assert_non_null(p);
	while (fgets(line, sizeof(line), p)) {
		uint64_t s;

		if (sscanf(line, "%" SCNx64 " %" SCNx64 " %c %255s", &v, &s, &type, name) == 4 &&
		    !strcmp(name, sym))
			size = s;
	}
	pclose(p);
	if (!size)
		fail_msg("nm gives no size for %s in %s", sym, file);
	return size;
}

/* The eval range of in that holds file offset off, or -1. */
static int range_of(const struct py_interp *in, uint64_t off)
{
	for (int i = 0; i < in->neval; i++)
		if (off >= in->eval_start[i] && off < in->eval_end[i])
			return i;
	return -1;
}

/* ---- py_inspect_file ---- */

/* The layouts expected: unwinding.md section 2 for 3.11-3.13 (3.13's as
 * its _Py_DebugOffsets say), DWARF of pyenv's 3.10.13 for 3.10. */
static const struct unw_py_layout want_layouts[] = {
	{UNW_PY_NO_CFRAME,
	 24,
	 32,
	 24,
	 96,
	 0,
	 0,
	 0x310,
	 UNW_PY_ENTRY_ONE,
	 UNW_PY_INSTR_INDEX,
	 10,
	 {0}},
	{0x38, 8, 32, 48, 56, 68, 184, 0x310, UNW_PY_ENTRY_FLAG, UNW_PY_INSTR_PTR, 11, {0}},
	{0x38, 0, 0, 8, 56, 70, 192, 0x310, UNW_PY_ENTRY_SHIM, UNW_PY_INSTR_PTR, 12, {0}},
	{UNW_PY_NO_CFRAME,
	 0x48,
	 0,
	 8,
	 0x38,
	 0x46,
	 0xc8,
	 0x310,
	 UNW_PY_ENTRY_SHIM,
	 UNW_PY_INSTR_PTR,
	 13,
	 {0}},
};
/* _PyRuntime -> autoTSSkey._key, same sources. */
static const uint64_t want_tss[] = {0x24c, 0x254, 0x60c, 0x874};

static void test_inspect(void **state)
{
	struct interp *t = need(state);
	const struct unw_py_layout *l;
	uint64_t eval, size, off;
	struct py_interp in;
	char err[256], bid[128];
	int r;

	assert_int_equal(py_inspect_file(t->lib, &in, err, sizeof(err)), 0);
	print_message("%s: %d.%d, %d eval ranges, first %#" PRIx64 "..%#" PRIx64 "\n", t->what,
		      in.major, in.minor, in.neval, in.eval_start[0], in.eval_end[0]);
	assert_int_equal(in.major, 3);
	assert_int_equal(in.minor, t->minor);
	/* The hot part: the symbol's whole function, at its file offset. */
	eval = nm_value(t->lib, true, "_PyEval_EvalFrameDefault");
	size = nm_size(t->lib, "_PyEval_EvalFrameDefault");
	off = readelf_offset(t->lib, eval, true);
	r = range_of(&in, off);
	assert_int_equal(r, 0);
	assert_int_equal(in.eval_start[0], off);
	assert_int_equal(in.eval_end[0] - in.eval_start[0], size);
	assert_int_equal(in.text_delta, eval - off);
	assert_true(in.neval >= 1 && in.neval <= UNW_PY_EVAL_RANGES);
	assert_int_equal(in.runtime_addr, nm_value(t->lib, true, "_PyRuntime"));
	assert_int_equal(in.tss_key_addr, in.runtime_addr + want_tss[t->minor - 10]);
	l = &want_layouts[t->minor - 10];
	assert_memory_equal(&in.layout, l, sizeof(*l));
	if (t != &interps[0])
		return;
	/* Debian's cold part: the whole FDE, as a second range. */
	readelf_build_id(t->lib, bid, sizeof(bid));
	if (strcmp(bid, DEBIAN_BUILD_ID)) {
		print_message("skipped the cold part check: %s is build %s, not %s\n", t->lib, bid,
			      DEBIAN_BUILD_ID);
		return;
	}
	assert_int_equal(in.neval, 2);
	assert_int_equal(in.eval_start[1], readelf_offset(t->lib, DEBIAN_COLD_LO, true));
	assert_int_equal(in.eval_end[1], readelf_offset(t->lib, DEBIAN_COLD_HI - 1, true) + 1);
}

/* Files that are no interpreter, or none we know. */
static void test_inspect_refuses(void **state)
{
	char dir[] = "/tmp/sonde-py-XXXXXX", path[128], err[256];
	struct py_interp in;
	FILE *f;

	assert_int_equal(py_inspect_file("/nonexistent/python3", &in, err, sizeof(err)), -ENOENT);
	assert_true(err[0]);
	assert_int_equal(py_inspect_file("/etc/passwd", &in, err, sizeof(err)), -ENOEXEC);
	assert_int_equal(py_inspect_file("/bin/true", &in, err, sizeof(err)), -ENODATA);
	assert_non_null(strstr(err, "/bin/true"));
	/* A truncated interpreter: its header and little else. */
	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/python3.11", dir);
	{
		char cmd[PATH_MAX];

		snprintf(cmd, sizeof(cmd), "head -c 65536 /usr/bin/python3.11 > %s", path);
		assert_int_equal(system(cmd), 0);
	}
	assert_true(py_inspect_file(path, &in, err, sizeof(err)) < 0);
	assert_true(err[0]);
	/* An empty file. */
	f = fopen(path, "w");
	assert_non_null(f);
	fclose(f);
	assert_int_equal(py_inspect_file(path, &in, err, sizeof(err)), -ENOEXEC);
	unlink(path);
	rmdir(dir);
	/* An older Python, where pyenv has one. */
	{
		char root[PATH_MAX] = "", pat[PATH_MAX + 64];
		glob_t g;

		if (!command_line("pyenv root 2>/dev/null", root, sizeof(root)))
			snprintf(root, sizeof(root), "/root/.pyenv");
		snprintf(pat, sizeof(pat), "%s/versions/3.9.*/lib/libpython3.9.so.1.0", root);
		if (glob(pat, 0, NULL, &g) || !g.gl_pathc) {
			print_message("skipped the 3.9 check: no %s\n", pat);
			return;
		}
		assert_int_equal(py_inspect_file(g.gl_pathv[0], &in, err, sizeof(err)), -ENOTSUP);
		globfree(&g);
	}
}

/* ---- A live interpreter ---- */

static void hex_decode(const char *hex, uint8_t *out, size_t cap, size_t *n)
{
	*n = 0;
	if (!strcmp(hex, "-"))
		return;
	while (hex[0] && hex[1] && *n < cap) {
		unsigned b;

		assert_int_equal(sscanf(hex, "%2x", &b), 1);
		out[(*n)++] = (uint8_t)b;
		hex += 2;
	}
	assert_int_equal(hex[0], '\0');
}

/* One line the script printed. */
static void parse_line(struct run *r, char *line)
{
	char kind[8], rest[8200];
	uint64_t id;

	line[strcspn(line, "\n")] = '\0';
	if (sscanf(line, "%7s %" SCNu64 " %8191[^\n]", kind, &id, rest) != 3)
		return;
	if (!strcmp(kind, "code") && r->ncode < MAX_CODES) {
		struct code_rec *c = &r->code[r->ncode++];

		c->id = id;
		assert_int_equal(sscanf(rest, "%d %127s", &c->firstlineno, c->name), 2);
	} else if (!strcmp(kind, "table")) {
		assert_true(r->ncode > 0 && r->code[r->ncode - 1].id == id);
		hex_decode(rest, r->code[r->ncode - 1].table, sizeof(r->code[0].table),
			   &r->code[r->ncode - 1].table_len);
	} else if (!strcmp(kind, "line") && r->nline < MAX_LINES) {
		struct line_rec *l = &r->line[r->nline++];

		l->id = id;
		assert_int_equal(sscanf(rest, "%u %u %d", &l->first, &l->last, &l->line), 3);
	} else if (!strcmp(kind, "call") && r->ncall < MAX_CALLS) {
		struct call_rec *c = &r->call[r->ncall++];

		c->id = id;
		assert_int_equal(sscanf(rest, "%u %u", &c->at, &c->len), 2);
	} else if (!strcmp(kind, "other")) {
		r->other[0] = id;
		assert_int_equal(sscanf(rest, "%" SCNu64, &r->other[1]), 1);
	}
}

/* Starts t's python on the script and reads what it prints up to "ready". */
static void start(const struct interp *t, struct run *r)
{
	int in[2], out[2];
	char line[8400];
	bool ready = false;
	FILE *f;

	memset(r, 0, sizeof(*r));
	snprintf(r->dir, sizeof(r->dir), "/tmp/sonde-py-XXXXXX");
	assert_non_null(mkdtemp(r->dir));
	snprintf(r->path, sizeof(r->path), "%s/prog.py", r->dir);
	f = fopen(r->path, "w");
	assert_non_null(f);
	assert_int_equal(fputs(script, f) >= 0, 1);
	assert_int_equal(fclose(f), 0);
	assert_int_equal(pipe(in), 0);
	assert_int_equal(pipe(out), 0);
	r->pid = fork();
	assert_true(r->pid >= 0);
	if (!r->pid) {
		dup2(in[0], 0);
		dup2(out[1], 1);
		close(in[1]);
		close(out[0]);
		execl(t->exe, t->exe, "-I", r->path, (char *)NULL);
		_exit(127);
	}
	close(in[0]);
	close(out[1]);
	r->stdin_fd = in[1];
	f = fdopen(out[0], "r");
	assert_non_null(f);
	while (!ready && fgets(line, sizeof(line), f)) {
		ready = !strcmp(line, "ready\n");
		parse_line(r, line);
	}
	fclose(f);
	if (!ready)
		fail_msg("%s on %s exited before it was ready", t->exe, r->path);
	assert_int_equal(r->ncode, 8);
}

static void stop(struct run *r)
{
	int status;

	close(r->stdin_fd);
	kill(r->pid, SIGKILL);
	assert_int_equal(waitpid(r->pid, &status, 0), r->pid);
	unlink(r->path);
	rmdir(r->dir);
}

/* Waits (10 s at most) until the script's main thread blocks reading its
 * stdin: then it is in leaf(). */
static void wait_blocked(pid_t pid)
{
	char path[64], buf[128];

	snprintf(path, sizeof(path), "/proc/%d/syscall", (int)pid);
	for (int i = 0; i < 1000; i++) {
		FILE *f = fopen(path, "r");
		bool blocked = f && fgets(buf, sizeof(buf), f) && !strncmp(buf, "0 0x0 ", 6);

		if (f)
			fclose(f);
		if (blocked)
			return;
		sleep_ms(10);
	}
	fail_msg("pid %d never blocked reading stdin", (int)pid);
}

/* The line of the script that holds marker. */
static int script_line(const char *marker)
{
	const char *at = strstr(script, marker);
	int line = 1;

	assert_non_null(at);
	for (const char *p = script; p < at; p++)
		line += *p == '\n';
	return line;
}

static const struct code_rec *code_named(const struct run *r, const char *name)
{
	for (size_t i = 0; i < r->ncode; i++)
		if (!strcmp(r->code[i].name, name))
			return &r->code[i];
	fail_msg("the script printed no code object %s", name);
	return NULL;
}

/* Every code object and every range co_lines() gave: name, file, first
 * line and line through the process, and the line through the printed
 * table. */
static void check_codes(const struct interp *t, const struct run *r, const struct py_interp *in)
{
	assert_true(r->nline >= 20);
	for (size_t i = 0; i < r->nline; i++) {
		const struct line_rec *l = &r->line[i];
		const struct code_rec *c = NULL;
		struct py_code_info ci;

		for (size_t k = 0; k < r->ncode; k++)
			if (r->code[k].id == l->id)
				c = &r->code[k];
		assert_non_null(c);
		for (uint32_t instr = l->first; instr <= l->last; instr++) {
			assert_int_equal(py_code_read(r->pid, c->id, instr, &in->layout, &ci), 0);
			assert_string_equal(ci.qualname, c->name);
			assert_string_equal(ci.filename, r->path);
			assert_int_equal(ci.firstlineno, c->firstlineno);
			if (ci.line != l->line)
				fail_msg("%s: %s instruction %u: line %d, co_lines() says %d",
					 t->what, c->name, instr, ci.line, l->line);
			assert_int_equal(
				py_line_of(t->minor, c->table, c->table_len, c->firstlineno, instr),
				l->line);
		}
	}
}

/* ---- Walking the frames, as the BPF unwinder does ---- */

struct pyframe {
	uint64_t code;
	uint32_t instr;
};

static uint64_t peek(pid_t pid, uint64_t addr, size_t n)
{
	uint64_t v = 0;
	struct iovec local = {&v, n}, remote = {(void *)(uintptr_t)addr, n};

	if (process_vm_readv(pid, &local, 1, &remote, 1, 0) != (ssize_t)n)
		fail_msg("can't read %zu bytes at %#" PRIx64 " of pid %d", n, addr, (int)pid);
	return v;
}

/* The thread pointer (fs base) of pid's main thread, stopping it a moment
 * with ptrace. */
static uint64_t thread_pointer(pid_t pid)
{
	struct user_regs_struct regs;
	int status;

	assert_int_equal(ptrace(PTRACE_SEIZE, pid, 0, 0), 0);
	assert_int_equal(ptrace(PTRACE_INTERRUPT, pid, 0, 0), 0);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFSTOPPED(status));
	assert_int_equal(ptrace(PTRACE_GETREGS, pid, 0, &regs), 0);
	assert_int_equal(ptrace(PTRACE_DETACH, pid, 0, 0), 0);
	return regs.fs_base;
}

struct bias_ctx {
	const char *file;
	uint64_t bias;
	bool found;
};

static int bias_of_map(const struct maps_line *m, void *ctx)
{
	struct bias_ctx *b = ctx;
	char real[PATH_MAX];

	if (!m->pgoff && realpath(b->file, real) && !strcmp(real, m->path)) {
		b->bias = m->start;
		b->found = true;
		return 1;
	}
	return 0;
}

/* Where file is loaded in pid: the load bias, the start of its mapping
 * at offset 0 less its first segment's address (0 for a non-PIE
 * executable), from readelf. */
static uint64_t load_bias(pid_t pid, const char *file)
{
	struct bias_ctx b = {file, 0, false};
	char cmd[PATH_MAX + 64], line[512];
	uint64_t off, va = UINT64_MAX;
	FILE *p;

	maps__each_file((uint32_t)pid, bias_of_map, &b);
	if (!b.found)
		fail_msg("%s is not mapped in pid %d", file, (int)pid);
	snprintf(cmd, sizeof(cmd), "readelf -lW '%s'", file);
	p = popen(cmd, "r");
	assert_non_null(p);
	while (va == UINT64_MAX && fgets(line, sizeof(line), p))
		if (sscanf(line, " LOAD 0x%" SCNx64 " 0x%" SCNx64, &off, &va) != 2)
			va = UINT64_MAX;
	pclose(p);
	assert_true(va != UINT64_MAX);
	return b.bias - (va & ~0xfffull);
}

/* The thread's Python frames, innermost first, with the layout: thread
 * pointer -> pthread key's slot -> thread state -> (cframe ->) frame ->
 * previous ...; 3.12+'s shim frames skipped (counted in *shims), 3.11's
 * entry flags in *entries (a bit per frame). */
static size_t walk(pid_t pid, const struct py_interp *in, uint64_t bias, struct pyframe *out,
		   size_t max, int *shims, unsigned *entries)
{
	const struct unw_py_layout *l = &in->layout;
	uint64_t tp = thread_pointer(pid), key, ts, fr;
	size_t n = 0;

	key = peek(pid, in->tss_key_addr + bias, 4);
	assert_true(key < 32);
	ts = peek(pid, tp + l->tsd_offset + 16 * key + 8, 8);
	assert_true(ts != 0);
	if (l->tstate_cframe != UNW_PY_NO_CFRAME)
		fr = peek(pid, peek(pid, ts + l->tstate_cframe, 8) + l->cframe_frame, 8);
	else
		fr = peek(pid, ts + l->cframe_frame, 8);
	*shims = 0;
	*entries = 0;
	for (int guard = 0; fr && n < max && guard < 64; guard++) {
		uint64_t code = peek(pid, fr + l->frame_code, 8);
		uint8_t entry =
			l->entry_kind == UNW_PY_ENTRY_ONE ? 0 : peek(pid, fr + l->frame_entry, 1);

		if (l->entry_kind == UNW_PY_ENTRY_SHIM && entry == 3) {
			(*shims)++;
		} else {
			if (l->instr_kind == UNW_PY_INSTR_INDEX)
				out[n].instr = (uint32_t)peek(pid, fr + l->frame_instr, 4);
			else
				out[n].instr = (uint32_t)((peek(pid, fr + l->frame_instr, 8) -
							   code - l->code_adaptive) /
							  2);
			out[n].code = code;
			if (l->entry_kind == UNW_PY_ENTRY_FLAG && entry)
				*entries |= 1u << n;
			n++;
		}
		fr = peek(pid, fr + l->frame_previous, 8);
	}
	return n;
}

/* Where instr sits against the CALL of code that holds it: "at the CALL",
 * "in its caches (+k)", for the report. */
static const char *call_pos(const struct run *r, const struct pyframe *f, char *buf, size_t size)
{
	for (size_t i = 0; i < r->ncall; i++) {
		const struct call_rec *c = &r->call[i];

		if (c->id != f->code || f->instr < c->at || f->instr >= c->at + c->len)
			continue;
		if (f->instr == c->at)
			snprintf(buf, size, "at its CALL (%u)", c->at);
		else
			snprintf(buf, size, "at its CALL %u + %u (its caches, %u long)", c->at,
				 f->instr - c->at, c->len);
		return buf;
	}
	snprintf(buf, size, "at %u, in no CALL", f->instr);
	return buf;
}

/* The stack the script blocks in: leaf <- Outer.method <- <module>, each
 * at the line of its call. */
static void check_walk(const struct interp *t, const struct run *r, const struct py_interp *in)
{
	const char *names[3] = {"leaf", t->minor == 10 ? "method" : "Outer.method", "<module>"};
	const int lines[3] = {script_line("# call-readline"), script_line("# call-leaf"),
			      script_line("# call-method")};
	struct pyframe fr[16];
	struct py_code_info ci;
	unsigned entries;
	char pos[96];
	int shims;
	size_t n;

	wait_blocked(r->pid);
	n = walk(r->pid, in, load_bias(r->pid, t->lib), fr, 16, &shims, &entries);
	assert_int_equal(n, 3);
	for (size_t i = 0; i < n; i++) {
		assert_int_equal(fr[i].code, code_named(r, names[i])->id);
		assert_int_equal(py_code_read(r->pid, fr[i].code, fr[i].instr, &in->layout, &ci),
				 0);
		assert_string_equal(ci.qualname, names[i]);
		print_message("%s: %s's frame: instruction %s, line %d\n", t->what, names[i],
			      call_pos(r, &fr[i], pos, sizeof(pos)), ci.line);
		if (ci.line != lines[i])
			fail_msg("%s: %s's frame is at line %d, not %d", t->what, names[i], ci.line,
				 lines[i]);
	}
	/* 3.11: one interpreter loop runs the three, the outermost flagged;
	 * 3.12+: the run ends at one shim frame. */
	if (in->layout.entry_kind == UNW_PY_ENTRY_FLAG)
		assert_int_equal(entries, 1u << 2);
	if (in->layout.entry_kind == UNW_PY_ENTRY_SHIM)
		assert_int_equal(shims, 1);
}

/* What isn't a code object, and a process that is gone. */
static void check_errors(struct run *r, const struct py_interp *in)
{
	struct py_code_info ci;

	assert_int_equal(py_code_read(r->pid, r->other[0], 0, &in->layout, &ci), -EINVAL);
	assert_int_equal(py_code_read(r->pid, r->other[1], 0, &in->layout, &ci), -EINVAL);
	assert_int_equal(py_code_read(r->pid, 8, 0, &in->layout, &ci), -EFAULT);
	assert_int_equal(py_code_read(r->pid, r->code[0].id + 1, 0, &in->layout, &ci), -EINVAL);
	/* An instruction past the code's end: no line, the rest read. */
	assert_int_equal(py_code_read(r->pid, r->code[0].id, UNW_PY_INSTR_MAX, &in->layout, &ci),
			 0);
	assert_int_equal(ci.line, 0);
	assert_string_equal(ci.qualname, r->code[0].name);
	stop(r);
	assert_int_equal(py_code_read(r->pid, r->code[0].id, 0, &in->layout, &ci), -ESRCH);
}

static void test_live(void **state)
{
	struct interp *t = need(state);
	struct py_interp in;
	struct run *r = calloc(1, sizeof(*r));
	char err[256];

	assert_non_null(r);
	assert_int_equal(py_inspect_file(t->lib, &in, err, sizeof(err)), 0);
	start(t, r);
	check_codes(t, r, &in);
	/* Names that are not ASCII were read (and compared above). */
	code_named(r, "\xc3\xa9"
		      "t"
		      "\xc3\xa9");
	code_named(r, "\xe5\x87\xbd\xe6\x95\xb0");
	code_named(r, "\xf0\xa0\x80\x80"
		      "x");
	check_walk(t, r, &in);
	check_errors(r, &in);
	free(r);
}

/* A frame whose code object can't be read any more (its process gone, or
 * a module's body freed once it has run) keeps the name an earlier frame
 * of the same code object had, its line unknown; one never read stays
 * unnamed. */
static void test_names_gone(void **state)
{
	struct interp *t = need(state);
	struct py_names *pn = py_names__new();
	struct run *r = calloc(1, sizeof(*r));
	const struct py_name *n;
	uint64_t a, b, c;

	assert_non_null(r);
	start(t, r);
	a = UNW_PY_FRAME | r->code[0].id;
	b = UNW_PY_FRAME | 2ull << UNW_PY_ADDR_BITS | r->code[0].id;
	c = UNW_PY_FRAME | r->code[1].id;
	assert_int_equal(py_names__load(pn, (uint32_t)r->pid, a), 0);
	n = py_names__get(pn, (uint32_t)r->pid, a);
	assert_non_null(n);
	assert_non_null(strstr(n->name, r->code[0].name));
	stop(r);
	assert_int_equal(py_names__load(pn, (uint32_t)r->pid, b), 0);
	n = py_names__get(pn, (uint32_t)r->pid, b);
	assert_non_null(n);
	assert_non_null(strstr(n->name, r->code[0].name));
	assert_int_equal(n->line, 0);
	assert_int_equal(py_names__load(pn, (uint32_t)r->pid, c), -ESRCH);
	assert_null(py_names__get(pn, (uint32_t)r->pid, c));
	py_names__free(pn);
	free(r);
}

/* ---- Hand-made tables ---- */

static void test_line_310(void **state)
{
	/* Bytes 0-5 at +1 line, 6-9 no line, 10-19 at -2 (two pairs: the
	 * second only moves the line), then 20-21 at +0. */
	static const uint8_t t[] = {6, 1, 4, 0x80, 0, 0xfe, 10, 0, 2, 0};

	assert_int_equal(py_line_of(10, t, sizeof(t), 10, 0), 11);
	assert_int_equal(py_line_of(10, t, sizeof(t), 10, 2), 11);
	assert_int_equal(py_line_of(10, t, sizeof(t), 10, 3), 0);
	assert_int_equal(py_line_of(10, t, sizeof(t), 10, 4), 0);
	assert_int_equal(py_line_of(10, t, sizeof(t), 10, 5), 9);
	assert_int_equal(py_line_of(10, t, sizeof(t), 10, 9), 9);
	assert_int_equal(py_line_of(10, t, sizeof(t), 10, 10), 9);
	assert_int_equal(py_line_of(10, t, sizeof(t), 10, 11), 0);
	/* An odd byte at the end is no pair. */
	assert_int_equal(py_line_of(10, t, 3, 10, 3), 0);
	assert_int_equal(py_line_of(10, t, 0, 10, 0), 0);
	assert_int_equal(py_line_of(10, NULL, 5, 10, 0), 0);
}

static void test_line_311(void **state)
{
	static const uint8_t t[] = {
		0x80 | 10 << 3 | 0, /* 1 unit, one-line form, +0 */
		5,
		6,		    /* columns */
		0x80 | 11 << 3 | 2, /* 3 units, +1 */
		1,
		2,		    /* columns */
		0x80 | 15 << 3 | 1, /* 2 units, no location */
		0x80 | 13 << 3 | 0,
		0x45,
		0x01, /* 1 unit, no columns, -(0x45&63 | 1<<6)/2 */
		0x80 | 14 << 3 | 1,
		0x0a,
		0,
		1,
		2,		   /* 2 units, long form, +5 */
		0x80 | 3 << 3 | 7, /* 8 units, short form, +0 */
		0x12,
	};
	const int first = 100;

	assert_int_equal(py_line_of(11, t, sizeof(t), first, 0), 100);
	for (uint32_t i = 1; i <= 3; i++)
		assert_int_equal(py_line_of(12, t, sizeof(t), first, i), 101);
	assert_int_equal(py_line_of(13, t, sizeof(t), first, 4), 0);
	assert_int_equal(py_line_of(13, t, sizeof(t), first, 5), 0);
	/* 0x45, 0x01: 5 | 1 << 6 = 69, odd: -34. */
	assert_int_equal(py_line_of(11, t, sizeof(t), first, 6), 67);
	assert_int_equal(py_line_of(11, t, sizeof(t), first, 7), 72);
	assert_int_equal(py_line_of(11, t, sizeof(t), first, 8), 72);
	assert_int_equal(py_line_of(11, t, sizeof(t), first, 9), 72);
	assert_int_equal(py_line_of(11, t, sizeof(t), first, 16), 72);
	assert_int_equal(py_line_of(11, t, sizeof(t), first, 17), 0);
	/* Cut inside a varint: the line from what is there, no read past. */
	assert_int_equal(py_line_of(11, t, 9, first, 6), 99);
	/* A line below 1 is unknown; versions we don't know give 0. */
	assert_int_equal(py_line_of(11, t, sizeof(t), -200, 0), 0);
	assert_int_equal(py_line_of(9, t, sizeof(t), first, 0), 0);
	assert_int_equal(py_line_of(14, t, sizeof(t), first, 0), 0);
}

static void test_frame_name(void **state)
{
	char buf[256];

	assert_string_equal(py_frame_name("Trainer.step",
					  "/venv/lib/python3.11/site-packages/torch/nn/module.py",
					  "/home/u/proj", buf, sizeof(buf)),
			    "Trainer.step (torch/nn/module.py)");
	/* The last one counts. */
	assert_string_equal(
		py_frame_name("f", "/a/site-packages/b/dist-packages/c.py", NULL, buf, sizeof(buf)),
		"f (c.py)");
	assert_string_equal(py_frame_name("main", "/home/u/proj/tools/run.py", "/home/u/proj/", buf,
					  sizeof(buf)),
			    "main (tools/run.py)");
	assert_string_equal(
		py_frame_name("main", "/home/u/proj/run.py", "/home/u/proj", buf, sizeof(buf)),
		"main (run.py)");
	/* A sibling directory with the same prefix is not below it. */
	assert_string_equal(
		py_frame_name("g", "/home/u/project2/x.py", "/home/u/proj", buf, sizeof(buf)),
		"g (/home/u/project2/x.py)");
	assert_string_equal(
		py_frame_name("<module>", "<frozen runpy>", "/home/u", buf, sizeof(buf)),
		"<module> (<frozen runpy>)");
	assert_string_equal(
		py_frame_name("h", "/usr/lib/python3.11/json/decoder.py", NULL, buf, sizeof(buf)),
		"h (/usr/lib/python3.11/json/decoder.py)");
	/* Nothing after the directory: kept whole. */
	assert_string_equal(py_frame_name("k", "/x/site-packages/", NULL, buf, sizeof(buf)),
			    "k (/x/site-packages/)");
	/* Cut to fit. */
	assert_string_equal(py_frame_name("abcdef", "/a.py", NULL, buf, 8), "abcdef ");
}

/* A test of one interpreter, named after both. */
#define PY_TEST(fn, i, what)                                                                       \
	{                                                                                          \
#fn "_" what, fn, NULL, NULL, &interps[i]                                          \
	}

int main(void)
{
	const struct CMUnitTest tests[] = {
		PY_TEST(test_inspect, 0, "debian_3_11"),
		PY_TEST(test_inspect, 1, "pyenv_3_10"),
		PY_TEST(test_inspect, 2, "pyenv_3_11"),
		PY_TEST(test_inspect, 3, "pyenv_3_12"),
		PY_TEST(test_inspect, 4, "pyenv_3_13"),
		cmocka_unit_test(test_inspect_refuses),
		PY_TEST(test_live, 0, "debian_3_11"),
		PY_TEST(test_live, 1, "pyenv_3_10"),
		PY_TEST(test_live, 2, "pyenv_3_11"),
		PY_TEST(test_live, 3, "pyenv_3_12"),
		PY_TEST(test_live, 4, "pyenv_3_13"),
		PY_TEST(test_names_gone, 0, "debian_3_11"),
		PY_TEST(test_names_gone, 3, "pyenv_3_12"),
		cmocka_unit_test(test_line_310),
		cmocka_unit_test(test_line_311),
		cmocka_unit_test(test_frame_name),
	};

	find_interps();
	/* A child that never prints "ready" would hang the test: a minute
	 * is plenty for all of them. */
	alarm(120);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
