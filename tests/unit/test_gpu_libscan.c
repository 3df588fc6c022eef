/* test_gpu_libscan.c: unit tests of src/probe/libscan.c, the file side of
 * the GPU probes: library names, and function offsets read (through
 * src/symbolize/elf.h; its maps parser is test_symbolize's) from real ELF
 * files -- the symbolizer fixtures (a non-PIE executable, whose addresses
 * differ from its file offsets; a stripped PIE with only .dynsym), glibc (a
 * function with a default and a hidden version) and, when installed, the real
 * libcudart.so.13 (versioned names); and the record_function call sites of
 * a stand-in libtorch (tests/fixtures/record_function.cc) and, when
 * installed, the real libtorch_cpu. Expected offsets come from nm, readelf
 * and objdump, not from our own parser. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <inttypes.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "symbolize/elf.h"
#include "probe/libscan.h"

static char fixdir[PATH_MAX];

static const char *fixture(const char *name)
{
	static char path[PATH_MAX + 64];

	snprintf(path, sizeof(path), "%s/%s", fixdir, name);
	return path;
}

/* The fixtures are in $B/fixtures, else next to this binary. */
static void find_fixtures(void)
{
	const char *b = getenv("B");
	char exe[PATH_MAX];
	ssize_t n;

	if (b) {
		snprintf(fixdir, sizeof(fixdir), "%s/fixtures", b);
		return;
	}
	n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	assert_true(n > 0);
	exe[n] = 0;
	snprintf(fixdir, sizeof(fixdir), "%s/../fixtures", dirname(exe));
}

/* The value of name as nm prints it ("-D" for .dynsym), preferring the
 * default version "name@@VER"; 0 if absent. */
static uint64_t nm_value(const char *path, bool dynamic, const char *name)
{
	char cmd[PATH_MAX + 64], line[1024], sym[512], type;
	unsigned long long v, found = 0;
	size_t len = strlen(name);
	FILE *p;

	snprintf(cmd, sizeof(cmd), "nm %s --defined-only '%s' 2>/dev/null", dynamic ? "-D" : "",
		 path);
	p = popen(cmd, "r");
	assert_non_null(p);
	while (fgets(line, sizeof(line), p)) {
		if (sscanf(line, "%llx %c %511s", &v, &type, sym) != 3 || strncmp(sym, name, len))
			continue;
		if (!sym[len] || !strncmp(sym + len, "@@", 2))
			found = v;
		else if (sym[len] == '@' && !found)
			found = v;
	}
	pclose(p);
	return found;
}

/* The file offset of address v, through the PT_LOAD that readelf shows
 * holding it. */
static uint64_t readelf_offset(const char *path, uint64_t v)
{
	char cmd[PATH_MAX + 64], line[1024];
	unsigned long long off, vaddr, paddr, filesz;
	uint64_t found = 0;
	FILE *p;

	snprintf(cmd, sizeof(cmd), "readelf -lW '%s'", path);
	p = popen(cmd, "r");
	assert_non_null(p);
	while (fgets(line, sizeof(line), p)) {
		if (sscanf(line, " LOAD 0x%llx 0x%llx 0x%llx 0x%llx", &off, &vaddr, &paddr,
			   &filesz) != 4)
			continue;
		if (v >= vaddr && v < vaddr + filesz)
			found = v - vaddr + off;
	}
	pclose(p);
	return found;
}

static void test_classify(void **state)
{
	assert_int_equal(libscan_classify("/usr/local/cuda/lib64/libcudart.so.13"), LIBSCAN_RT);
	assert_int_equal(libscan_classify("libcudart.so"), LIBSCAN_RT);
	assert_int_equal(libscan_classify("/usr/lib/x86_64-linux-gnu/libcuda.so.580.65.06"),
			 LIBSCAN_DRV);
	assert_int_equal(libscan_classify("/x/libcuda.so.1"), LIBSCAN_DRV);
	assert_int_equal(libscan_classify("/x/libnccl.so.2"), LIBSCAN_NCCL);
	assert_int_equal(libscan_classify("/x/libnccl.so.2.28.9"), LIBSCAN_NCCL);
	assert_int_equal(libscan_classify("/usr/lib/x86_64-linux-gnu/libtorch_cpu.so.1.13.0"),
			 LIBSCAN_TORCH);
	assert_int_equal(libscan_classify("torch/lib/libtorch_cpu.so"), LIBSCAN_TORCH);
	assert_int_equal(libscan_classify("torch/lib/libtorch_cuda.so"), 0);
	assert_int_equal(libscan_classify("torch/lib/libtorch.so"), 0);
	/* Neighbours that are not the API. */
	assert_int_equal(libscan_classify("/x/libcudadevrt.a"), 0);
	assert_int_equal(libscan_classify("/x/libcudart_static.a"), 0);
	assert_int_equal(libscan_classify("/x/libcudnn.so.9"), 0);
	assert_int_equal(libscan_classify("/x/libcuda.so.1-old"), 0);
	assert_int_equal(libscan_classify("/x/libcuda.so.1.bak"), 0);
	assert_int_equal(libscan_classify("/libcuda.so.1/other.so"), 0);
	assert_int_equal(libscan_classify("/x/libnccl-net.so"), 0);
	assert_int_equal(libscan_classify(""), 0);
}

