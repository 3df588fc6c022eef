/* test_symbolize.c: unit tests of src/symbolize/. The parsers are fed
 * malformed input directly; the symbolizer is run against the fixture
 * programs of tests/fixtures/ (PIE, non-PIE, stripped, with a shared
 * library and a debug file), which print the addresses of their functions
 * and wait, so that each address is resolved while the process runs and
 * again after it exits. Expected symbol values and build-ids come from nm
 * and readelf, not from our own parser. Fixtures are found in $B/fixtures,
 * else next to this binary (build/tests/../fixtures). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libgen.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"
#include "symbolize/symbolize.h"
#include "symbolize/symbolize_internal.h"

#include "fixture_child.h"

static bool ends_with(const char *s, const char *suffix)
{
	size_t ls = strlen(s), lx = strlen(suffix);

	return ls >= lx && !strcmp(s + ls - lx, suffix);
}

static void sleep_ms(long ms)
{
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};

	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

#define assert_func(info, name)                                                                    \
	do {                                                                                       \
		if (!(info)->func || strcmp((info)->func, (name)))                                 \
			fail_msg("expected %s, got %s", (name),                                    \
				 (info)->func ? (info)->func : "(null)");                          \
	} while (0)

static void *read_whole(const char *path, size_t *size);

/* Checks the function at c->addr[i] of fixture exe, as nm names it. */
static void check_function(struct symbolizer *s, const struct child *c, int i, const char *exe,
			   bool dynamic)
{
	const char *file = i == GAMMA ? "libfix.so" : exe;
	char path[PATH_MAX + 64], bid[256], suffix[64];
	struct sym_info info;

	snprintf(path, sizeof(path), "%s", fixture(file));
	assert_int_equal(symbolizer__resolve_user(s, (uint32_t)c->pid, c->addr[i], &info), 0);
	assert_func(&info, fix_funcs[i]);
	assert_false(info.kernel);
	assert_non_null(info.module);
	snprintf(suffix, sizeof(suffix), "/%s", file);
	assert_true(ends_with(info.module, suffix));
	assert_int_equal(info.offset, nm_value(path, dynamic && i != GAMMA, fix_funcs[i]));
	assert_true(info.map_start <= c->addr[i] && c->addr[i] < info.map_limit);
	readelf_build_id(path, bid, sizeof(bid));
	assert_non_null(info.build_id);
	assert_string_equal(info.build_id, bid);

	/* Inside the function too. */
	assert_int_equal(symbolizer__resolve_user(s, (uint32_t)c->pid, c->addr[i] + 1, &info), 0);
	assert_func(&info, fix_funcs[i]);
}

/* Resolves the fixture's functions while it runs and after it exits. */
static void check_fixture(const char *exe, bool dynamic, bool has_delta)
{
	struct symbolizer *s = symbolizer__new();
	struct sym_info info;
	struct child c;
	char buf[256];

	assert_non_null(s);
	symbolizer__set_debug_dir(s, NULL);
	spawn_fixture(exe, &c);
	assert_int_equal(symbolizer__track_pid(s, (uint32_t)c.pid, false), 0);
	for (int round = 0; round < 2; round++) {
		for (int i = 0; i < NFUNCS; i++) {
			if (i == DELTA && !has_delta)
				continue;
			check_function(s, &c, i, exe, dynamic);
		}
		if (!has_delta) {
			char prefix[64];

			/* Static, so not in .dynsym: past fix_alpha's size. */
			symbolizer__resolve_user(s, (uint32_t)c.pid, c.addr[DELTA], &info);
			assert_null(info.func);
			snprintf(prefix, sizeof(prefix), "%s+0x", exe);
			sym_info__name(&info, buf, sizeof(buf));
			if (strncmp(buf, prefix, strlen(prefix)))
				fail_msg("expected %s..., got %s", prefix, buf);
		}
		if (!round) {
			reap(&c);
			/* A refresh finds it gone and keeps what was seen. */
			assert_int_equal(symbolizer__track_pid(s, (uint32_t)c.pid, true), 0);
		}
	}
	/* Unmapped address of an exited process: unknown, no crash. */
	assert_int_equal(symbolizer__resolve_user(s, (uint32_t)c.pid, 0x1000, &info), 0);
	assert_null(info.func);
	assert_null(info.module);
	assert_string_equal(sym_info__name(&info, buf, sizeof(buf)), "[unknown]+0x1000");
	symbolizer__free(s);
}

static void test_fixture_pie(void **state)
{
	check_fixture("pie", false, true);
}

static void test_fixture_nopie(void **state)
{
	check_fixture("nopie", false, true);
}

static void test_fixture_pie_stripped(void **state)
{
	check_fixture("pie-stripped", true, false);
}

