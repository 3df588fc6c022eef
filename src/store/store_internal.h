/* store_internal.h: what the files of src/store share and nothing else sees --
 * varints, an open-addressing map of 64-bit keys to 32-bit ids (hashing with
 * common/hash.h), canonical label sets and compiled matchers (labels.c), and the
 * in-memory dictionaries of the SQLite store (dict.c: functions, the stack
 * trie, series, metric series, units) that the sqlite*.c files keep in front
 * of its tables (what only those files share is in sqlite_internal.h). The
 * unit tests include it to reach these pieces directly. */
#ifndef SONDE_STORE_STORE_INTERNAL_H
#define SONDE_STORE_STORE_INTERNAL_H

#include <regex.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "common/hash.h"
#include "common/idmap.h"
#include "store/store.h"

/* ---- varints (LEB128, unsigned) ---- */

#define VARINT_MAX 10

static inline size_t varint_put(uint8_t *p, uint64_t v)
{
	size_t n = 0;

	while (v >= 0x80) {
		p[n++] = (uint8_t)v | 0x80;
		v >>= 7;
	}
	p[n++] = (uint8_t)v;
	return n;
}

/* Reads a varint from [*p, end); false (and *p unchanged) when it is
 * truncated or longer than 10 bytes. */
static inline bool varint_get(const uint8_t **p, const uint8_t *end, uint64_t *v)
{
	const uint8_t *s = *p;
	uint64_t r = 0;
	unsigned int shift = 0;

	if (s < end && *s < 0x80) { /* the common case: one byte */
		*v = *s;
		*p = s + 1;
		return true;
	}
	while (s < end && shift < 64) {
		uint8_t b = *s++;

		r |= (uint64_t)(b & 0x7f) << shift;
		if (!(b & 0x80)) {
			*v = r;
			*p = s;
			return true;
		}
		shift += 7;
	}
	return false;
}

/* ---- the window row format (codec.c) ---- */

struct store_buf {
	uint8_t *p;
	size_t len, cap;
};

/* Room for more bytes; 0 or -ENOMEM. */
int store_buf__reserve(struct store_buf *b, size_t more);
void store_buf__free(struct store_buf *b);

struct store_pair {
	uint32_t id;   /* stack */
	int64_t value; /* >= 1 */
};

/* Appends a data section: pairs sorted by strictly increasing id, each as
 * varint(id delta << 1 | value == 1), then varint(value) unless it is 1.
 * 0, -EINVAL (unsorted, value < 1) or -ENOMEM. */
int codec_put_pairs(struct store_buf *b, const struct store_pair *p, size_t n);
/* Reads the next pair of a section from [*p, end); *id holds the previous
 * id (0 before the first). 1, 0 at the end, -EIO when malformed. */
int codec_next_pair(const uint8_t **p, const uint8_t *end, uint32_t *id, int64_t *value);

/* A series of a row: its part of data is [off, off + len). */
struct codec_dir_ent {
	uint32_t sid;
	uint64_t off, len;
	int64_t total;
};

/* Appends a dir: varint(n), then per series (sorted by strictly increasing
 * sid) varint(sid delta), varint(len), varint(total). 0, -EINVAL, -ENOMEM. */
int codec_put_dir(struct store_buf *b, const struct codec_dir_ent *e, size_t n);

struct codec_dir_iter {
	const uint8_t *p, *end;
	uint64_t left, off, len, datalen;
	uint32_t sid;
};

/* Starts reading a dir of len bytes over a data blob of datalen bytes; 0 or
 * -EIO. codec_dir_next() gives 1 and the next series in *e, 0 at the end,
 * -EIO when malformed (a part beyond data, trailing bytes, ...). */
int codec_dir_begin(struct codec_dir_iter *it, const void *dir, size_t len, size_t datalen);
int codec_dir_next(struct codec_dir_iter *it, struct codec_dir_ent *e);

/* ---- timelines ---- */

/* Spreads total, the sum of windows over [start, end), over the steps of a
 * timeline from from_ms (nsteps of step ms) in proportion to their overlap.
 * Every store sums the windows of one range first and spreads the ranges in
 * (start, end) order, so that they give the same doubles. */
