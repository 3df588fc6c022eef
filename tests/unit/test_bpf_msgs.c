/* test_bpf_msgs.c: libbpf's messages reach Sonde's log at debug level only,
 * a line each; the hints say what to do per errno. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <bpf/libbpf.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "probe/bpf_msgs.h"
#include "common/log.h"

/* What opening a bogus BPF object writes on stderr at level. */
static char *stderr_of_bad_object(enum log_level level)
{
	static const char junk[64] = "not an ELF file";
	char path[] = "/tmp/test_bpf_msgs.XXXXXX";
	int fd = mkstemp(path), saved = dup(STDERR_FILENO);
	struct bpf_object *obj;
	char *text = calloc(1, 65536);
	FILE *f;

	assert_true(fd >= 0 && saved >= 0 && text);
	fflush(stderr);
	dup2(fd, STDERR_FILENO);
	log_set_level(level);
	obj = bpf_object__open_mem(junk, sizeof(junk), NULL);
	assert_true(libbpf_get_error(obj) != 0 || obj == NULL);
	fflush(stderr);
	dup2(saved, STDERR_FILENO);
	close(saved);
	f = fdopen(fd, "r");
	rewind(f);
	fread(text, 1, 65535, f);
	fclose(f);
	unlink(path);
	return text;
}

static void test_libbpf_to_log(void **state)
{
	char *text;

	bpf_msgs__init();
	text = stderr_of_bad_object(LOG_DEBUG);
	assert_non_null(strstr(text, "sonde: debug: libbpf: "));
	/* A line each: no line without Sonde's prefix. */
	for (char *l = text; *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : l + strlen(l))
		assert_int_equal(strncmp(l, "sonde: ", 7), 0);
	free(text);
	text = stderr_of_bad_object(LOG_INFO);
	assert_string_equal(text, "");
	free(text);
	log_set_level(LOG_INFO);
}

static void test_hints(void **state)
{
	char buf[160];
	FILE *f = fopen("/proc/sys/kernel/perf_event_max_sample_rate", "r");
	long max = 0;

	assert_non_null(strstr(perf_open_hint(-EACCES, 99, buf, sizeof(buf)), "CAP_PERFMON"));
	assert_non_null(strstr(perf_open_hint(-EMFILE, 99, buf, sizeof(buf)), "ulimit -n"));
	assert_non_null(strstr(perf_open_hint(-ENODEV, 99, buf, sizeof(buf)), "offline"));
	assert_string_equal(perf_open_hint(-EFAULT, 99, buf, sizeof(buf)), "");
	if (f && fscanf(f, "%ld", &max) == 1) {
		char want[64];

		snprintf(want, sizeof(want), "%ld Hz is above", max + 1);
		assert_non_null(
			strstr(perf_open_hint(-EINVAL, (int)max + 1, buf, sizeof(buf)), want));
		assert_null(strstr(perf_open_hint(-EINVAL, 1, buf, sizeof(buf)), "is above"));
	}
	if (f)
		fclose(f);
	assert_non_null(strstr(uprobe_hint(-EPERM), "root"));
	assert_non_null(strstr(uprobe_hint(-EINVAL), "instruction"));
	assert_string_equal(uprobe_hint(-EFAULT), "");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_libbpf_to_log),
		cmocka_unit_test(test_hints),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
