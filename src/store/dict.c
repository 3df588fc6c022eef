/* dict.c: the SQLite store's in-memory dictionaries -- function names, the
 * trie of stacks, series and metric series, units -- mirroring the rows of
 * their tables so that ingest resolves a frame or a label set with a hash
 * probe and a select turns stack ids into frames without touching the
 * database. Also the id pools they use (the id map: common/idmap.h).
 * Everything a write adds is logged so that a failed transaction can be
 * taken back; everything expiry removes is first killed (unreachable for
 * new writes, still readable) and only freed when no reader can need it.
 * The sqlite*.c files own the locking; see store_internal.h for the
 * contracts. */
#include "store/store_internal.h"
#include "common/xalloc.h"

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* ---- helpers ---- */

/* Room in an undo log of ids for one more, taken before the entry is
 * added so that logging it cannot fail. 0 or -ENOMEM. */
static int undo_room(uint32_t **ids, size_t n, size_t *cap)
{
	return array_grow((void **)ids, cap, n + 1, sizeof(**ids));
}

static int push_last(struct dict_last **arr, size_t *n, size_t *cap, uint32_t id, uint32_t old)
{
	int err = array_grow((void **)arr, cap, *n + 1, sizeof(**arr));

	if (!err)
		(*arr)[(*n)++] = (struct dict_last){.id = id, .old = old};
	return err;
}

/* ---- id pools ---- */

static int idpool__alloc(struct idpool *p, uint32_t *id)
{
	if (p->nfree) {
		*id = p->free[--p->nfree];
		return 0;
	}
	if (p->next >= UINT32_MAX - 1)
		return -EOVERFLOW;
	*id = p->next++;
	return 0;
}

/* Gives back an id that no committed row uses. The free list can only be as
 * long as the ids handed out, which it had room for when they were (see
 * idpool__reserve), so this cannot fail. */
static void idpool__release(struct idpool *p, uint32_t id)
{
	p->free[p->nfree++] = id;
}

/* Makes room for every id up to next (the one handed out next) on the free
 * and pending lists, so that releasing and killing never need to allocate. */
static int idpool__reserve(struct idpool *p)
{
	size_t need = (size_t)p->next + 2;
	int err;

	if (need <= p->cap_free && need <= p->cap_pending)
		return 0;
	err = array_grow((void **)&p->free, &p->cap_free, need, sizeof(*p->free));
	if (!err)
		err = array_grow((void **)&p->pending, &p->cap_pending, need, sizeof(*p->pending));
	return err;
}

/* A new id with room for it in an array of elem-sized entries. */
static int new_id(struct idpool *p, void **arr, size_t *cap, size_t elem, uint32_t *id)
{
	int err = idpool__reserve(p);

	if (err)
		return err;
	err = idpool__alloc(p, id);
	if (err)
		return err;
	err = array_grow(arr, cap, (size_t)*id + 1, elem);
	if (err)
		idpool__release(p, *id); /* reserved above */
	return err;
}

static void idpool__unpend(struct idpool *p, uint32_t id)
{
	size_t i;

	for (i = p->npending; i-- > 0;) {
		if (p->pending[i] == id) {
			p->pending[i] = p->pending[--p->npending];
			return;
		}
	}
}

static void idpool__free(struct idpool *p)
{
	free(p->free);
	free(p->pending);
	memset(p, 0, sizeof(*p));
}

/* ---- the dictionaries ---- */

void dict__init(struct dict *d)
{
	memset(d, 0, sizeof(*d));
	d->func_ids.next = d->node_ids.next = d->series_ids.next = d->pseries_ids.next = 1;
	d->mod_ids.next = 1;
}

static void series_ent__free(struct series_ent *e)
{
	labelset__free(&e->ls);
	free(e->name);
	e->name = NULL;
}

