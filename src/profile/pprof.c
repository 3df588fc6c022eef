/* pprof.c: the pprof format (a gzip-compressed perftools.profiles.Profile
 * protobuf, see profile.proto) that `go tool pprof`, Grafana Pyroscope and
 * most profilers read. The writer backs `sonde record -o x.pb.gz`; the reader
 * loads pprof files from anywhere, so it trusts nothing: decompression stops
 * at a caller-given size (a gzip bomb is EFBIG, not an OOM) and every index
 * and id in the message is checked before it is followed. */
#include "profile/profile.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <zlib.h>

#include "common/sat.h"
#include "profile/profile.pb-c.h"
#include "profile/profile_internal.h"

#define GZ_CHUNK (64 * 1024)
/* The upper half of the address space, the kernel's on 64-bit Linux. */
#define KERNEL_HALF (1ULL << 63)

/* A protobuf-c output buffer that deflates into a FILE as it is filled, so
 * the packed message never exists uncompressed in memory. */
struct gz_sink {
	ProtobufCBuffer base;
	z_stream zs;
	FILE *f;
	int err;
	unsigned char out[GZ_CHUNK];
};

static int gz_sink__deflate(struct gz_sink *s, int flush)
{
	int ret;

	do {
		size_t have;

		s->zs.next_out = s->out;
		s->zs.avail_out = sizeof(s->out);
		ret = deflate(&s->zs, flush);
		if (ret == Z_STREAM_ERROR || (flush == Z_FINISH && ret == Z_BUF_ERROR))
			return -EIO;
		have = sizeof(s->out) - s->zs.avail_out;
		if (have && fwrite(s->out, 1, have, s->f) != have)
			return -EIO;
	} while (s->zs.avail_out == 0 || (flush == Z_FINISH && ret != Z_STREAM_END));
	return 0;
}

static void gz_sink__append(ProtobufCBuffer *buf, size_t len, const uint8_t *data)
{
	struct gz_sink *s = (struct gz_sink *)buf;

	while (len && !s->err) {
		unsigned int n = len > UINT_MAX ? UINT_MAX : (unsigned int)len;

		s->zs.next_in = (Bytef *)data;
		s->zs.avail_in = n;
		s->err = gz_sink__deflate(s, Z_NO_FLUSH);
		data += n;
		len -= n;
	}
}

/* Sonde's string table doubles as pprof's (both keep "" at index 0); these
 * strings only pprof needs are appended after it. */
enum {
	XS_SAMPLES,
	XS_COUNT,
	XS_PID,
	XS_TID,
	XS_COMM,
	XS_THREAD,
	XS_SERVICE,
	XS_TYPE,
	XS_UNIT,
	XS_NR,
};

/* Labels a sample is written with at most: pid, tid, comm, thread,
 * service_name, and its job's (struct prof_labels). */
#define MAX_LABELS (5 + PROF_MAX_LABELS)

/* Everything the message points to, allocated in one go per kind. */
struct pprof_out {
	Perftools__Profiles__Profile prof;
	Perftools__Profiles__ValueType vt[3], *vtp[2];
	char **strings;
	Perftools__Profiles__Mapping *maps, **mapp;
	Perftools__Profiles__Function *funcs, **funcp;
	Perftools__Profiles__Location *locs, **locp;
	Perftools__Profiles__Line *lines, **linep;
	Perftools__Profiles__Sample *samples, **samplep;
	Perftools__Profiles__Label *labels, **labelp;
	uint64_t *loc_ids;
	int64_t *values;
	struct prof_func *pfuncs;
	uint32_t *loc_func; /* 0-based function of each location */
	uint32_t *loc_map;  /* 1-based mapping of each location, 0 for none */
	uint32_t *mod_map;  /* per string: the mapping made for that module, 0 for none */
};

static void pprof_out__free(struct pprof_out *o)
{
	free(o->strings);
	free(o->maps);
	free(o->mapp);
	free(o->funcs);
	free(o->funcp);
	free(o->locs);
	free(o->locp);
	free(o->lines);
	free(o->linep);
	free(o->samples);
	free(o->samplep);
	free(o->labels);
	free(o->labelp);
	free(o->loc_ids);
	free(o->values);
	free(o->pfuncs);
	free(o->loc_func);
	free(o->loc_map);
	free(o->mod_map);
}

/* calloc that returns a pointer for 0 elements too, so NULL means ENOMEM. */
static void *alloc_n(size_t n, size_t size)
{
	return calloc(n ? n : 1, size);
}

#define ALLOC_N(ptr, n) ((ptr) = alloc_n((n), sizeof(*(ptr))))

static int pprof_out__alloc(struct pprof_out *o, const struct profile *p)
{
	size_t total_locs = 0;

	for (size_t i = 0; i < p->nsamples; i++)
		total_locs += p->samples[i].nlocs;
	if (!ALLOC_N(o->strings, p->nstrings + XS_NR) ||
	    !ALLOC_N(o->maps, p->nmappings + p->nlocs) ||
	    !ALLOC_N(o->mapp, p->nmappings + p->nlocs) || !ALLOC_N(o->loc_map, p->nlocs) ||
	    !ALLOC_N(o->mod_map, p->nstrings) || !ALLOC_N(o->funcs, p->nlocs) ||
	    !ALLOC_N(o->funcp, p->nlocs) || !ALLOC_N(o->locs, p->nlocs) ||
	    !ALLOC_N(o->locp, p->nlocs) || !ALLOC_N(o->lines, p->nlocs) ||
	    !ALLOC_N(o->linep, p->nlocs) || !ALLOC_N(o->samples, p->nsamples) ||
	    !ALLOC_N(o->samplep, p->nsamples) || !ALLOC_N(o->labels, MAX_LABELS * p->nsamples) ||
	    !ALLOC_N(o->labelp, MAX_LABELS * p->nsamples) || !ALLOC_N(o->loc_ids, total_locs) ||
	    !ALLOC_N(o->values, 2 * p->nsamples) || !ALLOC_N(o->pfuncs, p->nlocs) ||
	    !ALLOC_N(o->loc_func, p->nlocs))
		return -ENOMEM;
	return 0;
}

