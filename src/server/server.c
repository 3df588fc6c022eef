/* server.c: `sonde server` as a library (server.h) -- the route table of
 * docs/api.md on the HTTP server of net/http.h (which reads bodies up to
 * each route's limit, takes multipart bodies apart and answers 404, 405,
 * 413 and 415 itself, as JSON), the web UI from the binary for every other
 * GET, /healthz, /metrics with the server's own statistics, and the thread
 * that expires old data every minute. With --auth, a request's token is
 * checked on its head, before its body is read. Every route runs on one of
 * the HTTP server's pool threads -- the queries on threads of their own,
 * within the query timeout, so that /healthz and ingest never wait behind
 * them -- and answers JSON unless it says otherwise; a route's failure is
 * a JSON error, never a crash. Used by `sonde server`
 * (src/cli/server.c) and `sonde run`. */
#include "server/server_internal.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/duration.h"
#include "common/log.h"
#include "common/prom.h"
#include "common/xalloc.h"
#include "auth/tokens.h"
#include "server/tsp.h"
#include "server/ui_assets.h"

enum route_kind { ROUTE_INGEST, ROUTE_QUERY, ROUTE_OTHER };

struct server_route {
	const char *path;
	server_route_fn get, post;
	enum route_kind kind;
	uint64_t max_body;	       /* POST; 0: the server's */
	const char *const *body_types; /* accepted POST bodies; NULL: any */
	const char *body_types_hint;   /* the 415's */
	const struct http_part *parts; /* of a multipart body */
	bool prefix;		       /* and every path under it, any method */
};

/* A route's context for the HTTP server: which entry of the table. */
struct route_slot {
	struct server *srv;
	size_t idx;
};

static int api_healthz(struct server *s, const struct server_call *call,
		       const struct http_request *req, struct http_reply *rep);
static int api_metrics(struct server *s, const struct server_call *call,
		       const struct http_request *req, struct http_reply *rep);
static int api_tsp(struct server *s, const struct server_call *call, const struct http_request *req,
		   struct http_reply *rep);

static const char *const pprof_types[] = {"application/octet-stream", "application/x-protobuf",
					  "application/vnd.google.protobuf", "application/protobuf",
					  NULL};
static const char *const json_types[] = {"application/json", NULL};
#define PPROF_BODY                                                                                 \
	.body_types = pprof_types,                                                                 \
	.body_types_hint = "a pprof body: send application/octet-stream or application/x-protobuf"
#define JSON_BODY .body_types = json_types, .body_types_hint = "JSON: send application/json"
/* Pyroscope's multipart ingest: the pprof, and its sample_type_config. */
static const struct http_part pyroscope_parts[] = {
	{"profile", 0},
	{"sample_type_config", SERVER_MAX_STC},
	{NULL, 0},
};

#define QUERY(p, fn)                                                                               \
	{                                                                                          \
		.path = p, .get = fn, .kind = ROUTE_QUERY                                          \
	}

static const struct server_route routes[] = {
	{.path = "/api/v1/ingest", .post = api_ingest, .kind = ROUTE_INGEST, PPROF_BODY},
	{.path = "/api/v1/ingest/points",
	 .post = api_ingest_points,
	 .kind = ROUTE_INGEST,
	 JSON_BODY},
	{.path = "/api/v1/ingest/spans",
	 .post = api_ingest_spans,
	 .kind = ROUTE_INGEST,
	 .max_body = SERVER_MAX_SPANS_BODY,
	 JSON_BODY},
	{.path = "/ingest",
	 .post = api_pyroscope_ingest,
	 .kind = ROUTE_INGEST,
	 .parts = pyroscope_parts},
	{.path = "/api/v1/alerts",
	 .get = api_alerts_get,
	 .post = api_alerts_post,
	 .kind = ROUTE_OTHER,
	 .max_body = SERVER_MAX_ALERT_BODY,
	 JSON_BODY},
	QUERY("/api/v1/labels", api_labels),
	QUERY("/api/v1/label/values", api_label_values),
	QUERY("/api/v1/totals", api_totals),
	QUERY("/api/v1/flamegraph", api_flamegraph),
	QUERY("/api/v1/diff", api_diff),
	QUERY("/api/v1/top", api_top),
	QUERY("/api/v1/timeseries", api_timeseries),
	QUERY("/api/v1/points", api_points),
	QUERY("/api/v1/gpu/timeline", api_gpu_timeline),
	QUERY("/api/v1/pprof", api_pprof),
	QUERY("/api/v1/speedscope", api_speedscope),
	QUERY("/pyroscope/render", api_pyroscope_render),
	QUERY("/pyroscope/render-diff", api_pyroscope_render_diff),
	{.path = TSP_PREFIX,
	 .get = api_tsp,
	 .post = api_tsp,
	 .kind = ROUTE_QUERY,
	 .max_body = TSP_MAX_BODY,
	 JSON_BODY,
	 .prefix = true},
	{.path = "/healthz", .get = api_healthz, .kind = ROUTE_OTHER},
	{.path = "/metrics", .get = api_metrics, .kind = ROUTE_OTHER},
};

