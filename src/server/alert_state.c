/* alert_state.c: POST and GET /api/v1/alerts -- the latest state of each
 * alert agents report (the webhook JSON of docs/alerts.md), keyed by its
 * labels, held in memory per project: firing ones as long as their sender
 * sends them again (agents do every --alert-resend), resolved ones for an
 * hour. Each project has its own bounds -- a count, the bytes of their
 * JSON, the size of one alert -- so that one project's alerts never take
 * another's room: past them the oldest resolved alert goes first, and when
 * every one is firing a new one is refused (503). */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <uthash.h>

#include "server/server_internal.h"
#include "common/clock.h"
#include "common/xalloc.h"

/* Per project. */
#define ALERTS_MAX 10000
#define ALERTS_MAX_BYTES (16u << 20) /* of their JSON text */
/* One alert's JSON text (413 past it: its labels and annotations). */
#define ALERT_MAX_BYTES (16u << 10)
#define ALERTS_KEEP_RESOLVED_MS (3600LL * MS_PER_SEC)
/* A firing alert is dropped once it was not received again for this many
 * of its sender's re-send intervals (as seen between its receipts), at
 * least a minute; one received once only, after two hours (twice the
 * longest --alert-resend). A sender gone (an agent stopped for good, a
 * client that never sends again) leaves nothing firing forever. */
#define ALERTS_RESENDS_MISSED 4
#define ALERTS_FIRING_MIN_MS (60LL * MS_PER_SEC)
#define ALERTS_FIRING_FIRST_MS (2LL * 3600 * MS_PER_SEC)

struct alert_ent {
	char *key;    /* the labels, canonical JSON */
	json_t *obj;  /* what was received, checked */
	size_t bytes; /* its JSON text */
	bool firing;
	int64_t at_ms;	    /* startsAt when firing, endsAt when resolved */
	int64_t updated_ms; /* when it was last received */
	/* The longest time between two receipts while firing: its sender's
	 * re-send interval; 0 until it was received firing twice. */
	int64_t every_ms;
	UT_hash_handle hh;
};

/* A project's alerts ("" without --auth). */
struct alert_project {
	char *name;
	struct alert_ent *alerts; /* uthash, by key */
	size_t n, bytes;
	UT_hash_handle hh;
};

struct alert_state {
	pthread_mutex_t lock;
	struct alert_project *projects; /* uthash, by name */
	int64_t expired_ms;		/* when every project's were last expired */
};

struct alert_state *alert_state__new(void)
{
	struct alert_state *a = calloc(1, sizeof(*a));

	if (a)
		pthread_mutex_init(&a->lock, NULL);
	return a;
}

static void ent__drop(struct alert_project *p, struct alert_ent *e)
{
	HASH_DEL(p->alerts, e);
	p->n--;
	p->bytes -= e->bytes;
	free(e->key);
	json_decref(e->obj);
	free(e);
}

