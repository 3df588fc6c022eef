/* server_internal.h: what the files of src/server/ share behind server.h --
 * the server object, the route handlers of api_ingest.c, api_query.c and
 * alert_state.c (each answers one request of the HTTP server of
 * net/http.h), the helpers that answer JSON, and the server's own
 * statistics. */
#ifndef SONDE_SERVER_SERVER_INTERNAL_H
#define SONDE_SERVER_SERVER_INTERNAL_H

#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/clock.h"
#include "common/json.h"
#include "common/sbuf.h"
#include "net/http.h"
#include "server/lset.h"
#include "server/server.h"
#include "store/store.h"

#define SERVER_DEFAULT_LISTEN "127.0.0.1:7470"
#define SERVER_DEFAULT_RETENTION_MS (7LL * 24 * 3600 * MS_PER_SEC)
#define SERVER_DEFAULT_MAX_BODY (16u << 20)
/* A pprof may inflate to this much (413 past it, gzip bombs included). */
#define SERVER_MAX_DECOMPRESSED (64u << 20)
/* ...and its unpacked message this much (413 past it, reckoned by a scan
 * before unpacking): a real profile unpacks to about 9 times its size,
 * one of empty messages to 50 and more. */
#define SERVER_MAX_UNPACKED (512u << 20)
/* Distinct label sets in one ingest request (each costs a profile). */
#define SERVER_MAX_SERIES 1024
/* Pyroscope's sample_type_config part, and the sample types it may name. */
#define SERVER_MAX_STC (64u << 10)
#define SERVER_MAX_STC_TYPES 32
#define SERVER_MAX_POINTS 100000
/* GPU timeline spans in one ingest request (413 past it), and its body. */
#define SERVER_MAX_SPANS 100000
#define SERVER_MAX_SPANS_BODY (32u << 20)
/* Spans one timeline answer holds: by default, at most (limit=), and the
 * bytes of their names and stacks (the answer is cut there, truncated). */
#define SERVER_TIMELINE_DEFAULT_LIMIT 5000
#define SERVER_TIMELINE_MAX_LIMIT 50000
#define SERVER_TIMELINE_MAX_TEXT (32u << 20)
#define SERVER_MAX_ALERT_BODY (1u << 20)
/* Seconds a client is told to wait (Retry-After) while the store is away. */
#define SERVER_STORE_RETRY_AFTER "5"
/* Answers that list points stop here (400: narrow the range). */
#define SERVER_MAX_POINTS_OUT 2000000
/* Time series answers have at most this many steps. */
#define SERVER_MAX_STEPS 11000
/* Connections at once, and from one address: a slowloris or a flood of
 * idle sockets from one address takes its share, not the server. */
#define SERVER_MAX_CONNECTIONS 16384
#define SERVER_MAX_PER_IP 1024
#define SERVER_TIMEOUT_S 60
/* Queries run on threads of their own (net/http.h's slow routes), never
 * on those that serve the connections, so that /healthz and the ingest
 * routes are answered while every query thread is busy: as many as the
 * HTTP threads, at most this many (the SQLite store has 8 readers; /healthz
 * needs one). */
#define SERVER_MAX_QUERY_THREADS 6
#define SERVER_DEFAULT_QUERY_TIMEOUT_MS 30000
#define SERVER_EXPIRE_PERIOD_S 60
/* A request that took this long may have allocated much: once it is
 * answered, the free memory goes back to the system when there is enough
 * of it (xalloc_give_back). */
#define SERVER_GIVE_BACK_NS ((uint64_t)NS_PER_MS)
/* Projects whose Trace Server Protocol state one server keeps (--auth). */
#define SERVER_MAX_TSP_PROJECTS 256
/* How far past the server's clock a window may end, or a point be taken
 * (400 beyond: a wrong clock or a made-up time, which would never expire
 * and would stretch every range the UI fits to the data). */
#define SERVER_MAX_AHEAD_MS (10LL * 60 * MS_PER_SEC)

struct server;

/* One request as the server's routes see it beyond its HTTP side: who
 * asks, and by when the answer must be made. dispatch() (server.c) makes
 * it for each request and hands it to the route, which hands it on to
 * everything that depends on it: it is never a thread's global, so a
 * route that moves work to another thread carries it along rather than
 * finding nothing there (which would read every project's data). */
struct server_call {
	/* The project of the request's token (--auth): every read matches
	 * it and every write is labelled with it. NULL without --auth. The
	 * Trace Server Protocol's in-process requests are the same call's. */
	const char *project;
	/* When a query must end (common/clock.h mono_ns; the store's reads
	 * give up past it with -ETIMEDOUT), 0 for none; and the limit it was
	 * given (--query-timeout), for the answer that says so. */
	uint64_t deadline_ns;
	uint64_t timeout_ms;
};

/* A route of the server: answers one request, as a route of net/http.h
 * does (0 or HTTP_ANSWERED with the answer in rep, or a negative errno). */
typedef int (*server_route_fn)(struct server *s, const struct server_call *call,
			       const struct http_request *req, struct http_reply *rep);

/* Request statistics for /metrics: per route and status code, and the
 * latency of query routes. */
#define STATS_MAX_CODES 16
#define STATS_NBUCKETS 14

struct route_stats {
	int codes[STATS_MAX_CODES];
	uint64_t counts[STATS_MAX_CODES];
	uint64_t buckets[STATS_NBUCKETS]; /* cumulative at write time, not here */
	uint64_t nobs;
	double sum;
};