#define NROUTES ARRAY_SIZE(routes)
#define STATS_UI NROUTES
#define STATS_OTHER (NROUTES + 1)
#define NSTATS (NROUTES + 2)

static const double buckets[STATS_NBUCKETS - 1] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
						   0.25,  0.5,	  1,	 2.5,  5,     10};

/* ---- answers ---- */

int reply_json(struct http_reply *rep, json_t *j)
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
	return reply_sbuf(rep, HTTP_CONTENT_JSON, &b);
}

int reply_sbuf(struct http_reply *rep, const char *content_type, struct sbuf *b)
{
	char *body;
	size_t len;

	body = sbuf__steal(b, &len);
	if (!body)
		return -ENOMEM;
	return reply_take(rep, content_type, body, len);
}

int reply_take(struct http_reply *rep, const char *content_type, char *body, size_t len)
{
	free(rep->body);
	rep->body = body;
	rep->len = len;
	rep->content_type = content_type;
	return 0;
}

int reply_error(struct http_reply *rep, int status, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;
	int err;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	err = http_reply__message(rep, status, true, msg);
	return err ? err : HTTP_ANSWERED;
}

int reply_store_error(struct http_reply *rep, const struct server_call *call, const char *what,
		      int err)
{
	int e = err < 0 ? -err : err;

	/* The store checks what it is given too: a refusal is the request's. */
	if (err == -EINVAL)
		return reply_error(rep, 400, "can't %s: the store refused the request as invalid",
				   what);
	/* The query ran past --query-timeout (a costly regex over many
	 * series, a long range): stopped, so that it holds no thread. */
	if (err == -ETIMEDOUT) {
		char limit[32];

		duration_format(limit, sizeof(limit), call->timeout_ms);
		return reply_error(rep, 503,
				   "can't %s: the query ran past its time limit of %s (sonde "
				   "server --query-timeout) and was stopped -- narrow the selector "
				   "(a regex matched against every series costs the most) or the "
				   "time range",
				   what, limit);
	}
	/* The store is away (ClickHouse unreachable or overloaded): the client
	 * keeps what it has and asks again. */
	if (err == -EAGAIN) {
		http_reply__header(rep, "Retry-After", SERVER_STORE_RETRY_AFTER);
		return reply_error(rep, 503, "can't %s: the store is unavailable; retry later",
				   what);
	}
	/* A project at one of its bounds (store_quota): nothing was written,
	 * and nothing new of it is until some of its data expires or the
	 * bound is raised. Said once per 10 s in the log, in full in the
	 * answer. */
	if (err == -EDQUOT) {
		static struct log_limit quota;
		const struct store_refusal *r = store_last_refusal();
		const char *what_bound = r->bound == STORE_BOUND_SERIES ? "series" : "names";
		const char *unit =
			r->bound == STORE_BOUND_SERIES ? "series" : "bytes of function names";
		unsigned long long skipped = 0;
		char who[96];

		if (*r->project)
			snprintf(who, sizeof(who), "project '%s'", r->project);
		else
			snprintf(who, sizeof(who), "the store");
		if (log_limit__take(&quota, 10000, &skipped))
			pr_warn("server: can't %s: %s is at its bound of %llu %s (--max-%s) -- "
				"refused (%llu more refusals in the last 10 s)",
				what, who, (unsigned long long)r->max, unit, what_bound, skipped);
		return reply_error(rep, 507,
				   "can't %s: it would take %s past its bound of %llu %s (sonde "
				   "server --max-%s): it holds %llu, this request adds %llu -- "
				   "nothing new is stored for it until some of its data expires "
				   "or the bound is raised",
				   what, who, (unsigned long long)r->max, unit, what_bound,
				   (unsigned long long)r->have, (unsigned long long)r->more);
	}
	/* A full disk is an outage too: nothing was written, and the same
	 * request succeeds once there is room (the store logged it). */
	if (err == -ENOSPC) {
		static struct log_limit full;
		unsigned long long skipped = 0;

		if (log_limit__take(&full, 10000, &skipped))
			pr_warn("server: can't %s: %s -- free space on the store's disk (%llu more "
				"refused in the last 10 s)",
				what, strerror(ENOSPC), skipped);
		http_reply__header(rep, "Retry-After", SERVER_STORE_RETRY_AFTER);
		return reply_error(rep, 503, "can't %s: the store's disk is full; retry later",
				   what);
	}
	pr_warn("server: can't %s: %s -- check the store (--data directory, disk space)", what,
		strerror(e));
	return reply_error(rep, err == -ENOMEM || err == -EBUSY ? 503 : 500,
			   "can't %s: %s -- the store failed; retry later", what, strerror(e));
}

