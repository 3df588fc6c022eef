/* point_log.c: the agent's per-second metric points (point_log.h), for
 * agent.c. A sample walks the live metrics once (gpu_metrics__each), sums
 * the series it keeps into this sample's points -- counters first turned
 * into their increase against the last value kept per series -- and appends
 * them as JSON to the batch that point_log__take hands over. */
#include "agent/point_log.h"
#include "common/xalloc.h"
#include "metrics/gpu_metrics.h"

#include <inttypes.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uthash.h>

/* An entry of the two tables a sample works with, keyed by a string: the
 * points being summed in this sample (by destination series, "name|pid|
 * gpu_id|op") and the last value of every counter (by source series). */
struct entry {
	UT_hash_handle hh;
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

/* Adds v to the point name{pid,comm / gpu_id / op} of this sample. */
static void add(struct point_log *pl, const char *name, const char *pid, const char *gpu,
		const char *op, double v)
{
	char key[512];
	bool created;

	snprintf(key, sizeof(key), "%s|%s|%s|%s", name, pid ? pid : "", gpu ? gpu : "",
		 op ? op : "");
	entry_get(&pl->points_now, key, &created)->value += v;
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
	const char *pid = label(labels, "pid"), *gpu = label(labels, "gpu_id");
	const char *op = label(labels, "op");

	if (!strcmp(name, "sonde_gpu_memory_used_bytes"))
		add(pl, "gpu_memory_used_bytes", pid, gpu, NULL, v);
	else if (!strcmp(name, "sonde_gpu_memory_capacity_bytes"))
		add(pl, "gpu_memory_capacity_bytes", NULL, gpu, NULL, v);
	else if (!strcmp(name, "sonde_cuda_launches_total"))
		add(pl, "cuda_launches", pid, NULL, NULL, delta(pl, name, labels, v));
	else if (!strcmp(name, "sonde_cuda_sync_wait_seconds_sum"))
		add(pl, "cuda_sync_wait_seconds", pid, NULL, NULL, delta(pl, name, labels, v));
	else if (!strcmp(name, "sonde_nccl_calls_total"))
		add(pl, "nccl_calls", NULL, NULL, op, delta(pl, name, labels, v));
	else if (!strcmp(name, "sonde_nccl_duration_seconds_sum"))
		add(pl, "nccl_seconds", NULL, NULL, op, delta(pl, name, labels, v));
}

static bool is_counter_point(const char *name)
{
	return strcmp(name, "gpu_memory_used_bytes") && strcmp(name, "gpu_memory_capacity_bytes");
}

/* The point of entry a (key "name|pid|gpu|op", empty fields empty) as sent,
 * or NULL when it is a counter that did not move. */
static json_t *point_json(const struct point_log *pl, const struct entry *a, uint64_t ts_ms,
			  point_comm_fn comm, void *ctx)
{
	char name[128], pid[32], gpu[32], op[64];
	char *f[4] = {name, pid, gpu, op};
	size_t sizes[4] = {sizeof(name), sizeof(pid), sizeof(gpu), sizeof(op)};
	const char *k = a->key;
	json_t *labels;

	for (int i = 0; i < 4; i++) {
		size_t n = strcspn(k, "|");

		snprintf(f[i], sizes[i], "%.*s", (int)n, k);
		k += n + (k[n] == '|');
	}
	if (is_counter_point(name) && a->value == 0)
		return NULL;
	labels = json_object();
	json_object_set_new(labels, "node", json_string(pl->node));
	if (*pid) {
		const char *c = comm ? comm(ctx, (uint32_t)strtoul(pid, NULL, 10)) : NULL;

		json_object_set_new(labels, "pid", json_string(pid));
		if (c && *c)
			json_object_set_new(labels, "comm", json_string(c));
	}
	if (*gpu)
		json_object_set_new(labels, "gpu_id", json_string(gpu));
	if (*op)
		json_object_set_new(labels, "op", json_string(op));
	return json_pack("{s:s, s:o, s:I, s:f}", "name", name, "labels", labels, "ts_ms",
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