struct server_stats {
	pthread_mutex_t lock;
	struct route_stats *routes; /* one per route, then "ui" and "other" */
	uint64_t ingest_samples, ingest_windows, ingest_points, ingest_bytes, ingest_spans;
	uint64_t expire_runs, expire_errors;
	uint64_t query_timeouts;
	uint64_t quota_refusals[STORE_NBOUNDS];
	int64_t start_ms;
};

struct alert_state;
struct route_slot;
struct tokens;

/* The reserved label that keeps projects apart (--auth): the server sets
 * it on every series, point and alert it ingests -- to the token's project,
 * or to nothing without --auth (a client's own is dropped) -- and every
 * read matches it. Never listed among label names. */
#define SERVER_PROJECT_LABEL STORE_PROJECT_LABEL
struct server {
	struct http_server *http;
	struct store *store;
	int64_t retention_ms;
	struct server_stats stats;
	struct route_slot *slots; /* each route's context: its table entry */
	struct alert_state *alerts;
	struct tsp *tsp;       /* the Trace Server Protocol at /tsp/api (tsp.h) */
	struct tokens *tokens; /* --auth; NULL: none */
	uint64_t query_timeout_ms;
	/* The error of the last put the store failed (a full disk...), 0
	 * once one succeeds again: /healthz reports it. */
	int put_err; /* atomically */
	/* With --auth, each project's Trace Server Protocol (its traces and
	 * experiments its own); under lock. */
	struct project_tsp {
		char project[65];
		struct tsp *tsp;
	} * project_tsps;
	size_t nproject_tsps;
	pthread_t expirer;
	bool expirer_running, stopping;
	pthread_mutex_t lock; /* guards stopping, with cond */
	pthread_cond_t cond;
};

/* Answers; each returns 0 (or -ENOMEM with nothing set). A route that
 * sets no content type answers JSON. */
int reply_json(struct http_reply *rep, json_t *j); /* takes j */
int reply_sbuf(struct http_reply *rep, const char *content_type, struct sbuf *b);
/* The same with a malloc()ed body of len bytes, which rep takes. */
int reply_take(struct http_reply *rep, const char *content_type, char *body, size_t len);
/* The errors: each returns HTTP_ANSWERED (the request is answered, the
 * route stops there: net/http.h), or -ENOMEM with nothing set. This one
 * answers {"error": "..."} with status. */
int reply_error(struct http_reply *rep, int status, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* A store's failure err, as 400 (the store refused the request), 503 (away,
 * full, past call's time limit), 507 (a quota) or 500; logged. */
int reply_store_error(struct http_reply *rep, const struct server_call *call, const char *what,
		      int err);

/* Notes a put's outcome (0, or the store's negative errno) for /healthz:
 * a store that can't write is not healthy, though it still reads. */
void server_note_put(struct server *s, int err);

/* Routes. */
int api_ingest(struct server *s, const struct server_call *call, const struct http_request *req,
	       struct http_reply *rep);
int api_ingest_points(struct server *s, const struct server_call *call,
		      const struct http_request *req, struct http_reply *rep);
int api_ingest_spans(struct server *s, const struct server_call *call,
		     const struct http_request *req, struct http_reply *rep);
int api_gpu_timeline(struct server *s, const struct server_call *call,
		     const struct http_request *req, struct http_reply *rep);
int api_pyroscope_ingest(struct server *s, const struct server_call *call,
			 const struct http_request *req, struct http_reply *rep);
int api_labels(struct server *s, const struct server_call *call, const struct http_request *req,
	       struct http_reply *rep);
int api_label_values(struct server *s, const struct server_call *call,
		     const struct http_request *req, struct http_reply *rep);
int api_totals(struct server *s, const struct server_call *call, const struct http_request *req,
	       struct http_reply *rep);
int api_flamegraph(struct server *s, const struct server_call *call, const struct http_request *req,
		   struct http_reply *rep);
int api_pyroscope_render(struct server *s, const struct server_call *call,
			 const struct http_request *req, struct http_reply *rep);
int api_pyroscope_render_diff(struct server *s, const struct server_call *call,
			      const struct http_request *req, struct http_reply *rep);
int api_diff(struct server *s, const struct server_call *call, const struct http_request *req,
	     struct http_reply *rep);
int api_top(struct server *s, const struct server_call *call, const struct http_request *req,
	    struct http_reply *rep);
int api_timeseries(struct server *s, const struct server_call *call, const struct http_request *req,
		   struct http_reply *rep);
int api_points(struct server *s, const struct server_call *call, const struct http_request *req,
	       struct http_reply *rep);
int api_pprof(struct server *s, const struct server_call *call, const struct http_request *req,
	      struct http_reply *rep);
int api_speedscope(struct server *s, const struct server_call *call, const struct http_request *req,
		   struct http_reply *rep);
int api_alerts_post(struct server *s, const struct server_call *call,
		    const struct http_request *req, struct http_reply *rep);
int api_alerts_get(struct server *s, const struct server_call *call, const struct http_request *req,
		   struct http_reply *rep);

/* The web UI's files for a GET of any other path (ctx unused): what
 * `sonde coordinator` serves too. */
int server_serve_ui(void *ctx, const struct http_request *req, struct http_reply *rep);

/* The alerts agents send (alert_state.c). */
struct alert_state *alert_state__new(void);
void alert_state__free(struct alert_state *a);

/* Adds to the ingest counters of /metrics. */
void server_stats__ingested(struct server *s, uint64_t samples, uint64_t windows, uint64_t points);
void server_stats__spans(struct server *s, uint64_t spans);

#endif
