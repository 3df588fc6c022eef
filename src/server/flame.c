/* flame.c: the flame tree, its flamebearer writer (single and diff) with
 * max_nodes collapsing, and top functions, as flame.h describes. Built for
 * trees of millions of nodes: nodes live in one array, a child is found by
 * one probe of an open-addressing table keyed by (parent, name), names are
 * interned once per distinct string, and the writer sorts each node's
 * children by a precomputed name rank rather than by strcmp. A store's
 * tree (store.h) is added node by node, a profile stack by stack; what a
 * name shows of its function's place follows one rule (names__place). */
#include "server/flame.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "common/hash.h"
#include "common/idmap.h"
#include "common/text.h"
#include "common/json.h"
#include "common/sat.h"
#include "common/xalloc.h"
#include "profile/profile.h"
#include "store/store.h"

#define KERNEL_SUFFIX "_[k]"
#define NONE UINT32_MAX

struct fnode {
	uint32_t parent, name, depth;
	int64_t total[2], self[2];
};

struct flame {
	int nsides;
	enum flame_frames frames; /* what a stack keeps (flame__set_frames) */
	uint64_t folded;	  /* frames FLAME_PYTHON left out, so far */
	struct fnode *nodes;
	size_t n, cap;
	struct idmap kids; /* (parent, name) -> node */
	char **names;
	/* Per name, what it shows of where its function is (names__place):
	 * "FILE:LINE" or "FILE", or NULL, with FILE's length and LINE (0
	 * unknown); and the basename of its module, or NULL. */
	char **srcs;
	uint32_t *srcflen, *srcline;
	char **mods;
	size_t nnames, capnames, capsrcs, capflen, capline, capmods;
	struct idmap nametab; /* hash of the string -> name index + 1 */
	uint32_t name_total, name_other;
};

static uint64_t hash_pair(uint32_t a, uint32_t b)
{
	return (uint64_t)a << 32 | b;
}

/* The index of name s[0..n), added if new; NONE on ENOMEM. */
static uint32_t names__intern(struct flame *f, const char *s, size_t n)
{
	uint64_t h = hash_bytes(s, n, 0);
	size_t pos = IDMAP_START;
	uint32_t id;
	char *copy;

	while ((id = idmap__next(&f->nametab, h, &pos)))
		if (!strncmp(f->names[id - 1], s, n) && !f->names[id - 1][n])
			return id - 1;
	if (f->nnames >= NONE - 1 ||
	    array_grow((void **)&f->names, &f->capnames, f->nnames + 1, sizeof(*f->names)) ||
	    array_grow((void **)&f->srcs, &f->capsrcs, f->nnames + 1, sizeof(*f->srcs)) ||
	    array_grow((void **)&f->srcflen, &f->capflen, f->nnames + 1, sizeof(*f->srcflen)) ||
	    array_grow((void **)&f->srcline, &f->capline, f->nnames + 1, sizeof(*f->srcline)) ||
	    array_grow((void **)&f->mods, &f->capmods, f->nnames + 1, sizeof(*f->mods)))
		return NONE;
	copy = strndup(s, n);
	if (!copy)
		return NONE;
	if (idmap__put(&f->nametab, h, (uint32_t)f->nnames + 1)) {
		free(copy);
		return NONE;
	}
	f->names[f->nnames] = copy;
	f->srcs[f->nnames] = NULL;
	f->srcflen[f->nnames] = f->srcline[f->nnames] = 0;
	f->mods[f->nnames] = NULL;
	return (uint32_t)f->nnames++;
}

/* The child of parent named name, added if new; NONE on error. The key
 * (parent, name) is the whole identity of a child: no comparison past it. */
static uint32_t flame__child(struct flame *f, uint32_t parent, uint32_t name)
{
	uint64_t key = hash_pair(parent, name);
	uint32_t id = idmap__get(&f->kids, key);
	struct fnode *nd;

	if (id)
		return id;
	if (f->n >= NONE - 1)
		return NONE;
	if (array_grow((void **)&f->nodes, &f->cap, f->n + 1, sizeof(*f->nodes)) ||
	    idmap__put(&f->kids, key, (uint32_t)f->n))
		return NONE;
	nd = &f->nodes[f->n];
	memset(nd, 0, sizeof(*nd));
	nd->parent = parent;
	nd->name = name;
	nd->depth = f->nodes[parent].depth + 1;
	return (uint32_t)f->n++;
}

/* Room for up to more nodes beyond those f has, taken at once rather than
 * doubling as they come: the node array is copied and the child table
 * rehashed once, not at every doubling. more is a bound the caller knows
 * (a tree's nodes, a profile's frames), cut to FLAME_RESERVE_MAX: past it
 * the tree grows as it goes. The array is not zeroed (flame__child zeroes
 * each node it makes), so that room a loose bound leaves unused costs no
 * memory. 0 or -ENOMEM. */
#define FLAME_RESERVE_MAX (1u << 20)
static int flame__reserve(struct flame *f, size_t more)
{
	size_t room = more < FLAME_RESERVE_MAX ? more : FLAME_RESERVE_MAX, need = f->n + room;

	if (need > f->cap) {
		struct fnode *nodes = realloc(f->nodes, need * sizeof(*nodes));

		if (!nodes)
			return -ENOMEM;
		f->nodes = nodes;
		f->cap = need;
	}
	return idmap__reserve(&f->kids, room);
}

struct flame *flame__new(int nsides)
{
	struct flame *f = calloc(1, sizeof(*f));