/* An address of libfix.so past every symbol is named "libfix.so+0x...". */
static void test_unknown_in_library(void **state)
{
	struct symbolizer *s = symbolizer__new();
	struct sym_info info;
	struct child c;
	char buf[256];
	uint64_t end;

	spawn_fixture("pie", &c);
	assert_int_equal(symbolizer__resolve_user(s, (uint32_t)c.pid, c.addr[GAMMA], &info), 0);
	assert_func(&info, "fix_lib_gamma");
	end = info.map_limit;
	/* The page padding after .fini. */
	assert_int_equal(symbolizer__resolve_user(s, (uint32_t)c.pid, end - 1, &info), 0);
	assert_null(info.func);
	assert_true(ends_with(info.module, "/libfix.so"));
	sym_info__name(&info, buf, sizeof(buf));
	assert_true(!strncmp(buf, "libfix.so+0x", strlen("libfix.so+0x")));
	assert_int_equal(strtoull(buf + strlen("libfix.so+0x"), NULL, 16), info.offset);
	reap(&c);
	symbolizer__free(s);
}

/* A program whose file was deleted is read through map_files. */
static void test_deleted_file(void **state)
{
	char dir[] = "/tmp/sonde-deleted-XXXXXX", path[PATH_MAX + 64], lib[PATH_MAX];
	char target[PATH_MAX + 64];
	struct symbolizer *s = symbolizer__new();
	struct sym_info info;
	struct child c;
	size_t size;
	void *image = read_whole(fixture("pie"), &size);
	int fd;

	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/pie", dir);
	fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0755);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, image, size), (ssize_t)size);
	close(fd);
	free(image);
	assert_non_null(realpath(fixture("libfix.so"), lib));
	snprintf(target, sizeof(target), "%s/libfix.so", dir);
	assert_int_equal(symlink(lib, target), 0);

	spawn_path(path, &c);
	unlink(path);
	unlink(target);
	rmdir(dir);
	symbolizer__resolve_user(s, (uint32_t)c.pid, c.addr[ALPHA], &info);
	assert_func(&info, "fix_alpha");
	assert_string_equal(info.module, path);
	reap(&c);
	symbolizer__free(s);
}

/* A stripped binary is named through its debug file, found by build-id. */
static void test_debug_file(void **state)
{
	char dir[] = "/tmp/sonde-debug-XXXXXX", bid[256], link[PATH_MAX + 64];
	char target[PATH_MAX];
	struct symbolizer *s;
	struct sym_info info;
	struct child c;

	assert_non_null(mkdtemp(dir));
	readelf_build_id(fixture("pie.debug"), bid, sizeof(bid));
	assert_non_null(realpath(fixture("pie.debug"), target));
	snprintf(link, sizeof(link), "%s/.build-id", dir);
	assert_int_equal(mkdir(link, 0755), 0);
	snprintf(link, sizeof(link), "%s/.build-id/%.2s", dir, bid);
	assert_int_equal(mkdir(link, 0755), 0);
	snprintf(link, sizeof(link), "%s/.build-id/%.2s/%s.debug", dir, bid, bid + 2);
	assert_int_equal(symlink(target, link), 0);

	spawn_fixture("pie-nosym", &c);
	/* Without the debug file: nothing to name fix_alpha with. */
	s = symbolizer__new();
	symbolizer__set_debug_dir(s, NULL);
	symbolizer__resolve_user(s, (uint32_t)c.pid, c.addr[ALPHA], &info);
	assert_null(info.func);
	symbolizer__free(s);

	s = symbolizer__new();
	symbolizer__set_debug_dir(s, dir);
	symbolizer__resolve_user(s, (uint32_t)c.pid, c.addr[ALPHA], &info);
	assert_func(&info, "fix_alpha");
	assert_true(ends_with(info.module, "/pie-nosym"));
	symbolizer__resolve_user(s, (uint32_t)c.pid, c.addr[DELTA], &info);
	assert_func(&info, "fix_delta");
	symbolizer__free(s);
	reap(&c);

	unlink(link);
	snprintf(link, sizeof(link), "%s/.build-id/%.2s", dir, bid);
	rmdir(link);
	snprintf(link, sizeof(link), "%s/.build-id", dir);
	rmdir(link);
	rmdir(dir);
}

/* Processes of one program share its objects; so do files with the same
 * build-id (pie-nosym is pie stripped). */