static inline void timeline_spread(double *values, size_t nsteps, int64_t from_ms, int64_t step,
				   int64_t start, int64_t end, int64_t total)
{
	int64_t lo, hi, i, i0, i1, grid_end;

	if (!total || end <= start)
		return;
	if (__builtin_add_overflow(from_ms, (int64_t)nsteps * step, &grid_end))
		grid_end = INT64_MAX;
	lo = start > from_ms ? start : from_ms;
	hi = end < grid_end ? end : grid_end;
	if (hi <= lo)
		return;
	i0 = (lo - from_ms) / step;
	i1 = (hi - from_ms + step - 1) / step;
	for (i = i0; i < i1 && i < (int64_t)nsteps; i++) {
		int64_t a = from_ms + i * step, b = a + step;

		if (a < start)
			a = start;
		if (b > end)
			b = end;
		if (b > a)
			values[i] += (double)total * (double)(b - a) / (double)(end - start);
	}
}

/* ---- quotas ---- */

/* Records a -EDQUOT's reason for store_last_refusal() (store.c). */
void store_refuse(enum store_bound bound, const char *project, uint64_t have, uint64_t more,
		  uint64_t max);

/* ---- label sets ---- */

/* The canonical form of a label set: labels sorted by name, those with an
 * empty value left out (a missing label and "" are the same thing), each as
 * "name\0value\0". Equal sets have equal bytes. */
struct labelset {
	char *key; /* malloc()ed */
	size_t len;
	struct store_label *labels; /* malloc()ed, pointing into key */
	size_t n;
};

/* Checks labels (store_check_labels) and encodes them; 0, -EINVAL with err
 * set, or -ENOMEM. */
int labelset__encode(struct labelset *ls, const struct store_label *labels, size_t n, char *err,
		     size_t errlen);
/* The same for labels that store_check_labels passed (a put's, checked
 * with its windows or points before any is stored): 0 or -ENOMEM. */
int labelset__encode_checked(struct labelset *ls, const struct store_label *labels, size_t n);
/* Parses a canonical key (a copy of key is taken). 0, -EINVAL when it is not
 * one, or -ENOMEM. */
int labelset__decode(struct labelset *ls, const void *key, size_t len);
void labelset__free(struct labelset *ls);
/* The value of name in a sorted label array, "" when absent. */
const char *labels_get(const struct store_label *labels, size_t n, const char *name);

/* A window or a point of a put, checked before a store writes anything:
 * labels within the limits, a window's "type" label, range and profile, a
 * point's metric name. 0, or -EINVAL (the reason logged at debug level, with
 * i, the index in the put). */
int store_check_window(const struct store_window *w, size_t i);
int store_check_point(const struct store_point *p, size_t i);
/* All n points, or spans, of a put (NULL with n > 0: -EINVAL), as above:
 * 0 or the first one's error. */
int store_check_points(const struct store_point *p, size_t n);
int store_check_spans(const struct store_span *sp, size_t n);

/* ---- matchers ---- */

struct matcher {
	char *name, *value;
	enum store_match op;
	bool compiled;
	regex_t re;
};

struct matchset {
	struct matcher *m;
	size_t n;
};

/* Compiles q's matchers; 0, or -EINVAL with err set (bad name, bad regex). */
int matchset__compile(struct matchset *ms, const struct store_matcher *m, size_t n, char *err,
		      size_t errlen);
/* Whether a sorted label array satisfies every matcher. */
bool matchset__match(const struct matchset *ms, const struct store_label *labels, size_t n);
/* Whether a read with deadline deadline_ns (store_query's; 0: none) is
 * past it, checked every STORE_DEADLINE_STEP of its steps (i counts them):
 * a clock read costs less than a regex match, but not nothing. */
#define STORE_DEADLINE_STEP 16
bool store_past_deadline(uint64_t deadline_ns, size_t i);
void matchset__free(struct matchset *ms);

/* ---- the SQLite store's in-memory dictionaries (dict.c) ----
 *
 * Every table row the store writes is mirrored here, so that ingest resolves
 * names, stacks and series without reading the database and selects turn
 * stack ids into frames without reading it either. Ids are small integers
 * handed out by an id pool; an id whose row was deleted is not reused until
 * no reader can still see the row (dict__flush, see sqlite_expire.c). The
 * caller serializes access (struct sqlite_store: a rwlock). */

/* Entry states. */
enum { DICT_FREE = 0, DICT_LIVE, DICT_DEAD };

/* Hours: windows and series remember the last hour they were used in. */
#define DICT_HOUR_MS 3600000LL

struct idpool {
	uint32_t next; /* ids below it were handed out once */
	uint32_t *free, *pending;
	size_t nfree, cap_free, npending, cap_pending;
};

