/* test_unwind_table.c: unit tests of src/unwind/table.c, the unwind-table
 * builder. Expected rules come from binutils, not from libdw: every row that
 * `readelf -wF` decodes from a file's CFI is looked up in our table (libc,
 * libstdc++, python3.11 and programs compiled here), and the places checked
 * by hand -- a function's entry, its `push %rbp` and `mov %rsp,%rbp` as
 * objdump disassembles them, the ELF entry point, the PLT, the signal
 * trampoline's FDE -- are found with readelf, nm and objdump. A test
 * program is built at run time with gcc (C at -O2, with and without frame
 * pointers, and assembly with hand-written CFI for the rarer kinds), also
 * with its CFI in .debug_frame only, compressed or not. Corrupted and
 * truncated copies of real files must give an error or a valid table.
 * Overlapping FDEs and pointer encodings, which no file here has, are fed
 * to table.c's static functions directly. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include <ctype.h>
#include <gelf.h>
#include <libelf.h>

/* The code under test, for its static functions. */
#include "unwind/table.c"

#define LIBC "/lib/x86_64-linux-gnu/libc.so.6"
#define LIBSTDCXX "/usr/lib/x86_64-linux-gnu/libstdc++.so.6"
#define PYTHON "/usr/bin/python3.11"
#define MAX_ROWS (8u << 20)

static char tmpdir[64];

/* ---- Helpers: commands, files, ELF facts from binutils ---- */

/* The path of name in the test's temporary directory (a static buffer:
 * one call per expression). */
static const char *tmp_path(const char *name)
{
	static char bufs[4][256];
	static int next;
	char *p = bufs[next++ % 4];

	snprintf(p, sizeof(bufs[0]), "%s/%s", tmpdir, name);
	return p;
}

