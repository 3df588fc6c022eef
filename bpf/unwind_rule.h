/* unwind_rule.h: one step of a user stack walk -- the caller's registers
 * from a frame's table row (bpf/unwind_abi.h says what each row kind
 * means), or from the frame-pointer chain -- shared by the BPF walker
 * (bpf/unwind.h) and the userspace one that finishes the stacks the BPF
 * side could not (src/unwind/late.c), so that both read a row the same way.
 *
 * The includer defines UNW_RULE_CTX, the type of its walk, and
 * UNW_RULE_READ(ctx, addr, out), which reads the stack word at addr into
 * *out and gives 0, or -1 when it can't; and may define
 * UNW_RULE_RET(ctx, slot, ret), the return address ret read from the stack
 * word at slot as it was before a uretprobe put its trampoline there. */
#ifndef SONDE_BPF_UNWIND_RULE_H
#define SONDE_BPF_UNWIND_RULE_H

#ifndef UNW_RULE_RET
#define UNW_RULE_RET(c, slot, ret) (ret)
#endif

#include "unwind_abi.h"

#ifndef __always_inline
#define __always_inline inline __attribute__((always_inline))
#endif

/* A frame's registers: pc is where the thread was (leaf) or a return
 * address (after its call). */
struct unw_regs {
	__u64 pc, sp, bp;
	__u64 leaf;
};

/* What a step did. */
enum unw_rule_result {
	UNW_RULE_FAIL = -1,  /* a slot unreadable, or a CFA that doesn't move up */
	UNW_RULE_TABLE = 0,  /* stepped by the row */
	UNW_RULE_SIGNAL = 1, /* stepped through a signal frame: the interrupted registers */
	UNW_RULE_FP = 2,     /* stepped by frame pointers (the row has no rule) */
	UNW_RULE_END = 3,    /* the stack ends here (_start, clone's child) */
};

/* The caller's frame by the frame-pointer chain. */
static __always_inline int unw_rule_fp(UNW_RULE_CTX *c, struct unw_regs *g)
{
	__u64 next, ret;

	if (!g->bp || g->bp < g->sp || UNW_RULE_READ(c, g->bp, &next) ||
	    UNW_RULE_READ(c, g->bp + 8, &ret))
		return UNW_RULE_FAIL;
	g->pc = UNW_RULE_RET(c, g->bp + 8, ret);
	g->sp = g->bp + 16;
	g->bp = next;
	g->leaf = 0;
	return UNW_RULE_FP;
}

/* The caller's frame by row r of the frame's file. */
static __always_inline int unw_rule_step(UNW_RULE_CTX *c, const struct unw_row *r,
					 struct unw_regs *g)
{
	__u64 cfa, ret, bp;

	switch (r->kind) {
	case UNW_CFA_RSP:
		cfa = g->sp + (__s64)r->cfa * 8;
		break;
	case UNW_CFA_RBP:
		cfa = g->bp + (__s64)r->cfa * 8;
		break;
	case UNW_PLT:
		cfa = g->sp + 8 + ((g->pc & 15) >= (__u64)r->cfa ? 8 : 0);
		break;
	case UNW_SIGNAL: {
		/* rsp is at the ucontext the kernel pushed (the handler's
		 * return popped its pretcode); its mcontext, 40 bytes in,
		 * holds the interrupted registers: rbp at 80, rsp at 120, rip
		 * at 128. */
		__u64 mc = g->sp + 40, sp, pc;

		if (UNW_RULE_READ(c, mc + 80, &bp) || UNW_RULE_READ(c, mc + 120, &sp) ||
		    UNW_RULE_READ(c, mc + 128, &pc))
			return UNW_RULE_FAIL;
		g->bp = bp;
		g->sp = sp;
		g->pc = pc;
		g->leaf = 1; /* the interrupted instruction itself */
		return UNW_RULE_SIGNAL;
	}
	case UNW_STOP:
		return UNW_RULE_END;
	case UNW_CFA_DEREF_RBP:
		/* A realigned frame: its CFA and the caller's rbp are saved
		 * at fixed places from rbp. */
		if (UNW_RULE_READ(c, g->bp + (__s64)r->cfa * 8, &cfa) ||
		    UNW_RULE_READ(c, g->bp + (__s64)r->rbp * 8, &bp) || cfa <= g->sp ||
		    UNW_RULE_READ(c, cfa - 8, &ret))
			return UNW_RULE_FAIL;
		g->bp = bp;
		g->sp = cfa;
		g->pc = UNW_RULE_RET(c, cfa - 8, ret);
		g->leaf = 0;
		return UNW_RULE_TABLE;
	default:
		return unw_rule_fp(c, g);
	}
	if (cfa <= g->sp || UNW_RULE_READ(c, cfa - 8, &ret))
		return UNW_RULE_FAIL;
	if (r->rbp) {
		if (UNW_RULE_READ(c, cfa + (__s64)r->rbp * 8, &bp))
			return UNW_RULE_FAIL;
		g->bp = bp;
	}
	g->sp = cfa;
	g->pc = UNW_RULE_RET(c, cfa - 8, ret);
	g->leaf = 0;
	return UNW_RULE_TABLE;
}

#endif