	if (!f || nsides < 1 || nsides > 2)
		goto fail;
	f->nsides = nsides;
	/* The root, and empty index tables. */
	if (array_grow((void **)&f->nodes, &f->cap, 1024, sizeof(*f->nodes)) ||
	    idmap__reserve(&f->kids, 1024) || idmap__reserve(&f->nametab, 512))
		goto fail;
	f->name_total = names__intern(f, "total", 5);
	f->name_other = names__intern(f, "other", 5);
	if (f->name_total == NONE || f->name_other == NONE)
		goto fail;
	f->nodes[0].parent = NONE;
	f->nodes[0].name = f->name_total;
	f->n = 1;
	return f;
fail:
	flame__free(f);
	errno = ENOMEM;
	return NULL;
}

void flame__free(struct flame *f)
{
	if (!f)
		return;
	for (size_t i = 0; i < f->nnames; i++) {
		free(f->names[i]);
		free(f->srcs[i]);
		free(f->mods[i]);
	}
	free(f->names);
	free(f->srcs);
	free(f->srcflen);
	free(f->srcline);
	free(f->mods);
	idmap__free(&f->nametab);
	idmap__free(&f->kids);
	free(f->nodes);
	free(f);
}

int64_t flame__ticks(const struct flame *f, int side)
{
	return side >= 0 && side < f->nsides ? f->nodes[0].total[side] : 0;
}

size_t flame__nodes(const struct flame *f)
{
	return f->n;
}

/* A path's last component; the path whole when it ends with a '/'. */
static const char *base_name(const char *path)
{
	const char *b = path_base(path);

	return *b ? b : path;
}

/* The name a function shows: its own, "_[k]" appended for the kernel's
 * (*buf, *bufcap: scratch for that); NONE on ENOMEM. */
static uint32_t names__of(struct flame *f, const char *name, bool kernel, char **buf,
			  size_t *bufcap)
{
	size_t n = strlen(name), k = strlen(KERNEL_SUFFIX);

	if (!kernel)
		return names__intern(f, name, n);
	if (n + k + 1 > *bufcap) {
		char *nb = realloc(*buf, n + k + 1);

		if (!nb)
			return NONE;
		*buf = nb;
		*bufcap = n + k + 1;
	}
	memcpy(*buf, name, n);
	memcpy(*buf + n, KERNEL_SUFFIX, k + 1);
	return names__intern(f, *buf, n + k);
}

static int cmp_bytes(const char *a, size_t alen, const char *b, size_t blen)
{
	int c = memcmp(a, b, alen < blen ? alen : blen);

	return c ? c : (alen > blen) - (alen < blen);
}

/* Where name's function is, told by one more function that shows as name
 * (file and module "" when unknown, line 0). Several functions can show
 * as one name (one name in two modules, or in two files): the name shows
 * the least file in byte order and, in it, the least first line (an
 * unknown one last), and the least module basename in byte order, each
 * among the functions that know one. A rule on the set of functions, not
 * on the order they come in, so that a flame graph is the same from
 * every store and however its stacks came. 0 or -ENOMEM. */
static int names__place(struct flame *f, uint32_t name, const char *file, uint32_t line,
			const char *module)
{
	if (*file) {
		size_t flen = strlen(file);
		int c = f->srcs[name] ? cmp_bytes(file, flen, f->srcs[name], f->srcflen[name]) : -1;
		char *src;

		/* line - 1 wraps 0, unknown, past every known line. */
		if (c < 0 || (!c && line - 1 < f->srcline[name] - 1)) {
			if (line ? asprintf(&src, "%s:%u", file, line) < 0 : !(src = strdup(file)))
				return -ENOMEM;
			free(f->srcs[name]);
			f->srcs[name] = src;
			f->srcflen[name] = (uint32_t)flen;
			f->srcline[name] = line;
		}
	}
	/* The module, likewise: the colour by module of the UI. */
	if (*module) {
		const char *base = base_name(module);

		if (!f->mods[name] || strcmp(base, f->mods[name]) < 0) {
			char *copy = strdup(base);

			if (!copy)
				return -ENOMEM;
			free(f->mods[name]);
			f->mods[name] = copy;
		}
	}
	return 0;
}

/* The node that stacks are added below: the frame named group under the
 * root (made if new; NONE on error, with *err set), or the root for no
 * group. */
static uint32_t flame__base(struct flame *f, const char *group, int *err)
{
	uint32_t name, node;

	if (!group)
		return 0;
	name = names__intern(f, group, strlen(group));
	node = name == NONE ? NONE : flame__child(f, 0, name);
	if (node == NONE)
		*err = f->n >= NONE - 1 ? -E2BIG : -ENOMEM;
	return node;
}

void flame__set_frames(struct flame *f, enum flame_frames which)
{
	f->frames = which;
}

uint64_t flame__folded(const struct flame *f)
{
	return f->folded;
}

enum { FK_OTHER, FK_PYTHON, FK_INTERP };

/* Whether a module's basename is the interpreter's: python3, python3.11,
 * libpython3.11.so.1.0. */
static bool interp_module(const char *module)
{
	const char *b = path_base(module);

	if (!strncmp(b, "lib", 3))
		b += 3;
	if (strncmp(b, "python", 6))
		return false;
	for (b += 6; *b && ((*b >= '0' && *b <= '9') || *b == '.'); b++)
		;
	return !*b || !strncmp(b, "so", 2) || !strcmp(b, "d") || !strcmp(b, "m");
}

/* Whether file is a Python source's: "*.py", or a frozen module's
 * "<frozen importlib._bootstrap>". */
