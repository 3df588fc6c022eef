/* preflight.h: the checks every BPF-using subcommand runs before loading
 * anything, each failing with a one-line message that says what to do. */
#ifndef SONDE_AGENT_PREFLIGHT_H
#define SONDE_AGENT_PREFLIGHT_H

/* 0 when the process may load BPF programs and open system-wide perf events
 * (root, or CAP_BPF + CAP_PERFMON, or CAP_SYS_ADMIN); else prints why and
 * returns -EPERM. */
int check_privileges(void);
/* 0 when the kernel exposes its BTF (/sys/kernel/btf/vmlinux); else prints
 * why and returns -ENOENT. */
int check_btf(void);
/* Mounts tracefs on /sys/kernel/tracing when it is not mounted (as perf
 * does): tracepoint ids live there. Returns 0 or a negative errno. */
int ensure_tracefs(void);
/* Online CPUs from /sys/devices/system/cpu/online into cpus (at most max).
 * Returns the count or a negative errno. */
int online_cpus(int *cpus, int max);
/* Raises RLIMIT_MEMLOCK for kernels that still charge BPF maps to it. */
void raise_memlock(void);

#endif
