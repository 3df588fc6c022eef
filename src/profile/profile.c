/* profile.c: the in-memory profile behind every output format -- interning
 * of strings and deduplication of mappings, locations and samples in uthash
 * indexes over the arrays the writers read, plus the format name helpers.
 * `sonde record`, `sonde top`, the agent and the readers in folded.c and
 * pprof.c build profiles through profile__add(). A profile is an internal
 * object whose growth its caller bounds (PROF_MAX_FRAMES per stack, a
 * reader's input size), so it allocates through xalloc, which aborts on OOM:
 * profile__intern() has no error return. It also groups locations into
 * functions for the pprof and speedscope writers (profile_internal.h). */
#include "profile/profile.h"
#include "profile/profile_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/hash.h"
#include "common/idmap.h"
#include "common/text.h"
#include "common/sat.h"
#include "common/utf8.h"
#include "common/xalloc.h"

/* uthash's malloc: xmalloc; its hash: htable.h's, word at a time. */
#define uthash_malloc(sz) xmalloc(sz)
#define uthash_free(ptr, sz) free(ptr)
#include "common/htable.h"

/* Index entries, interned strings and sample keys are carved from an arena of
 * large blocks, so adding a stack whose parts were all seen before costs a
 * few hash lookups and no malloc. Blocks never move, so the hash handles and
 * strings in them stay put. The first block is small and each next one as
 * large as all before it, up to ARENA_BLOCK_SIZE: a profile of a few stacks
 * (the server splits a window into one per series, a thousand at times)
 * costs a few KB, not a block of 256 KB. */
#define ARENA_BLOCK_SIZE (256 * 1024)
#define ARENA_FIRST_BLOCK 2048

struct arena_blk {
	struct arena_blk *next;
	size_t used, cap;
	char data[];
};

struct str_ent {
	UT_hash_handle hh; /* key: the string in p->strings[idx] */
	uint32_t idx;
};

struct map_key {
	uint32_t file, build_id;
	uint64_t start, limit, pgoff;
};

struct map_ent {
	UT_hash_handle hh;
	struct map_key key;
	uint32_t idx;
};

/* func is UNNAMED for a frame the symbolizer could not name: its display name
 * is derived from module and offset (or addr), which are then the key. */
#define UNNAMED UINT32_MAX

struct loc_key {
	uint32_t func, module, mapping, kernel;
	uint64_t addr, offset;
	uint32_t file, line, start_line, pad;
};

struct loc_ent {
	UT_hash_handle hh;
	struct loc_key key;
	uint32_t idx;
};

/* key is [pid, tid, comm, thread, service, labels, locs...]; the sample's
 * locs point into it. */
struct sample_ent {
	UT_hash_handle hh;
	uint32_t idx;
	uint32_t key[];
};

#define SAMPLE_KEY_HDR 6

/* Direct-mapped caches in front of the string and location tables. uthash
 * keeps each entry's hash in the entry and adds at the head of a chain, so
 * finding a hot entry means touching the cold ones added after it; a stack
 * is mostly hot entries, which these find in one probe. They are made (32
 * KB each) once a table has HOT_AFTER entries, the chains being short
 * before; until then one entry, the last found, stands in for each. */
#define HOT_BITS 12
#define HOT_SLOT(hashv) (((hashv)*0x9e3779b1u) >> (32 - HOT_BITS))
#define HOT_AFTER 256

struct profile_index {
	struct str_ent **hot_strs; /* 1 << HOT_BITS, or NULL: hot_str */
	struct loc_ent **hot_locs;
	struct str_ent *hot_str;
	struct loc_ent *hot_loc;
	size_t arena_total; /* bytes of the blocks */
	struct arena_blk *blocks;
	struct str_ent *strs;
	struct map_ent *maps;
	struct loc_ent *locs;
	struct sample_ent *samples;
	struct idmap lsets; /* string index of an encoded label set -> its labelset */
	uint32_t key[SAMPLE_KEY_HDR + PROF_MAX_FRAMES]; /* scratch sample key */
};