static void run(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Runs a shell command that must succeed. */
static void run(const char *fmt, ...)
{
	char cmd[2048];
	va_list ap;
	int rc;

	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	rc = system(cmd);
	if (rc != 0)
		fail_msg("command failed (%d): %s", rc, cmd);
}

static FILE *run_read(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* The output of a shell command. */
static FILE *run_read(const char *fmt, ...)
{
	char cmd[2048];
	va_list ap;
	FILE *f;

	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	f = popen(cmd, "r");
	if (!f)
		fail_msg("can't run %s", cmd);
	return f;
}

static void write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	assert_non_null(f);
	assert_int_equal(fputs(text, f) >= 0, 1);
	assert_int_equal(fclose(f), 0);
}

static void *read_whole(const char *path, size_t *size)
{
	FILE *f = fopen(path, "rb");
	char *buf;
	long n;

	assert_non_null(f);
	assert_int_equal(fseek(f, 0, SEEK_END), 0);
	n = ftell(f);
	assert_true(n > 0);
	rewind(f);
	buf = malloc((size_t)n);
	assert_non_null(buf);
	assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
	fclose(f);
	*size = (size_t)n;
	return buf;
}

/* Skips the test, loudly, if path is absent. */
#define REQUIRE_FILE(path)                                                                         \
	do {                                                                                       \
		if (access((path), R_OK)) {                                                        \
			print_message("SKIP %s: %s is absent\n", __func__, (path));                \
			skip();                                                                    \
		}                                                                                  \
	} while (0)

/* The executable PT_LOAD segments of a file and its entry, by readelf. */
struct facts {
	struct {
		uint64_t off, vaddr, filesz;
	} segs[16];
	size_t n;
	uint64_t entry;
};

static void read_facts(const char *path, struct facts *fc)
{
	FILE *f = run_read("readelf -hlW '%s'", path);
	char line[512], flags[16];
	unsigned long long off, vaddr, paddr, filesz, memsz;

	memset(fc, 0, sizeof(*fc));
	while (fgets(line, sizeof(line), f)) {
		if (sscanf(line, " Entry point address: %llx", &off) == 1)
			fc->entry = off;
		if (sscanf(line, " LOAD %llx %llx %llx %llx %llx %15[RWE ]", &off, &vaddr, &paddr,
			   &filesz, &memsz, flags) == 6 &&
		    strchr(flags, 'E') && fc->n < 16) {
			fc->segs[fc->n].off = off;
			fc->segs[fc->n].vaddr = vaddr;
			fc->segs[fc->n].filesz = filesz;
			fc->n++;
		}
	}
	pclose(f);
	assert_true(fc->n > 0);
}

/* The file offset of address vaddr of an executable segment. */
static bool to_off(const struct facts *fc, uint64_t vaddr, uint32_t *off)
{
	for (size_t i = 0; i < fc->n; i++) {
		if (fc->segs[i].vaddr <= vaddr && vaddr < fc->segs[i].vaddr + fc->segs[i].filesz) {
			*off = (uint32_t)(vaddr - fc->segs[i].vaddr + fc->segs[i].off);
			return true;
		}
	}
	return false;
}

/* The value of symbol sym of a file, by nm. */
static uint64_t nm_value(const char *path, const char *sym)
{
	FILE *f = run_read("nm '%s' | awk '$3 == \"%s\" { print $1 }'", path, sym);
	unsigned long long v = 0;

	if (fscanf(f, "%llx", &v) != 1)
		fail_msg("nm finds no %s in %s", sym, path);
	pclose(f);
	return v;
}

/* The address of section name of a file, by readelf; 0 if absent. */
static uint64_t section_addr(const char *path, const char *name)
{
	FILE *f = run_read("readelf -SW '%s' | sed 's/^ *\\[ *[0-9]*\\]//' | awk '$1 == \"%s\" "
			   "{ print $3 }'",
			   path, name);
	unsigned long long v = 0;

	if (fscanf(f, "%llx", &v) != 1)
		v = 0;
	pclose(f);
	return v;
}

/* The file offset and size of section name, by readelf. */
static void section_span(const char *path, const char *name, size_t *off, size_t *size)
{
	FILE *f = run_read("readelf -SW '%s' | sed 's/^ *\\[ *[0-9]*\\]//' | awk '$1 == \"%s\" "
			   "{ print $4, $5 }'",
			   path, name);
	unsigned long long o, s;

	if (fscanf(f, "%llx %llx", &o, &s) != 2)
		fail_msg("readelf finds no %s in %s", name, path);
	pclose(f);
	*off = o;
	*size = s;
}

/* Builds the table of path, which must succeed, and checks it. */
static void build_ok(const char *path, struct unw_table *t);

/* Sorted, strictly increasing, known kinds, fields within their kind. */
static void check_invariants(const struct unw_table *t, size_t max_rows)
{
	assert_true(t->n <= max_rows);
	assert_int_equal(t->n, t->st.rows);
	for (size_t i = 0; i < t->n; i++) {
		const struct unw_row *r = &t->rows[i];

		if (i && r->off <= t->rows[i - 1].off)
			fail_msg("row %zu at %#x after %#x", i, r->off, t->rows[i - 1].off);
		assert_true(r->kind <= UNW_CFA_DEREF_RBP);
		if (r->kind != UNW_CFA_RSP && r->kind != UNW_CFA_RBP &&
		    r->kind != UNW_CFA_DEREF_RBP)
			assert_int_equal(r->rbp, 0);
		if (r->kind == UNW_PLT)
			assert_true(r->cfa >= 0 && r->cfa <= 15);
		else if (r->kind != UNW_CFA_RSP && r->kind != UNW_CFA_RBP &&
			 r->kind != UNW_CFA_DEREF_RBP)
			assert_int_equal(r->cfa, 0);
		/* Consecutive rows differ, or they would have been merged. */
		if (i && r->kind == t->rows[i - 1].kind && r->cfa == t->rows[i - 1].cfa)
			assert_true(r->rbp != t->rows[i - 1].rbp);
	}
}

static void build_ok(const char *path, struct unw_table *t)
{
	char err[512];
	int ret = unw_table__build_file(path, MAX_ROWS, t, err, sizeof(err));

	if (ret)
		fail_msg("build of %s: %d %s", path, ret, err);
	check_invariants(t, MAX_ROWS);
}

/* The row at file offset off, which must exist. */
static const struct unw_row *row_at(const struct unw_table *t, uint32_t off)
{
	const struct unw_row *r = unw_table__lookup(t, off);

	if (!r)
		fail_msg("no row at %#x", off);
	return r;
}

static void assert_row(const struct unw_table *t, uint32_t off, int kind, int cfa, int rbp)
{
	const struct unw_row *r = row_at(t, off);

	if (r->kind != kind || r->cfa != cfa || r->rbp != rbp)
		fail_msg("row at %#x (from %#x): kind %d cfa %d rbp %d, expected %d %d %d", off,
			 r->off, r->kind, r->cfa, r->rbp, kind, cfa, rbp);
}

/* ---- Cross-check with readelf -wF ---- */

/* The rule a CFI row decoded by readelf stands for: cfa "rsp+16", rbp
 * "c-16" (or "u", "s", ...), ra "c-8" or "u". */
struct xrule {
	int kind; /* -1: UNW_PLT, UNW_CFA_DEREF_RBP or UNW_INVALID (a CFA expression) */
	int cfa, rbp;
};

static struct xrule expected_rule(bool sig, const char *cfa, const char *rbp, const char *ra)
{
	struct xrule x = {UNW_INVALID, 0, 0};
	char reg[16];
	long n;

	if (sig)
		return (struct xrule){UNW_SIGNAL, 0, 0};
	if (!strcmp(ra, "u"))
		return (struct xrule){UNW_STOP, 0, 0};
	if (strcmp(ra, "c-8"))
		return x;
	if (!strcmp(cfa, "exp"))
		return (struct xrule){-1, 0, 0};
	if (sscanf(cfa, "%15[a-z0-9]%ld", reg, &n) != 2 || n % 8 || n / 8 < INT16_MIN ||
	    n / 8 > INT16_MAX || (strcmp(reg, "rsp") && strcmp(reg, "rbp")))
		return x;
	x.kind = strcmp(reg, "rsp") ? UNW_CFA_RBP : UNW_CFA_RSP;
	x.cfa = (int)(n / 8);
	if (sscanf(rbp, "c%ld", &n) == 1 && n && n % 8 == 0 && n / 8 >= INT8_MIN &&
	    n / 8 <= INT8_MAX)
		x.rbp = (int)(n / 8);
	return x;
}

struct xcheck {
	const struct unw_table *t;
	const struct facts *fc;
	uint64_t skip_lo, skip_hi; /* addresses not checked */
	size_t rows, mismatches, sig_fdes;
};

static void xcheck_row(struct xcheck *xc, uint64_t loc, struct xrule x)
{
	const struct unw_row *r;
	uint32_t off = 0;

	if (!to_off(xc->fc, loc, &off) || (xc->skip_lo <= loc && loc < xc->skip_hi))
		return;
	xc->rows++;
	r = unw_table__lookup(xc->t, off);
	if (r && (x.kind == -1 ? r->kind == UNW_PLT || r->kind == UNW_INVALID ||
					 r->kind == UNW_CFA_DEREF_RBP
			       : r->kind == x.kind && r->cfa == x.cfa && r->rbp == x.rbp))
		return;
	if (xc->mismatches++ < 5)
		print_message("mismatch at %#llx (offset %#x): readelf says kind %d cfa %d rbp %d, "
			      "table has %d %d %d\n",
			      (unsigned long long)loc, off, x.kind, x.cfa, x.rbp, r ? r->kind : -2,
			      r ? r->cfa : 0, r ? r->rbp : 0);
}

/* Splits a readelf row into columns; "r9 (r9)" is one. */
static int split_cols(char *line, char **cols, int max)
{
	int n = 0;

	for (char *tok = strtok(line, " \t\n"); tok; tok = strtok(NULL, " \t\n")) {
		if (tok[0] == '(' && n)
			continue;
		if (n < max)
			cols[n++] = tok;
	}
	return n;
}

/* A CIE's augmentation and last row, for the FDEs that show no row. */
struct xcie {
	unsigned long long off;
	bool sig;
	char cfa[32], rbp[32], ra[32];
};

struct xparse {
	struct xcie cies[4096];
	size_t ncies;
	struct xcie *cie; /* of the entry being read */
	bool in_fde, fde_rows, fde_sig;
	unsigned long long fde_lo, fde_hi;
	int col_cfa, col_rbp, col_ra;
};

static void xparse_end_entry(struct xparse *p, struct xcheck *xc)
{
	if (p->in_fde && !p->fde_rows && p->cie)
		xcheck_row(xc, p->fde_lo,
			   expected_rule(p->fde_sig, p->cie->cfa, p->cie->rbp, p->cie->ra));
	p->in_fde = false;
	p->cie = NULL;
}

static void xparse_header(struct xparse *p, char *line)
{
	char *cols[64];
	int n = split_cols(line, cols, 64);

	p->col_cfa = p->col_rbp = p->col_ra = -1;
	for (int i = 0; i < n; i++) {
		if (!strcmp(cols[i], "CFA"))
			p->col_cfa = i;
		else if (!strcmp(cols[i], "rbp"))
			p->col_rbp = i;
		else if (!strcmp(cols[i], "ra"))
			p->col_ra = i;
	}
}

static void xparse_row(struct xparse *p, struct xcheck *xc, char *line)
{
	char *cols[64];
	int n = split_cols(line, cols, 64);
	const char *cfa, *rbp, *ra;

	if (p->col_cfa < 0 || p->col_cfa >= n)
		return;
	cfa = cols[p->col_cfa];
	rbp = p->col_rbp >= 0 && p->col_rbp < n ? cols[p->col_rbp] : "u";
	ra = p->col_ra >= 0 && p->col_ra < n ? cols[p->col_ra] : "u";
	if (p->in_fde) {
		unsigned long long loc = strtoull(cols[0], NULL, 16);

		p->fde_rows = true;
		/* readelf shows a row the last advance starts at the FDE's end. */
		if (loc < p->fde_hi)
			xcheck_row(xc, loc, expected_rule(p->fde_sig, cfa, rbp, ra));
	} else if (p->cie) {
		snprintf(p->cie->cfa, sizeof(p->cie->cfa), "%s", cfa);
		snprintf(p->cie->rbp, sizeof(p->cie->rbp), "%s", rbp);
		snprintf(p->cie->ra, sizeof(p->cie->ra), "%s", ra);
	}
}

static void xparse_line(struct xparse *p, struct xcheck *xc, char *line)
{
	unsigned long long off, len, id, cie, lo, hi;
	const char *aug;

	if (sscanf(line, "%llx %llx %llx FDE cie=%llx pc=%llx..%llx", &off, &len, &id, &cie, &lo,
		   &hi) == 6) {
		xparse_end_entry(p, xc);
		p->in_fde = true;
		p->fde_rows = false;
		p->fde_lo = lo;
		p->fde_hi = hi;
		for (size_t i = 0; i < p->ncies; i++)
			if (p->cies[i].off == cie)
				p->cie = &p->cies[i];
		p->fde_sig = p->cie && p->cie->sig;
		xc->sig_fdes += p->fde_sig;
	} else if (sscanf(line, "%llx %llx %llx CIE", &off, &len, &id) == 3 &&
		   (aug = strstr(line, "CIE \"")) && p->ncies < 4096) {
		xparse_end_entry(p, xc);
		p->cie = &p->cies[p->ncies++];
		memset(p->cie, 0, sizeof(*p->cie));
		p->cie->off = off;
		aug += 5;
		p->cie->sig = memchr(aug, 'S', strcspn(aug, "\"")) != NULL;
	} else if (!strncmp(line, "   LOC", 6)) {
		xparse_header(p, line);
	} else if (isxdigit((unsigned char)line[0])) {
		xparse_row(p, xc, line);
	} else if (line[0] == '\n') {
		xparse_end_entry(p, xc);
	}
}

/* Looks every row readelf decodes from section (".eh_frame" or
 * ".debug_frame") of path up in t, but those of addresses in [skip_lo,
 * skip_hi); returns the rows checked. */
static size_t cross_check(const char *path, const char *section, const struct unw_table *t,
			  uint64_t skip_lo, uint64_t skip_hi, size_t *sig_fdes)
{
	struct facts fc;
	struct xcheck xc = {.t = t, .fc = &fc, .skip_lo = skip_lo, .skip_hi = skip_hi};
	struct xparse *p = calloc(1, sizeof(*p));
	FILE *f = run_read("readelf -wF '%s' 2>/dev/null", path);
	char line[4096], want[64];
	bool in = false;

	assert_non_null(p);
	read_facts(path, &fc);
	snprintf(want, sizeof(want), "Contents of the %s section", section);
	while (fgets(line, sizeof(line), f)) {
		if (!strncmp(line, "Contents of the ", 16)) {
			xparse_end_entry(p, &xc);
			p->ncies = 0;
			in = !strncmp(line, want, strlen(want));
		} else if (in) {
			xparse_line(p, &xc, line);
		}
	}
	xparse_end_entry(p, &xc);
	pclose(f);
	free(p);
	if (xc.mismatches)
		fail_msg("%s: %zu of %zu rows of readelf -wF differ from the table", path,
			 xc.mismatches, xc.rows);
	if (sig_fdes)
		*sig_fdes = xc.sig_fdes;
	return xc.rows;
}

/* ---- The test program ---- */

static const char prog_fp_c[] = "int sink(int);\n"
				"int fp_func(int x) { return sink(x) * 3 + sink(x + 1); }\n";

static const char prog_main_c[] =
	"#include <stdio.h>\n"
	"int fp_func(int);\n"
	"__attribute__((noinline)) int sink(int x) { __asm__ volatile(\"\" ::: \"memory\"); "
	"return x + 1; }\n"
	"int main(int argc, char **argv) { printf(\"%d\\n\", fp_func(argc)); return 0; }\n";

/* Functions with hand-written CFI, one per rarer kind. */
static const char prog_asm_S[] =
	"#ifdef DEBUG_FRAME\n"
	"	.cfi_sections .debug_frame\n"
	"#endif\n"
	"	.text\n"
	"#define FUNC(n) .globl n; .type n,@function; n:\n"
	"FUNC(stop_func)\n"
	"	.cfi_startproc\n"
	"	.cfi_undefined rip\n"
	"	nop\n"
	"	ret\n"
	"	.cfi_endproc\n"
	"FUNC(sig_func)\n"
	"	.cfi_startproc\n"
	"	.cfi_signal_frame\n"
	"	nop\n"
	"	ret\n"
	"	.cfi_endproc\n"
	"FUNC(plt_func)\n"
	"	.cfi_startproc\n"
	"	.cfi_escape 0x0f, 0x0b, 0x77, 0x08, 0x80, 0x00, 0x3f, 0x1a, "
	"0x3b, 0x2a, 0x33, 0x24, 0x22\n"
	"	nop\n"
	"	ret\n"
	"	.cfi_endproc\n"
	"FUNC(odd_func)\n"
	"	.cfi_startproc\n"
	"	push %rbp\n"
	"	.cfi_adjust_cfa_offset 8\n"
	"	.cfi_register rbp, rbx\n"
	"	nop\n"
	"	.cfi_def_cfa_offset 12\n"
	"	nop\n"
	"	.cfi_def_cfa rax, 8\n"
	"	pop %rbp\n"
	"	ret\n"
	"	.cfi_endproc\n"
	"	.section .note.GNU-stack,\"\",@progbits\n";

/* FDEs that would make libdw allocate without bound: a register numbered
 * near 2^27 (libdw grows a frame to 2 GB for it: 1 GB and 3.5 s here
 * without the check), remember_state 20 deep; and long_func, of 10001
 * rows, more than UNW_MAX_FDE_ROWS. */
static const char hostile_S[] = "	.text\n"
				"	.globl long_func\n"
				"long_func:\n"
				"	.cfi_startproc\n"
				"	.rept 5000\n"
				"	push %rax\n"
				"	.cfi_adjust_cfa_offset 8\n"
				"	.endr\n"
				"	.rept 5000\n"
				"	pop %rax\n"
				"	.cfi_adjust_cfa_offset -8\n"
				"	.endr\n"
				"	ret\n"
				"	.cfi_endproc\n"
				"	.globl main\n"
				"main:\n"
				"	.cfi_startproc\n"
				"	nop\n"
				"	.cfi_undefined 134000000\n"
				"	nop\n"
				"	ret\n"
				"	.cfi_endproc\n"
				"	.globl deep\n"
				"deep:\n"
				"	.cfi_startproc\n"
				"	.rept 20\n"
				"	.cfi_remember_state\n"
				"	nop\n"
				"	.endr\n"
				"	ret\n"
				"	.cfi_endproc\n"
				"	.section .note.GNU-stack,\"\",@progbits\n";

/* Builds tmpdir/name from the three sources with extra flags. */
static void compile_prog(const char *name, const char *cflags)
{
	run("cd '%s' && gcc -O2 %s -fno-omit-frame-pointer -c fp.c -o fp-%s.o && "
	    "gcc -O2 %s -c main.c -o main-%s.o && gcc %s -c asm.S -o asm-%s.o && "
	    "gcc -o %s fp-%s.o main-%s.o asm-%s.o",
	    tmpdir, cflags, name, cflags, name, cflags, name, name, name, name, name);
}

static int group_setup(void **state)
{
	snprintf(tmpdir, sizeof(tmpdir), "/tmp/sonde-unw-XXXXXX");
	if (!mkdtemp(tmpdir))
		return -1;
	if (elf_version(EV_CURRENT) == EV_NONE)
		return -1;
	write_file(tmp_path("fp.c"), prog_fp_c);
	write_file(tmp_path("main.c"), prog_main_c);
	write_file(tmp_path("asm.S"), prog_asm_S);
	write_file(tmp_path("hostile.S"), hostile_S);
	run("cd '%s' && gcc -o hostile hostile.S", tmpdir);
	compile_prog("prog", "");
	/* CFI in .debug_frame only; crt1.o still brings a few .eh_frame FDEs. */
	compile_prog("prog-dbg",
		     "-g -fno-asynchronous-unwind-tables -fno-unwind-tables -DDEBUG_FRAME");
	run("cd '%s' && objcopy --compress-debug-sections=zlib prog-dbg prog-dbgz && "
	    "objcopy --remove-section .eh_frame --remove-section .eh_frame_hdr prog prog-nocfi",
	    tmpdir);
	return 0;
}

static int group_teardown(void **state)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
	return system(cmd) ? -1 : 0;
}