/* ---- statistics ---- */

void server_stats__ingested(struct server *s, uint64_t samples, uint64_t windows, uint64_t points)
{
	pthread_mutex_lock(&s->stats.lock);
	s->stats.ingest_samples += samples;
	s->stats.ingest_windows += windows;
	s->stats.ingest_points += points;
	pthread_mutex_unlock(&s->stats.lock);
}

void server_stats__spans(struct server *s, uint64_t spans)
{
	pthread_mutex_lock(&s->stats.lock);
	s->stats.ingest_spans += spans;
	pthread_mutex_unlock(&s->stats.lock);
}

/* Counts every answer by route and status (the HTTP server's observer). */
static void on_answered(void *ctx, const struct http_request *req, int status)
{
	struct server *s = ctx;
	const struct route_slot *slot = http_request__route_ctx(req);
	size_t idx = slot ? slot->idx : STATS_OTHER;
	enum route_kind kind = idx < NROUTES ? routes[idx].kind : ROUTE_OTHER;
	struct route_stats *rs = &s->stats.routes[idx];
	int i;

	pthread_mutex_lock(&s->stats.lock);
	for (i = 0; i < STATS_MAX_CODES; i++) {
		if (rs->codes[i] == status || !rs->codes[i]) {
			rs->codes[i] = status;
			rs->counts[i]++;
			break;
		}
	}
	if (kind == ROUTE_QUERY) {
		double secs = (double)(mono_ns() - http_request__start_ns(req)) / NS_PER_SEC;

		for (i = 0; i < STATS_NBUCKETS - 1 && secs > buckets[i]; i++)
			;
		rs->buckets[i]++;
		rs->nobs++;
		rs->sum += secs;
	}
	if (kind == ROUTE_INGEST)
		s->stats.ingest_bytes += http_request__body_bytes(req);
	pthread_mutex_unlock(&s->stats.lock);
	if (mono_ns() - http_request__start_ns(req) >= SERVER_GIVE_BACK_NS)
		xalloc_give_back();
}

static const char *stats_route_name(size_t i)
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
			l[1] = stats_route_name(i);
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

