/* gpu_late.c: GPU calls whose stacks' ends are walked in userspace, and
 * the events of their processes held back behind them. See gpu_late.h.
 *
 * Each process with events waiting has a queue, in the order they came;
 * an event's place in it is its sequence number less the head's, so that
 * the walker (src/unwind/late.c), which finishes stacks as their tables
 * come and not in order, finds the event a finished stack is for at once:
 * the number rides in the stack's cpu field. */
#include "probe/gpu_late.h"
#include "probe/gpu_probes.h"
#include "unwind/late.h"
#include "python/names.h"
#include "symbolize/symbolize.h"

#include "common/clock.h"
#include "common/log.h"
#include "common/xalloc.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct gl_item {
	struct gpu_event ev;
	bool waiting; /* its stack's end is still being walked */
	uint64_t taken_ns;
	size_t bytes;
	char *name;	/* KERNEL_NAME: the name, in the item */
	uint64_t ips[]; /* GPU_MAX_FRAMES for one whose stack goes on, else ev.nips */
};

struct gl_queue {
	uint32_t pid;
	uint32_t head_seq; /* the sequence number of items[head] */
	struct gl_item **items;
	size_t head, n, cap; /* waiting: items[head..n) */
};

struct gpu_late {
	struct symbolizer *sym;
	struct unw_late *walker;
	struct gpu_late_opts o;
	struct gl_queue *q;
	size_t nq, qcap;
	struct gpu_late_stats st;
	uint64_t crowded; /* stacks walked early: too much was waiting */
};

struct gpu_late *gpu_late__new(struct unwinder *u, struct symbolizer *sym,
			       const struct gpu_late_opts *opts)
{
	struct gpu_late *gl = xcalloc(1, sizeof(*gl));

	gl->sym = sym;
	if (opts)
		gl->o = *opts;
	if (!gl->o.max_bytes)
		gl->o.max_bytes = GPU_LATE_MAX_BYTES_DEFAULT;
	if (!gl->o.max_wait_ns)
		gl->o.max_wait_ns = GPU_LATE_MAX_WAIT_NS_DEFAULT;
	/* The walker's stacks count in our bound (gpu_late__poll). */
	gl->walker = unw_late__new(
		u, sym,
		&(struct unw_late_opts){.max_bytes = SIZE_MAX, .max_wait_ns = gl->o.max_wait_ns});
	return gl;
}

static void free_queue(struct gl_queue *q)
{
	for (size_t i = q->head; i < q->n; i++)
		free(q->items[i]);
	free(q->items);
}

void gpu_late__free(struct gpu_late *gl)
{
	if (!gl)
		return;
	for (size_t i = 0; i < gl->nq; i++)
		free_queue(&gl->q[i]);
	free(gl->q);
	unw_late__free(gl->walker);
	free(gl);
}

static struct gl_queue *queue_of(const struct gpu_late *gl, uint32_t pid)
{
	for (size_t i = 0; i < gl->nq; i++)
		if (gl->q[i].pid == pid)
			return &gl->q[i];
	return NULL;
}

bool gpu_late__waiting(const struct gpu_late *gl, uint32_t pid)
{
	return queue_of(gl, pid) != NULL;
}

/* A copy of ev with room for frames stack frames and its kernel name. */
static struct gl_item *new_item(const struct gpu_event *ev, int frames)
{
	const char *name = ev->type == GPU_EV_KERNEL_NAME ? ev->kernel.name
			   : ev->type == GPU_EV_CUPTI_KERNEL || ev->type == GPU_EV_CUPTI_NVTX ||
					   ev->type == GPU_EV_CUPTI_STALL ||
					   ev->type == GPU_EV_CUPTI_STALL_REASON ||
					   ev->type == GPU_EV_CUPTI_CUBIN
				   ? ev->cupti.name
				   : NULL;
	size_t nlen = name ? strlen(name) + 1 : 0;
	size_t bytes = sizeof(struct gl_item) + (size_t)frames * sizeof(uint64_t) + nlen;
	struct gl_item *it = xmalloc(bytes);

	it->ev = *ev;
	it->waiting = false;
	it->taken_ns = mono_ns();
	it->bytes = bytes;
	it->name = NULL;
	if (ev->nips > 0)
		memcpy(it->ips, ev->ips, (size_t)ev->nips * sizeof(uint64_t));
	it->ev.ips = NULL;
	if (name) {
		it->name = (char *)(it->ips + frames);
		memcpy(it->name, name, nlen);
	}
	return it;
}

/* ev's stack so far, and its end, to the walker: 0, or -EINVAL. */
static int walk_on(struct gpu_late *gl, const struct gl_item *it, uint32_t seq,
		   const struct late_stack *end, size_t end_size)
{
	struct cpu_sample *s = xcalloc(1, sizeof(*s));
	int err;

	s->ts_ns = it->ev.ts_ns;
	s->pid = it->ev.pid;
	s->tid = it->ev.tid;
	s->cpu = seq; /* which event it is, for walked() */
	s->nuser = it->ev.nips;
	s->flags = CPU_SF_LATE | (it->ev.flags & GPU_RF_TRUNCATED ? CPU_SF_TRUNCATED : 0);
	memcpy(s->comm, it->ev.process, sizeof(s->comm));
	memcpy(s->thread, it->ev.thread, sizeof(s->thread));
	if (it->ev.nips > 0)
		memcpy(s->ips, it->ips, (size_t)it->ev.nips * sizeof(uint64_t));
	err = unw_late__take(gl->walker, s, end, end_size);
	free(s);
	return err;
}