static void expect_same_as_nm(const char *path, bool with_symtab, const char *const *names,
			      size_t n)
{
	uint64_t offsets[16];
	int found;

	assert_true(n <= 16);
	found = elf_find_syms(path, names, n, offsets, with_symtab ? ELF_FIND_SYMTAB : 0);
	assert_int_equal(found, (int)n);
	for (size_t i = 0; i < n; i++) {
		uint64_t v = nm_value(path, !with_symtab, names[i]);
		uint64_t want = readelf_offset(path, v);

		assert_true(v != 0);
		assert_true(want != 0);
		if (offsets[i] != want)
			fail_msg("%s in %s: offset 0x%" PRIx64 ", nm/readelf say 0x%" PRIx64,
				 names[i], path, offsets[i], want);
	}
}

/* A non-PIE executable: text at 0x401000 is at file offset 0x1000, so a
 * symbol value is not an offset. Its functions are only in .symtab. */
static void test_symtab_nopie(void **state)
{
	const char *names[] = {"fix_alpha", "fix_beta", "main"};
	uint64_t offsets[3];

	expect_same_as_nm(fixture("nopie"), true, names, 3);
	/* Without .symtab they are not found: the executable exports nothing. */
	assert_int_equal(elf_find_syms(fixture("nopie"), names, 3, offsets, 0), 0);
	assert_int_equal(offsets[0], 0);
	assert_true(
		nm_value(fixture("nopie"), false, "fix_alpha") !=
		readelf_offset(fixture("nopie"), nm_value(fixture("nopie"), false, "fix_alpha")));
}

/* Stripped of .symtab, -rdynamic: the functions are in .dynsym. */
static void test_dynsym_stripped(void **state)
{
	const char *names[] = {"fix_alpha", "fix_beta"};

	expect_same_as_nm(fixture("pie-stripped"), false, names, 2);
}

static void test_shared_library(void **state)
{
	const char *names[] = {"fix_lib_gamma"};

	expect_same_as_nm(fixture("libfix.so"), false, names, 1);
}

/* realpath has a default version (@@GLIBC_2.3) and a hidden one
 * (@GLIBC_2.2.5) at another address: the default is the one callers get. */
static void test_default_version_wins(void **state)
{
	const char *libc = "/lib/x86_64-linux-gnu/libc.so.6";
	const char *names[] = {"realpath", "pthread_cond_wait", "no_such_function_here"};
	uint64_t offsets[3];

	if (access(libc, R_OK)) {
		skip();
		return;
	}
	assert_int_equal(elf_find_syms(libc, names, 3, offsets, 0), 2);
	assert_int_equal(offsets[0], readelf_offset(libc, nm_value(libc, true, "realpath")));
	assert_int_equal(offsets[1],
			 readelf_offset(libc, nm_value(libc, true, "pthread_cond_wait")));
	assert_int_equal(offsets[2], 0);
}

/* The real runtime: names are versioned (cudaMalloc@@libcudart.so.13). */
static void test_real_cudart(void **state)
{
	const char *lib = "/usr/local/cuda/lib64/libcudart.so.13";
	const char *names[] = {"cudaLaunchKernel", "cudaMalloc", "__cudaGetKernel",
			       "cudaStreamSynchronize_ptsz", "cudaMemcpyAsync"};

	if (access(lib, R_OK)) {
		skip();
		return;
	}
	expect_same_as_nm(lib, false, names, 5);
}

/* The extent [lo, hi) of function name in path (nm -D -S), as file offsets. */
static void nm_extent(const char *path, const char *name, uint64_t *lo, uint64_t *hi)
{
	char cmd[PATH_MAX + 128], line[1024], sym[512], type;
	unsigned long long v, size;
	FILE *p;

	*lo = *hi = 0;
	snprintf(cmd, sizeof(cmd), "nm -D -S --defined-only '%s' 2>/dev/null", path);
	p = popen(cmd, "r");
	assert_non_null(p);
	while (fgets(line, sizeof(line), p))
		if (sscanf(line, "%llx %llx %c %511s", &v, &size, &type, sym) == 4 &&
		    !strcmp(sym, name)) {
			*lo = readelf_offset(path, v);
			*hi = *lo + size;
		}
	pclose(p);
	assert_true(*hi > *lo);
}

/* The stand-in RecordFunction (tests/fixtures/record_function.cc): the
 * scope opened with USER_SCOPE in rf_enter and its explicit end() in
 * rf_exit (a tail call) are found, and nothing else -- not the
 * operator's scope (FUNCTION) in rf_operator, nor the end() that the
 * destructor calls. */