static bool python_file(const char *file)
{
	size_t n = strlen(file);

	return (n > 3 && !strcmp(file + n - 3, ".py")) ||
	       (n > 2 && file[0] == '<' && file[n - 1] == '>');
}

int flame__frame_kind(const char *module, const char *file, bool kernel)
{
	if (kernel)
		return FK_OTHER;
	if (!*module)
		return python_file(file) ? FK_PYTHON : FK_OTHER;
	return interp_module(module) ? FK_INTERP : FK_OTHER;
}

/* The kinds of p's locations (flame__frame_kind), for FLAME_PYTHON; NULL on
 * ENOMEM. */
static uint8_t *location_kinds(const struct profile *p)
{
	uint8_t *kind = malloc(p->nlocs ? p->nlocs : 1);

	for (size_t i = 0; kind && i < p->nlocs; i++) {
		const struct prof_location *l = &p->locs[i];

		kind[i] = (uint8_t)flame__frame_kind(l->module ? profile__str(p, l->module) : "",
						     l->file ? profile__str(p, l->file) : "",
						     l->kernel);
	}
	return kind;
}

/* Which of sample s's locations FLAME_PYTHON keeps (keep[j], leaf first):
 * in a stack with Python frames, not the interpreter's nor the native
 * frames above the outermost Python frame; every one in another. */
static void python_keep(const uint8_t *kind, const struct prof_sample *s, bool *keep)
{
	bool python = false, seen = false;

	for (uint32_t j = 0; j < s->nlocs && !python; j++)
		python = kind[s->locs[j]] == FK_PYTHON;
	for (uint32_t j = s->nlocs; j-- > 0;) {
		int k = kind[s->locs[j]];

		seen |= k == FK_PYTHON;
		keep[j] = !python || !(k == FK_INTERP || (k == FK_OTHER && !seen));
	}
}

/* Which nodes of t FLAME_PYTHON folds (into *fold, allocated): a native
 * node above the outermost Python frame of a stack that has one, and an
 * interpreter node with a Python frame above or below it. 0 or -ENOMEM. */
static int python_folds(const struct store_tree *t, bool **fold)
{
	const struct store_node *nodes = t->nodes;
	size_t n = t->nnodes ? t->nnodes : 1, i;
	uint8_t *kind = malloc(t->nfuncs ? t->nfuncs : 1);
	bool *py_above = calloc(n, 1), *py_below = calloc(n, 1);
	int err = 0;

	*fold = calloc(n, 1);
	if (!kind || !py_above || !py_below || !*fold) {
		err = -ENOMEM;
		goto cleanup;
	}
	for (i = 0; i < t->nfuncs; i++)
		kind[i] = (uint8_t)flame__frame_kind(t->funcs[i].module, t->funcs[i].file,
						     t->funcs[i].kernel);
	/* Nodes come after their parents: down for what is above, back up
	 * for what is below. */
	for (i = 0; i < t->nnodes; i++) {
		uint32_t p = nodes[i].parent;

		if (p != STORE_NO_PARENT)
			py_above[i] = py_above[p] || kind[nodes[p].func] == FK_PYTHON;
	}
	for (i = t->nnodes; i-- > 0;) {
		uint32_t p = nodes[i].parent;

		if (kind[nodes[i].func] == FK_PYTHON)
			py_below[i] = true;
		if (p != STORE_NO_PARENT && py_below[i])
			py_below[p] = true;
	}
	for (i = 0; i < t->nnodes; i++) {
		int k = kind[nodes[i].func];
		/* py_below of a node counts itself; "below" means its children. */
		bool below = py_below[i] && k != FK_PYTHON;

		if (k == FK_OTHER)
			(*fold)[i] = !py_above[i] && below;
		else if (k == FK_INTERP)
			(*fold)[i] = py_above[i] || below;
	}
cleanup:
	free(kind);
	free(py_above);
	free(py_below);
	return err;
}