static void *arena__alloc(struct profile_index *ix, size_t size)
{
	struct arena_blk *b = ix->blocks;
	void *ptr;

	size = (size + 7) & ~(size_t)7;
	if (!b || b->cap - b->used < size) {
		size_t cap = ix->arena_total < ARENA_FIRST_BLOCK  ? ARENA_FIRST_BLOCK
			     : ix->arena_total < ARENA_BLOCK_SIZE ? ix->arena_total
								  : ARENA_BLOCK_SIZE;

		if (size > cap && ix->blocks) {
			/* An oversized one-off: keep filling the current block. */
			b = xmalloc(sizeof(*b) + size);
			b->used = 0;
			b->cap = size;
			b->next = ix->blocks->next;
			ix->blocks->next = b;
		} else {
			if (cap < size)
				cap = size;
			ix->arena_total += cap;
			b = xmalloc(sizeof(*b) + cap);
			b->used = 0;
			b->cap = cap;
			b->next = ix->blocks;
			ix->blocks = b;
		}
	}
	ptr = b->data + b->used;
	b->used += size;
	return ptr;
}

static void *arena__zalloc(struct profile_index *ix, size_t size)
{
	return memset(arena__alloc(ix, size), 0, size);
}

struct profile *profile__new(const char *type, const char *unit, int64_t period)
{
	struct profile *p = xcalloc(1, sizeof(*p));

	p->type = xstrdup(type ? type : "");
	p->unit = xstrdup(unit ? unit : "");
	p->period = period;
	p->index = xcalloc(1, sizeof(*p->index));
	profile__intern(p, "");
	return p;
}

void profile__free(struct profile *p)
{
	struct arena_blk *b, *next;

	if (!p)
		return;
	if (p->index) {
		HASH_CLEAR(hh, p->index->strs);
		HASH_CLEAR(hh, p->index->maps);
		HASH_CLEAR(hh, p->index->locs);
		HASH_CLEAR(hh, p->index->samples);
		for (b = p->index->blocks; b; b = next) {
			next = b->next;
			free(b);
		}
		free(p->index->hot_strs);
		free(p->index->hot_locs);
		idmap__free(&p->index->lsets);
		free(p->index);
	}
	free(p->type);
	free(p->unit);
	free(p->strings);
	free(p->str_info);
	free(p->mappings);
	free(p->locs);
	free(p->samples);
	free(p->labelsets);
	free(p);
}

static uint32_t intern_len(struct profile *p, const char *s, size_t len)
{
	struct profile_index *ix = p->index;
	struct str_ent *e, **hot;
	uint64_t h64 = hash_bytes(s, len, 0);
	uint32_t hashv = htable_hash32(h64);
	char *copy;

	if (!ix->hot_strs && p->nstrings >= HOT_AFTER)
		ix->hot_strs = xcalloc(1u << HOT_BITS, sizeof(*ix->hot_strs));
	hot = ix->hot_strs ? &ix->hot_strs[HOT_SLOT(hashv)] : &ix->hot_str;
	e = *hot;
	if (e && e->hh.hashv == hashv && e->hh.keylen == len && !memcmp(e->hh.key, s, len))
		return e->idx;
	HASH_FIND_BYHASHVALUE(hh, ix->strs, s, len, hashv, e);
	if (e) {
		*hot = e;
		return e->idx;
	}

	copy = arena__alloc(ix, len + 1);
	memcpy(copy, s, len);
	copy[len] = '\0';
	xgrow((void **)&p->strings, &p->cap_strings, p->nstrings + 1, sizeof(*p->strings));
	p->strings[p->nstrings] = copy;
	xgrow((void **)&p->str_info, &p->cap_str_info, p->nstrings + 1, sizeof(*p->str_info));
	p->str_info[p->nstrings] = (struct prof_str){.hash = h64, .len = (uint32_t)len};

	e = arena__zalloc(ix, sizeof(*e));
	e->idx = p->nstrings++;
	HASH_ADD_KEYPTR_BYHASHVALUE(hh, ix->strs, copy, len, hashv, e);
	*hot = e;
	return e->idx;
}