/* The string table (ours, then XS_*) and what a sample counts. */
static void pprof_out__header(struct pprof_out *o, const struct profile *p)
{
	Perftools__Profiles__Profile *m = &o->prof;
	uint32_t xs = p->nstrings;

	/* The message only reads the strings; the casts drop const for it. */
	for (size_t i = 0; i < p->nstrings; i++)
		o->strings[i] = p->strings[i];
	o->strings[xs + XS_SAMPLES] = (char *)"samples";
	o->strings[xs + XS_COUNT] = (char *)"count";
	o->strings[xs + XS_PID] = (char *)"pid";
	o->strings[xs + XS_TID] = (char *)"tid";
	o->strings[xs + XS_COMM] = (char *)"comm";
	o->strings[xs + XS_THREAD] = (char *)"thread";
	o->strings[xs + XS_SERVICE] = (char *)"service_name";
	o->strings[xs + XS_TYPE] = p->type ? p->type : (char *)"";
	o->strings[xs + XS_UNIT] = p->unit ? p->unit : (char *)"";
	m->n_string_table = p->nstrings + XS_NR;
	m->string_table = o->strings;

	for (int i = 0; i < 3; i++)
		perftools__profiles__value_type__init(&o->vt[i]);
	o->vt[0].type = xs + XS_SAMPLES;
	o->vt[0].unit = xs + XS_COUNT;
	o->vt[1].type = o->vt[2].type = xs + XS_TYPE;
	o->vt[1].unit = o->vt[2].unit = xs + XS_UNIT;
	o->vtp[0] = &o->vt[0];
	o->vtp[1] = &o->vt[1];
	m->n_sample_type = 2;
	m->sample_type = o->vtp;
	m->period_type = &o->vt[2];
	m->period = p->period;
	m->time_nanos = p->time_ns;
	m->duration_nanos = p->duration_ns;
}

/* Whether location l, which has no mapping, needs one made for it for its
 * Function.filename to read back as what it is: a source file beside a
 * module (the module goes into the mapping), or a source file without line
 * numbers (an empty mapping says the filename is no module). */
static bool needs_mapping(const struct prof_location *l)
{
	return !l->mapping && l->file && (l->module || (!l->line && !l->start_line));
}

static void pprof_out__mappings(struct pprof_out *o, const struct profile *p)
{
	size_t nmaps = p->nmappings;

	for (size_t i = 0; i < p->nmappings; i++) {
		const struct prof_mapping *pm = &p->mappings[i];
		Perftools__Profiles__Mapping *mm = &o->maps[i];

		perftools__profiles__mapping__init(mm);
		mm->id = i + 1;
		mm->memory_start = pm->start;
		mm->memory_limit = pm->limit;
		mm->file_offset = pm->pgoff;
		mm->filename = pm->file;
		mm->build_id = pm->build_id;
		/* Every location is named already: keeps pprof from trying to
		 * symbolize against binaries that may not exist here. */
		mm->has_functions = true;
		mm->has_filenames = true;
		o->mapp[i] = mm;
	}
	/* One more mapping per module of the locations that need one (the
	 * store's profiles have modules but no mappings), named after it. */
	for (size_t i = 0; i < p->nlocs; i++) {
		const struct prof_location *l = &p->locs[i];
		Perftools__Profiles__Mapping *mm;

		o->loc_map[i] = l->mapping;
		if (!needs_mapping(l))
			continue;
		if (!o->mod_map[l->module]) {
			mm = &o->maps[nmaps];
			perftools__profiles__mapping__init(mm);
			mm->id = nmaps + 1;
			mm->filename = l->module;
			mm->has_functions = true;
			mm->has_filenames = true;
			o->mapp[nmaps++] = mm;
			o->mod_map[l->module] = (uint32_t)nmaps;
		}
		o->loc_map[i] = o->mod_map[l->module];
	}
	o->prof.n_mapping = nmaps;
	o->prof.mapping = o->mapp;
}

/* Functions (one per name, module, source file and first line), then the
 * locations, one line each. */
