/* libsearch.c: the background search for CUDA and NCCL library files of
 * libsearch.h. One thread reads the mounts, then walks each filesystem with
 * openat/readdir (d_type where the filesystem gives it, fstatat where not),
 * never following a symbolic link or crossing into another mount, and
 * queues the paths whose name libscan_classify() knows. */
#include "probe/libsearch.h"
#include "probe/libscan.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/xalloc.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define MAX_LINE 8192
#define MAX_MOUNTS 65536
#define MAX_DEPTH 64
#define DEFAULT_MAX_FILES 20000000ull
#define DEFAULT_MAX_MS (10ull * 60 * MS_PER_SEC)

struct libsearch {
	struct libsearch_opts opts;
	pthread_t thread;
	pthread_mutex_t lock; /* the fields below */
	char **found;
	size_t nfound, cap;
	struct libsearch_stats st;
	volatile bool stop;
	uint64_t start_ms;
};

/* ---- the mounts ---- */

static bool walked_fstype(const char *t)
{
	static const char *const local[] = {"ext2",  "ext3",  "ext4", "xfs",
					    "btrfs", "zfs",   "f2fs", "overlay",
					    "tmpfs", "ramfs", "jfs",  "bcachefs"};

	for (size_t i = 0; i < ARRAY_SIZE(local); i++)
		if (!strcmp(t, local[i]))
			return true;
	return false;
}

/* Undoes mountinfo's octal escapes (\040 space, \011 tab, \012, \134) in
 * place. */
static void unescape(char *s)
{
	char *o = s;

	for (; *s; s++) {
		if (s[0] == '\\' && s[1] >= '0' && s[1] <= '3' && s[2] >= '0' && s[2] <= '7' &&
		    s[3] >= '0' && s[3] <= '7') {
			*o++ = (char)((s[1] - '0') << 6 | (s[2] - '0') << 3 | (s[3] - '0'));
			s += 3;
		} else {
			*o++ = *s;
		}
	}
	*o = 0;
}

static bool under(const char *path, const char *dir)
{
	size_t n = strlen(dir);

	return !strncmp(path, dir, n) && (path[n] == '/' || !path[n]);
}

size_t libsearch_mounts(FILE *f, libsearch_fn fn, void *ctx)
{
	char line[MAX_LINE];
	size_t n = 0, lines = 0;

	while (fgets(line, sizeof(line), f) && lines++ < MAX_MOUNTS) {
		/* ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER */
		char *fields[5], *save = NULL, *sep, *fstype, *tok;
		int k = 0;

		if (!strchr(line, '\n') && !feof(f))
			continue; /* longer than a line may be: skip, not misread */
		sep = strstr(line, " - ");
		if (!sep)
			continue;
		*sep = 0;
		fstype = strtok_r(sep + 3, " \n", &save);
		save = NULL;
		for (tok = strtok_r(line, " ", &save); tok && k < 5;
		     tok = strtok_r(NULL, " ", &save))
			fields[k++] = tok;
		if (k < 5 || !fstype || fields[4][0] != '/')
			continue;
		unescape(fields[4]);
		if (!walked_fstype(fstype) || under(fields[4], "/proc") ||
		    under(fields[4], "/sys") || under(fields[4], "/dev"))
			continue;
		fn(ctx, fields[4]);
		n++;
	}
	return n;
}

/* ---- the walk ---- */

static void found(struct libsearch *s, const char *path)
{
	pthread_mutex_lock(&s->lock);
	xgrow((void **)&s->found, &s->cap, s->nfound + 1, sizeof(*s->found));
	s->found[s->nfound++] = xstrdup(path);
	s->st.found++;
	pthread_mutex_unlock(&s->lock);
}

static bool over_bounds(struct libsearch *s)
{
	if (s->stop)
		return true;
	if (s->st.entries >= s->opts.max_files || mono_ms() - s->start_ms >= s->opts.max_ms) {
		s->st.cut = true;
		return true;
	}
	return false;
}

/* Walks the directory open on fd (path for messages and results), on the
 * filesystem dev. Takes fd. */
