/* stack_agg.h: aggregation of stacks (src/probe/stack.h: pid, tid, the
 * process's and the thread's names, frames with their kinds) into counts
 * per distinct stack, and their conversion into a symbolized struct profile at the end
 * of a window. Each stack keeps the symbolizer's image of its process at
 * the sample's time, and the files of a new stack's frames are read as it
 * arrives, so a process that exits or execs before the window ends is
 * still named. Used by `sonde record`,
 * `sonde top`, the agent and the GPU profiles (src/agent/gpu_feed.c). */
#ifndef SONDE_AGENT_STACK_AGG_H
#define SONDE_AGENT_STACK_AGG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "probe/stack.h"

struct profile;
struct prof_frame;
struct symbolizer;
struct stack_agg;

/* max_stacks bounds the distinct stacks kept; samples of new stacks beyond it
 * are counted in dropped. The symbolizer is borrowed. */
struct stack_agg *stack_agg__new(struct symbolizer *sym, size_t max_stacks);
void stack_agg__free(struct stack_agg *a);

/* Adds one sample. */
void stack_agg__add(struct stack_agg *a, const struct stack *s);
/* Adds weight to the stack of s topped by a frame named leaf (NULL: none;
 * copied), for the GPU profiles: a launch's kernel name above the
 * launching code, a wait's API above the waiting code. */
void stack_agg__add_leaf(struct stack_agg *a, const struct stack *s, const char *leaf,
			 uint64_t weight);
/* The same, with ranges (NULL: none; copied): NVTX ranges joined by
 * STACK_AGG_RANGE_SEP, outermost first, as frames of module "[nvtx]"
 * between the stack and the leaf (at most STACK_AGG_MAX_RANGES, the
 * innermost; STACK_AGG_RANGES_LEN bytes of the path). */
#define STACK_AGG_RANGE_SEP '\x1f'
#define STACK_AGG_MAX_RANGES 16
#define STACK_AGG_RANGES_LEN 256
void stack_agg__add_leaf_in(struct stack_agg *a, const struct stack *s, const char *ranges,
			    const char *leaf, uint64_t weight);
/* The same for a GPU instruction of the leaf (a kernel): above it, a frame
 * "+0xOFFSET" of module "[sass]" ("+0xOFFSET MNEMONIC" where op names it)
 * and one named reason (its stall reason) of module "[stall]"; ops and
 * reasons are kept for the agg's life, as leaves are: small sets. */
struct stack_agg_instr {
	uint64_t offset;
	const char *op;	    /* NULL: none */
	const char *reason; /* NULL: "[no reason]" */
};
void stack_agg__add_instr(struct stack_agg *a, const struct stack *s, const char *ranges,
			  const char *leaf, const struct stack_agg_instr *instr, uint64_t weight);
/* The module the leaf frames above show (static string; default none):
 * "[cuda]" for the GPU profiles, so that a kernel and the host function of
 * the same name stay apart. */
void stack_agg__set_leaf_module(struct stack_agg *a, const char *module);

/* The service a sample's process belongs to: called as each sample is
 * added with its pid and process name (comm), returns the name (borrowed
 * until the next call; NULL or "": none), which goes with the sample into
 * the profile (struct prof_who's service), and sets *labels to its job's
 * labels ("NAME=VALUE" one per line, struct prof_who's labels; borrowed
 * likewise; NULL or "": none). Without one, samples have neither. */
typedef const char *(*stack_service_fn)(void *ctx, uint32_t pid, const char *comm,
					const char **labels);
void stack_agg__set_service(struct stack_agg *a, stack_service_fn fn, void *ctx);

/* Symbolizes every stack into p (count per stack). Returns 0 or -errno. */
int stack_agg__to_profile(struct stack_agg *a, struct profile *p);

/* Forgets every stack (not the symbolizer's state), for the next window. */
void stack_agg__reset(struct stack_agg *a);
/* Forgets which pids were seen, for a long-running agent that makes its
 * symbolizer forget exited processes: a pid seen again is tracked anew. */
void stack_agg__forget_pids(struct stack_agg *a);

struct stack_agg_stats {
	uint64_t samples; /* added */
	uint64_t stacks;  /* distinct stacks held */
	uint64_t dropped; /* samples not kept: table full */
	uint64_t pids;	  /* distinct pids seen */
};
void stack_agg__stats(const struct stack_agg *a, struct stack_agg_stats *out);

/* Symbolizes one stack into frames (leaf first, at most max), returning
 * how many were written: its user frames in image (the symbolizer's image
 * of its process; 0: the one that ran at s->ts_ns).
 * Names are written into names (max rows of 256 bytes) and frames[i].func
 * points there. */
size_t symbolize_stack(struct symbolizer *sym, const struct stack *s, uint32_t image,
		       struct prof_frame *frames, char (*names)[256], size_t max);

#endif