static int pprof_out__locations(struct pprof_out *o, const struct profile *p)
{
	ssize_t nfuncs = profile__functions(p, o->pfuncs, o->loc_func, false);

	if (nfuncs < 0)
		return (int)nfuncs;
	for (size_t i = 0; i < (size_t)nfuncs; i++) {
		Perftools__Profiles__Function *fm = &o->funcs[i];

		perftools__profiles__function__init(fm);
		fm->id = i + 1;
		fm->name = o->pfuncs[i].name;
		fm->system_name = o->pfuncs[i].name;
		/* The source file where known, else (as pprof tools expect
		 * something there) the module. */
		fm->filename = o->pfuncs[i].file ? o->pfuncs[i].file : o->pfuncs[i].module;
		fm->start_line = o->pfuncs[i].start_line;
		o->funcp[i] = fm;
	}
	o->prof.n_function = nfuncs;
	o->prof.function = o->funcp;

	for (size_t i = 0; i < p->nlocs; i++) {
		const struct prof_location *pl = &p->locs[i];
		Perftools__Profiles__Location *lm = &o->locs[i];

		perftools__profiles__location__init(lm);
		perftools__profiles__line__init(&o->lines[i]);
		o->lines[i].function_id = (uint64_t)o->loc_func[i] + 1;
		o->lines[i].line = pl->line;
		o->linep[i] = &o->lines[i];
		lm->id = i + 1;
		lm->mapping_id = o->loc_map[i];
		/* A kernel frame known by name alone (folded input) is put in
		 * the kernel's half, which is how readers tell kernel code. */
		lm->address = pl->addr || !pl->kernel || pl->module ? pl->addr : KERNEL_HALF;
		lm->n_line = 1;
		lm->line = &o->linep[i];
		o->locp[i] = lm;
	}
	o->prof.n_location = p->nlocs;
	o->prof.location = o->locp;
	return 0;
}

/* Samples: their locations, [count, count x period], labels pid, tid,
 * comm, and thread, service_name and their job's when they have them. */
static void pprof_out__samples(struct pprof_out *o, const struct profile *p)
{
	uint32_t xs = p->nstrings;
	size_t total_locs = 0;

	for (size_t i = 0; i < p->nsamples; i++) {
		const struct prof_sample *ps = &p->samples[i];
		Perftools__Profiles__Sample *sm = &o->samples[i];
		Perftools__Profiles__Label *l = &o->labels[MAX_LABELS * i];
		size_t nl = 3;

		perftools__profiles__sample__init(sm);
		sm->n_location_id = ps->nlocs;
		sm->location_id = &o->loc_ids[total_locs];
		for (size_t j = 0; j < ps->nlocs; j++)
			o->loc_ids[total_locs++] = (uint64_t)ps->locs[j] + 1;
		sm->n_value = 2;
		sm->value = &o->values[2 * i];
		sm->value[0] = ps->count;
		sm->value[1] = sat_mul_i64(ps->count, p->period);
		for (size_t j = 0; j < MAX_LABELS; j++) {
			perftools__profiles__label__init(&l[j]);
			o->labelp[MAX_LABELS * i + j] = &l[j];
		}
		l[0].key = xs + XS_PID;
		l[0].num = ps->pid;
		l[1].key = xs + XS_TID;
		l[1].num = ps->tid;
		l[2].key = xs + XS_COMM;
		l[2].str = ps->comm;
		if (ps->thread) {
			l[nl].key = xs + XS_THREAD;
			l[nl++].str = ps->thread;
		}
		if (ps->service) {
			l[nl].key = xs + XS_SERVICE;
			l[nl++].str = ps->service;
		}
		if (ps->labels && ps->labels <= p->nlabelsets) {
			const struct prof_labels *ls = &p->labelsets[ps->labels - 1];

			for (uint32_t k = 0; k < ls->n; k++) {
				l[nl].key = ls->kv[2 * k];
				l[nl++].str = ls->kv[2 * k + 1];
			}
		}
		sm->n_label = nl;
		sm->label = &o->labelp[MAX_LABELS * i];
		o->samplep[i] = sm;
	}
	o->prof.n_sample = p->nsamples;
	o->prof.sample = o->samplep;
}

/* The message of p in o, pointing into p's tables: 0 or -ENOMEM. */
static int pprof_out__build(struct pprof_out *o, const struct profile *p)
{
	int err = pprof_out__alloc(o, p);

	if (err)
		return err;
	perftools__profiles__profile__init(&o->prof);
	pprof_out__header(o, p);
	pprof_out__mappings(o, p);
	err = pprof_out__locations(o, p);
	if (err)
		return err;
	pprof_out__samples(o, p);
	return 0;
}

int profile__write_pprof(const struct profile *p, FILE *f)
{
	struct pprof_out out;
	struct gz_sink *sink = NULL;
	bool zinit = false;
	int err;

	memset(&out, 0, sizeof(out));
	err = pprof_out__build(&out, p);
	if (err)
		goto cleanup;

	sink = calloc(1, sizeof(*sink));
	if (!sink) {
		err = -ENOMEM;
		goto cleanup;
	}
	sink->base.append = gz_sink__append;
	sink->f = f;
	/* windowBits 15 + 16: a gzip header and trailer around the deflate data. */
	if (deflateInit2(&sink->zs, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8,
			 Z_DEFAULT_STRATEGY) != Z_OK) {
		err = -ENOMEM;
		goto cleanup;
	}
	zinit = true;

	perftools__profiles__profile__pack_to_buffer(&out.prof, &sink->base);
	err = sink->err;
	if (!err)
		err = gz_sink__deflate(sink, Z_FINISH);
	if (!err && (fflush(f) || ferror(f)))
		err = -EIO;

cleanup:
	if (zinit)
		deflateEnd(&sink->zs);
	free(sink);
	pprof_out__free(&out);
	return err;
}

/* Inflates a gzip file of len bytes into *out, failing with -EFBIG as soon
 * as more than max bytes come out. Concatenated gzip members are read in
 * turn, as gzip(1) does; anything else after the last one is -EINVAL. */