int flame__add_tree(struct flame *f, int side, const char *group, const struct store_tree *t)
{
	const struct store_node *nodes = t->nodes;
	uint32_t *fname = NULL, *fnode = NULL, base;
	int64_t *tot = NULL, sum = t->root_value > 0 ? t->root_value : 0;
	bool *fold = NULL;
	char *buf = NULL;
	size_t bufcap = 0, i;
	int err = 0;

	if (side < 0 || side >= f->nsides)
		return -EINVAL;
	if (f->frames == FLAME_PYTHON && (err = python_folds(t, &fold)))
		goto cleanup;
	/* The value under each node, the leaves' added to their parents'
	 * from the last node back (each node comes after its parent). */
	tot = malloc((t->nnodes ? t->nnodes : 1) * sizeof(*tot));
	fnode = malloc((t->nnodes ? t->nnodes : 1) * sizeof(*fnode));
	fname = malloc((t->nfuncs ? t->nfuncs : 1) * sizeof(*fname));
	if (!tot || !fnode || !fname) {
		err = -ENOMEM;
		goto cleanup;
	}
	memset(fname, 0xff, (t->nfuncs ? t->nfuncs : 1) * sizeof(*fname));
	for (i = 0; i < t->nnodes; i++)
		tot[i] = nodes[i].value > 0 ? nodes[i].value : 0;
	for (i = t->nnodes; i-- > 0;) {
		uint32_t p = nodes[i].parent;

		if (nodes[i].func >= t->nfuncs || (p != STORE_NO_PARENT && p >= i)) {
			err = -EINVAL;
			goto cleanup;
		}
		/* Sums stop at INT64_MAX, as in flame__add_below. */
		if (p == STORE_NO_PARENT)
			sum = sat_add_i64(sum, tot[i]);
		else
			tot[p] = sat_add_i64(tot[p], tot[i]);
	}
	/* No frame for nothing: the writer would draw it zero wide. */
	if (!sum)
		goto cleanup;
	base = flame__base(f, group, &err);
	if (!err)
		err = flame__reserve(f, t->nnodes);
	if (err)
		goto cleanup;
	f->nodes[0].total[side] = sat_add_i64(f->nodes[0].total[side], sum);
	if (base)
		f->nodes[base].total[side] = sat_add_i64(f->nodes[base].total[side], sum);
	if (t->root_value > 0)
		f->nodes[base].self[side] = sat_add_i64(f->nodes[base].self[side], t->root_value);
	for (i = 0; i < t->nnodes; i++) {
		const struct store_node *nd = &nodes[i];
		uint32_t parent = nd->parent == STORE_NO_PARENT ? base : fnode[nd->parent], node;

		/* A node with nothing under it leads to no stack shown (nor
		 * do its children), and its function shows nothing. */
		if (!tot[i]) {
			fnode[i] = NONE;
			continue;
		}
		/* Folded: its children hang from its parent, its own value is
		 * its parent's. */
		if (fold && fold[i]) {
			f->folded++;
			fnode[i] = parent;
			if (nd->value > 0)
				f->nodes[parent].self[side] =
					sat_add_i64(f->nodes[parent].self[side], nd->value);
			continue;
		}
		if (fname[nd->func] == NONE) {
			const struct store_func *fn = &t->funcs[nd->func];

			fname[nd->func] = names__of(f, fn->name, fn->kernel, &buf, &bufcap);
			if (fname[nd->func] == NONE) {
				err = -ENOMEM;
				goto cleanup;
			}
			err = names__place(f, fname[nd->func], fn->file, fn->start_line,
					   fn->module);
			if (err)
				goto cleanup;
		}
		node = flame__child(f, parent, fname[nd->func]);
		if (node == NONE) {
			err = f->n >= NONE - 1 ? -E2BIG : -ENOMEM;
			goto cleanup;
		}
		/* The writer recurses once a level: as deep as a profile. */
		if (f->nodes[node].depth > PROF_MAX_FRAMES + 1) {
			err = -EINVAL;
			goto cleanup;
		}
		fnode[i] = node;
		f->nodes[node].total[side] = sat_add_i64(f->nodes[node].total[side], tot[i]);
		if (nd->value > 0)
			f->nodes[node].self[side] =
				sat_add_i64(f->nodes[node].self[side], nd->value);
	}
cleanup:
	free(buf);
	free(tot);
	free(fnode);
	free(fname);
	free(fold);
	return err;
}

/* A profile's stacks are added sample by sample, each walked from the
 * root: a profile keeps no trie, and turning it into a tree of chains
 * (store_tree__of_profile) would cost memory for nothing. The names of the
 * locations the samples with a value use are interned first, in a pass of
 * their own: interleaved with the walks they cost a fifth more. */
static int flame__add_below(struct flame *f, int side, const char *group, const struct profile *p)
{
	uint32_t *locname = NULL, base = 0;
	uint8_t *kind = NULL; /* per location, for FLAME_PYTHON */
	char *buf = NULL;
	size_t bufcap = 0, frames = 0, i;
	int64_t sum = 0;
	int err = 0;

	locname = malloc((p->nlocs ? p->nlocs : 1) * sizeof(*locname));
	if (!locname)
		return -ENOMEM;
	if (f->frames == FLAME_PYTHON && !(kind = location_kinds(p))) {
		free(locname);
		return -ENOMEM;
	}
	memset(locname, 0xff, (p->nlocs ? p->nlocs : 1) * sizeof(*locname));
	/* The locations shown (0 marks them), and the value to show. */
	for (i = 0; i < p->nsamples; i++) {
		const struct prof_sample *s = &p->samples[i];

		if (s->count <= 0)
			continue;
		sum = sat_add_i64(sum, s->count);
		frames += s->nlocs;
		for (uint32_t j = 0; j < s->nlocs; j++) {
			if (s->locs[j] >= p->nlocs) {
				err = -EINVAL;
				goto cleanup;
			}
			locname[s->locs[j]] = 0;
		}
	}
	/* No frame for nothing: the writer would draw it zero wide. */
	if (!sum)
		goto cleanup;
	for (i = 0; i < p->nlocs; i++) {
		const struct prof_location *l = &p->locs[i];

		if (locname[i] == NONE)
			continue;
		locname[i] = names__of(f, profile__str(p, l->func), l->kernel, &buf, &bufcap);
		if (locname[i] == NONE) {
			err = -ENOMEM;
			goto cleanup;
		}
		err = names__place(f, locname[i], l->file ? profile__str(p, l->file) : "",
				   l->start_line, l->module ? profile__str(p, l->module) : "");
		if (err)
			goto cleanup;
	}
	base = flame__base(f, group, &err);
	if (!err)
		err = flame__reserve(f, frames);
	if (err)
		goto cleanup;
	for (i = 0; i < p->nsamples; i++) {
		const struct prof_sample *s = &p->samples[i];
		int64_t c = s->count;
		uint32_t node = base;
		bool keep[PROF_MAX_FRAMES];

		if (c <= 0)
			continue;
		if (kind)
			python_keep(kind, s, keep);
		/* Sums stop at INT64_MAX (common/sat.h): a stored value that
		 * large must not fail the answer. */
		f->nodes[0].total[side] = sat_add_i64(f->nodes[0].total[side], c);
		if (base)
			f->nodes[base].total[side] = sat_add_i64(f->nodes[base].total[side], c);
		for (uint32_t j = s->nlocs; j-- > 0;) {
			if (kind && !keep[j]) {
				f->folded++;
				continue;
			}
			node = flame__child(f, node, locname[s->locs[j]]);
			if (node == NONE) {
				err = f->n >= NONE - 1 ? -E2BIG : -ENOMEM;
				goto cleanup;
			}
			f->nodes[node].total[side] = sat_add_i64(f->nodes[node].total[side], c);
		}
		f->nodes[node].self[side] = sat_add_i64(f->nodes[node].self[side], c);
	}
cleanup:
	free(buf);
	free(locname);
	free(kind);
	return err;
}

