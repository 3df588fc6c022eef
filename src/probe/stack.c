/* stack.c: stacks with their frames' kinds, made of the probes' records.
 * See stack.h. */
#include "probe/stack.h"
#include "common/xalloc.h"
#include "python/names.h"
#include "unwind_abi.h" /* bpf/unwind_abi.h: UNW_SIGNAL_FRAME */

#include <string.h>

struct stack *stack__new(void)
{
	return xcalloc(1, stack_size(STACK_MAX_FRAMES));
}

static int clamp_frames(int32_t n)
{
	return n < 0 ? 0 : n > CPU_MAX_FRAMES ? CPU_MAX_FRAMES : n;
}

/* The user frames ips (n of them, clamped) after st's first frames, and
 * the truncation marker. */
static void add_user(struct stack *st, const uint64_t *ips, int n, bool truncated)
{
	struct stack_frame *f = st->frames + st->nframes;

	for (int i = 0; i < n; i++, f++) {
		uint64_t ip = ips[i];

		/* Whole frames, each written once: this runs for every event
		 * of the GPU probes (80 frames at 20,000 launches a second). */
		if (!py_names__is_frame(ip) && ip != UNW_SIGNAL_FRAME)
			/* Every frame but the leaf is a return address. */
			*f = (struct stack_frame){
				.addr = ip, .kind = FRAME_NATIVE, .flags = i ? FRAME_F_CALLER : 0};
		else if (py_names__is_frame(ip))
			*f = (struct stack_frame){.addr = ip, .kind = FRAME_PYTHON};
		else
			*f = (struct stack_frame){.addr = STACK_MARK_SIGNAL, .kind = FRAME_MARKER};
	}
	st->nframes += (uint32_t)n;
	if (truncated && st->nframes) {
		memset(f, 0, sizeof(*f));
		f->kind = FRAME_MARKER;
		f->addr = STACK_MARK_TRUNCATED;
		st->nframes++;
	}
}

/* A name of the record (what follows its NUL may be anything), cut to
 * CPU_COMM_LEN - 1 bytes, zero-padded. */
static void copy_name(char *dst, const char *src)
{
	size_t n = strnlen(src, CPU_COMM_LEN - 1);

	memcpy(dst, src, n);
	memset(dst + n, 0, CPU_COMM_LEN - n);
}

void stack__from_sample(struct stack *st, const struct cpu_sample *s)
{
	int nk = clamp_frames(s->nkern), nu = clamp_frames(s->nuser);

	st->ts_ns = s->ts_ns;
	st->pid = s->pid;
	st->tid = s->tid;
	st->cpu = s->cpu;
	copy_name(st->comm, s->comm);
	copy_name(st->thread, s->thread);
	for (int i = 0; i < nk; i++) {
		struct stack_frame *f = &st->frames[i];

		memset(f, 0, sizeof(*f));
		f->addr = s->ips[i];
		f->kind = FRAME_KERNEL;
		f->flags = i ? FRAME_F_CALLER : 0;
	}
	st->nframes = (uint32_t)nk;
	add_user(st, (const uint64_t *)s->ips + nk, nu, s->flags & CPU_SF_TRUNCATED);
}

void stack__set_user(struct stack *st, const uint64_t *ips, int n, bool truncated)
{
	st->nframes = 0;
	add_user(st, ips, clamp_frames(n), truncated);
}

bool stack__has_user(const struct stack *st)
{
	for (uint32_t i = 0; i < st->nframes; i++)
		if (st->frames[i].kind != FRAME_KERNEL &&
		    !(st->frames[i].kind == FRAME_MARKER &&
		      st->frames[i].addr == STACK_MARK_TRUNCATED))
			return true;
	return false;
}
