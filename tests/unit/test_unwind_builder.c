/* test_unwind_builder.c: unit tests of src/unwind/builder.c, the thread
 * that builds unwind tables while the agent keeps polling: a submitted
 * file's table comes back whole (the same as built on the caller's
 * thread), a file already in flight is refused, the queue is bounded, and
 * freeing the builder with jobs pending closes their files. */
#include <errno.h>
#include <fcntl.h>
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

#include "unwind/builder.h"

#define LIBC "/usr/lib/x86_64-linux-gnu/libc.so.6"

static struct unw_job *job_of(const char *path, uint64_t ino)
{
	struct unw_job *j = calloc(1, sizeof(*j));

	assert_non_null(j);
	j->fd = open(path, O_RDONLY | O_CLOEXEC);
	assert_true(j->fd >= 0);
	j->key.dev = 1;
	j->key.ino = ino;
	j->max_rows = 1 << 20;
	snprintf(j->name, sizeof(j->name), "%s", path);
	return j;
}

static void test_builds_off_thread(void **state)
{
	struct unw_builder *b = unw_builder__new();
	struct unw_job *j = job_of(LIBC, 7), *dup = job_of(LIBC, 7), *got;
	struct unw_table ref = {0};
	char why[256];

	assert_non_null(b);
	assert_true(unw_builder__submit(b, j));
	assert_true(unw_builder__has(b, &j->key));
	/* The same file again while it is in flight: refused, kept by us. */
	assert_false(unw_builder__submit(b, dup));
	close(dup->fd);
	free(dup);

	unw_builder__wait(b);
	got = unw_builder__take(b);
	assert_ptr_equal(got, j);
	assert_null(unw_builder__take(b));
	assert_false(unw_builder__has(b, &got->key));
	assert_int_equal(got->err, 0);
	assert_true(got->t.n > 1000);

	/* As built here. */
	assert_int_equal(unw_table__build_file(LIBC, 1 << 20, &ref, why, sizeof(why)), 0);
	assert_int_equal(ref.n, got->t.n);
	assert_memory_equal(ref.rows, got->t.rows, ref.n * sizeof(ref.rows[0]));
	unw_table__free(&ref);
	unw_table__free(&got->t);
	close(got->fd);
	free(got);
	unw_builder__free(b);
}

/* A file with no table: the error comes back with the job. */
static void test_error_comes_back(void **state)
{
	struct unw_builder *b = unw_builder__new();
	struct unw_job *j = job_of("/dev/null", 9), *got;

	assert_true(unw_builder__submit(b, j));
	unw_builder__wait(b);
	got = unw_builder__take(b);
	assert_non_null(got);
	assert_true(got->err < 0);
	assert_int_equal(got->t.n, 0);
	close(got->fd);
	free(got);
	unw_builder__free(b);
}

/* At most UNW_BUILDER_MAX_JOBS in flight; freed with jobs queued, built
 * and not taken. */
static void test_bounded(void **state)
{
	struct unw_builder *b = unw_builder__new();
	struct unw_job *extra;
	int fds_before = 0, fds_after = 0;

	for (int fd = 0; fd < 1024; fd++)
		fds_before += fcntl(fd, F_GETFD) >= 0;
	for (int i = 0; i < UNW_BUILDER_MAX_JOBS; i++)
		assert_true(unw_builder__submit(b, job_of(LIBC, 100 + i)));
	extra = job_of(LIBC, 1000);
	assert_false(unw_builder__submit(b, extra));
	close(extra->fd);
	free(extra);
	unw_builder__free(b);
	for (int fd = 0; fd < 1024; fd++)
		fds_after += fcntl(fd, F_GETFD) >= 0;
	assert_int_equal(fds_after, fds_before);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_builds_off_thread),
		cmocka_unit_test(test_error_comes_back),
		cmocka_unit_test(test_bounded),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
