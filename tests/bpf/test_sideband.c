/* test_sideband.c: the kernel's process records (src/probe/sideband.c) in
 * the real kernel, feeding the real symbolizer. A fixture program started
 * after the sideband opened is named from what the kernel reported of its
 * exec and mappings -- after it has exited, with /proc never read for it;
 * a forked child runs its parent's code until it execs, and its samples of
 * either side are named in the right image; the pid filter follows a
 * command's descendants and nothing else. Needs root (skips without). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "probe/sideband.h"
#include "common/log.h"
#include "common/clock.h"
#include "symbolize/symbolize.h"
#include "fixture_child.h"

static void assert_named(struct symbolizer *s, uint32_t image, uint64_t addr, const char *want)
{
	struct sym_info si;

	assert_int_equal(symbolizer__resolve_image(s, image, addr, &si), 0);
	if (!si.func || strcmp(si.func, want))
		fail_msg("0x%" PRIx64 " named %s, not %s (module %s)", addr,
			 si.func ? si.func : "(nothing)", want, si.module ? si.module : "(none)");
}

/* A process born under the sideband is known without /proc, and stays
 * named after it is gone. */
static void test_named_after_exit(void **state)
{
	struct symbolizer *s = symbolizer__new();
	struct sideband_opts o = {0};
	struct sideband *sb = sideband__open(&o, s);
	struct symbolizer_stats st;
	struct sideband_stats sst;
	struct child c;
	uint32_t image;

	assert_non_null(sb);
	symbolizer__set_debug_dir(s, NULL);
	spawn_fixture("pie", &c);
	reap(&c); /* gone before a single record was read */
	sideband__poll(sb);
	image = symbolizer__image(s, (uint32_t)c.pid, mono_ns());
	assert_int_not_equal(image, 0);
	for (int i = 0; i < NFUNCS; i++)
		assert_named(s, image, c.addr[i], fix_funcs[i]);
	assert_string_equal(symbolizer__comm(s, (uint32_t)c.pid), "pie");
	symbolizer__stats(s, &st);
	assert_int_equal(st.maps_reads, 0); /* all of it from the kernel */
	sideband__stats(sb, &sst);
	assert_true(sst.execs >= 1 && sst.mmaps >= 3 && sst.forks >= 1);
	assert_true(sst.build_ids);
	assert_int_equal(sst.bad, 0);
	sideband__free(sb);
	symbolizer__free(s);
}

static __attribute__((noinline)) uint64_t here(void)
{
	return (uint64_t)(uintptr_t)__builtin_return_address(0);
}

/* Between fork and exec a child runs its parent's code (named in its first
 * image, inherited); after the exec, the new program's. */
static void test_images_across_exec(void **state)
{
	struct symbolizer *s = symbolizer__new();
	struct sideband_opts o = {0};
	struct sideband *sb = sideband__open(&o, s);
	uint64_t before, ours = here() - 1;
	uint32_t first, last;
	struct child c;

	assert_non_null(sb);
	symbolizer__set_debug_dir(s, NULL);
	before = mono_ns();
	spawn_fixture("pie", &c);
	sideband__poll(sb);
	/* Just after the fork: the child is a copy of this test. */
	first = symbolizer__image(s, (uint32_t)c.pid, before + 1);
	last = symbolizer__image(s, (uint32_t)c.pid, mono_ns());
	assert_int_not_equal(first, 0);
	assert_int_not_equal(first, last);
	assert_named(s, first, ours, "test_images_across_exec");
	assert_named(s, last, c.addr[ALPHA], "fix_alpha");
	reap(&c);
	sideband__poll(sb);
	/* Both images stay until the process is forgotten. */
	assert_named(s, first, ours, "test_images_across_exec");
	assert_named(s, last, c.addr[BETA], "fix_beta");
	assert_int_equal(symbolizer__forget_exited(s) >= 1, 1);
	assert_int_equal(symbolizer__image(s, (uint32_t)c.pid, mono_ns()) == last, 0);
	sideband__free(sb);
	symbolizer__free(s);
}

/* With a filter: the added pid's descendants are followed, no one else. */
static void test_filter(void **state)
{
	struct symbolizer *s = symbolizer__new(), *s2 = symbolizer__new();
	struct sideband_opts o = {.filter_pids = true};
	struct sideband *sb = sideband__open(&o, s), *none = sideband__open(&o, s2);
	struct sideband_stats st;
	pid_t child;

	assert_non_null(sb);
	assert_non_null(none);
	/* sb follows this test: its child, and the child's child that execs. */
	sideband__add_pid(sb, (uint32_t)getpid());
	child = fork();
	if (!child) {
		pid_t g = fork();

		if (!g) {
			execl("/bin/true", "true", (char *)NULL);
			_exit(127);
		}
		waitpid(g, NULL, 0);
		_exit(0);
	}
	assert_int_equal(waitpid(child, NULL, 0), child);
	sideband__poll(sb);
	sideband__poll(none);
	sideband__stats(sb, &st);
	assert_true(st.forks >= 2 && st.execs >= 1);
	/* none follows no one: the same records are filtered out. */
	sideband__stats(none, &st);
	assert_int_equal(st.execs, 0);
	assert_int_equal(st.forks, 0);
	assert_true(st.filtered > 0);
	sideband__free(sb);
	sideband__free(none);
	symbolizer__free(s);
	symbolizer__free(s2);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_named_after_exit),
		cmocka_unit_test(test_images_across_exec),
		cmocka_unit_test(test_filter),
	};

	if (geteuid() != 0) {
		printf("SKIP: the process records need root (CAP_PERFMON)\n");
		return 77;
	}
	log_init();
	find_fixtures();
	return cmocka_run_group_tests(tests, NULL, NULL);
}
