/* eval.c: one tick of the alert engine (alert_engine__eval). It snapshots
 * the series the rules select, evaluates each rule (expr_eval.c), and moves
 * each (rule, label set) instance through pending -> firing -> resolved the
 * way Prometheus does: firing once the condition has held for `for:`,
 * resolved on the first evaluation where it no longer holds (or after
 * keep_firing_for). Each transition to firing and to resolved is notified
 * exactly once to the log, the callbacks and the webhooks; Alertmanager
 * receives the changed alerts at once and the active ones again every resend
 * interval, as Prometheus sends them, and a sonde server the firing ones
 * again every resend interval. The agent calls it every second. */
#include "alerts/alerts_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/xalloc.h"

/* Resolved alerts stay this long for Alertmanager re-sends (Prometheus'
 * resolved retention). */
#define RESOLVED_RETENTION_MS (15 * 60 * MS_PER_SEC)

/* ---- sending ---- */

/* Which sinks a body goes to. */
enum sink_set {
	TO_WEBHOOKS,	  /* every transition */
	TO_ALERTMANAGERS, /* batches of changed and active alerts */
	TO_RESENDING,	  /* the firing alerts again (a sonde server) */
};

static bool sink_in(const struct alert_engine_sink *s, enum sink_set set)
{
	switch (set) {
	case TO_WEBHOOKS:
		return s->kind == ALERT_SINK_WEBHOOK;
	case TO_ALERTMANAGERS:
		return s->kind == ALERT_SINK_ALERTMANAGER;
	case TO_RESENDING:
		return s->resend;
	}
	return false;
}

static size_t sinks_in(const struct alert_engine *e, enum sink_set set)
{
	size_t n = 0;

	for (size_t i = 0; i < e->nsinks; i++)
		n += sink_in(&e->sinks[i], set);
	return n;
}

/* Hands body to every sink of set: to its worker, or to the test hook. */
static void post(struct alert_engine *e, enum sink_set set, const char *body)
{
	for (size_t i = 0; body && i < e->nsinks; i++) {
		const struct alert_engine_sink *s = &e->sinks[i];

		if (!sink_in(s, set))
			continue;
		if (e->hook)
			e->hook(e->hook_ctx, s->kind, s->url, body);
		else
			alert_sink__push(s->s, xstrdup(body));
	}
}

/* The log line of a transition. */
static void log_transition(struct alert_engine *e, const struct alert_rule *r,
			   const struct alert_instance *a)
{
	static char *const alertname[] = {"alertname"};
	const char *summary = alert_instance__annotation(r, a, "summary");
	char labels[512], dur[64];

	alert_key__set(&e->key, &a->l, alertname, 1, false);
	alert_key__text(&e->key, labels, sizeof(labels));
	if (a->state == ALERT_FIRING) {
		pr_warn("alert %s firing: %s%s%s", r->name, summary && *summary ? summary : "",
			summary && *summary ? " " : "", labels);
	} else {
		alert_format_humanize_duration(dur, sizeof(dur),
					       (double)(a->resolved_ms - a->fired_ms) / MS_PER_SEC);
		pr_info("alert %s resolved after %s: %s", r->name, dur, labels);
	}
}

/* A transition of a, to firing or to resolved. */
static void notify(struct alert_engine *e, const struct alert_rule *r,
		   const struct alert_instance *a)
{
	json_t *n;

	log_transition(e, r, a);
	n = alert_notification_json(r, a);
	for (size_t i = 0; i < e->ncallbacks; i++)
		e->callbacks[i].fn(e->callbacks[i].ctx, n);
	if (sinks_in(e, TO_WEBHOOKS)) {
		char *body = alert_json_dump(n);

		post(e, TO_WEBHOOKS, body);
		free(body);
	}
	json_decref(n);
}

/* Alerts that Alertmanager should hear about now: changed since last sent,
 * or not sent for a resend interval. */
static void send_alertmanager(struct alert_engine *e, int64_t now)
{
	json_t *batch = NULL;
	char *body;

	if (!sinks_in(e, TO_ALERTMANAGERS))
		return;
	for (size_t i = 0; i < e->nrules; i++) {
		struct alert_rule *r = &e->rules[i];
		struct alert_instance *a;

		for (a = r->active; a; a = a->hh.next) {
			bool resolved = a->state == ALERT_INACTIVE;

			if (a->state == ALERT_PENDING)
				continue;
			if (a->am_sent_ms && resolved == a->am_sent_resolved &&
			    now - a->am_sent_ms < (int64_t)e->delivery.resend_ms)
				continue;
			if (!batch)
				batch = json_array();
			json_array_append_new(batch, alert_am_json(e, r, a, now));
			a->am_sent_ms = now;
			a->am_sent_resolved = resolved;
		}
	}
	if (!batch)
		return;
	body = alert_json_dump(batch);
	json_decref(batch);
	post(e, TO_ALERTMANAGERS, body);
	free(body);
}