void dict__free(struct dict *d)
{
	size_t i;

	for (i = 1; i <= d->nprojects; i++)
		free(d->projects[i].name);
	free(d->projects);
	idmap__free(&d->project_map);

	for (i = 0; i < d->cap_funcs; i++) {
		free(d->funcs[i].name);
		if (d->funcs[i].file_owned)
			free((char *)d->funcs[i].file);
	}
	for (i = 0; i < d->cap_mods; i++)
		free(d->mods[i].name);
	free(d->mods);
	idpool__free(&d->mod_ids);
	idmap__free(&d->mod_map);
	for (i = 0; i < d->cap_series; i++)
		series_ent__free(&d->series[i]);
	for (i = 0; i < d->cap_pseries; i++)
		series_ent__free(&d->pseries[i]);
	for (i = 0; i < d->cap_units; i++)
		free(d->units[i].unit);
	free(d->funcs);
	free(d->nodes);
	free(d->series);
	free(d->pseries);
	free(d->units);
	idpool__free(&d->func_ids);
	idpool__free(&d->node_ids);
	idpool__free(&d->series_ids);
	idpool__free(&d->pseries_ids);
	idmap__free(&d->func_map);
	idmap__free(&d->node_map);
	idmap__free(&d->series_map);
	idmap__free(&d->pseries_map);
	idmap__free(&d->unit_map);
	memset(d, 0, sizeof(*d));
}

static uint64_t node_key(uint32_t parent, uint32_t func)
{
	return (uint64_t)parent << 32 | func;
}

static uint64_t unit_hash(const char *unit, int64_t period)
{
	return hash_bytes(unit, strlen(unit), (uint64_t)period);
}

static uint64_t pseries_hash(const char *name, const struct labelset *ls)
{
	return hash_bytes(ls->key, ls->len, hash_bytes(name, strlen(name), 0));
}

static uint64_t mod_hash(const char *module, size_t len, bool kernel)
{
	return hash_bytes(module, len, kernel ? 0x6b65726e656cULL : 0);
}

int dict__module(struct dict *d, const char *module, bool kernel, uint32_t *id)
{
	size_t len = strlen(module), pos = IDMAP_START;
	uint64_t h = mod_hash(module, len, kernel);
	struct mod_ent *m;
	uint32_t mid;
	int err;

	while ((mid = idmap__next(&d->mod_map, h, &pos))) {
		m = &d->mods[mid];
		if (m->kernel == kernel && !strcmp(m->name, module)) {
			*id = mid;
			return 0;
		}
	}
	err = new_id(&d->mod_ids, (void **)&d->mods, &d->cap_mods, sizeof(*d->mods), &mid);
	if (err)
		return err;
	m = &d->mods[mid];
	m->name = malloc(len + 1);
	if (!m->name) {
		idpool__release(&d->mod_ids, mid);
		return -ENOMEM;
	}
	memcpy(m->name, module, len + 1);
	err = idmap__put(&d->mod_map, h, mid);
	if (err) {
		free(m->name);
		memset(m, 0, sizeof(*m));
		idpool__release(&d->mod_ids, mid);
		return err;
	}
	m->hash = h;
	m->kernel = kernel;
	m->refs = 0;
	m->state = DICT_LIVE;
	*id = mid;
	return 0;
}

/* Modules no function refers to any more (after undo or flush). */
static void mods_sweep(struct dict *d)
{
	size_t i;

	for (i = 1; i < d->cap_mods; i++) {
		struct mod_ent *m = &d->mods[i];

		if (m->state != DICT_LIVE || m->refs)
			continue;
		idmap__del(&d->mod_map, m->hash, (uint32_t)i);
		free(m->name);
		memset(m, 0, sizeof(*m));
		idpool__release(&d->mod_ids, (uint32_t)i);
	}
}

void dict__func_prefetch(const struct dict *d, uint64_t h)
{
	if (d->func_map.slots)
		__builtin_prefetch(&d->func_map.slots[hash_mix(h) & d->func_map.mask]);
}

void dict__func_prefetch2(const struct dict *d, uint64_t h)
{
	const struct idmap_slot *slot = idmap__slot(&d->func_map, h);

	if (slot)
		__builtin_prefetch(d->funcs[slot->val].name);
}

void dict__child_prefetch(const struct dict *d, uint32_t parent, uint32_t func)
{
	if (d->node_map.slots)
		__builtin_prefetch(
			&d->node_map.slots[hash_mix(node_key(parent, func)) & d->node_map.mask]);
}

