/* verdict.c: what bounds a process in a window (verdict.h). */
#include "metrics/verdict.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

static const char *const verdict_names[V_NR] = {
	[V_GPU] = "gpu",     [V_COMMUNICATION] = "communication",
	[V_INPUT] = "input", [V_CPU] = "cpu",
	[V_LOCK] = "lock",   [V_IO] = "io",
	[V_IDLE] = "idle",
};

static const char *const state_names[PS_NR] = {
	[PS_GPU] = "gpu_wait",
	[PS_COMMUNICATION] = "collective",
	[PS_INPUT] = "dataloader_wait",
	[PS_CPU] = "on_cpu",
	[PS_LOCK] = "lock",
	[PS_IO] = "io",
	[PS_SLEEP] = "sleep",
};

/* The verdict each state gives when it bounds the process; sleeping is
 * being idle. */
static const enum verdict state_verdict[PS_NR] = {
	[PS_GPU] = V_GPU,     [PS_COMMUNICATION] = V_COMMUNICATION,
	[PS_INPUT] = V_INPUT, [PS_CPU] = V_CPU,
	[PS_LOCK] = V_LOCK,   [PS_IO] = V_IO,
	[PS_SLEEP] = V_IDLE,
};

const char *verdict__name(enum verdict v)
{
	return (unsigned)v < V_NR ? verdict_names[v] : "idle";
}

const char *proc_state__name(enum proc_state s)
{
	return (unsigned)s < PS_NR ? state_names[s] : "io";
}

void verdict__judge(const struct proc_times *t, struct verdict_out *out)
{
	double wall = (double)t->wall_ns, explained, blocked, best = 0;
	enum proc_state s;

	out->verdict = V_IDLE;
	for (s = 0; s < PS_NR; s++)
		out->share[s] = 0;
	if (!t->wall_ns)
		return;
	explained =
		(double)t->ns[PS_GPU] + (double)t->ns[PS_COMMUNICATION] + (double)t->ns[PS_INPUT];
	blocked = (double)t->ns[PS_LOCK] + (double)t->ns[PS_IO] + (double)t->ns[PS_SLEEP];
	for (s = 0; s < PS_NR; s++) {
		double v = (double)t->ns[s];

		/* An explained wait was off-CPU time of some cause: each cause
		 * gives up its part of it. */
		if ((s == PS_LOCK || s == PS_IO || s == PS_SLEEP) && blocked > 0) {
			v -= explained * v / blocked;
			if (v < 0)
				v = 0;
		}
		out->share[s] = v / wall;
	}
	for (s = 0; s < PS_NR; s++) {
		if (out->share[s] > best) {
			best = out->share[s];
			out->verdict = state_verdict[s];
		}
	}
	if (best < VERDICT_MIN_SHARE)
		out->verdict = V_IDLE;
}

void verdict__evidence(const double share[PS_NR], char *buf, size_t size)
{
	bool used[PS_NR] = {0};
	size_t len = 0;

	if (!size)
		return;
	buf[0] = '\0';
	for (;;) {
		int best = -1;

		for (int s = 0; s < PS_NR; s++)
			if (!used[s] && share[s] >= 0.005 && (best < 0 || share[s] > share[best]))
				best = s;
		if (best < 0)
			break;
		used[best] = true;
		if (len < size)
			len += (size_t)snprintf(buf + len, size - len, "%s%s %.0f %%",
						len ? ", " : "", state_names[best],
						share[best] * 100);
	}
	if (!len)
		snprintf(buf, size, "nothing");
}

enum proc_state verdict__syscall_cause(long nr)
{
	switch (nr) {
	case 202: /* futex */
	case 449: /* futex_waitv */
	case 73:  /* flock */
	case 64:  /* semop */
	case 220: /* semtimedop */
		return PS_LOCK;
	case 34:  /* pause */
	case 35:  /* nanosleep */
	case 61:  /* wait4 */
	case 128: /* rt_sigtimedwait */
	case 130: /* rt_sigsuspend */
	case 230: /* clock_nanosleep */
	case 247: /* waitid */
		return PS_SLEEP;
	default: /* reads, writes, polls, page faults (-1), the rest */
		return PS_IO;
	}
}
