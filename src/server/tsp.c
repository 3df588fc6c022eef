/* tsp.c: the Trace Server Protocol endpoint of tsp.h -- routes a request
 * under /tsp/api, reads its JSON body, keeps the traces opened or deleted
 * and the experiments made (in memory, bounded), and answers health,
 * traces and experiments itself; outputs are tsp_outputs.c's. Every datum
 * comes from the backend's answers to query API GETs. A malformed request
 * is a 400 with {"title": ..., "error": ...}; nothing a client sends
 * crashes it. Used by `sonde server` (server.c) and `sonde coordinator`. */
#include "server/tsp_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/hash.h"
#include "common/json.h"
#include "common/sat.h"
#include "common/xalloc.h"
#include "net/http.h"

#define TSP_MAX_NAME 256
/* A selector of the query API is at most this long (docs/api.md). */
#define TSP_MAX_SELECTOR (16 << 10)
#define TSP_URI_SCHEME "sonde:"
#define TSP_VERSION "0.6.0"

/* An opened trace, or a deleted one (a service's: not listed until it is
 * opened again). */
struct tsp_slot {
	struct tsp_trace tr;
	bool deleted;
};

struct tsp_exp {
	char uuid[TSP_UUID_LEN + 1];
	char *name;
	struct tsp_trace *traces;
	size_t ntraces;
};

struct tsp {
	struct tsp_backend be;
	pthread_mutex_t lock; /* guards the tables */
	struct tsp_slot *slots;
	size_t nslots;
	struct tsp_exp *exps;
	size_t nexps;
};

/* ---- helpers ---- */

int tsp_call__fail(struct tsp_call *c, int status, const char *fmt, ...)
{
	va_list ap;

	if (c->status)
		return -1;
	c->status = status;
	va_start(ap, fmt);
	vsnprintf(c->msg, sizeof(c->msg), fmt, ap);
	va_end(ap);
	return -1;
}

/* Keeps what a backend answer says of servers that did not answer. */
static void call_note_partial(struct tsp_call *c, const json_t *a)
{
	const json_t *f = json_object_get(a, "failed");
	size_t i;
	json_t *v;

	if (json_is_true(json_object_get(a, "partial")))
		c->partial = true;
	if (!json_is_array(f))
		return;
	if (!c->failed)
		c->failed = json_array();
	json_array_foreach(f, i, v)
	{
		json_t *have;
		size_t k;
		bool dup = false;

		json_array_foreach(c->failed, k, have) dup = dup || json_equal(have, v);
		if (!dup && c->failed)
			json_array_append(c->failed, v);
	}
}

json_t *tsp_call__get(struct tsp_call *c, const char *path, const char *query)
{
	json_t *a = NULL;
	int st;

	if (c->status)
		return NULL;
	if (c->oom) {
		tsp_call__fail(c, 500, "can't ask %s: out of memory", path);
		return NULL;
	}
	st = c->t->be.get(c->t->be.ctx, c->who, path, query ? query : "", &a);
	if (st == 200 && a) {
		call_note_partial(c, a);
		return a;
	}
	if (st < 0) {
		tsp_call__fail(c, 502, "can't ask %s: %s", path, strerror(-st));
	} else {
		const char *e = json_string_value(json_object_get(a, "error"));

		if (st == 200)
			tsp_call__fail(c, 502, "%s answered no JSON", path);
		else
			/* The caller's faults are said as they were: a bad
			 * argument, a token refused (401) or refused for now
			 * (429); the rest is the backend's, a bad gateway. */
			tsp_call__fail(c, st == 400 || st == 401 || st == 429 ? st : 502,
				       "%s answered %d: %s", path, st, e ? e : "(no message)");
	}
	json_decref(a);
	return NULL;
}

void tsp_qs(struct tsp_call *c, struct sbuf *b, const char *key, const char *value)
{
	static const char hex[] = "0123456789ABCDEF";
	int err = sbuf__printf(b, "%s%s=", b->len ? "&" : "", key);

	for (const unsigned char *p = (const unsigned char *)value; !err && *p; p++) {
		if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
		    (*p >= '0' && *p <= '9') || strchr("-._~", *p))
			err = sbuf__add(b, p, 1);
		else
			err = sbuf__printf(b, "%%%c%c", hex[*p >> 4], hex[*p & 15]);
	}
	if (err)
		c->oom = true;
}

void tsp_qs_int(struct tsp_call *c, struct sbuf *b, const char *key, int64_t v)
{
	if (sbuf__printf(b, "%s%s=%" PRId64, b->len ? "&" : "", key, v))
		c->oom = true;
}

/* Appends name="value" with the selector grammar's escapes. */
static int put_matcher(struct sbuf *b, const char *name, const char *value)
{
	int err = sbuf__printf(b, "%s=\"", name);

	for (const char *p = value; !err && *p; p++) {
		if (*p == '"' || *p == '\\')
			err = sbuf__printf(b, "\\%c", *p);
		else if (*p == '\n')
			err = sbuf__puts(b, "\\n");
		else
			err = sbuf__add(b, p, 1);
	}
	return err ? err : sbuf__puts(b, "\"");
}

