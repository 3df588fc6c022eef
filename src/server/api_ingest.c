/* api_ingest.c: the ingest routes of docs/api.md -- POST /api/v1/ingest
 * (an agent's pprof window), /api/v1/ingest/points (metric points) and
 * Pyroscope's POST /ingest (folded, lines or pprof, raw or multipart).
 * Each turns its query arguments into labels and options, hands the body to
 * ingest.c, writes the result to the store in one call and answers only
 * after the store said it is durable. Bad input is a 4xx naming the
 * problem; nothing is stored from a request that fails. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/ingest.h"
#include "common/clock.h"
#include "common/utf8.h"
#include "server/parse.h"
#include "server/server_internal.h"

static int status_of(int rc)
{
	switch (rc) {
	case -EINVAL:
		return 400;
	case -EFBIG:
	case -E2BIG:
		return 413;
	default:
		return 503;
	}
}

struct arg_labels {
	struct lset *ls;
	const char *const *skip;
	int err;
};

static void collect_label(void *ctx, const char *k, const char *v)
{
	struct arg_labels *a = ctx;

	for (const char *const *s = a->skip; *s; s++)
		if (!strcmp(k, *s))
			return;
	/* An empty value is the same as no label. */
	if (!a->err && *v)
		a->err = lset__set(a->ls, k, v);
}

/* from/until of an ingest (0 when absent): 0, or HTTP_ANSWERED with the
 * 400 in rep, or -ENOMEM. */
static int ingest_window(const struct http_request *req, struct http_reply *rep,
			 enum time_unit unit, int64_t now, int64_t *from, int64_t *until)
{
	const char *f = http_request__query(req, "from"), *u = http_request__query(req, "until");
	char err[256];

	*from = *until = 0;
	if ((f && parse_time_ms(f, unit, now, from, err, sizeof(err))) ||
	    (u && parse_time_ms(u, unit, now, until, err, sizeof(err))))
		return reply_error(rep, 400, "%s", err);
	if (*from && *until && *from > *until)
		return reply_error(rep, 400,
				   "from (%" PRId64 " ms) is after until (%" PRId64 " ms)", *from,
				   *until);
	return 0;
}

/* Refuses a time past SERVER_MAX_AHEAD_MS of the server's clock (what
 * names it: "the window [a, b) ms ends", "point 3 is"): 0, or
 * HTTP_ANSWERED with the 400 in rep, or -ENOMEM. */
static int check_ahead(struct http_reply *rep, int64_t ms, int64_t now, const char *what)
{
	if (ms <= now || ms - now <= SERVER_MAX_AHEAD_MS)
		return 0;
	return reply_error(rep, 400,
			   "%s %" PRId64 " s after the server's clock (%" PRId64
			   " ms): at most %lld s ahead are accepted -- check the sender's clock",
			   what, (ms - now) / MS_PER_SEC, now, SERVER_MAX_AHEAD_MS / MS_PER_SEC);
}

/* Every series of b in the request's project (project, NULL without
 * --auth), or in none: a label the server alone sets. */
static int set_project(struct ingest_batch *b, const char *project)
{
	size_t i;
	int err = 0;

	for (i = 0; !err && i < b->n; i++)
		err = lset__set(&b->series[i].labels, SERVER_PROJECT_LABEL, project ? project : "");
	return err;
}

/* Stores the batch in call's project, its series' count in *nseries.
 * key (NULL: none) makes the put idempotent: *dup is set when the store
 * had it already, and nothing is counted again. 0, or HTTP_ANSWERED with
 * the refusal or the store's error in rep, or a negative errno. */
static int put_batch(struct server *s, const struct server_call *call, struct http_reply *rep,
		     struct ingest_batch *b, const char *key, int64_t now, int *nseries, bool *dup)
{
	char what[96];
	int n, err;