uint32_t profile__intern(struct profile *p, const char *s)
{
	size_t len = s ? strlen(s) : 0, keep;
	char cut[PROF_MAX_STRING];

	if (len <= PROF_MAX_STRING)
		return intern_len(p, s ? s : "", len);
	keep = utf8_cut(s, len, PROF_MAX_STRING - strlen(PROF_CUT_MARK));
	memcpy(cut, s, keep);
	memcpy(cut + keep, PROF_CUT_MARK, strlen(PROF_CUT_MARK));
	return intern_len(p, cut, keep + strlen(PROF_CUT_MARK));
}

uint32_t profile__labelset(struct profile *p, const char *encoded)
{
	uint32_t s = profile__intern(p, encoded), id = idmap__get(&p->index->lsets, s);
	struct prof_labels ls = {0};
	char name[PROF_MAX_STRING + 1];

	if (id)
		return id;
	struct label_line ll;
	size_t vl;

	for (const char *l = encoded; ls.n < PROF_MAX_LABELS && label_line__next(&l, &ll);) {
		if (ll.name_len > PROF_MAX_STRING)
			continue;
		memcpy(name, ll.name, ll.name_len);
		name[ll.name_len] = '\0';
		ls.kv[2 * ls.n] = profile__intern(p, name);
		vl = ll.value_len < PROF_MAX_STRING ? ll.value_len : PROF_MAX_STRING;
		memcpy(name, ll.value, vl);
		name[vl] = '\0';
		ls.kv[2 * ls.n + 1] = profile__intern(p, name);
		ls.n++;
	}
	xgrow((void **)&p->labelsets, &p->cap_labelsets, p->nlabelsets + 1, sizeof(*p->labelsets));
	p->labelsets[p->nlabelsets++] = ls;
	id = (uint32_t)p->nlabelsets;
	if (idmap__put(&p->index->lsets, s, id))
		abort(); /* a profile aborts on OOM (see profile__new) */
	return id;
}

/* Where a frame is: its module and mapping, as the symbolizer handed them. */
struct frame_place {
	const char *module, *build_id;
	uint64_t start, limit, pgoff;
	uint32_t module_idx, map_idx;
};

/* The places of one profile__add() call. A stack moves between a handful of
 * modules, and within the call the symbolizer hands out the same module and
 * build-id pointers again and again -- pointers whose strings can't change
 * while the call lasts -- so a few slots compared by pointer spare most
 * frames the module and mapping lookups. */
#define PLACE_SLOTS 8

struct add_cache {
	struct frame_place slot[PLACE_SLOTS];
	unsigned int n, next;
};

/* Returns the 1-based mapping for the place (0 if it has none), adding it
 * if new. */
static uint32_t place_mapping(struct profile *p, const struct frame_place *pl)
{
	struct profile_index *ix = p->index;
	struct map_key key;
	struct map_ent *e;

	if (!pl->start && !pl->limit && !pl->pgoff)
		return 0;

	memset(&key, 0, sizeof(key));
	key.file = pl->module_idx;
	key.build_id = pl->build_id && *pl->build_id ? profile__intern(p, pl->build_id) : 0;
	key.start = pl->start;
	key.limit = pl->limit;
	key.pgoff = pl->pgoff;
	HASH_FIND(hh, ix->maps, &key, sizeof(key), e);
	if (e)
		return e->idx;

	xgrow((void **)&p->mappings, &p->cap_mappings, p->nmappings + 1, sizeof(*p->mappings));
	p->mappings[p->nmappings] = (struct prof_mapping){
		.file = key.file,
		.build_id = key.build_id,
		.start = key.start,
		.limit = key.limit,
		.pgoff = key.pgoff,
	};
	e = arena__zalloc(ix, sizeof(*e));
	e->key = key;
	e->idx = ++p->nmappings;
	HASH_ADD(hh, ix->maps, key, sizeof(key), e);
	return e->idx;
}

static const struct frame_place *frame_place(struct profile *p, const struct prof_frame *f,
					     struct add_cache *c)
{
	struct frame_place *pl;
	unsigned int i;

	for (i = 0; i < c->n; i++) {
		pl = &c->slot[i];
		if (pl->module == f->module && pl->build_id == f->build_id &&
		    pl->start == f->map_start && pl->limit == f->map_limit &&
		    pl->pgoff == f->map_pgoff)
			return pl;
	}