char *tsp_selector_with(const char *sel, ...)
{
	size_t len = strlen(sel), open = strcspn(sel, "{");
	struct sbuf b = {0};
	const char *name;
	bool first = true;
	va_list ap;
	int err;

	while (len && (sel[len - 1] == ' ' || sel[len - 1] == '\t' || sel[len - 1] == '\n'))
		len--;
	if (len && sel[len - 1] == '}' && open < len) {
		/* {...}: the matchers go before the brace, after a comma
		 * unless the braces are empty or end with one. */
		size_t k = len - 1;

		while (k > open + 1 && strchr(" \t\n", sel[k - 1]))
			k--;
		first = k == open + 1 || sel[k - 1] == ',';
		err = sbuf__add(&b, sel, len - 1);
	} else {
		err = sbuf__add(&b, sel, len);
		err = err ? err : sbuf__puts(&b, "{");
	}
	va_start(ap, sel);
	while (!err && (name = va_arg(ap, const char *))) {
		const char *value = va_arg(ap, const char *);

		if (!first)
			err = sbuf__puts(&b, ",");
		err = err ? err : put_matcher(&b, name, value);
		first = false;
	}
	va_end(ap);
	err = err ? err : sbuf__puts(&b, "}");
	if (err) {
		sbuf__free(&b);
		return NULL;
	}
	return sbuf__steal(&b, &len);
}

int64_t tsp_id(const char *a, const char *b, const char *c)
{
	uint64_t h = hash_bytes(a, strlen(a), 0x7473705f6964ULL);

	h = hash_bytes(b, strlen(b), h);
	h = hash_bytes(c, strlen(c), h);
	return (int64_t)(h & TSP_ID_MASK);
}

json_t *tsp_number(double v)
{
	char buf[32];
	int prec = 9;

	if (!isfinite(v) || fabs(v) < 1e-30)
		v = 0;
	if (v == floor(v) && fabs(v) < 1e15)
		return json_integer((json_int_t)v);
	/* The client's parser reads a number of more than 15 characters
	 * as a BigInt (and fails on a fraction): keep it shorter. */
	do {
		snprintf(buf, sizeof(buf), "%.*g", prec--, v);
	} while (strlen(buf) > 15 && prec > 1);
	return json_real(strtod(buf, NULL));
}

/* A name-based UUID (version 5's layout) of kind and text. */
static void uuid_of(const char *kind, const char *text, char out[TSP_UUID_LEN + 1])
{
	uint64_t a = hash_bytes(text, strlen(text), hash_bytes(kind, strlen(kind), 1)),
		 b = hash_bytes(text, strlen(text), hash_bytes(kind, strlen(kind), 2));

	a = (a & ~0xf000ULL) | 0x5000ULL;
	b = (b & ~(3ULL << 62)) | (2ULL << 62);
	snprintf(out, TSP_UUID_LEN + 1,
		 "%08" PRIx64 "-%04" PRIx64 "-%04" PRIx64 "-%04" PRIx64 "-%012" PRIx64, a >> 32,
		 (a >> 16) & 0xffff, a & 0xffff, b >> 48, (uint64_t)(b & 0xffffffffffffULL));
}

/* The selector of a service's trace. */
static char *service_selector(const char *service)
{
	return tsp_selector_with("", "service_name", service, NULL);
}

static void trace_free(struct tsp_trace *tr)
{
	free(tr->name);
	free(tr->selector);
}

static void trace_copy(struct tsp_trace *dst, const struct tsp_trace *src)
{
	memcpy(dst->uuid, src->uuid, sizeof(dst->uuid));
	dst->name = xstrdup(src->name);
	dst->selector = xstrdup(src->selector);
}

/* ---- traces ---- */

/* What the data says of a trace: its extent, CPU samples and types. */
struct trace_info {
	int64_t start_ns, end_ns, nb;
	json_t *types; /* array of strings */
};

static int64_t ms_to_ns(const json_t *ms)
{
	return json_is_integer(ms) ? sat_mul_i64(json_integer_value(ms), NS_PER_MS) : 0;
}

/* totals by type of the trace's selection over everything kept. */
static int trace_info(struct tsp_call *c, const struct tsp_trace *tr, struct trace_info *ti)
{
	struct sbuf q = {0};
	json_t *a, *g;
	size_t i;

	memset(ti, 0, sizeof(*ti));
	tsp_qs(c, &q, "by", "type");
	tsp_qs(c, &q, "query", tr->selector);
	tsp_qs(c, &q, "from", "0");
	a = tsp_call__get(c, "/api/v1/totals", q.buf);
	sbuf__free(&q);
	if (!a)
		return -1;
	ti->start_ns = ms_to_ns(json_object_get(a, "from_ms"));
	ti->end_ns = ms_to_ns(json_object_get(a, "until_ms"));
	ti->types = json_array();
	json_array_foreach(json_object_get(a, "groups"), i, g)
	{
		const char *type = json_string_value(json_object_get(g, "value"));

		if (!type || !*type)
			continue;
		if (!strcmp(type, "cpu"))
			ti->nb = sat_add_i64(ti->nb,
					     json_integer_value(json_object_get(g, "total")));
		json_array_append_new(ti->types, json_string(type));
	}
	json_decref(a);
	return 0;
}

