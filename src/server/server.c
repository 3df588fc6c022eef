/* server.c: `sonde server` as a library (server.h) on libmicrohttpd -- the
 * route table of docs/api.md, request bodies read up to each route's
 * limit (413 before reading when Content-Length says too much; past the
 * limit a chunked body is counted and dropped, never buffered),
 * multipart/form-data through MHD's post processor, the web UI from the
 * binary, /healthz, /metrics with the server's own statistics, and the
 * thread that expires old data every minute. Every route runs on one of
 * MHD's pool threads and answers JSON; a route's failure is a JSON error,
 * never a crash. Used by `sonde server` (src/cli/server.c) and `sonde run`. */
#include "server/server_internal.h"
#include "common/clock.h"
#include "common/prom.h"
#include "common/xalloc.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <microhttpd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "common/log.h"
#include "metrics/http.h"
#include "server/ui_assets.h"

static int api_healthz(struct req *rq, struct reply *rep);
static int api_metrics(struct req *rq, struct reply *rep);

static const struct route routes[] = {
	{"/api/v1/ingest", NULL, api_ingest, ROUTE_INGEST, 0, true, false},
	{"/api/v1/ingest/points", NULL, api_ingest_points, ROUTE_INGEST, 0, false, false},
	{"/ingest", NULL, api_pyroscope_ingest, ROUTE_INGEST, 0, false, true},
	{"/api/v1/alerts", api_alerts_get, api_alerts_post, ROUTE_OTHER, SERVER_MAX_ALERT_BODY,
	 false, false},
	{"/api/v1/labels", api_labels, NULL, ROUTE_QUERY, 0, false, false},
	{"/api/v1/label/values", api_label_values, NULL, ROUTE_QUERY, 0, false, false},
	{"/api/v1/flamegraph", api_flamegraph, NULL, ROUTE_QUERY, 0, false, false},
	{"/api/v1/diff", api_diff, NULL, ROUTE_QUERY, 0, false, false},
	{"/api/v1/top", api_top, NULL, ROUTE_QUERY, 0, false, false},
	{"/api/v1/timeseries", api_timeseries, NULL, ROUTE_QUERY, 0, false, false},
	{"/api/v1/points", api_points, NULL, ROUTE_QUERY, 0, false, false},
	{"/api/v1/pprof", api_pprof, NULL, ROUTE_QUERY, 0, false, false},
	{"/api/v1/speedscope", api_speedscope, NULL, ROUTE_QUERY, 0, false, false},
	{"/pyroscope/render", api_pyroscope_render, NULL, ROUTE_QUERY, 0, false, false},
	{"/pyroscope/render-diff", api_pyroscope_render_diff, NULL, ROUTE_QUERY, 0, false, false},
	{"/healthz", api_healthz, NULL, ROUTE_OTHER, 0, false, false},
	{"/metrics", api_metrics, NULL, ROUTE_OTHER, 0, false, false},
};

#define NROUTES ARRAY_SIZE(routes)
#define STATS_UI NROUTES
#define STATS_OTHER (NROUTES + 1)
#define NSTATS (NROUTES + 2)

static const double buckets[STATS_NBUCKETS - 1] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
						   0.25,  0.5,	  1,	 2.5,  5,     10};

const char *req__arg(const struct req *rq, const char *key)
{
	return MHD_lookup_connection_value(rq->conn, MHD_GET_ARGUMENT_KIND, key);
}

const char *req__header(const struct req *rq, const char *name)
{
	return MHD_lookup_connection_value(rq->conn, MHD_HEADER_KIND, name);
}

struct args_ctx {
	void (*fn)(void *ctx, const char *k, const char *v);
	void *ctx;
};

static enum MHD_Result args_iter(void *cls, enum MHD_ValueKind kind, const char *key,
				 const char *value)
{
	struct args_ctx *a = cls;

	a->fn(a->ctx, key, value ? value : "");
	return MHD_YES;
}

void req__args(const struct req *rq, void (*fn)(void *ctx, const char *k, const char *v), void *ctx)
{
	struct args_ctx a = {fn, ctx};

	MHD_get_connection_values(rq->conn, MHD_GET_ARGUMENT_KIND, args_iter, &a);
}