	pl = &c->slot[c->next];
	c->next = (c->next + 1) % PLACE_SLOTS;
	if (c->n < PLACE_SLOTS)
		c->n++;
	pl->module = f->module;
	pl->build_id = f->build_id;
	pl->start = f->map_start;
	pl->limit = f->map_limit;
	pl->pgoff = f->map_pgoff;
	pl->module_idx = f->module && *f->module ? profile__intern(p, f->module) : 0;
	pl->map_idx = place_mapping(p, pl);
	return pl;
}

/* The display name of a frame the symbolizer could not name. */
static uint32_t unnamed_func(struct profile *p, const struct prof_frame *f)
{
	const char *base;
	char buf[512];

	if (f->module && *f->module) {
		base = strrchr(f->module, '/');
		base = base && base[1] ? base + 1 : f->module;
		snprintf(buf, sizeof(buf), "%s+0x%" PRIx64, base, f->offset);
	} else {
		snprintf(buf, sizeof(buf), "[unknown]+0x%" PRIx64, f->addr);
	}
	return profile__intern(p, buf);
}

/* Returns the 0-based location of f, adding it if new. */
static uint32_t frame_location(struct profile *p, const struct prof_frame *f, struct add_cache *c)
{
	const struct frame_place *pl = frame_place(p, f, c);
	struct profile_index *ix = p->index;
	struct loc_ent *e, **hot;
	struct loc_key key;
	bool named = f->func && *f->func;
	uint32_t hashv;

	memset(&key, 0, sizeof(key));
	key.module = pl->module_idx;
	key.func = named ? profile__intern(p, f->func) : UNNAMED;
	key.mapping = pl->map_idx;
	key.kernel = f->kernel;
	key.addr = f->addr;
	key.offset = named ? 0 : f->offset;
	key.file = f->file && *f->file ? profile__intern(p, f->file) : 0;
	key.line = f->line;
	key.start_line = f->start_line;

	HASH_VALUE(&key, sizeof(key), hashv);
	if (!ix->hot_locs && p->nlocs >= HOT_AFTER)
		ix->hot_locs = xcalloc(1u << HOT_BITS, sizeof(*ix->hot_locs));
	hot = ix->hot_locs ? &ix->hot_locs[HOT_SLOT(hashv)] : &ix->hot_loc;
	e = *hot;
	if (e && e->hh.hashv == hashv && !memcmp(&e->key, &key, sizeof(key)))
		return e->idx;
	HASH_FIND_BYHASHVALUE(hh, ix->locs, &key, sizeof(key), hashv, e);
	if (e) {
		*hot = e;
		return e->idx;
	}

	xgrow((void **)&p->locs, &p->cap_locs, p->nlocs + 1, sizeof(*p->locs));
	p->locs[p->nlocs] = (struct prof_location){
		.func = named ? key.func : unnamed_func(p, f),
		.module = key.module,
		.mapping = key.mapping,
		.addr = key.addr,
		.kernel = f->kernel,
		.file = key.file,
		.line = key.line,
		.start_line = key.start_line,
	};
	e = arena__zalloc(ix, sizeof(*e));
	e->key = key;
	e->idx = p->nlocs++;
	HASH_ADD_BYHASHVALUE(hh, ix->locs, key, sizeof(key), hashv, e);
	*hot = e;
	return e->idx;
}

/* Adds count to the sample whose key (who, n locations) is in ix->key;
 * total is the profile's new total. */