static json_t *trace_json(const struct tsp_trace *tr, int64_t start_ns, int64_t end_ns, int64_t nb)
{
	json_t *j = json_object(), *props = json_object();
	char *path = NULL;

	if (asprintf(&path, "%s%s", TSP_URI_SCHEME, tr->selector) < 0)
		path = NULL;
	json_object_set_new(props, "selector", json_string_lossy(tr->selector));
	json_object_set_new(props, "source", json_string("sonde"));
	json_object_set_new(j, "UUID", json_string(tr->uuid));
	json_object_set_new(j, "name", json_string_lossy(tr->name));
	json_object_set_new(j, "path", json_string_lossy(path));
	json_object_set_new(j, "start", json_integer(start_ns));
	json_object_set_new(j, "end", json_integer(end_ns));
	json_object_set_new(j, "nbEvents", json_integer(nb < 1000000000000000LL ? nb : 0));
	json_object_set_new(j, "indexingStatus", json_string("COMPLETED"));
	json_object_set_new(j, "properties", props);
	free(path);
	return j;
}

/* The trace's JSON with what the data says of it; NULL with the error set. */
static json_t *trace_json_data(struct tsp_call *c, const struct tsp_trace *tr)
{
	struct trace_info ti;
	json_t *j;

	if (trace_info(c, tr, &ti))
		return NULL;
	j = trace_json(tr, ti.start_ns, ti.end_ns, ti.nb);
	json_decref(ti.types);
	return j;
}

/* Under the lock: the slot of uuid, or NULL. */
static struct tsp_slot *slot_find(struct tsp *t, const char *uuid)
{
	for (size_t i = 0; i < t->nslots; i++)
		if (!strcmp(t->slots[i].tr.uuid, uuid))
			return &t->slots[i];
	return NULL;
}

/* Under the lock: a new slot for tr (copied), or NULL when the table is
 * full. */
static struct tsp_slot *slot_add(struct tsp *t, const struct tsp_trace *tr)
{
	struct tsp_slot *s;

	if (t->nslots >= TSP_MAX_TRACES)
		return NULL;
	s = &t->slots[t->nslots++];
	memset(s, 0, sizeof(*s));
	trace_copy(&s->tr, tr);
	return s;
}

/* Whether a deleted slot hides uuid. */
static bool trace_hidden(struct tsp *t, const char *uuid)
{
	struct tsp_slot *s;
	bool hidden;

	pthread_mutex_lock(&t->lock);
	s = slot_find(t, uuid);
	hidden = s && s->deleted;
	pthread_mutex_unlock(&t->lock);
	return hidden;
}

/* The services of the data (totals by service_name over everything kept),
 * or NULL with the error set. */
static json_t *services(struct tsp_call *c, const char *type)
{
	struct sbuf q = {0};
	json_t *a;

	tsp_qs(c, &q, "by", "service_name");
	tsp_qs(c, &q, "from", "0");
	if (type)
		tsp_qs(c, &q, "type", type);
	a = tsp_call__get(c, "/api/v1/totals", q.buf);
	sbuf__free(&q);
	return a;
}

/* A service's trace (the caller frees it). */
static void service_trace(const char *service, struct tsp_trace *tr)
{
	tr->selector = service_selector(service);
	if (!tr->selector)
		tr->selector = xstrdup("{}");
	tr->name = xstrdup(service);
	uuid_of("trace", tr->selector, tr->uuid);
}

/* Finds the trace of uuid: opened, or a service's; 0 (tr filled, the
 * caller's), 1 when there is none, -1 with the call's error set. */
static int trace_resolve(struct tsp_call *c, const char *uuid, struct tsp_trace *tr)
{
	struct tsp *t = c->t;
	struct tsp_slot *s;
	json_t *a, *g;
	size_t i;
	int found = -2;

	pthread_mutex_lock(&t->lock);
	s = slot_find(t, uuid);
	if (s && !s->deleted)
		trace_copy(tr, &s->tr);
	if (s)
		found = s->deleted ? 1 : 0;
	pthread_mutex_unlock(&t->lock);
	if (found != -2)
		return found;
	found = 1;
	a = services(c, NULL);
	if (!a)
		return -1;
	json_array_foreach(json_object_get(a, "groups"), i, g)
	{
		const char *v = json_string_value(json_object_get(g, "value"));
		struct tsp_trace st;

		if (!v || !*v || found == 0)
			continue;
		service_trace(v, &st);
		if (!strcmp(st.uuid, uuid)) {
			*tr = st;
			found = 0;
		} else {
			trace_free(&st);
		}
	}
	json_decref(a);
	return found;
}

static json_t *traces_list(struct tsp_call *c)
{
	struct tsp *t = c->t;
	json_t *all = services(c, NULL), *cpu = services(c, "cpu"), *out = NULL, *g;
	struct tsp_trace *opened = NULL;
	size_t nopened = 0, i;

	if (!all || !cpu)
		goto cleanup;
	out = json_array();
	json_array_foreach(json_object_get(all, "groups"), i, g)
	{
		const char *v = json_string_value(json_object_get(g, "value"));
		int64_t nb = 0;
		struct tsp_trace tr;
		size_t k;
		json_t *h;

		if (!v || !*v)
			continue;
		service_trace(v, &tr);
		json_array_foreach(json_object_get(cpu, "groups"), k, h)
		{
			if (json_equal(json_object_get(h, "value"), json_object_get(g, "value")))
				nb = json_integer_value(json_object_get(h, "total"));
		}
		if (!trace_hidden(t, tr.uuid))
			json_array_append_new(
				out, trace_json(&tr, ms_to_ns(json_object_get(g, "from_ms")),
						ms_to_ns(json_object_get(g, "until_ms")), nb));
		trace_free(&tr);
	}
	/* The traces opened that are not a service's. */
	pthread_mutex_lock(&t->lock);
	opened = xcalloc(t->nslots ? t->nslots : 1, sizeof(*opened));
	for (i = 0; i < t->nslots; i++)
		if (!t->slots[i].deleted)
			trace_copy(&opened[nopened++], &t->slots[i].tr);
	pthread_mutex_unlock(&t->lock);
	for (i = 0; i < nopened && !c->status; i++) {
		bool listed = false;
		size_t k;
		json_t *have;

		json_array_foreach(out, k, have) listed =
			listed ||
			!strcmp(json_string_value(json_object_get(have, "UUID")), opened[i].uuid);
		if (!listed) {
			json_t *j = trace_json_data(c, &opened[i]);

			if (j)
				json_array_append_new(out, j);
		}
	}
	if (c->status) {
		json_decref(out);
		out = NULL;
	}
cleanup:
	for (i = 0; i < nopened; i++)
		trace_free(&opened[i]);
	free(opened);
	json_decref(all);
	json_decref(cpu);
	return out;
}