int reply_json(struct reply *rep, json_t *j)
{
	struct sbuf b = {0};
	int err;

	if (!j)
		return -ENOMEM;
	err = sbuf__json(&b, j);
	json_decref(j);
	if (err) {
		sbuf__free(&b);
		return err;
	}
	return reply_sbuf(rep, NULL, &b);
}

int reply_sbuf(struct reply *rep, const char *content_type, struct sbuf *b)
{
	char *body;
	size_t len;

	body = sbuf__steal(b, &len);
	if (!body)
		return -ENOMEM;
	return reply_take(rep, content_type, body, len);
}

int reply_take(struct reply *rep, const char *content_type, char *body, size_t len)
{
	free(rep->body);
	rep->body = body;
	rep->len = len;
	rep->content_type = content_type;
	return 0;
}

int reply_error(struct reply *rep, int status, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;
	json_t *j;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	j = json_object();
	if (!j || json_object_set_new(j, "error", json_string_lossy(msg))) {
		json_decref(j);
		return -ENOMEM;
	}
	rep->status = status;
	return reply_json(rep, j);
}

int reply_store_error(struct reply *rep, const char *what, int err)
{
	int e = err < 0 ? -err : err;

	/* The store checks what it is given too: a refusal is the request's. */
	if (err == -EINVAL)
		return reply_error(rep, 400, "can't %s: the store refused the request as invalid",
				   what);
	pr_warn("server: can't %s: %s -- check the store (--data directory, disk space)", what,
		strerror(e));
	return reply_error(rep, err == -ENOMEM || err == -EBUSY ? 503 : 500,
			   "can't %s: %s -- the store failed; retry later", what, strerror(e));
}

void server_stats__ingested(struct server *s, uint64_t samples, uint64_t windows, uint64_t points)
{
	pthread_mutex_lock(&s->stats.lock);
	s->stats.ingest_samples += samples;
	s->stats.ingest_windows += windows;
	s->stats.ingest_points += points;
	pthread_mutex_unlock(&s->stats.lock);
}

static void stats__count(struct server *s, struct req *rq, int status)
{
	struct route_stats *rs = &s->stats.routes[rq->route_idx];
	int i;

	pthread_mutex_lock(&s->stats.lock);
	for (i = 0; i < STATS_MAX_CODES; i++) {
		if (rs->codes[i] == status || !rs->codes[i]) {
			rs->codes[i] = status;
			rs->counts[i]++;
			break;
		}
	}
	if (rq->route && rq->route->kind == ROUTE_QUERY) {
		double secs = (double)(mono_ns() - rq->start_ns) / 1e9;

		for (i = 0; i < STATS_NBUCKETS - 1 && secs > buckets[i]; i++)
			;
		rs->buckets[i]++;
		rs->nobs++;
		rs->sum += secs;
	}
	if (rq->route && rq->route->kind == ROUTE_INGEST)
		s->stats.ingest_bytes += rq->seen;
	pthread_mutex_unlock(&s->stats.lock);
}

static const char *stats__route_name(size_t i)
{
	if (i < NROUTES)
		return routes[i].path;
	return i == STATS_UI ? "ui" : "other";
}

static void collect_requests(struct server *s, struct prom_out *o)
{
	char code[16];
	const char *l[] = {"route", NULL, "code", code, NULL};

	prom__family(o, "sonde_server_requests_total", "counter",
		     "HTTP requests answered, by route and status code.");
	for (size_t i = 0; i < NSTATS; i++)
		for (int c = 0; c < STATS_MAX_CODES && s->stats.routes[i].codes[c]; c++) {
			l[1] = stats__route_name(i);
			snprintf(code, sizeof(code), "%d", s->stats.routes[i].codes[c]);
			prom__sample(o, "sonde_server_requests_total", l,
				     (double)s->stats.routes[i].counts[c]);
		}
	prom__family(o, "sonde_server_query_duration_seconds", "histogram",
		     "Time to answer a query route.");
	for (size_t i = 0; i < NROUTES; i++) {
		const struct route_stats *rs = &s->stats.routes[i];
		const char *rl[] = {"route", routes[i].path, NULL};
		uint64_t cum[STATS_NBUCKETS - 1], sum = 0;

		if (routes[i].kind != ROUTE_QUERY)
			continue;
		for (int k = 0; k < STATS_NBUCKETS - 1; k++)
			cum[k] = sum += rs->buckets[k];
		prom__histogram(o, "sonde_server_query_duration_seconds", rl, buckets, cum,
				STATS_NBUCKETS - 1, rs->nobs, rs->sum);
	}
}