static void test_object_cache(void **state)
{
	struct symbolizer *s = symbolizer__new();
	struct symbolizer_stats st1, st2, st3;
	struct child a, b, n;
	struct sym_info info;

	symbolizer__set_debug_dir(s, NULL);
	spawn_fixture("pie", &a);
	spawn_fixture("pie", &b);
	spawn_fixture("pie-nosym", &n);
	assert_int_equal(symbolizer__track_pid(s, (uint32_t)a.pid, false), 0);
	symbolizer__stats(s, &st1);
	assert_true(st1.objects_loaded >= 4); /* pie, libfix.so, libc, ld.so */
	assert_int_equal(st1.pids_tracked, 1);
	assert_int_equal(symbolizer__track_pid(s, (uint32_t)b.pid, false), 0);
	symbolizer__stats(s, &st2);
	assert_int_equal(st2.objects_loaded, st1.objects_loaded);
	assert_true(st2.object_hits >= st1.object_hits + 4);
	assert_int_equal(st2.pids_tracked, 2);

	/* Known pid, no refresh: no maps read. */
	assert_int_equal(symbolizer__track_pid(s, (uint32_t)b.pid, false), 0);
	symbolizer__stats(s, &st3);
	assert_int_equal(st3.maps_reads, st2.maps_reads);
	assert_int_equal(symbolizer__track_pid(s, (uint32_t)b.pid, true), 0);
	symbolizer__stats(s, &st3);
	assert_int_equal(st3.maps_reads, st2.maps_reads + 1);
	assert_int_equal(st3.objects_loaded, st1.objects_loaded);

	assert_int_equal(symbolizer__track_pid(s, (uint32_t)n.pid, false), 0);
	symbolizer__stats(s, &st3);
	assert_int_equal(st3.objects_loaded, st1.objects_loaded);
	symbolizer__resolve_user(s, (uint32_t)n.pid, n.addr[DELTA], &info);
	assert_func(&info, "fix_delta");
	assert_true(ends_with(info.module, "/pie-nosym"));

	symbolizer__forget_pid(s, (uint32_t)a.pid);
	symbolizer__forget_pid(s, 99999999); /* unknown: no-op */
	symbolizer__resolve_user(s, (uint32_t)b.pid, b.addr[BETA], &info);
	assert_func(&info, "fix_beta");
	reap(&a);
	reap(&b);
	reap(&n);
	symbolizer__free(s);
}

/* A pid never seen before it exited can't be named, and says so. */
static void test_exited_untracked(void **state)
{
	struct symbolizer *s = symbolizer__new();
	struct sym_info info;
	struct child c;
	char buf[64], expected[64];

	spawn_fixture("pie", &c);
	reap(&c);
	assert_int_equal(symbolizer__track_pid(s, (uint32_t)c.pid, false), -ESRCH);
	assert_int_equal(symbolizer__resolve_user(s, (uint32_t)c.pid, c.addr[ALPHA], &info), 0);
	assert_null(info.func);
	assert_null(info.module);
	assert_int_equal(info.offset, c.addr[ALPHA]);
	snprintf(expected, sizeof(expected), "[unknown]+0x%" PRIx64, c.addr[ALPHA]);
	assert_string_equal(sym_info__name(&info, buf, sizeof(buf)), expected);
	symbolizer__free(s);
}

/* A process read from /proc before its own fork and exec records were
 * drained (the sideband polled after its first sample), and whose mmap
 * records were lost to a full ring: what the read found names its frames,
 * after it exits too. The records used to replace the read process by an
 * empty one. */
static void test_records_after_read(void **state)
{
	struct symbolizer *s = symbolizer__new();
	uint64_t fork_ns = mono_ns(), exec_ns;
	struct sym_info info;
	struct child c;
	uint32_t image;

	symbolizer__set_debug_dir(s, NULL);
	spawn_fixture("pie", &c);
	exec_ns = mono_ns(); /* it has printed its addresses: exec'ed before this */
	assert_int_equal(symbolizer__track_pid(s, (uint32_t)c.pid, false), 0);
	symbolizer__fork(s, (uint32_t)getpid(), (uint32_t)c.pid, fork_ns);
	symbolizer__exec(s, (uint32_t)c.pid, exec_ns - 1, "pie");
	reap(&c);
	symbolizer__exit(s, (uint32_t)c.pid, mono_ns());
	image = symbolizer__image(s, (uint32_t)c.pid, mono_ns());
	assert_int_equal(symbolizer__resolve_image(s, image, c.addr[ALPHA], &info), 0);
	assert_func(&info, fix_funcs[ALPHA]);
	assert_string_equal(symbolizer__comm(s, (uint32_t)c.pid), "pie");
	/* A later process of the same pid is a new one: nothing of the old. */
	symbolizer__fork(s, (uint32_t)getpid(), (uint32_t)c.pid, mono_ns());
	symbolizer__exec(s, (uint32_t)c.pid, mono_ns(), "other");
	image = symbolizer__image(s, (uint32_t)c.pid, mono_ns());
	assert_int_equal(symbolizer__resolve_image(s, image, c.addr[ALPHA], &info), 0);
	assert_null(info.func);
	symbolizer__free(s);
}

struct ksym_pick {
	uint64_t addr;
	const char *name;
};

/* Picks a well-known kernel function whose address no other text symbol
 * shares, from /proc/kallsyms as this test reads it. */
static bool pick_kernel_symbol(struct ksym_pick *pick)
{
	static const char *const names[] = {"schedule", "do_sys_openat2", "vfs_read",
					    "do_nanosleep"};
	static char name[128];
	uint64_t addrs[4] = {0};
	int count[4] = {0};
	char line[1024], sym[512], type;
	uint64_t addr;
	FILE *f = fopen("/proc/kallsyms", "r");

	if (!f)
		return false;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "%" SCNx64 " %c %511s", &addr, &type, sym) == 3)
			for (int i = 0; i < 4; i++)
				if (!strcmp(sym, names[i]) && !strchr(line, '['))
					addrs[i] = addr;
	rewind(f);
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "%" SCNx64 " %c %511s", &addr, &type, sym) == 3 &&
		    strchr("tTwW", type))
			for (int i = 0; i < 4; i++)
				count[i] += addrs[i] && addr == addrs[i];
	fclose(f);
	for (int i = 0; i < 4; i++) {
		if (addrs[i] && count[i] == 1) {
			snprintf(name, sizeof(name), "%s", names[i]);
			pick->addr = addrs[i];
			pick->name = name;
			return true;
		}
	}
	return false;
}