static int api_metrics(struct server *s, const struct server_call *call,
		       const struct http_request *req, struct http_reply *rep)
{
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
	prom__metric(&t.out, "sonde_server_ingest_spans_total", "counter",
		     "GPU timeline spans (kernels, copies) ingested.",
		     (double)s->stats.ingest_spans);
	prom__metric(&t.out, "sonde_server_ingest_received_bytes_total", "counter",
		     "Request body bytes received by the ingest routes.",
		     (double)s->stats.ingest_bytes);
	prom__metric(&t.out, "sonde_server_head_timeouts_total", "counter",
		     "Connections closed because their request head took longer than its "
		     "deadline (10 s; 1 s while 3/4 of the connections are held).",
		     s->http ? (double)http_server__head_timeouts(s->http) : 0);
	prom__metric(&t.out, "sonde_server_uri_too_long_total", "counter",
		     "Requests refused (414) for a URI of more than 32 KiB or 256 query "
		     "arguments.",
		     s->http ? (double)http_server__uri_refusals(s->http) : 0);
	prom__metric(&t.out, "sonde_server_query_timeouts_total", "counter",
		     "Queries stopped at their time limit (--query-timeout), answered 503.",
		     (double)s->stats.query_timeouts);
	if (s->http) {
		uint64_t waiting, refused;

		http_server__slow_queue(s->http, &waiting, &refused);
		prom__metric(&t.out, "sonde_server_queries_waiting", "gauge",
			     "Queries waiting for a query thread.", (double)waiting);
		prom__metric(&t.out, "sonde_server_queries_refused_total", "counter",
			     "Queries refused (503) because 1024 were waiting already.",
			     (double)refused);
	}
	{
		const char *l[] = {"bound", NULL, NULL};

		prom__family(&t.out, "sonde_server_quota_refusals_total", "counter",
			     "Ingests refused (507) because they would take a project past a "
			     "bound: series (--max-series), names (--max-names).");
		for (int b = 0; b < STORE_NBOUNDS; b++) {
			l[1] = b == STORE_BOUND_SERIES ? "series" : "names";
			prom__sample(&t.out, "sonde_server_quota_refusals_total", l,
				     (double)s->stats.quota_refusals[b]);
		}
	}
	prom__metric(&t.out, "sonde_server_expire_runs_total", "counter",
		     "Retention passes run (every minute).", (double)s->stats.expire_runs);
	prom__metric(&t.out, "sonde_server_expire_errors_total", "counter",
		     "Retention passes the store failed.", (double)s->stats.expire_errors);
	prom__metric(&t.out, "sonde_server_retention_seconds", "gauge", "How long data is kept.",
		     (double)s->retention_ms / MS_PER_SEC);
	prom__metric(&t.out, "sonde_server_start_time_seconds", "gauge",
		     "When the server started, since the epoch.",
		     (double)s->stats.start_ms / MS_PER_SEC);
	pthread_mutex_unlock(&s->stats.lock);
	if (s->tokens) {
		uint64_t counts[TOKEN_NVERDICTS];
		const char *l[] = {"result", NULL, NULL};

		tokens__counts(s->tokens, counts);
		prom__family(&t.out, "sonde_server_auth_checks_total", "counter",
			     "Requests' tokens checked (--auth), by result: ok, missing, "
			     "unknown, revoked, forbidden (a role short), rate_limited (a token "
			     "not valid, from an address with too many failures), unavailable.");
		for (int v = 0; v < TOKEN_NVERDICTS; v++) {
			l[1] = token_verdict_name((enum token_verdict)v);
			prom__sample(&t.out, "sonde_server_auth_checks_total", l,
				     (double)counts[v]);
		}
	}
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
	prom__metric(&t.out, "sonde_server_store_spans", "gauge",
		     "GPU timeline spans in the store (SQLite: a retried put counts twice).",
		     (double)st.spans);
	prom__metric(&t.out, "sonde_server_store_samples", "gauge",
		     "Sample rows of the windows in the store.", (double)st.samples);
	prom__metric(&t.out, "sonde_server_store_bytes", "gauge",
		     "Size of the store's files (0 if unknown).", (double)st.bytes_on_disk);
	body = prom_text__close(&t, &len);
	if (!body)
		return -ENOMEM;
	return reply_take(rep, PROM_CONTENT_TYPE, body, len);
}

void server_note_put(struct server *s, int err)
{
	/* A refused request is the request's, an away store /healthz finds
	 * by itself. */
	if (err == -EDQUOT) {
		pthread_mutex_lock(&s->stats.lock);
		s->stats.quota_refusals[store_last_refusal()->bound]++;
		pthread_mutex_unlock(&s->stats.lock);
		return;
	}
	if (err == -EINVAL || err == -EAGAIN)
		return;
	__atomic_store_n(&s->put_err, err < 0 ? -err : 0, __ATOMIC_RELAXED);
}

static void healthz_name(void *ctx, const char *name)
{
}

