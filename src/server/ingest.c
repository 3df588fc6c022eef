/* ingest.c: request bodies into series (ingest.h). The pprof reader is the
 * profile module's (profile__visit_pprof, with all its checks and its
 * decompression limit); this file decides which series each sample belongs
 * to: its labels, sorted into a key, looked up in an open-addressing table,
 * so that a window of thousands of samples over a few hundred processes
 * costs one small sort and one probe per sample. Folded text goes through
 * profile__read_folded behind a stream that prefixes each line with the
 * empty comm field that Pyroscope's format lacks. */
#include "server/ingest.h"

#include <errno.h>
#include <jansson.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/hash.h"
#include "common/idmap.h"
#include "common/sbuf.h"
#include "common/utf8.h"
#include "common/xalloc.h"
#include "profile/profile.h"

/* A series key's hash, for the batch's table. */
static uint32_t key_hash(const char *s, size_t n)
{
	return (uint32_t)hash_bytes(s, n, 0);
}

static void memo__free(struct ingest_series *s)
{
	idmap__free(&s->memo);
}

static void series__free(struct ingest_series *s)
{
	lset__free(&s->labels);
	profile__free(s->prof);
	free(s->key);
	memo__free(s);
}

/* The location in s->prof of the frame with this id in the pprof being
 * split, if it was added before. */
static bool memo__find(const struct ingest_series *s, uint64_t id, uint32_t *loc)
{
	uint32_t v = idmap__get(&s->memo, id);

	if (v)
		*loc = v - 1;
	return v;
}

static int memo__put(struct ingest_series *s, uint64_t id, uint32_t loc)
{
	if (idmap__get(&s->memo, id))
		return 0;
	return idmap__put(&s->memo, id, loc + 1);
}

void ingest_batch__free(struct ingest_batch *b)
{
	for (size_t i = 0; i < b->n; i++)
		series__free(&b->series[i]);
	free(b->series);
	idmap__free(&b->index);
	free(b->windows);
	memset(b, 0, sizeof(*b));
}

/* The series with key, or NULL. */
static struct ingest_series *batch__find(struct ingest_batch *b, const char *key, size_t keylen,
					 uint32_t h)
{
	size_t pos = IDMAP_START;
	uint32_t id;

	while ((id = idmap__next(&b->index, h, &pos))) {
		struct ingest_series *s = &b->series[id - 1];

		if (s->keylen == keylen && !memcmp(s->key, key, keylen))
			return s;
	}
	return NULL;
}

/* Adds a series with labels ls (taken) under key; NULL with *err set. */
static struct ingest_series *batch__add(struct ingest_batch *b, const char *key, size_t keylen,
					uint32_t h, struct lset *ls, const char *type,
					const char *unit, int64_t period, int *err)
{
	struct ingest_series *s;

	if (array_grow((void **)&b->series, &b->cap, b->n + 1, sizeof(*b->series)))
		goto nomem;
	s = &b->series[b->n];
	memset(s, 0, sizeof(*s));
	s->key = malloc(keylen ? keylen : 1);
	if (!s->key)
		goto nomem;
	memcpy(s->key, key, keylen);
	s->keylen = keylen;
	s->hash = h;
	s->prof = profile__new(type, unit, period);
	if (!s->prof) {
		free(s->key);
		goto nomem;
	}
	if (idmap__put(&b->index, h, (uint32_t)b->n + 1)) {
		free(s->key);
		profile__free(s->prof);
		goto nomem;
	}
	s->labels = *ls;
	memset(ls, 0, sizeof(*ls));
	b->n++;
	return s;
nomem:
	*err = -ENOMEM;
	return NULL;
}

/* Works out the window from the options and what the profile says. */
static int window_of(const struct ingest_opts *o, int64_t time_ns, int64_t duration_ns,
		     int64_t *start, int64_t *end, char *err, size_t errlen)
{
	int64_t dur = INGEST_DEFAULT_WINDOW_MS, s, e;

	if (duration_ns > 0)
		dur = duration_ns / NS_PER_MS > 0 ? duration_ns / NS_PER_MS : 1;
	if (o->start_ms)
		s = o->start_ms;
	else if (time_ns > 0)
		s = time_ns / NS_PER_MS;
	else
		s = (o->end_ms ? o->end_ms : o->now_ms) - dur;
	if (o->end_ms)
		e = o->end_ms;
	else if (__builtin_add_overflow(s, dur, &e))
		e = INT64_MIN;
	if (s < 0 || e <= s) {
		snprintf(err, errlen,
			 "the window [%" PRId64 ", %" PRId64 ") ms is empty or before 1970: "
			 "from must be before until",
			 s, e);
		return -EINVAL;
	}
	*start = s;
	*end = e;
	return 0;
}

