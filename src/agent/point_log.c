/* point_log.c: the agent's per-second metric points. See point_log.h. */
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

/* A point as it will be sent; its key is its name and labels. */
struct acc {
	UT_hash_handle hh;
	double value;
	char key[];
};

/* The last value of a counter series, to send increases. */
struct last {
	UT_hash_handle hh;
	double value;
	bool seen; /* in the current sample */
	char key[];
};

struct point_log {
	char *node;
	json_t *points;	    /* array of the points since the last take */
	struct last *lasts; /* counters, by source series */
	struct acc *accs;   /* this sample's points, by destination series */
	uint64_t ts_ms;
	point_comm_fn comm;
	void *comm_ctx;
};

struct point_log *point_log__new(const char *node)
{
	struct point_log *pl = xcalloc(1, sizeof(*pl));

	pl->node = xstrdup(node ? node : "");
	pl->points = json_array();
	return pl;
}

void point_log__free(struct point_log *pl)
{
	struct last *l, *ltmp;

	if (!pl)
		return;
	HASH_ITER(hh, pl->lasts, l, ltmp)
	{
		HASH_DEL(pl->lasts, l);
		free(l);
	}
	json_decref(pl->points);
	free(pl->node);
	free(pl);
}

static const char *label(const char *const *labels, const char *name)
{
	for (; labels && labels[0]; labels += 2)
		if (!strcmp(labels[0], name))
			return labels[1];
	return NULL;
}

/* The series' key: name and every label, in the order given. */
static void series_key(char *buf, size_t size, const char *name, const char *const *labels)
{
	size_t n = (size_t)snprintf(buf, size, "%s", name);

	for (; labels && labels[0] && n < size; labels += 2)
		n += (size_t)snprintf(buf + n, size - n, "|%s=%s", labels[0], labels[1]);
}

/* Adds v to the destination point name{pid,comm / gpu_id / op}. */
static void add(struct point_log *pl, const char *name, const char *pid, const char *gpu,
		const char *op, double v)
{
	char key[512];
	struct acc *a;
	size_t len;

	snprintf(key, sizeof(key), "%s|%s|%s|%s", name, pid ? pid : "", gpu ? gpu : "",
		 op ? op : "");
	HASH_FIND_STR(pl->accs, key, a);
	if (!a) {
		len = strlen(key);
		a = xcalloc(1, sizeof(*a) + len + 1);
		memcpy(a->key, key, len + 1);
		HASH_ADD_STR(pl->accs, key, a);
	}
	a->value += v;
}

/* The increase of a counter since the previous sample (all of it the first
 * time: the agent's counters start with it). */
static double delta(struct point_log *pl, const char *name, const char *const *labels, double v)
{
	char key[512];
	struct last *l;
	double d;

	series_key(key, sizeof(key), name, labels);
	HASH_FIND_STR(pl->lasts, key, l);
	if (!l) {
		size_t len = strlen(key);

		l = xcalloc(1, sizeof(*l) + len + 1);
		memcpy(l->key, key, len + 1);
		HASH_ADD_STR(pl->lasts, key, l);
		d = v;
	} else {
		d = v >= l->value ? v - l->value : v; /* a reset: the process came back */
	}
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

void point_log__sample(struct point_log *pl, struct gpu_metrics *m, uint64_t ts_ms,
		       point_comm_fn comm, void *ctx)
{
	struct last *l, *ltmp;
	struct acc *a, *atmp;

	HASH_ITER(hh, pl->lasts, l, ltmp)
	l->seen = false;
	gpu_metrics__each(m, on_series, pl);
	HASH_ITER(hh, pl->accs, a, atmp)
	{
		char name[128], pid[32], gpu[32], op[64];
		json_t *p, *labels;

		HASH_DEL(pl->accs, a);
		/* The key is "name|pid|gpu|op", empty fields empty. */
		{
			char *f[4] = {name, pid, gpu, op}, *k = a->key;
			size_t sizes[4] = {sizeof(name), sizeof(pid), sizeof(gpu), sizeof(op)};

			for (int i = 0; i < 4; i++) {
				size_t n = strcspn(k, "|");

				snprintf(f[i], sizes[i], "%.*s", (int)n, k);
				k += n + (k[n] == '|');
			}
		}
		if (is_counter_point(name) && a->value == 0) {
			free(a);
			continue;
		}
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
		p = json_pack("{s:s, s:o, s:I, s:f}", "name", name, "labels", labels, "ts_ms",
			      (json_int_t)ts_ms, "value", a->value);
		if (p)
			json_array_append_new(pl->points, p);
		free(a);
	}
	/* Counters of processes gone: forget them. */
	HASH_ITER(hh, pl->lasts, l, ltmp)
	{
		if (l->seen)
			continue;
		HASH_DEL(pl->lasts, l);
		free(l);
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
