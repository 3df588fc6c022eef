/* point_log.c: the agent's per-second metric points (point_log.h), for
 * agent.c. A sample walks the live metrics once (gpu_metrics__each), sums
 * the series point_defs names into this sample's points -- counters first
 * turned into their increase against the last value kept per series -- and
 * appends them as JSON to the batch that point_log__take hands over. */
#include "agent/point_log.h"
#include "common/xalloc.h"
#include "metrics/gpu_metrics.h"

#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uthash.h>

/* The labels a point may carry besides node and comm, in the order of the
 * fields of its key: "name|pid|gpu_id|op|state" (a field empty when the
 * point has no such label; no value holds a '|': pids, device ordinals and
 * the names of operations and states). */
enum { PL_PID, PL_GPU, PL_OP, PL_STATE, PL_NR };
static const char *const key_labels[PL_NR] = {"pid", "gpu_id", "op", "state"};
#define PL_KEEP(l) (1u << (l))

/* A series of the live metrics and the point it becomes: the labels kept
 * (PL_KEEP bits; the source's other labels are summed over), counters as
 * their increase since the previous sample (left out when 0), gauges as
 * they are (left out below least). */
struct point_def {
	const char *source, *name;
	unsigned keep;
	bool counter;
	double least;
};

static const struct point_def point_defs[] = {
	{"sonde_gpu_memory_used_bytes", "gpu_memory_used_bytes", PL_KEEP(PL_PID) | PL_KEEP(PL_GPU),
	 false, -INFINITY},
	{"sonde_gpu_memory_capacity_bytes", "gpu_memory_capacity_bytes", PL_KEEP(PL_GPU), false,
	 -INFINITY},
	{"sonde_cuda_launches_total", "cuda_launches", PL_KEEP(PL_PID), true, 0},
	{"sonde_gpu_kernel_seconds_total", "gpu_kernel_seconds", PL_KEEP(PL_PID) | PL_KEEP(PL_GPU),
	 true, 0},
	{"sonde_cuda_sync_wait_seconds_sum", "cuda_sync_wait_seconds", PL_KEEP(PL_PID), true, 0},
	{"sonde_nccl_calls_total", "nccl_calls", PL_KEEP(PL_OP), true, 0},
	{"sonde_nccl_duration_seconds_sum", "nccl_seconds", PL_KEEP(PL_OP), true, 0},
	/* The last window's shares, repeated each second of the next; the
	 * states a process hardly spent time in cost nothing. */
	{"sonde_process_time_share", "process_time_share", PL_KEEP(PL_PID) | PL_KEEP(PL_STATE),
	 false, POINT_LOG_MIN_SHARE},
};

/* An entry of the two tables a sample works with, keyed by a string: the
 * points being summed in this sample (by destination series, the key
 * above) and the last value of every counter (by source series). */
struct entry {
	UT_hash_handle hh;
	const struct point_def *def; /* points: what it is */
	double value;
	bool seen; /* counters: in the current sample */
	char key[];
};

struct point_log {
	char *node;
	json_t *points;		  /* array of the points since the last take */
	struct entry *lasts;	  /* counters, by source series */
	struct entry *points_now; /* this sample's points, by destination series */
};

struct point_log *point_log__new(const char *node)
{
	struct point_log *pl = xcalloc(1, sizeof(*pl));

	pl->node = xstrdup(node ? node : "");
	pl->points = json_array();
	return pl;
}

static void entry_del(struct entry **table, struct entry *e)
{
	HASH_DEL(*table, e);
	free(e);
}

void point_log__free(struct point_log *pl)
{
	struct entry *e, *tmp;

	if (!pl)
		return;
	/* points_now is empty between samples. */
	HASH_ITER(hh, pl->lasts, e, tmp)
	{
		entry_del(&pl->lasts, e);
	}
	json_decref(pl->points);
	free(pl->node);
	free(pl);
}

/* The entry of key in *table; a new one (value 0) if there was none, which
 * *created says. */
static struct entry *entry_get(struct entry **table, const char *key, bool *created)
{
	struct entry *e;
	size_t len;

	HASH_FIND_STR(*table, key, e);
	*created = !e;
	if (!e) {
		len = strlen(key);
		e = xcalloc(1, sizeof(*e) + len + 1);
		memcpy(e->key, key, len + 1);
		HASH_ADD_STR(*table, key, e);
	}
	return e;
}

static const char *label(const char *const *labels, const char *name)
{
	for (; labels && labels[0]; labels += 2)
		if (!strcmp(labels[0], name))
			return labels[1];
	return NULL;
}