	*nseries = 0;
	*dup = false;
	snprintf(what, sizeof(what), "the window [%" PRId64 ", %" PRId64 ") ms ends", b->start_ms,
		 b->end_ms);
	err = check_ahead(rep, b->end_ms, now, what);
	if (err)
		return err;
	err = set_project(b, call->project);
	if (err)
		return err;
	n = ingest_batch__windows(b);
	if (n < 0)
		return n;
	if (n) {
		b->windows[0].key = key;
		err = store__put_windows(s->store, b->windows, (size_t)n);
		server_note_put(s, err < 0 ? err : 0);
		if (err < 0)
			return reply_store_error(rep, call, "store the profile", err);
		*dup = err == 1;
	}
	if (!*dup)
		server_stats__ingested(s, b->samples, (uint64_t)n, 0);
	*nseries = n;
	return 0;
}

int api_ingest(struct server *s, const struct server_call *call, const struct http_request *req,
	       struct http_reply *rep)
{
	static const char *const skip[] = {"from", "until", "type", "key", NULL};
	struct ingest_batch b = {0};
	struct lset labels = {0};
	struct arg_labels al = {&labels, skip, 0};
	struct ingest_opts o = {0};
	const char *type = http_request__query(req, "type"), *key = http_request__query(req, "key");
	const char *body;
	size_t len;
	bool dup;
	char err[512];
	json_t *j;
	int rc, n;

	o.now_ms = (int64_t)wall_ms();
	rc = ingest_window(req, rep, TIME_MS, o.now_ms, &o.start_ms, &o.end_ms);
	if (rc)
		goto cleanup;
	http_request__each_query(req, collect_label, &al);
	rc = al.err;
	if (rc)
		goto cleanup;
	if (lset__check(&labels, err, sizeof(err))) {
		rc = reply_error(rep, 400, "%s", err);
		goto cleanup;
	}
	if (type &&
	    (!*type || !utf8_valid(type, strlen(type)) || strlen(type) > STORE_MAX_LABEL_VALUE)) {
		rc = reply_error(rep, 400,
				 "type must be a non-empty UTF-8 name of at most %d bytes",
				 STORE_MAX_LABEL_VALUE);
		goto cleanup;
	}
	if (key && (!*key || strlen(key) > STORE_MAX_PUT_KEY || !utf8_valid(key, strlen(key)))) {
		rc = reply_error(rep, 400,
				 "key must be a non-empty UTF-8 string of at most %d bytes",
				 STORE_MAX_PUT_KEY);
		goto cleanup;
	}
	o.labels = &labels;
	o.type = type;
	o.max_bytes = SERVER_MAX_DECOMPRESSED;
	o.max_heap = SERVER_MAX_UNPACKED;
	o.max_series = SERVER_MAX_SERIES;
	body = http_request__body(req, &len);
	rc = ingest__pprof(&b, body, len, &o, err, sizeof(err));
	if (rc) {
		rc = reply_error(rep, status_of(rc), "%s", err);
		goto cleanup;
	}
	rc = put_batch(s, call, rep, &b, key, o.now_ms, &n, &dup);
	if (rc)
		goto cleanup;
	j = json_pack("{sisIsb}", "series", n, "samples", (json_int_t)b.samples, "duplicate", dup);
	rc = reply_json(rep, j);
cleanup:
	ingest_batch__free(&b);
	lset__free(&labels);
	return rc;
}

