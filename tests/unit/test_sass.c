/* test_sass.c: GPU instructions named by nvdisasm (src/agent/sass.c) --
 * its output parsed (functions, offsets, mnemonics past a predicate,
 * lines that are not instructions), and the worker that runs it: a lookup
 * is pending until the disassembly is in, then named; an offset or a
 * function the cubin lacks is not; a disassembler that fails, or a cubin
 * never told, names nothing; one that never ends is killed when the table
 * is freed. The disassembler here is a shell script
 * written by the test that prints nvdisasm's format (NVIDIA's is not
 * installed on these machines). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "agent/sass.h"

static const char listing[] =
	"\t.headerflags\t@\"EF_CUDA_TEXMODE_UNIFIED EF_CUDA_64BIT_ADDRESS EF_CUDA_SM90\"\n"
	"\t.section\t.text._Z9vec_scalePfi,\"ax\",@progbits\n"
	"\t.sectioninfo\t@\"SHI_REGISTERS=12\"\n"
	"        .global         _Z9vec_scalePfi\n"
	"_Z9vec_scalePfi:\n"
	".text._Z9vec_scalePfi:\n"
	"        /*0000*/                   LDC R1, c[0x0][0x28] ;\n"
	"        /*0010*/                   S2R R0, SR_TID.X ;\n"
	"        /*0020*/              @!P0 LDG.E.128 R4, desc[UR4][R2.64] ;\n"
	"        /*0030*/                   FFMA R5, R4, R7, R6 ;\n"
	"        /*0040*/                   EXIT ;\n"
	".L_x_0:\n"
	"        /*0050*/                   BRA `(.L_x_0);\n"
	"\t.section\t.text.relu,\"ax\",@progbits\n"
	".text.relu:\n"
	"        /*0000*/                   {  IADD3 R1, R1, -0x8, RZ ;\n"
	"        /*0010*/                   garbage without a semicolon\n"
	"        /*zz*/                     NOP ;\n"
	"        /*0020*/ @P1 ;\n";

struct seen {
	char text[64][96];
	int n;
};

static void collect(void *ctx, const char *function, uint64_t offset, const char *mnemonic)
{
	struct seen *s = ctx;

	if (s->n < 64)
		snprintf(s->text[s->n++], sizeof(s->text[0]), "%s+0x%llx %s", function,
			 (unsigned long long)offset, mnemonic);
}

static void test_parse(void **state)
{
	struct seen s = {0};
	size_t n = sass_parse(listing, sizeof(listing) - 1, collect, &s);

	assert_int_equal(n, 8);
	assert_string_equal(s.text[0], "_Z9vec_scalePfi+0x0 LDC");
	assert_string_equal(s.text[2], "_Z9vec_scalePfi+0x20 LDG.E.128");
	assert_string_equal(s.text[5], "_Z9vec_scalePfi+0x50 BRA");
	assert_string_equal(s.text[6], "relu+0x0 IADD3");
	assert_string_equal(s.text[7], "relu+0x10 garbage");
	/* No function yet: nothing. */
	memset(&s, 0, sizeof(s));
	assert_int_equal(sass_parse("/*0000*/ NOP ;\n", 15, collect, &s), 0);
	/* A line past the bound is cut, not overrun. */
	{
		size_t len = 100000;
		char *big = malloc(len);

		memset(big, 'x', len);
		memcpy(big, ".text.f:\n/*0000*/ ", 18);
		assert_int_equal(sass_parse(big, len, collect, &s), 0);
		free(big);
	}
}

static char dir[] = "/tmp/sonde-test-sass-XXXXXX";

/* An executable script at dir/name printing body's output. */
static char *script(const char *name, const char *body)
{
	char *path = malloc(512);
	FILE *f;

	snprintf(path, 512, "%s/%s", dir, name);
	f = fopen(path, "w");
	assert_non_null(f);
	fprintf(f, "#!/bin/sh\n%s\n", body);
	fclose(f);
	chmod(path, 0755);
	return path;
}