/* Fills a free func slot. */
static int func_set(struct dict *d, uint32_t id, const char *name, size_t len, uint32_t mod,
		    uint64_t h, const char *file, uint32_t start_line, uint32_t project)
{
	struct func_ent *f = &d->funcs[id];
	size_t flen = file ? strnlen(file, DICT_MAX_FILE) : 0;
	char *buf = malloc(len + flen + 2);
	int err;

	if (!buf)
		return -ENOMEM;
	memcpy(buf, name, len);
	buf[len] = '\0';
	memcpy(buf + len + 1, file ? file : "", flen);
	buf[len + 1 + flen] = '\0';
	f->name = buf;
	f->file = buf + len + 1;
	f->start_line = start_line;
	f->name_len = (uint32_t)len;
	f->mod = mod;
	f->module = d->mods[mod].name;
	f->kernel = d->mods[mod].kernel;
	f->hash = h;
	f->refs = 0;
	err = idmap__put(&d->func_map, h, id);
	if (err) {
		free(buf);
		memset(f, 0, sizeof(*f));
		return err;
	}
	d->mods[mod].refs++;
	f->state = DICT_LIVE;
	d->live_funcs++;
	f->project = project;
	d->projects[project].name_bytes += dict__func_bytes(f);
	return 0;
}

int dict__project(struct dict *d, const char *name, uint32_t *id)
{
	uint64_t h = hash_bytes(name, strlen(name), 0x50524a);
	size_t pos = IDMAP_START;
	uint32_t i;
	int err;

	while ((i = idmap__next(&d->project_map, h, &pos)))
		if (!strcmp(d->projects[i].name, name)) {
			*id = i;
			return 0;
		}
	if (d->nprojects >= UINT32_MAX - 1)
		return -EOVERFLOW;
	err = array_grow((void **)&d->projects, &d->cap_projects, d->nprojects + 2,
			 sizeof(*d->projects));
	if (err)
		return err;
	i = (uint32_t)d->nprojects + 1;
	d->projects[i] = (struct dict_project){.name = strdup(name)};
	if (!d->projects[i].name)
		return -ENOMEM;
	err = idmap__put(&d->project_map, h, i);
	if (err) {
		free(d->projects[i].name);
		d->projects[i].name = NULL;
		return err;
	}
	d->nprojects = i;
	*id = i;
	return 0;
}

/* Sets the source of function id, added without one. */
static int func_set_src(struct dict *d, uint32_t id, const char *file, uint32_t start_line,
			struct dict_undo *u)
{
	struct func_ent *f = &d->funcs[id];
	char *copy;
	int err = undo_room(&u->func_srcs, u->nfunc_srcs, &u->cap_func_srcs);

	if (err)
		return err;
	copy = strndup(file, DICT_MAX_FILE);
	if (!copy)
		return -ENOMEM;
	f->file = copy;
	f->file_owned = true;
	f->start_line = start_line;
	u->func_srcs[u->nfunc_srcs++] = id;
	if (f->state == DICT_LIVE)
		d->projects[f->project].name_bytes += strlen(copy);
	return 0;
}

int dict__func(struct dict *d, const char *name, size_t len, uint32_t module, uint64_t h,
	       const char *file, uint32_t start_line, uint32_t project, uint32_t *id,
	       struct dict_undo *u)
{
	size_t pos = IDMAP_START;
	uint32_t fid;
	int err;

	if (len > UINT32_MAX - 1)
		return -EINVAL;
	while ((fid = idmap__next(&d->func_map, h, &pos))) {
		const struct func_ent *f = &d->funcs[fid];

		if (f->mod == module && f->name_len == len && !memcmp(f->name, name, len)) {
			*id = fid;
			return file && *file && !*f->file
				       ? func_set_src(d, fid, file, start_line, u)
				       : 0;
		}
	}
	err = undo_room(&u->funcs, u->nfuncs, &u->cap_funcs);
	if (err)
		return err;
	err = new_id(&d->func_ids, (void **)&d->funcs, &d->cap_funcs, sizeof(*d->funcs), &fid);
	if (err)
		return err;
	if (!project || project > d->nprojects)
		return -EINVAL;
	err = func_set(d, fid, name, len, module, h, file, start_line, project);
	if (err) {
		idpool__release(&d->func_ids, fid);
		return err;
	}
	u->funcs[u->nfuncs++] = fid;
	*id = fid;
	return 0;
}