int api_ingest_points(struct server *s, const struct server_call *call,
		      const struct http_request *req, struct http_reply *rep)
{
	struct ingest_points pts;
	int64_t now = (int64_t)wall_ms();
	const char *body;
	size_t len, i;
	char err[512];
	int rc;

	body = http_request__body(req, &len);
	rc = ingest_points__parse(&pts, body, len, SERVER_MAX_POINTS, err, sizeof(err));
	if (rc)
		return rc == -ENOMEM ? rc : reply_error(rep, status_of(rc), "%s", err);
	for (i = 0; i < pts.n && !rc; i++) {
		char what[48];

		snprintf(what, sizeof(what), "point %zu is", i);
		rc = check_ahead(rep, pts.p[i].ts_ms, now, what);
	}
	if (rc)
		goto cleanup;
	/* The request's project, as for windows (set_project). */
	for (i = 0; i < pts.n; i++) {
		rc = lset__set(&pts.labels[i], SERVER_PROJECT_LABEL,
			       call->project ? call->project : "");
		if (rc)
			goto cleanup;
		pts.p[i].labels = pts.labels[i].v;
		pts.p[i].nlabels = pts.labels[i].n;
	}
	if (pts.n) {
		rc = store__put_points(s->store, pts.p, pts.n);
		server_note_put(s, rc);
		if (rc) {
			rc = reply_store_error(rep, call, "store the points", rc);
			goto cleanup;
		}
	}
	server_stats__ingested(s, 0, 0, pts.n);
	rc = reply_json(rep, json_pack("{sI}", "points", (json_int_t)pts.n));
cleanup:
	ingest_points__free(&pts);
	return rc;
}

int api_ingest_spans(struct server *s, const struct server_call *call,
		     const struct http_request *req, struct http_reply *rep)
{
	struct ingest_spans in;
	int64_t now = (int64_t)wall_ms();
	const char *body;
	size_t len, i, k = 0;
	char err[512];
	int rc;

	body = http_request__body(req, &len);
	rc = ingest_spans__parse(&in, body, len, SERVER_MAX_SPANS, SERVER_MAX_SERIES, err,
				 sizeof(err));
	if (rc)
		return rc == -ENOMEM ? rc : reply_error(rep, status_of(rc), "%s", err);
	/* The request's project, as for points; each span's labels its
	 * series'. */
	for (i = 0; i < in.nseries && !rc; i++)
		rc = lset__set(&in.labels[i], SERVER_PROJECT_LABEL,
			       call->project ? call->project : "");
	if (rc)
		goto cleanup;
	for (i = 0; i < in.nseries; i++)
		for (k = in.first[i]; k < in.first[i + 1]; k++) {
			in.sp[k].labels = in.labels[i].v;
			in.sp[k].nlabels = in.labels[i].n;
		}
	for (k = 0; k < in.n; k++) {
		char what[64];

		rc = store_check_span(&in.sp[k], k, err, sizeof(err));
		if (rc) {
			rc = reply_error(rep, 400, "%s", err);
			goto cleanup;
		}
		snprintf(what, sizeof(what), "span %zu ends", k);
		rc = check_ahead(rep, in.sp[k].end_ns / NS_PER_MS, now, what);
		if (rc)
			goto cleanup;
	}
	if (in.n) {
		rc = store__put_spans(s->store, in.sp, in.n);
		server_note_put(s, rc);
		if (rc == -EINVAL) {
			rc = reply_error(rep, 400,
					 "the spans are past the store's bounds (docs/api.md)");
			goto cleanup;
		}
		if (rc) {
			rc = reply_store_error(rep, call, "store the spans", rc);
			goto cleanup;
		}
	}
	server_stats__spans(s, in.n);
	rc = reply_json(rep, json_pack("{sI}", "spans", (json_int_t)in.n));
cleanup:
	ingest_spans__free(&in);
	return rc;
}

/* The options of a Pyroscope ingest from its query arguments (format,
 * name, sampleRate, units, from, until) into labels and o: 0 when they are
 * good, else HTTP_ANSWERED with the 400 in rep, or a negative errno. */
