/* fixture_child.h: the fixture programs of tests/fixtures/ (PIE, non-PIE,
 * stripped, with a shared library) run as children that print the
 * addresses of their functions and wait -- for the symbolizer's tests
 * (tests/unit/test_symbolize.c) and the kernel records' (tests/bpf/
 * test_sideband.c). Static functions: each test includes it once. */
#ifndef SONDE_TESTS_FIXTURE_CHILD_H
#define SONDE_TESTS_FIXTURE_CHILD_H

#include <errno.h>
#include <inttypes.h>
#include <libgen.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define NFUNCS 4
static const char *const fix_funcs[NFUNCS] = {"fix_alpha", "fix_beta", "fix_delta",
					      "fix_lib_gamma"};
enum { ALPHA, BETA, DELTA, GAMMA };

struct child {
	pid_t pid;
	int stdin_fd;
	uint64_t addr[NFUNCS];
};

static char fixdir[PATH_MAX];

static const char *fixture(const char *name)
{
	static char path[PATH_MAX + 64];

	snprintf(path, sizeof(path), "%s/%s", fixdir, name);
	return path;
}

/* $B/fixtures, else build/fixtures found from this binary's place
 * (build/tests/ or build/tests/bpf/). */
static __attribute__((unused)) void find_fixtures(void)
{
	const char *b = getenv("B");
	char exe[PATH_MAX], *dir;
	ssize_t n;

	if (b) {
		snprintf(fixdir, sizeof(fixdir), "%s/fixtures", b);
		return;
	}
	n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (n <= 0) {
		snprintf(fixdir, sizeof(fixdir), "build/fixtures");
		return;
	}
	exe[n] = '\0';
	dir = dirname(exe);
	snprintf(fixdir, sizeof(fixdir), "%s/../fixtures", dir);
	if (access(fixdir, F_OK))
		snprintf(fixdir, sizeof(fixdir), "%s/../../fixtures", dir);
}

/* Starts the fixture program at path with "wait" and reads the addresses
 * it prints. */
static __attribute__((unused)) void spawn_path(const char *path, struct child *c)
{
	char line[256];
	int in[2], out[2], found = 0;
	FILE *f;

	if (access(path, X_OK))
		fail_msg("fixture %s is missing: %s -- run `make fixtures`", path, strerror(errno));
	assert_int_equal(pipe(in), 0);
	assert_int_equal(pipe(out), 0);
	c->pid = fork();
	assert_true(c->pid >= 0);
	if (!c->pid) {
		dup2(in[0], 0);
		dup2(out[1], 1);
		close(in[0]);
		close(in[1]);
		close(out[0]);
		close(out[1]);
		execl(path, path, "wait", (char *)NULL);
		_exit(127);
	}
	close(in[0]);
	close(out[1]);
	c->stdin_fd = in[1];
	f = fdopen(out[0], "r");
	assert_non_null(f);
	while (fgets(line, sizeof(line), f) && strcmp(line, "ready\n")) {
		char fn[64];
		uint64_t addr;

		if (sscanf(line, "%63s %" SCNx64, fn, &addr) != 2)
			continue;
		for (int i = 0; i < NFUNCS; i++) {
			if (!strcmp(fn, fix_funcs[i])) {
				c->addr[i] = addr;
				found++;
			}
		}
	}
	fclose(f);
	if (found != NFUNCS)
		fail_msg("fixture %s printed %d of %d addresses", path, found, NFUNCS);
}

static __attribute__((unused)) void spawn_fixture(const char *name, struct child *c)
{
	char path[PATH_MAX + 64];

	snprintf(path, sizeof(path), "%s", fixture(name));
	spawn_path(path, c);
}

static __attribute__((unused)) void reap(struct child *c)
{
	int status;

	close(c->stdin_fd);
	kill(c->pid, SIGKILL);
	assert_int_equal(waitpid(c->pid, &status, 0), c->pid);
	assert_int_equal(kill(c->pid, 0), -1); /* really gone */
}

/* The value of symbol sym in file, from nm (-D: the dynamic symbols). */
static __attribute__((unused)) uint64_t nm_value(const char *file, bool dynamic, const char *sym)
{
	char cmd[2 * PATH_MAX], line[512], name[256], type;
	uint64_t value = 0, v;
	FILE *p;

	snprintf(cmd, sizeof(cmd), "nm %s '%s' 2>/dev/null", dynamic ? "-D" : "", file);
	p = popen(cmd, "r");
	assert_non_null(p);
	while (fgets(line, sizeof(line), p))
		if (sscanf(line, "%" SCNx64 " %c %255s", &v, &type, name) == 3 &&
		    !strcmp(name, sym))
			value = v;
	pclose(p);
	if (!value)
		fail_msg("nm found no %s in %s", sym, file);
	return value;
}

/* The build-id of file, from readelf -n. */
static __attribute__((unused)) void readelf_build_id(const char *file, char *out, size_t size)
{
	char cmd[2 * PATH_MAX], line[512];
	FILE *p;

	out[0] = '\0';
	snprintf(cmd, sizeof(cmd), "readelf -n '%s' 2>/dev/null", file);
	p = popen(cmd, "r");
	assert_non_null(p);
	while (fgets(line, sizeof(line), p)) {
		char *id = strstr(line, "Build ID: ");

		if (id)
			snprintf(out, size, "%.*s", (int)strcspn(id + 10, " \n"), id + 10);
	}
	pclose(p);
	if (!out[0])
		fail_msg("readelf found no build-id in %s", file);
}

#endif