int dict__touch_node(struct dict *d, uint32_t id, uint32_t h, struct dict_undo *u)
{
	struct node_ent *n = &d->nodes[id];
	int err;

	if (n->last_h >= h)
		return 0;
	err = push_last(&u->node_last, &u->nnode_last, &u->cap_node_last, id, n->last_h);
	if (err)
		return err;
	n->last_h = h;
	return 0;
}

/* The node map's slots keep a copy of the node's last_h in aux, so that a
 * walk down the trie touches one cache line per frame while the node was
 * already used this hour. The copy is never above last_h: when it is below,
 * the node itself is checked. */
static void node_sync(struct dict *d, uint32_t id)
{
	const struct node_ent *n = &d->nodes[id];
	struct idmap_slot *slot = idmap__find(&d->node_map, node_key(n->parent, n->func), id);

	if (slot)
		slot->aux = n->last_h;
}

/* An entry of a kind that expires, with what it is filed under. */
struct entry {
	struct idmap *map;
	struct idpool *ids;
	uint64_t *live;
	uint64_t key; /* in map */
	uint8_t *state;
};

static struct entry entry_of(struct dict *d, enum dict_kind kind, uint32_t id)
{
	switch (kind) {
	case DICT_NODE:
		return (struct entry){&d->node_map, &d->node_ids, &d->live_nodes,
				      node_key(d->nodes[id].parent, d->nodes[id].func),
				      &d->nodes[id].state};
	case DICT_FUNC:
		return (struct entry){&d->func_map, &d->func_ids, &d->live_funcs, d->funcs[id].hash,
				      &d->funcs[id].state};
	case DICT_SERIES:
		return (struct entry){&d->series_map, &d->series_ids, &d->live_series,
				      d->series[id].hash, &d->series[id].state};
	default:
		return (struct entry){&d->pseries_map, &d->pseries_ids, &d->live_pseries,
				      d->pseries[id].hash, &d->pseries[id].state};
	}
}

/* Counts a function or a series that becomes live (or stops being) in
 * its project. */
static void project_count(struct dict *d, enum dict_kind kind, uint32_t id, bool live)
{
	struct dict_project *p;
	uint64_t n;

	if (kind == DICT_NODE)
		return;
	if (kind == DICT_FUNC) {
		p = &d->projects[d->funcs[id].project];
		n = dict__func_bytes(&d->funcs[id]);
		p->name_bytes = live ? p->name_bytes + n : p->name_bytes - n;
		return;
	}
	p = &d->projects[kind == DICT_SERIES ? d->series[id].project : d->pseries[id].project];
	p->series = live ? p->series + 1 : p->series - 1;
}

/* Makes a filled slot live: findable in its map, counted, and a node
 * counted by its parent and its function. 0 or -ENOMEM. */
static int entry_link(struct dict *d, enum dict_kind kind, uint32_t id)
{
	struct entry e = entry_of(d, kind, id);
	int err = idmap__put(e.map, e.key, id);

	if (err)
		return err;
	if (kind == DICT_NODE) {
		struct node_ent *n = &d->nodes[id];

		node_sync(d, id);
		if (n->parent)
			d->nodes[n->parent].nchild++;
		d->funcs[n->func].refs++;
	}
	*e.state = DICT_LIVE;
	(*e.live)++;
	project_count(d, kind, id, true);
	return 0;
}

/* Undoes entry_link but for the state, which the caller sets. */
static void entry_unlink(struct dict *d, enum dict_kind kind, uint32_t id)
{
	struct entry e = entry_of(d, kind, id);

	idmap__del(e.map, e.key, id);
	if (kind == DICT_NODE) {
		struct node_ent *n = &d->nodes[id];

		if (n->parent)
			d->nodes[n->parent].nchild--;
		d->funcs[n->func].refs--;
	}
	(*e.live)--;
	project_count(d, kind, id, false);
}

/* Frees what an unlinked entry holds and empties its slot. */
static void entry_drop(struct dict *d, enum dict_kind kind, uint32_t id)
{
	struct func_ent *f;

	switch (kind) {
	case DICT_NODE:
		memset(&d->nodes[id], 0, sizeof(d->nodes[id]));
		break;
	case DICT_FUNC:
		f = &d->funcs[id];
		free(f->name);
		if (f->file_owned)
			free((char *)f->file);
		d->mods[f->mod].refs--;
		memset(f, 0, sizeof(*f));
		break;
	case DICT_SERIES:
		series_ent__free(&d->series[id]);
		memset(&d->series[id], 0, sizeof(d->series[id]));
		break;
	default:
		series_ent__free(&d->pseries[id]);
		memset(&d->pseries[id], 0, sizeof(d->pseries[id]));
		break;
	}
}