/* A module (binary path) with its kernel-ness, shared by its functions. */
struct mod_ent {
	char *name;
	uint64_t hash;
	uint32_t refs; /* functions in it, live or not yet freed */
	uint8_t kernel, state;
};

struct func_ent {
	uint32_t project; /* the project that first sent it (dict->projects) */
	char *name;
	const char *file;    /* its source file ("" unknown): in name's allocation,
			     * or (file_owned) one of its own, set once */
	uint32_t start_line; /* its first line, 0 unknown */
	bool file_owned;
	const char *module; /* mods[mod].name */
	uint64_t hash;
	uint32_t name_len, mod;
	uint32_t refs; /* nodes with this function */
	uint8_t kernel, state;
};

/* A node of the stack trie: the frame func called from the stack parent
 * (0: the root, the empty stack). A stack's id is its leaf node's id. */
struct node_ent {
	uint32_t parent, func; /* func 0: a free slot */
	uint32_t last_h;       /* windows using it end before last_h * 1 h */
	uint32_t nchild;       /* live children */
	uint16_t depth;	       /* frames from the root, 1 for a root's child */
	uint8_t state;
};

struct series_ent {
	uint32_t project; /* its STORE_PROJECT_LABEL's (dict->projects) */
	struct labelset ls;
	char *name; /* metric series only: the metric's name */
	uint64_t hash;
	uint32_t last_h;
	uint8_t state;
};

struct unit_ent {
	char *unit;
	int64_t period;
};

/* What a write did to the dictionaries, so that it can be written to the
 * database and undone if the transaction fails. */
struct dict_undo {
	uint32_t *funcs, *nodes, *series, *pseries, *units; /* ids created, in order */
	size_t nfuncs, nnodes, nseries, npseries, nunits;
	size_t cap_funcs, cap_nodes, cap_series, cap_pseries, cap_units;
	struct dict_last { /* last_h raised: (id, old value) */
		uint32_t id, old;
	} * node_last, *series_last;
	size_t nnode_last, nseries_last, cap_node_last, cap_series_last;
	uint32_t *func_srcs; /* functions whose unknown source was set */
	size_t nfunc_srcs, cap_func_srcs;
};

/* What a project holds, for the bounds of struct store_quota: its live
 * series (profile and metric series), and the bytes of the functions it
 * first sent (DICT_FUNC_BYTES each, its name's and its file's). Projects
 * are 1-based, by their STORE_PROJECT_LABEL value ("" for none), never
 * removed (there are as many as the server's projects). */
struct dict_project {
	char *name;
	uint64_t series, name_bytes;
};
#define DICT_FUNC_BYTES 96 /* a function's entry, map slot and allocation */

struct dict {
	struct dict_project *projects; /* [1..nprojects] */
	size_t nprojects, cap_projects;
	struct idmap project_map;
	struct mod_ent *mods;
	size_t cap_mods;
	struct idpool mod_ids;
	struct idmap mod_map;
	struct func_ent *funcs;
	struct node_ent *nodes;
	struct series_ent *series, *pseries;
	struct unit_ent *units;
	size_t cap_funcs, cap_nodes, cap_series, cap_pseries, cap_units, nunits;
	struct idpool func_ids, node_ids, series_ids, pseries_ids;
	struct idmap func_map, node_map, series_map, pseries_map, unit_map;
	uint64_t live_funcs, live_nodes, live_series, live_pseries;
};

void dict__init(struct dict *d);
void dict__free(struct dict *d);

/* Lookups that add what is missing, logging the addition in u. Each returns
 * 0, -ENOMEM, or -EOVERFLOW when the ids run out. */
/* A module by name and kernel-ness (modules live in memory only, while a
 * function refers to them). */
int dict__module(struct dict *d, const char *module, bool kernel, uint32_t *id);
/* A function: name (len bytes) in module, h being dict__func_hash(), or
 * dict__func_hash_of() of the name's hash_bytes(name, len, 0) when that is
 * known (a profile keeps it for each of its strings). Callers resolving many
 * names hash them all and dict__func_prefetch() each first: the lookups'
 * cache misses then overlap. A function is its name and module; file (NULL:
 * unknown; cut at DICT_MAX_FILE bytes) and start_line, where it is in the
 * source, are those it was first added with, or the first known after it
 * was added without (logged in u->func_srcs). */