struct split_pair {
	const char *k, *v;
	size_t pos;
};

struct split {
	struct ingest_batch *b;
	const struct ingest_opts *o;
	char *err;
	size_t errlen;
	size_t vidx;
	int64_t divisor; /* cpu/nanoseconds to samples; 0: none */
	char *type, *unit;
	int64_t period;
	struct split_pair *pairs;
	size_t cap;
	struct sbuf key;
	uint32_t locs[PROF_MAX_FRAMES]; /* a sample's locations in its series */
	/* The memo pays when stacks recur in their series (real profiles:
	 * outer frames); where they don't, after MEMO_TRIAL samples it is
	 * dropped for the rest of the read. */
	uint64_t memo_samples, memo_hits;
	bool memo_off;
};

#define MEMO_TRIAL 256

static int split_header(void *ctx, const struct pprof_header *h)
{
	struct split *sp = ctx;
	size_t vidx = h->ntypes - 1;
	const char *ptype, *punit, *type;

	if (sp->o->sample_type) {
		for (vidx = 0; vidx < h->ntypes && strcmp(h->types[vidx], sp->o->sample_type);
		     vidx++)
			;
		if (vidx == h->ntypes) {
			snprintf(sp->err, sp->errlen, "the profile has no sample type '%.64s'",
				 sp->o->sample_type);
			return -ENOENT;
		}
	}
	ptype = h->types[vidx];
	punit = h->units[vidx];
	type = sp->o->type && *sp->o->type ? sp->o->type : ptype;
	sp->vidx = vidx;
	if (sp->o->sample_unit) {
		punit = sp->o->sample_unit;
	} else if (!strcmp(ptype, "cpu") && !strcmp(punit, "nanoseconds") && h->period > 0 &&
		   (!*h->period_unit || !strcmp(h->period_unit, "nanoseconds"))) {
		sp->divisor = h->period;
		punit = "samples";
	}
	if (strlen(punit) > 64 || !utf8_valid(punit, strlen(punit))) {
		snprintf(sp->err, sp->errlen,
			 "the profile's sample unit is not a short UTF-8 name");
		return -EINVAL;
	}
	sp->type = strdup(*type ? type : "unknown");
	sp->unit = strdup(*punit ? punit : "count");
	sp->period = h->period > 0 ? h->period : 0;
	if (!sp->type || !sp->unit)
		return -ENOMEM;
	return window_of(sp->o, h->time_ns, h->duration_ns, &sp->b->start_ms, &sp->b->end_ms,
			 sp->err, sp->errlen);
}

static int pair_cmp(const void *a, const void *b)
{
	const struct split_pair *x = a, *y = b;
	int c = strcmp(x->k, y->k);

	if (c)
		return c;
	return x->pos < y->pos ? -1 : x->pos > y->pos;
}

/* The labels of a new series: o's, then the sample's (pairs), then type. */
static int split_labels(struct split *sp, size_t n, struct lset *ls)
{
	int err = lset__copy(ls, sp->o->labels ? sp->o->labels : &(struct lset){0});

	for (size_t i = 0; i < n && !err; i++)
		err = lset__set(ls, sp->pairs[i].k, sp->pairs[i].v);
	if (!err)
		err = lset__set(ls, "type", sp->type);
	if (err)
		return err;
	return lset__check(ls, sp->err, sp->errlen);
}

/* The sample's labels as pairs in sp->pairs, sorted by name: string
 * labels but tid and type, its first numeric pid (as text in pidbuf), and
 * service_name from comm when nothing names it. The count, or -ENOMEM. */
static long sample_pairs(struct split *sp, const struct pprof_sample *s, char *pidbuf,
			 size_t pidlen)
{
	const struct lset *base = sp->o->labels;
	bool have_service = base && lset__get(base, "service_name"), have_pid = false;
	const char *comm = NULL;
	size_t n = 0;

	if (array_grow((void **)&sp->pairs, &sp->cap, s->nlabels + 2, sizeof(*sp->pairs)))
		return -ENOMEM;
	for (size_t i = 0; i < s->nlabels; i++) {
		const struct pprof_label *l = &s->labels[i];

		if (!strcmp(l->key, "pid") && !l->str) {
			/* One pid per sample. */
			if (have_pid)
				continue;
			have_pid = true;
			snprintf(pidbuf, pidlen, "%" PRId64, l->num);
			sp->pairs[n] = (struct split_pair){"pid", pidbuf, n};
			n++;
			continue;
		}
		/* tid has no bound on its values; type is the series'. */
		if (!l->str || !*l->str || !strcmp(l->key, "tid") || !strcmp(l->key, "type"))
			continue;
		if (!strcmp(l->key, "comm") && !comm)
			comm = l->str;
		if (!strcmp(l->key, "service_name"))
			have_service = true;
		sp->pairs[n] = (struct split_pair){l->key, l->str, n};
		n++;
	}
	if (!have_service && comm) {
		sp->pairs[n] = (struct split_pair){"service_name", comm, n};
		n++;
	}
	qsort(sp->pairs, n, sizeof(*sp->pairs), pair_cmp);
	return (long)n;
}

