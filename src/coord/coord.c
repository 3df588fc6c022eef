/* coord.c: `sonde coordinator` as a library (coord.h) -- its route table on
 * the HTTP server of net/http.h. The query routes are the server's own
 * (src/server/api_query.c), each run over a per-request store (remote.c)
 * whose reads fan out to the sites and merge, so a coordinator's answer is
 * built by the same code as a server's; then, when sites failed, the
 * answer says so: JSON answers get "partial": true and "failed": [...],
 * the others (pprof, folded, speedscope downloads) the headers
 * Sonde-Partial and Sonde-Failed, and when every site failed the answer is
 * a 502 (504 when they all timed out). Also /api/v1/alerts (the sites'
 * alerts together), /api/v1/servers (the sites), /healthz, /metrics with
 * the coordinator's own statistics, the web UI, and the Trace Server
 * Protocol at /tsp/api (src/server/tsp.h) over the merged answers, so that
 * a Trace Compass client sees the traces of every server in one place and
 * an experiment's outputs merged across them. */
#include <curl/curl.h>
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "common/clock.h"
#include "common/duration.h"
#include "common/hash.h"
#include "common/json.h"
#include "common/log.h"
#include "common/prom.h"
#include "common/sbuf.h"
#include "common/xalloc.h"
#include "coord/coord_internal.h"
#include "net/libcurl.h"
#include "common/hash.h"
#include "server/server_internal.h"
#include "server/tsp.h"

/* A route of the coordinator's own, answering as a route of net/http.h
 * does; idx is its entry in the table. */
typedef int (*coord_own_fn)(struct coord *c, size_t idx, struct coord_call *call,
			    const struct http_request *req, struct http_reply *rep);

struct coord_route {
	const char *path;
	server_route_fn query; /* a query route of the server, over the sites */
	coord_own_fn own;      /* or one of the coordinator's */
};

struct route_slot {
	struct coord *c;
	size_t idx;
};

#define MAX_CODES 16
struct coord_route_stats {
	int codes[MAX_CODES];
	uint64_t counts[MAX_CODES];
	uint64_t partial;
};

static int coord_alerts(struct coord *c, size_t idx, struct coord_call *call,
			const struct http_request *req, struct http_reply *rep);
static int coord_servers(struct coord *c, size_t idx, struct coord_call *call,
			 const struct http_request *req, struct http_reply *rep);
static int coord_healthz(struct coord *c, size_t idx, struct coord_call *call,
			 const struct http_request *req, struct http_reply *rep);
static int coord_metrics(struct coord *c, size_t idx, struct coord_call *call,
			 const struct http_request *req, struct http_reply *rep);
static int coord_tsp(struct coord *c, size_t idx, struct coord_call *call,
		     const struct http_request *req, struct http_reply *rep);

static const struct coord_route routes[] = {
	{"/api/v1/labels", api_labels, NULL},
	{"/api/v1/label/values", api_label_values, NULL},
	{"/api/v1/totals", api_totals, NULL},
	{"/api/v1/flamegraph", api_flamegraph, NULL},
	{"/api/v1/diff", api_diff, NULL},
	{"/api/v1/top", api_top, NULL},
	{"/api/v1/timeseries", api_timeseries, NULL},
	{"/api/v1/points", api_points, NULL},
	{"/api/v1/pprof", api_pprof, NULL},
	{"/api/v1/speedscope", api_speedscope, NULL},
	{"/pyroscope/render", api_pyroscope_render, NULL},
	{"/pyroscope/render-diff", api_pyroscope_render_diff, NULL},
	{"/api/v1/alerts", NULL, coord_alerts},
	{"/api/v1/servers", NULL, coord_servers},
	{"/healthz", NULL, coord_healthz},
	{"/metrics", NULL, coord_metrics},
	{TSP_PREFIX, NULL, coord_tsp},
};

static const char *const json_types[] = {"application/json", NULL};

#define NROUTES ARRAY_SIZE(routes)
#define STATS_UI NROUTES
#define STATS_OTHER (NROUTES + 1)
#define NSTATS (NROUTES + 2)

/* ---- partial answers ---- */

/* [{"server": URL, "name": NAME, "error": WHY}, ...] of r's failed sites. */
static json_t *failed_json(const struct coord_req *r)
{
	const struct coord_config *cfg = r->c->cfg;
	json_t *arr = json_array();

	for (size_t i = 0; arr && i < cfg->n; i++) {
		if (!r->failed[i])
			continue;
		if (json_array_append_new(
			    arr, json_pack("{s:s,s:o,s:o}", "server", cfg->sites[i].url, "name",
					   json_string_lossy(cfg->sites[i].name), "error",
					   json_string_lossy(r->why[i] ? r->why[i] : "failed")))) {
			json_decref(arr);
			return NULL;
		}
	}
	return arr;
}