static void add_key(struct profile *p, size_t n, int64_t count, int64_t total)
{
	struct profile_index *ix = p->index;
	size_t keylen = (SAMPLE_KEY_HDR + n) * sizeof(ix->key[0]);
	struct sample_ent *e;

	HASH_FIND(hh, ix->samples, ix->key, keylen, e);
	if (!e) {
		xgrow((void **)&p->samples, &p->cap_samples, p->nsamples + 1, sizeof(*p->samples));
		e = arena__alloc(ix, sizeof(*e) + keylen);
		memset(&e->hh, 0, sizeof(e->hh));
		memcpy(e->key, ix->key, keylen);
		e->idx = p->nsamples++;
		p->samples[e->idx] = (struct prof_sample){
			.pid = ix->key[0],
			.tid = ix->key[1],
			.comm = e->key[2],
			.thread = e->key[3],
			.service = e->key[4],
			.labels = e->key[5],
			.nlocs = n,
			.locs = e->key + SAMPLE_KEY_HDR,
		};
		HASH_ADD_KEYPTR(hh, ix->samples, e->key, keylen, e);
	}
	p->samples[e->idx].count = sat_add_i64(p->samples[e->idx].count, count);
	p->total = total;
}

/* The total after adding count: 0, or -EOVERFLOW past INT64_MAX unless p
 * saturates. */
static int new_total(const struct profile *p, int64_t count, int64_t *total)
{
	if (!__builtin_add_overflow(p->total, count, total))
		return 0;
	if (!p->saturate)
		return -EOVERFLOW;
	*total = INT64_MAX;
	return 0;
}

/* The key's header: who took the sample. */
static void who_key(struct profile *p, const struct prof_who *who)
{
	uint32_t *key = p->index->key;

	key[0] = who->pid;
	key[1] = who->tid;
	key[2] = profile__intern(p, who->comm);
	/* Most callers name neither: "" is index 0, no lookup needed. */
	key[3] = who->thread && *who->thread ? profile__intern(p, who->thread) : 0;
	key[4] = who->service && *who->service ? profile__intern(p, who->service) : 0;
	key[5] = who->labels && *who->labels ? profile__labelset(p, who->labels) : 0;
}

int profile__add_ex(struct profile *p, const struct prof_who *who, const struct prof_frame *frames,
		    size_t n, int64_t count)
{
	struct profile_index *ix;
	struct add_cache cache;
	size_t i;
	int64_t total;

	if (!p || !who || n > PROF_MAX_FRAMES || count < 0 || (n && !frames))
		return -EINVAL;
	if (new_total(p, count, &total))
		return -EOVERFLOW;

	ix = p->index;
	cache.n = cache.next = 0;
	who_key(p, who);
	for (i = 0; i < n; i++)
		ix->key[SAMPLE_KEY_HDR + i] = frame_location(p, &frames[i], &cache);
	add_key(p, n, count, total);
	return 0;
}

int profile__add(struct profile *p, uint32_t pid, uint32_t tid, const char *comm,
		 const struct prof_frame *frames, size_t n, int64_t count)
{
	struct prof_who who = {.pid = pid, .tid = tid, .comm = comm};

	return profile__add_ex(p, &who, frames, n, count);
}

int profile__add_get_locs(struct profile *p, uint32_t pid, uint32_t tid, const char *comm,
			  const struct prof_frame *frames, size_t n, int64_t count, uint32_t *locs)
{
	int err = profile__add(p, pid, tid, comm, frames, n, count);

	if (!err && n)
		memcpy(locs, p->index->key + SAMPLE_KEY_HDR, n * sizeof(*locs));
	return err;
}

uint32_t profile__location(struct profile *p, const struct prof_frame *f)
{
	struct add_cache cache = {.n = 0, .next = 0};

	return frame_location(p, f, &cache);
}

int profile__add_locs(struct profile *p, uint32_t pid, uint32_t tid, const char *comm,
		      const uint32_t *locs, size_t n, int64_t count)
{
	struct profile_index *ix;
	int64_t total;
	size_t i;

	if (!p || n > PROF_MAX_FRAMES || count < 0 || (n && !locs))
		return -EINVAL;
	for (i = 0; i < n; i++)
		if (locs[i] >= p->nlocs)
			return -EINVAL;
	if (new_total(p, count, &total))
		return -EOVERFLOW;
	ix = p->index;
	who_key(p, &(struct prof_who){.pid = pid, .tid = tid, .comm = comm});
	memcpy(ix->key + SAMPLE_KEY_HDR, locs, n * sizeof(*locs));
	add_key(p, n, count, total);
	return 0;
}

/* Locations sorted by (name, module, location), so a run of equal names and
 * modules is one function. */