/* The series key of the n sorted pairs into sp->key: the labels in name
 * order, first of a name wins, those the base labels already say left out
 * -- so two keys differ exactly when the series' labels do -- then the
 * type. Drops the pairs' duplicate names; the count left, or -ENOMEM. */
static long sample_key(struct split *sp, size_t n)
{
	const struct lset *base = sp->o->labels;
	size_t i, m = 0;

	sp->key.len = 0;
	for (i = 0; i < n; i++) {
		const char *bv;

		if (i && !strcmp(sp->pairs[i].k, sp->pairs[i - 1].k))
			continue;
		bv = base ? lset__get(base, sp->pairs[i].k) : NULL;
		if (bv && !strcmp(bv, sp->pairs[i].v))
			continue;
		if (sbuf__add(&sp->key, sp->pairs[i].k, strlen(sp->pairs[i].k) + 1) ||
		    sbuf__add(&sp->key, sp->pairs[i].v, strlen(sp->pairs[i].v) + 1))
			return -ENOMEM;
	}
	/* Series of other sample types of the same profile go apart. */
	if (sbuf__add(&sp->key, sp->type, strlen(sp->type) + 1))
		return -ENOMEM;
	for (i = 0; i < n; i++)
		if (!i || strcmp(sp->pairs[i].k, sp->pairs[i - 1].k))
			sp->pairs[m++] = sp->pairs[i];
	return (long)m;
}

/* The series of sp->key, added with the n pairs as labels if new. */
static int sample_series(struct split *sp, size_t n, struct ingest_series **out)
{
	struct ingest_batch *b = sp->b;
	const char *key = sp->key.buf ? sp->key.buf : "";
	struct lset ls = {0};
	uint32_t h;
	int err;

	h = key_hash(key, sp->key.len);
	*out = batch__find(b, key, sp->key.len, h);
	if (*out)
		return 0;
	if (b->n >= sp->o->max_series) {
		snprintf(sp->err, sp->errlen,
			 "more than %zu series (distinct label sets) in one request: "
			 "send fewer processes per request",
			 sp->o->max_series);
		return -E2BIG;
	}
	err = split_labels(sp, n, &ls);
	if (!err)
		*out = batch__add(b, key, sp->key.len, h, &ls, sp->type, sp->unit, sp->period,
				  &err);
	lset__free(&ls);
	return err;
}

/* Adds the sample's stack with value v to its series. A stack whose
 * frames the series has all seen (most: a process's stacks share their
 * outer frames) costs a probe per frame instead of interning its names
 * and hashing its locations. */
static int sample_add_stack(struct split *sp, struct ingest_series *series,
			    const struct pprof_sample *s, int64_t v)
{
	bool memo = s->frame_ids && !sp->memo_off;
	size_t i;
	int err;

	for (i = 0; memo && i < s->nframes; i++)
		if (!memo__find(series, s->frame_ids[i], &sp->locs[i]))
			break;
	if (memo && i == s->nframes) {
		err = profile__add_locs(series->prof, 0, 0, NULL, sp->locs, s->nframes, v);
		sp->memo_hits++;
	} else {
		err = profile__add_get_locs(series->prof, 0, 0, NULL, s->frames, s->nframes, v,
					    sp->locs);
		for (i = 0; !err && memo && i < s->nframes; i++)
			err = memo__put(series, s->frame_ids[i], sp->locs[i]);
		if (err == -ENOMEM)
			return err;
	}
	if (memo && ++sp->memo_samples == MEMO_TRIAL && sp->memo_hits * 4 < MEMO_TRIAL)
		sp->memo_off = true;
	if (err) {
		snprintf(sp->err, sp->errlen, "sample values add up past 2^63");
		return -EINVAL;
	}
	return 0;
}