/* The addresses of fp_func's `push %rbp` and `mov %rsp,%rbp`, by objdump. */
static void prologue(const char *path, uint64_t *push, uint64_t *mov)
{
	FILE *f = run_read("objdump -d --no-show-raw-insn --disassemble=fp_func '%s'", path);
	char line[256];
	unsigned long long a;

	*push = *mov = 0;
	while (fgets(line, sizeof(line), f)) {
		if (sscanf(line, " %llx:", &a) != 1)
			continue;
		if (!*push && strstr(line, "push") && strstr(line, "%rbp"))
			*push = a;
		else if (*push && !*mov && strstr(line, "mov") && strstr(line, "%rsp,%rbp"))
			*mov = a;
	}
	pclose(f);
	if (!*push || !*mov)
		fail_msg("objdump shows no push/mov of rbp in fp_func of %s", path);
}

/* Checks the rows of the functions of the test program at path. */
static void check_prog(const char *path, const struct unw_table *t)
{
	struct facts fc;
	uint64_t push, mov;
	uint32_t off = 0;

	read_facts(path, &fc);
	/* A leaf at -O2: CFA = rsp + 8 at its entry. */
	assert_true(to_off(&fc, nm_value(path, "sink"), &off));
	assert_row(t, off, UNW_CFA_RSP, 1, 0);
	/* With frame pointers: rsp + 8, after push rsp + 16 with rbp at CFA -
	 * 16, after mov CFA = rbp + 16. */
	assert_true(to_off(&fc, nm_value(path, "fp_func"), &off));
	assert_row(t, off, UNW_CFA_RSP, 1, 0);
	prologue(path, &push, &mov);
	assert_true(to_off(&fc, push + 1, &off));
	assert_row(t, off, UNW_CFA_RSP, 2, -2);
	assert_true(to_off(&fc, mov + 3, &off));
	assert_row(t, off, UNW_CFA_RBP, 2, -2);
	assert_true(to_off(&fc, nm_value(path, "stop_func"), &off));
	assert_row(t, off, UNW_STOP, 0, 0);
	assert_true(to_off(&fc, nm_value(path, "sig_func"), &off));
	assert_row(t, off, UNW_SIGNAL, 0, 0);
	assert_true(to_off(&fc, nm_value(path, "plt_func"), &off));
	assert_row(t, off, UNW_PLT, 11, 0);
	/* odd_func: rbp kept in rbx (a rule we can't express: 0), then CFA =
	 * rsp + 12, then CFA = rax + 8: the last two can't be expressed. */
	assert_true(to_off(&fc, nm_value(path, "odd_func"), &off));
	assert_row(t, off + 1, UNW_CFA_RSP, 2, 0);
	assert_row(t, off + 2, UNW_INVALID, 0, 0);
	assert_row(t, off + 3, UNW_INVALID, 0, 0);
	assert_true(t->st.rbp_other >= 1 && t->st.cfa_not_multiple_of_8 >= 1);
	assert_int_equal(t->st.fdes_skipped + t->st.fdes_truncated, 0);
}