int flame__add(struct flame *f, int side, const struct profile *p)
{
	if (side < 0 || side >= f->nsides)
		return -EINVAL;
	return flame__add_below(f, side, NULL, p);
}

int flame__add_under(struct flame *f, int side, const char *group, const struct profile *p)
{
	if (side < 0 || side >= f->nsides || !group)
		return -EINVAL;
	return flame__add_below(f, side, group, p);
}

/* What the writer works with: children sorted by name, the nodes kept. */
struct fwriter {
	struct flame *f;
	uint32_t *rank;	     /* name -> position in byte order */
	uint32_t *kid_start; /* node -> first entry in kid_list; n + 1 entries */
	uint32_t *kid_list;  /* children of each node, by name */
	uint32_t *order;     /* node -> pre-order position */
	uint8_t *kept;	     /* node -> written */
	uint32_t *outname;   /* name -> index in the answer, NONE until used */
	uint32_t noutnames;
	uint32_t *outnames;  /* answer index -> name */
	uint32_t *scratch;   /* max(nodes, names) entries, for fwriter__index */
	struct sbuf *levels; /* one per depth */
	int64_t (*end)[2];   /* per depth and side: where the last node ended */
	uint32_t maxdepth;
	int64_t maxself;
	bool cut; /* nodes were merged into "other" */
	int err;
};

static int cmp_u32_by(const void *a, const void *b, void *ctx)
{
	const uint32_t *key = ctx;
	uint32_t x = key[*(const uint32_t *)a], y = key[*(const uint32_t *)b];

	return x < y ? -1 : x > y;
}

static int cmp_name_idx(const void *a, const void *b, void *ctx)
{
	char **names = ctx;

	return strcmp(names[*(const uint32_t *)a], names[*(const uint32_t *)b]);
}

/* Heaviest first; a parent before its children (never lighter, and
 * shallower on a tie); then left to right. */
static int cmp_weight(const void *a, const void *b, void *ctx)
{
	const struct fwriter *w = ctx;
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	const struct fnode *nx = &w->f->nodes[x], *ny = &w->f->nodes[y];
	int64_t wx = sat_add_i64(nx->total[0], nx->total[1]);
	int64_t wy = sat_add_i64(ny->total[0], ny->total[1]);

	if (wx != wy)
		return wx > wy ? -1 : 1;
	if (nx->depth != ny->depth)
		return nx->depth < ny->depth ? -1 : 1;
	return w->order[x] < w->order[y] ? -1 : w->order[x] > w->order[y];
}

static int put_i64(struct sbuf *b, int64_t v)
{
	char tmp[24], *p = tmp + sizeof(tmp);
	uint64_t u = v < 0 ? -(uint64_t)v : (uint64_t)v;

	do {
		*--p = (char)('0' + u % 10);
		u /= 10;
	} while (u);
	if (v < 0)
		*--p = '-';
	return sbuf__add(b, p, (size_t)(tmp + sizeof(tmp) - p));
}

static uint32_t fwriter__name(struct fwriter *w, uint32_t name)
{
	if (w->outname[name] == NONE) {
		w->outname[name] = w->noutnames;
		w->outnames[w->noutnames++] = name;
	}
	return w->outname[name];
}

/* Appends one node to its level. */
static void fwriter__emit(struct fwriter *w, uint32_t depth, const int64_t *x, const int64_t *total,
			  const int64_t *self, uint32_t name)
{
	struct sbuf *b = &w->levels[depth];
	int err = 0;

	if (depth > w->maxdepth)
		w->maxdepth = depth;
	for (int s = 0; s < w->f->nsides && !err; s++) {
		if (b->len)
			err |= sbuf__add(b, ",", 1);
		err |= put_i64(b, x[s] - w->end[depth][s]);
		err |= sbuf__add(b, ",", 1);
		err |= put_i64(b, total[s]);
		err |= sbuf__add(b, ",", 1);
		err |= put_i64(b, self[s]);
		w->end[depth][s] = sat_add_i64(x[s], total[s]);
		if (self[s] > w->maxself)
			w->maxself = self[s];
	}
	err |= sbuf__add(b, ",", 1);
	err |= put_i64(b, fwriter__name(w, name));
	if (err)
		w->err = -ENOMEM;
}

/* Writes node v at x and its subtree, pre-order. Depth is bounded by the
 * stack depth a profile allows (PROF_MAX_FRAMES), so recursion is fine. */