/* Adds ,"partial":true,"failed":[...] inside the JSON object of rep. */
static int splice_partial(const struct coord_req *r, struct http_reply *rep)
{
	json_t *failed = failed_json(r);
	struct sbuf b = {0};
	size_t end = rep->len;
	int err = 0;

	if (!failed)
		return -ENOMEM;
	while (end && rep->body[end - 1] != '}')
		end--;
	if (!end) {
		json_decref(failed);
		return 0; /* no object: leave it be */
	}
	err |= sbuf__add(&b, rep->body, end - 1);
	/* "{}" takes no comma. */
	while (b.len && (b.buf[b.len - 1] == ' ' || b.buf[b.len - 1] == '\n'))
		b.len--;
	err |= sbuf__puts(&b, b.len && b.buf[b.len - 1] == '{' ? "" : ",");
	err |= sbuf__puts(&b, "\"partial\":true,\"failed\":");
	err |= sbuf__json(&b, failed);
	err |= sbuf__puts(&b, "}");
	json_decref(failed);
	if (err) {
		sbuf__free(&b);
		return -ENOMEM;
	}
	return reply_sbuf(rep, rep->content_type, &b);
}

/* Sonde-Partial: 1 and Sonde-Failed: URL (why), ... (cut to fit). */
static int header_partial(const struct coord_req *r, struct http_reply *rep)
{
	const struct coord_config *cfg = r->c->cfg;
	char v[sizeof(rep->headers[0].value)];
	size_t off = 0;

	snprintf(v, sizeof(v), "%zu of %zu:", r->nfailed, cfg->n);
	off = strlen(v);
	for (size_t i = 0; i < cfg->n && off < sizeof(v) - 1; i++) {
		if (!r->failed[i])
			continue;
		off += (size_t)snprintf(v + off, sizeof(v) - off, " %s (%s)", cfg->sites[i].url,
					r->why[i] ? r->why[i] : "failed");
	}
	if (off >= sizeof(v) - 1)
		memcpy(v + sizeof(v) - 4, "...", 4);
	/* Header values are one line of visible ASCII. */
	for (char *p = v; *p; p++)
		if ((unsigned char)*p < 0x20 || (unsigned char)*p > 0x7e)
			*p = '?';
	if (http_reply__header(rep, "Sonde-Partial", "1") ||
	    http_reply__header(rep, "Sonde-Failed", v))
		return -ENOMEM;
	return 0;
}

/* The answer when every site failed: 504 when they all timed out, 401 when
 * they refused the caller's token, 429 (with Retry-After) when they all
 * refused it for too many failures, else 502, with every site's error. */
static int reply_all_failed(const struct coord_req *r, struct http_reply *rep)
{
	const struct coord_config *cfg = r->c->cfg;
	bool all_timeouts = true;
	json_t *j;

	for (size_t i = 0; i < cfg->n; i++)
		all_timeouts &= r->timed_out[i];
	j = json_pack("{s:s,s:o}", "error",
		      all_timeouts ? "no server answered within the timeout -- are they up? "
				     "(see failed; raise --timeout for slow servers)"
				   : "every server failed -- see failed, and check the servers",
		      "failed", failed_json(r));
	if (!j)
		return -ENOMEM;
	free(rep->body);
	rep->body = NULL;
	rep->nheaders = 0;
	rep->status = all_timeouts ? 504 : 502;
	/* Every server refused the caller's token (servers run with --auth):
	 * the caller's to fix, so say it as they did -- a UI then asks for a
	 * token. (A 403 stays a 502: it may be the coordinator's own client
	 * certificate that the servers refused.) */
	if (r->n429 == cfg->n) {
		/* Every server is refusing the caller's address for failed
		 * attempts -- the coordinator's address, that all its callers
		 * share -- and the token was not valid there: the caller waits
		 * as long as the longest of them said. */
		char secs[16];

		snprintf(secs, sizeof(secs), "%u", r->retry_after_s ? r->retry_after_s : 30);
		rep->status = 429;
		json_object_set_new(j, "error",
				    json_string("every server refused the request after too many "
						"failed attempts from here -- retry later with a "
						"valid token (see failed)"));
		http_reply__header(rep, "Retry-After", secs);
		snprintf(r->call->retry_after, sizeof(r->call->retry_after), "%s", secs);
	} else if (r->n401 + r->n429 == cfg->n) {
		rep->status = 401;
		json_object_set_new(j, "error",
				    json_string("every server refused the token -- "
						"send Authorization: Bearer TOKEN "
						"(see failed)"));
		http_reply__header(rep, "WWW-Authenticate", "Bearer realm=\"sonde\"");
	}
	return reply_json(rep, j);
}

