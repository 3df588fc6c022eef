/* flame.h: flame graphs, diffs and top functions built from what a store
 * selected -- pure functions over a struct store_tree (store.h) or a
 * struct profile, so they are tested without a store or an HTTP server
 * (tests/unit/test_server_flame.c). The query API (api_query.c) feeds
 * them what store__select_tree() hands over (top: store__select()) and
 * writes their answers in Pyroscope's flamebearer format (docs/api.md).
 *
 * A flame tree merges the stacks of one selection (or two, for a diff:
 * each node then has a left and a right value) from the root: node "total"
 * at depth 0, each frame's display name (its function, "_[k]" appended for
 * kernel frames) below. Building is one hash probe per node of the store's
 * tree (per frame of a profile); writing sorts children by name once, and,
 * past max_nodes, merges the smallest nodes into an "other" child of their
 * parent. Nothing in the answer depends on the order the stacks came in. */
#ifndef SONDE_SERVER_FLAME_H
#define SONDE_SERVER_FLAME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/sbuf.h"

struct profile;
struct store_tree;
struct flame;

#define FLAME_DEFAULT_MAX_NODES 65536
#define FLAME_LIMIT_MAX_NODES 1000000
/* The bytes of names (with their sources and modules) one answer holds at
 * most: past them the lightest nodes go into "other" as past max_nodes. */
#define FLAME_MAX_TEXT (32u << 20)

/* A tree with nsides (1, or 2 for a diff) values per node; NULL on ENOMEM. */
struct flame *flame__new(int nsides);
void flame__free(struct flame *f);
/* Adds every stack of t to side (0 or 1), below a frame named group, a
 * child of the root made for it (the group-by of the query API: one such
 * frame per value of a label), or, for a NULL group, below the root.
 * Nothing is made for a t without a value. Sums stop at INT64_MAX. 0,
 * -EINVAL (bad side, a node before its parent, a function t lacks, deeper
 * than PROF_MAX_FRAMES), -E2BIG (more than UINT32_MAX - 1 nodes) or
 * -ENOMEM. */
int flame__add_tree(struct flame *f, int side, const char *group, const struct store_tree *t);
/* Adds every sample of p to side, as flame__add_tree would add the same
 * stacks as a tree. Same errors. */
int flame__add(struct flame *f, int side, const struct profile *p);
/* flame__add below a frame named group; -EINVAL for a NULL group. */
int flame__add_under(struct flame *f, int side, const char *group, const struct profile *p);
/* The frames a tree keeps of each stack added from now on: FLAME_ALL every
 * one; FLAME_PYTHON, in a stack with Python frames, those and the native
 * code they call, as py-spy shows a Python program: the native frames
 * above its outermost Python frame (_start, Py_RunMain, ...) and those of
 * the interpreter itself (python3.X, libpython) between and below its
 * Python frames are folded into the frame that called them; a native
 * library's frames (BLAS, libtorch, a C extension's) stay. A Python frame
 * is one without a module whose file is a Python source's (*.py, or a
 * frozen module's <frozen ...>), as the agent names them. A stack without
 * Python frames is kept whole. */
enum flame_frames { FLAME_ALL, FLAME_PYTHON };
void flame__set_frames(struct flame *f, enum flame_frames which);
/* Frames (or a tree's nodes) FLAME_PYTHON has left out: 0 when the view
 * shows every frame, there being no Python stack. */
uint64_t flame__folded(const struct flame *f);
/* A frame's kind as FLAME_PYTHON reads it, for a test: 1 a Python frame,
 * 2 the interpreter's, 0 another. */
int flame__frame_kind(const char *module, const char *file, bool kernel);

/* The root's total of side. */
int64_t flame__ticks(const struct flame *f, int side);
/* Nodes in the tree, root included. */
size_t flame__nodes(const struct flame *f);

/* Appends the flamebearer object to out:
 *   {"names":[...],"levels":[[...],...],"numTicks":N,"maxSelf":M}
 * with four integers per node (x_delta, total, self, name index) for one
 * side, seven for two (left x_delta, total, self, right x_delta, total,
 * self, name index; numTicks is then left + right, and "leftTicks",
 * "rightTicks" follow). Beside "names", as long as it, "sources" gives
 * each name's "FILE:LINE" (or "FILE") and "modules" the basename of its
 * module, "" when unknown -- each the least of those its functions know
 * (flame.c's names__place: files in byte order, then first lines, modules
 * in byte order), whatever order they came in, and each left out when no
 * name has one. At most max_nodes nodes
 * are written (at least the root and one "other"), whose names take at
 * most FLAME_MAX_TEXT bytes; when nodes were merged into "other",
 * "truncated": true follows "levels". 0 or -ENOMEM. */
int flame__write(struct flame *f, size_t max_nodes, struct sbuf *out);

/* One function of a top list. Strings borrowed from the profile. */
struct top_fn {
	const char *func;   /* function name (shown with "_[k]" when kernel) */
	const char *module; /* basename of the module, "" when none */
	bool kernel;
	int64_t self, total;
	const char *file; /* the source file, "" when unknown */
	uint32_t line;	  /* the function's first line, 0 when unknown */
};

enum top_sort { TOP_BY_SELF, TOP_BY_TOTAL };

/* The functions of p with their self and total values (total counts a
 * function once per stack however often it recurses), sorted by sort (then
 * the other value, then name), at most limit of them, into *out
 * (malloc()ed, free() it; its strings live as long as p). With FLAME_PYTHON
 * the stacks as a flame graph of that view shows them: a folded frame's
 * time is its kept caller's. 0 or -ENOMEM. */
int top__build(const struct profile *p, enum top_sort sort, enum flame_frames frames, size_t limit,
	       struct top_fn **out, size_t *n);

#endif
