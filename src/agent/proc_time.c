/* proc_time.c: where the followed processes' threads spent each window,
 * and their verdicts (proc_time.h). */
#include "agent/proc_time.h"
#include "common/xalloc.h"

#include <stdlib.h>
#include <string.h>
#include <uthash.h>

struct pt_proc {
	uint32_t pid;
	/* The window being judged: every thread's times, the lead so far. */
	uint64_t total[PS_NR];
	const struct pt_thread *lead;
	UT_hash_handle hh;
};

struct pt_thread {
	uint32_t tid, pid;
	uint64_t ns[PS_NR];
	UT_hash_handle hh;
};

/* A wait under way: what of it is credited already, to the state it was
 * first seen in. */
struct pt_wait_key {
	uint64_t since_ns;
	uint32_t tid;
	uint32_t pad;
};

struct pt_wait {
	struct pt_wait_key key;
	uint32_t pid;
	enum proc_state state;
	uint64_t credited_ns;
	uint64_t window; /* the last window it was seen in */
	UT_hash_handle hh;
};

struct proc_time {
	struct pt_proc *procs;
	struct pt_thread *threads;
	struct pt_wait *waits;
	uint32_t nprocs, nthreads, nwaits;
	uint64_t window;
	uint64_t thread_drops, wait_drops;
};

struct proc_time *proc_time__new(void)
{
	return xcalloc(1, sizeof(struct proc_time));
}

static void drop_threads(struct proc_time *pt, uint32_t pid, bool all)
{
	struct pt_thread *t, *tmp;

	HASH_ITER(hh, pt->threads, t, tmp)
	{
		if (!all && t->pid != pid)
			continue;
		HASH_DEL(pt->threads, t);
		free(t);
		pt->nthreads--;
	}
}

static void drop_waits(struct proc_time *pt, uint32_t pid, bool all)
{
	struct pt_wait *w, *tmp;

	HASH_ITER(hh, pt->waits, w, tmp)
	{
		if (!all && w->pid != pid)
			continue;
		HASH_DEL(pt->waits, w);
		free(w);
		pt->nwaits--;
	}
}

void proc_time__free(struct proc_time *pt)
{
	struct pt_proc *p, *tmp;

	if (!pt)
		return;
	drop_threads(pt, 0, true);
	drop_waits(pt, 0, true);
	HASH_ITER(hh, pt->procs, p, tmp)
	{
		HASH_DEL(pt->procs, p);
		free(p);
	}
	free(pt);
}

static struct pt_proc *proc_find(const struct proc_time *pt, uint32_t pid)
{
	struct pt_proc *p;

	HASH_FIND(hh, pt->procs, &pid, sizeof(pid), p);
	return p;
}

void proc_time__track(struct proc_time *pt, uint32_t pid)
{
	struct pt_proc *p;

	if (proc_find(pt, pid))
		return;
	p = xcalloc(1, sizeof(*p));
	p->pid = pid;
	HASH_ADD(hh, pt->procs, pid, sizeof(p->pid), p);
	pt->nprocs++;
}

bool proc_time__tracked(const struct proc_time *pt, uint32_t pid)
{
	return proc_find(pt, pid) != NULL;
}

void proc_time__forget(struct proc_time *pt, uint32_t pid)
{
	struct pt_proc *p = proc_find(pt, pid);

	if (!p)
		return;
	HASH_DEL(pt->procs, p);
	free(p);
	pt->nprocs--;
	drop_threads(pt, pid, false);
	drop_waits(pt, pid, false);
}

static struct pt_thread *thread_get(struct proc_time *pt, uint32_t pid, uint32_t tid)
{
	struct pt_thread *t;

	HASH_FIND(hh, pt->threads, &tid, sizeof(tid), t);
	if (t) {
		/* A tid reused by another process within the window. */
		if (t->pid != pid) {
			memset(t->ns, 0, sizeof(t->ns));
			t->pid = pid;
		}
		return t;
	}
	if (pt->nthreads >= PROC_TIME_MAX_THREADS) {
		pt->thread_drops++;
		return NULL;
	}
	t = xcalloc(1, sizeof(*t));
	t->tid = tid;
	t->pid = pid;
	HASH_ADD(hh, pt->threads, tid, sizeof(t->tid), t);
	pt->nthreads++;
	return t;
}

void proc_time__add(struct proc_time *pt, uint32_t pid, uint32_t tid, enum proc_state s,
		    uint64_t ns)
{
	struct pt_thread *t;

	if ((unsigned)s >= PS_NR || !ns || !proc_find(pt, pid))
		return;
	t = thread_get(pt, pid, tid);
	if (t)
		t->ns[s] += ns;
}