static int gunzip(const uint8_t *in, size_t len, size_t max, uint8_t **out, size_t *outlen)
{
	size_t limit = max < SIZE_MAX ? max + 1 : max, cap = 0, used = 0, fed = 0;
	uint8_t *buf = NULL;
	z_stream zs;
	int err = 0, ret;

	memset(&zs, 0, sizeof(zs));
	if (inflateInit2(&zs, 15 + 16) != Z_OK)
		return -ENOMEM;

	for (;;) {
		size_t room, before_in, produced;

		/* Output grows by doubling up to max + 1 bytes: reaching the
		 * extra byte proves the file too large without inflating on. */
		if (used == cap) {
			size_t ncap = cap ? cap * 2 : GZ_CHUNK;
			uint8_t *nbuf;

			if (cap == limit) {
				err = -EFBIG;
				goto cleanup;
			}
			if (ncap < cap || ncap > limit)
				ncap = limit;
			nbuf = realloc(buf, ncap ? ncap : 1);
			if (!nbuf) {
				err = -ENOMEM;
				goto cleanup;
			}
			buf = nbuf;
			cap = ncap;
		}
		if (!zs.avail_in && fed < len) {
			size_t n = len - fed > UINT_MAX ? UINT_MAX : len - fed;

			zs.next_in = (Bytef *)in + fed;
			zs.avail_in = n;
			fed += n;
		}
		room = cap - used > UINT_MAX ? UINT_MAX : cap - used;
		zs.next_out = buf + used;
		zs.avail_out = room;
		before_in = zs.avail_in;
		ret = inflate(&zs, Z_NO_FLUSH);
		produced = room - zs.avail_out;
		used += produced;
		if (used > max) {
			err = -EFBIG;
			goto cleanup;
		}

		if (ret == Z_STREAM_END) {
			if (!zs.avail_in && fed == len)
				break;
			/* Another member must start right here. */
			if (zs.avail_in < 2 || zs.next_in[0] != 0x1f || zs.next_in[1] != 0x8b ||
			    inflateReset(&zs) != Z_OK) {
				err = -EINVAL;
				goto cleanup;
			}
			continue;
		}
		if (ret == Z_MEM_ERROR) {
			err = -ENOMEM;
			goto cleanup;
		}
		/* Input is fed whenever some is left and there is always output
		 * room, so no progress means the input ended mid-stream. */
		if ((ret != Z_OK && ret != Z_BUF_ERROR) ||
		    (!produced && before_in == zs.avail_in)) {
			err = -EINVAL;
			goto cleanup;
		}
	}
	*out = buf;
	*outlen = used;
	buf = NULL;

cleanup:
	inflateEnd(&zs);
	free(buf);
	return err;
}

/* Maps the ids of one table to their positions, sorted for bsearch. */
struct id_ent {
	uint64_t id;
	size_t idx;
};

static int id_ent__cmp(const void *a, const void *b)
{
	const struct id_ent *x = a, *y = b;

	return x->id < y->id ? -1 : x->id > y->id;
}

struct id_map {
	struct id_ent *ents;
	size_t n;
	bool dense; /* ids are exactly 1..n, so ents[id - 1] is the entry */
};

/* Sorts the n ids already in m->ents; 0 and duplicates are -EINVAL. */
static int id_map__seal(struct id_map *m)
{
	size_t i;

	if (m->n)
		qsort(m->ents, m->n, sizeof(*m->ents), id_ent__cmp);
	m->dense = true;
	for (i = 0; i < m->n; i++) {
		if (!m->ents[i].id || (i && m->ents[i].id == m->ents[i - 1].id))
			return -EINVAL;
		if (m->ents[i].id != i + 1)
			m->dense = false;
	}
	return 0;
}

/* The position of id, or -1 if absent. */
static ssize_t id_map__find(const struct id_map *m, uint64_t id)
{
	struct id_ent key = {.id = id}, *e;

	if (!id)
		return -1;
	if (m->dense)
		return id <= m->n ? (ssize_t)m->ents[id - 1].idx : -1;
	e = bsearch(&key, m->ents, m->n, sizeof(*m->ents), id_ent__cmp);
	return e ? (ssize_t)e->idx : -1;
}

struct pprof_in {
	const Perftools__Profiles__Profile *m;
	struct id_map maps, funcs, locs;
};

static bool str_ok(const Perftools__Profiles__Profile *m, int64_t i)
{
	return i >= 0 && (uint64_t)i < m->n_string_table;
}

static const char *str_at(const Perftools__Profiles__Profile *m, int64_t i)
{
	return m->string_table[i];
}

static bool value_type_ok(const Perftools__Profiles__Profile *m,
			  const Perftools__Profiles__ValueType *vt)
{
	return vt && str_ok(m, vt->type) && str_ok(m, vt->unit);
}

/* Checks one message of a table (its string references) and gives its id;
 * false when it is malformed. */
typedef bool (*msg_check_fn)(const Perftools__Profiles__Profile *m, const void *msg, uint64_t *id);

static bool mapping_check(const Perftools__Profiles__Profile *m, const void *msg, uint64_t *id)
{
	const Perftools__Profiles__Mapping *mm = msg;

	if (!mm || !str_ok(m, mm->filename) || !str_ok(m, mm->build_id))
		return false;
	*id = mm->id;
	return true;
}

static bool function_check(const Perftools__Profiles__Profile *m, const void *msg, uint64_t *id)
{
	const Perftools__Profiles__Function *fm = msg;

	if (!fm || !str_ok(m, fm->name) || !str_ok(m, fm->system_name) || !str_ok(m, fm->filename))
		return false;
	*id = fm->id;
	return true;
}

/* A location's references to mappings and functions are checked once every
 * id map is built. */
static bool location_check(const Perftools__Profiles__Profile *m, const void *msg, uint64_t *id)
{
	const Perftools__Profiles__Location *lm = msg;

	if (!lm)
		return false;
	*id = lm->id;
	return true;
}