/* What a request's answer says of the sites that failed it. */
static int coord_req__finish(struct coord_req *r, size_t route, struct http_reply *rep)
{
	struct coord *c = r->c;

	if (!r->fanouts || !r->nfailed)
		return 0;
	if (r->nfailed == c->cfg->n) {
		pthread_mutex_lock(&c->lock);
		c->all_failed++;
		pthread_mutex_unlock(&c->lock);
		return reply_all_failed(r, rep);
	}
	if (rep->status && rep->status != 200)
		return 0;
	pthread_mutex_lock(&c->lock);
	c->partial++;
	c->routes[route].partial++;
	pthread_mutex_unlock(&c->lock);
	if (rep->content_type && !strcmp(rep->content_type, HTTP_CONTENT_JSON))
		return splice_partial(r, rep);
	return header_partial(r, rep);
}

/* ---- routes ---- */

/* Query route idx of the table over c's sites, answering req of call into
 * rep. */
static int run_query(struct coord *c, size_t idx, struct coord_call *call,
		     const struct http_request *req, struct http_reply *rep)
{
	const struct coord_route *rt = &routes[idx];
	const char *by = http_request__query(req, "by");
	/* Of the server's call, nothing: the sites keep projects apart (each
	 * checks the token forwarded) and time their own queries. */
	const struct server_call site_call = {0};
	struct coord_req r;
	struct server shell;
	int err;

	/* The label that totals are grouped by, for the store's
	 * series_totals (remote.c): totals' by, a flame graph's group_by. */
	if (!by)
		by = http_request__query(req, "group_by");
	if (!by)
		by = http_request__query(req, "groupBy");
	err = coord_req__init(&r, c, call, by);
	if (err)
		return err;
	/* The server's route over the sites' store. It reads nothing else
	 * of the server but the retention, which is each site's own. */
	memset(&shell, 0, sizeof(shell));
	shell.store = &r.base;
	shell.retention_ms = DURATION_MAX_MS;
	err = rt->query(&shell, &site_call, req, rep);
	if (err >= 0 && !rep->content_type)
		rep->content_type = HTTP_CONTENT_JSON;
	if (err >= 0)
		err = coord_req__finish(&r, idx, rep);
	coord_req__free(&r);
	return err;
}

static int dispatch(void *ctx, const struct http_request *req, struct http_reply *rep)
{
	const struct route_slot *slot = ctx;
	const struct coord_route *rt = &routes[slot->idx];
	struct coord_call call = {.auth = http_request__header(req, "Authorization")};

	if (rt->own)
		return rt->own(slot->c, slot->idx, &call, req, rep);
	return run_query(slot->c, slot->idx, &call, req, rep);
}

/* The TSP's backend: a GET of a query route, merged over the sites as any
 * request is, its partial and failed fields included, as a part of the
 * call who (the TSP's request). */
static int tsp_backend_get(void *ctx, void *who, const char *path, const char *query,
			   json_t **answer)
{
	struct coord *c = ctx;
	struct http_reply rep;
	struct http_request *req;
	size_t i;
	int err;

	*answer = NULL;
	for (i = 0; i < NROUTES && (routes[i].own || strcmp(routes[i].path, path)); i++)
		;
	if (i == NROUTES)
		return 404;
	req = http_request__new_local("GET", path, query);
	if (!req)
		return -ENOMEM;
	memset(&rep, 0, sizeof(rep));
	err = run_query(c, i, who, req, &rep);
	http_request__free_local(req);
	if (err >= 0 && rep.body)
		*answer = json_loadb(rep.body, rep.len, 0, NULL);
	free(rep.body);
	return err < 0 ? err : rep.status ? rep.status : 200;
}

/* ---- the Trace Server Protocol per token ---- */

struct health_ctx {
	bool *ok; /* per site: answered 200 */
};

static int health_answer(void *ctx, size_t site, const char *body, size_t len, char *why,
			 size_t whylen)
{
	struct health_ctx *h = ctx;

	h->ok[site] = true;
	return 0;
}

/* GET /tsp/api/health from every site for call (its Authorization, if
 * any): a check of the token (the servers' TSP routes need a read token)
 * that touches no data. ok[i] says which sites answered 200; r is left for
 * the caller's answer when none did (r freed by the caller). */
static int ask_health(struct coord *c, struct coord_call *call, struct coord_req *r, bool *ok)
{
	int err;

	err = coord_req__init(r, c, call, NULL);
	if (err)
		return err;
	return coord_req__fan(r, TSP_PREFIX "/health", health_answer, &(struct health_ctx){ok});
}

/* Whether a site of c checks tokens (refuses a request without one): asked
 * again every COORD_AUTH_SITES_MS. Into checks (cfg->n). */