static int api_healthz(struct server *s, const struct server_call *call,
		       const struct http_request *req, struct http_reply *rep)
{
	struct store_query q = {.from_ms = 0, .until_ms = 1};
	struct sbuf b = {0};
	int err, put_err;

	/* A read the store must answer without data: proves it is there. */
	err = store__label_names(s->store, &q, healthz_name, NULL);
	put_err = __atomic_load_n(&s->put_err, __ATOMIC_RELAXED);
	if (err) {
		rep->status = 503;
		sbuf__printf(&b, "store failing: %s\n", strerror(-err));
	} else if (put_err) {
		/* It reads, but the last put failed (until one succeeds). */
		rep->status = 503;
		sbuf__printf(&b, "store can't write: %s\n", strerror(put_err));
	} else {
		sbuf__puts(&b, "ok\n");
	}
	return reply_sbuf(rep, HTTP_CONTENT_TEXT, &b);
}

/* ---- the Trace Server Protocol ---- */

/* The TSP's backend: a GET of a query route, answered in-process as a
 * part of the call who (the TSP's request: its project, its deadline). */
static int tsp_backend_get(void *ctx, void *who, const char *path, const char *query,
			   json_t **answer)
{
	struct server *s = ctx;
	const struct server_call *call = who;
	struct http_reply rep = {0};
	struct http_request *req;
	size_t i;
	int err;

	*answer = NULL;
	for (i = 0; i < NROUTES; i++)
		if (routes[i].kind == ROUTE_QUERY && routes[i].get != api_tsp &&
		    !strcmp(routes[i].path, path))
			break;
	if (i == NROUTES)
		return 404;
	req = http_request__new_local("GET", path, query);
	if (!req)
		return -ENOMEM;
	err = routes[i].get(s, call, req, &rep);
	http_request__free_local(req);
	if (err >= 0 && rep.body)
		*answer = json_loadb(rep.body, rep.len, 0, NULL);
	free(rep.body);
	return err < 0 ? err : rep.status ? rep.status : 200;
}

/* The Trace Server Protocol's traces and experiments are a project's own
 * (--auth): an endpoint each, made at its first request. */
static struct tsp *project_tsp(struct server *s, const char *project)
{
	struct tsp *t = NULL;
	size_t i;

	pthread_mutex_lock(&s->lock);
	for (i = 0; i < s->nproject_tsps; i++)
		if (!strcmp(s->project_tsps[i].project, project))
			t = s->project_tsps[i].tsp;
	if (!t && s->nproject_tsps < SERVER_MAX_TSP_PROJECTS) {
		t = tsp__new(&(struct tsp_backend){
			.get = tsp_backend_get, .ctx = s, .product = "sonde server"});
		if (t) {
			snprintf(s->project_tsps[s->nproject_tsps].project,
				 sizeof(s->project_tsps[0].project), "%s", project);
			s->project_tsps[s->nproject_tsps++].tsp = t;
		}
	}
	pthread_mutex_unlock(&s->lock);
	return t;
}

static int api_tsp(struct server *s, const struct server_call *call, const struct http_request *req,
		   struct http_reply *rep)
{
	struct tsp *t = call->project ? project_tsp(s, call->project) : s->tsp;

	if (!t)
		return reply_error(rep, 507,
				   "the Trace Server Protocol serves %d projects at most on one "
				   "server",
				   SERVER_MAX_TSP_PROJECTS);
	/* The TSP hands call back as it is to tsp_backend_get(), which
	 * only reads it. */
	return tsp__serve(t, (void *)call, req, rep);
}

/* ---- routing ---- */

/* ---- auth ---- */

/* The role a request of route r needs: ingest to write, read to query; 0
 * for none (/healthz: a load balancer's check). */
static enum token_role role_needed(const struct server_route *r, bool post)
{
	if (r->get == api_healthz)
		return 0;
	if (r->kind == ROUTE_INGEST || (post && r->get == api_alerts_get))
		return TOKEN_INGEST;
	return TOKEN_READ;
}