/* Fills im with the ids of the n messages of one table, each checked by
 * check: 0, -EINVAL (a bad message, an id 0 or twice) or -ENOMEM. */
static int id_map__build(struct id_map *im, const Perftools__Profiles__Profile *m,
			 const void *const *msgs, size_t n, msg_check_fn check)
{
	uint64_t id;

	im->n = n;
	if (!ALLOC_N(im->ents, n))
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		if (!check(m, msgs[i], &id))
			return -EINVAL;
		im->ents[i] = (struct id_ent){id, i};
	}
	return id_map__seal(im);
}

/* Checks every reference in the message, filling the id maps. */
static int pprof_in__validate(struct pprof_in *in)
{
	const Perftools__Profiles__Profile *m = in->m;
	size_t i, j;
	int err;

	if (!m->n_string_table || !m->string_table)
		return -EINVAL;
	for (i = 0; i < m->n_string_table; i++)
		if (!m->string_table[i])
			return -EINVAL;
	if (m->string_table[0][0])
		return -EINVAL;

	if (!m->n_sample_type)
		return -EINVAL;
	for (i = 0; i < m->n_sample_type; i++)
		if (!value_type_ok(m, m->sample_type[i]))
			return -EINVAL;
	if (m->period_type && !value_type_ok(m, m->period_type))
		return -EINVAL;
	for (i = 0; i < m->n_comment; i++)
		if (!str_ok(m, m->comment[i]))
			return -EINVAL;
	if (!str_ok(m, m->drop_frames) || !str_ok(m, m->keep_frames) ||
	    !str_ok(m, m->default_sample_type))
		return -EINVAL;

	err = id_map__build(&in->maps, m, (const void *const *)m->mapping, m->n_mapping,
			    mapping_check);
	if (!err)
		err = id_map__build(&in->funcs, m, (const void *const *)m->function, m->n_function,
				    function_check);
	if (!err)
		err = id_map__build(&in->locs, m, (const void *const *)m->location, m->n_location,
				    location_check);
	if (err)
		return err;
	for (i = 0; i < m->n_location; i++) {
		const Perftools__Profiles__Location *lm = m->location[i];

		if (lm->mapping_id && id_map__find(&in->maps, lm->mapping_id) < 0)
			return -EINVAL;
		for (j = 0; j < lm->n_line; j++) {
			const Perftools__Profiles__Line *line = lm->line[j];

			if (!line)
				return -EINVAL;
			if (line->function_id && id_map__find(&in->funcs, line->function_id) < 0)
				return -EINVAL;
		}
	}

	for (i = 0; i < m->n_sample; i++) {
		const Perftools__Profiles__Sample *sm = m->sample[i];

		if (!sm || sm->n_value != m->n_sample_type)
			return -EINVAL;
		for (j = 0; j < sm->n_location_id; j++)
			if (id_map__find(&in->locs, sm->location_id[j]) < 0)
				return -EINVAL;
		for (j = 0; j < sm->n_label; j++) {
			const Perftools__Profiles__Label *l = sm->label[j];

			if (!l || !str_ok(m, l->key) || !str_ok(m, l->str) ||
			    !str_ok(m, l->num_unit))
				return -EINVAL;
		}
	}
	return 0;
}

/* A line number of the file, 0 when it has none or one out of range. */
static uint32_t clamp_line(int64_t line)
{
	return line > 0 && line <= UINT32_MAX ? (uint32_t)line : 0;
}

static bool is_kernel(const char *module, uint64_t addr)
{
	/* Linux keeps the kernel in the upper half on every 64-bit arch. */
	return (addr & KERNEL_HALF) || (module && !strncmp(module, "[kernel", 7));
}

/* Appends the frames of location lm (one per line, innermost first) to
 * frames[*n..PROF_MAX_FRAMES), and when ids is not NULL their ids
 * (li << 32 | line) to ids[*n..). */
static void location_frames(const struct pprof_in *in, const Perftools__Profiles__Location *lm,
			    struct prof_frame *frames, size_t *n, uint64_t *ids, uint64_t li)
{
	const Perftools__Profiles__Profile *m = in->m;
	const Perftools__Profiles__Mapping *mm = NULL;
	struct prof_frame base;
	size_t j;

	memset(&base, 0, sizeof(base));
	base.addr = lm->address;
	base.offset = lm->address;
	if (lm->mapping_id) {
		mm = m->mapping[id_map__find(&in->maps, lm->mapping_id)];
		if (*str_at(m, mm->filename))
			base.module = str_at(m, mm->filename);
		if (*str_at(m, mm->build_id))
			base.build_id = str_at(m, mm->build_id);
		base.map_start = mm->memory_start;
		base.map_limit = mm->memory_limit;
		base.map_pgoff = mm->file_offset;
		if (lm->address >= mm->memory_start)
			base.offset = lm->address - mm->memory_start + mm->file_offset;
	}