static int api_metrics(struct req *rq, struct reply *rep)
{
	struct server *s = rq->srv;
	struct store_stats st;
	struct prom_text t;
	char *body;
	size_t len;

	memset(&st, 0, sizeof(st));
	store__stats(s->store, &st);
	if (prom_text__open(&t))
		return -ENOMEM;
	pthread_mutex_lock(&s->stats.lock);
	collect_requests(s, &t.out);
	prom__metric(&t.out, "sonde_server_ingest_samples_total", "counter",
		     "Profile samples (distinct stacks with a value) ingested.",
		     (double)s->stats.ingest_samples);
	prom__metric(&t.out, "sonde_server_ingest_windows_total", "counter",
		     "Profile windows (one series over one time range) ingested.",
		     (double)s->stats.ingest_windows);
	prom__metric(&t.out, "sonde_server_ingest_points_total", "counter",
		     "Metric points ingested.", (double)s->stats.ingest_points);
	prom__metric(&t.out, "sonde_server_ingest_received_bytes_total", "counter",
		     "Request body bytes received by the ingest routes.",
		     (double)s->stats.ingest_bytes);
	prom__metric(&t.out, "sonde_server_expire_runs_total", "counter",
		     "Retention passes run (every minute).", (double)s->stats.expire_runs);
	prom__metric(&t.out, "sonde_server_expire_errors_total", "counter",
		     "Retention passes the store failed.", (double)s->stats.expire_errors);
	prom__metric(&t.out, "sonde_server_retention_seconds", "gauge", "How long data is kept.",
		     (double)s->retention_ms / 1000);
	prom__metric(&t.out, "sonde_server_start_time_seconds", "gauge",
		     "When the server started, since the epoch.", (double)s->stats.start_ms / 1000);
	pthread_mutex_unlock(&s->stats.lock);
	prom__metric(&t.out, "sonde_server_store_series", "gauge",
		     "Series (label sets) in the store.", (double)st.series);
	prom__metric(&t.out, "sonde_server_store_windows", "gauge", "Profile windows in the store.",
		     (double)st.windows);
	prom__metric(&t.out, "sonde_server_store_stacks", "gauge", "Distinct stacks in the store.",
		     (double)st.stacks);
	prom__metric(&t.out, "sonde_server_store_functions", "gauge",
		     "Distinct function names in the store.", (double)st.functions);
	prom__metric(&t.out, "sonde_server_store_points", "gauge", "Metric points in the store.",
		     (double)st.points);
	prom__metric(&t.out, "sonde_server_store_samples", "gauge",
		     "Sample rows of the windows in the store.", (double)st.samples);
	prom__metric(&t.out, "sonde_server_store_bytes", "gauge",
		     "Size of the store's files (0 if unknown).", (double)st.bytes_on_disk);
	body = prom_text__close(&t, &len);
	if (!body)
		return -ENOMEM;
	return reply_take(rep, PROM_CONTENT_TYPE, body, len);
}

static void healthz_name(void *ctx, const char *s)
{
}

static int api_healthz(struct req *rq, struct reply *rep)
{
	struct store_query q = {.from_ms = 0, .until_ms = 1};
	struct sbuf b = {0};
	int err;

	/* A read the store must answer without data: proves it is there. */
	err = store__label_names(rq->srv->store, &q, healthz_name, NULL);
	if (err) {
		rep->status = 503;
		sbuf__printf(&b, "store failing: %s\n", strerror(-err));
	} else {
		sbuf__puts(&b, "ok\n");
	}
	return reply_sbuf(rep, HTTP_CONTENT_TEXT, &b);
}