static int sites_checking_tokens(struct coord *c, int64_t now, bool *checks)
{
	size_t n = c->cfg->n;
	struct coord_call anonymous = {0};
	struct coord_req r;
	bool *ok;
	int err = 0;

	pthread_mutex_lock(&c->lock);
	if (c->auth_sites_ms && now - c->auth_sites_ms < COORD_AUTH_SITES_MS) {
		memcpy(checks, c->site_checks_tokens, n * sizeof(*checks));
		pthread_mutex_unlock(&c->lock);
		return 0;
	}
	pthread_mutex_unlock(&c->lock);
	ok = calloc(n, sizeof(*ok));
	if (!ok)
		return -ENOMEM;
	err = ask_health(c, &anonymous, &r, ok);
	if (!err) {
		/* A site that refused no token checks them; one that failed
		 * otherwise (down) is asked again next time. */
		for (size_t i = 0; i < n; i++)
			checks[i] = r.refused[i];
		pthread_mutex_lock(&c->lock);
		memcpy(c->site_checks_tokens, checks, n * sizeof(*checks));
		c->auth_sites_ms = now ? now : 1;
		pthread_mutex_unlock(&c->lock);
	}
	coord_req__free(&r);
	free(ok);
	return err;
}

/* Checks call's token with the sites: 0 when a site that checks tokens
 * accepted it, or when none checks tokens at all (*open: they are all
 * open); HTTP_ANSWERED when none accepted it, with the answer in rep (401,
 * or 429, or 502/504 as for a query every site failed); or a negative
 * errno. */
static int check_token(struct coord *c, struct coord_call *call, int64_t now,
		       struct http_reply *rep, bool *open)
{
	size_t n = c->cfg->n, i;
	struct coord_req r;
	bool *ok = calloc(n, sizeof(*ok)), *checks = calloc(n, sizeof(*checks));
	int err, accepted = 0;

	*open = false;
	if (!ok || !checks) {
		err = -ENOMEM;
		goto cleanup;
	}
	err = sites_checking_tokens(c, now, checks);
	if (err)
		goto cleanup;
	for (i = 0; i < n && !checks[i]; i++)
		;
	if (i == n) {
		*open = true;
		goto cleanup;
	}
	err = ask_health(c, call, &r, ok);
	for (i = 0; !err && i < n; i++)
		accepted |= ok[i] && checks[i];
	if (!err && !accepted) {
		if (r.nfailed == n)
			err = reply_all_failed(&r, rep);
		else
			err = http_reply__message(rep, 401, true,
						  "no server that checks tokens accepted this "
						  "one -- send Authorization: Bearer TOKEN");
		if (!err)
			err = HTTP_ANSWERED;
	}
	coord_req__free(&r);
cleanup:
	free(ok);
	free(checks);
	return err;
}

static void auth_key(const char *auth, unsigned char key[32])
{
	unsigned int n = 0;

	if (!EVP_Digest(auth, strlen(auth), key, &n, EVP_sha256(), NULL) || n != 32)
		memset(key, 0, 32); /* not reached: SHA-256 is always there */
}

/* Drops the reference of who holds e; under c->lock. The last frees it. */
static void coord_tsp__put_locked(struct coord_tsp *e)
{
	if (--e->refs)
		return;
	tsp__free(e->tsp);
	free(e);
}

/* Takes entry i off the list; under c->lock. */
static void auth_tsp__drop_locked(struct coord *c, size_t i)
{
	struct coord_tsp *e = c->auth_tsps[i];

	c->auth_tsps[i] = c->auth_tsps[--c->nauth_tsps];
	c->auth_tsps_dropped++;
	coord_tsp__put_locked(e);
}

/* The listed entry of key, referenced, or NULL; under c->lock. */
static struct coord_tsp *auth_tsp__find_locked(struct coord *c, const unsigned char *key,
					       size_t *at)
{
	for (size_t i = 0; i < c->nauth_tsps; i++) {
		if (!memcmp(c->auth_tsps[i]->key, key, 32)) {
			*at = i;
			return c->auth_tsps[i];
		}
	}
	return NULL;
}

/* A new entry for key (a token a server accepted), listed and referenced:
 * the entries unused for too long go first, then, when the list is full,
 * the least recently used. NULL on ENOMEM. */
static struct coord_tsp *auth_tsp__add(struct coord *c, const unsigned char *key, int64_t now)
{
	struct coord_tsp *e = calloc(1, sizeof(*e));
	size_t i, at;