	if (!lm->n_line && *n < PROF_MAX_FRAMES) {
		if (ids)
			ids[*n] = li << 32;
		frames[*n] = base;
		frames[*n].kernel = is_kernel(base.module, base.addr);
		(*n)++;
	}
	for (j = 0; j < lm->n_line && *n < PROF_MAX_FRAMES; j++) {
		const Perftools__Profiles__Function *fm = NULL;
		struct prof_frame *fr;

		if (ids)
			ids[*n] = li << 32 | j;
		fr = &frames[(*n)++];

		*fr = base;
		if (lm->line[j]->function_id)
			fm = m->function[id_map__find(&in->funcs, lm->line[j]->function_id)];
		if (fm) {
			/* A line number says filename is the source file, as
			 * does a mapping of another name; otherwise it may be
			 * the module (older files). */
			bool source =
				lm->line[j]->line > 0 || fm->start_line > 0 ||
				(mm && strcmp(str_at(m, fm->filename), str_at(m, mm->filename)));

			fr->func = str_at(m, fm->name);
			if (source && *str_at(m, fm->filename)) {
				fr->file = str_at(m, fm->filename);
				fr->line = clamp_line(lm->line[j]->line);
				fr->start_line = clamp_line(fm->start_line);
			} else if (!mm) {
				fr->module = str_at(m, fm->filename);
			}
		}
		if (fr->module && !*fr->module)
			fr->module = NULL;
		fr->kernel = is_kernel(fr->module, fr->addr);
	}
}

static int pprof_in__build(const struct pprof_in *in, struct profile **out)
{
	const Perftools__Profiles__Profile *m = in->m;
	const Perftools__Profiles__ValueType *vt = m->period_type;
	struct prof_frame *frames = NULL;
	struct profile *p = NULL;
	size_t i, j;
	int err = 0;

	/* Our own files say what a sample is in period_type; others may only
	 * have sample types, of which the last is the usual default. */
	if (!vt || (!vt->type && !vt->unit))
		vt = m->sample_type[m->n_sample_type - 1];
	p = profile__new(str_at(m, vt->type), str_at(m, vt->unit), m->period);
	frames = calloc(PROF_MAX_FRAMES, sizeof(*frames));
	if (!frames) {
		err = -ENOMEM;
		goto cleanup;
	}
	p->time_ns = m->time_nanos;
	p->duration_ns = m->duration_nanos;

	for (i = 0; i < m->n_sample; i++) {
		const Perftools__Profiles__Sample *sm = m->sample[i];
		struct prof_who who = {.comm = ""};
		size_t n = 0;

		for (j = 0; j < sm->n_label; j++) {
			const Perftools__Profiles__Label *l = sm->label[j];
			const char *key = str_at(m, l->key);
			bool num_ok = l->num >= 0 && l->num <= UINT32_MAX;

			if (!strcmp(key, "pid") && num_ok)
				who.pid = l->num;
			else if (!strcmp(key, "tid") && num_ok)
				who.tid = l->num;
			else if (!strcmp(key, "comm") && l->str)
				who.comm = str_at(m, l->str);
			else if (!strcmp(key, "thread") && l->str)
				who.thread = str_at(m, l->str);
			else if (!strcmp(key, "service_name") && l->str)
				who.service = str_at(m, l->str);
		}
		/* Deeper stacks keep their leaf-most frames. */
		for (j = 0; j < sm->n_location_id && n < PROF_MAX_FRAMES; j++) {
			ssize_t li = id_map__find(&in->locs, sm->location_id[j]);

			location_frames(in, m->location[li], frames, &n, NULL, 0);
		}
		err = profile__add_ex(p, &who, frames, n, sm->value[0]);
		if (err) {
			/* A negative count or a total past INT64_MAX. */
			err = -EINVAL;
			goto cleanup;
		}
	}
	*out = p;
	p = NULL;

cleanup:
	free(frames);
	profile__free(p);
	return err;
}

/* ---- the cost of unpacking, before unpacking ----
 *
 * protobuf-c unpacks a message in two passes: it first records every field
 * it meets (32 bytes each, in slabs doubling in size past the first 16),
 * then allocates each submessage, each repeated array and each string. A
 * message of 30 million empty submessages (60 MB of "\x12\x00") so takes
 * gigabytes for nothing kept. This scan walks the wire format once,
 * without allocating, and adds up what the unpacking would ask of the
 * allocator (as the budget of profile__visit_pprof counts it); a message
 * over its budget is refused before a byte of it is unpacked. The sizes
 * are those of protobuf-c 1.4's structs on 64-bit Linux. */

enum wire_msg { WM_PROFILE, WM_SAMPLE, WM_LOCATION, WM_FLAT };

#define WIRE_FIELD_COST 48   /* a field's record, past 16: slabs up to twice it */
#define WIRE_MSG_COST 80     /* a submessage: its struct (40-88), its pointer */
#define WIRE_NUM_COST 8	     /* a number of a repeated field */
#define WIRE_STR_COST 9	     /* a string, besides its bytes: its NUL, its pointer */
#define WIRE_UNKNOWN_COST 24 /* a field not in the schema, kept with its bytes */

/* What field f of a message of kind m is: a submessage (and of which
 * kind), a string, repeated numbers (packed when length-delimited), a
 * number, or a field protobuf-c doesn't know (kept whole). */
static int wire_kind(enum wire_msg m, uint64_t f, enum wire_msg *sub)
{
	static const uint8_t profile[] = "?mmmmmsnnnnmnpn", sample[] = "?ppm",
			     location[] = "?nnnmn", flat[] = "?nnnnnnnnnn";
	const uint8_t *k = m == WM_PROFILE    ? profile
			   : m == WM_SAMPLE   ? sample
			   : m == WM_LOCATION ? location
					      : flat;
	size_t nk = m == WM_PROFILE    ? sizeof(profile)
		    : m == WM_SAMPLE   ? sizeof(sample)
		    : m == WM_LOCATION ? sizeof(location)
				       : sizeof(flat);

	*sub = m == WM_PROFILE && f == 2   ? WM_SAMPLE
	       : m == WM_PROFILE && f == 4 ? WM_LOCATION
					   : WM_FLAT;
	return f >= 1 && f < nk - 1 ? k[f] : 'u';
}

