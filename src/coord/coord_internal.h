/* coord_internal.h: what the files of src/coord/ share behind coord.h --
 * the coordinator object and its statistics (coord.c), the fan-out of one
 * GET to every site in parallel with libcurl's multi interface
 * (fanout.c), and the store that answers the server's reads by fanning
 * out and merging (remote.c), through which the server's own query routes
 * (src/server/api_query.c) answer for all the sites at once. */
#ifndef SONDE_COORD_COORD_INTERNAL_H
#define SONDE_COORD_COORD_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/clock.h"
#include "coord/coord.h"
#include "store/store.h"

#define COORD_DEFAULT_THREADS 16
#define COORD_DEFAULT_MAX_ANSWER (256u << 20)
/* A site's pprof may inflate to this much. */
#define COORD_MAX_PPROF (1u << 30)
/* Latency buckets of /metrics (seconds). */
#define COORD_NBUCKETS 14

/* Why a site failed a request, for /metrics. */
enum site_fail {
	SITE_FAIL_TIMEOUT,
	SITE_FAIL_CONNECT,
	SITE_FAIL_HTTP,	      /* answered, not 200 */
	SITE_FAIL_BAD_ANSWER, /* 200, but not what the route answers */
	SITE_FAIL_TOO_LARGE,
	SITE_FAIL_NR,
};

struct site_stats {
	uint64_t requests;
	uint64_t failures[SITE_FAIL_NR];
	uint64_t buckets[COORD_NBUCKETS]; /* per bucket, not cumulative */
	double sum;
};

struct curl_slist;

/* Callers (by token) whose Trace Server Protocol state one coordinator
 * keeps: a token gets its state once a server that checks tokens has
 * accepted it; past the count the least recently used one is dropped, and
 * one unused for COORD_AUTH_TSP_IDLE_MS is dropped at the next new one. A
 * token is checked again after COORD_AUTH_TSP_RECHECK_MS (a revoked one
 * loses its state). */
#define COORD_MAX_AUTH_TSPS 256
#define COORD_AUTH_TSP_IDLE_MS (24LL * 3600 * MS_PER_SEC)
#define COORD_AUTH_TSP_RECHECK_MS 60000
/* Which servers check tokens is asked again after this long. */
#define COORD_AUTH_SITES_MS 60000

/* A token's Trace Server Protocol state. */
struct coord_tsp {
	unsigned char key[32]; /* SHA-256 of the Authorization value */
	struct tsp *tsp;
	int refs; /* the list's, and each request's using it; under lock */
	int64_t used_ms, checked_ms;
};

struct coord {
	struct http_server *http;
	const struct coord_config *cfg;
	uint64_t timeout_ms, max_answer;
	struct route_slot *slots;
	struct tsp *tsp;      /* /tsp/api over the merged answers */
	pthread_mutex_t lock; /* guards what follows */
	/* Callers whose token a server accepted each have a TSP of their
	 * own (its traces and experiments), by the token's hash. */
	struct coord_tsp **auth_tsps;
	size_t nauth_tsps;
	uint64_t auth_tsps_dropped;
	/* Which sites refuse a request without a token (they run with
	 * --auth), as of auth_sites_ms (0: never asked). */
	bool *site_checks_tokens;
	int64_t auth_sites_ms;
	struct site_stats *sites;
	struct coord_route_stats *routes;
	uint64_t partial, all_failed;
	int64_t start_ms;
};

/* One request to the coordinator beyond its HTTP side: who asks. dispatch()
 * (coord.c) makes it for each request and hands it down to everything
 * that asks the sites on its behalf -- never a thread's global, so work
 * moved to another thread carries it along. The Trace Server Protocol's
 * in-process requests are the same call's. */
struct coord_call {
	/* The caller's Authorization, forwarded to every site (a server run
	 * with --auth checks it; the coordinator checks no token itself);
	 * NULL: none. */
	const char *auth;
	/* The Retry-After of the last 429 answered for it because every site
	 * refused the caller ("" while none), for the Trace Server Protocol's
	 * answers, which are built from the query routes'. */
	char retry_after[16];
};

/* One fan-out's view of the sites, for a call: which failed (and are not
 * asked again for the rest of the request) and why, and the store its
 * reads go through. */
struct coord_req {
	struct store base; /* remote.c's ops: the first member, cast back */
	struct coord *c;
	struct coord_call *call; /* whose (its auth forwarded) */
	const char *by;		 /* the label totals are grouped by (see remote.c) */
	bool *failed;
	bool *timed_out;
	/* answered 401 (or 429: refused for others' failures): checks
	 * tokens, and didn't take the caller's */
	bool *refused;
	char **why; /* malloc()ed, per failed site */
	size_t nfailed;
	size_t n401;		/* sites that refused the caller's token */
	size_t n429;		/* sites that refused the caller for its failures */
	unsigned retry_after_s; /* the longest Retry-After of those 429s */
	unsigned fanouts;	/* fan-outs made */
	/* The caller's Authorization, forwarded to every site (a server
	 * run with --auth checks it); NULL: none. */
	struct curl_slist *headers;
};

/* A fan-out's state over c's sites for call (borrowed: it outlives r);
 * 0 or -ENOMEM. */
int coord_req__init(struct coord_req *r, struct coord *c, struct coord_call *call, const char *by);
void coord_req__free(struct coord_req *r);
/* Marks site i failed for the rest of the request, with why. */
void coord_req__fail(struct coord_req *r, size_t i, enum site_fail kind, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

/* Takes one site's answer (a 200's body, len bytes, NUL-terminated):
 * 0, -EINVAL with why (the site's answer was not what the route answers:
 * the site fails), or -ENOMEM (the fan-out stops). */
typedef int (*coord_answer_fn)(void *ctx, size_t site, const char *body, size_t len, char *why,
			       size_t whylen);

/* GETs target ("/api/v1/labels?query=...") from every site of r not failed
 * yet, in parallel, each within the timeout, and hands each 200 to fn as
 * it arrives (on this thread); a site that fails (no answer in time, not
 * a 200, an answer over the limit, fn's -EINVAL) is marked so in r.
 * 0 or -ENOMEM. */
int coord_req__fan(struct coord_req *r, const char *target, coord_answer_fn fn, void *ctx);

/* The store whose reads fan out over r's sites (r->base after init). */
extern const struct store_ops coord_remote_ops;

/* Appends to *b "query=SEL&from=F&until=U" for q, the selector written
 * back from its matchers and escaped for a URL. 0 or -ENOMEM. */
struct sbuf;
int coord_query_args(struct sbuf *b, const struct store_query *q);

#endif