/* MHD's diagnostics (resets, timeouts) are routine: debug level. */
static void mhd_log(void *cls, const char *fmt, va_list ap)
{
	char buf[512];
	size_t n;

	if (!log_enabled(LOG_DEBUG))
		return;
	vsnprintf(buf, sizeof(buf), fmt, ap);
	n = strlen(buf);
	while (n && buf[n - 1] == '\n')
		buf[--n] = '\0';
	pr_debug("server: http: %s", buf);
}

static enum MHD_Result send_reply(struct req *rq, struct reply *rep, const char *allow)
{
	struct MHD_Response *r;
	enum MHD_Result ret;
	int status = rep->status ? rep->status : MHD_HTTP_OK;

	r = MHD_create_response_from_buffer(
		rep->body ? rep->len : 0, rep->body ? rep->body : (void *)"",
		rep->body ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
	if (!r) {
		free(rep->body);
		rep->body = NULL;
		return MHD_NO;
	}
	rep->body = NULL;
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE,
				rep->content_type ? rep->content_type : HTTP_CONTENT_JSON);
	if (rep->disposition[0])
		MHD_add_response_header(r, "Content-Disposition", rep->disposition);
	if (allow)
		MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, allow);
	/* A sender of an oversized or broken body is not one to keep. */
	if (rq->too_big || rq->pp_failed)
		MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close");
	MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
	ret = MHD_queue_response(rq->conn, (unsigned)status, r);
	MHD_destroy_response(r);
	rq->status = status;
	rq->answered = true;
	stats__count(rq->srv, rq, status);
	return ret;
}

static enum MHD_Result send_error(struct req *rq, int status, const char *allow, const char *fmt,
				  ...) __attribute__((format(printf, 4, 5)));

static enum MHD_Result send_error(struct req *rq, int status, const char *allow, const char *fmt,
				  ...)
{
	struct reply rep = {0};
	char msg[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (reply_error(&rep, status, "%s", msg))
		return MHD_NO;
	return send_reply(rq, &rep, allow);
}

/* Runs the route for the request, turning a failure into a 500. */
static enum MHD_Result run_route(struct req *rq, route_fn fn)
{
	struct reply rep = {0};
	int err;

	err = fn(rq, &rep);
	if (err) {
		free(rep.body);
		memset(&rep, 0, sizeof(rep));
		pr_warn("server: %s %s failed: %s", rq->method, rq->url, strerror(-err));
		if (reply_error(&rep, 500, "internal error answering %s: %s", rq->url,
				strerror(-err)))
			return MHD_NO;
	}
	return send_reply(rq, &rep, NULL);
}

static enum MHD_Result serve_ui(struct req *rq)
{
	const struct ui_asset *a = NULL;
	const char *url = rq->url;
	struct MHD_Response *r;
	enum MHD_Result ret;

	if (!strcmp(url, "/") || !strcmp(url, "/ui") || !strcmp(url, "/ui/"))
		a = ui_asset_find("/index.html");
	else if (!strncmp(url, "/ui/", 4))
		a = ui_asset_find(url + 3);
	else
		a = ui_asset_find(url);
	/* The UI's own paths (/ui/flamegraph, ...) are its index page. */
	if (!a && !strncmp(url, "/ui/", 4) && !strchr(strrchr(url, '/'), '.'))
		a = ui_asset_find("/index.html");
	if (!a)
		return send_error(rq, MHD_HTTP_NOT_FOUND, NULL,
				  "no such endpoint or file: %s -- the API is under /api/v1 "
				  "(docs/api.md), the UI at /",
				  url);
	r = MHD_create_response_from_buffer(a->len, (void *)a->data, MHD_RESPMEM_PERSISTENT);
	if (!r)
		return MHD_NO;
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, a->content_type);
	MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
	ret = MHD_queue_response(rq->conn, MHD_HTTP_OK, r);
	MHD_destroy_response(r);
	rq->status = MHD_HTTP_OK;
	rq->answered = true;
	stats__count(rq->srv, rq, MHD_HTTP_OK);
	return ret;
}

/* The media type of a Content-Type header, lowercased, without
 * parameters, into out. */