/* The answer to a request whose token didn't pass. */
static int auth_refused(struct http_reply *rep, enum token_verdict v, enum token_role need)
{
	switch (v) {
	case TOKEN_FORBIDDEN:
		return reply_error(rep, 403, "this token's role can't %s this project's data",
				   need == TOKEN_INGEST ? "write" : "read");
	case TOKEN_LIMITED:
		http_reply__header(rep, "Retry-After", "30");
		return reply_error(rep, 429,
				   "too many failed attempts from this client: retry "
				   "later with a valid token");
	case TOKEN_UNAVAILABLE:
		http_reply__header(rep, "Retry-After", SERVER_STORE_RETRY_AFTER);
		return reply_error(rep, 503,
				   "the tokens can't be read (the store is away); "
				   "retry later");
	default:
		http_reply__header(rep, "WWW-Authenticate", "Bearer realm=\"sonde\"");
		return reply_error(rep, 401,
				   "%s -- send Authorization: Bearer TOKEN (sonde token "
				   "create)",
				   v == TOKEN_REVOKED	? "this token was revoked"
				   : v == TOKEN_UNKNOWN ? "unknown token"
							: "a token is needed");
	}
}

/* Every route of the table, on the request's head (before any body is
 * read): with --auth, its token must have the role the route needs, else
 * it is refused there -- a request without a valid token costs its head
 * alone. The principal is kept with the request for dispatch(). */
static int admit(void *ctx, struct http_request *req, struct http_reply *rep)
{
	const struct route_slot *slot = ctx;
	const struct server_route *r = &routes[slot->idx];
	bool post = !strcmp(http_request__method(req), "POST");
	enum token_role need = slot->srv->tokens ? role_needed(r, post) : 0;
	struct principal who, *kept;
	enum token_verdict v;

	if (!need)
		return 0;
	v = tokens__check(slot->srv->tokens, http_request__header(req, "Authorization"),
			  http_request__client(req), need, &who);
	if (v != TOKEN_OK)
		return auth_refused(rep, v, need);
	kept = malloc(sizeof(*kept));
	if (!kept)
		return -ENOMEM;
	*kept = who;
	http_request__keep(req, kept, free);
	return 0;
}

/* Every route of the table: its GET or POST function, called for the
 * principal admit() found (with --auth), a query within the query
 * timeout. */
static int dispatch(void *ctx, const struct http_request *req, struct http_reply *rep)
{
	const struct route_slot *slot = ctx;
	const struct server_route *r = &routes[slot->idx];
	bool post = !strcmp(http_request__method(req), "POST");
	server_route_fn fn = post ? r->post : r->get;
	const struct principal *who = http_request__kept(req);
	struct server_call call = {.project = who ? who->project : NULL};
	int err;

	if (slot->srv->tokens && role_needed(r, post) && !who)
		return -EACCES; /* admit() lets none through without one */
	if (r->kind == ROUTE_QUERY) {
		call.timeout_ms = slot->srv->query_timeout_ms;
		call.deadline_ns = mono_ns() + call.timeout_ms * NS_PER_MS;
	}
	err = fn(slot->srv, &call, req, rep);
	if (call.deadline_ns && rep->status == 503 && mono_ns() > call.deadline_ns) {
		pthread_mutex_lock(&slot->srv->stats.lock);
		slot->srv->stats.query_timeouts++;
		pthread_mutex_unlock(&slot->srv->stats.lock);
	}
	if (err >= 0 && !rep->content_type)
		rep->content_type = HTTP_CONTENT_JSON;
	return err;
}

/* Every other GET: a file of the web UI (the coordinator's too). */
int server_serve_ui(void *ctx, const struct http_request *req, struct http_reply *rep)
{
	const char *url = http_request__path(req);
	const struct ui_asset *a = NULL;

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
		return reply_error(rep, 404,
				   "no such endpoint or file: %s -- the API is under /api/v1 "
				   "(docs/api.md), the UI at /",
				   url);
	rep->static_body = a->data;
	rep->len = a->len;
	rep->content_type = a->content_type;
	return 0;
}

/* The HTTP server's routes for the table, then the UI for the rest. */
static void routes_for_http(struct server *s, struct http_route *out)
{
	for (size_t i = 0; i < NROUTES; i++) {
		const struct server_route *r = &routes[i];

		out[i] = (struct http_route){
			.path = r->path,
			.methods = (r->get ? HTTP_READ : 0) | (r->post ? HTTP_POST : 0) |
				   (r->prefix ? HTTP_OTHER : 0),
			.prefix = r->prefix,
			.fn = dispatch,
			.admit = admit,
			.slow = r->kind == ROUTE_QUERY,
			.ctx = &s->slots[i],
			.max_body = r->max_body,
			.body_types = r->body_types,
			.body_types_hint = r->body_types_hint,
			.parts = r->parts,
		};
	}
	out[NROUTES] = (struct http_route){
		.methods = HTTP_READ, .fn = server_serve_ui, .ctx = &s->slots[STATS_UI]};
	out[NROUTES + 1] = (struct http_route){0};
}