/* ---- Tests ---- */

static void test_prog_eh_frame(void **state)
{
	struct unw_table t;
	char err[512];

	assert_int_equal(unw_table__build_file(tmp_path("prog"), MAX_ROWS, &t, err, sizeof(err)),
			 0);
	check_invariants(&t, MAX_ROWS);
	assert_int_equal(t.st.source, UNW_SRC_EH_FRAME);
	assert_string_equal(err, ""); /* nothing left out */
	check_prog(tmp_path("prog"), &t);
	assert_true(cross_check(tmp_path("prog"), ".eh_frame", &t, 0, 0, NULL) > 20);
	unw_table__free(&t);
}

static void test_prog_debug_frame(void **state)
{
	struct unw_table t, tz;

	build_ok(tmp_path("prog-dbg"), &t);
	assert_int_equal(t.st.source, UNW_SRC_DEBUG_FRAME);
	assert_true(t.st.fdes_other > 0); /* crt1.o's .eh_frame */
	check_prog(tmp_path("prog-dbg"), &t);
	assert_true(cross_check(tmp_path("prog-dbg"), ".debug_frame", &t, 0, 0, NULL) > 10);
	/* Compressed, the same table. */
	build_ok(tmp_path("prog-dbgz"), &tz);
	assert_int_equal(tz.st.source, UNW_SRC_DEBUG_FRAME);
	assert_int_equal(tz.n, t.n);
	assert_memory_equal(tz.rows, t.rows, t.n * sizeof(*t.rows));
	unw_table__free(&tz);
	unw_table__free(&t);
}