int dict__child(struct dict *d, uint32_t parent, uint32_t func, uint32_t h, uint32_t *id,
		struct dict_undo *u)
{
	struct idmap_slot *slot = idmap__slot(&d->node_map, node_key(parent, func));
	unsigned int depth;
	uint32_t nid;
	int err;

	if (slot) {
		*id = slot->val;
		if (slot->aux >= h)
			return 0;
		err = dict__touch_node(d, slot->val, h, u);
		if (!err)
			slot->aux = d->nodes[slot->val].last_h;
		return err;
	}
	depth = parent ? d->nodes[parent].depth + 1u : 1u;
	if (depth > DICT_MAX_DEPTH)
		return -EINVAL;
	err = undo_room(&u->nodes, u->nnodes, &u->cap_nodes);
	if (err)
		return err;
	err = new_id(&d->node_ids, (void **)&d->nodes, &d->cap_nodes, sizeof(*d->nodes), &nid);
	if (err)
		return err;
	d->nodes[nid] =
		(struct node_ent){.parent = parent, .func = func, .last_h = h, .depth = depth};
	err = entry_link(d, DICT_NODE, nid);
	if (err) {
		memset(&d->nodes[nid], 0, sizeof(d->nodes[nid]));
		idpool__release(&d->node_ids, nid);
		return err;
	}
	u->nodes[u->nnodes++] = nid;
	*id = nid;
	return 0;
}

/* Finds a series (or, with name, a metric series) by its canonical key. */
static uint32_t series_find(const struct idmap *map, const struct series_ent *arr, uint64_t h,
			    const char *name, const struct labelset *ls)
{
	size_t pos = IDMAP_START;
	uint32_t sid;

	while ((sid = idmap__next(map, h, &pos))) {
		const struct series_ent *e = &arr[sid];

		if (e->ls.len == ls->len && !memcmp(e->ls.key, ls->key, ls->len) &&
		    (!name || !strcmp(e->name, name)))
			return sid;
	}
	return 0;
}

/* Fills free slot id of the series (DICT_SERIES) or the metric series
 * (DICT_PSERIES, with name) from a canonical label set key and links it;
 * on failure the slot is left free. 0, -EINVAL (not a key) or -ENOMEM. */
static int series_add(struct dict *d, enum dict_kind kind, uint32_t id, const char *name,
		      const void *key, size_t len, uint32_t last_h)
{
	struct series_ent *e = kind == DICT_SERIES ? &d->series[id] : &d->pseries[id];
	int err = 0;

	if (name && !(e->name = strdup(name)))
		err = -ENOMEM;
	if (!err)
		err = labelset__decode(&e->ls, key, len);
	if (!err)
		err = dict__project(d, labels_get(e->ls.labels, e->ls.n, STORE_PROJECT_LABEL),
				    &e->project);
	if (!err) {
		e->hash = name ? pseries_hash(name, &e->ls) : hash_bytes(e->ls.key, e->ls.len, 0);
		e->last_h = last_h;
		err = entry_link(d, kind, id);
	}
	if (err)
		entry_drop(d, kind, id);
	return err;
}

int dict__series(struct dict *d, const struct labelset *ls, uint32_t h, uint32_t *id,
		 struct dict_undo *u)
{
	uint32_t sid =
		series_find(&d->series_map, d->series, hash_bytes(ls->key, ls->len, 0), NULL, ls);
	struct series_ent *e;
	int err;

	if (sid) {
		*id = sid;
		e = &d->series[sid];
		if (e->last_h >= h)
			return 0;
		err = push_last(&u->series_last, &u->nseries_last, &u->cap_series_last, sid,
				e->last_h);
		if (!err)
			e->last_h = h;
		return err;
	}
	err = undo_room(&u->series, u->nseries, &u->cap_series);
	if (err)
		return err;
	err = new_id(&d->series_ids, (void **)&d->series, &d->cap_series, sizeof(*d->series), &sid);
	if (err)
		return err;
	err = series_add(d, DICT_SERIES, sid, NULL, ls->key, ls->len, h);
	if (err) {
		idpool__release(&d->series_ids, sid);
		return err;
	}
	u->series[u->nseries++] = sid;
	*id = sid;
	return 0;
}