static int split_sample(void *ctx, const struct pprof_sample *s)
{
	struct split *sp = ctx;
	struct ingest_series *series;
	int64_t v = s->values[sp->vidx];
	char pidbuf[24];
	long n;
	int err;

	if (v < 0) {
		snprintf(sp->err, sp->errlen, "a sample has the negative value %" PRId64, v);
		return -EINVAL;
	}
	if (sp->divisor) {
		int64_t q = v / sp->divisor, r = v % sp->divisor;

		v = q + (r >= sp->divisor - r);
	}
	if (!v)
		return 0;
	n = sample_pairs(sp, s, pidbuf, sizeof(pidbuf));
	if (n >= 0)
		n = sample_key(sp, (size_t)n);
	if (n < 0)
		return (int)n;
	err = sample_series(sp, (size_t)n, &series);
	if (!err)
		err = sample_add_stack(sp, series, s, v);
	if (!err)
		sp->b->samples++;
	return err;
}

int ingest__pprof(struct ingest_batch *b, const void *body, size_t len, const struct ingest_opts *o,
		  char *err, size_t errlen)
{
	struct split *spp = calloc(1, sizeof(*spp));
	struct pprof_visitor v = {split_header, split_sample, spp, o->max_heap};
	int rc;

	if (!spp)
		return -ENOMEM;
	*spp = (struct split){.b = b, .o = o, .err = err, .errlen = errlen};
	err[0] = '\0';
	rc = profile__visit_pprof(body, len, o->max_bytes, &v);
	if (rc && !err[0]) {
		if (rc == -EFBIG)
			snprintf(err, errlen,
				 "the profile is larger than %zu bytes decompressed (a gzip bomb?) "
				 "or than its unpacking may take",
				 o->max_bytes);
		else if (rc == -EINVAL)
			snprintf(err, errlen,
				 "the body is not a valid pprof profile (gzip-compressed or raw "
				 "protobuf): truncated or malformed");
		else
			snprintf(err, errlen, "can't read the profile: %s", strerror(-rc));
	}
	free(spp->type);
	free(spp->unit);
	free(spp->pairs);
	sbuf__free(&spp->key);
	/* Frame ids are this read's: a later read of the batch starts afresh. */
	for (size_t i = 0; i < b->n; i++)
		memo__free(&b->series[i]);
	free(spp);
	return rc;
}

/* A short UTF-8 string member of cfg entry e, or NULL; *bad when it is
 * there but not one. */
static const char *stc_string(json_t *e, const char *key, bool *bad)
{
	json_t *v = json_object_get(e, key);
	const char *str;

	if (!v || json_is_null(v))
		return NULL;
	str = json_string_value(v);
	if (!str || !*str || strlen(str) > 64 || !utf8_valid(str, strlen(str))) {
		*bad = true;
		return NULL;
	}
	return str;
}

/* The sample types of a profile, read from its header (the read stops
 * there), so that only the configured types it has cost a full read. */
struct type_probe {
	char names[INGEST_MAX_SAMPLE_TYPES][65];
	size_t n;
};

static int probe_header(void *ctx, const struct pprof_header *h)
{
	struct type_probe *tp = ctx;

	for (size_t i = 0; i < h->ntypes && tp->n < INGEST_MAX_SAMPLE_TYPES; i++)
		if (strlen(h->types[i]) < sizeof(tp->names[0]))
			strcpy(tp->names[tp->n++], h->types[i]);
	return -ECANCELED;
}

static bool probe_has(const struct type_probe *tp, const char *name)
{
	for (size_t i = 0; i < tp->n; i++)
		if (!strcmp(tp->names[i], name))
			return true;
	return false;
}