void proc_time__wait(struct proc_time *pt, uint32_t pid, uint32_t tid, enum proc_state s,
		     uint64_t since_ns, uint64_t now_ns, bool ended)
{
	struct pt_wait_key k = {.since_ns = since_ns, .tid = tid};
	uint64_t len = now_ns > since_ns ? now_ns - since_ns : 0, credit;
	struct pt_wait *w;

	if ((unsigned)s >= PS_NR || !proc_find(pt, pid))
		return;
	HASH_FIND(hh, pt->waits, &k, sizeof(k), w);
	credit = w && w->credited_ns < len ? len - w->credited_ns : w ? 0 : len;
	proc_time__add(pt, pid, tid, w ? w->state : s, credit);
	if (ended) {
		if (w) {
			HASH_DEL(pt->waits, w);
			free(w);
			pt->nwaits--;
		}
		return;
	}
	if (!w) {
		if (pt->nwaits >= PROC_TIME_MAX_THREADS) {
			/* Credited now and again at its end: counted twice
			 * in part, which the drop count says. */
			pt->wait_drops++;
			return;
		}
		w = xcalloc(1, sizeof(*w));
		w->key = k;
		w->pid = pid;
		w->state = s;
		HASH_ADD(hh, pt->waits, key, sizeof(w->key), w);
		pt->nwaits++;
	}
	w->credited_ns += credit;
	w->window = pt->window;
}

static uint64_t busy(const uint64_t *ns)
{
	return ns[PS_CPU] + ns[PS_GPU] + ns[PS_COMMUNICATION] + ns[PS_INPUT];
}

static uint64_t all(const uint64_t *ns)
{
	uint64_t sum = 0;

	for (int s = 0; s < PS_NR; s++)
		sum += ns[s];
	return sum;
}

/* Is thread a a better lead than the current one (b)? The most busy time,
 * then the most time, then the lowest tid. */
static bool leads(const struct pt_thread *a, const struct pt_thread *b)
{
	uint64_t ba = busy(a->ns), bb = busy(b->ns), ta = all(a->ns), tb = all(b->ns);

	if (ba != bb)
		return ba > bb;
	if (ta != tb)
		return ta > tb;
	return a->tid < b->tid;
}

static int proc_cmp(const struct pt_proc *a, const struct pt_proc *b)
{
	return a->pid < b->pid ? -1 : a->pid > b->pid;
}

void proc_time__window(struct proc_time *pt, uint64_t wall_ns, proc_window_fn fn, void *ctx)
{
	struct pt_wait *w, *wtmp;

	struct pt_proc *p;

	/* One pass over the threads: only followed processes' are kept. */
	for (p = pt->procs; p; p = p->hh.next) {
		memset(p->total, 0, sizeof(p->total));
		p->lead = NULL;
	}
	for (const struct pt_thread *t = pt->threads; t; t = t->hh.next) {
		p = proc_find(pt, t->pid);
		if (!p)
			continue;
		for (int s = 0; s < PS_NR; s++)
			p->total[s] += t->ns[s];
		if (!p->lead || leads(t, p->lead))
			p->lead = t;
	}
	HASH_SORT(pt->procs, proc_cmp);
	for (p = pt->procs; p; p = p->hh.next) {
		struct proc_window out = {.pid = p->pid};

		out.total.wall_ns = out.lead.wall_ns = wall_ns;
		memcpy(out.total.ns, p->total, sizeof(out.total.ns));
		if (p->lead) {
			out.lead_tid = p->lead->tid;
			memcpy(out.lead.ns, p->lead->ns, sizeof(out.lead.ns));
		}
		verdict__judge(&out.lead, &out.verdict);
		if (fn)
			fn(ctx, &out);
	}
	for (p = pt->procs; p; p = p->hh.next)
		p->lead = NULL; /* the threads go now */
	drop_threads(pt, 0, true);
	/* A wait not seen for two windows ended unseen (its record lost). */
	HASH_ITER(hh, pt->waits, w, wtmp)
	{
		if (pt->window - w->window < 2)
			continue;
		HASH_DEL(pt->waits, w);
		free(w);
		pt->nwaits--;
	}
	pt->window++;
}

void proc_time__stats(const struct proc_time *pt, struct proc_time_stats *out)
{
	out->thread_drops = pt->thread_drops;
	out->wait_drops = pt->wait_drops;
	out->processes = pt->nprocs;
	out->threads = pt->nthreads;
	out->waits = pt->nwaits;
}
