/*
 * account.c: each process's device-memory account, published where another process can
 * read it, as the real driver keeps the per-process account that NVML and nvidia-smi
 * show. The fake GPU lives in each process's own copy of the libcuda.so.1 stand-in, so
 * gpu.c writes its per-device usage (allocations, physical VMM handles, contexts) into a
 * small file per process, <state dir>/<pid>, mapped shared and updated in place on every
 * change; the libnvidia-ml.so.1 stand-in (nvml.c) reads every such file. The state
 * directory is SONDE_STANDIN_STATE_DIR, by default /dev/shm/sonde-standin-<uid> (or
 * /tmp/... where /dev/shm is missing). A file records its process's start time, so a
 * file left by a killed process is never taken for a later process with the same pid.
 * Compiled into libcuda.so.1 and libnvidia-ml.so.1; the version scripts keep these names
 * out of their dynamic symbol tables.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "standin.h"

#define ACCOUNT_MAGIC 0x31746e756f636361ull /* "account1" */

/* The file's layout; both sides are built from this source. */
struct account_file {
	uint64_t magic;
	uint64_t pid;
	uint64_t start_time; /* /proc/PID/stat field 22: tells a reused pid */
	struct standin_dev_use dev[STANDIN_MAX_DEVICES];
};

static struct account_file *mine; /* this process's, mapped; NULL until the first change */
static pid_t mine_pid;
static bool mine_failed;

const char *standin_state_dir(char *buf, size_t len)
{
	const char *dir = getenv("SONDE_STANDIN_STATE_DIR");
	struct stat st;

	if (dir && *dir)
		return dir;
	snprintf(buf, len, "%s/sonde-standin-%u",
		 stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) ? "/dev/shm" : "/tmp",
		 (unsigned)getuid());
	return buf;
}

/* The start time of pid in clock ticks after boot, 0 if it is gone. */
static uint64_t start_time(pid_t pid)
{
	unsigned long long t = 0;
	char path[64], buf[1024], *p;
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	/* The name (field 2) may hold spaces and parentheses: count from its end. */
	p = strrchr(buf, ')');
	if (!p || sscanf(p + 2,
			 "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d "
			 "%*d %*d %*d %*d %llu",
			 &t) != 1)
		return 0;
	return t;
}

static void remove_mine(void)
{
	char buf[PATH_MAX], path[PATH_MAX];

	if (!mine || getpid() != mine_pid)
		return;
	snprintf(path, sizeof(path), "%s/%d", standin_state_dir(buf, sizeof(buf)), (int)mine_pid);
	unlink(path);
}

static struct account_file *open_mine(void)
{
	char buf[PATH_MAX], path[PATH_MAX];
	const char *dir = standin_state_dir(buf, sizeof(buf));
	struct account_file *f;
	int fd;

	if (mkdir(dir, 0700) && errno != EEXIST)
		goto fail;
	snprintf(path, sizeof(path), "%s/%d", dir, (int)getpid());
	fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		goto fail;
	if (ftruncate(fd, sizeof(*f))) {
		close(fd);
		goto fail;
	}
	f = mmap(NULL, sizeof(*f), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (f == MAP_FAILED)
		goto fail;
	f->pid = (uint64_t)getpid();
	f->start_time = start_time(getpid());
	__atomic_store_n(&f->magic, ACCOUNT_MAGIC, __ATOMIC_RELEASE);
	mine_pid = getpid();
	atexit(remove_mine);
	return f;
fail:
	STANDIN_TRACE("libcuda: can't publish the memory account in %s: %s", dir, strerror(errno));
	mine_failed = true;
	return NULL;
}

void standin_account_set(int dev, uint64_t used, uint64_t contexts)
{
	/* A child forked after CUDA started has a copy of the fake GPU but no GPU of its
	 * own, as with the real driver: it publishes nothing. */
	if (mine && getpid() != mine_pid)
		return;
	if (!mine && !mine_failed)
		mine = open_mine();
	if (!mine || dev < 0 || dev >= STANDIN_MAX_DEVICES)
		return;
	__atomic_store_n(&mine->dev[dev].used, used, __ATOMIC_RELAXED);
	__atomic_store_n(&mine->dev[dev].contexts, contexts, __ATOMIC_RELAXED);
}

int standin_account_each(void (*fn)(void *ctx, uint32_t pid, const struct standin_dev_use *dev),
			 void *ctx)
{
	char buf[PATH_MAX], path[PATH_MAX];
	const char *dir = standin_state_dir(buf, sizeof(buf));
	struct dirent *e;
	int n = 0;
	DIR *d;

	d = opendir(dir);
	if (!d)
		return 0;
	while ((e = readdir(d))) {
		struct account_file f;
		char *end;
		long pid = strtol(e->d_name, &end, 10);
		ssize_t got;
		int fd;

		if (*end || pid <= 0 || pid > INT_MAX)
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			continue;
		got = pread(fd, &f, sizeof(f), 0);
		close(fd);
		if (got != (ssize_t)sizeof(f) || f.magic != ACCOUNT_MAGIC || f.pid != (uint64_t)pid)
			continue;
		/* Gone, or its pid now someone else's: the driver freed its memory,
		 * and the account goes (else every reader after opens them all). */
		if (!f.start_time)
			continue;
		if (start_time((pid_t)pid) != f.start_time) {
			unlink(path);
			continue;
		}
		fn(ctx, (uint32_t)pid, f.dev);
		n++;
	}
	closedir(d);
	return n;
}