void alert_state__free(struct alert_state *a)
{
	struct alert_project *p, *ptmp;
	struct alert_ent *e, *etmp;

	if (!a)
		return;
	HASH_ITER(hh, a->projects, p, ptmp)
	{
		HASH_ITER(hh, p->alerts, e, etmp)
		ent__drop(p, e);
		HASH_DEL(a->projects, p);
		free(p->name);
		free(p);
	}
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
	return (int64_t)timegm(&tm) * MS_PER_SEC + ms;
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

/* When e, received last at updated_ms, goes. */
static int64_t ent__expires(const struct alert_ent *e)
{
	int64_t keep = ALERTS_KEEP_RESOLVED_MS;

	if (e->firing) {
		keep = e->every_ms ? ALERTS_RESENDS_MISSED * e->every_ms : ALERTS_FIRING_FIRST_MS;
		if (keep < ALERTS_FIRING_MIN_MS)
			keep = ALERTS_FIRING_MIN_MS;
		if (keep > ALERTS_FIRING_FIRST_MS)
			keep = ALERTS_FIRING_FIRST_MS;
	}
	return e->updated_ms + keep;
}

/* Drops the alerts of p whose time is up: resolved ones an hour after
 * their resolution arrived, firing ones not sent again (ent__expires).
 * Under the lock. */
static void project__expire(struct alert_project *p, int64_t now)
{
	struct alert_ent *e, *tmp;

	HASH_ITER(hh, p->alerts, e, tmp)
	{
		if (now >= ent__expires(e))
			ent__drop(p, e);
	}
}

/* Expires every project's alerts, once a second at most (a request costs
 * no walk of them all). Under the lock. */
static void alert_state__expire(struct alert_state *a, int64_t now)
{
	struct alert_project *p, *tmp;

	if (now - a->expired_ms < 1000 && now >= a->expired_ms)
		return;
	a->expired_ms = now;
	HASH_ITER(hh, a->projects, p, tmp)
	project__expire(p, now);
}

/* The alerts of project name (NULL: ""), made when create; NULL when
 * absent or out of memory. Under the lock. */
static struct alert_project *alert_state__project(struct alert_state *a, const char *name,
						  bool create)
{
	struct alert_project *p;

	if (!name)
		name = "";
	HASH_FIND_STR(a->projects, name, p);
	if (p || !create)
		return p;
	p = calloc(1, sizeof(*p));
	if (!p || !(p->name = strdup(name))) {
		free(p);
		return NULL;
	}
	HASH_ADD_KEYPTR(hh, a->projects, p->name, strlen(p->name), p);
	return p;
}

/* Makes room in p for an alert of bytes, a new one or keep (whose bytes
 * are not counted): the resolved alerts updated longest ago go first.
 * -ENOSPC when the rest are firing. Under the lock. */
static int project__room(struct alert_project *p, size_t bytes, const struct alert_ent *keep)
{
	size_t n = p->n + !keep, held = p->bytes - (keep ? keep->bytes : 0);

	while (n > ALERTS_MAX || held + bytes > ALERTS_MAX_BYTES) {
		struct alert_ent *e, *tmp, *victim = NULL;

		HASH_ITER(hh, p->alerts, e, tmp)
		{
			if (!e->firing && e != keep &&
			    (!victim || e->updated_ms < victim->updated_ms))
				victim = e;
		}
		if (!victim)
			return -ENOSPC;
		n--;
		held -= victim->bytes;
		ent__drop(p, victim);
	}
	return 0;
}

/* Stores o (a copy) as received at now in p. 0, -ENOSPC, -ENOMEM. Under
 * the lock. */
static int project__put(struct alert_project *p, json_t *o, size_t bytes, int64_t now)
{
	const char *status = json_string_value(json_object_get(o, "status"));
	bool firing = !strcmp(status, "firing");
	struct alert_ent *e;
	json_t *copy;
	char *key;
	int err;

	key = json_dumps(json_object_get(o, "labels"), JSON_COMPACT | JSON_SORT_KEYS);
	if (!key)
		return -ENOMEM;
	copy = json_deep_copy(o);
	if (!copy) {
		free(key);
		return -ENOMEM;
	}
	HASH_FIND_STR(p->alerts, key, e);
	err = project__room(p, bytes, e);
	if (err) {
		free(key);
		json_decref(copy);
		return err;
	}
	if (e) {
		free(key);
		/* The time since its last receipt, while it fires: how often
		 * its sender sends it again. */
		if (!firing || now >= ent__expires(e))
			e->every_ms = 0; /* (one past its time is a new one) */
		else if (e->firing && now - e->updated_ms > e->every_ms)
			e->every_ms = now - e->updated_ms;
		p->bytes -= e->bytes;
		json_decref(e->obj);
	} else {
		e = calloc(1, sizeof(*e));
		if (!e) {
			free(key);
			json_decref(copy);
			return -ENOMEM;
		}
		e->key = key;
		HASH_ADD_KEYPTR(hh, p->alerts, e->key, strlen(e->key), e);
		p->n++;
	}
	e->obj = copy;
	e->bytes = bytes;
	p->bytes += bytes;
	e->firing = firing;
	e->updated_ms = now;
	e->at_ms =
		rfc3339_ms(json_string_value(json_object_get(o, firing ? "startsAt" : "endsAt")));
	if (e->at_ms < 0)
		e->at_ms = now;
	return 0;
}

/* Stores the checked notifications of root (one, or an array) for project
 * (NULL: none), received at now. 0, -ENOSPC (the project is full of firing
 * alerts: those before the one that found no room are kept), -ENOMEM. */
static int alert_state__post(struct alert_state *a, const char *project, json_t *root,
			     const size_t *bytes, int64_t now)
{
	size_t i, n = json_is_array(root) ? json_array_size(root) : 1;
	struct alert_project *p;
	int err = 0;

	pthread_mutex_lock(&a->lock);
	alert_state__expire(a, now);
	p = alert_state__project(a, project, true);
	if (!p)
		err = -ENOMEM;
	for (i = 0; i < n && !err; i++)
		err = project__put(p, json_is_array(root) ? json_array_get(root, i) : root,
				   bytes[i], now);
	pthread_mutex_unlock(&a->lock);
	return err;
}

int api_alerts_post(struct server *s, const struct server_call *call,
		    const struct http_request *req, struct http_reply *rep)
{
	json_error_t jerr;
	json_t *root, *one;
	const char *body;
	size_t i, n, len, *bytes = NULL;
	int err = 0;

	body = http_request__body(req, &len);
	root = json_loadb(body, len, 0, &jerr);
	if (!root)
		return reply_error(rep, 400, "the body is not JSON: %s at line %d column %d",
				   jerr.text, jerr.line, jerr.column);
	/* One notification, or a list of them, each checked and measured
	 * without the project label a client may have set (the server keeps
	 * each project's apart). */
	n = json_is_array(root) ? json_array_size(root) : 1;
	bytes = calloc(n ? n : 1, sizeof(*bytes));
	if (!bytes) {
		err = -ENOMEM;
		goto cleanup;
	}
	for (i = 0; i < n; i++) {
		const char *why;
		char *text;

		one = json_is_array(root) ? json_array_get(root, i) : root;
		why = alert_check(one);
		if (why) {
			err = reply_error(rep, 400, "alert %zu: %s (see docs/alerts.md, webhook)",
					  i, why);
			goto cleanup;
		}
		json_object_del(json_object_get(one, "labels"), SERVER_PROJECT_LABEL);
		text = json_dumps(one, JSON_COMPACT);
		if (!text) {
			err = -ENOMEM;
			goto cleanup;
		}
		bytes[i] = strlen(text);
		free(text);
		if (bytes[i] > ALERT_MAX_BYTES) {
			err = reply_error(
				rep, 413,
				"alert %zu takes %zu bytes of JSON, more than %u: shorten "
				"its labels and annotations",
				i, bytes[i], ALERT_MAX_BYTES);
			goto cleanup;
		}
	}
	err = alert_state__post(s->alerts, call->project, root, bytes, (int64_t)wall_ms());
	if (err == -ENOSPC) {
		err = reply_error(rep, 503,
				  "the project's alerts are all firing (at most %d alerts, %u MiB):"
				  " no room for more",
				  ALERTS_MAX, ALERTS_MAX_BYTES >> 20);
		goto cleanup;
	}
	if (!err)
		err = reply_json(rep, json_pack("{sI}", "accepted", (json_int_t)n));
cleanup:
	free(bytes);
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

/* The alerts of project (NULL: none) at now, firing first, newest first:
 * a JSON array of copies, NULL on ENOMEM. */
static json_t *alert_state__list(struct alert_state *a, const char *project, int64_t now)
{
	struct alert_ent **order = NULL, *e, *tmp;
	struct alert_project *p;
	json_t *arr = json_array();
	size_t i, k = 0;

	if (!arr)
		return NULL;
	pthread_mutex_lock(&a->lock);
	alert_state__expire(a, now);
	p = alert_state__project(a, project, false);
	if (p) {
		order = malloc((p->n ? p->n : 1) * sizeof(*order));
		if (!order) {
			json_decref(arr);
			arr = NULL;
		}
	}
	if (p && order) {
		HASH_ITER(hh, p->alerts, e, tmp)
		{
			if (now < ent__expires(e))
				order[k++] = e;
		}
		qsort(order, k, sizeof(*order), ent_cmp);
	}
	for (i = 0; arr && i < k; i++) {
		if (json_array_append_new(arr, json_deep_copy(order[i]->obj))) {
			json_decref(arr);
			arr = NULL;
		}
	}
	pthread_mutex_unlock(&a->lock);
	free(order);
	return arr;
}

int api_alerts_get(struct server *s, const struct server_call *call, const struct http_request *req,
		   struct http_reply *rep)
{
	json_t *arr = alert_state__list(s->alerts, call->project, (int64_t)wall_ms());

	if (!arr)
		return -ENOMEM;
	return reply_json(rep, json_pack("{so}", "alerts", arr));
}