int ingest__pprof_typed(struct ingest_batch *b, const void *body, size_t len, const char *cfg,
			size_t cfglen, const struct ingest_opts *o, char *err, size_t errlen)
{
	struct type_probe tp = {0};
	struct pprof_visitor pv = {probe_header, NULL, &tp, o->max_heap};
	json_error_t jerr;
	json_t *root = json_loadb(cfg, cfglen, JSON_REJECT_DUPLICATES, &jerr), *e;
	const char *name;
	size_t matched = 0;
	bool probed = false;
	int rc = 0;

	err[0] = '\0';
	if (!root) {
		snprintf(err, errlen, "sample_type_config is not valid JSON: %s (line %d)",
			 jerr.text, jerr.line);
		return -EINVAL;
	}
	if (json_is_object(root) && !json_object_size(root)) {
		/* {}: no configuration, the profile as without one */
		json_decref(root);
		return ingest__pprof(b, body, len, o, err, errlen);
	}
	if (!json_is_object(root) || json_object_size(root) > INGEST_MAX_SAMPLE_TYPES) {
		snprintf(err, errlen,
			 "sample_type_config must be an object of up to %d sample types, each "
			 "{\"units\": ..., \"display-name\": ...}",
			 INGEST_MAX_SAMPLE_TYPES);
		rc = -EINVAL;
		goto out;
	}
	json_object_foreach(root, name, e)
	{
		struct ingest_opts t = *o;
		json_t *agg = json_object_get(e, "aggregation"), *cum;
		bool bad = false;

		if (!json_is_object(e) || !*name || strlen(name) > 64 ||
		    !utf8_valid(name, strlen(name))) {
			snprintf(err, errlen,
				 "sample_type_config: '%.64s' must be a short sample type name "
				 "with an object of settings",
				 name);
			rc = -EINVAL;
			goto out;
		}
		t.sample_type = name;
		t.sample_unit = stc_string(e, "units", &bad);
		t.type = stc_string(e, "display-name", &bad);
		if (!t.type)
			t.type = name;
		cum = json_object_get(e, "cumulative");
		if (bad || (agg && !json_is_null(agg) && !json_is_string(agg)) ||
		    (agg && json_is_string(agg) && strcmp(json_string_value(agg), "sum") &&
		     strcmp(json_string_value(agg), "average")) ||
		    (cum && !json_is_boolean(cum) && !json_is_null(cum))) {
			snprintf(err, errlen,
				 "sample_type_config: the settings of '%.64s' are malformed (units "
				 "and display-name short strings, aggregation sum or average, "
				 "cumulative a boolean)",
				 name);
			rc = -EINVAL;
			goto out;
		}
		if (json_is_true(cum)) {
			snprintf(err, errlen,
				 "sample type '%.64s' is cumulative: send it as deltas (Sonde has "
				 "no "
				 "previous profile to subtract)",
				 name);
			rc = -EINVAL;
			goto out;
		}
		if (!probed) { /* the first configured type: read the header */
			probed = true;
			rc = profile__visit_pprof(body, len, o->max_bytes, &pv);
			if (rc != -ECANCELED) /* a malformed profile: say so */
				rc = ingest__pprof(b, body, len, &t, err, errlen);
			if (rc != -ECANCELED && rc)
				goto out;
			rc = 0;
		}
		if (!probe_has(&tp, name))
			continue;
		rc = ingest__pprof(b, body, len, &t, err, errlen);
		if (rc)
			goto out;
		matched++;
	}
	if (!matched) {
		snprintf(err, errlen,
			 "none of the sample types of sample_type_config is in the profile");
		rc = -EINVAL;
	}
out:
	json_decref(root);
	return rc;
}

/* A stream over folded text that gives each non-blank line a leading ';'
 * (the empty comm field profile__read_folded expects) and, for the lines
 * format, a trailing " 1". Blank lines stay, so line numbers hold. */
struct fold_src {
	const char *buf;
	size_t len, pos;
	bool lines;
	/* The current line: [line, line_end) still to copy, then the tail. */
	size_t line, line_end;
	const char *tail;
	size_t tail_pos, tail_len;
	bool in_line;
};

static ssize_t fold_read(void *cookie, char *out, size_t size)
{
	struct fold_src *s = cookie;
	size_t o = 0;

	while (o < size) {
		if (!s->in_line) {
			const char *nl;
			size_t end, i;
			bool blank = true;

			if (s->pos >= s->len)
				break;
			nl = memchr(s->buf + s->pos, '\n', s->len - s->pos);
			end = nl ? (size_t)(nl - s->buf) : s->len;
			for (i = s->pos; i < end && blank; i++)
				blank = s->buf[i] == ' ' || s->buf[i] == '\t' || s->buf[i] == '\r';
			s->line = s->pos;
			s->line_end = end;
			s->pos = nl ? end + 1 : end;
			s->in_line = true;
			s->tail_pos = 0;
			if (blank) {
				s->line = s->line_end;
				s->tail = "\n";
			} else {
				out[o++] = ';';
				s->tail = s->lines ? " 1\n" : "\n";
			}
			s->tail_len = strlen(s->tail);
			continue;
		}
		if (s->line < s->line_end) {
			size_t n = s->line_end - s->line;

			if (n > size - o)
				n = size - o;
			memcpy(out + o, s->buf + s->line, n);
			s->line += n;
			o += n;
			continue;
		}
		out[o++] = s->tail[s->tail_pos++];
		if (s->tail_pos == s->tail_len)
			s->in_line = false;
	}
	return (ssize_t)o;
}