static void media_type(const char *ct, char *out, size_t outlen)
{
	size_t o = 0;

	while (ct && (*ct == ' ' || *ct == '\t'))
		ct++;
	for (; ct && *ct && *ct != ';' && *ct != ' ' && o + 1 < outlen; ct++)
		out[o++] = (char)((*ct >= 'A' && *ct <= 'Z') ? *ct + 32 : *ct);
	out[o] = '\0';
}

static enum MHD_Result post_iter(void *cls, enum MHD_ValueKind kind, const char *key,
				 const char *filename, const char *content_type,
				 const char *transfer_encoding, const char *data, uint64_t off,
				 size_t size)
{
	struct req *rq = cls;
	uint64_t limit = rq->route->max_body ? rq->route->max_body : rq->srv->max_body;

	if (key && !strcmp(key, "sample_type_config")) {
		rq->have_stc = true;
		if (rq->stc.len + size > SERVER_MAX_STC) {
			rq->too_big = true;
			return MHD_NO;
		}
		if (size && sbuf__add(&rq->stc, data, size))
			return MHD_NO;
		return MHD_YES;
	}
	if (!key || strcmp(key, "profile"))
		return MHD_YES;
	rq->have_part = true;
	if (rq->part.len + size > limit) {
		rq->too_big = true;
		return MHD_NO;
	}
	if (size && sbuf__add(&rq->part, data, size))
		return MHD_NO;
	return MHD_YES;
}

/* The first call for a request: route, method and limits, before any of
 * the body is read. Returns MHD_YES with nothing queued to read the body. */
static enum MHD_Result begin(struct server *s, struct req *rq)
{
	const struct route *rt = NULL;
	bool get = !strcmp(rq->method, MHD_HTTP_METHOD_GET);
	bool head = !strcmp(rq->method, MHD_HTTP_METHOD_HEAD);
	bool post = !strcmp(rq->method, MHD_HTTP_METHOD_POST);
	const char *cl, *ct;
	uint64_t limit;
	char mt[128];
	size_t i;

	for (i = 0; i < NROUTES; i++)
		if (!strcmp(routes[i].path, rq->url)) {
			rt = &routes[i];
			break;
		}
	rq->route = rt;
	rq->route_idx = rt ? (int)i : (int)STATS_OTHER;
	rq->head = head;
	if (!rt) {
		if (get || head) {
			rq->route_idx = (int)STATS_UI;
			return serve_ui(rq);
		}
		return send_error(rq, MHD_HTTP_NOT_FOUND, NULL,
				  "no such endpoint: %s %s -- see docs/api.md", rq->method,
				  rq->url);
	}
	if (((get || head) && !rt->get) || (post && !rt->post) || (!get && !head && !post))
		return send_error(rq, MHD_HTTP_METHOD_NOT_ALLOWED,
				  rt->get && rt->post ? "GET, HEAD, POST"
				  : rt->get	      ? "GET, HEAD"
						      : "POST",
				  "method %s is not allowed on %s: use %s", rq->method, rt->path,
				  rt->get && rt->post ? "GET or POST"
				  : rt->get	      ? "GET"
						      : "POST");
	if (!post)
		return run_route(rq, rt->get);