	if (e)
		e->tsp = tsp__new(&(struct tsp_backend){
			.get = tsp_backend_get, .ctx = c, .product = "sonde coordinator"});
	if (!e || !e->tsp) {
		free(e);
		return NULL;
	}
	memcpy(e->key, key, 32);
	e->refs = 2; /* the list's and the caller's */
	e->used_ms = e->checked_ms = now;
	pthread_mutex_lock(&c->lock);
	if (auth_tsp__find_locked(c, key, &at)) {
		/* Another request of this token made one meanwhile. */
		struct coord_tsp *have = c->auth_tsps[at];

		have->refs++;
		have->used_ms = have->checked_ms = now;
		pthread_mutex_unlock(&c->lock);
		tsp__free(e->tsp);
		free(e);
		return have;
	}
	for (i = 0; i < c->nauth_tsps;) {
		if (now - c->auth_tsps[i]->used_ms >= COORD_AUTH_TSP_IDLE_MS)
			auth_tsp__drop_locked(c, i);
		else
			i++;
	}
	if (c->nauth_tsps == COORD_MAX_AUTH_TSPS) {
		size_t lru = 0;

		for (i = 1; i < c->nauth_tsps; i++)
			if (c->auth_tsps[i]->used_ms < c->auth_tsps[lru]->used_ms)
				lru = i;
		auth_tsp__drop_locked(c, lru);
	}
	c->auth_tsps[c->nauth_tsps++] = e;
	pthread_mutex_unlock(&c->lock);
	return e;
}

/* A caller with a token: the TSP of its token (the servers check the
 * token, the coordinator keeps each caller's traces and experiments
 * apart), made once a server that checks tokens has accepted it -- a
 * token no server knows never takes a place -- and checked again now and
 * then. When no server checks tokens, every caller shares one TSP. */
static int coord_tsp(struct coord *c, size_t idx, struct coord_call *call,
		     const struct http_request *req, struct http_reply *rep)
{
	int64_t now = (int64_t)mono_ms();
	struct coord_tsp *e = NULL;
	struct tsp *t = c->tsp;
	unsigned char key[32];
	bool check = false, open = false;
	size_t at = 0;
	int err = 0;

	if (call->auth) {
		auth_key(call->auth, key);
		pthread_mutex_lock(&c->lock);
		e = auth_tsp__find_locked(c, key, &at);
		if (e) {
			e->refs++;
			e->used_ms = now;
			check = now - e->checked_ms >= COORD_AUTH_TSP_RECHECK_MS;
		}
		pthread_mutex_unlock(&c->lock);
		if (!e || check) {
			err = check_token(c, call, now, rep, &open);
			if (err == HTTP_ANSWERED && e && rep->status == 401) {
				/* Refused now (revoked): its state goes. */
				pthread_mutex_lock(&c->lock);
				if (auth_tsp__find_locked(c, key, &at) == e)
					auth_tsp__drop_locked(c, at);
				pthread_mutex_unlock(&c->lock);
			}
			if (!err && !open && e) {
				pthread_mutex_lock(&c->lock);
				e->checked_ms = now;
				pthread_mutex_unlock(&c->lock);
			} else if (!err && !open) {
				e = auth_tsp__add(c, key, now);
				if (!e)
					err = -ENOMEM;
			}
		}
		if (err)
			goto cleanup;
		if (e && !open)
			t = e->tsp;
	}
	err = tsp__serve(t, call, req, rep);
cleanup:
	if (e) {
		pthread_mutex_lock(&c->lock);
		coord_tsp__put_locked(e);
		pthread_mutex_unlock(&c->lock);
	}
	/* The TSP answers in its own words what the query routes answered;
	 * the headers that go with 401 and 429 are the coordinator's. */
	if (err >= 0 && rep->status == 401 && !rep->nheaders)
		http_reply__header(rep, "WWW-Authenticate", "Bearer realm=\"sonde\"");
	if (err >= 0 && rep->status == 429 && !rep->nheaders)
		http_reply__header(rep, "Retry-After",
				   call->retry_after[0] ? call->retry_after : "30");
	return err;
}

struct alerts_ctx {
	json_t *all;
};

static int alerts_answer(void *ctx, size_t site, const char *body, size_t len, char *why,
			 size_t whylen)
{
	struct alerts_ctx *a = ctx;
	json_error_t je;
	json_t *j = json_loadb(body, len, 0, &je), *arr = json_object_get(j, "alerts");
	int err = 0;

	if (!json_is_array(arr)) {
		snprintf(why, whylen, "alerts: not {\"alerts\": [...]}");
		err = -EINVAL;
	} else if (json_array_extend(a->all, arr)) {
		err = -ENOMEM;
	}
	json_decref(j);
	return err;
}

/* Firing first, then resolved; newest first (startsAt for firing alerts,
 * endsAt for resolved ones), as a server lists them. */