static json_t *trace_get(struct tsp_call *c, const char *uuid)
{
	struct tsp_trace tr;
	json_t *j;
	int rc = trace_resolve(c, uuid, &tr);

	if (rc) {
		if (rc > 0)
			tsp_call__fail(c, 404, "no trace %s -- GET /tsp/api/traces lists them",
				       uuid);
		return NULL;
	}
	j = trace_json_data(c, &tr);
	trace_free(&tr);
	return j;
}

/* The string member key of params, checked: NULL when absent, else it
 * must be a string of 1 to max bytes (else the error is set). */
static const char *param_string(struct tsp_call *c, const json_t *params, const char *key,
				size_t max, bool required)
{
	const json_t *v = json_object_get(params, key);
	const char *s = json_string_value(v);

	if (!v && !required)
		return NULL;
	if (!s || (!*s && required) || strlen(s) > max || strlen(s) != json_string_length(v)) {
		tsp_call__fail(c, 400, "parameters.%s must be a string of %s%zu bytes at most", key,
			       required ? "1 to " : "", max);
		return NULL;
	}
	return s;
}

/* POST /traces {"parameters": {"uri": "sonde:SELECTOR", "name": ...}}. */
static json_t *trace_open(struct tsp_call *c, const json_t *params)
{
	const char *uri = param_string(c, params, "uri", TSP_MAX_SELECTOR, true),
		   *name = param_string(c, params, "name", TSP_MAX_NAME, false);
	struct tsp_trace tr = {0};
	struct tsp *t = c->t;
	struct tsp_slot *s;
	json_t *j = NULL;

	if (c->status)
		return NULL;
	if (strncmp(uri, TSP_URI_SCHEME, strlen(TSP_URI_SCHEME))) {
		tsp_call__fail(c, 400,
			       "parameters.uri '%.80s' is not a Sonde trace: give sonde:SELECTOR, "
			       "as sonde:{service_name=\"trainer\"}",
			       uri);
		return NULL;
	}
	tr.selector = xstrdup(uri + strlen(TSP_URI_SCHEME));
	tr.name = xstrdup(name && *name ? name : *tr.selector ? tr.selector : "{}");
	uuid_of("trace", tr.selector, tr.uuid);
	/* The backend checks the selector, and says what the data has. */
	j = trace_json_data(c, &tr);
	if (!j)
		goto cleanup;
	pthread_mutex_lock(&t->lock);
	s = slot_find(t, tr.uuid);
	if (!s)
		s = slot_add(t, &tr);
	if (s && name && *name) {
		free(s->tr.name);
		s->tr.name = xstrdup(name);
	}
	if (s)
		s->deleted = false;
	pthread_mutex_unlock(&t->lock);
	if (!s) {
		tsp_call__fail(c, 507, "at most %d traces are kept open: delete one first",
			       TSP_MAX_TRACES);
		json_decref(j);
		j = NULL;
	}
cleanup:
	trace_free(&tr);
	return j;
}

static bool exp_uses(const struct tsp_exp *e, const char *uuid)
{
	for (size_t i = 0; i < e->ntraces; i++)
		if (!strcmp(e->traces[i].uuid, uuid))
			return true;
	return false;
}

static json_t *trace_delete(struct tsp_call *c, const char *uuid)
{
	struct tsp *t = c->t;
	struct tsp_trace tr;
	struct tsp_slot *s;
	json_t *j;
	int rc = trace_resolve(c, uuid, &tr);
	bool used = false;

	if (rc) {
		if (rc > 0)
			tsp_call__fail(c, 404, "no trace %s", uuid);
		return NULL;
	}
	j = trace_json_data(c, &tr);
	pthread_mutex_lock(&t->lock);
	for (size_t i = 0; i < t->nexps; i++)
		used = used || exp_uses(&t->exps[i], uuid);
	s = used ? NULL : slot_find(t, uuid);
	if (!used && !s)
		s = slot_add(t, &tr);
	if (s)
		s->deleted = true;
	pthread_mutex_unlock(&t->lock);
	trace_free(&tr);
	if (used)
		tsp_call__fail(c, 409, "trace %s is in an experiment: delete the experiment first",
			       uuid);
	else if (!s)
		tsp_call__fail(c, 507, "at most %d traces are kept open or deleted",
			       TSP_MAX_TRACES);
	if (c->status) {
		json_decref(j);
		return NULL;
	}
	return j;
}

/* ---- experiments ---- */