int ingest__folded(struct ingest_batch *b, const void *body, size_t len, bool lines,
		   const struct ingest_opts *o, char *err, size_t errlen)
{
	struct fold_src src = {.buf = body, .len = len, .lines = lines};
	cookie_io_functions_t io = {.read = fold_read};
	struct ingest_series *s;
	struct lset ls = {0};
	const char *type;
	size_t line = 0;
	FILE *f = NULL;
	int rc;

	err[0] = '\0';
	type = o->labels ? lset__get(o->labels, "type") : NULL;
	if (!type) {
		snprintf(err, errlen, "the series has no type");
		return -EINVAL;
	}
	rc = window_of(o, 0, 0, &b->start_ms, &b->end_ms, err, errlen);
	if (rc)
		return rc;
	rc = lset__copy(&ls, o->labels);
	if (rc)
		goto cleanup;
	rc = lset__check(&ls, err, errlen);
	if (rc)
		goto cleanup;
	if (batch__find(b, "", 0, key_hash("", 0))) {
		snprintf(err, errlen, "the batch has a series already");
		rc = -EINVAL;
		goto cleanup;
	}
	s = batch__add(b, "", 0, key_hash("", 0), &ls, type,
		       o->unit && *o->unit ? o->unit : "samples", o->period, &rc);
	if (!s)
		goto cleanup;
	f = fopencookie(&src, "r", io);
	if (!f) {
		rc = -ENOMEM;
		goto cleanup;
	}
	rc = profile__read_folded(s->prof, f, &line);
	if (rc == -EINVAL)
		snprintf(err, errlen,
			 "line %zu of the body: expected 'frame;frame;...;leaf%s' (root first)%s",
			 line, lines ? "" : " COUNT",
			 lines ? "" : " with a non-negative integer COUNT, at most 1 MiB a line");
	else if (rc)
		snprintf(err, errlen, "can't read the folded body: %s", strerror(-rc));
	else
		b->samples += s->prof->nsamples;
cleanup:
	if (f)
		fclose(f);
	lset__free(&ls);
	return rc;
}

int ingest_batch__windows(struct ingest_batch *b)
{
	size_t i, n = 0;

	free(b->windows);
	b->windows = calloc(b->n ? b->n : 1, sizeof(*b->windows));
	if (!b->windows)
		return -ENOMEM;
	for (i = 0; i < b->n; i++) {
		const struct ingest_series *s = &b->series[i];

		if (!s->prof->nsamples)
			continue;
		b->windows[n++] = (struct store_window){
			.labels = s->labels.v,
			.nlabels = s->labels.n,
			.start_ms = b->start_ms,
			.end_ms = b->end_ms,
			.prof = s->prof,
		};
	}
	return (int)n;
}

void ingest_points__free(struct ingest_points *pts)
{
	for (size_t i = 0; i < pts->n; i++) {
		free((char *)pts->p[i].name);
		lset__free(&pts->labels[i]);
	}
	free(pts->p);
	free(pts->labels);
	memset(pts, 0, sizeof(*pts));
}

static int point_value(json_t *jv, double *out)
{
	const char *s;

	if (json_is_number(jv)) {
		*out = json_number_value(jv);
		return 0;
	}
	s = json_string_value(jv);
	if (!s)
		return -EINVAL;
	if (!strcmp(s, "NaN"))
		*out = NAN;
	else if (!strcmp(s, "+Inf") || !strcmp(s, "Inf"))
		*out = INFINITY;
	else if (!strcmp(s, "-Inf"))
		*out = -INFINITY;
	else
		return -EINVAL;
	return 0;
}

/* Reads point i (pt) into p and its labels into ls; 0, -EINVAL with err
 * set, -ENOMEM. */