	limit = rt->max_body ? rt->max_body : s->max_body;
	cl = req__header(rq, MHD_HTTP_HEADER_CONTENT_LENGTH);
	if (cl) {
		char *end;
		unsigned long long n;

		errno = 0;
		n = strtoull(cl, &end, 10);
		if (!errno && end != cl && n > limit)
			return send_error(rq, MHD_HTTP_CONTENT_TOO_LARGE, NULL,
					  "the body of %llu bytes is over the limit of %" PRIu64
					  " bytes for %s -- send smaller windows",
					  n, limit, rt->path);
	}
	ct = req__header(rq, MHD_HTTP_HEADER_CONTENT_TYPE);
	media_type(ct, mt, sizeof(mt));
	if (rt->binary_body && ct && strcmp(mt, "application/octet-stream") &&
	    strcmp(mt, "application/x-protobuf") && strcmp(mt, "application/vnd.google.protobuf") &&
	    strcmp(mt, "application/protobuf"))
		return send_error(rq, MHD_HTTP_UNSUPPORTED_MEDIA_TYPE, NULL,
				  "Content-Type '%.80s' is not a pprof body: send "
				  "application/octet-stream or application/x-protobuf",
				  ct);
	if (!rt->binary_body && !rt->multipart && ct && *mt && strcmp(mt, "application/json"))
		return send_error(rq, MHD_HTTP_UNSUPPORTED_MEDIA_TYPE, NULL,
				  "Content-Type '%.80s' is not JSON: send application/json", ct);
	if (rt->multipart && !strcmp(mt, "multipart/form-data")) {
		rq->multipart = true;
		rq->pp = MHD_create_post_processor(rq->conn, 64 * 1024, post_iter, rq);
		if (!rq->pp)
			return send_error(rq, MHD_HTTP_BAD_REQUEST, NULL,
					  "bad multipart/form-data body: the Content-Type has "
					  "no usable boundary (2 to 70 characters)");
	}
	return MHD_YES;
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *conn, const char *url,
			      const char *method, const char *version, const char *upload_data,
			      size_t *upload_data_size, void **con_cls)
{
	struct server *s = cls;
	struct req *rq = *con_cls;
	uint64_t limit;

	if (!rq) {
		rq = calloc(1, sizeof(*rq));
		if (!rq)
			return MHD_NO;
		*con_cls = rq;
		rq->srv = s;
		rq->conn = conn;
		rq->url = url;
		rq->method = method;
		rq->start_ns = mono_ns();
		return begin(s, rq);
	}
	if (rq->answered) {
		/* Answered early (413, 415...): the rest is not ours to read. */
		*upload_data_size = 0;
		return MHD_YES;
	}
	limit = rq->route->max_body ? rq->route->max_body : s->max_body;
	if (*upload_data_size) {
		size_t n = *upload_data_size;

		*upload_data_size = 0;
		rq->seen += n;
		if (rq->too_big || rq->pp_failed) {
			/* Counted and dropped; a sender that never stops is cut
			 * off rather than read forever. */
			return rq->seen > 16 * limit ? MHD_NO : MHD_YES;
		}
		if (rq->seen > limit) {
			rq->too_big = true;
			free(rq->body);
			rq->body = NULL;
			sbuf__free(&rq->part);
			sbuf__free(&rq->stc);
			return MHD_YES;
		}
		if (rq->multipart) {
			if (MHD_post_process(rq->pp, upload_data, n) != MHD_YES)
				rq->pp_failed = true;
			return MHD_YES;
		}
		if (rq->len + n > rq->cap) {
			size_t cap = rq->cap ? rq->cap : 64 * 1024;
			char *nb;

			while (cap < rq->len + n)
				cap *= 2;
			if (cap > limit)
				cap = limit;
			nb = realloc(rq->body, cap);
			if (!nb)
				return MHD_NO;
			rq->body = nb;
			rq->cap = cap;
		}
		memcpy(rq->body + rq->len, upload_data, n);
		rq->len += n;
		return MHD_YES;
	}
	if (rq->too_big)
		return send_error(rq, MHD_HTTP_CONTENT_TOO_LARGE, NULL,
				  "the body is over the limit of %" PRIu64 " bytes for %s", limit,
				  rq->route->path);
	if (rq->pp_failed)
		return send_error(rq, MHD_HTTP_BAD_REQUEST, NULL,
				  "malformed multipart/form-data body");
	return run_route(rq, rq->route->post);
}

static void completed(void *cls, struct MHD_Connection *conn, void **con_cls,
		      enum MHD_RequestTerminationCode toe)
{
	struct req *rq = *con_cls;

	if (!rq)
		return;
	if (rq->pp)
		MHD_destroy_post_processor(rq->pp);
	sbuf__free(&rq->part);
	sbuf__free(&rq->stc);
	free(rq->body);
	free(rq);
	*con_cls = NULL;
}