static int alert_cmp(const void *x, const void *y)
{
	json_t *a = *(json_t *const *)x, *b = *(json_t *const *)y;
	const char *sa = json_string_value(json_object_get(a, "status")),
		   *sb = json_string_value(json_object_get(b, "status"));
	bool fa = sa && !strcmp(sa, "firing"), fb = sb && !strcmp(sb, "firing");
	const char *ta, *tb;
	int c;

	if (fa != fb)
		return fa ? -1 : 1;
	ta = json_string_value(json_object_get(a, fa ? "startsAt" : "endsAt"));
	tb = json_string_value(json_object_get(b, fb ? "startsAt" : "endsAt"));
	c = strcmp(tb ? tb : "", ta ? ta : "");
	return c;
}

static int coord_alerts(struct coord *c, size_t idx, struct coord_call *call,
			const struct http_request *req, struct http_reply *rep)
{
	struct alerts_ctx a = {json_array()};
	json_t **v = NULL, *sorted = NULL;
	struct coord_req r;
	size_t n, i;
	int err;

	if (!a.all)
		return -ENOMEM;
	err = coord_req__init(&r, c, call, NULL);
	if (err)
		goto cleanup;
	err = coord_req__fan(&r, "/api/v1/alerts", alerts_answer, &a);
	if (err)
		goto cleanup;
	n = json_array_size(a.all);
	v = calloc(n ? n : 1, sizeof(*v));
	sorted = json_array();
	if (!v || !sorted) {
		err = -ENOMEM;
		goto cleanup;
	}
	for (i = 0; i < n; i++)
		v[i] = json_array_get(a.all, i);
	qsort(v, n, sizeof(*v), alert_cmp);
	for (i = 0; i < n; i++)
		if (json_array_append(sorted, v[i])) {
			err = -ENOMEM;
			goto cleanup;
		}
	err = reply_json(rep, json_pack("{s:o}", "alerts", sorted));
	sorted = NULL;
	if (!err)
		err = coord_req__finish(&r, idx, rep);
cleanup:
	if (r.c)
		coord_req__free(&r);
	json_decref(sorted);
	json_decref(a.all);
	free(v);
	return err;
}

static int coord_servers(struct coord *c, size_t idx, struct coord_call *call,
			 const struct http_request *req, struct http_reply *rep)
{
	json_t *arr = json_array();

	for (size_t i = 0; arr && i < c->cfg->n; i++) {
		const struct coord_site *s = &c->cfg->sites[i];
		json_t *labels = json_object();

		for (size_t k = 0; labels && k < s->nlabels; k++)
			if (json_object_set_new(labels, s->labels[k].name,
						json_string_lossy(s->labels[k].value))) {
				json_decref(labels);
				labels = NULL;
			}
		if (!labels ||
		    json_array_append_new(arr, json_pack("{s:o,s:s,s:o}", "name",
							 json_string_lossy(s->name), "url", s->url,
							 "labels", labels))) {
			json_decref(arr);
			arr = NULL;
		}
	}
	if (!arr)
		return -ENOMEM;
	return reply_json(rep, json_pack("{s:o,s:I}", "servers", arr, "timeout_ms",
					 (json_int_t)c->timeout_ms));
}

static int healthz_answer(void *ctx, size_t site, const char *body, size_t len, char *why,
			  size_t whylen)
{
	return 0;
}

/* ok while at least one site answers its /healthz. */
static int coord_healthz(struct coord *c, size_t idx, struct coord_call *call,
			 const struct http_request *req, struct http_reply *rep)
{
	struct coord_req r;
	struct sbuf b = {0};
	int err;

	err = coord_req__init(&r, c, call, NULL);
	if (err)
		return err;
	err = coord_req__fan(&r, "/healthz", healthz_answer, NULL);
	if (!err && r.nfailed == c->cfg->n) {
		rep->status = 503;
		err = sbuf__printf(&b, "no server answers (%zu failing) -- see /metrics\n",
				   r.nfailed);
	} else if (!err) {
		err = sbuf__printf(&b, "ok: %zu of %zu servers answer\n", c->cfg->n - r.nfailed,
				   c->cfg->n);
	}
	coord_req__free(&r);
	if (err) {
		sbuf__free(&b);
		return -ENOMEM;
	}
	return reply_sbuf(rep, HTTP_CONTENT_TEXT, &b);
}

/* ---- statistics ---- */

static const double buckets[COORD_NBUCKETS - 1] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
						   0.25,  0.5,	  1,	 2.5,  5,     10};

static void on_answered(void *ctx, const struct http_request *req, int status)
{
	struct coord *c = ctx;
	const struct route_slot *slot = http_request__route_ctx(req);
	struct coord_route_stats *rs = &c->routes[slot ? slot->idx : STATS_OTHER];

	pthread_mutex_lock(&c->lock);
	for (int i = 0; i < MAX_CODES; i++)
		if (rs->codes[i] == status || !rs->codes[i]) {
			rs->codes[i] = status;
			rs->counts[i]++;
			break;
		}
	pthread_mutex_unlock(&c->lock);
	if (mono_ns() - http_request__start_ns(req) >= SERVER_GIVE_BACK_NS)
		xalloc_give_back();
}