static inline uint64_t dict__func_hash_of(uint64_t name_hash, uint32_t module)
{
	return hash_mix(name_hash ^ (0x9e3779b97f4a7c15ULL * (module + 1)));
}
static inline uint64_t dict__func_hash(const char *name, size_t len, uint32_t module)
{
	return dict__func_hash_of(hash_bytes(name, len, 0), module);
}
void dict__func_prefetch(const struct dict *d, uint64_t h);
/* Once the slot is in: fetches the name it points to. */
void dict__func_prefetch2(const struct dict *d, uint64_t h);
int dict__func(struct dict *d, const char *name, size_t len, uint32_t module, uint64_t h,
	       const char *file, uint32_t start_line, uint32_t project, uint32_t *id,
	       struct dict_undo *u);
/* The project of that name (added if new) into *id. 0, -ENOMEM. Added
 * projects stay: they are not logged for undo. */
int dict__project(struct dict *d, const char *name, uint32_t *id);
/* The bytes a function counts against its project. */
static inline uint64_t dict__func_bytes(const struct func_ent *f)
{
	return DICT_FUNC_BYTES + f->name_len + strlen(f->file);
}
/* The child of parent for func, used by a window ending in hour h (last_h is
 * raised to h, logged in u when it changes). */
int dict__child(struct dict *d, uint32_t parent, uint32_t func, uint32_t h, uint32_t *id,
		struct dict_undo *u);
/* Starts fetching what dict__child(parent, func) will read. */
void dict__child_prefetch(const struct dict *d, uint32_t parent, uint32_t func);
/* Raises a node's last_h (and logs the old one). 0 or -ENOMEM. */
int dict__touch_node(struct dict *d, uint32_t id, uint32_t h, struct dict_undo *u);
/* A series by canonical label set (ls is copied when added). */
int dict__series(struct dict *d, const struct labelset *ls, uint32_t h, uint32_t *id,
		 struct dict_undo *u);
int dict__pseries(struct dict *d, const char *name, const struct labelset *ls, uint32_t *id,
		  struct dict_undo *u);
int dict__unit(struct dict *d, const char *unit, int64_t period, uint32_t *id, struct dict_undo *u);

/* Loading rows at open: entries with explicit ids. 0, -EINVAL (bad id or
 * duplicate), -ENOMEM. dict__load_done() rebuilds the counts and id pools. */
int dict__load_func(struct dict *d, uint32_t id, const char *name, const char *module, bool kernel,
		    const char *file, uint32_t start_line, const char *project);
int dict__load_node(struct dict *d, uint32_t id, uint32_t parent, uint32_t func, uint32_t last_h);
int dict__load_series(struct dict *d, uint32_t id, const void *key, size_t len, uint32_t last_h);
int dict__load_pseries(struct dict *d, uint32_t id, const char *name, const void *key, size_t len);
int dict__load_unit(struct dict *d, uint32_t id, const char *unit, int64_t period);
/* Checks the trie (parents exist and are older in depth, functions exist),
 * computes children and reference counts. -EINVAL when it is broken. */
int dict__load_done(struct dict *d);

/* Takes back what u logged (the transaction failed), then empties u. */
void dict__undo(struct dict *d, struct dict_undo *u);
/* Empties u (the transaction committed). */
void dict__undo_clear(struct dict_undo *u);
void dict__undo_free(struct dict_undo *u);

/* The kinds of entries that expire. */
enum dict_kind { DICT_NODE, DICT_FUNC, DICT_SERIES, DICT_PSERIES };

/* Expiry: an entry is killed (it leaves the lookup maps, its id goes on the
 * pending list, its data stays readable) and is freed by dict__flush() once
 * no reader can refer to it. A node's parent and function count it no
 * more. */
void dict__kill(struct dict *d, enum dict_kind kind, uint32_t id);
/* Undoes a kill (its transaction failed). 0 or -ENOMEM. */
int dict__revive(struct dict *d, enum dict_kind kind, uint32_t id);
void dict__flush(struct dict *d);

/* Frames of stack id, leaf first, into funcs[0..max); returns the depth
 * (which may exceed max: then only max were written), or -1 when id is not a
 * node the dictionary holds. */
int dict__frames(const struct dict *d, uint32_t id, uint32_t *funcs, size_t max);

/* Maximum nodes in one stack (profile.h's PROF_MAX_FRAMES). */
#define DICT_MAX_DEPTH 512
#define DICT_MAX_FILE 4096 /* bytes of a function's source file kept */

#endif