int dict__pseries(struct dict *d, const char *name, const struct labelset *ls, uint32_t *id,
		  struct dict_undo *u)
{
	uint32_t sid = series_find(&d->pseries_map, d->pseries, pseries_hash(name, ls), name, ls);
	int err;

	if (sid) {
		*id = sid;
		return 0;
	}
	err = undo_room(&u->pseries, u->npseries, &u->cap_pseries);
	if (err)
		return err;
	err = new_id(&d->pseries_ids, (void **)&d->pseries, &d->cap_pseries, sizeof(*d->pseries),
		     &sid);
	if (err)
		return err;
	err = series_add(d, DICT_PSERIES, sid, name, ls->key, ls->len, 0);
	if (err) {
		idpool__release(&d->pseries_ids, sid);
		return err;
	}
	u->pseries[u->npseries++] = sid;
	*id = sid;
	return 0;
}

/* Units are few and never expire: ids are 1..nunits, found through a hash
 * map all the same, since a client can send any unit string. */
static uint32_t unit_find(const struct dict *d, const char *unit, int64_t period, uint64_t h)
{
	size_t pos = IDMAP_START;
	uint32_t i;

	while ((i = idmap__next(&d->unit_map, h, &pos)))
		if (d->units[i].period == period && !strcmp(d->units[i].unit, unit))
			return i;
	return 0;
}

static int unit_set(struct dict *d, uint32_t i, const char *unit, int64_t period, uint64_t h)
{
	int err = array_grow((void **)&d->units, &d->cap_units, (size_t)i + 1, sizeof(*d->units));

	if (err)
		return err;
	d->units[i].unit = strdup(unit);
	if (!d->units[i].unit)
		return -ENOMEM;
	err = idmap__put(&d->unit_map, h, i);
	if (err) {
		free(d->units[i].unit);
		d->units[i].unit = NULL;
		return err;
	}
	d->units[i].period = period;
	if (i > d->nunits)
		d->nunits = i;
	return 0;
}

int dict__unit(struct dict *d, const char *unit, int64_t period, uint32_t *id, struct dict_undo *u)
{
	uint64_t h = unit_hash(unit, period);
	uint32_t i = unit_find(d, unit, period, h);
	int err;

	if (i) {
		*id = i;
		return 0;
	}
	if (d->nunits >= UINT32_MAX - 1)
		return -EOVERFLOW;
	err = undo_room(&u->units, u->nunits, &u->cap_units);
	if (err)
		return err;
	i = (uint32_t)d->nunits + 1;
	err = unit_set(d, i, unit, period, h);
	if (err)
		return err;
	u->units[u->nunits++] = i;
	*id = i;
	return 0;
}

/* ---- loading ---- */

static int load_slot(struct idpool *p, void **arr, size_t *cap, size_t elem, uint32_t id)
{
	int err;

	if (!id || id >= UINT32_MAX - 1)
		return -EINVAL;
	err = array_grow(arr, cap, (size_t)id + 1, elem);
	if (err)
		return err;
	if (id >= p->next)
		p->next = id + 1;
	return idpool__reserve(p);
}

int dict__load_func(struct dict *d, uint32_t id, const char *name, const char *module, bool kernel,
		    const char *file, uint32_t start_line, const char *project)
{
	int err = load_slot(&d->func_ids, (void **)&d->funcs, &d->cap_funcs, sizeof(*d->funcs), id);
	size_t len = strlen(name);
	uint32_t mod, proj;

	if (err)
		return err;
	if (d->funcs[id].state != DICT_FREE)
		return -EINVAL;
	err = dict__module(d, module, kernel, &mod);
	if (!err)
		err = dict__project(d, project ? project : "", &proj);
	if (err)
		return err;
	return func_set(d, id, name, len, mod, dict__func_hash(name, len, mod), file, start_line,
			proj);
}