static void fwriter__walk(struct fwriter *w, uint32_t v, const int64_t *x)
{
	const struct fnode *nd = &w->f->nodes[v];
	int64_t cx[2] = {x[0], x[1]}, other_total[2] = {0, 0};
	uint32_t other_rank = w->rank[w->f->name_other];
	bool have_other = false, other_done = false;
	uint32_t i;

	fwriter__emit(w, nd->depth, x, nd->total, nd->self, nd->name);
	for (i = w->kid_start[v]; i < w->kid_start[v + 1]; i++) {
		const struct fnode *k = &w->f->nodes[w->kid_list[i]];

		if (!w->kept[w->kid_list[i]]) {
			have_other = true;
			other_total[0] = sat_add_i64(other_total[0], k->total[0]);
			other_total[1] = sat_add_i64(other_total[1], k->total[1]);
		}
	}
	for (i = w->kid_start[v]; i <= w->kid_start[v + 1] && !w->err; i++) {
		bool last = i == w->kid_start[v + 1];
		uint32_t k = last ? NONE : w->kid_list[i];

		if (have_other && !other_done &&
		    (last || w->rank[w->f->nodes[k].name] > other_rank)) {
			fwriter__emit(w, nd->depth + 1, cx, other_total, other_total,
				      w->f->name_other);
			cx[0] = sat_add_i64(cx[0], other_total[0]);
			cx[1] = sat_add_i64(cx[1], other_total[1]);
			other_done = true;
		}
		if (last || !w->kept[k])
			continue;
		fwriter__walk(w, k, cx);
		cx[0] = sat_add_i64(cx[0], w->f->nodes[k].total[0]);
		cx[1] = sat_add_i64(cx[1], w->f->nodes[k].total[1]);
	}
}

/* The bytes name i adds to the answer: itself, its source, its module. */
static size_t name_text(const struct flame *f, uint32_t i)
{
	return strlen(f->names[i]) + (f->srcs[i] ? strlen(f->srcs[i]) : 0) +
	       (f->mods[i] ? strlen(f->mods[i]) : 0);
}

/* Marks the nodes to write: all of them, or the heaviest that fit in
 * max_nodes together with the "other" nodes their dropped siblings need,
 * and whose names fit in FLAME_MAX_TEXT bytes. */
static int fwriter__keep(struct fwriter *w, size_t max_nodes)
{
	struct flame *f = w->f;
	uint32_t *sorted = NULL, *unkept = NULL;
	uint8_t *named = NULL;
	size_t count = 1, others, i, text = 0;
	int err = 0;

	for (i = 0; i < f->nnames && text <= FLAME_MAX_TEXT; i++)
		text += name_text(f, (uint32_t)i);
	if (f->n <= max_nodes && text <= FLAME_MAX_TEXT) {
		memset(w->kept, 1, f->n);
		return 0;
	}
	w->cut = true;
	sorted = malloc(f->n * sizeof(*sorted));
	unkept = malloc(f->n * sizeof(*unkept));
	named = calloc(f->nnames, 1);
	if (!sorted || !unkept || !named) {
		err = -ENOMEM;
		goto cleanup;
	}
	/* The root's and "other"'s names are always written. */
	named[f->nodes[0].name] = named[f->name_other] = 1;
	text = name_text(f, f->nodes[0].name) + name_text(f, f->name_other);
	for (i = 0; i < f->n; i++) {
		sorted[i] = (uint32_t)i;
		unkept[i] = w->kid_start[i + 1] - w->kid_start[i];
	}
	qsort_r(sorted + 1, f->n - 1, sizeof(*sorted), cmp_weight, w);
	w->kept[0] = 1;
	others = unkept[0] ? 1 : 0;
	for (i = 1; i < f->n; i++) {
		uint32_t v = sorted[i], pv = f->nodes[v].parent;
		size_t nothers = others - (unkept[pv] == 1) + (unkept[v] ? 1 : 0);

		if (count + 1 + nothers > max_nodes)
			break;
		if (!named[f->nodes[v].name]) {
			size_t t = name_text(f, f->nodes[v].name);

			/* Past the bound the rest go into "other": every node
			 * kept after this one would be lighter still. */
			if (text + t > FLAME_MAX_TEXT)
				break;
			text += t;
			named[f->nodes[v].name] = 1;
		}
		w->kept[v] = 1;
		unkept[pv]--;
		count++;
		others = nothers;
	}
cleanup:
	free(sorted);
	free(unkept);
	free(named);
	return err;
}

static void fwriter__free(struct fwriter *w, size_t nlevels)
{
	if (w->levels)
		for (size_t i = 0; i < nlevels; i++)
			sbuf__free(&w->levels[i]);
	free(w->levels);
	free(w->end);
	free(w->rank);
	free(w->scratch);
	free(w->kid_start);
	free(w->kid_list);
	free(w->order);
	free(w->kept);
	free(w->outname);
	free(w->outnames);
}

/* The writer's arrays for f, with nlevels levels; 0 or -ENOMEM. */
static int fwriter__init(struct fwriter *w, struct flame *f, size_t nlevels)
{
	memset(w, 0, sizeof(*w));
	w->f = f;
	w->rank = malloc(f->nnames * sizeof(*w->rank));
	w->scratch = malloc((f->n > f->nnames ? f->n : f->nnames) * sizeof(*w->scratch));
	w->kid_start = calloc(f->n + 1, sizeof(*w->kid_start));
	w->kid_list = malloc(f->n * sizeof(*w->kid_list));
	w->order = malloc(f->n * sizeof(*w->order));
	w->kept = calloc(f->n, 1);
	w->outname = malloc(f->nnames * sizeof(*w->outname));
	w->outnames = malloc(f->nnames * sizeof(*w->outnames));
	w->levels = calloc(nlevels, sizeof(*w->levels));
	w->end = calloc(nlevels, sizeof(*w->end));
	if (!w->rank || !w->scratch || !w->kid_start || !w->kid_list || !w->order || !w->kept ||
	    !w->outname || !w->outnames || !w->levels || !w->end)
		return -ENOMEM;
	memset(w->outname, 0xff, f->nnames * sizeof(*w->outname));
	return 0;
}