static bool wire_varint(const uint8_t **p, const uint8_t *end, uint64_t *v)
{
	uint64_t r = 0;
	unsigned int shift;

	for (shift = 0; *p < end && shift < 64; shift += 7) {
		uint8_t b = *(*p)++;

		r |= (uint64_t)(b & 0x7f) << shift;
		if (!(b & 0x80)) {
			*v = r;
			return true;
		}
	}
	return false;
}

/* Adds to *cost what unpacking [p, end), a message of kind m, asks for;
 * -EINVAL when it is malformed, -EFBIG as soon as *cost passes max. */
static int wire_cost(const uint8_t *p, const uint8_t *end, enum wire_msg m, size_t max,
		     size_t *cost)
{
	size_t nfields = 0;

	while (p < end) {
		const uint8_t *q;
		uint64_t key, len;
		enum wire_msg sub;
		size_t c = ++nfields > 16 ? WIRE_FIELD_COST : 0;
		int kind, err;

		if (!wire_varint(&p, end, &key))
			return -EINVAL;
		kind = wire_kind(m, key >> 3, &sub);
		switch (key & 7) {
		case 0:
			if (!wire_varint(&p, end, &len))
				return -EINVAL;
			break;
		case 1:
		case 5:
			len = (key & 7) == 1 ? 8 : 4;
			if ((size_t)(end - p) < len)
				return -EINVAL;
			p += len;
			break;
		case 2:
			if (!wire_varint(&p, end, &len) || len > (uint64_t)(end - p))
				return -EINVAL;
			if (kind == 'm') {
				c += WIRE_MSG_COST;
				err = wire_cost(p, p + len, sub, max, cost);
				if (err)
					return err;
			} else if (kind == 'p') {
				/* Packed numbers: one per byte without its top
				 * bit. */
				for (q = p; q < p + len; q++)
					c += *q & 0x80 ? 0 : WIRE_NUM_COST;
			} else if (kind == 's') {
				c += WIRE_STR_COST + len;
			} else {
				c += WIRE_UNKNOWN_COST + len;
			}
			p += len;
			break;
		default:
			return -EINVAL; /* groups: not in pprof, refused by protobuf-c */
		}
		if (kind == 'p' && (key & 7) != 2)
			c += WIRE_NUM_COST; /* a repeated number sent unpacked */
		else if (kind == 'u' && (key & 7) != 2)
			c += WIRE_UNKNOWN_COST + 8;
		if (c > max - *cost)
			return -EFBIG;
		*cost += c;
	}
	return 0;
}

/* The most a message of n bytes may take unpacked: 16 times its size plus
 * 1 MiB (a real profile takes about 9, one of tiny submessages 40 and
 * more), and at most max_heap when that is not 0. */
static size_t unpack_budget(size_t n, size_t max_heap)
{
	size_t b = n > (SIZE_MAX - (1u << 20)) / 16 ? SIZE_MAX : 16 * n + (1u << 20);

	return max_heap && max_heap < b ? max_heap : b;
}

/* 0 when the message raw[0..n) unpacks within budget, -EFBIG when it
 * would not, -EINVAL when it is malformed. */
static int pprof_check_cost(const uint8_t *raw, size_t n, size_t budget)
{
	size_t cost = WIRE_MSG_COST;

	return wire_cost(raw, raw + n, WM_PROFILE, budget, &cost);
}

/* The protobuf bytes of a pprof file: buf itself, or its gzip stream
 * inflated into *inflated (free() it) -- at most max_bytes either way.
 * 0, -EINVAL, -EFBIG or what gunzip() says. */
static int pprof_bytes(const void *buf, size_t len, size_t max_bytes, const uint8_t **raw,
		       uint8_t **inflated, size_t *n)
{
	const uint8_t *b = buf;

	*raw = b;
	*n = len;
	if (!buf && len)
		return -EINVAL;
	if (len >= 2 && b[0] == 0x1f && b[1] == 0x8b) {
		int err = gunzip(b, len, max_bytes, inflated, n);

		if (!err)
			*raw = *inflated;
		return err;
	}
	return len > max_bytes ? -EFBIG : 0;
}

struct profile *profile__read_pprof(const void *buf, size_t len, size_t max_bytes)
{
	const uint8_t *raw = buf;
	uint8_t *inflated = NULL;
	struct pprof_in in;
	struct profile *p = NULL;
	size_t n = len;
	int err = 0;

	memset(&in, 0, sizeof(in));
	err = pprof_bytes(buf, len, max_bytes, &raw, &inflated, &n);
	if (!err)
		err = pprof_check_cost(raw, n, unpack_budget(n, 0));
	if (err)
		goto cleanup;

	in.m = perftools__profiles__profile__unpack(NULL, n, raw);
	if (!in.m) {
		err = -EINVAL;
		goto cleanup;
	}
	err = pprof_in__validate(&in);
	if (!err)
		err = pprof_in__build(&in, &p);

cleanup:
	if (in.m)
		perftools__profiles__profile__free_unpacked((Perftools__Profiles__Profile *)in.m,
							    NULL);
	free(in.maps.ents);
	free(in.funcs.ents);
	free(in.locs.ents);
	free(inflated);
	if (err) {
		errno = -err;
		return NULL;
	}
	return p;
}

/* The samples of a message one at a time, with everything the profile model
 * leaves out: all values, all labels. Checks and limits are those of
 * profile__read_pprof(). */