int dict__load_node(struct dict *d, uint32_t id, uint32_t parent, uint32_t func, uint32_t last_h)
{
	int err = load_slot(&d->node_ids, (void **)&d->nodes, &d->cap_nodes, sizeof(*d->nodes), id);

	if (err)
		return err;
	if (d->nodes[id].state != DICT_FREE || !func)
		return -EINVAL;
	/* Linked by dict__load_done once every row is in. */
	d->nodes[id] = (struct node_ent){
		.parent = parent, .func = func, .last_h = last_h, .state = DICT_LIVE};
	return 0;
}

int dict__load_series(struct dict *d, uint32_t id, const void *key, size_t len, uint32_t last_h)
{
	int err = load_slot(&d->series_ids, (void **)&d->series, &d->cap_series, sizeof(*d->series),
			    id);

	if (err)
		return err;
	if (d->series[id].state != DICT_FREE)
		return -EINVAL;
	return series_add(d, DICT_SERIES, id, NULL, key, len, last_h);
}

int dict__load_pseries(struct dict *d, uint32_t id, const char *name, const void *key, size_t len)
{
	int err = load_slot(&d->pseries_ids, (void **)&d->pseries, &d->cap_pseries,
			    sizeof(*d->pseries), id);

	if (err)
		return err;
	if (d->pseries[id].state != DICT_FREE)
		return -EINVAL;
	return series_add(d, DICT_PSERIES, id, name, key, len, 0);
}

int dict__load_unit(struct dict *d, uint32_t id, const char *unit, int64_t period)
{
	if (!id || id >= UINT32_MAX - 1 || (id < d->cap_units && d->units[id].unit))
		return -EINVAL;
	return unit_set(d, id, unit, period, unit_hash(unit, period));
}

/* Depth of node id, filling in the depths of the nodes above it; -1 when a
 * parent is missing or the chain is too long (a cycle). */
static int node_depth(struct dict *d, uint32_t id)
{
	uint32_t path[DICT_MAX_DEPTH + 1], cur = id;
	unsigned int n = 0, base;

	while (cur && !d->nodes[cur].depth) {
		if (n > DICT_MAX_DEPTH)
			return -1;
		path[n++] = cur;
		cur = d->nodes[cur].parent;
		if (cur && (cur >= d->cap_nodes || d->nodes[cur].state != DICT_LIVE))
			return -1;
	}
	base = cur ? d->nodes[cur].depth : 0;
	if (base + n > DICT_MAX_DEPTH)
		return -1;
	while (n--)
		d->nodes[path[n]].depth = ++base;
	return (int)d->nodes[id].depth;
}

static void free_holes(struct idpool *p, const void *arr, size_t elem, size_t state_off)
{
	uint32_t id;

	p->nfree = 0;
	for (id = p->next; id-- > 1;)
		if (((const uint8_t *)arr)[(size_t)id * elem + state_off] == DICT_FREE)
			p->free[p->nfree++] = id;
}

int dict__load_done(struct dict *d)
{
	size_t i;
	int err;

	for (i = 1; i < d->cap_nodes; i++) {
		struct node_ent *n = &d->nodes[i];

		if (n->state != DICT_LIVE)
			continue;
		if (n->func >= d->cap_funcs || d->funcs[n->func].state != DICT_LIVE)
			return -EINVAL;
		if (node_depth(d, (uint32_t)i) < 0)
			return -EINVAL;
	}
	for (i = 1; i < d->cap_nodes; i++) {
		if (d->nodes[i].state != DICT_LIVE)
			continue;
		err = entry_link(d, DICT_NODE, (uint32_t)i);
		if (err)
			return err;
	}
	/* Every pool has room for its ids on the free list (idpool__reserve). */
	if (d->nodes)
		free_holes(&d->node_ids, d->nodes, sizeof(*d->nodes),
			   offsetof(struct node_ent, state));
	if (d->funcs)
		free_holes(&d->func_ids, d->funcs, sizeof(*d->funcs),
			   offsetof(struct func_ent, state));
	if (d->series)
		free_holes(&d->series_ids, d->series, sizeof(*d->series),
			   offsetof(struct series_ent, state));
	if (d->pseries)
		free_holes(&d->pseries_ids, d->pseries, sizeof(*d->pseries),
			   offsetof(struct series_ent, state));
	return 0;
}

/* ---- undo ---- */