static void test_libc(void **state)
{
	struct unw_table t;
	size_t sig_fdes = 0, rows;

	REQUIRE_FILE(LIBC);
	build_ok(LIBC, &t);
	assert_int_equal(t.st.source, UNW_SRC_EH_FRAME);
	assert_int_equal(t.st.fdes_skipped + t.st.fdes_truncated + t.st.bad_entries, 0);
	rows = cross_check(LIBC, ".eh_frame", &t, 0, 0, &sig_fdes);
	assert_true(rows > 10000);
	/* __restore_rt's FDE (its CIE has the 'S' augmentation) was checked
	 * as UNW_SIGNAL among the rows above; there is one. */
	assert_int_equal(sig_fdes, 1);
	assert_true(t.st.signal >= 1);
	print_message("libc: %zu rows, %zu rows of readelf checked, %.1f ms\n", t.n, rows,
		      t.st.build_ns / 1e6);
	unw_table__free(&t);
}

static void test_libstdcxx(void **state)
{
	struct unw_table t;

	REQUIRE_FILE(LIBSTDCXX);
	build_ok(LIBSTDCXX, &t);
	assert_true(cross_check(LIBSTDCXX, ".eh_frame", &t, 0, 0, NULL) > 10000);
	unw_table__free(&t);
}