static int pprof_in__visit(const struct pprof_in *in, const struct pprof_visitor *v)
{
	const Perftools__Profiles__Profile *m = in->m;
	const Perftools__Profiles__ValueType *pt = m->period_type;
	struct pprof_label *labels = NULL;
	struct prof_frame *frames = NULL;
	uint64_t *ids = NULL;
	struct pprof_header h;
	const char **types = NULL, **units = NULL;
	size_t i, j, maxlabels = 0;
	int err = 0;

	if (!ALLOC_N(types, m->n_sample_type) || !ALLOC_N(units, m->n_sample_type)) {
		err = -ENOMEM;
		goto cleanup;
	}
	for (i = 0; i < m->n_sample_type; i++) {
		types[i] = str_at(m, m->sample_type[i]->type);
		units[i] = str_at(m, m->sample_type[i]->unit);
	}
	memset(&h, 0, sizeof(h));
	h.types = types;
	h.units = units;
	h.ntypes = m->n_sample_type;
	h.period_type = pt ? str_at(m, pt->type) : "";
	h.period_unit = pt ? str_at(m, pt->unit) : "";
	h.period = m->period;
	h.time_ns = m->time_nanos;
	h.duration_ns = m->duration_nanos;
	h.nsamples = m->n_sample;
	if (v->header) {
		err = v->header(v->ctx, &h);
		if (err)
			goto cleanup;
	}

	for (i = 0; i < m->n_sample; i++)
		if (m->sample[i]->n_label > maxlabels)
			maxlabels = m->sample[i]->n_label;
	frames = calloc(PROF_MAX_FRAMES, sizeof(*frames));
	ids = calloc(PROF_MAX_FRAMES, sizeof(*ids));
	if (!frames || !ids || !ALLOC_N(labels, maxlabels)) {
		err = -ENOMEM;
		goto cleanup;
	}
	for (i = 0; i < m->n_sample && v->sample; i++) {
		const Perftools__Profiles__Sample *sm = m->sample[i];
		struct pprof_sample s;
		size_t n = 0;

		for (j = 0; j < sm->n_label; j++) {
			const Perftools__Profiles__Label *l = sm->label[j];

			labels[j].key = str_at(m, l->key);
			labels[j].str = l->str ? str_at(m, l->str) : NULL;
			labels[j].num = l->num;
			labels[j].num_unit = str_at(m, l->num_unit);
		}
		for (j = 0; j < sm->n_location_id && n < PROF_MAX_FRAMES; j++) {
			ssize_t li = id_map__find(&in->locs, sm->location_id[j]);

			location_frames(in, m->location[li], frames, &n, ids, (uint64_t)li);
		}
		s.frames = frames;
		s.frame_ids = ids;
		s.nframes = n;
		s.values = sm->value;
		s.nvalues = sm->n_value;
		s.labels = labels;
		s.nlabels = sm->n_label;
		err = v->sample(v->ctx, &s);
		if (err)
			goto cleanup;
	}

cleanup:
	free(types);
	free(units);
	free(labels);
	free(frames);
	free(ids);
	return err;
}

/* An allocator for protobuf-c that counts what the unpacked message takes
 * and refuses past a budget: a message of many tiny submessages unpacks to
 * about 70 times its size, well past what its size suggests. */
struct budget {
	ProtobufCAllocator base;
	size_t used, max;
	bool exceeded;
};

#define BUDGET_HDR 16 /* keeps the alignment malloc gives */

static void *budget__alloc(void *data, size_t size)
{
	struct budget *b = data;
	unsigned char *p;

	if (size > b->max - b->used || size > SIZE_MAX - BUDGET_HDR) {
		b->exceeded = true;
		return NULL;
	}
	p = malloc(size + BUDGET_HDR);
	if (!p)
		return NULL;
	memcpy(p, &size, sizeof(size));
	b->used += size;
	return p + BUDGET_HDR;
}

static void budget__free(void *data, void *ptr)
{
	struct budget *b = data;
	unsigned char *p = ptr;
	size_t size;

	if (!p)
		return;
	p -= BUDGET_HDR;
	memcpy(&size, p, sizeof(size));
	b->used -= size;
	free(p);
}

int profile__visit_pprof(const void *buf, size_t len, size_t max_bytes,
			 const struct pprof_visitor *v)
{
	const uint8_t *raw = buf;
	uint8_t *inflated = NULL;
	struct budget bud = {{budget__alloc, budget__free, NULL}, 0, 0, false};
	struct pprof_in in;
	size_t n = len;
	int err = 0;

	memset(&in, 0, sizeof(in));
	bud.base.allocator_data = &bud;
	err = pprof_bytes(buf, len, max_bytes, &raw, &inflated, &n);
	if (err)
		goto cleanup;
	bud.max = unpack_budget(n, v->max_heap);
	err = pprof_check_cost(raw, n, bud.max);
	if (err)
		goto cleanup;
	in.m = perftools__profiles__profile__unpack(&bud.base, n, raw);
	if (!in.m) {
		err = bud.exceeded ? -EFBIG : -EINVAL;
		goto cleanup;
	}
	/* The unpacked message holds what it needs: the inflated bytes can go
	 * before the samples are handed over. */
	free(inflated);
	inflated = NULL;
	err = pprof_in__validate(&in);
	if (!err)
		err = pprof_in__visit(&in, v);

cleanup:
	if (in.m)
		perftools__profiles__profile__free_unpacked((Perftools__Profiles__Profile *)in.m,
							    &bud.base);
	free(in.maps.ents);
	free(in.funcs.ents);
	free(in.locs.ents);
	free(inflated);
	return err;
}