static void exp_free(struct tsp_exp *e)
{
	for (size_t i = 0; i < e->ntraces; i++)
		trace_free(&e->traces[i]);
	free(e->traces);
	free(e->name);
}

static void view_free(struct tsp_exp_view *v)
{
	for (size_t i = 0; i < v->ntraces; i++)
		trace_free(&v->traces[i]);
	free(v->traces);
	json_decref(v->types);
	memset(v, 0, sizeof(*v));
}

/* The experiment's JSON, filling v (its traces, types and extent) on the
 * way; NULL with the error set. */
static json_t *exp_json(struct tsp_call *c, const char *uuid, struct tsp_exp_view *v)
{
	struct tsp *t = c->t;
	json_t *j, *traces;
	char *name = NULL;
	int64_t nb = 0;

	memset(v, 0, sizeof(*v));
	pthread_mutex_lock(&t->lock);
	for (size_t i = 0; i < t->nexps; i++) {
		struct tsp_exp *e = &t->exps[i];

		if (strcmp(e->uuid, uuid))
			continue;
		name = xstrdup(e->name);
		memcpy(v->uuid, e->uuid, sizeof(v->uuid));
		v->traces = xcalloc(e->ntraces, sizeof(*v->traces));
		for (size_t k = 0; k < e->ntraces; k++)
			trace_copy(&v->traces[k], &e->traces[k]);
		v->ntraces = e->ntraces;
	}
	pthread_mutex_unlock(&t->lock);
	if (!name) {
		tsp_call__fail(c, 404, "no experiment %s -- GET /tsp/api/experiments lists them",
			       uuid);
		return NULL;
	}
	v->types = json_array();
	traces = json_array();
	j = json_object();
	for (size_t i = 0; i < v->ntraces; i++) {
		struct trace_info ti;

		if (trace_info(c, &v->traces[i], &ti))
			break;
		json_array_append_new(v->types, ti.types);
		json_array_append_new(traces,
				      trace_json(&v->traces[i], ti.start_ns, ti.end_ns, ti.nb));
		nb = sat_add_i64(nb, ti.nb);
		if (ti.end_ns && (!v->start_ns || ti.start_ns < v->start_ns))
			v->start_ns = ti.start_ns;
		if (ti.end_ns > v->end_ns)
			v->end_ns = ti.end_ns;
	}
	json_object_set_new(j, "UUID", json_string(v->uuid));
	json_object_set_new(j, "name", json_string_lossy(name));
	json_object_set_new(j, "start", json_integer(v->start_ns));
	json_object_set_new(j, "end", json_integer(v->end_ns));
	json_object_set_new(j, "nbEvents", json_integer(nb < 1000000000000000LL ? nb : 0));
	json_object_set_new(j, "indexingStatus", json_string("COMPLETED"));
	json_object_set_new(j, "traces", traces);
	free(name);
	if (c->status) {
		json_decref(j);
		view_free(v);
		return NULL;
	}
	return j;
}

static json_t *exp_list(struct tsp_call *c)
{
	struct tsp *t = c->t;
	json_t *out = json_array();
	char(*uuids)[TSP_UUID_LEN + 1];
	size_t n;

	pthread_mutex_lock(&t->lock);
	n = t->nexps;
	uuids = xcalloc(n ? n : 1, sizeof(*uuids));
	for (size_t i = 0; i < n; i++)
		memcpy(uuids[i], t->exps[i].uuid, sizeof(uuids[i]));
	pthread_mutex_unlock(&t->lock);
	for (size_t i = 0; i < n; i++) {
		struct tsp_exp_view v;
		json_t *j = exp_json(c, uuids[i], &v);

		/* Deleted meanwhile: not listed. */
		if (!j && c->status == 404) {
			c->status = 0;
			continue;
		}
		if (!j)
			break;
		json_array_append_new(out, j);
		view_free(&v);
	}
	free(uuids);
	if (c->status) {
		json_decref(out);
		return NULL;
	}
	return out;
}

static bool same_traces(const struct tsp_exp *e, const struct tsp_trace *tr, size_t n)
{
	if (e->ntraces != n)
		return false;
	for (size_t i = 0; i < n; i++)
		if (strcmp(e->traces[i].uuid, tr[i].uuid))
			return false;
	return true;
}

/* POST /experiments {"parameters": {"name": ..., "traces": [UUID, ...]}}:
 * the experiment of that name (a name-based UUID), 409 when one of that
 * name has other traces. */