static void test_worker(void **state)
{
	char cubin[600], body[1024], *tool, *bad;
	const char *mn = NULL;
	struct sass_stats st;
	struct sass *s;
	FILE *f;

	assert_non_null(mkdtemp(dir));
	snprintf(cubin, sizeof(cubin), "%s/0123.cubin", dir);
	f = fopen(cubin, "w");
	fputs("not a real cubin", f);
	fclose(f);
	/* Prints the listing when given -c and the cubin, fails otherwise. */
	f = fopen(strcat(strcpy(body, dir), "/listing"), "w");
	fputs(listing, f);
	fclose(f);
	snprintf(body, sizeof(body), "[ \"$1\" = -c ] && [ -r \"$2\" ] || exit 2\ncat %s/listing",
		 dir);
	tool = script("nvdisasm", body);
	bad = script("nvdisasm-bad", "echo 'nvdisasm fatal : not a cubin' >&2; exit 1");

	s = sass__new(tool);
	assert_non_null(s);
	/* A cubin never told: no name. */
	assert_int_equal(sass__lookup(s, 0x99, "_Z9vec_scalePfi", 0x20, &mn), SASS_NONE);
	sass__cubin(s, (uint32_t)getpid(), 0x123, cubin);
	assert_int_equal(sass__lookup(s, 0x123, "_Z9vec_scalePfi", 0x20, &mn), SASS_PENDING);
	assert_true(sass__wait(s, 30000));
	assert_int_equal(sass__lookup(s, 0x123, "_Z9vec_scalePfi", 0x20, &mn), SASS_READY);
	assert_string_equal(mn, "LDG.E.128");
	assert_int_equal(sass__lookup(s, 0x123, "_Z9vec_scalePfi", 0x30, &mn), SASS_READY);
	assert_string_equal(mn, "FFMA");
	assert_int_equal(sass__lookup(s, 0x123, "_Z9vec_scalePfi", 0x28, &mn), SASS_NONE);
	/* Another function of the cubin: a run of its own. */
	assert_int_equal(sass__lookup(s, 0x123, "relu", 0, &mn), SASS_PENDING);
	assert_int_equal(sass__lookup(s, 0x123, "_Z4nonev", 0, &mn), SASS_PENDING);
	assert_true(sass__wait(s, 30000));
	assert_int_equal(sass__lookup(s, 0x123, "relu", 0, &mn), SASS_READY);
	assert_string_equal(mn, "IADD3");
	assert_int_equal(sass__lookup(s, 0x123, "_Z4nonev", 0, &mn), SASS_NONE);
	sass__stats(s, &st);
	assert_int_equal(st.failures, 0);
	assert_true(st.runs >= 2);
	sass__free(s);

	/* A disassembler that fails: nothing named, said once per cubin. */
	s = sass__new(bad);
	sass__cubin(s, (uint32_t)getpid(), 0x123, cubin);
	assert_int_equal(sass__lookup(s, 0x123, "relu", 0, &mn), SASS_PENDING);
	assert_true(sass__wait(s, 30000));
	assert_int_equal(sass__lookup(s, 0x123, "relu", 0, &mn), SASS_NONE);
	assert_int_equal(sass__lookup(s, 0x123, "_Z9vec_scalePfi", 0, &mn), SASS_NONE);
	sass__stats(s, &st);
	assert_int_equal(st.failures, 1);
	sass__free(s);

	/* One that never ends: stopping kills it (no wait for its timeout). */
	{
		char *slow = script("nvdisasm-slow", "exec sleep 300");
		time_t t0 = time(NULL);

		s = sass__new(slow);
		sass__cubin(s, (uint32_t)getpid(), 0x123, cubin);
		assert_int_equal(sass__lookup(s, 0x123, "relu", 0, &mn), SASS_PENDING);
		assert_false(sass__wait(s, 200));
		sass__free(s);
		assert_true(time(NULL) - t0 < SASS_TIMEOUT_MS / 1000);
		free(slow);
	}

	/* No disassembler at all. */
	assert_null(sass__new("/nonexistent/nvdisasm"));
	assert_int_equal(sass__lookup(NULL, 0x123, "relu", 0, &mn), SASS_NONE);
	free(tool);
	free(bad);
	snprintf(body, sizeof(body), "rm -rf '%s'", dir);
	assert_int_equal(system(body), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_parse),
		cmocka_unit_test(test_worker),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