static const char *route_name(size_t i)
{
	return i < NROUTES ? routes[i].path : i == STATS_UI ? "ui" : "other";
}

static const char *const fail_names[SITE_FAIL_NR] = {"timeout", "connect", "http", "bad_answer",
						     "too_large"};

static void collect(struct coord *c, struct prom_out *o)
{
	char code[16];
	const char *l[] = {"route", NULL, "code", code, NULL};

	prom__family(o, "sonde_coordinator_requests_total", "counter",
		     "HTTP requests answered, by route and status code.");
	for (size_t i = 0; i < NSTATS; i++)
		for (int k = 0; k < MAX_CODES && c->routes[i].codes[k]; k++) {
			l[1] = route_name(i);
			snprintf(code, sizeof(code), "%d", c->routes[i].codes[k]);
			prom__sample(o, "sonde_coordinator_requests_total", l,
				     (double)c->routes[i].counts[k]);
		}
	prom__family(o, "sonde_coordinator_partial_answers_total", "counter",
		     "Answers some servers were missing from (partial: true), by route.");
	for (size_t i = 0; i < NROUTES; i++) {
		const char *rl[] = {"route", routes[i].path, NULL};

		if (c->routes[i].partial)
			prom__sample(o, "sonde_coordinator_partial_answers_total", rl,
				     (double)c->routes[i].partial);
	}
	prom__metric(o, "sonde_coordinator_failed_answers_total", "counter",
		     "Requests every server failed (answered 502 or 504).", (double)c->all_failed);
	prom__family(o, "sonde_coordinator_server_requests_total", "counter",
		     "Requests sent to each server.");
	for (size_t i = 0; i < c->cfg->n; i++) {
		const char *sl[] = {"server", c->cfg->sites[i].name, NULL};

		prom__sample(o, "sonde_coordinator_server_requests_total", sl,
			     (double)c->sites[i].requests);
	}
	prom__family(o, "sonde_coordinator_server_failures_total", "counter",
		     "Requests a server failed, by why: timeout, connect, http (not a 200), "
		     "bad_answer, too_large.");
	for (size_t i = 0; i < c->cfg->n; i++)
		for (int k = 0; k < SITE_FAIL_NR; k++) {
			const char *sl[] = {"server", c->cfg->sites[i].name, "reason",
					    fail_names[k], NULL};

			prom__sample(o, "sonde_coordinator_server_failures_total", sl,
				     (double)c->sites[i].failures[k]);
		}
	prom__family(o, "sonde_coordinator_server_request_duration_seconds", "histogram",
		     "Time each server took to answer (or to fail).");
	for (size_t i = 0; i < c->cfg->n; i++) {
		const char *sl[] = {"server", c->cfg->sites[i].name, NULL};
		uint64_t cum[COORD_NBUCKETS - 1], sum = 0, count;

		for (int k = 0; k < COORD_NBUCKETS - 1; k++)
			cum[k] = sum += c->sites[i].buckets[k];
		count = sum + c->sites[i].buckets[COORD_NBUCKETS - 1];
		prom__histogram(o, "sonde_coordinator_server_request_duration_seconds", sl, buckets,
				cum, COORD_NBUCKETS - 1, count, c->sites[i].sum);
	}
	prom__metric(o, "sonde_coordinator_servers", "gauge", "Servers the coordinator asks.",
		     (double)c->cfg->n);
	prom__metric(o, "sonde_coordinator_tsp_token_states", "gauge",
		     "Tokens whose Trace Server Protocol state (traces, experiments) the "
		     "coordinator keeps: each accepted by a server that checks tokens.",
		     (double)c->nauth_tsps);
	prom__metric(o, "sonde_coordinator_tsp_token_states_dropped_total", "counter",
		     "Token states dropped: the least recently used past 256, one unused for "
		     "a day, one whose token the servers refused when checked again.",
		     (double)c->auth_tsps_dropped);
	prom__metric(o, "sonde_coordinator_head_timeouts_total", "counter",
		     "Connections closed because their request head took longer than its "
		     "deadline (10 s; 1 s while 3/4 of the connections are held).",
		     c->http ? (double)http_server__head_timeouts(c->http) : 0);
	prom__metric(o, "sonde_coordinator_timeout_seconds", "gauge",
		     "How long each server is given per request (--timeout).",
		     (double)c->timeout_ms / MS_PER_SEC);
	prom__metric(o, "sonde_coordinator_start_time_seconds", "gauge",
		     "When the coordinator started, since the epoch.",
		     (double)c->start_ms / MS_PER_SEC);
}