static void test_kernel(void **state)
{
	struct symbolizer *s = symbolizer__new();
	struct ksym_pick pick;
	struct sym_info info;

	if (!pick_kernel_symbol(&pick)) {
		symbolizer__free(s);
		print_message(
			"SKIP kernel test: /proc/kallsyms shows no addresses -- run as root\n");
		skip();
	}
	assert_int_equal(symbolizer__resolve_kernel(s, pick.addr, &info), 0);
	assert_func(&info, pick.name);
	assert_true(info.kernel);
	assert_string_equal(info.module, "[kernel.kallsyms]");
	assert_int_equal(symbolizer__resolve_kernel(s, pick.addr + 1, &info), 0);
	assert_func(&info, pick.name);
	/* Below every kernel symbol. */
	assert_int_equal(symbolizer__resolve_kernel(s, 0x1000, &info), 0);
	assert_null(info.func);
	symbolizer__free(s);
}

static void write_file(const char *path, const char *mode, const char *fmt, ...)
{
	FILE *f = fopen(path, mode);
	va_list ap;

	assert_non_null(f);
	va_start(ap, fmt);
	vfprintf(f, fmt, ap);
	va_end(ap);
	assert_int_equal(fclose(f), 0);
}

/* Anonymous executable memory is named from /tmp/perf-PID.map, re-read on
 * a miss at most once a second; the mappings are re-read on a miss. */
static void test_jit(void **state)
{
	struct symbolizer *s = symbolizer__new();
	uint32_t self = (uint32_t)getpid();
	struct symbolizer_stats st1, st2;
	struct sym_info info;
	char map[64], buf[128], expected[128];
	uint8_t *page;

	snprintf(map, sizeof(map), "/tmp/perf-%u.map", self);
	unlink(map);
	assert_int_equal(symbolizer__track_pid(s, self, false), 0);
	symbolizer__stats(s, &st1);
	page = mmap(NULL, 4096, PROT_READ | PROT_WRITE | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1,
		    0);
	assert_true(page != MAP_FAILED);
	write_file(map, "w",
		   "%" PRIx64 " 40 jit_one\n"
		   "garbage line\n"
		   "0x%" PRIx64 " 0x20 LazyCompile:~jit two\n",
		   (uint64_t)(uintptr_t)page, (uint64_t)(uintptr_t)page + 0x40);
	sleep_ms(150);

	assert_int_equal(symbolizer__resolve_user(s, self, (uintptr_t)page + 0x10, &info), 0);
	symbolizer__stats(s, &st2);
	assert_int_equal(st2.maps_reads, st1.maps_reads + 1); /* found the new page */
	assert_int_equal(info.map_start, (uintptr_t)page);
	assert_func(&info, "jit_one");
	assert_string_equal(info.module, "[jit]");
	symbolizer__resolve_user(s, self, (uintptr_t)page + 0x45, &info);
	assert_func(&info, "LazyCompile:~jit two");
	symbolizer__resolve_user(s, self, (uintptr_t)page + 0x70, &info);
	assert_null(info.func);
	assert_int_equal(info.map_start, (uintptr_t)page);
	snprintf(expected, sizeof(expected), "[unknown]+0x%" PRIxPTR, (uintptr_t)page + 0x70);
	assert_string_equal(sym_info__name(&info, buf, sizeof(buf)), expected);

	/* A function compiled since: found once a second has passed. */
	write_file(map, "a", "%" PRIx64 " 10 jit_three\n", (uint64_t)(uintptr_t)page + 0x100);
	symbolizer__resolve_user(s, self, (uintptr_t)page + 0x105, &info);
	assert_null(info.func);
	sleep_ms(1100);
	symbolizer__resolve_user(s, self, (uintptr_t)page + 0x105, &info);
	assert_func(&info, "jit_three");

	unlink(map);
	munmap(page, 4096);
	symbolizer__free(s);
}

/* Our own vdso, named from the copy the symbolizer reads. */
static void test_vdso(void **state)
{
	struct symbolizer *s = symbolizer__new();
	struct sym_info info;
	void *h, *fn;

	if (!getauxval(AT_SYSINFO_EHDR)) {
		symbolizer__free(s);
		print_message("SKIP vdso test: no vdso in this process\n");
		skip();
	}
	h = dlopen("linux-vdso.so.1", RTLD_LAZY | RTLD_NOLOAD);
	fn = h ? dlsym(h, "__vdso_clock_gettime") : NULL;
	if (!fn) {
		symbolizer__free(s);
		print_message("SKIP vdso test: no __vdso_clock_gettime in the vdso\n");
		skip();
	}
	assert_int_equal(symbolizer__resolve_user(s, (uint32_t)getpid(), (uintptr_t)fn, &info), 0);
	assert_string_equal(info.module, "[vdso]");
	assert_func(&info, "__vdso_clock_gettime");
	assert_non_null(info.build_id);
	symbolizer__free(s);
}