/* ---- retention ---- */

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

/* ---- the server ---- */

/* The server's state before it serves; 0 or a positive errno. */
static int server_init(struct server *s, const struct server_opts *opts)
{
	pthread_condattr_t ca;

	pthread_mutex_init(&s->lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&s->cond, &ca);
	pthread_condattr_destroy(&ca);
	pthread_mutex_init(&s->stats.lock, NULL);
	s->stats.start_ms = (int64_t)wall_ms();
	s->store = opts->store;
	s->tokens = opts->tokens;
	s->query_timeout_ms =
		opts->query_timeout_ms ? opts->query_timeout_ms : SERVER_DEFAULT_QUERY_TIMEOUT_MS;
	s->retention_ms = opts->retention_ms > 0 ? opts->retention_ms : SERVER_DEFAULT_RETENTION_MS;
	if (!s->store) {
		pr_err("can't start the server: no store");
		return EINVAL;
	}
	s->stats.routes = calloc(NSTATS, sizeof(*s->stats.routes));
	s->slots = calloc(NSTATS, sizeof(*s->slots));
	s->project_tsps =
		s->tokens ? calloc(SERVER_MAX_TSP_PROJECTS, sizeof(*s->project_tsps)) : NULL;
	s->alerts = alert_state__new();
	s->tsp = tsp__new(
		&(struct tsp_backend){.get = tsp_backend_get, .ctx = s, .product = "sonde server"});
	if (!s->stats.routes || !s->slots || !s->alerts || !s->tsp ||
	    (s->tokens && !s->project_tsps))
		return ENOMEM;
	for (size_t i = 0; i < NSTATS; i++)
		s->slots[i] = (struct route_slot){s, i};
	return 0;
}

struct server *server__start(const struct server_opts *opts)
{
	struct server *s = calloc(1, sizeof(*s));
	struct http_route hr[NROUTES + 2];
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	unsigned threads = opts->threads ? opts->threads : (ncpu > 0 ? (unsigned)ncpu : 1);
	struct http_opts ho = {
		.listen = opts->listen ? opts->listen : SERVER_DEFAULT_LISTEN,
		.service = "the server's API",
		.busy_hint = "is another sonde server (or sonde run) running? choose another "
			     "--listen address",
		.not_found_hint = "see docs/api.md",
		.threads = threads,
		.slow_threads =
			threads < SERVER_MAX_QUERY_THREADS ? threads : SERVER_MAX_QUERY_THREADS,
		.max_connections = SERVER_MAX_CONNECTIONS,
		.max_per_ip = SERVER_MAX_PER_IP,
		.timeout_s = SERVER_TIMEOUT_S,
		.max_body = opts->max_body_bytes ? opts->max_body_bytes : SERVER_DEFAULT_MAX_BODY,
		.json_errors = true,
		.answered = on_answered,
		.answered_ctx = s,
		.routes = hr,
		.tls = opts->tls,
	};
	int e;

	if (!s) {
		errno = ENOMEM;
		return NULL;
	}
	xalloc_bound_arenas();
	e = server_init(s, opts);
	if (e)
		goto fail;
	routes_for_http(s, hr);
	s->http = http_server__start(&ho);
	if (!s->http) {
		e = errno;
		goto fail;
	}
	e = pthread_create(&s->expirer, NULL, expirer_main, s);
	if (e) {
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
	return http_server__port(s->http);
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
	http_server__stop(s->http);
	alert_state__free(s->alerts);
	tsp__free(s->tsp);
	for (size_t i = 0; i < s->nproject_tsps; i++)
		tsp__free(s->project_tsps[i].tsp);
	free(s->project_tsps);
	free(s->slots);
	free(s->stats.routes);
	pthread_mutex_destroy(&s->stats.lock);
	pthread_cond_destroy(&s->cond);
	pthread_mutex_destroy(&s->lock);
	free(s);
}