/* Takes back the entries of a kind a write added, the last first. */
static void undo_adds(struct dict *d, enum dict_kind kind, const uint32_t *ids, size_t n)
{
	size_t i;

	for (i = n; i-- > 0;) {
		struct idpool *pool = entry_of(d, kind, ids[i]).ids;

		entry_unlink(d, kind, ids[i]);
		entry_drop(d, kind, ids[i]);
		idpool__release(pool, ids[i]);
	}
}

void dict__undo(struct dict *d, struct dict_undo *u)
{
	size_t i;

	for (i = u->nnode_last; i-- > 0;) {
		d->nodes[u->node_last[i].id].last_h = u->node_last[i].old;
		node_sync(d, u->node_last[i].id);
	}
	for (i = u->nseries_last; i-- > 0;)
		d->series[u->series_last[i].id].last_h = u->series_last[i].old;
	for (i = u->nfunc_srcs; i-- > 0;) {
		struct func_ent *f = &d->funcs[u->func_srcs[i]];

		if (f->state == DICT_LIVE)
			d->projects[f->project].name_bytes -= strlen(f->file);
		if (f->file_owned)
			free((char *)f->file);
		f->file = "";
		f->file_owned = false;
		f->start_line = 0;
	}
	undo_adds(d, DICT_NODE, u->nodes, u->nnodes);
	undo_adds(d, DICT_FUNC, u->funcs, u->nfuncs);
	undo_adds(d, DICT_SERIES, u->series, u->nseries);
	undo_adds(d, DICT_PSERIES, u->pseries, u->npseries);
	for (i = u->nunits; i-- > 0;) {
		struct unit_ent *e = &d->units[u->units[i]];

		idmap__del(&d->unit_map, unit_hash(e->unit, e->period), u->units[i]);
		free(e->unit);
		memset(e, 0, sizeof(*e));
		d->nunits = u->units[i] - 1;
	}
	mods_sweep(d);
	dict__undo_clear(u);
}

void dict__undo_clear(struct dict_undo *u)
{
	u->nfuncs = u->nnodes = u->nseries = u->npseries = u->nunits = 0;
	u->nnode_last = u->nseries_last = 0;
	u->nfunc_srcs = 0;
}

void dict__undo_free(struct dict_undo *u)
{
	free(u->funcs);
	free(u->nodes);
	free(u->series);
	free(u->pseries);
	free(u->units);
	free(u->node_last);
	free(u->series_last);
	free(u->func_srcs);
	memset(u, 0, sizeof(*u));
}

/* ---- expiry ---- */

void dict__kill(struct dict *d, enum dict_kind kind, uint32_t id)
{
	struct entry e = entry_of(d, kind, id);

	entry_unlink(d, kind, id);
	*e.state = DICT_DEAD;
	e.ids->pending[e.ids->npending++] = id; /* room: idpool__reserve */
}

int dict__revive(struct dict *d, enum dict_kind kind, uint32_t id)
{
	/* Off the pending list first: an entry that fails to come back is
	 * lost to lookups but its id is never handed out again while its row
	 * may still exist. */
	idpool__unpend(entry_of(d, kind, id).ids, id);
	return entry_link(d, kind, id);
}

/* Frees the pending entries of a kind and gives back their ids. */
static void flush_pending(struct dict *d, enum dict_kind kind, struct idpool *p)
{
	size_t i;

	for (i = 0; i < p->npending; i++) {
		entry_drop(d, kind, p->pending[i]);
		idpool__release(p, p->pending[i]);
	}
	p->npending = 0;
}

void dict__flush(struct dict *d)
{
	flush_pending(d, DICT_NODE, &d->node_ids);
	flush_pending(d, DICT_FUNC, &d->func_ids);
	flush_pending(d, DICT_SERIES, &d->series_ids);
	flush_pending(d, DICT_PSERIES, &d->pseries_ids);
	mods_sweep(d);
}

int dict__frames(const struct dict *d, uint32_t id, uint32_t *funcs, size_t max)
{
	size_t n = 0;

	while (id) {
		if (id >= d->cap_nodes || d->nodes[id].state == DICT_FREE || n > DICT_MAX_DEPTH)
			return -1;
		if (n < max)
			funcs[n] = d->nodes[id].func;
		n++;
		id = d->nodes[id].parent;
	}
	return (int)n;
}