static void test_maps_line(void **state)
{
	struct maps_line ml;
	char line[512];
	static const char *const bad[] = {
		"",
		"garbage\n",
		"7f00-7e00 r-xp 00000000 08:01 12 /lib/x.so\n",	 /* end before start */
		"7f00-8000 r-x 00000000 08:01 12 /lib/x.so\n",	 /* short perms */
		"7f00-8000 rzxp 00000000 08:01 12 /lib/x.so\n",	 /* bad perms */
		"-7f00-8000 r-xp 00000000 08:01 12 /lib/x.so\n", /* sign */
		"7f00-8000 r-xp 0000000g 08:01 12 /lib/x.so\n",	 /* bad offset */
		"7f00-8000 r-xp 00000000 0801 12 /lib/x.so\n",	 /* bad device */
		"7f00-8000 r-xp 00000000 08:01 x12 /lib/x.so\n", /* bad inode */
		"7f00 r-xp 00000000 08:01 12 /lib/x.so\n",	 /* no end */
		"ffffffffffffffffff-8000 r-xp 0 08:01 12 /x\n",	 /* overflow */
		"7f00-8000 r-xp 00000000 08:01",		 /* truncated */
		"7f00-8000  r-xp 00000000 08:01 12 /lib/x.so\n", /* two spaces */
	};

	snprintf(line, sizeof(line),
		 "55d4c0a00000-55d4c0a21000 r-xp 00001000 fd:01 1234567    /usr/bin/my prog\n");
	assert_int_equal(maps__parse_line(line, &ml), 0);
	assert_int_equal(ml.start, 0x55d4c0a00000);
	assert_int_equal(ml.end, 0x55d4c0a21000);
	assert_int_equal(ml.pgoff, 0x1000);
	assert_int_equal(ml.dev_major, 0xfd);
	assert_int_equal(ml.dev_minor, 1);
	assert_int_equal(ml.ino, 1234567);
	assert_string_equal(ml.perms, "r-xp");
	assert_true(ml.exec);
	assert_false(ml.deleted);
	assert_int_equal(ml.kind, MAPPING_FILE);
	assert_string_equal(ml.path, "/usr/bin/my prog");

	snprintf(line, sizeof(line), "1000-2000 r-xs 0 0:5 77 /memfd:jit (deleted)\n");
	assert_int_equal(maps__parse_line(line, &ml), 0);
	assert_string_equal(ml.perms, "r-xs");
	assert_true(ml.deleted);
	assert_int_equal(ml.kind, MAPPING_FILE);
	assert_string_equal(ml.path, "/memfd:jit");
	assert_int_equal(ml.path_len, strlen("/memfd:jit"));

	snprintf(line, sizeof(line), "1000-2000 rwxp 00000000 00:00 0 \n");
	assert_int_equal(maps__parse_line(line, &ml), 0);
	assert_int_equal(ml.kind, MAPPING_ANON);
	assert_string_equal(ml.path, "");
	snprintf(line, sizeof(line), "1000-2000 rw-p 00000000 00:00 0");
	assert_int_equal(maps__parse_line(line, &ml), 0);
	assert_false(ml.exec);
	assert_int_equal(ml.kind, MAPPING_ANON);
	snprintf(line, sizeof(line), "7ffc1000-7ffc3000 r-xp 00000000 00:00 0   [vdso]\n");
	assert_int_equal(maps__parse_line(line, &ml), 0);
	assert_int_equal(ml.kind, MAPPING_VDSO);
	snprintf(line, sizeof(line),
		 "ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0  [vsyscall]\n");
	assert_int_equal(maps__parse_line(line, &ml), 0);
	assert_int_equal(ml.kind, MAPPING_VSYSCALL);
	snprintf(line, sizeof(line), "1000-2000 r-xp 00000000 00:00 0  [anon:v8]\n");
	assert_int_equal(maps__parse_line(line, &ml), 0);
	assert_int_equal(ml.kind, MAPPING_ANON);

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		snprintf(line, sizeof(line), "%s", bad[i]);
		if (maps__parse_line(line, &ml) != -EINVAL)
			fail_msg("accepted malformed line %zu: %s", i, bad[i]);
	}
}

static int count_exec(const struct maps_line *l, void *arg)
{
	int *n = arg;

	*n += l->exec;
	return 0;
}

struct own_maps {
	int files, self;
};

static int on_file(const struct maps_line *l, void *arg)
{
	struct own_maps *o = arg;
	char exe[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);

	assert_int_equal(l->path[0], '/');
	assert_true(l->ino != 0);
	assert_int_equal(l->kind, MAPPING_FILE);
	o->files++;
	if (n > 0) {
		exe[n] = 0;
		o->self += !strcmp(exe, l->path) && l->exec;
	}
	return 0;
}

