/* host.c: the host checks and helpers of host.h, used by `sonde record`,
 * `sonde top`, `sonde agent` and the BPF-using modules they start. */
#include "probe/host.h"
#include "common/bytes.h"
#include "common/log.h"

#include <errno.h>
#include <linux/capability.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef CAP_PERFMON
#define CAP_PERFMON 38 /* Linux 5.8 */
#endif
#ifndef CAP_BPF
#define CAP_BPF 39 /* Linux 5.8 */
#endif

static int has_cap(const struct __user_cap_data_struct *d, int cap)
{
	return !!(d[cap / 32].effective & (1u << (cap % 32)));
}

int check_privileges(void)
{
	struct __user_cap_header_struct hdr = {_LINUX_CAPABILITY_VERSION_3, 0};
	struct __user_cap_data_struct data[2] = {};

	if (geteuid() == 0)
		return 0;
	if (syscall(SYS_capget, &hdr, data) == 0 &&
	    (has_cap(data, CAP_SYS_ADMIN) ||
	     (has_cap(data, CAP_BPF) && has_cap(data, CAP_PERFMON))))
		return 0;
	pr_err("this needs root (or CAP_BPF and CAP_PERFMON) to load BPF programs -- run it with "
	       "sudo");
	return -EPERM;
}

int check_btf(void)
{
	if (access("/sys/kernel/btf/vmlinux", R_OK) == 0)
		return 0;
	pr_err("can't read /sys/kernel/btf/vmlinux: %s -- Sonde needs a kernel built with "
	       "CONFIG_DEBUG_INFO_BTF=y (5.8 or later)",
	       strerror(errno));
	return -ENOENT;
}

int ensure_tracefs(void)
{
	struct stat st;

	if (stat("/sys/kernel/tracing/events", &st) == 0)
		return 0;
	if (mount("tracefs", "/sys/kernel/tracing", "tracefs", 0, NULL) == 0) {
		pr_debug("mounted tracefs on /sys/kernel/tracing");
		return 0;
	}
	if (errno == EBUSY)
		return 0;
	pr_warn("can't mount tracefs on /sys/kernel/tracing: %s -- tracepoints will not attach",
		strerror(errno));
	return -errno;
}

int online_cpus(int *cpus, int max)
{
	FILE *f = fopen("/sys/devices/system/cpu/online", "r");
	char buf[4096], *p, *tok, *save = NULL;
	int n = 0;

	if (!f)
		return -errno;
	p = fgets(buf, sizeof(buf), f);
	fclose(f);
	if (!p)
		return -EINVAL;
	for (tok = strtok_r(buf, ",\n", &save); tok; tok = strtok_r(NULL, ",\n", &save)) {
		char *end;
		long a = strtol(tok, &end, 10), b = a;

		if (end == tok || a < 0)
			return -EINVAL;
		if (*end == '-')
			b = strtol(end + 1, &end, 10);
		if (b < a || b > 65535)
			return -EINVAL;
		for (long c = a; c <= b && n < max; c++)
			cpus[n++] = (int)c;
	}
	return n;
}

void raise_memlock(void)
{
	struct rlimit r = {RLIM_INFINITY, RLIM_INFINITY};

	setrlimit(RLIMIT_MEMLOCK, &r);
}

size_t ringbuf_size(size_t want, size_t max)
{
	size_t p = (size_t)getpagesize();

	while (p < want && p < max)
		p <<= 1;
	return p;
}

uint64_t env_size(const char *name)
{
	const char *v = getenv(name), *end;
	uint64_t n;

	if (!v || !*v)
		return 0;
	n = parse_bytes(v, &end);
	if (!n || *end) {
		pr_warn("ignoring %s=%s: not a size (4K, 64M, 1048576...)", name, v);
		return 0;
	}
	return n;
}