static void test_python(void **state)
{
	struct unw_table t;
	struct facts fc;
	uint64_t plt;
	uint32_t off = 0;

	REQUIRE_FILE(PYTHON);
	build_ok(PYTHON, &t);
	read_facts(PYTHON, &fc);
	/* _start, the ELF entry, says its return address is undefined. */
	assert_true(to_off(&fc, fc.entry, &off));
	assert_row(&t, off, UNW_STOP, 0, 0);
	/* The first stub of .plt, past PLT0 (16 bytes): binutils' expression. */
	plt = section_addr(PYTHON, ".plt");
	assert_true(plt != 0);
	assert_true(to_off(&fc, plt + 16, &off));
	assert_row(&t, off, UNW_PLT, 11, 0);
	assert_row(&t, off + 15, UNW_PLT, 11, 0);
	assert_true(cross_check(PYTHON, ".eh_frame", &t, 0, 0, NULL) > 10000);
	unw_table__free(&t);
}

static void test_errors(void **state)
{
	struct unw_table t;
	char err[512];

	assert_int_equal(unw_table__build_file("/nonexistent/x", MAX_ROWS, &t, err, sizeof(err)),
			 -ENOENT);
	assert_non_null(strstr(err, "/nonexistent/x"));
	assert_int_equal(t.n, 0);
	write_file(tmp_path("text"), "not an ELF file\n");
	assert_int_equal(unw_table__build_file(tmp_path("text"), MAX_ROWS, &t, err, sizeof(err)),
			 -ENOEXEC);
	assert_int_equal(
		unw_table__build_file(tmp_path("prog-nocfi"), MAX_ROWS, &t, err, sizeof(err)),
		-ENODATA);
	assert_non_null(strstr(err, "no FDE"));
	assert_int_equal(
		unw_table__build_file(tmp_path("fp-prog.o"), MAX_ROWS, &t, err, sizeof(err)),
		-ENODATA); /* a relocatable object has no segment */
	unw_table__free(&t);
	unw_table__free(NULL);
}

static void test_max_rows(void **state)
{
	struct unw_table t, full;
	char err[512];

	build_ok(tmp_path("prog"), &full);
	assert_true(full.n > 10);
	assert_int_equal(unw_table__build_file(tmp_path("prog"), full.n - 1, &t, err, sizeof(err)),
			 -E2BIG);
	assert_non_null(strstr(err, "more than"));
	assert_null(t.rows);
	assert_int_equal(unw_table__build_file(tmp_path("prog"), full.n, &t, err, sizeof(err)), 0);
	assert_int_equal(t.n, full.n);
	unw_table__free(&t);
	unw_table__free(&full);
	REQUIRE_FILE(LIBC);
	assert_int_equal(unw_table__build_file(LIBC, 100, &t, err, sizeof(err)), -E2BIG);
}