static int stop_at_first(const struct maps_line *l, void *arg)
{
	(*(int *)arg)++;
	return 42;
}

/* This process's file mappings, its own text among them; no [heap], no
 * [stack], no anonymous ones. */
static void test_maps_each_file(void **state)
{
	struct own_maps o = {0};
	int calls = 0;

	assert_int_equal(maps__each_file(getpid(), on_file, &o), 0);
	assert_true(o.files > 2);
	assert_int_equal(o.self, 1);
	assert_int_equal(maps__each_file(getpid(), stop_at_first, &calls), 42);
	assert_int_equal(calls, 1);
	/* pid_max is at most 2^22: no such process. */
	assert_int_equal(maps__each_file(1u << 23, on_file, &o), -ENOENT);
}

/* A maps file with malformed, overlong and NUL-holding lines. */
static void test_maps_file(void **state)
{
	size_t size = 4 * SYMBOLIZE_MAX_LINE;
	char *text = calloc(1, size), *p = text;
	FILE *f;
	int n = 0;

	assert_non_null(text);
	p += sprintf(p, "1000-2000 r-xp 00000000 08:01 5 /a\n");
	p += sprintf(p, "not a mapping\n");
	p += sprintf(p, "3000-4000 r-xp 00000000 08:01 6 /");
	memset(p, 'x', SYMBOLIZE_MAX_LINE + 10); /* overlong: skipped */
	p += SYMBOLIZE_MAX_LINE + 10;
	p += sprintf(p, "\n5000-6000 r--p 00000000 08:01 7 /b\n");
	p += sprintf(p, "7000-8000 r-xp 00000000 08:01 8 /c");
	f = fmemopen(text, (size_t)(p - text), "r");
	assert_non_null(f);
	assert_int_equal(maps__parse(f, count_exec, &n), 0);
	fclose(f);
	assert_int_equal(n, 2);
	free(text);
}

/* PLT stubs are named NAME@plt, at the addresses objdump gives them, in
 * this test's own executable and in libc. */
static void check_plt(const char *path)
{
	char cmd[PATH_MAX + 64], line[512];
	struct elf_object *obj;
	int fd, n = 0;
	FILE *p;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		print_message("SKIP part: %s: %s\n", path, strerror(errno));
		return;
	}
	obj = elf_object__open_fd(fd, path);
	assert_non_null(obj);
	elf_object__load_symbols(obj, NULL);
	snprintf(cmd, sizeof(cmd), "objdump -d -j .plt -j .plt.sec %s 2>/dev/null", path);
	p = popen(cmd, "r");
	assert_non_null(p);
	while (fgets(line, sizeof(line), p)) {
		unsigned long long addr;
		char name[256];
		const char *got;

		/* "<x@plt-0x10>" is the resolver's entry, not a stub;
		 * "<*ABS*+0x9f550@plt>" an IFUNC's, which no symbol names. */
		if (sscanf(line, "%llx <%255[^>]>:", &addr, name) != 2 || strlen(name) < 5 ||
		    strcmp(name + strlen(name) - 4, "@plt") || !strncmp(name, "*ABS*", 5))
			continue;
		got = elf_object__lookup(obj, addr + 4);
		if (!got || strcmp(got, name))
			fail_msg("%s: %#llx is %s, objdump says %s", path, addr,
				 got ? got : "(none)", name);
		n++;
	}
	pclose(p);
	assert_true(n > 0);
	elf_object__free(obj);
	close(fd);
}

static void test_plt_names(void **state)
{
	char self[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);

	assert_true(n > 0);
	self[n] = 0; /* objdump's /proc/self would be objdump */
	check_plt(self);
	check_plt("/lib/x86_64-linux-gnu/libc.so.6");
}

static void test_symbol_table(void **state)
{
	struct elf_cand c[] = {
		{0x1000, 0x10, UINT64_MAX, "a_alias", 0},
		{0x1040, 0, UINT64_MAX, "c", 1},
		{0x1000, 0x10, UINT64_MAX, "a", 13},
		{0x1020, 0, 0x1030, "b", 1},
		{0x1100, 0x10, 0x2000, "_ZN3foo3barEv", 1},
		{0x1200, 0x10, 0x2000, "_Znot_mangled", 1},
	};
	struct elf_object *obj = calloc(1, sizeof(*obj));

	assert_non_null(obj);
	assert_int_equal(elf_object__set_symbols(obj, c, sizeof(c) / sizeof(c[0])), 0);
	assert_int_equal(obj->nsyms, 5);
	assert_null(elf_object__lookup(obj, 0xfff));
	assert_string_equal(elf_object__lookup(obj, 0x1000), "a");
	assert_string_equal(elf_object__lookup(obj, 0x100f), "a");
	assert_null(elf_object__lookup(obj, 0x1010)); /* past a's size */
	assert_string_equal(elf_object__lookup(obj, 0x102f), "b");
	assert_null(elf_object__lookup(obj, 0x1030));		   /* past b's section */
	assert_string_equal(elf_object__lookup(obj, 0x10ff), "c"); /* up to the next */
	assert_string_equal(elf_object__lookup(obj, 0x1105), "foo::bar()");
	assert_string_equal(elf_object__lookup(obj, 0x1105), "foo::bar()");
	assert_null(elf_object__lookup(obj, 0x1110));
	assert_string_equal(elf_object__lookup(obj, 0x1200), "_Znot_mangled");
	assert_null(elf_object__lookup(obj, UINT64_MAX));

	elf_object__free(obj);
	elf_object__free(NULL);
}

