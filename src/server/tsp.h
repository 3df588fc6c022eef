/* tsp.h: a subset of the Trace Server Protocol (the TSP's API.yaml 0.6, as
 * Trace Compass and its clients speak it) over Sonde's query API -- health;
 * traces (every service, and any label selector opened as
 * "sonde:SELECTOR"); experiments of one or more traces; and their outputs:
 * a data tree of top functions per profile type, XY charts (a type's value
 * per second per trace and process; GPU memory per process) and a time
 * graph of processes' states. docs/api.md, "Trace Server Protocol", says
 * what each answers.
 *
 * The protocol knows nothing of where the data is: it asks a backend, which
 * answers GETs of the query API (docs/api.md: /api/v1/totals, top,
 * timeseries, points, label/values, flamegraph) with their parsed JSON.
 * `sonde server` mounts it at /tsp/api with a backend that calls its own
 * query routes in-process (server.c); `sonde coordinator` mounts it with a
 * backend over its merged answers. An answer's "partial": true and
 * "failed": [...] (a coordinator's, when a server did not answer) are
 * carried into the TSP answers built from it.
 *
 * Traces and experiments live in memory, at most TSP_MAX_TRACES and
 * TSP_MAX_EXPERIMENTS (a 507 past them); their UUIDs are hashes of what
 * they are (a trace's selector, an experiment's name), so they are the same
 * on every server and after a restart. Entry and series ids are hashes
 * below 2^49 (15 decimal digits: the npm client's JSON parser reads longer
 * numbers as BigInt). Times are nanoseconds since the epoch, exact
 * integers; doubles are written with 9 significant digits. */
#ifndef SONDE_SERVER_TSP_H
#define SONDE_SERVER_TSP_H

#include <jansson.h>
#include <stddef.h>

/* Where the protocol is mounted. */
#define TSP_PREFIX "/tsp/api"
/* Traces opened or deleted (services listed but untouched take no room). */
#define TSP_MAX_TRACES 1024
#define TSP_MAX_EXPERIMENTS 256
/* A request body (413 past it; the protocol's bodies are small). */
#define TSP_MAX_BODY (1u << 20)

struct tsp;
struct http_request;
struct http_reply;

/* Asks the query API: GET path?query, path as "/api/v1/top" and query a
 * percent-encoded query string without the '?' ("" for none), as a part
 * of the request who (what tsp__serve() or tsp__handle() was given with
 * it: the caller, as the service that mounts the protocol knows it).
 * Returns the HTTP status (200 for an answer), with *answer the answer's
 * parsed JSON (the caller's to json_decref()) -- for an error status, its
 * {"error": "..."} or NULL; or a negative errno when nothing could be
 * asked. Called from the threads that serve requests, concurrently. */
typedef int (*tsp_get_fn)(void *ctx, void *who, const char *path, const char *query,
			  json_t **answer);

struct tsp_backend {
	tsp_get_fn get;
	void *ctx;
	/* The identifier's productId ("sonde server"); NULL: "sonde". */
	const char *product;
};

/* A protocol endpoint over b (copied; ctx must outlive the endpoint).
 * NULL with errno set on ENOMEM. */
struct tsp *tsp__new(const struct tsp_backend *b);
/* NULL is a no-op. */
void tsp__free(struct tsp *t);

/* Answers one request of who (handed as it is to the backend's get):
 * method ("GET", "POST", "DELETE", ...), path (whole, TSP_PREFIX first, or
 * the part after it), body (JSON, len bytes; may be NULL for none). Sets
 * *status and *answer (JSON, the caller's; errors are
 * {"title": "...", "error": "..."}). 0, or -ENOMEM with nothing set. */
int tsp__handle(struct tsp *t, void *who, const char *method, const char *path, const char *body,
		size_t len, int *status, json_t **answer);

/* The same as a route of net/http.h: answers req of who into rep with
 * Content-Type application/json, the JSON as the client needs it (doubles
 * of 9 significant digits). 0 or -ENOMEM. */
int tsp__serve(struct tsp *t, void *who, const struct http_request *req, struct http_reply *rep);

#endif