static void test_torch_sites(void **state)
{
	struct libscan_torch_sites ts;
	uint64_t lo, hi;

	assert_int_equal(libscan_torch_sites(fixture("librecfn.so"), &ts), 0);
	assert_int_equal(ts.nbegin, 1);
	assert_int_equal(ts.nend, 1);
	nm_extent(fixture("librecfn.so"), "rf_enter", &lo, &hi);
	assert_true(ts.begin[0] >= lo && ts.begin[0] < hi);
	nm_extent(fixture("librecfn.so"), "rf_exit", &lo, &hi);
	assert_true(ts.end[0] >= lo && ts.end[0] < hi);
	/* Not a libtorch: no RecordFunction to find. */
	assert_int_equal(libscan_torch_sites(fixture("libfix.so"), &ts), -ENODATA);
	assert_int_equal(ts.nbegin + ts.nend, 0);
	assert_int_equal(libscan_torch_sites("/nonexistent/libtorch_cpu.so", &ts), -ENOENT);
	assert_int_equal(libscan_torch_sites("/proc/self/status", &ts), -ENOEXEC);
}

/* The real libtorch_cpu (Debian's python3-torch), when installed: every
 * site is a call or jump to the constructor's or end()'s PLT stub, as
 * objdump decodes it. */
static void test_torch_sites_real(void **state)
{
	const char *lib = "/usr/lib/python3/dist-packages/torch/lib/libtorch_cpu.so";
	struct libscan_torch_sites ts;

	if (access(lib, R_OK)) {
		skip();
		return;
	}
	assert_int_equal(libscan_torch_sites(lib, &ts), 0);
	assert_true(ts.nbegin >= 1 && ts.nend >= 1);
	for (size_t i = 0; i < ts.nbegin + ts.nend; i++) {
		bool begin = i < ts.nbegin;
		uint64_t off = begin ? ts.begin[i] : ts.end[i - ts.nbegin];
		char cmd[PATH_MAX + 256], line[1024] = "";
		FILE *p;

		/* libtorch_cpu's text is at the same offsets as its addresses. */
		snprintf(cmd, sizeof(cmd),
			 "objdump -d --start-address=0x%" PRIx64 " --stop-address=0x%" PRIx64
			 " '%s' | grep -E '^ +[0-9a-f]+:'",
			 off, off + 5, lib);
		p = popen(cmd, "r");
		assert_non_null(p);
		if (!fgets(line, sizeof(line), p))
			line[0] = 0;
		pclose(p);
		/* The constructor is called; end() maybe tail-called. */
		if ((!strstr(line, "call") && (begin || !strstr(line, "jmp"))) ||
		    !strstr(line, begin ? "<_ZN2at14RecordFunctionC1ENS_11RecordScopeE@plt>"
					: "<_ZN2at14RecordFunction3endEv@plt>"))
			fail_msg("site 0x%" PRIx64 " is not a call of the %s: %s", off,
				 begin ? "constructor" : "end()", line);
	}
}

static void test_bad_files(void **state)
{
	const char *names[] = {"main"};
	char tmp[] = "/tmp/sonde-libscan-XXXXXX";
	uint64_t offsets[1] = {123};
	char buf[4096];
	FILE *in, *out;
	size_t n;
	int fd, err;

	assert_int_equal(elf_find_syms("/nonexistent/lib.so", names, 1, offsets, ELF_FIND_SYMTAB),
			 -ENOENT);
	assert_int_equal(offsets[0], 0);
	assert_int_equal(elf_find_syms("/proc/self/status", names, 1, offsets, ELF_FIND_SYMTAB),
			 -ENOEXEC);
	/* A library cut short: an error or nothing found, never a crash. */
	fd = mkstemp(tmp);
	assert_true(fd >= 0);
	out = fdopen(fd, "w");
	in = fopen(fixture("libfix.so"), "r");
	assert_non_null(in);
	n = fread(buf, 1, sizeof(buf), in);
	fwrite(buf, 1, n > 1000 ? 1000 : n, out);
	fclose(in);
	fclose(out);
	err = elf_find_syms(tmp, names, 1, offsets, ELF_FIND_SYMTAB);
	assert_true(err <= 0);
	assert_int_equal(offsets[0], 0);
	unlink(tmp);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_classify),
		cmocka_unit_test(test_symtab_nopie),
		cmocka_unit_test(test_dynsym_stripped),
		cmocka_unit_test(test_shared_library),
		cmocka_unit_test(test_default_version_wins),
		cmocka_unit_test(test_real_cudart),
		cmocka_unit_test(test_torch_sites),
		cmocka_unit_test(test_torch_sites_real),
		cmocka_unit_test(test_bad_files),
	};

	find_fixtures();
	return cmocka_run_group_tests(tests, NULL, NULL);
}