static void test_segments(void **state)
{
	struct elf_seg segs[] = {
		{.offset = 0, .vaddr = 0, .filesz = 0x450, .memsz = 0x450},
		{.offset = 0x1000,
		 .vaddr = 0x401000,
		 .filesz = 0x119,
		 .memsz = 0x119,
		 .exec = true},
		{.offset = 0x2e68, .vaddr = 0x403e68, .filesz = 0x1a0, .memsz = 0x1a8},
	};
	struct elf_object obj = {.segs = segs, .nsegs = 3};
	uint64_t v;

	assert_true(elf_object__file_to_vaddr(&obj, 0x1010, &v));
	assert_int_equal(v, 0x401010);
	assert_true(elf_object__file_to_vaddr(&obj, 0x1fff, &v)); /* page padding */
	assert_int_equal(v, 0x401fff);
	assert_true(elf_object__file_to_vaddr(&obj, 0x2e70, &v));
	assert_int_equal(v, 0x403e70);
	assert_false(elf_object__file_to_vaddr(&obj, 0x9000, &v));
}

static void *read_whole(const char *path, size_t *size)
{
	struct stat st;
	void *buf;
	int fd = open(path, O_RDONLY);

	if (fd < 0)
		fail_msg("can't open %s: %s -- run `make fixtures`", path, strerror(errno));
	assert_int_equal(fstat(fd, &st), 0);
	buf = malloc((size_t)st.st_size);
	assert_non_null(buf);
	assert_int_equal(read(fd, buf, (size_t)st.st_size), st.st_size);
	close(fd);
	*size = (size_t)st.st_size;
	return buf;
}

static struct elf_object *load_file(const char *path)
{
	int fd = open(path, O_RDONLY);
	struct elf_object *obj;

	assert_true(fd >= 0);
	obj = elf_object__open_fd(fd, path);
	elf_object__load_symbols(obj, NULL);
	elf_object__close_file(obj);
	close(fd);
	return obj;
}

/* Garbage, truncated and corrupted ELF files: objects without (some)
 * symbols, never a crash. */
static void test_malformed_elf(void **state)
{
	char path[] = "/tmp/sonde-elf-XXXXXX";
	size_t size;
	uint8_t *good = read_whole(fixture("pie"), &size), *bad = malloc(size);
	struct elf_object *obj;
	int fd = mkstemp(path);

	assert_true(fd >= 0);
	assert_non_null(bad);
	close(fd);

	/* The intact file, as a control. */
	obj = load_file(fixture("pie"));
	assert_true(obj->is_elf);
	assert_true(obj->has_symtab);
	assert_string_equal(elf_object__lookup(obj, nm_value(fixture("pie"), false, "fix_alpha")),
			    "fix_alpha");
	elf_object__free(obj);

	srand(42);
	for (size_t i = 0; i < size; i++)
		bad[i] = (uint8_t)rand();
	write_file(path, "w", "%s", "");
	fd = open(path, O_WRONLY | O_TRUNC);
	assert_int_equal(write(fd, bad, size), (ssize_t)size);
	close(fd);
	obj = load_file(path);
	assert_false(obj->is_elf);
	assert_int_equal(obj->nsyms, 0);
	assert_null(elf_object__lookup(obj, 0x1139));
	elf_object__free(obj);

	/* Truncated copies. */
	for (size_t len = 1; len < size; len = len * 3 / 2 + 1) {
		fd = open(path, O_WRONLY | O_TRUNC);
		assert_int_equal(write(fd, good, len), (ssize_t)len);
		close(fd);
		obj = load_file(path);
		elf_object__lookup(obj, 0x1139);
		elf_object__free(obj);
	}
	unlink(path);

	/* Random corruption, in memory; the warnings are expected. */
	log_set_level(LOG_ERROR);
	for (int iter = 0; iter < 2000; iter++) {
		memcpy(bad, good, size);
		for (int k = 0; k < 1 + iter % 16; k++) {
			size_t at = (size_t)rand() % size;

			/* Mostly the headers, where the offsets are. */
			if (iter % 2)
				at = at % 64;
			bad[at] = (uint8_t)rand();
		}
		obj = elf_object__open_memory(bad, size, "corrupted");
		elf_object__load_symbols(obj, NULL);
		elf_object__close_file(obj);
		for (uint64_t a = 0x1000; a < 0x1300; a += 0x40)
			elf_object__lookup(obj, a);
		elf_object__free(obj);
	}
	log_set_level(LOG_INFO);
	free(good);
	free(bad);
}

