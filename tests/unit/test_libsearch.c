/* test_libsearch.c: the search for CUDA and NCCL library files
 * (src/probe/libsearch.c) -- which mounts of a mountinfo text it walks
 * (local filesystems, escapes undone, /proc /sys /dev and network ones
 * skipped, malformed lines ignored), and the walk itself over a tree made
 * here: every libcudart.so*, libcuda.so*, libnccl.so* file found at any
 * depth, nothing else, no symbolic link followed. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "probe/libsearch.h"
#include "common/xalloc.h"

struct names {
	char *v[64];
	size_t n;
};

static void collect(void *ctx, const char *path)
{
	struct names *n = ctx;

	assert_true(n->n < 64);
	n->v[n->n++] = xstrdup(path);
}

static void names_free(struct names *n)
{
	for (size_t i = 0; i < n->n; i++)
		free(n->v[i]);
	n->n = 0;
}

static bool has(const struct names *n, const char *s)
{
	for (size_t i = 0; i < n->n; i++)
		if (!strcmp(n->v[i], s))
			return true;
	return false;
}

static void test_mounts(void **state)
{
	static const char text[] =
		"22 27 0:21 / /proc rw,relatime - proc proc rw\n"
		"27 1 254:0 / / rw,relatime - ext4 /dev/vda rw\n"
		"30 25 0:27 / /dev/shm rw,relatime - tmpfs tmpfs rw\n"
		"40 27 0:40 / /home/me/my\\040envs rw shared:1 - xfs /dev/sdb rw\n"
		"41 27 0:41 / /data rw - nfs4 server:/x rw\n"
		"42 27 0:42 / /var/lib/docker/overlay2/x/merged rw - overlay overlay rw\n"
		"43 27 0:43 / /sys/fs/cgroup rw - tmpfs tmpfs rw\n"
		"garbage without the separator\n"
		"44 27 0:44 / relative rw - ext4 /dev/sdc rw\n"
		"45 27 0:45 / /fuse rw - fuse.sshfs host:/ rw\n";
	FILE *f = fmemopen((void *)text, sizeof(text) - 1, "r");
	struct names n = {0};

	assert_int_equal(libsearch_mounts(f, collect, &n), 3);
	fclose(f);
	assert_true(has(&n, "/"));
	assert_true(has(&n, "/home/me/my envs"));
	assert_true(has(&n, "/var/lib/docker/overlay2/x/merged"));
	names_free(&n);
}

static void make_file(const char *dir, const char *name)
{
	char path[PATH_MAX];
	int fd;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	fd = open(path, O_CREAT | O_WRONLY | O_TRUNC, 0644);
	assert_true(fd >= 0);
	close(fd);
}

static void test_walk(void **state)
{
	char root[] = "/tmp/sonde-libsearch-XXXXXX", path[PATH_MAX], deep[PATH_MAX + 32],
	     mi[PATH_MAX + 32];
	struct libsearch_opts o = {.mountinfo = mi};
	struct libsearch_stats st;
	struct names n = {0};
	struct libsearch *s;
	FILE *f;

	assert_non_null(mkdtemp(root));
	snprintf(path, sizeof(path), "%s/venv/lib/python3.11/site-packages/nvidia/cuda/lib", root);
	for (char *p = path + strlen(root) + 1; (p = strchr(p, '/')); p++) {
		*p = 0;
		mkdir(path, 0755);
		*p = '/';
	}
	mkdir(path, 0755);
	make_file(path, "libcudart.so.12");
	make_file(path, "libcublas.so.12");
	make_file(root, "libnccl.so.2");
	make_file(root, "libcuda.so.1");
	make_file(root, "libcudart_static.a");
	make_file(root, "notes.txt");
	/* A link to the venv's library is not a file of its own. */
	snprintf(deep, sizeof(deep), "%s/libcudart.so.12", path);
	snprintf(mi, sizeof(mi), "%s/libcudart.so.13", root);
	assert_int_equal(symlink(deep, mi), 0);
	snprintf(mi, sizeof(mi), "%s/loop", root);
	assert_int_equal(symlink(root, mi), 0);

	snprintf(mi, sizeof(mi), "%s/mountinfo", root);
	f = fopen(mi, "w");
	assert_non_null(f);
	fprintf(f, "27 1 254:0 / %s rw,relatime - tmpfs tmpfs rw\n", root);
	fclose(f);
	s = libsearch__start(&o);
	assert_non_null(s);
	for (int i = 0; i < 3000 && !libsearch__drain(s, collect, &n); i++) {
		struct timespec ts = {0, 10000000};

		nanosleep(&ts, NULL);
	}
	libsearch__stats(s, &st);
	assert_true(st.done);
	assert_false(st.cut);
	assert_int_equal(st.mounts, 1);
	assert_int_equal(n.n, 3);
	assert_true(has(&n, deep));
	snprintf(path, sizeof(path), "%s/libnccl.so.2", root);
	assert_true(has(&n, path));
	snprintf(path, sizeof(path), "%s/libcuda.so.1", root);
	assert_true(has(&n, path));
	libsearch__free(s);
	names_free(&n);

	/* A bound on the files looked at stops it, saying so. */
	o.max_files = 2;
	s = libsearch__start(&o);
	assert_non_null(s);
	while (!libsearch__drain(s, collect, &n)) {
		struct timespec ts = {0, 1000000};

		nanosleep(&ts, NULL);
	}
	libsearch__stats(s, &st);
	assert_true(st.cut);
	libsearch__free(s);
	names_free(&n);
	snprintf(path, sizeof(path), "rm -rf '%s'", root);
	assert_int_equal(system(path), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_mounts),
		cmocka_unit_test(test_walk),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
