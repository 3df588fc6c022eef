/* cupti_state.c: Sonde's CUPTI library's state in a process. See
 * cupti_state.h. The variable's address is the file's symbol plus where
 * the process mapped the file's start. Not thread-safe (one cached
 * symbol): the agent's loop. */
#include "symbolize/elf.h"
#include "probe/cupti_state.h"
#include "probe/libscan.h"
#include "cupti/sonde_cupti.h"

#include <errno.h>
#include <pthread.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/uio.h>

/* Where a process mapped the start of its libsonde_cupti.so. */
static int find_base(void *ctx, const struct libscan_map *m)
{
	uint64_t *base = ctx;
	const char *b = strrchr(m->path, '/');

	if (m->pgoff || libscan_classify(b ? b + 1 : m->path) != LIBSCAN_CUPTI)
		return 0;
	*base = m->start;
	return 1;
}

int cupti_state__read(uint32_t pid, const char *path)
{
	static const char *const names[] = {SONDE_CUPTI_STATE};
	/* The last file's symbol: every process maps the same library. A
	 * cache shared by every caller, under its lock. */
	static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
	static char last[PATH_MAX];
	static uint64_t last_vaddr;
	uint64_t vaddr = 0, base = 0;
	struct iovec local, remote;
	int state = -1, err = 0;

	pthread_mutex_lock(&lock);
	if (strcmp(path, last)) {
		err = elf_find_syms(path, names, 1, &vaddr, ELF_FIND_OBJECTS | ELF_FIND_VADDRS);
		if (err >= 0) {
			snprintf(last, sizeof(last), "%s", path);
			last_vaddr = vaddr;
		}
	}
	vaddr = last_vaddr;
	pthread_mutex_unlock(&lock);
	if (err < 0)
		return err;
	if (!vaddr)
		return -ENODATA;
	err = libscan_each_map(pid, find_base, &base);
	if (err < 0)
		return err;
	if (!base)
		return -ENOENT;
	local = (struct iovec){&state, sizeof(state)};
	remote = (struct iovec){(void *)(uintptr_t)(base + vaddr), sizeof(state)};
	if (process_vm_readv((pid_t)pid, &local, 1, &remote, 1, 0) != sizeof(state))
		return -errno;
	return state < 0 ? -EINVAL : state;
}

const char *cupti_state__name(int state)
{
	switch (state) {
	case SONDE_CUPTI_STARTING:
		return "starting";
	case SONDE_CUPTI_RECORDING:
		return "recording";
	case SONDE_CUPTI_NO_CUPTI:
		return "no_cupti";
	case SONDE_CUPTI_HELD:
		return "held";
	case SONDE_CUPTI_FAILED:
		return "failed";
	default:
		return "unknown";
	}
}