static void test_kallsyms_parse(void **state)
{
	static const char text[] = "0000000000000000 T hidden\n"
				   "ffffffff81000000 T _text\n"
				   "ffffffff81000000 t _stext_alias\n"
				   "ffffffff81001000 D some_data\n"
				   "ffffffff81002000 t local_fn\n"
				   "garbage\n"
				   "ffffffff81003000 T\n"
				   "ffffffffc0001000 t mod_fn\t[mymod]\n"
				   "ffffffffc0002000 t bpf_prog_1234_x\t[bpf]\n";
	struct strpool *pool = strpool__new();
	struct ksyms k = {0};
	const struct ksym *ks;
	FILE *f = fmemopen((void *)text, strlen(text), "r");

	assert_int_equal(ksyms__load(&k, f, pool), 0);
	fclose(f);
	assert_int_equal(k.n, 4);
	assert_null(ksyms__find(&k, 0xffffffff80ffffff));
	ks = ksyms__find(&k, 0xffffffff81000010);
	assert_string_equal(ks->name, "_text");
	assert_string_equal(ks->module, "[kernel.kallsyms]");
	assert_string_equal(ksyms__find(&k, 0xffffffff81001800)->name, "_text"); /* no data */
	assert_string_equal(ksyms__find(&k, 0xffffffff81002001)->name, "local_fn");
	ks = ksyms__find(&k, 0xffffffffc0001004);
	assert_string_equal(ks->name, "mod_fn");
	assert_string_equal(ks->module, "[mymod]");
	assert_string_equal(ksyms__find(&k, 0xffffffffc0002004)->module, "[bpf]");
	ksyms__release(&k);
	strpool__free(pool);
}

static void test_perfmap_parse(void **state)
{
	static const char text[] = "1000 10 first\n"
				   "0x2000 0x20 second one\r\n"
				   "3000 0 empty\n"
				   "zz 10 bad\n"
				   "4000 10\n"
				   "1000 8 first_reused\n"
				   "ffffffffffffffff 10 wraps\n";
	struct strpool *pool = strpool__new();
	struct perfmap m = {0};
	FILE *f = fmemopen((void *)text, strlen(text), "r");

	assert_int_equal(perfmap__load(&m, f, pool), 0);
	fclose(f);
	assert_int_equal(m.n, 2);
	assert_string_equal(perfmap__find(&m, 0x1004)->name, "first_reused");
	assert_null(perfmap__find(&m, 0x1009));
	assert_string_equal(perfmap__find(&m, 0x201f)->name, "second one");
	assert_null(perfmap__find(&m, 0x2020));
	assert_null(perfmap__find(&m, 0x3000));
	assert_null(perfmap__find(&m, 0xfff));
	perfmap__release(&m);
	strpool__free(pool);
}

static void test_sym_info_name(void **state)
{
	struct sym_info info = {.func = "main", .module = "/usr/bin/x", .offset = 0x10};
	char buf[64], tiny[5];

	assert_string_equal(sym_info__name(&info, buf, sizeof(buf)), "main");
	info.func = NULL;
	assert_string_equal(sym_info__name(&info, buf, sizeof(buf)), "x+0x10");
	info.module = "[kernel.kallsyms]";
	assert_string_equal(sym_info__name(&info, buf, sizeof(buf)), "[kernel.kallsyms]+0x10");
	info.module = NULL;
	info.offset = 0xdeadbeef;
	assert_string_equal(sym_info__name(&info, buf, sizeof(buf)), "[unknown]+0xdeadbeef");
	assert_string_equal(sym_info__name(&info, tiny, sizeof(tiny)), "[unk");
	assert_ptr_equal(sym_info__name(&info, tiny, 0), tiny);
	symbolizer__free(NULL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_maps_line),
		cmocka_unit_test(test_maps_file),
		cmocka_unit_test(test_maps_each_file),
		cmocka_unit_test(test_symbol_table),
		cmocka_unit_test(test_plt_names),
		cmocka_unit_test(test_segments),
		cmocka_unit_test(test_kallsyms_parse),
		cmocka_unit_test(test_perfmap_parse),
		cmocka_unit_test(test_sym_info_name),
		cmocka_unit_test(test_malformed_elf),
		cmocka_unit_test(test_fixture_pie),
		cmocka_unit_test(test_fixture_nopie),
		cmocka_unit_test(test_fixture_pie_stripped),
		cmocka_unit_test(test_unknown_in_library),
		cmocka_unit_test(test_deleted_file),
		cmocka_unit_test(test_debug_file),
		cmocka_unit_test(test_object_cache),
		cmocka_unit_test(test_exited_untracked),
		cmocka_unit_test(test_records_after_read),
		cmocka_unit_test(test_kernel),
		cmocka_unit_test(test_jit),
		cmocka_unit_test(test_vdso),
	};

	find_fixtures();
	elf_version(EV_CURRENT);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