/* Name ranks, children lists and pre-order positions of the tree. */
static void fwriter__index(struct fwriter *w)
{
	const struct flame *f = w->f;
	uint32_t *scratch = w->scratch, top = 0, pos = 0;
	size_t i;

	/* Name ranks in byte order, so that children sort by comparing
	 * integers. */
	for (i = 0; i < f->nnames; i++)
		scratch[i] = (uint32_t)i;
	qsort_r(scratch, f->nnames, sizeof(*scratch), cmp_name_idx, f->names);
	for (i = 0; i < f->nnames; i++)
		w->rank[scratch[i]] = (uint32_t)i;

	/* Children lists (CSR), each sorted by name rank. */
	for (i = 1; i < f->n; i++)
		w->kid_start[f->nodes[i].parent + 1]++;
	for (i = 0; i < f->n; i++)
		w->kid_start[i + 1] += w->kid_start[i];
	memcpy(scratch, w->kid_start, f->n * sizeof(*scratch));
	for (i = 1; i < f->n; i++)
		w->kid_list[scratch[f->nodes[i].parent]++] = (uint32_t)i;
	for (i = 0; i < f->n; i++)
		scratch[i] = w->rank[f->nodes[i].name];
	for (i = 0; i < f->n; i++) {
		uint32_t a = w->kid_start[i], b = w->kid_start[i + 1];

		if (b - a > 1)
			qsort_r(w->kid_list + a, b - a, sizeof(uint32_t), cmp_u32_by, scratch);
	}

	/* Pre-order positions, the tie-break of the keep order. Each node is
	 * pushed once, so the stack (scratch) never holds more than n. */
	scratch[top++] = 0;
	while (top) {
		uint32_t v = scratch[--top];

		w->order[v] = pos++;
		for (uint32_t j = w->kid_start[v + 1]; j-- > w->kid_start[v];)
			scratch[top++] = w->kid_list[j];
	}
}

/* ,"key":[...] with per[name] of each name written ("" for NULL), only
 * when one of them is known. */
static int fwriter__per_name(struct fwriter *w, const char *key, char *const *per, struct sbuf *out)
{
	json_t *arr;
	size_t i;
	int err = 0;

	for (i = 0; i < w->noutnames && !per[w->outnames[i]]; i++)
		;
	if (i == w->noutnames)
		return 0;
	arr = json_array();
	for (i = 0; arr && i < w->noutnames; i++) {
		const char *v = per[w->outnames[i]];

		if (json_array_append_new(arr, json_string_lossy(v ? v : ""))) {
			json_decref(arr);
			arr = NULL;
		}
	}
	if (!arr)
		return -ENOMEM;
	err |= sbuf__printf(out, ",\"%s\":", key);
	err |= sbuf__json(out, arr);
	json_decref(arr);
	return err ? -ENOMEM : 0;
}

/* The flamebearer object of what the walk wrote, appended to out. */
static int fwriter__finish(struct fwriter *w, struct sbuf *out)
{
	const struct flame *f = w->f;
	json_t *names = json_array();
	int err = 0;
	size_t i;

	if (!names)
		return -ENOMEM;
	for (i = 0; i < w->noutnames; i++)
		if (json_array_append_new(names, json_string_lossy(f->names[w->outnames[i]]))) {
			json_decref(names);
			return -ENOMEM;
		}
	err |= sbuf__puts(out, "{\"names\":");
	err |= sbuf__json(out, names);
	json_decref(names);
	/* Where each name's function is in the source, and its module, ""
	 * when unknown; each only when one is known. */
	if (fwriter__per_name(w, "sources", f->srcs, out) ||
	    fwriter__per_name(w, "modules", f->mods, out))
		return -ENOMEM;
	err |= sbuf__puts(out, ",\"levels\":[");
	for (i = 0; i <= w->maxdepth; i++) {
		err |= sbuf__add(out, i ? ",[" : "[", i ? 2 : 1);
		if (w->levels[i].len)
			err |= sbuf__add(out, w->levels[i].buf, w->levels[i].len);
		err |= sbuf__add(out, "]", 1);
	}
	err |= sbuf__puts(out, "]");
	if (w->cut)
		err |= sbuf__puts(out, ",\"truncated\":true");
	err |= sbuf__puts(out, ",\"numTicks\":");
	err |= put_i64(out,
		       sat_add_i64(f->nodes[0].total[0], f->nsides > 1 ? f->nodes[0].total[1] : 0));
	err |= sbuf__puts(out, ",\"maxSelf\":");
	err |= put_i64(out, w->maxself);
	if (f->nsides > 1) {
		err |= sbuf__puts(out, ",\"leftTicks\":");
		err |= put_i64(out, f->nodes[0].total[0]);
		err |= sbuf__puts(out, ",\"rightTicks\":");
		err |= put_i64(out, f->nodes[0].total[1]);
	}
	err |= sbuf__puts(out, "}");
	return err ? -ENOMEM : 0;
}