static void test_lookup(void **state)
{
	struct unw_row rows[] = {{.off = 10, .kind = UNW_CFA_RSP, .cfa = 1},
				 {.off = 20, .kind = UNW_INVALID},
				 {.off = 30, .kind = UNW_CFA_RBP, .cfa = 2}};
	struct unw_table t = {.rows = rows, .n = 3};

	assert_null(unw_table__lookup(&t, 9));
	assert_ptr_equal(unw_table__lookup(&t, 10), &rows[0]);
	assert_ptr_equal(unw_table__lookup(&t, 19), &rows[0]);
	assert_ptr_equal(unw_table__lookup(&t, 20), &rows[1]);
	assert_ptr_equal(unw_table__lookup(&t, UINT32_MAX), &rows[2]);
	t.n = 0;
	assert_null(unw_table__lookup(&t, 10));
}

/* Rows from ranges: sorted, a later start cuts an earlier range, the last
 * of equal starts wins, a gap gets an UNW_INVALID row, equal rules merge. */
static void test_ranges(void **state)
{
	struct unw_table_stats st = {0};
	struct unw_table t = {0};
	struct range in[] = {
		{40, {.off = 30, .kind = UNW_CFA_RSP, .cfa = 2}}, /* a gap after it */
		{30, {.off = 10, .kind = UNW_CFA_RSP, .cfa = 1}}, /* cut at 20 */
		{25, {.off = 20, .kind = UNW_CFA_RBP, .cfa = 2}}, /* wins [20, 25) */
		{28, {.off = 20, .kind = UNW_CFA_RBP, .cfa = 3}}, /* wins at 20: longer */
		{60, {.off = 50, .kind = UNW_CFA_RSP, .cfa = 2}}, /* same rule as 30 */
		{70, {.off = 60, .kind = UNW_CFA_RSP, .cfa = 2}}, /* merged into 50 */
		{90, {.off = 80, .kind = UNW_STOP}},
	};
	const struct unw_row want[] = {
		{.off = 10, .kind = UNW_CFA_RSP, .cfa = 1},
		{.off = 20, .kind = UNW_CFA_RBP, .cfa = 3},
		{.off = 28, .kind = UNW_INVALID},
		{.off = 30, .kind = UNW_CFA_RSP, .cfa = 2},
		{.off = 40, .kind = UNW_INVALID},
		{.off = 50, .kind = UNW_CFA_RSP, .cfa = 2},
		{.off = 70, .kind = UNW_INVALID},
		{.off = 80, .kind = UNW_STOP},
		{.off = 90, .kind = UNW_INVALID},
	};
	char err[128];
	struct builder b = {.max_rows = 100, .st = &st, .err = err, .errlen = sizeof(err)};

	b.ranges = malloc(sizeof(in));
	assert_non_null(b.ranges);
	memcpy(b.ranges, in, sizeof(in));
	b.nranges = ARRAY_SIZE(in);
	assert_int_equal(ranges_to_rows(&b, &t), 0);
	t.st.rows = t.n; /* set by the build */
	check_invariants(&t, 100);
	assert_int_equal(t.n, ARRAY_SIZE(want));
	for (size_t i = 0; i < t.n; i++)
		if (memcmp(&t.rows[i], &want[i], sizeof(want[i])))
			fail_msg("row %zu: %#x %d %d, expected %#x %d %d", i, t.rows[i].off,
				 t.rows[i].kind, t.rows[i].cfa, want[i].off, want[i].kind,
				 want[i].cfa);
	unw_table__free(&t);
	/* One row fewer than needed. */
	memcpy(b.ranges, in, sizeof(in));
	b.max_rows = ARRAY_SIZE(want) - 1;
	assert_int_equal(ranges_to_rows(&b, &t), -E2BIG);
	unw_table__free(&t);
	free(b.ranges);
}

/* FDE addresses in the encodings of DW_EH_PE. */
static void test_encoded(void **state)
{
	static const struct {
		uint8_t enc, bytes[9];
		size_t len;
		uint64_t want;
	} cases[] = {
		{DW_EH_PE_pcrel | DW_EH_PE_sdata4, {0xf0, 0xff, 0xff, 0xff}, 4, 0x1000 - 16},
		{DW_EH_PE_absptr, {1, 2, 3, 4, 5, 6, 7, 8}, 8, 0x0807060504030201},
		{DW_EH_PE_udata2, {0x34, 0x12}, 2, 0x1234},
		{DW_EH_PE_sdata2 | DW_EH_PE_pcrel, {0xfe, 0xff}, 2, 0x1000 - 2},
		{DW_EH_PE_uleb128, {0xe5, 0x8e, 0x26}, 3, 624485},
		{DW_EH_PE_sleb128, {0x7f}, 1, (uint64_t)-1},
		{DW_EH_PE_udata4 | DW_EH_PE_pcrel, {1, 0, 0, 0}, 4, 0x1001},
	};
	static const uint8_t refused[] = {DW_EH_PE_datarel | DW_EH_PE_sdata4,
					  DW_EH_PE_indirect | DW_EH_PE_pcrel | DW_EH_PE_sdata4,
					  DW_EH_PE_omit, 0x05};
	uint8_t four[4] = {0};
	uint64_t v;

	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		struct cur c = {cases[i].bytes, cases[i].bytes + cases[i].len};

		assert_true(read_encoded(&c, cases[i].enc, 0x1000, true, &v));
		assert_int_equal(v, cases[i].want);
		assert_ptr_equal(c.p, c.end);
		/* One byte short. */
		c = (struct cur){cases[i].bytes, cases[i].bytes + cases[i].len - 1};
		assert_false(read_encoded(&c, cases[i].enc, 0x1000, true, &v));
	}
	for (size_t i = 0; i < ARRAY_SIZE(refused); i++) {
		struct cur c = {four, four + 4};

		assert_false(encoding_ok(refused[i]) &&
			     read_encoded(&c, refused[i], 0x1000, true, &v));
	}
}