static int coord_metrics(struct coord *c, size_t idx, struct coord_call *call,
			 const struct http_request *req, struct http_reply *rep)
{
	struct prom_text t;
	char *body;
	size_t len;

	if (prom_text__open(&t))
		return -ENOMEM;
	pthread_mutex_lock(&c->lock);
	collect(c, &t.out);
	pthread_mutex_unlock(&c->lock);
	body = prom_text__close(&t, &len);
	if (!body)
		return -ENOMEM;
	return reply_take(rep, PROM_CONTENT_TYPE, body, len);
}

/* ---- the coordinator ---- */

struct coord *coord__start(const struct coord_opts *o)
{
	struct coord *c = calloc(1, sizeof(*c));
	struct http_route hr[NROUTES + 2];
	struct http_opts ho = {
		.listen = o->listen ? o->listen : COORD_DEFAULT_LISTEN,
		.service = "the coordinator's API",
		.busy_hint = "is another sonde coordinator or server running? choose another "
			     "--listen address",
		.not_found_hint = "see docs/api.md",
		.threads = o->threads ? o->threads : COORD_DEFAULT_THREADS,
		.max_connections = SERVER_MAX_CONNECTIONS,
		.max_per_ip = SERVER_MAX_PER_IP,
		.timeout_s = SERVER_TIMEOUT_S,
		.json_errors = true,
		.answered = on_answered,
		.routes = hr,
		.tls = o->tls,
	};
	int e = ENOMEM;

	if (!c) {
		errno = ENOMEM;
		return NULL;
	}
	net_init_curl();
	xalloc_bound_arenas();
	pthread_mutex_init(&c->lock, NULL);
	c->cfg = o->cfg;
	c->timeout_ms = o->timeout_ms ? o->timeout_ms : COORD_DEFAULT_TIMEOUT_MS;
	c->max_answer = o->max_answer_bytes ? o->max_answer_bytes : COORD_DEFAULT_MAX_ANSWER;
	c->start_ms = (int64_t)wall_ms();
	if (!c->cfg || !c->cfg->n) {
		pr_err("can't start the coordinator: no servers -- give --server URL or --config "
		       "FILE");
		e = EINVAL;
		goto fail;
	}
	c->sites = calloc(c->cfg->n, sizeof(*c->sites));
	c->routes = calloc(NSTATS, sizeof(*c->routes));
	c->slots = calloc(NSTATS, sizeof(*c->slots));
	if (!c->sites || !c->routes || !c->slots)
		goto fail;
	for (size_t i = 0; i < NSTATS; i++)
		c->slots[i] = (struct route_slot){c, i};
	c->auth_tsps = calloc(COORD_MAX_AUTH_TSPS, sizeof(*c->auth_tsps));
	c->site_checks_tokens = calloc(c->cfg->n, sizeof(*c->site_checks_tokens));
	c->tsp = tsp__new(&(struct tsp_backend){
		.get = tsp_backend_get, .ctx = c, .product = "sonde coordinator"});
	if (!c->tsp || !c->auth_tsps || !c->site_checks_tokens)
		goto fail;
	for (size_t i = 0; i < NROUTES; i++) {
		bool tsp = routes[i].own == coord_tsp;

		hr[i] = (struct http_route){
			.path = routes[i].path,
			.prefix = tsp,
			.methods = tsp ? HTTP_READ | HTTP_POST | HTTP_OTHER : HTTP_READ,
			.fn = dispatch,
			.ctx = &c->slots[i],
			.max_body = tsp ? TSP_MAX_BODY : 0,
			.body_types = tsp ? json_types : NULL,
			.body_types_hint = "JSON: send application/json",
		};
	}
	hr[NROUTES] = (struct http_route){
		.methods = HTTP_READ, .fn = server_serve_ui, .ctx = &c->slots[STATS_UI]};
	hr[NROUTES + 1] = (struct http_route){0};
	ho.answered_ctx = c;
	c->http = http_server__start(&ho);
	if (!c->http) {
		e = errno;
		goto fail;
	}
	return c;
fail:
	coord__stop(c);
	errno = e;
	return NULL;
}

int coord__port(const struct coord *c)
{
	return http_server__port(c->http);
}

void coord__stop(struct coord *c)
{
	if (!c)
		return;
	http_server__stop(c->http);
	tsp__free(c->tsp);
	for (size_t i = 0; i < c->nauth_tsps; i++)
		coord_tsp__put_locked(c->auth_tsps[i]);
	free(c->auth_tsps);
	free(c->site_checks_tokens);
	free(c->sites);
	free(c->routes);
	free(c->slots);
	pthread_mutex_destroy(&c->lock);
	free(c);
}
