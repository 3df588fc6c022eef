/* tsp_internal.h: what tsp.c (the endpoint: routing, bodies, traces and
 * experiments) and tsp_outputs.c (the outputs' trees, XY series and time
 * graph states) share behind tsp.h. */
#ifndef SONDE_SERVER_TSP_INTERNAL_H
#define SONDE_SERVER_TSP_INTERNAL_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/sbuf.h"
#include "server/tsp.h"

#define TSP_UUID_LEN 36
/* Traces in one experiment. */
#define TSP_MAX_EXP_TRACES 64
/* Processes of a trace that outputs show (the busiest), and the nodes
 * they are looked for on. */
#define TSP_MAX_PROCS 32
#define TSP_MAX_NODES 16
/* Functions of a trace in the data tree. */
#define TSP_TOP_LIMIT 200
/* Time steps of an XY series or a row of states (the query API's bound). */
#define TSP_MAX_STEPS 11000
/* Entry ids: below 2^49, at most 15 decimal digits. */
#define TSP_ID_MASK ((1ULL << 49) - 1)

/* A trace: the profile series a selector picks. */
struct tsp_trace {
	char uuid[TSP_UUID_LEN + 1];
	char *name;
	char *selector;
};

/* A request being answered: the endpoint, who asks, the partial/failed
 * fields of the backend's answers so far, and the error to answer, once
 * there is one. */
struct tsp_call {
	struct tsp *t;
	void *who; /* tsp__handle()'s, for the backend */
	bool oom;  /* a query string could not be built */
	bool partial;
	json_t *failed; /* array, or NULL */
	int status;	/* an error's (0 while none) */
	char msg[512];
};

/* Sets the call's error (the first one kept); returns -1 for chaining. */
int tsp_call__fail(struct tsp_call *c, int status, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* GET path?query of the backend; the answer on 200 (the caller's), else
 * NULL with the call's error set (a 400 of the backend stays a 400, other
 * failures are a 502 naming the route). */
json_t *tsp_call__get(struct tsp_call *c, const char *path, const char *query);

/* A query string being built: "key=value&..." with values percent-encoded
 * (on ENOMEM the call's oom is set, and its next get fails). */
void tsp_qs(struct tsp_call *c, struct sbuf *b, const char *key, const char *value);
void tsp_qs_int(struct tsp_call *c, struct sbuf *b, const char *key, int64_t v);
/* The selector sel with matchers name="value" added (pairs, NULL-ended);
 * the caller frees it. */
char *tsp_selector_with(const char *sel, ...) __attribute__((sentinel));
/* A stable id below 2^49 for a string key. */
int64_t tsp_id(const char *a, const char *b, const char *c);
/* A JSON real of 9 significant digits at most (rounded so that it prints
 * so), or an integer when it is a small whole number. */
json_t *tsp_number(double v);

/* A time range asked for: [from_ms, until_ms) for the query API, the
 * nanoseconds asked, and how many times to sample (0: none said). */
struct tsp_range {
	int64_t start_ns, end_ns;
	int64_t from_ms, until_ms;
	int64_t nb_times;
};

/* What one output request asks: its range, and the entries (NULL: none
 * named). */
struct tsp_query {
	struct tsp_range range;
	const json_t *items; /* requested_items, borrowed from the body */
};

/* An experiment as the outputs see it: a copy of its traces. */
struct tsp_exp_view {
	char uuid[TSP_UUID_LEN + 1];
	struct tsp_trace *traces;
	size_t ntraces;
	int64_t start_ns, end_ns; /* from the data; 0 when it has none */
	json_t *types;		  /* per trace: array of its profile types */
};

/* The outputs of an experiment (an array of descriptors) -- which ones the
 * data has. NULL with the call's error set. */
json_t *tsp_outputs__list(struct tsp_call *c, const struct tsp_exp_view *e);
/* The descriptor of output id, or NULL (404 set) when it has no such one. */
json_t *tsp_outputs__get(struct tsp_call *c, const struct tsp_exp_view *e, const char *id);
/* kind "data", "XY" or "timeGraph", what "tree", "xy", "states",
 * "arrows": the model of a GenericResponse, or NULL with the error set. */
json_t *tsp_outputs__fetch(struct tsp_call *c, const struct tsp_exp_view *e, const char *kind,
			   const char *id, const char *what, const struct tsp_query *q);
/* The style map of the time graph's states. */
json_t *tsp_outputs__styles(void);

#endif