/* FDEs that libdw would take without bound are skipped, quickly, and a
 * long one is cut at UNW_MAX_FDE_ROWS rows. */
static void test_hostile(void **state)
{
	const char *path = tmp_path("hostile");
	struct unw_table t;
	struct facts fc;
	char err[512];
	uint32_t off = 0;
	const struct unw_row *r;

	assert_int_equal(unw_table__build_file(path, MAX_ROWS, &t, err, sizeof(err)), 0);
	check_invariants(&t, MAX_ROWS);
	assert_int_equal(t.st.fdes_skipped, 2);
	assert_int_equal(t.st.fdes_truncated, 1);
	assert_non_null(strstr(err, "2 skipped, 1 cut short"));
	print_message("hostile: %zu rows in %.1f ms\n", t.n, t.st.build_ns / 1e6);
	read_facts(path, &fc);
	/* long_func: 5000 pushes then pops, one a byte. */
	assert_true(to_off(&fc, nm_value(path, "long_func"), &off));
	assert_row(&t, off, UNW_CFA_RSP, 1, 0);
	assert_row(&t, off + 4999, UNW_CFA_RSP, 5000, 0);
	assert_row(&t, off + 5000, UNW_CFA_RSP, 5001, 0);
	assert_row(&t, off + UNW_MAX_FDE_ROWS - 1, UNW_CFA_RSP, 10002 - UNW_MAX_FDE_ROWS, 0);
	assert_row(&t, off + UNW_MAX_FDE_ROWS, UNW_INVALID, 0, 0);
	/* The rest of the file as readelf decodes it, but the rows left out:
	 * long_func's end, then main and deep. */
	assert_true(cross_check(path, ".eh_frame", &t,
				nm_value(path, "long_func") + UNW_MAX_FDE_ROWS,
				nm_value(path, "deep") + 64, NULL) > UNW_MAX_FDE_ROWS);
	assert_true(to_off(&fc, nm_value(path, "main"), &off));
	r = unw_table__lookup(&t, off + 2);
	assert_true(!r || r->kind == UNW_INVALID);
	assert_true(to_off(&fc, nm_value(path, "deep"), &off));
	r = unw_table__lookup(&t, off + 2);
	assert_true(!r || r->kind == UNW_INVALID);
	unw_table__free(&t);
}

/* Builds from a damaged image in memory: an error or a valid table. */
static void build_damaged(const char *image, size_t size, size_t *ok)
{
	struct unw_table t;
	char err[512];
	Elf *elf = elf_memory((char *)image, size);
	int ret;

	if (!elf)
		return;
	ret = unw_table__build_elf(elf, 1u << 20, &t, err, sizeof(err));
	if (!ret) {
		check_invariants(&t, 1u << 20);
		(*ok)++;
	} else {
		assert_true(ret < 0 && err[0]);
	}
	unw_table__free(&t);
	elf_end(elf);
}

/* Flips bytes of .eh_frame and .eh_frame_hdr, and truncates the file. */
static void corrupt_file(const char *path, int rounds)
{
	size_t size, eh_off, eh_size, hdr_off, hdr_size, ok = 0;
	char *orig = read_whole(path, &size), *copy = malloc(size);
	unsigned seed = 12345;

	assert_non_null(copy);
	section_span(path, ".eh_frame", &eh_off, &eh_size);
	section_span(path, ".eh_frame_hdr", &hdr_off, &hdr_size);
	for (int i = 0; i < rounds; i++) {
		memcpy(copy, orig, size);
		for (int k = 0; k < 1 + i % 8; k++) {
			size_t at = i % 3 ? eh_off + rand_r(&seed) % eh_size
					  : hdr_off + rand_r(&seed) % hdr_size;

			copy[at] = (char)rand_r(&seed);
		}
		build_damaged(copy, size, &ok);
		/* Cut inside .eh_frame, or anywhere. */
		build_damaged(orig, i % 2 ? eh_off + rand_r(&seed) % eh_size : rand_r(&seed) % size,
			      &ok);
	}
	/* Most flips leave most of the table. */
	assert_true(ok > (size_t)rounds / 2);
	free(copy);
	free(orig);
}

static void test_corrupt(void **state)
{
	corrupt_file(tmp_path("prog"), 300);
	REQUIRE_FILE(LIBC);
	corrupt_file(LIBC, 20);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_lookup),		 cmocka_unit_test(test_ranges),
		cmocka_unit_test(test_encoded),		 cmocka_unit_test(test_prog_eh_frame),
		cmocka_unit_test(test_prog_debug_frame), cmocka_unit_test(test_errors),
		cmocka_unit_test(test_max_rows),	 cmocka_unit_test(test_libc),
		cmocka_unit_test(test_libstdcxx),	 cmocka_unit_test(test_python),
		cmocka_unit_test(test_hostile),		 cmocka_unit_test(test_corrupt),
	};

	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
