/* server_internal.h: what the files of src/server/ share behind server.h --
 * the server object, a request (its route, query arguments and body) and
 * the reply a route fills, the route handlers of api_ingest.c,
 * api_query.c and alert_state.c, and the server's own statistics. */
#ifndef SONDE_SERVER_SERVER_INTERNAL_H
#define SONDE_SERVER_SERVER_INTERNAL_H

#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "server/server.h"
#include "server/util.h"
#include "store/store.h"

struct MHD_Connection;
struct MHD_Daemon;
struct MHD_PostProcessor;

#define SERVER_DEFAULT_LISTEN "127.0.0.1:7470"
#define SERVER_DEFAULT_RETENTION_MS (7LL * 24 * 3600 * 1000)
#define SERVER_DEFAULT_MAX_BODY (16u << 20)
/* A pprof may inflate to this much (413 past it, gzip bombs included). */
#define SERVER_MAX_DECOMPRESSED (64u << 20)
/* ...and its unpacked message this much (413 past it): a real profile
 * unpacks to about 9 times its size, one of empty messages to 70. */
#define SERVER_MAX_UNPACKED (512u << 20)
/* Distinct label sets in one ingest request (each costs a profile). */
#define SERVER_MAX_SERIES 1024
/* Pyroscope's sample_type_config part, and the sample types it may name. */
#define SERVER_MAX_STC (64u << 10)
#define SERVER_MAX_STC_TYPES 32
#define SERVER_MAX_POINTS 100000
#define SERVER_MAX_ALERT_BODY (1u << 20)
/* Answers that list points stop here (400: narrow the range). */
#define SERVER_MAX_POINTS_OUT 2000000
/* Time series answers have at most this many steps. */
#define SERVER_MAX_STEPS 11000
#define SERVER_MAX_CONNECTIONS 256
#define SERVER_TIMEOUT_S 60
#define SERVER_EXPIRE_PERIOD_S 60

/* What a route answers. */
struct reply {
	int status;		  /* 0: 200 */
	const char *content_type; /* static; NULL: application/json */
	char *body;		  /* malloc()ed, taken by the server */
	size_t len;
	char disposition[160]; /* Content-Disposition, "" for none */
};

struct req;
typedef int (*route_fn)(struct req *rq, struct reply *rep);

enum route_kind { ROUTE_INGEST, ROUTE_QUERY, ROUTE_OTHER };

struct route {
	const char *path;
	route_fn get, post;
	enum route_kind kind;
	uint64_t max_body; /* 0: the server's */
	bool binary_body;  /* POST takes a protobuf body (415 for other types) */
	bool multipart;	   /* POST may be multipart/form-data */
};

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
	uint64_t ingest_samples, ingest_windows, ingest_points, ingest_bytes;
	uint64_t expire_runs, expire_errors;
	int64_t start_ms;
};

struct alert_state;

struct server {
	struct MHD_Daemon *daemon;
	struct store *store;
	int port;
	int64_t retention_ms;
	uint64_t max_body;
	struct server_stats stats;
	struct alert_state *alerts;
	pthread_t expirer;
	bool expirer_running, stopping;
	pthread_mutex_t lock; /* guards stopping, with cond */
	pthread_cond_t cond;
};

struct req {
	struct server *srv;
	struct MHD_Connection *conn;
	const struct route *route;
	int route_idx; /* stats slot */
	const char *method, *url;
	int status; /* what was answered */
	int64_t start_ns;
	bool head, answered;
	/* The body, up to the route's limit; past it, too_big and the rest
	 * is counted and dropped. */
	char *body;
	size_t len, cap;
	uint64_t seen;
	bool too_big;
	/* multipart/form-data: the "profile" part, and Pyroscope's
	 * "sample_type_config" (at most SERVER_MAX_STC bytes). */
	struct MHD_PostProcessor *pp;
	bool multipart, pp_failed;
	struct sbuf part, stc;
	bool have_part, have_stc;
};

/* The value of query argument key, or NULL. */
const char *req__arg(const struct req *rq, const char *key);
/* A request header, or NULL. */
const char *req__header(const struct req *rq, const char *name);
/* Calls fn for each query argument (value "" when it has none). */
void req__args(const struct req *rq, void (*fn)(void *ctx, const char *k, const char *v),
	       void *ctx);

/* Reply helpers; each returns 0 (or -ENOMEM with nothing set). */
int reply_json(struct reply *rep, json_t *j); /* takes j */
int reply_error(struct reply *rep, int status, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
int reply_sbuf(struct reply *rep, const char *content_type, struct sbuf *b);
/* The same with a malloc()ed body of len bytes, which rep takes. */
int reply_take(struct reply *rep, const char *content_type, char *body, size_t len);
/* 500/503 for a store failure, logged. */
int reply_store_error(struct reply *rep, const char *what, int err);

/* Routes. */
int api_ingest(struct req *rq, struct reply *rep);
int api_ingest_points(struct req *rq, struct reply *rep);
int api_pyroscope_ingest(struct req *rq, struct reply *rep);
int api_labels(struct req *rq, struct reply *rep);
int api_label_values(struct req *rq, struct reply *rep);
int api_flamegraph(struct req *rq, struct reply *rep);
int api_pyroscope_render(struct req *rq, struct reply *rep);
int api_pyroscope_render_diff(struct req *rq, struct reply *rep);
int api_diff(struct req *rq, struct reply *rep);
int api_top(struct req *rq, struct reply *rep);
int api_timeseries(struct req *rq, struct reply *rep);
int api_points(struct req *rq, struct reply *rep);
int api_pprof(struct req *rq, struct reply *rep);
int api_speedscope(struct req *rq, struct reply *rep);
int api_alerts_post(struct req *rq, struct reply *rep);
int api_alerts_get(struct req *rq, struct reply *rep);

/* The alerts agents send (alert_state.c). */
struct alert_state *alert_state__new(void);
void alert_state__free(struct alert_state *a);

/* Adds to the ingest counters of /metrics. */
void server_stats__ingested(struct server *s, uint64_t samples, uint64_t windows, uint64_t points);

#endif
