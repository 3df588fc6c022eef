/* alert_state.c: POST and GET /api/v1/alerts -- the latest state of each
 * alert agents report (the webhook JSON of docs/alerts.md), keyed by its
 * labels, held in memory: firing ones until they resolve, resolved ones
 * for an hour. Bounded: past ALERTS_MAX the oldest resolved alert goes
 * first, and when every one is firing a new one is refused (503). */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/server_internal.h"
#include "common/clock.h"
#include "common/xalloc.h"

#define ALERTS_MAX 10000
#define ALERTS_KEEP_RESOLVED_MS (3600 * 1000LL)

struct alert_ent {
	char *key;   /* the labels, canonical JSON */
	json_t *obj; /* what was received, checked */
	bool firing;
	int64_t at_ms;	    /* startsAt when firing, endsAt when resolved */
	int64_t updated_ms; /* when it was last received */
};

struct alert_state {
	pthread_mutex_t lock;
	struct alert_ent *v;
	size_t n, cap;
};

struct alert_state *alert_state__new(void)
{
	struct alert_state *a = calloc(1, sizeof(*a));

	if (a)
		pthread_mutex_init(&a->lock, NULL);
	return a;
}

static void ent__free(struct alert_ent *e)
{
	free(e->key);
	json_decref(e->obj);
}

void alert_state__free(struct alert_state *a)
{
	if (!a)
		return;
	for (size_t i = 0; i < a->n; i++)
		ent__free(&a->v[i]);
	free(a->v);
	pthread_mutex_destroy(&a->lock);
	free(a);
}

/* RFC 3339 UTC ("2024-05-01T12:00:02.100Z", fraction optional) in ms;
 * -1 when it is something else. */
static int64_t rfc3339_ms(const char *s)
{
	struct tm tm;
	const char *p;
	int64_t ms = 0, scale = 100;

	if (!s)
		return -1;
	memset(&tm, 0, sizeof(tm));
	p = strptime(s, "%Y-%m-%dT%H:%M:%S", &tm);
	if (!p)
		return -1;
	if (*p == '.') {
		for (p++; *p >= '0' && *p <= '9'; p++) {
			ms += (*p - '0') * scale;
			scale /= 10;
		}
	}
	if (strcmp(p, "Z") && strcmp(p, "+00:00"))
		return -1;
	return (int64_t)timegm(&tm) * 1000 + ms;
}

static bool strings_object(json_t *o)
{
	const char *k;
	json_t *v;

	if (!json_is_object(o))
		return false;
	json_object_foreach(o, k, v)
	{
		if (!json_is_string(v))
			return false;
	}
	return true;
}

/* Checks one notification; NULL or the reason. */
static const char *alert_check(json_t *o)
{
	const char *status = json_string_value(json_object_get(o, "status"));
	json_t *ann = json_object_get(o, "annotations"), *ends = json_object_get(o, "endsAt");
	json_t *val = json_object_get(o, "value"), *starts = json_object_get(o, "startsAt");
	const char *name = json_string_value(json_object_get(o, "alert"));

	if (!json_is_object(o))
		return "an alert must be a JSON object";
	if (!status || (strcmp(status, "firing") && strcmp(status, "resolved")))
		return "\"status\" must be \"firing\" or \"resolved\"";
	if (!name || !*name)
		return "\"alert\" must be the alert's name";
	if (!strings_object(json_object_get(o, "labels")))
		return "\"labels\" must be an object of strings";
	if (ann && !strings_object(ann))
		return "\"annotations\" must be an object of strings";
	if (starts && !json_is_string(starts))
		return "\"startsAt\" must be an RFC 3339 time";
	if (ends && !json_is_null(ends) && !json_is_string(ends))
		return "\"endsAt\" must be null or an RFC 3339 time";
	if (val && !json_is_number(val) && !json_is_string(val))
		return "\"value\" must be a number (or \"NaN\", \"+Inf\", \"-Inf\")";
	return NULL;
}

/* Drops resolved alerts older than an hour. Under the lock. */
static void alert_state__expire(struct alert_state *a, int64_t now)
{
	size_t i, o = 0;

	for (i = 0; i < a->n; i++) {
		if (!a->v[i].firing && now - a->v[i].updated_ms > ALERTS_KEEP_RESOLVED_MS) {
			ent__free(&a->v[i]);
			continue;
		}
		a->v[o++] = a->v[i];
	}
	a->n = o;
}