static int parse_point(json_t *pt, size_t i, struct store_point *p, struct lset *ls, char *err,
		       size_t errlen)
{
	const char *name = json_string_value(json_object_get(pt, "name")), *key;
	json_t *jl = json_object_get(pt, "labels"), *jts = json_object_get(pt, "ts_ms"), *val;
	int rc;

	if (!json_is_object(pt) || !metric_name_valid(name)) {
		snprintf(err, errlen,
			 "point %zu: \"name\" must be a metric name [A-Za-z_:][A-Za-z0-9_:]*", i);
		return -EINVAL;
	}
	if (!json_is_integer(jts) || json_integer_value(jts) < 0) {
		snprintf(err, errlen,
			 "point %zu: \"ts_ms\" must be milliseconds since the epoch (a "
			 "non-negative integer)",
			 i);
		return -EINVAL;
	}
	if (point_value(json_object_get(pt, "value"), &p->value)) {
		snprintf(err, errlen, "point %zu: \"value\" must be a number", i);
		return -EINVAL;
	}
	if (jl && !json_is_object(jl)) {
		snprintf(err, errlen, "point %zu: \"labels\" must be an object", i);
		return -EINVAL;
	}
	json_object_foreach(jl, key, val)
	{
		const char *sv = json_string_value(val);

		if (!sv) {
			snprintf(err, errlen, "point %zu: label '%.64s' must be a string", i, key);
			return -EINVAL;
		}
		if (*sv && lset__setn(ls, key, sv, json_string_length(val)))
			return -ENOMEM;
	}
	rc = lset__check(ls, err, errlen);
	if (rc) {
		char msg[400];

		snprintf(msg, sizeof(msg), "point %zu: %s", i, err);
		snprintf(err, errlen, "%s", msg);
		return rc;
	}
	p->name = strdup(name);
	if (!p->name)
		return -ENOMEM;
	p->labels = ls->v;
	p->nlabels = ls->n;
	p->ts_ms = json_integer_value(jts);
	return 0;
}

int ingest_points__parse(struct ingest_points *out, const void *body, size_t len, size_t max_points,
			 char *err, size_t errlen)
{
	json_error_t jerr;
	json_t *root, *arr;
	size_t n, i;
	int rc = 0;

	memset(out, 0, sizeof(*out));
	root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!root) {
		snprintf(err, errlen, "the body is not JSON: %s at line %d column %d", jerr.text,
			 jerr.line, jerr.column);
		return -EINVAL;
	}
	arr = json_object_get(root, "points");
	if (!json_is_object(root) || !json_is_array(arr)) {
		snprintf(err, errlen,
			 "expected {\"points\": [{\"name\", \"labels\", \"ts_ms\", "
			 "\"value\"}, ...]}");
		rc = -EINVAL;
		goto cleanup;
	}
	n = json_array_size(arr);
	if (n > max_points) {
		snprintf(err, errlen, "%zu points in one request: at most %zu", n, max_points);
		rc = -EFBIG;
		goto cleanup;
	}
	out->p = calloc(n ? n : 1, sizeof(*out->p));
	out->labels = calloc(n ? n : 1, sizeof(*out->labels));
	if (!out->p || !out->labels) {
		rc = -ENOMEM;
		goto cleanup;
	}
	for (i = 0; i < n && !rc; i++) {
		out->n = i + 1;
		rc = parse_point(json_array_get(arr, i), i, &out->p[i], &out->labels[i], err,
				 errlen);
	}
cleanup:
	json_decref(root);
	if (rc)
		ingest_points__free(out);
	return rc;
}

/* ---- GPU timeline spans ---- */

void ingest_spans__free(struct ingest_spans *in)
{
	for (size_t i = 0; i < in->nseries; i++)
		lset__free(&in->labels[i]);
	free(in->labels);
	free(in->first);
	free(in->sp);
	json_decref(in->root);
	memset(in, 0, sizeof(*in));
}

/* An integer member of o in [lo, hi] into *out (def when absent). */
static bool span_int(json_t *o, const char *name, json_int_t lo, json_int_t hi, json_int_t def,
		     json_int_t *out)
{
	json_t *v = json_object_get(o, name);

	if (!v) {
		*out = def;
		return true;
	}
	if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi)
		return false;
	*out = json_integer_value(v);
	return true;
}

/* Span j of series i into sp (its strings borrowed from j); 0 or -EINVAL
 * with err set. */