static void *expirer_main(void *arg)
{
	struct server *s = arg;

	pthread_mutex_lock(&s->lock);
	while (!s->stopping) {
		struct timespec ts;
		int err;

		pthread_mutex_unlock(&s->lock);
		err = store__expire(s->store, (int64_t)wall_ms() - s->retention_ms);
		if (err)
			pr_warn("server: can't expire data older than the retention: %s -- "
				"check the store",
				strerror(-err));
		pthread_mutex_lock(&s->stats.lock);
		s->stats.expire_runs++;
		s->stats.expire_errors += err != 0;
		pthread_mutex_unlock(&s->stats.lock);

		pthread_mutex_lock(&s->lock);
		clock_gettime(CLOCK_MONOTONIC, &ts);
		ts.tv_sec += SERVER_EXPIRE_PERIOD_S;
		while (!s->stopping && pthread_cond_timedwait(&s->cond, &s->lock, &ts) != ETIMEDOUT)
			;
	}
	pthread_mutex_unlock(&s->lock);
	return NULL;
}

struct server *server__start(const struct server_opts *opts)
{
	const char *listen = opts->listen ? opts->listen : SERVER_DEFAULT_LISTEN;
	struct server *s = calloc(1, sizeof(*s));
	pthread_condattr_t ca;
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	unsigned threads = opts->threads ? opts->threads : (ncpu > 0 ? (unsigned)ncpu : 1);
	int fd = -1, e = 0;

	if (!s) {
		errno = ENOMEM;
		return NULL;
	}
	pthread_mutex_init(&s->lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&s->cond, &ca);
	pthread_condattr_destroy(&ca);
	pthread_mutex_init(&s->stats.lock, NULL);
	s->stats.start_ms = (int64_t)wall_ms();
	s->store = opts->store;
	s->retention_ms = opts->retention_ms > 0 ? opts->retention_ms : SERVER_DEFAULT_RETENTION_MS;
	s->max_body = opts->max_body_bytes ? opts->max_body_bytes : SERVER_DEFAULT_MAX_BODY;
	if (!s->store) {
		pr_err("can't start the server: no store");
		e = EINVAL;
		goto fail;
	}
	s->stats.routes = calloc(NSTATS, sizeof(*s->stats.routes));
	s->alerts = alert_state__new();
	if (!s->stats.routes || !s->alerts) {
		e = ENOMEM;
		goto fail;
	}
	fd = metrics_listen(listen, "the server", &s->port);
	if (fd < 0) {
		e = -fd;
		goto fail;
	}
	s->daemon =
		MHD_start_daemon(MHD_USE_AUTO_INTERNAL_THREAD | MHD_USE_ERROR_LOG, 0, NULL, NULL,
				 handle, s, MHD_OPTION_LISTEN_SOCKET, fd,
				 MHD_OPTION_THREAD_POOL_SIZE, threads, MHD_OPTION_CONNECTION_LIMIT,
				 (unsigned)SERVER_MAX_CONNECTIONS, MHD_OPTION_CONNECTION_TIMEOUT,
				 (unsigned)SERVER_TIMEOUT_S, MHD_OPTION_CONNECTION_MEMORY_LIMIT,
				 (size_t)(128 * 1024), MHD_OPTION_NOTIFY_COMPLETED, completed, s,
				 MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL, MHD_OPTION_END);
	if (!s->daemon) {
		e = errno ? errno : EIO;
		pr_err("can't start the server on %s: %s", listen, strerror(e));
		close(fd);
		goto fail;
	}
	if (pthread_create(&s->expirer, NULL, expirer_main, s)) {
		e = EAGAIN;
		pr_err("can't start the retention thread: %s", strerror(e));
		goto fail;
	}
	s->expirer_running = true;
	return s;
fail:
	server__stop(s);
	errno = e;
	return NULL;
}

int server__port(const struct server *s)
{
	return s->port;
}

void server__stop(struct server *s)
{
	if (!s)
		return;
	if (s->expirer_running) {
		pthread_mutex_lock(&s->lock);
		s->stopping = true;
		pthread_cond_broadcast(&s->cond);
		pthread_mutex_unlock(&s->lock);
		pthread_join(s->expirer, NULL);
	}
	if (s->daemon)
		MHD_stop_daemon(s->daemon);
	alert_state__free(s->alerts);
	free(s->stats.routes);
	pthread_mutex_destroy(&s->stats.lock);
	pthread_cond_destroy(&s->cond);
	pthread_mutex_destroy(&s->lock);
	free(s);
}