/* Adds v to this sample's point of def with the source's labels it keeps. */
static void add(struct point_log *pl, const struct point_def *def, const char *const *labels,
		double v)
{
	char key[512];
	size_t n = (size_t)snprintf(key, sizeof(key), "%s", def->name);
	struct entry *e;
	bool created;

	for (int i = 0; i < PL_NR && n < sizeof(key); i++) {
		const char *l = def->keep & PL_KEEP(i) ? label(labels, key_labels[i]) : NULL;

		n += (size_t)snprintf(key + n, sizeof(key) - n, "|%s", l ? l : "");
	}
	e = entry_get(&pl->points_now, key, &created);
	e->def = def;
	e->value += v;
}

/* The increase of a counter since the previous sample (all of it the first
 * time: the agent's counters start with it). */
static double delta(struct point_log *pl, const char *name, const char *const *labels, double v)
{
	char key[512];
	size_t n = (size_t)snprintf(key, sizeof(key), "%s", name);
	struct entry *l;
	bool created;
	double d;

	/* The series' key: name and every label, in the order given. */
	for (; labels && labels[0] && n < sizeof(key); labels += 2)
		n += (size_t)snprintf(key + n, sizeof(key) - n, "|%s=%s", labels[0], labels[1]);
	l = entry_get(&pl->lasts, key, &created);
	if (created)
		d = v;
	else
		d = v >= l->value ? v - l->value : v; /* a reset: the process came back */
	l->value = v;
	l->seen = true;
	return d;
}

static void on_series(void *ctx, const char *name, const char *const *labels, double v)
{
	struct point_log *pl = ctx;

	for (size_t i = 0; i < ARRAY_SIZE(point_defs); i++) {
		const struct point_def *def = &point_defs[i];

		if (!strcmp(name, def->source)) {
			add(pl, def, labels, def->counter ? delta(pl, name, labels, v) : v);
			return;
		}
	}
}

/* The point of entry a as sent, or NULL when its value is left out (a
 * counter that did not move, a gauge below its least). */
static json_t *point_json(const struct point_log *pl, const struct entry *a, uint64_t ts_ms,
			  point_comm_fn comm, void *ctx)
{
	const struct point_def *def = a->def;
	const char *k = a->key + strlen(def->name);
	json_t *labels;

	if (def->counter ? a->value == 0 : a->value < def->least)
		return NULL;
	labels = json_object();
	json_object_set_new(labels, "node", json_string(pl->node));
	for (int i = 0; i < PL_NR && *k == '|'; i++) {
		size_t n = strcspn(k + 1, "|");
		char v[64];

		snprintf(v, sizeof(v), "%.*s", (int)n, k + 1);
		k += 1 + n;
		if (!*v)
			continue;
		json_object_set_new(labels, key_labels[i], json_string(v));
		if (i == PL_PID) {
			const char *c = comm ? comm(ctx, (uint32_t)strtoul(v, NULL, 10)) : NULL;

			if (c && *c)
				json_object_set_new(labels, "comm", json_string(c));
		}
	}
	return json_pack("{s:s, s:o, s:I, s:f}", "name", def->name, "labels", labels, "ts_ms",
			 (json_int_t)ts_ms, "value", a->value);
}

void point_log__sample(struct point_log *pl, struct gpu_metrics *m, uint64_t ts_ms,
		       point_comm_fn comm, void *ctx)
{
	struct entry *e, *tmp;

	HASH_ITER(hh, pl->lasts, e, tmp)
	{
		e->seen = false;
	}
	gpu_metrics__each(m, on_series, pl);
	HASH_ITER(hh, pl->points_now, e, tmp)
	{
		json_t *p = point_json(pl, e, ts_ms, comm, ctx);

		if (p)
			json_array_append_new(pl->points, p);
		entry_del(&pl->points_now, e);
	}
	/* Counters of processes gone: forget them. */
	HASH_ITER(hh, pl->lasts, e, tmp)
	{
		if (!e->seen)
			entry_del(&pl->lasts, e);
	}
}

char *point_log__take(struct point_log *pl, size_t *len)
{
	json_t *body;
	char *s;

	if (!json_array_size(pl->points))
		return NULL;
	body = json_pack("{s:o}", "points", pl->points);
	pl->points = json_array();
	s = body ? json_dumps(body, JSON_COMPACT) : NULL;
	json_decref(body);
	if (s)
		*len = strlen(s);
	return s;
}