static json_t *exp_create(struct tsp_call *c, const json_t *params)
{
	const char *name = param_string(c, params, "name", TSP_MAX_NAME, true);
	const json_t *ids = json_object_get(params, "traces"), *id;
	struct tsp *t = c->t;
	struct tsp_trace *tr = NULL;
	char uuid[TSP_UUID_LEN + 1];
	struct tsp_exp_view v;
	size_t n = 0, i;
	json_t *j = NULL;
	int conflict = 0;

	if (c->status)
		return NULL;
	if (!json_is_array(ids) || !json_array_size(ids) ||
	    json_array_size(ids) > TSP_MAX_EXP_TRACES) {
		tsp_call__fail(c, 400, "parameters.traces must be an array of 1 to %d trace UUIDs",
			       TSP_MAX_EXP_TRACES);
		return NULL;
	}
	tr = xcalloc(json_array_size(ids), sizeof(*tr));
	json_array_foreach(ids, i, id)
	{
		const char *u = json_string_value(id);
		int rc;

		if (!u || strlen(u) != TSP_UUID_LEN) {
			tsp_call__fail(c, 400, "parameters.traces[%zu] is not a trace UUID", i);
			goto cleanup;
		}
		rc = trace_resolve(c, u, &tr[n]);
		if (rc > 0)
			tsp_call__fail(c, 400,
				       "parameters.traces[%zu]: no trace %s -- open it first", i,
				       u);
		if (rc)
			goto cleanup;
		n++;
	}
	uuid_of("experiment", name, uuid);
	pthread_mutex_lock(&t->lock);
	for (i = 0; i < t->nexps; i++)
		if (!strcmp(t->exps[i].uuid, uuid))
			conflict = same_traces(&t->exps[i], tr, n) ? -1 : 1;
	if (!conflict && t->nexps < TSP_MAX_EXPERIMENTS) {
		struct tsp_exp *e = &t->exps[t->nexps++];

		memcpy(e->uuid, uuid, sizeof(e->uuid));
		e->name = xstrdup(name);
		e->traces = tr;
		e->ntraces = n;
		tr = NULL;
		n = 0;
	} else if (!conflict) {
		conflict = 2;
	}
	pthread_mutex_unlock(&t->lock);
	if (conflict == 1)
		tsp_call__fail(c, 409, "an experiment named '%.80s' has other traces", name);
	else if (conflict == 2)
		tsp_call__fail(c, 507, "at most %d experiments are kept: delete one first",
			       TSP_MAX_EXPERIMENTS);
	if (conflict > 0)
		goto cleanup;
	j = exp_json(c, uuid, &v);
	if (j)
		view_free(&v);
cleanup:
	for (i = 0; i < n; i++)
		trace_free(&tr[i]);
	free(tr);
	return j;
}

static json_t *exp_delete(struct tsp_call *c, const char *uuid)
{
	struct tsp *t = c->t;
	struct tsp_exp_view v;
	json_t *j = exp_json(c, uuid, &v);
	bool gone = false;

	if (!j && c->status == 404)
		return NULL;
	/* Deleted even when the data could not be read. */
	pthread_mutex_lock(&t->lock);
	for (size_t i = 0; i < t->nexps; i++)
		if (!strcmp(t->exps[i].uuid, uuid)) {
			exp_free(&t->exps[i]);
			t->exps[i] = t->exps[--t->nexps];
			gone = true;
			break;
		}
	pthread_mutex_unlock(&t->lock);
	if (j)
		view_free(&v);
	if (!gone && !c->status)
		tsp_call__fail(c, 404, "no experiment %s", uuid);
	if (c->status) {
		json_decref(j);
		return NULL;
	}
	return j;
}

/* ---- output queries ---- */

/* An integer of a body: a JSON integer, a whole real, or a string of
 * digits (a BigInt sent as text); false when it is none of them. */
static bool json_int64(const json_t *v, int64_t *out)
{
	if (json_is_integer(v)) {
		*out = json_integer_value(v);
		return true;
	}
	if (json_is_real(v)) {
		double d = json_real_value(v);

		if (d != floor(d) || fabs(d) >= 9.2e18)
			return false;
		*out = (int64_t)d;
		return true;
	}
	if (json_is_string(v)) {
		const char *s = json_string_value(v);
		char *end;

		errno = 0;
		*out = strtoll(s, &end, 10);
		return *s && !*end && !errno;
	}
	return false;
}

/* Reads requested_timerange (or requested_times), defaulting to the
 * experiment's extent, and requested_items. */
static int parse_query(struct tsp_call *c, const json_t *params, const struct tsp_exp_view *e,
		       struct tsp_query *q)
{
	const json_t *tr = json_object_get(params, "requested_timerange"),
		     *times = json_object_get(params, "requested_times"),
		     *items = json_object_get(params, "requested_items"), *v;
	struct tsp_range *r = &q->range;
	size_t i;

	memset(q, 0, sizeof(*q));
	r->start_ns = e->start_ns;
	r->end_ns = e->end_ns;
	if (tr && !json_is_null(tr)) {
		const json_t *nb = json_object_get(tr, "nbTimes");

		if (!nb)
			nb = json_object_get(tr, "nbSamples");
		if (!json_is_object(tr) ||
		    !json_int64(json_object_get(tr, "start"), &r->start_ns) ||
		    !json_int64(json_object_get(tr, "end"), &r->end_ns) ||
		    (nb && !json_is_null(nb) && !json_int64(nb, &r->nb_times)))
			return tsp_call__fail(c, 400,
					      "parameters.requested_timerange must be {\"start\": "
					      "NS, \"end\": NS, \"nbTimes\": N} with integers");
	} else if (times && !json_is_null(times)) {
		if (!json_is_array(times) || !json_array_size(times))
			return tsp_call__fail(c, 400,
					      "parameters.requested_times must be an array of "
					      "integers (ns)");
		r->start_ns = INT64_MAX;
		r->end_ns = INT64_MIN;
		json_array_foreach(times, i, v)
		{
			int64_t x;

			if (!json_int64(v, &x))
				return tsp_call__fail(c, 400,
						      "parameters.requested_times[%zu] is not an "
						      "integer",
						      i);
			r->start_ns = x < r->start_ns ? x : r->start_ns;
			r->end_ns = x > r->end_ns ? x : r->end_ns;
		}
		r->nb_times = (int64_t)json_array_size(times);
	}
	if (r->start_ns < 0 || r->end_ns < r->start_ns || r->nb_times < 0 || r->nb_times > 1000000)
		return tsp_call__fail(c, 400,
				      "the time range must have 0 <= start <= end (ns) and nbTimes "
				      "from 1 to 1000000");
	r->from_ms = r->start_ns / NS_PER_MS;
	r->until_ms = r->end_ns / NS_PER_MS + (r->end_ns % NS_PER_MS != 0);
	if (r->until_ms <= r->from_ms)
		r->until_ms = r->from_ms + 1;
	if (items && !json_is_null(items)) {
		if (!json_is_array(items))
			return tsp_call__fail(c, 400,
					      "parameters.requested_items must be an array");
		json_array_foreach(items, i, v)
		{
			int64_t x;

			if (!json_int64(v, &x))
				return tsp_call__fail(c, 400,
						      "parameters.requested_items[%zu] is not an "
						      "integer",
						      i);
		}
		q->items = items;
	}
	return 0;
}