/* Stores o (a new reference is taken). Under the lock. 0, -ENOSPC, -ENOMEM. */
static int alert_state__put(struct alert_state *a, json_t *o, int64_t now)
{
	const char *status = json_string_value(json_object_get(o, "status"));
	bool firing = !strcmp(status, "firing");
	struct alert_ent *e = NULL;
	char *key;
	size_t i;

	key = json_dumps(json_object_get(o, "labels"), JSON_COMPACT | JSON_SORT_KEYS);
	if (!key)
		return -ENOMEM;
	for (i = 0; i < a->n; i++)
		if (!strcmp(a->v[i].key, key)) {
			e = &a->v[i];
			free(key);
			break;
		}
	if (!e) {
		if (a->n >= ALERTS_MAX) {
			/* Make room: the resolved alert updated longest ago. */
			size_t victim = a->n;

			for (i = 0; i < a->n; i++)
				if (!a->v[i].firing &&
				    (victim == a->n ||
				     a->v[i].updated_ms < a->v[victim].updated_ms))
					victim = i;
			if (victim == a->n) {
				free(key);
				return -ENOSPC;
			}
			ent__free(&a->v[victim]);
			a->v[victim] = a->v[--a->n];
		}
		if (array_grow((void **)&a->v, &a->cap, a->n + 1, sizeof(*a->v))) {
			free(key);
			return -ENOMEM;
		}
		e = &a->v[a->n++];
		memset(e, 0, sizeof(*e));
		e->key = key;
	}
	json_decref(e->obj);
	e->obj = json_deep_copy(o);
	e->firing = firing;
	e->updated_ms = now;
	e->at_ms =
		rfc3339_ms(json_string_value(json_object_get(o, firing ? "startsAt" : "endsAt")));
	if (e->at_ms < 0)
		e->at_ms = now;
	return e->obj ? 0 : -ENOMEM;
}

int api_alerts_post(struct server *s, const struct http_request *req, struct http_reply *rep)
{
	struct alert_state *a = s->alerts;
	json_error_t jerr;
	json_t *root, *one;
	const char *body;
	size_t i, n, len;
	int64_t now = (int64_t)wall_ms();
	int err = 0;

	body = http_request__body(req, &len);
	root = json_loadb(body, len, 0, &jerr);
	if (!root)
		return reply_error(rep, 400, "the body is not JSON: %s at line %d column %d",
				   jerr.text, jerr.line, jerr.column);
	/* One notification, or a list of them. */
	n = json_is_array(root) ? json_array_size(root) : 1;
	for (i = 0; i < n; i++) {
		const char *why;

		one = json_is_array(root) ? json_array_get(root, i) : root;
		why = alert_check(one);
		if (why) {
			err = reply_error(rep, 400, "alert %zu: %s (see docs/alerts.md, webhook)",
					  i, why);
			goto cleanup;
		}
	}
	/* Each alert in the request's project (server_internal.h), which
	 * keeps the same alert of two projects apart. */
	for (i = 0; i < n && !err; i++) {
		json_t *labels = json_object_get(
			json_is_array(root) ? json_array_get(root, i) : root, "labels");

		if (server_project())
			err = json_object_set_new(labels, SERVER_PROJECT_LABEL,
						  json_string(server_project()))
				      ? -ENOMEM
				      : 0;
		else
			json_object_del(labels, SERVER_PROJECT_LABEL);
	}
	if (err)
		goto cleanup;
	pthread_mutex_lock(&a->lock);
	alert_state__expire(a, now);
	for (i = 0; i < n && !err; i++)
		err = alert_state__put(a, json_is_array(root) ? json_array_get(root, i) : root,
				       now);
	pthread_mutex_unlock(&a->lock);
	if (err == -ENOSPC) {
		err = reply_error(rep, 503, "%d alerts are firing: no room for more", ALERTS_MAX);
		goto cleanup;
	}
	if (!err)
		err = reply_json(rep, json_pack("{sI}", "accepted", (json_int_t)n));
cleanup:
	json_decref(root);
	return err;
}

static int ent_cmp(const void *x, const void *y)
{
	const struct alert_ent *a = *(struct alert_ent *const *)x,
			       *b = *(struct alert_ent *const *)y;

	if (a->firing != b->firing)
		return a->firing ? -1 : 1;
	if (a->at_ms != b->at_ms)
		return a->at_ms > b->at_ms ? -1 : 1;
	return strcmp(a->key, b->key);
}

int api_alerts_get(struct server *s, const struct http_request *req, struct http_reply *rep)
{
	struct alert_state *a = s->alerts;
	struct alert_ent **order = NULL;
	json_t *arr = json_array(), *j = json_pack("{so}", "alerts", arr);
	int err = 0;
	size_t i;

	if (!j)
		return -ENOMEM;
	pthread_mutex_lock(&a->lock);
	alert_state__expire(a, (int64_t)wall_ms());
	order = malloc((a->n ? a->n : 1) * sizeof(*order));
	if (!order) {
		err = -ENOMEM;
	} else {
		const char *project = server_project();
		size_t k = 0;

		/* The request's project's alerts (all of them without --auth),
		 * shown without the server's label. */
		for (i = 0; i < a->n; i++) {
			const char *p = json_string_value(json_object_get(
				json_object_get(a->v[i].obj, "labels"), SERVER_PROJECT_LABEL));

			if (!project || (p && !strcmp(p, project)))
				order[k++] = &a->v[i];
		}
		if (k)
			qsort(order, k, sizeof(*order), ent_cmp);
		for (i = 0; i < k && !err; i++) {
			json_t *o = json_deep_copy(order[i]->obj);

			json_object_del(json_object_get(o, "labels"), SERVER_PROJECT_LABEL);
			if (!o || json_array_append_new(arr, o))
				err = -ENOMEM;
		}
	}
	pthread_mutex_unlock(&a->lock);
	free(order);
	if (err) {
		json_decref(j);
		return err;
	}
	return reply_json(rep, j);
}