struct func_key {
	uint32_t name, module, file, start_line, line, loc;
};

static int func_key__cmp(const void *a, const void *b)
{
	const struct func_key *x = a, *y = b;

	if (x->name != y->name)
		return x->name < y->name ? -1 : 1;
	if (x->module != y->module)
		return x->module < y->module ? -1 : 1;
	if (x->file != y->file)
		return x->file < y->file ? -1 : 1;
	if (x->start_line != y->start_line)
		return x->start_line < y->start_line ? -1 : 1;
	if (x->line != y->line)
		return x->line < y->line ? -1 : 1;
	return x->loc < y->loc ? -1 : x->loc > y->loc;
}

ssize_t profile__functions(const struct profile *p, struct prof_func *funcs, uint32_t *loc_func,
			   bool by_line)
{
	struct func_key *keys = calloc(p->nlocs ? p->nlocs : 1, sizeof(*keys));
	ssize_t n = 0;
	size_t i;

	if (!keys)
		return -ENOMEM;
	for (i = 0; i < p->nlocs; i++)
		keys[i] = (struct func_key){p->locs[i].func,
					    p->locs[i].module,
					    p->locs[i].file,
					    p->locs[i].start_line,
					    by_line ? p->locs[i].line : 0,
					    (uint32_t)i};
	if (p->nlocs)
		qsort(keys, p->nlocs, sizeof(*keys), func_key__cmp);
	for (i = 0; i < p->nlocs; i++) {
		const struct func_key *k = &keys[i];

		if (!i || k->name != k[-1].name || k->module != k[-1].module ||
		    k->file != k[-1].file || k->start_line != k[-1].start_line ||
		    k->line != k[-1].line)
			funcs[n++] = (struct prof_func){k->name, k->module, k->file, k->start_line,
							k->line};
		loc_func[k->loc] = (uint32_t)(n - 1);
	}
	free(keys);
	return n;
}

static const char *const format_names[] = {
	[PROF_FMT_FOLDED] = "folded",
	[PROF_FMT_PPROF] = "pprof",
	[PROF_FMT_SPEEDSCOPE] = "speedscope",
};

enum prof_format prof_format_from_name(const char *name)
{
	size_t i;

	if (!name)
		return PROF_FMT_NONE;
	for (i = 0; i < ARRAY_SIZE(format_names); i++)
		if (format_names[i] && !strcmp(name, format_names[i]))
			return i;
	return PROF_FMT_NONE;
}

const char *prof_format_name(enum prof_format fmt)
{
	if ((size_t)fmt < ARRAY_SIZE(format_names) && format_names[fmt])
		return format_names[fmt];
	return "none";
}

static bool has_suffix(const char *s, const char *suffix)
{
	size_t n = strlen(s), m = strlen(suffix);

	return n > m && !strcasecmp(s + n - m, suffix);
}

enum prof_format prof_format_from_path(const char *path)
{
	static const struct {
		const char *suffix;
		enum prof_format fmt;
	} by_suffix[] = {
		{".folded", PROF_FMT_FOLDED},	{".collapsed", PROF_FMT_FOLDED},
		{".txt", PROF_FMT_FOLDED},	{".pb.gz", PROF_FMT_PPROF},
		{".pprof", PROF_FMT_PPROF},	{".pb", PROF_FMT_PPROF},
		{".json", PROF_FMT_SPEEDSCOPE},
	};
	size_t i;

	if (!path)
		return PROF_FMT_NONE;
	/* ".speedscope.json" needs no entry of its own: ".json" covers it. */
	for (i = 0; i < ARRAY_SIZE(by_suffix); i++)
		if (has_suffix(path, by_suffix[i].suffix))
			return by_suffix[i].fmt;
	return PROF_FMT_NONE;
}

int profile__write(const struct profile *p, enum prof_format fmt, FILE *f)
{
	switch (fmt) {
	case PROF_FMT_FOLDED:
		return profile__write_folded(p, f);
	case PROF_FMT_PPROF:
		return profile__write_pprof(p, f);
	case PROF_FMT_SPEEDSCOPE:
		return profile__write_speedscope(p, f);
	default:
		return -EINVAL;
	}
}