static void walk(struct libsearch *s, int fd, char *path, size_t len, dev_t dev, int depth)
{
	DIR *d = fdopendir(fd);
	struct dirent *de;

	if (!d) {
		close(fd);
		return;
	}
	while (!over_bounds(s) && (de = readdir(d))) {
		const char *name = de->d_name;
		unsigned char type = de->d_type;
		size_t n = strlen(name);
		struct stat st;

		if (name[0] == '.' && (!name[1] || (name[1] == '.' && !name[2])))
			continue;
		__atomic_add_fetch(&s->st.entries, 1, __ATOMIC_RELAXED);
		if (len + 1 + n >= PATH_MAX)
			continue;
		if (type == DT_UNKNOWN) {
			if (fstatat(dirfd(d), name, &st, AT_SYMLINK_NOFOLLOW))
				continue;
			type = S_ISDIR(st.st_mode) ? DT_DIR : S_ISREG(st.st_mode) ? DT_REG : DT_LNK;
		}
		if (type == DT_REG && libscan_classify(name)) {
			snprintf(path + len, PATH_MAX - len, "/%s", name);
			found(s, path);
			path[len] = 0;
		} else if (type == DT_DIR && depth < MAX_DEPTH) {
			int sub =
				openat(dirfd(d), name,
				       O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC | O_NOATIME);

			if (sub < 0 && errno == EPERM) /* O_NOATIME on another's file */
				sub = openat(dirfd(d), name,
					     O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			if (sub < 0)
				continue;
			/* Another filesystem mounted here is walked on its own. */
			if (fstat(sub, &st) || st.st_dev != dev) {
				close(sub);
				continue;
			}
			snprintf(path + len, PATH_MAX - len, "/%s", name);
			walk(s, sub, path, len + 1 + n, dev, depth + 1);
			path[len] = 0;
		}
	}
	closedir(d);
}

struct mount_list {
	char **v;
	size_t n, cap;
};

static void add_mount(void *ctx, const char *path)
{
	struct mount_list *l = ctx;

	xgrow((void **)&l->v, &l->cap, l->n + 1, sizeof(*l->v));
	l->v[l->n++] = xstrdup(path);
}

static void *search_thread(void *arg)
{
	struct libsearch *s = arg;
	struct mount_list mounts = {0};
	char *path = xmalloc(PATH_MAX);
	FILE *f;

	/* Low priority: the machine's own work comes first. */
	setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 19);
	f = fopen(s->opts.mountinfo ? s->opts.mountinfo : "/proc/self/mountinfo", "re");
	if (f) {
		libsearch_mounts(f, add_mount, &mounts);
		fclose(f);
	} else {
		pr_warn("can't read the mounts: %s -- CUDA libraries are found as processes load "
			"them",
			strerror(errno));
	}
	s->st.mounts = mounts.n;
	for (size_t i = 0; i < mounts.n && !over_bounds(s); i++) {
		int fd = open(mounts.v[i], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		struct stat st;

		if (fd < 0 || fstat(fd, &st)) {
			if (fd >= 0)
				close(fd);
			continue;
		}
		snprintf(path, PATH_MAX, "%s", strcmp(mounts.v[i], "/") ? mounts.v[i] : "");
		walk(s, fd, path, strlen(path), st.st_dev, 0);
	}
	for (size_t i = 0; i < mounts.n; i++)
		free(mounts.v[i]);
	free(mounts.v);
	free(path);
	pthread_mutex_lock(&s->lock);
	s->st.ms = mono_ms() - s->start_ms;
	s->st.done = true;
	pthread_mutex_unlock(&s->lock);
	return NULL;
}

struct libsearch *libsearch__start(const struct libsearch_opts *opts)
{
	struct libsearch *s = xcalloc(1, sizeof(*s));
	int err;

	s->opts = *opts;
	if (!s->opts.max_files)
		s->opts.max_files = DEFAULT_MAX_FILES;
	if (!s->opts.max_ms)
		s->opts.max_ms = DEFAULT_MAX_MS;
	pthread_mutex_init(&s->lock, NULL);
	s->start_ms = mono_ms();
	err = pthread_create(&s->thread, NULL, search_thread, s);
	if (err) {
		pr_err("can't start the search for CUDA libraries: %s", strerror(err));
		pthread_mutex_destroy(&s->lock);
		free(s);
		errno = err;
		return NULL;
	}
	return s;
}

bool libsearch__drain(struct libsearch *s, libsearch_fn fn, void *ctx)
{
	char **v;
	size_t n;
	bool done;

	pthread_mutex_lock(&s->lock);
	v = s->found;
	n = s->nfound;
	done = s->st.done;
	s->found = NULL;
	s->nfound = s->cap = 0;
	pthread_mutex_unlock(&s->lock);
	for (size_t i = 0; i < n; i++) {
		fn(ctx, v[i]);
		free(v[i]);
	}
	free(v);
	return done;
}

void libsearch__stats(struct libsearch *s, struct libsearch_stats *out)
{
	pthread_mutex_lock(&s->lock);
	*out = s->st;
	out->entries = __atomic_load_n(&s->st.entries, __ATOMIC_RELAXED);
	if (!out->done)
		out->ms = mono_ms() - s->start_ms;
	pthread_mutex_unlock(&s->lock);
}

void libsearch__free(struct libsearch *s)
{
	if (!s)
		return;
	s->stop = true;
	pthread_join(s->thread, NULL);
	for (size_t i = 0; i < s->nfound; i++)
		free(s->found[i]);
	free(s->found);
	pthread_mutex_destroy(&s->lock);
	free(s);
}