/* Every resend interval, the firing alerts again to the sinks that keep
 * state (a sonde server): one that restarted, or missed a notification,
 * learns what is firing. Resolutions go out once, at the transition. */
static void resend_firing(struct alert_engine *e, int64_t now)
{
	if (!sinks_in(e, TO_RESENDING) || now - e->resent_ms < (int64_t)e->delivery.resend_ms)
		return;
	e->resent_ms = now;
	for (size_t i = 0; i < e->nrules; i++) {
		struct alert_rule *r = &e->rules[i];
		struct alert_instance *a;

		for (a = r->active; a; a = a->hh.next) {
			json_t *n;
			char *body;

			/* (one that fired within the interval was just notified) */
			if (a->state != ALERT_FIRING ||
			    now - a->fired_ms < (int64_t)e->delivery.resend_ms)
				continue;
			n = alert_notification_json(r, a);
			body = alert_json_dump(n);
			json_decref(n);
			post(e, TO_RESENDING, body);
			free(body);
		}
	}
}

/* ---- instances ---- */

static void instance_free(struct alert_rule *r, struct alert_instance *a)
{
	free(a->key);
	for (size_t i = 0; i < 2 * a->l.n; i++)
		free((char *)a->l.kv[i]);
	free(a->l.kv);
	for (size_t i = 0; a->annotations && i < r->nannotations; i++)
		free(a->annotations[i]);
	free(a->annotations);
	free(a);
}

static void instance_drop(struct alert_rule *r, struct alert_instance *a)
{
	HASH_DEL(r->active, a);
	instance_free(r, a);
}

void alert_rule__drop_instances(struct alert_rule *r)
{
	struct alert_instance *a, *tmp;

	HASH_ITER(hh, r->active, a, tmp)
	{
		instance_drop(r, a);
	}
}

/* A pending instance of r with labels l (copied), key k, active from now. */
static struct alert_instance *instance_new(struct alert_rule *r, const struct alert_labels *l,
					   const struct alert_key *k, int64_t now)
{
	struct alert_instance *a = xcalloc(1, sizeof(*a));

	a->klen = k->n;
	a->key = memcpy(xmalloc(k->n ? k->n : 1), k->b, k->n);
	a->l.n = l->n;
	a->l.kv = xcalloc(2 * l->n + 1, sizeof(char *));
	for (size_t j = 0; j < 2 * l->n; j++)
		a->l.kv[j] = xstrdup(l->kv[j]);
	a->state = ALERT_PENDING;
	a->active_ms = now;
	HASH_ADD_KEYPTR(hh, r->active, a->key, a->klen, a);
	return a;
}

/* Sets label k of l to v (l has room for it), unless it is there and
 * keep. */
static void labels_put(struct alert_labels *l, const char *k, const char *v, bool keep)
{
	size_t j;

	for (j = 0; j < l->n && strcmp(l->kv[2 * j], k); j++)
		;
	if (j < l->n && keep)
		return;
	if (j == l->n)
		l->n++;
	l->kv[2 * j] = k;
	l->kv[2 * j + 1] = v;
}

/* An empty label is no label (Prometheus drops them). */
static void labels_drop_empty(struct alert_labels *l)
{
	for (size_t i = 0; i < l->n;) {
		if (*l->kv[2 * i + 1]) {
			i++;
			continue;
		}
		memmove(&l->kv[2 * i], &l->kv[2 * i + 2], 2 * (l->n - i - 1) * sizeof(char *));
		l->n--;
	}
}

/* The alert's labels for sample s: the series' labels, the rule's labels
 * over them, alertname, then the external labels where still absent;
 * sorted. In snap's arena. */
static struct alert_labels instance_labels(struct alert_engine *e, struct alert_rule *r,
					   const struct alert_sample *s)
{
	size_t max = s->l.n + r->nlabels + 1 + e->next;
	struct alert_labels l = {
		.kv = alert_arena__alloc(&e->snap.arena, (2 * max + 1) * sizeof(char *)),
		.n = s->l.n,
	};

	memcpy(l.kv, s->l.kv, 2 * s->l.n * sizeof(char *));
	for (size_t i = 0; i < r->nlabels; i++) {
		char *text = alert_tmpl__render(r->labels[i].t, &s->l, s->v);

		labels_put(&l, r->labels[i].key, alert_arena__strdup(&e->snap.arena, text), false);
		free(text);
	}
	labels_put(&l, "alertname", r->name, false);
	for (size_t i = 0; i < e->next; i++)
		labels_put(&l, e->ext[2 * i], e->ext[2 * i + 1], true);
	labels_drop_empty(&l);
	alert_labels__sort(&l);
	return l;
}