int gpu_late__add(struct gpu_late *gl, const struct gpu_event *ev, const struct late_stack *end,
		  size_t end_size)
{
	struct gl_queue *q = queue_of(gl, ev->pid);
	struct unw_late_stats ws;
	struct gl_item *it;
	uint32_t seq;
	int err = 0;

	if (!q) {
		xgrow((void **)&gl->q, &gl->qcap, gl->nq + 1, sizeof(*gl->q));
		q = &gl->q[gl->nq++];
		*q = (struct gl_queue){.pid = ev->pid};
	}
	it = new_item(ev, end ? GPU_MAX_FRAMES : (ev->nips > 0 ? ev->nips : 0));
	/* The names of its Python frames now, while their code objects can be
	 * read: it may be handed on after its process exited. (A stack's end
	 * walked here has its own loaded by the walker.) */
	for (int i = 0; gl->sym && i < ev->nips; i++)
		if (py_names__is_frame(ev->ips[i]))
			py_names__load(symbolizer__python(gl->sym), ev->pid, ev->ips[i]);
	seq = q->head_seq + (uint32_t)(q->n - q->head);
	if (end) {
		err = walk_on(gl, it, seq, end, end_size);
		if (err)
			gl->st.malformed++;
		else
			gl->st.late++;
		it->waiting = !err;
	} else {
		gl->st.held_back++;
	}
	xgrow((void **)&q->items, &q->cap, q->n + 1, sizeof(*q->items));
	q->items[q->n++] = it;
	gl->st.waiting_bytes += it->bytes;
	unw_late__stats(gl->walker, &ws);
	if (gl->st.waiting_bytes + ws.waiting_bytes > gl->st.peak_bytes)
		gl->st.peak_bytes = gl->st.waiting_bytes + ws.waiting_bytes;
	return err;
}

/* A stack the walker finished: into the event it is for. */
static void walked(void *ctx, const struct cpu_sample *s)
{
	struct gpu_late *gl = ctx;
	struct gl_queue *q = queue_of(gl, s->pid);
	size_t i = q ? q->head + (uint32_t)(s->cpu - q->head_seq) : 0;
	struct gl_item *it;
	int n = s->nuser < GPU_MAX_FRAMES ? s->nuser : GPU_MAX_FRAMES;

	if (!q || i >= q->n || !q->items[i]->waiting) {
		pr_debug("a finished GPU stack of pid %u matches no waiting event", s->pid);
		return;
	}
	it = q->items[i];
	memcpy(it->ips, s->ips + (s->nkern > 0 ? s->nkern : 0), (size_t)n * sizeof(uint64_t));
	it->ev.nips = n;
	if (s->flags & CPU_SF_TRUNCATED)
		it->ev.flags |= GPU_RF_TRUNCATED;
	it->waiting = false;
}

/* Hands on q's events up to the first that waits. Returns how many. */
static size_t hand_on(struct gpu_late *gl, struct gl_queue *q, gpu_event_fn fn, void *ctx)
{
	uint64_t now = mono_ns();
	size_t done = 0;

	while (q->head < q->n && !q->items[q->head]->waiting) {
		struct gl_item *it = q->items[q->head];

		it->ev.ips = it->ev.nips > 0 ? it->ips : NULL;
		if (it->name && it->ev.type == GPU_EV_KERNEL_NAME)
			it->ev.kernel.name = it->name;
		else if (it->name)
			it->ev.cupti.name = it->name;
		if (now - it->taken_ns > gl->st.max_wait_ns)
			gl->st.max_wait_ns = now - it->taken_ns;
		gl->st.waiting_bytes -= it->bytes;
		fn(ctx, &it->ev);
		free(it);
		q->head++;
		q->head_seq++;
		done++;
	}
	/* The handed-on slots, reused once they are half. */
	if (q->head > 64 && q->head * 2 > q->n) {
		memmove(q->items, q->items + q->head, (q->n - q->head) * sizeof(*q->items));
		q->n -= q->head;
		q->head = 0;
	}
	return done;
}

size_t gpu_late__poll(struct gpu_late *gl, bool force, gpu_event_fn fn, void *ctx)
{
	size_t done = 0, kept = 0;
	struct unw_late_stats ws;

	/* The events' and their stacks' bytes: past the bound, all go. */
	unw_late__stats(gl->walker, &ws);
	if (!force && gl->st.waiting_bytes + ws.waiting_bytes > gl->o.max_bytes) {
		gl->crowded += ws.waiting;
		force = true;
	}
	unw_late__poll(gl->walker, force, walked, gl);
	for (size_t i = 0; i < gl->nq; i++) {
		struct gl_queue *q = &gl->q[i];

		done += hand_on(gl, q, fn, ctx);
		if (q->head == q->n) {
			free(q->items);
			continue;
		}
		gl->q[kept++] = *q;
	}
	gl->nq = kept;
	return done;
}

void gpu_late__stats(const struct gpu_late *gl, struct gpu_late_stats *out)
{
	struct unw_late_stats ws;

	unw_late__stats(gl->walker, &ws);
	*out = gl->st;
	out->waiting_bytes += ws.waiting_bytes;
	/* The walker counts those we made it walk early as waited out. */
	out->waited_out = ws.waited_out > gl->crowded ? ws.waited_out - gl->crowded : 0;
	out->crowded_out = gl->crowded;
	out->waiting = 0;
	for (size_t i = 0; i < gl->nq; i++)
		out->waiting += gl->q[i].n - gl->q[i].head;
}
