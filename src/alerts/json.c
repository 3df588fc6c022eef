/* json.c: what the alert engine says in JSON -- the notification a webhook
 * and the callbacks receive, Alertmanager's postableAlert, and the agent's
 * /alerts (current alerts) and /rules (loaded rules, their health) -- with
 * its numbers and times as Prometheus writes them (format.c). Used by eval.c
 * when it notifies, and by the agent's HTTP routes. */
#include "alerts/alerts_internal.h"
#include "common/duration.h"

#include <math.h>
#include <string.h>

static json_t *value_json(double v)
{
	char buf[40];

	if (isfinite(v))
		return json_real(v);
	alert_format_value(buf, sizeof(buf), v);
	return json_string(buf);
}

static json_t *time_json(int64_t ms)
{
	char buf[40];

	alert_format_rfc3339(buf, sizeof(buf), ms);
	return json_string(buf);
}

static json_t *labels_json(const struct alert_labels *l)
{
	json_t *o = json_object();

	for (size_t i = 0; i < l->n; i++)
		json_object_set_new(o, l->kv[2 * i], json_string(l->kv[2 * i + 1]));
	return o;
}

static json_t *annotations_json(const struct alert_rule *r, const struct alert_instance *a)
{
	json_t *o = json_object();

	for (size_t i = 0; a->annotations && i < r->nannotations; i++)
		json_object_set_new(o, r->annotations[i].key, json_string(a->annotations[i]));
	return o;
}

const char *alert_instance__annotation(const struct alert_rule *r, const struct alert_instance *a,
				       const char *key)
{
	for (size_t i = 0; a->annotations && i < r->nannotations; i++)
		if (!strcmp(r->annotations[i].key, key))
			return a->annotations[i];
	return NULL;
}

json_t *alert_notification_json(const struct alert_rule *r, const struct alert_instance *a)
{
	bool resolved = a->state == ALERT_INACTIVE;

	return json_pack(
		"{s:s, s:s, s:o, s:o, s:o, s:o, s:o}", "status", resolved ? "resolved" : "firing",
		"alert", r->name, "labels", labels_json(&a->l), "annotations",
		annotations_json(r, a), "startsAt", time_json(a->fired_ms), "endsAt",
		resolved ? time_json(a->resolved_ms) : json_null(), "value", value_json(a->value));
}

/* A firing alert is valid until four resend intervals from now, so that
 * Alertmanager resolves it by itself if the agent dies. */
json_t *alert_am_json(const struct alert_engine *e, const struct alert_rule *r,
		      const struct alert_instance *a, int64_t now)
{
	int64_t every =
		e->delivery.resend_ms > e->interval_ms ? e->delivery.resend_ms : e->interval_ms;
	int64_t ends = a->state == ALERT_INACTIVE ? a->resolved_ms : now + 4 * every;
	json_t *o = json_pack("{s:o, s:o, s:o, s:o}", "labels", labels_json(&a->l), "annotations",
			      annotations_json(r, a), "startsAt", time_json(a->fired_ms), "endsAt",
			      time_json(ends));

	if (e->generator_url)
		json_object_set_new(o, "generatorURL", json_string(e->generator_url));
	return o;
}

char *alert_json_dump(const json_t *j)
{
	return json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(15));
}

json_t *alert_engine__list(struct alert_engine *e)
{
	json_t *out = json_array();

	pthread_mutex_lock(&e->lock);
	for (size_t i = 0; i < e->nrules; i++) {
		struct alert_rule *r = &e->rules[i];

		for (struct alert_instance *a = r->active; a; a = a->hh.next) {
			const char *summary = alert_instance__annotation(r, a, "summary");
			json_t *o;

			if (a->state == ALERT_INACTIVE)
				continue;
			o = json_pack("{s:s, s:o, s:s, s:o, s:o, s:s, s:o}", "name", r->name,
				      "labels", labels_json(&a->l), "state",
				      a->state == ALERT_FIRING ? "firing" : "pending", "activeAt",
				      time_json(a->active_ms), "value", value_json(a->value),
				      "summary", summary ? summary : "", "annotations",
				      annotations_json(r, a));
			if (a->state == ALERT_FIRING)
				json_object_set_new(o, "firedAt", time_json(a->fired_ms));
			json_array_append_new(out, o);
		}
	}
	pthread_mutex_unlock(&e->lock);
	return out;
}

static json_t *kv_json(const struct alert_rule_kv *kv, size_t n)
{
	json_t *o = json_object();

	for (size_t i = 0; i < n; i++)
		json_object_set_new(o, kv[i].key, json_string(kv[i].text));
	return o;
}

json_t *alert_engine__rules(struct alert_engine *e)
{
	json_t *out = json_array();

	pthread_mutex_lock(&e->lock);
	for (size_t i = 0; i < e->nrules; i++) {
		struct alert_rule *r = &e->rules[i];
		char f[32], k[32];

		duration_format(f, sizeof(f), r->for_ms);
		duration_format(k, sizeof(k), r->keep_firing_ms);
		json_array_append_new(
			out,
			json_pack("{s:s, s:s, s:s, s:s, s:o, s:o, s:i, s:s, s:s}", "alert", r->name,
				  "expr", r->expr_text, "for", f, "keep_firing_for", k, "labels",
				  kv_json(r->labels, r->nlabels), "annotations",
				  kv_json(r->annotations, r->nannotations), "line",
				  (json_int_t)r->line, "health", r->last_error[0] ? "err" : "ok",
				  "lastError", r->last_error));
	}
	pthread_mutex_unlock(&e->lock);
	return out;
}
