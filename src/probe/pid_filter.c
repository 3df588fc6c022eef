/* pid_filter.c: the shared pid filter map of pid_filter.h. */
#include "probe/pid_filter.h"
#include "common/log.h"
#include "common/xalloc.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* As bpf/pid_filter.bpf.h declares target_pids. */
#define PID_FILTER_MAX 8192

struct pid_filter {
	int fd;
};

struct pid_filter *pid_filter__new(void)
{
	struct pid_filter *pf = xcalloc(1, sizeof(*pf));

	pf->fd = bpf_map_create(BPF_MAP_TYPE_HASH, "target_pids", sizeof(uint32_t), sizeof(uint8_t),
				PID_FILTER_MAX, NULL);
	if (pf->fd < 0) {
		pr_err("can't make the pid filter's BPF map: %s", strerror(errno));
		free(pf);
		return NULL;
	}
	return pf;
}

void pid_filter__free(struct pid_filter *pf)
{
	if (!pf)
		return;
	close(pf->fd);
	free(pf);
}

int pid_filter__add(struct pid_filter *pf, uint32_t pid)
{
	uint8_t one = 1;

	return bpf_map_update_elem(pf->fd, &pid, &one, BPF_ANY) ? -errno : 0;
}

int pid_filter__use(const struct pid_filter *pf, struct bpf_map *target_pids)
{
	return bpf_map__reuse_fd(target_pids, pf->fd);
}