/* {"model": m, "status": "COMPLETED", ...} with the partial/failed
 * fields when some servers did not answer. */
static json_t *generic_response(struct tsp_call *c, json_t *model)
{
	json_t *j = json_object();

	json_object_set_new(j, "model", model);
	json_object_set_new(j, "status", json_string("COMPLETED"));
	if (c->partial || (c->failed && json_array_size(c->failed))) {
		char msg[128];

		snprintf(msg, sizeof(msg), "Completed, partial: %zu server(s) did not answer",
			 c->failed ? json_array_size(c->failed) : 0);
		json_object_set_new(j, "statusMessage", json_string(msg));
		json_object_set_new(j, "partial", json_true());
		json_object_set(j, "failed", c->failed ? c->failed : json_array());
	} else {
		json_object_set_new(j, "statusMessage", json_string("Completed"));
	}
	return j;
}

/* /experiments/UUID/outputs...: segs after "outputs". */
static json_t *exp_outputs(struct tsp_call *c, const char *method, const char *uuid, char **segs,
			   size_t nsegs, const json_t *params)
{
	struct tsp_exp_view v;
	struct tsp_query q;
	json_t *j = NULL, *m;

	j = exp_json(c, uuid, &v);
	if (!j)
		return NULL;
	json_decref(j);
	j = NULL;
	if (nsegs == 0) {
		if (strcmp(method, "GET"))
			goto bad_method;
		j = tsp_outputs__list(c, &v);
	} else if (nsegs == 1 && !strcmp(segs[0], "markerSets")) {
		if (strcmp(method, "GET"))
			goto bad_method;
		j = generic_response(c, json_array());
	} else if (nsegs == 1) {
		if (strcmp(method, "GET"))
			goto bad_method;
		j = tsp_outputs__get(c, &v, segs[0]);
	} else if (nsegs == 2 && !strcmp(segs[1], "style")) {
		if (strcmp(method, "POST"))
			goto bad_method;
		m = tsp_outputs__get(c, &v, segs[0]);
		json_decref(m);
		if (m)
			j = generic_response(c, tsp_outputs__styles());
	} else if (nsegs == 3) {
		if (strcmp(method, "POST"))
			goto bad_method;
		if (!parse_query(c, params, &v, &q)) {
			m = tsp_outputs__fetch(c, &v, segs[0], segs[1], segs[2], &q);
			if (m)
				j = generic_response(c, m);
		}
	} else {
		tsp_call__fail(c, 404, "no such endpoint under /tsp/api/experiments/%s/outputs",
			       uuid);
	}
	view_free(&v);
	return j;
bad_method:
	tsp_call__fail(c, 405, "method %s is not allowed there", method);
	view_free(&v);
	return NULL;
}

/* ---- the endpoint ---- */

struct tsp *tsp__new(const struct tsp_backend *b)
{
	struct tsp *t = calloc(1, sizeof(*t));

	if (!t) {
		errno = ENOMEM;
		return NULL;
	}
	t->be = *b;
	if (!t->be.product)
		t->be.product = "sonde";
	t->slots = calloc(TSP_MAX_TRACES, sizeof(*t->slots));
	t->exps = calloc(TSP_MAX_EXPERIMENTS, sizeof(*t->exps));
	if (!t->slots || !t->exps) {
		tsp__free(t);
		errno = ENOMEM;
		return NULL;
	}
	pthread_mutex_init(&t->lock, NULL);
	return t;
}

void tsp__free(struct tsp *t)
{
	if (!t)
		return;
	for (size_t i = 0; t->slots && i < t->nslots; i++)
		trace_free(&t->slots[i].tr);
	for (size_t i = 0; t->exps && i < t->nexps; i++)
		exp_free(&t->exps[i]);
	free(t->slots);
	free(t->exps);
	pthread_mutex_destroy(&t->lock);
	free(t);
}

static json_t *identifier(struct tsp *t)
{
	return json_pack("{s:s,s:s,s:s,s:s,s:s}", "version", "1.0.0", "productId", t->be.product,
			 "tspVersion", TSP_VERSION, "os", "Linux", "launcherName", "sonde");
}

#define TSP_MAX_SEGS 8