static int parse_span(json_t *j, size_t i, size_t k, struct store_span *sp, char *err,
		      size_t errlen)
{
	static const struct {
		const char *name;
		json_int_t lo, hi;
	} ints[] = {
		{"start_ns", 0, INT64_MAX},	{"end_ns", 0, INT64_MAX},
		{"device", -1, INT32_MAX},	{"stream", 0, UINT32_MAX},
		{"correlation", 0, UINT32_MAX}, {"tid", 0, UINT32_MAX},
		{"bytes", 0, INT64_MAX},
	};
	json_int_t v[7];
	const char *kind = json_string_value(json_object_get(j, "kind"));
	const char *name = json_string_value(json_object_get(j, "name"));
	json_t *from = json_object_get(j, "from");
	size_t f;

	if (!json_is_object(j)) {
		snprintf(err, errlen, "series %zu, span %zu: not an object", i, k);
		return -EINVAL;
	}
	for (f = 0; f < 7; f++) {
		bool required = f < 2;

		if ((required && !json_object_get(j, ints[f].name)) ||
		    !span_int(j, ints[f].name, ints[f].lo, ints[f].hi, 0, &v[f])) {
			snprintf(err, errlen,
				 "series %zu, span %zu: \"%s\" must be an integer in [%lld, %lld]",
				 i, k, ints[f].name, (long long)ints[f].lo, (long long)ints[f].hi);
			return -EINVAL;
		}
	}
	if (!name || (from && !json_is_string(from)) || (json_object_get(j, "kind") && !kind)) {
		snprintf(err, errlen,
			 "series %zu, span %zu: \"name\" (and \"kind\", \"from\" if given) must be"
			 " strings",
			 i, k);
		return -EINVAL;
	}
	*sp = (struct store_span){
		.start_ns = v[0],
		.end_ns = v[1],
		.device = (int32_t)v[2],
		.stream = (uint32_t)v[3],
		.correlation = (uint32_t)v[4],
		.tid = (uint32_t)v[5],
		.bytes = (uint64_t)v[6],
		.kind = kind ? kind : "kernel",
		.name = name,
		.from = from ? json_string_value(from) : "",
	};
	return 0;
}

int ingest_spans__parse(struct ingest_spans *out, const void *body, size_t len, size_t max_spans,
			size_t max_series, char *err, size_t errlen)
{
	json_error_t jerr;
	json_t *arr, *ser, *val;
	size_t i, k, total = 0;
	const char *key;
	int rc = 0;

	memset(out, 0, sizeof(*out));
	out->root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!out->root) {
		snprintf(err, errlen, "the body is not JSON: %s at line %d column %d", jerr.text,
			 jerr.line, jerr.column);
		return -EINVAL;
	}
	arr = json_object_get(out->root, "series");
	if (!json_is_object((json_t *)out->root) || !json_is_array(arr)) {
		snprintf(err, errlen,
			 "expected {\"series\": [{\"labels\": {...}, \"spans\": [{\"start_ns\","
			 " \"end_ns\", \"device\", \"stream\", \"name\", ...}]}]}");
		rc = -EINVAL;
		goto out;
	}
	if (json_array_size(arr) > max_series) {
		snprintf(err, errlen, "%zu series in one request: at most %zu",
			 json_array_size(arr), max_series);
		rc = -EFBIG;
		goto out;
	}
	json_array_foreach(arr, i, ser)
	{
		json_t *sp = json_object_get(ser, "spans");

		if (!json_is_object(ser) || !json_is_array(sp)) {
			snprintf(err, errlen, "series %zu: expected {\"labels\", \"spans\": [...]}",
				 i);
			rc = -EINVAL;
			goto out;
		}
		total += json_array_size(sp);
	}
	if (total > max_spans) {
		snprintf(err, errlen, "%zu spans in one request: at most %zu", total, max_spans);
		rc = -EFBIG;
		goto out;
	}
	out->sp = calloc(total ? total : 1, sizeof(*out->sp));
	out->labels = calloc(json_array_size(arr) ? json_array_size(arr) : 1, sizeof(*out->labels));
	out->first = calloc(json_array_size(arr) + 1, sizeof(*out->first));
	if (!out->sp || !out->labels || !out->first) {
		rc = -ENOMEM;
		goto out;
	}
	json_array_foreach(arr, i, ser)
	{
		struct lset *ls = &out->labels[i];
		json_t *jl = json_object_get(ser, "labels"), *j;

		out->nseries = i + 1;
		if (jl && !json_is_object(jl)) {
			snprintf(err, errlen, "series %zu: \"labels\" must be an object", i);
			rc = -EINVAL;
			goto out;
		}
		json_object_foreach(jl, key, val)
		{
			const char *sv = json_string_value(val);

			if (!sv) {
				snprintf(err, errlen, "series %zu: label '%.64s' must be a string",
					 i, key);
				rc = -EINVAL;
				goto out;
			}
			if (*sv && lset__setn(ls, key, sv, json_string_length(val))) {
				rc = -ENOMEM;
				goto out;
			}
		}
		rc = lset__check(ls, err, errlen);
		if (rc)
			goto out;
		out->first[i] = out->n;
		json_array_foreach(json_object_get(ser, "spans"), k, j)
		{
			rc = parse_span(j, i, k, &out->sp[out->n], err, errlen);
			if (rc)
				goto out;
			out->n++;
		}
		out->first[i + 1] = out->n;
	}
out:
	if (rc)
		ingest_spans__free(out);
	return rc;
}