static int pyroscope_opts(const struct http_request *req, struct http_reply *rep,
			  const char *format, struct lset *labels, struct ingest_opts *o)
{
	const char *rate = http_request__query(req, "sampleRate");
	const char *units = http_request__query(req, "units");
	long long hz = 100;
	char err[512];
	int rc;

	if (strcmp(format, "folded") && strcmp(format, "lines") && strcmp(format, "pprof"))
		return reply_error(rep, 400,
				   "format '%.40s' is not supported: use folded, lines or pprof",
				   format);
	rc = pyroscope_name__parse(http_request__query(req, "name"), labels, err, sizeof(err));
	/* A name without a type: a pprof's is its sample type's (Grafana's
	 * Node.js SDK sends wall and inuse_space profiles under one name),
	 * folded samples are cpu. */
	if (!rc && !lset__get(labels, "type") && strcmp(format, "pprof"))
		rc = lset__set(labels, "type", "cpu");
	if (!rc)
		rc = lset__check(labels, err, sizeof(err));
	if (rc)
		return rc == -ENOMEM ? rc : reply_error(rep, 400, "%s", err);
	if (rate && *rate) {
		char *end;

		errno = 0;
		hz = strtoll(rate, &end, 10);
		if (errno || *end || hz <= 0 || hz > NS_PER_SEC)
			return reply_error(rep, 400,
					   "sampleRate '%.40s' must be a positive integer (Hz)",
					   rate);
	}
	if (units && (!*units || strlen(units) > 64 || !utf8_valid(units, strlen(units))))
		return reply_error(rep, 400,
				   "units must be a short name (samples, objects, bytes...)");
	o->now_ms = (int64_t)wall_ms();
	rc = ingest_window(req, rep, TIME_PYROSCOPE_S, o->now_ms, &o->start_ms, &o->end_ms);
	if (rc)
		return rc;
	/* Pyroscope clients may send a point in time: make it a second. */
	if (o->start_ms && o->start_ms == o->end_ms)
		o->end_ms += 1000;
	o->labels = labels;
	o->type = lset__get(labels, "type");
	o->max_bytes = SERVER_MAX_DECOMPRESSED;
	o->max_heap = SERVER_MAX_UNPACKED;
	o->max_series = SERVER_MAX_SERIES;
	o->unit = units && *units ? units : "samples";
	o->period = NS_PER_SEC / hz;
	return 0;
}

/* Reads the body (or its multipart 'profile' part) in format into b;
 * answers as pyroscope_opts() does. */
static int pyroscope_read(const struct http_request *req, struct http_reply *rep,
			  const char *format, const struct ingest_opts *o, struct ingest_batch *b)
{
	const char *body, *stc = NULL;
	size_t len, stclen = 0;
	char err[512];
	int rc;

	body = http_request__body(req, &len);
	if (http_request__multipart(req)) {
		body = http_request__part(req, "profile", &len);
		stc = http_request__part(req, "sample_type_config", &stclen);
		if (!body)
			return reply_error(
				rep, 400,
				"the multipart body has no 'profile' part holding the pprof");
		if (strcmp(format, "pprof"))
			return reply_error(rep, 400,
					   "a multipart body holds a pprof: add format=pprof");
	}
	if (!strcmp(format, "pprof") && stc)
		rc = ingest__pprof_typed(b, body, len, stc, stclen, o, err, sizeof(err));
	else if (!strcmp(format, "pprof"))
		rc = ingest__pprof(b, body, len, o, err, sizeof(err));
	else
		rc = ingest__folded(b, body, len, !strcmp(format, "lines"), o, err, sizeof(err));
	if (rc)
		return rc == -ENOMEM ? rc : reply_error(rep, status_of(rc), "%s", err);
	return 0;
}

int api_pyroscope_ingest(struct server *s, const struct server_call *call,
			 const struct http_request *req, struct http_reply *rep)
{
	const char *format = http_request__query(req, "format");
	struct ingest_batch b = {0};
	struct lset labels = {0};
	struct ingest_opts o = {0};
	bool dup;
	int rc, n;

	if (!format || !*format)
		format = "folded";
	rc = pyroscope_opts(req, rep, format, &labels, &o);
	if (!rc)
		rc = pyroscope_read(req, rep, format, &o, &b);
	if (!rc)
		rc = put_batch(s, call, rep, &b, NULL, o.now_ms, &n, &dup);
	if (!rc)
		rep->content_type = HTTP_CONTENT_TEXT;
	ingest_batch__free(&b);
	lset__free(&labels);
	return rc;
}