/* Routes a request; the answer, or NULL with the call's error set. */
static json_t *route(struct tsp_call *c, const char *method, char **seg, size_t n,
		     const json_t *params)
{
	bool get = !strcmp(method, "GET") || !strcmp(method, "HEAD"),
	     post = !strcmp(method, "POST"), del = !strcmp(method, "DELETE");

	if (get)
		method = "GET";
	if (n == 1 && !strcmp(seg[0], "health") && get)
		return json_pack("{s:s}", "status", "UP");
	if (n == 1 && !strcmp(seg[0], "identifier") && get)
		return identifier(c->t);
	if (n >= 1 && !strcmp(seg[0], "traces")) {
		if (n == 1 && get)
			return traces_list(c);
		if (n == 1 && post)
			return trace_open(c, params);
		if (n == 2 && get)
			return trace_get(c, seg[1]);
		if (n == 2 && del)
			return trace_delete(c, seg[1]);
		if (n <= 2) {
			tsp_call__fail(c, 405, "method %s is not allowed on /traces%s: use %s",
				       method, n == 2 ? "/UUID" : "",
				       n == 2 ? "GET or DELETE" : "GET or POST");
			return NULL;
		}
	}
	if (n >= 1 && !strcmp(seg[0], "experiments")) {
		if (n == 1 && get)
			return exp_list(c);
		if (n == 1 && post)
			return exp_create(c, params);
		if (n == 2 && get) {
			struct tsp_exp_view v;
			json_t *j = exp_json(c, seg[1], &v);

			if (j)
				view_free(&v);
			return j;
		}
		if (n == 2 && del)
			return exp_delete(c, seg[1]);
		if (n >= 3 && !strcmp(seg[2], "outputs"))
			return exp_outputs(c, method, seg[1], seg + 3, n - 3, params);
		if (n <= 2) {
			tsp_call__fail(c, 405, "method %s is not allowed on /experiments%s: use %s",
				       method, n == 2 ? "/UUID" : "",
				       n == 2 ? "GET or DELETE" : "GET or POST");
			return NULL;
		}
	}
	tsp_call__fail(c, 404,
		       "no such endpoint of the Trace Server Protocol -- see docs/api.md, "
		       "\"Trace Server Protocol\"");
	return NULL;
}

/* The parameters of a body: its "parameters" object, else the body. */
static int parse_body(struct tsp_call *c, const char *body, size_t len, json_t **root,
		      const json_t **params)
{
	json_error_t je;
	const json_t *p;

	*root = NULL;
	*params = NULL;
	while (len && strchr(" \t\r\n", body[len - 1]))
		len--;
	if (!body || !len)
		return 0;
	if (len > TSP_MAX_BODY)
		return tsp_call__fail(c, 413, "the body is over %u bytes", TSP_MAX_BODY);
	*root = json_loadb(body, len, 0, &je);
	if (!*root)
		return tsp_call__fail(c, 400, "malformed JSON body: %s (line %d, column %d)",
				      je.text, je.line, je.column);
	if (!json_is_object(*root))
		return tsp_call__fail(c, 400,
				      "the body must be a JSON object: {\"parameters\": {...}}");
	p = json_object_get(*root, "parameters");
	if (p && !json_is_object(p) && !json_is_null(p))
		return tsp_call__fail(c, 400, "\"parameters\" must be an object");
	*params = json_is_object(p) ? p : *root;
	return 0;
}

int tsp__handle(struct tsp *t, void *who, const char *method, const char *path, const char *body,
		size_t len, int *status, json_t **answer)
{
	struct tsp_call c = {.t = t, .who = who};
	char *copy, *seg[TSP_MAX_SEGS + 1], *save = NULL, *tok;
	const json_t *params;
	json_t *root = NULL, *j = NULL;
	size_t n = 0;

	if (!strncmp(path, TSP_PREFIX, strlen(TSP_PREFIX)))
		path += strlen(TSP_PREFIX);
	copy = strdup(path);
	if (!copy)
		return -ENOMEM;
	for (tok = strtok_r(copy, "/", &save); tok && n <= TSP_MAX_SEGS;
	     tok = strtok_r(NULL, "/", &save))
		seg[n++] = tok;
	if (n > TSP_MAX_SEGS)
		tsp_call__fail(&c, 404, "no such endpoint of the Trace Server Protocol");
	else if (!parse_body(&c, body, len, &root, &params))
		j = route(&c, method, seg, n, params);
	free(copy);
	json_decref(root);
	if (!j && !c.status)
		tsp_call__fail(&c, 500, "internal error: out of memory");
	if (c.status) {
		/* The message may echo what the client sent (a path, a
		 * parameter cut at a byte count): repaired, never refused. */
		json_decref(j);
		j = json_pack("{s:o,s:o}", "title", json_string_lossy(c.msg), "error",
			      json_string_lossy(c.msg));
	}
	json_decref(c.failed);
	if (!j)
		return -ENOMEM;
	*status = c.status ? c.status : 200;
	*answer = j;
	return 0;
}

int tsp__serve(struct tsp *t, void *who, const struct http_request *req, struct http_reply *rep)
{
	size_t len;
	const char *body = http_request__body(req, &len);
	json_t *j = NULL;
	char *text;
	int status = 0, err;

	err = tsp__handle(t, who, http_request__method(req), http_request__path(req), body, len,
			  &status, &j);
	if (err)
		return err;
	/* 9 significant digits: the client's JSON parser takes a number of
	 * more than 15 characters for a BigInt. */
	text = json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(9));
	json_decref(j);
	if (!text)
		return -ENOMEM;
	free(rep->body);
	rep->body = text;
	rep->len = strlen(text);
	rep->status = status;
	rep->content_type = HTTP_CONTENT_JSON;
	return 0;
}