int flame__write(struct flame *f, size_t max_nodes, struct sbuf *out)
{
	struct fwriter w;
	uint32_t maxdepth = 0;
	size_t nlevels;
	int64_t x[2] = {0, 0};
	int err;

	for (size_t i = 0; i < f->n; i++)
		if (f->nodes[i].depth > maxdepth)
			maxdepth = f->nodes[i].depth;
	nlevels = (size_t)maxdepth + 2; /* an "other" may sit below the deepest */
	err = fwriter__init(&w, f, nlevels);
	if (err)
		goto cleanup;
	fwriter__index(&w);
	if (max_nodes < 2)
		max_nodes = 2;
	err = fwriter__keep(&w, max_nodes);
	if (err)
		goto cleanup;
	fwriter__walk(&w, 0, x);
	err = w.err;
	if (!err)
		err = fwriter__finish(&w, out);
cleanup:
	fwriter__free(&w, nlevels);
	return err;
}

/* Top functions: a function is (name, module, kernel-ness) by the
 * profile's interned string indices. */
struct fn_key {
	uint32_t func, module, kernel;
};

static int top_cmp(const void *a, const void *b, void *ctx)
{
	const struct top_fn *x = a, *y = b;
	enum top_sort sort = *(const enum top_sort *)ctx;
	int64_t x1 = sort == TOP_BY_SELF ? x->self : x->total;
	int64_t y1 = sort == TOP_BY_SELF ? y->self : y->total;
	int64_t x2 = sort == TOP_BY_SELF ? x->total : x->self;
	int64_t y2 = sort == TOP_BY_SELF ? y->total : y->self;
	int c;

	if (x1 != y1)
		return x1 > y1 ? -1 : 1;
	if (x2 != y2)
		return x2 > y2 ? -1 : 1;
	c = strcmp(x->func, y->func);
	if (c)
		return c;
	if (x->kernel != y->kernel)
		return x->kernel ? 1 : -1;
	return strcmp(x->module, y->module);
}

int top__build(const struct profile *p, enum top_sort sort, enum flame_frames frames, size_t limit,
	       struct top_fn **out, size_t *nout)
{
	uint32_t *locfn = NULL;
	struct idmap tab = {0}; /* hash of a function's key -> its index + 1 */
	struct fn_key *keys = NULL;
	struct top_fn *fns = NULL;
	size_t *stamp = NULL, nfns = 0, i, j;
	uint8_t *kind = NULL; /* per location, for FLAME_PYTHON */
	int err = 0;

	locfn = malloc((p->nlocs + 1) * sizeof(*locfn));
	keys = malloc((p->nlocs + 1) * sizeof(*keys));
	fns = calloc(p->nlocs + 1, sizeof(*fns));
	stamp = calloc(p->nlocs + 1, sizeof(*stamp));
	if (!locfn || !keys || !fns || !stamp || idmap__reserve(&tab, p->nlocs + 1)) {
		err = -ENOMEM;
		goto cleanup;
	}
	for (i = 0; i < p->nlocs; i++) {
		const struct prof_location *l = &p->locs[i];
		struct fn_key k = {l->func, l->module, l->kernel};
		uint64_t h = hash_bytes(&k, sizeof(k), 0);
		size_t pos = IDMAP_START;
		uint32_t id;

		while ((id = idmap__next(&tab, h, &pos)))
			if (!memcmp(&keys[id - 1], &k, sizeof(k)))
				break;
		if (!id) {
			/* Room was reserved for every location: no growth. */
			idmap__put(&tab, h, (uint32_t)nfns + 1);
			keys[nfns] = k;
			fns[nfns].func = profile__str(p, k.func);
			fns[nfns].module = base_name(profile__str(p, k.module));
			fns[nfns].kernel = l->kernel;
			fns[nfns].file = profile__str(p, l->file);
			fns[nfns].line = l->start_line;
			locfn[i] = (uint32_t)nfns++;
			continue;
		}
		if (!*fns[id - 1].file && l->file) {
			fns[id - 1].file = profile__str(p, l->file);
			fns[id - 1].line = l->start_line;
		}
		locfn[i] = id - 1;
	}
	if (frames == FLAME_PYTHON && !(kind = location_kinds(p))) {
		err = -ENOMEM;
		goto cleanup;
	}
	for (i = 0; i < p->nsamples; i++) {
		const struct prof_sample *s = &p->samples[i];
		bool keep[PROF_MAX_FRAMES];
		uint32_t leaf = 0;

		if (s->count <= 0 || !s->nlocs)
			continue;
		/* As the flame graph shows it: a folded frame's own time is the
		 * kept frame's that called it. */
		if (kind) {
			python_keep(kind, s, keep);
			while (leaf < s->nlocs && !keep[leaf])
				leaf++;
			if (leaf == s->nlocs)
				continue;
		}
		fns[locfn[s->locs[leaf]]].self =
			sat_add_i64(fns[locfn[s->locs[leaf]]].self, s->count);
		for (j = leaf; j < s->nlocs; j++) {
			uint32_t fn = locfn[s->locs[j]];

			if (kind && !keep[j])
				continue;

			/* Once per stack, however deep the recursion. */
			if (stamp[fn] != i + 1) {
				stamp[fn] = i + 1;
				fns[fn].total = sat_add_i64(fns[fn].total, s->count);
			}
		}
	}
	/* Functions only ever folded show nothing of the view. */
	if (kind) {
		for (i = j = 0; i < nfns; i++)
			if (fns[i].total)
				fns[j++] = fns[i];
		nfns = j;
	}
	if (nfns)
		qsort_r(fns, nfns, sizeof(*fns), top_cmp, &sort);
	*out = fns;
	*nout = nfns < limit ? nfns : limit;
	fns = NULL;
cleanup:
	free(fns);
	free(locfn);
	free(keys);
	free(stamp);
	free(kind);
	idmap__free(&tab);
	return err;
}
