/* bpf_msgs.c: libbpf's print hook and the errno hints of bpf_msgs.h. */
#include "probe/bpf_msgs.h"
#include "common/log.h"

#include <bpf/libbpf.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Each line of a libbpf message as one line of Sonde's log. */
static int libbpf_print(enum libbpf_print_level level, const char *fmt, va_list ap)
{
	char *text = NULL, *line, *save = NULL;

	if (level == LIBBPF_DEBUG || !log_enabled(LOG_DEBUG))
		return 0;
	if (vasprintf(&text, fmt, ap) < 0)
		return 0;
	for (line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save))
		pr_debug("libbpf: %s", line);
	free(text);
	return 0;
}

void bpf_msgs__init(void)
{
	libbpf_set_print(libbpf_print);
}

/* A /proc/sys value as a number, or -1. */
static long sysctl_long(const char *path)
{
	FILE *f = fopen(path, "r");
	long v = -1;

	if (!f)
		return -1;
	if (fscanf(f, "%ld", &v) != 1)
		v = -1;
	fclose(f);
	return v;
}

const char *perf_open_hint(int err, int freq, char *buf, size_t size)
{
	long v;

	switch (-err) {
	case EPERM:
	case EACCES:
		v = sysctl_long("/proc/sys/kernel/perf_event_paranoid");
		snprintf(buf, size,
			 "run as root, or with CAP_PERFMON and CAP_BPF (kernel.perf_event_paranoid "
			 "is %ld)",
			 v);
		break;
	case EINVAL:
		v = sysctl_long("/proc/sys/kernel/perf_event_max_sample_rate");
		if (v >= 0 && freq > v)
			snprintf(buf, size,
				 "%d Hz is above kernel.perf_event_max_sample_rate (%ld): lower -F "
				 "or raise it",
				 freq, v);
		else
			snprintf(buf, size, "the kernel refused the event's settings at %d Hz",
				 freq);
		break;
	case ENODEV:
	case ENXIO:
	case ENOENT:
		snprintf(buf, size, "is the CPU offline, or the event missing from this kernel?");
		break;
	case EMFILE:
	case ENFILE:
		snprintf(buf, size, "too many open files: raise the limit (ulimit -n)");
		break;
	case EBUSY:
		snprintf(buf, size, "another tool holds the event (a PMU in exclusive use)");
		break;
	case EOPNOTSUPP:
		snprintf(buf, size, "this event can't sample here (no interrupt on overflow)");
		break;
	default:
		if (size)
			*buf = '\0';
		break;
	}
	return buf;
}

const char *uprobe_hint(int err)
{
	switch (-err) {
	case EPERM:
	case EACCES:
		return "run as root, or with CAP_BPF, CAP_PERFMON and CAP_SYS_ADMIN";
	case ENOENT:
		return "the file or its function is gone (replaced since it was read?)";
	case EINVAL:
		return "the offset is not the start of an instruction the kernel can probe";
	case EMFILE:
	case ENFILE:
		return "too many open files: raise the limit (ulimit -n)";
	case ENOSPC:
	case E2BIG:
		return "the kernel's limit on probes was reached";
	case EBUSY:
		return "another tool's probe is in the way";
	default:
		return "";
	}
}