static void render_annotations(struct alert_rule *r, struct alert_instance *a)
{
	if (!a->annotations)
		a->annotations = xcalloc(r->nannotations + 1, sizeof(char *));
	for (size_t i = 0; i < r->nannotations; i++) {
		free(a->annotations[i]);
		a->annotations[i] = alert_tmpl__render(r->annotations[i].t, &a->l, a->value);
	}
}

/* ---- evaluation ---- */

/* Sample s of r's result at now: its instance, made pending when new, seen
 * now. false for a second sample with the same alert labels (ignored). */
static bool observe(struct alert_engine *e, struct alert_rule *r, const struct alert_sample *s,
		    int64_t now)
{
	struct alert_labels l = instance_labels(e, r, s);
	struct alert_instance *a;

	alert_key__set(&e->key, &l, NULL, 0, false);
	HASH_FIND(hh, r->active, e->key.b, e->key.n, a);
	if (a && a->last_seen_ms == now && a->state != ALERT_INACTIVE) {
		if (!r->dup_warned)
			pr_warn("alert rule %s: two series give the same alert labels at once; "
				"keeping the first -- add labels that tell them apart",
				r->name);
		return false;
	}
	if (a && a->state == ALERT_INACTIVE) {
		/* Resolved, and back: a new alert, as in Prometheus. */
		instance_drop(r, a);
		a = NULL;
	}
	if (!a)
		a = instance_new(r, &l, &e->key, now);
	a->value = s->v;
	a->last_seen_ms = now;
	render_annotations(r, a);
	return true;
}

/* Moves r's instances on at now: a pending one not seen goes, one held for
 * `for:` fires; a firing one not seen (for keep_firing_for) resolves; a
 * resolved one goes after the retention. */
static void advance(struct alert_engine *e, struct alert_rule *r, int64_t now)
{
	struct alert_instance *a, *tmp;

	HASH_ITER(hh, r->active, a, tmp)
	{
		bool seen = a->last_seen_ms == now;

		switch (a->state) {
		case ALERT_PENDING:
			if (!seen) {
				instance_drop(r, a);
			} else if (now - a->active_ms >= (int64_t)r->for_ms) {
				a->state = ALERT_FIRING;
				a->fired_ms = now;
				notify(e, r, a);
			}
			break;
		case ALERT_FIRING:
			if (seen || now - a->last_seen_ms < (int64_t)r->keep_firing_ms)
				break;
			a->state = ALERT_INACTIVE;
			a->resolved_ms = now;
			notify(e, r, a);
			break;
		case ALERT_INACTIVE:
			if (now - a->resolved_ms >= RESOLVED_RETENTION_MS)
				instance_drop(r, a);
			break;
		}
	}
}

static void eval_rule(struct alert_engine *e, struct alert_rule *r, int64_t now)
{
	struct alert_vector v = {0};
	char msg[256];
	bool dup = false;

	if (alert_expr__eval(r->expr, &e->snap, &v, msg, sizeof(msg))) {
		e->eval_errors++;
		/* Like Prometheus, the alerts keep their state until the rule
		 * evaluates again. */
		if (strcmp(r->last_error, msg))
			pr_warn("can't evaluate alert rule %s (line %u): %s -- its alerts keep "
				"their state until it evaluates again",
				r->name, r->line, msg);
		snprintf(r->last_error, sizeof(r->last_error), "%s", msg);
		return;
	}
	if (r->last_error[0]) {
		pr_info("alert rule %s evaluates again", r->name);
		r->last_error[0] = '\0';
	}
	for (size_t i = 0; i < v.n; i++)
		dup |= !observe(e, r, &v.s[i], now);
	alert_vector__free(&v);
	r->dup_warned = dup;
	advance(e, r, now);
}

void alert_engine__eval(struct alert_engine *e, uint64_t now_ms, series_source src, void *src_ctx)
{
	int64_t now = (int64_t)now_ms;

	pthread_mutex_lock(&e->lock);
	/* Two evals in the same millisecond would look like a duplicate. */
	if (e->evals && now <= e->last_eval_ms)
		now = e->last_eval_ms + 1;
	if (e->evals)
		e->interval_ms = now - e->last_eval_ms;
	e->last_eval_ms = now;
	e->evals++;
	alert_snapshot__collect(&e->snap, src, src_ctx);
	for (size_t i = 0; i < e->nrules; i++)
		eval_rule(e, &e->rules[i], now);
	send_alertmanager(e, now);
	resend_firing(e, now);
	alert_snapshot__clear(&e->snap);
	pthread_mutex_unlock(&e->lock);
}
