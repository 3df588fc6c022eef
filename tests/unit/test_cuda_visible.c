/* test_cuda_visible.c: a process's CUDA devices among the machine's GPUs
 * (src/agent/cuda_visible.c), read as the driver and the NVIDIA container
 * runtime read CUDA_VISIBLE_DEVICES and NVIDIA_VISIBLE_DEVICES. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent/cuda_visible.h"

static const char *const uuids[] = {
	"GPU-aaaa1111-0000-4000-8000-000000000000",
	"GPU-aaaa2222-0000-4000-8000-000000000001",
	"GPU-bbbb0000-0000-4000-8000-000000000002",
	"",
};

/* The map as "a,b,c". */
static const char *map(const char *cvd, const char *nvd, int max)
{
	static char out[128];
	int nvml_of[CUDA_VISIBLE_MAX], n = cuda_visible__map(cvd, nvd, uuids, 4, nvml_of, max);
	size_t len = 0;

	out[0] = '\0';
	for (int i = 0; i < n; i++)
		len += (size_t)snprintf(out + len, sizeof(out) - len, "%s%d", i ? "," : "",
					nvml_of[i]);
	return out;
}

static void test_unset(void **state)
{
	assert_string_equal(map(NULL, NULL, CUDA_VISIBLE_MAX), "0,1,2,3");
	assert_string_equal(map(NULL, "all", CUDA_VISIBLE_MAX), "0,1,2,3");
	assert_string_equal(map(NULL, NULL, 2), "0,1");
}

static void test_indices(void **state)
{
	assert_string_equal(map("2,0", NULL, CUDA_VISIBLE_MAX), "2,0");
	/* The list ends at the first entry that names no device, or one
	 * already listed. */
	assert_string_equal(map("1,7,2", NULL, CUDA_VISIBLE_MAX), "1");
	assert_string_equal(map("1,1,2", NULL, CUDA_VISIBLE_MAX), "1");
	assert_string_equal(map("1,x", NULL, CUDA_VISIBLE_MAX), "1");
	assert_string_equal(map("-1", NULL, CUDA_VISIBLE_MAX), "");
	assert_string_equal(map("", NULL, CUDA_VISIBLE_MAX), "");
	assert_string_equal(map("3,", NULL, CUDA_VISIBLE_MAX), "3");
}

static void test_uuids(void **state)
{
	assert_string_equal(
		map("GPU-bbbb0000-0000-4000-8000-000000000002,0", NULL, CUDA_VISIBLE_MAX), "2,0");
	/* A unique prefix names its device; one of two, none. */
	assert_string_equal(map("GPU-bbbb", NULL, CUDA_VISIBLE_MAX), "2");
	assert_string_equal(map("GPU-aaaa", NULL, CUDA_VISIBLE_MAX), "");
	assert_string_equal(map("GPU-aaaa2", NULL, CUDA_VISIBLE_MAX), "1");
	/* MIG instances are not devices of their own here. */
	assert_string_equal(map("MIG-aaaa1111", NULL, CUDA_VISIBLE_MAX), "");
	assert_string_equal(map("GPU-", NULL, CUDA_VISIBLE_MAX), "");
}

/* A container's GPUs in PCI order, whatever order they are given in; the
 * process's CUDA_VISIBLE_DEVICES indexes them. */
static void test_container(void **state)
{
	const char *nvd = "GPU-bbbb0000-0000-4000-8000-000000000002,GPU-aaaa2222";

	assert_string_equal(map(NULL, nvd, CUDA_VISIBLE_MAX), "1,2");
	assert_string_equal(map("1", nvd, CUDA_VISIBLE_MAX), "2");
	assert_string_equal(map("2", nvd, CUDA_VISIBLE_MAX), "");
	/* A prefix of two of the machine's names one of the container's. */
	assert_string_equal(map("GPU-aaaa", nvd, CUDA_VISIBLE_MAX), "1");
	assert_string_equal(map(NULL, "3,0", CUDA_VISIBLE_MAX), "0,3");
	assert_string_equal(map(NULL, "none", CUDA_VISIBLE_MAX), "");
	assert_string_equal(map(NULL, "void", CUDA_VISIBLE_MAX), "");
}

/* A process's environment as it started, from /proc: a child exec'ed with
 * CUDA_VISIBLE_DEVICES=2,0 sees GPUs 2 and 0; one gone, an error. */
static void test_of_pid(void **state)
{
	char *const argv[] = {"sleep", "30", NULL};
	char *const envp[] = {"CUDA_VISIBLE_DEVICES=2,0", NULL};
	int nvml_of[CUDA_VISIBLE_MAX], n = -1, status;
	char comm[32] = "";
	pid_t pid = fork();

	assert_true(pid >= 0);
	if (!pid) {
		execve("/bin/sleep", argv, envp);
		_exit(127);
	}
	/* Its environment is the new one once it has exec'ed (comm says). */
	for (int i = 0; i < 5000 && strcmp(comm, "sleep\n"); i++) {
		char path[64];
		FILE *f;

		snprintf(path, sizeof(path), "/proc/%d/comm", (int)pid);
		f = fopen(path, "r");
		if (!f || !fgets(comm, sizeof(comm), f))
			comm[0] = '\0';
		if (f)
			fclose(f);
		if (strcmp(comm, "sleep\n"))
			usleep(1000);
	}
	if (!strcmp(comm, "sleep\n"))
		n = cuda_visible__of_pid((uint32_t)pid, uuids, 4, nvml_of, CUDA_VISIBLE_MAX);
	kill(pid, SIGKILL);
	waitpid(pid, &status, 0);
	assert_string_equal(comm, "sleep\n");
	assert_int_equal(n, 2);
	assert_int_equal(nvml_of[0], 2);
	assert_int_equal(nvml_of[1], 0);
	assert_true(cuda_visible__of_pid((uint32_t)pid, uuids, 4, nvml_of, CUDA_VISIBLE_MAX) < 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_unset),  cmocka_unit_test(test_indices),
		cmocka_unit_test(test_uuids),  cmocka_unit_test(test_container),
		cmocka_unit_test(test_of_pid),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
