/* engine.c: the alert engine of `sonde agent`. Every tick it snapshots the
 * series the rules select, evaluates each rule, and moves each (rule, label
 * set) instance through pending -> firing -> resolved the way Prometheus
 * does: firing once the condition has held for `for:`, resolved on the first
 * evaluation where it no longer holds (or after keep_firing_for). Each
 * transition to firing and to resolved is notified exactly once to the log,
 * the webhooks and the callbacks; Alertmanager receives the changed alerts at
 * once and the active ones again every resend interval, as Prometheus sends
 * them. The rule grammar is in rules.c and expr.c, delivery in
 * sinks.c; docs/alerts.md describes all of it. */
#include "alerts/alerts_internal.h"
#include "common/prom.h"
#include "common/duration.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/xalloc.h"

#define RULE_FILE_MAX (1 << 20)
/* Resolved alerts stay this long for Alertmanager re-sends (Prometheus'
 * resolved retention). */
#define RESOLVED_RETENTION_MS (15 * 60 * 1000)
#define DRAIN_MS 2000

struct engine_sink {
	enum alert_sink_kind kind;
	bool resend; /* a webhook that also gets the firing alerts again */
	char *url;
	struct alert_sink *s; /* NULL under the test hook */
};

struct callback {
	alert_notify_fn fn;
	void *ctx;
};

struct alert_engine {
	pthread_mutex_t lock;
	struct alert_rule *rules;
	size_t nrules;
	struct alert_snapshot snap;
	struct engine_sink *sinks;
	size_t nsinks;
	struct callback *callbacks;
	size_t ncallbacks;
	struct alert_delivery delivery;
	char *generator_url;
	char **ext; /* external labels: key, value, key, value... */
	size_t next;
	alert_post_hook hook;
	void *hook_ctx;
	uint64_t evals, eval_errors;
	int64_t last_eval_ms;
	int64_t interval_ms; /* between the last two evals */
	int64_t resent_ms;   /* firing alerts last sent again to resending sinks */
};

/* ---- construction ---- */

static void set_defaults(struct alert_delivery *d, const struct alert_delivery *in)
{
	d->timeout_ms = in && in->timeout_ms ? in->timeout_ms : 5000;
	d->retries = in && in->retries ? in->retries : 3;
	d->backoff_ms = in && in->backoff_ms ? in->backoff_ms : 1000;
	d->queue_len = in && in->queue_len ? in->queue_len : 256;
	d->resend_ms = in && in->resend_ms ? in->resend_ms : 30000;
}

static void want_name(void *ctx, const char *name)
{
	alert_snapshot__want(ctx, name);
}

static struct alert_engine *engine_new(struct alert_rule *rules, size_t n)
{
	struct alert_engine *e = xcalloc(1, sizeof(*e));
	char host[256] = "localhost";
	char url[320];

	pthread_mutex_init(&e->lock, NULL);
	e->rules = rules;
	e->nrules = n;
	for (size_t i = 0; i < n; i++)
		alert_expr__names(rules[i].expr, want_name, &e->snap);
	set_defaults(&e->delivery, NULL);
	if (gethostname(host, sizeof(host) - 1))
		snprintf(host, sizeof(host), "localhost");
	host[sizeof(host) - 1] = '\0';
	alert_engine__set_external_label(e, "node", host);
	snprintf(url, sizeof(url), "http://%s:9091/alerts", host);
	e->generator_url = xstrdup(url);
	return e;
}

struct alert_engine *alert_engine__load_string(const char *text, const char *name, char *err,
					       size_t errlen)
{
	struct alert_rule *rules = NULL;
	size_t n = 0;
	char dummy[8];

	if (!err || !errlen) {
		err = dummy;
		errlen = sizeof(dummy);
	}
	if (alert_rules_parse(text, strlen(text), name, &rules, &n, err, errlen)) {
		errno = EINVAL;
		return NULL;
	}
	return engine_new(rules, n);
}

struct alert_engine *alert_engine__load(const char *path, char *err, size_t errlen)
{
	struct alert_engine *e = NULL;
	char *text = NULL;
	struct stat st;
	ssize_t got = 0;
	int fd, saved = 0;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &st)) {
		saved = errno;
		snprintf(err, errlen, "%s: can't read the rule file: %s", path, strerror(saved));
		goto cleanup;
	}
	if (!S_ISREG(st.st_mode) || st.st_size > RULE_FILE_MAX) {
		saved = S_ISREG(st.st_mode) ? EFBIG : EINVAL;
		snprintf(err, errlen, "%s: not a rule file: %s", path,
			 S_ISREG(st.st_mode) ? "larger than 1 MiB" : "not a regular file");
		goto cleanup;
	}
	text = xmalloc(st.st_size + 1);
	while (got < st.st_size) {
		ssize_t r = read(fd, text + got, st.st_size - got);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			saved = r < 0 ? errno : EIO;
			snprintf(err, errlen, "%s: can't read the rule file: %s", path,
				 strerror(saved));
			goto cleanup;
		}
		got += r;
	}
	text[got] = '\0';
	if (strlen(text) != (size_t)got) {
		saved = EINVAL;
		snprintf(err, errlen, "%s:1: the file contains a NUL byte: not a YAML rule file",
			 path);
		goto cleanup;
	}
	e = alert_engine__load_string(text, path, err, errlen);
	saved = e ? 0 : errno;
cleanup:
	if (fd >= 0)
		close(fd);
	free(text);
	if (!e)
		errno = saved;
	return e;
}

/* A threshold in seconds as a duration: "1m", "2s", "1ms", else "500us". */
static void threshold_text(char *buf, size_t len, double secs)
{
	double ms = secs * 1000;

	if (ms >= 1 && ms == (double)(uint64_t)ms)
		duration_format(buf, len, (uint64_t)ms);
	else
		alert_format_humanize_duration(buf, len, secs);
}

char *alert_defaults__yaml(const struct alert_defaults *d)
{
	double mem = d && d->gpu_memory_ratio > 0 ? d->gpu_memory_ratio : 0.95;
	double stuck = d && d->nccl_stuck_seconds > 0 ? d->nccl_stuck_seconds : 60;
	double p99 = d && d->launch_p99_seconds > 0 ? d->launch_p99_seconds : 0.001;
	char mem_s[40], mem_pct[40], stuck_s[40], stuck_h[40], p99_s[40], p99_h[40];
	char *out;

	alert_format_value(mem_s, sizeof(mem_s), mem);
	alert_format_humanize_percentage(mem_pct, sizeof(mem_pct), mem);
	alert_format_value(stuck_s, sizeof(stuck_s), stuck);
	threshold_text(stuck_h, sizeof(stuck_h), stuck);
	alert_format_value(p99_s, sizeof(p99_s), p99);
	threshold_text(p99_h, sizeof(p99_h), p99);
	if (asprintf(
		    &out,
		    "# Sonde's default alert rules: what `sonde agent` evaluates without --rules.\n"
		    "rules:\n"
		    "  # The seed daemon's \"GPU OOM Warning: triggers when gpu_memory_used_pct > "
		    "95%%\".\n"
		    "  - alert: GpuOOMWarning\n"
		    "    expr: sonde_gpu_memory_used_ratio > %s\n"
		    "    for: 30s\n"
		    "    severity: warning\n"
		    "    summary: \"GPU OOM Warning: pid {{ $labels.pid }} holds {{ $value | "
		    "humanizePercentage }} of the memory of GPU {{ $labels.gpu_id }}\"\n"
		    "    description: \"GPU memory used has stayed above %s of the device for 30s; "
		    "the next allocation may fail with out-of-memory.\"\n"
		    "  - alert: NcclCollectiveStuck\n"
		    "    expr: sonde_nccl_stuck_seconds > %s\n"
		    "    severity: critical\n"
		    "    summary: \"NCCL {{ $labels.op }} stuck for {{ $value | humanizeDuration "
		    "}} "
		    "on rank {{ $labels.rank }} of communicator {{ $labels.comm }} "
		    "(pid {{ $labels.pid }})\"\n"
		    "    description: \"A thread of pid {{ $labels.pid }} has waited more than %s "
		    "for the GPU after ncclX({{ $labels.op }}): a peer rank may have died, hung "
		    "or taken another path.\"\n"
		    "  - alert: CudaLaunchLatencyHigh\n"
		    "    expr: zernel_cuda_launch_latency_seconds{quantile=\"0.99\"} > %s\n"
		    "    for: 1m\n"
		    "    severity: warning\n"
		    "    summary: \"CUDA launch latency p99 of pid {{ $labels.pid }} is {{ $value "
		    "| "
		    "humanizeDuration }} (threshold %s)\"\n"
		    "    description: \"Kernel launches have been slow for a minute: the launching "
		    "thread is starved of CPU or the launch queue is full.\"\n",
		    mem_s, mem_pct, stuck_s, stuck_h, p99_s, p99_h) < 0)
		return NULL;
	return out;
}

struct alert_engine *alert_engine__new_defaults(const struct alert_defaults *d)
{
	char *yaml = alert_defaults__yaml(d);
	char err[512];
	struct alert_engine *e;

	if (!yaml) {
		errno = ENOMEM;
		return NULL;
	}
	e = alert_engine__load_string(yaml, "<default rules>", err, sizeof(err));
	if (!e)
		pr_err("can't load the default alert rules: %s -- a bug, please report it", err);
	free(yaml);
	return e;
}

void alert_engine__free(struct alert_engine *e)
{
	if (!e)
		return;
	for (size_t i = 0; i < e->nsinks; i++) {
		alert_sink__free(e->sinks[i].s, DRAIN_MS);
		free(e->sinks[i].url);
	}
	free(e->sinks);
	free(e->callbacks);
	for (size_t i = 0; i < e->nrules; i++)
		alert_rule__free(&e->rules[i]);
	free(e->rules);
	alert_snapshot__free(&e->snap);
	for (size_t i = 0; i < 2 * e->next; i++)
		free(e->ext[i]);
	free(e->ext);
	free(e->generator_url);
	pthread_mutex_destroy(&e->lock);
	free(e);
}

/* ---- settings and sinks ---- */

void alert_engine__set_delivery(struct alert_engine *e, const struct alert_delivery *d)
{
	pthread_mutex_lock(&e->lock);
	set_defaults(&e->delivery, d);
	pthread_mutex_unlock(&e->lock);
}

static bool valid_url(const char *url)
{
	const char *host;

	if (!url)
		return false;
	if (!strncmp(url, "http://", 7))
		host = url + 7;
	else if (!strncmp(url, "https://", 8))
		host = url + 8;
	else
		return false;
	if (!*host || *host == '/')
		return false;
	for (const char *p = url; *p; p++)
		if ((unsigned char)*p <= ' ')
			return false;
	return true;
}

static int add_sink(struct alert_engine *e, enum alert_sink_kind kind, const char *url, bool resend)
{
	struct engine_sink es = {.kind = kind, .resend = resend};

	if (!valid_url(url))
		return -EINVAL;
	if (kind == ALERT_SINK_ALERTMANAGER) {
		size_t n = strlen(url);
		const char *api = "/api/v2/alerts";

		while (n > 0 && url[n - 1] == '/')
			n--;
		if (n >= strlen(api) && !strncmp(url + n - strlen(api), api, strlen(api)))
			n -= strlen(api);
		if (asprintf(&es.url, "%.*s%s", (int)n, url, api) < 0)
			return -ENOMEM;
	} else {
		es.url = xstrdup(url);
	}
	pthread_mutex_lock(&e->lock);
	if (!e->hook) {
		es.s = alert_sink__new(kind, es.url, &e->delivery);
		if (!es.s) {
			int err = -errno;

			pthread_mutex_unlock(&e->lock);
			free(es.url);
			return err;
		}
	}
	e->sinks = xrealloc(e->sinks, (e->nsinks + 1) * sizeof(*e->sinks));
	e->sinks[e->nsinks++] = es;
	pthread_mutex_unlock(&e->lock);
	return 0;
}

int alert_engine__add_webhook(struct alert_engine *e, const char *url)
{
	return add_sink(e, ALERT_SINK_WEBHOOK, url, false);
}

int alert_engine__add_server(struct alert_engine *e, const char *url)
{
	return add_sink(e, ALERT_SINK_WEBHOOK, url, true);
}

int alert_engine__add_alertmanager(struct alert_engine *e, const char *url)
{
	return add_sink(e, ALERT_SINK_ALERTMANAGER, url, false);
}

int alert_engine__add_callback(struct alert_engine *e, alert_notify_fn fn, void *ctx)
{
	if (!fn)
		return -EINVAL;
	pthread_mutex_lock(&e->lock);
	e->callbacks = xrealloc(e->callbacks, (e->ncallbacks + 1) * sizeof(*e->callbacks));
	e->callbacks[e->ncallbacks++] = (struct callback){fn, ctx};
	pthread_mutex_unlock(&e->lock);
	return 0;
}

void alert_engine__set_post_hook(struct alert_engine *e, alert_post_hook fn, void *ctx)
{
	pthread_mutex_lock(&e->lock);
	e->hook = fn;
	e->hook_ctx = ctx;
	pthread_mutex_unlock(&e->lock);
}

int alert_engine__set_external_label(struct alert_engine *e, const char *key, const char *value)
{
	size_t i;

	if (!key || !*key || !strcmp(key, "alertname"))
		return -EINVAL;
	for (const char *p = key; *p; p++)
		if (!(*p == '_' || (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
		      (p > key && *p >= '0' && *p <= '9')))
			return -EINVAL;
	pthread_mutex_lock(&e->lock);
	for (i = 0; i < e->next && strcmp(e->ext[2 * i], key); i++)
		;
	if (i < e->next) {
		free(e->ext[2 * i]);
		free(e->ext[2 * i + 1]);
		memmove(&e->ext[2 * i], &e->ext[2 * i + 2], 2 * (e->next - i - 1) * sizeof(char *));
		e->next--;
	}
	if (value) {
		e->ext = xrealloc(e->ext, 2 * (e->next + 1) * sizeof(char *));
		e->ext[2 * e->next] = xstrdup(key);
		e->ext[2 * e->next + 1] = xstrdup(value);
		e->next++;
	}
	pthread_mutex_unlock(&e->lock);
	return 0;
}

void alert_engine__set_generator_url(struct alert_engine *e, const char *url)
{
	pthread_mutex_lock(&e->lock);
	free(e->generator_url);
	e->generator_url = url ? xstrdup(url) : NULL;
	pthread_mutex_unlock(&e->lock);
}

/* ---- JSON ---- */

static json_t *json_value(double v)
{
	char buf[40];

	if (isfinite(v))
		return json_real(v);
	alert_format_value(buf, sizeof(buf), v);
	return json_string(buf);
}

static json_t *json_time(int64_t ms)
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

static const char *annotation(const struct alert_rule *r, const struct alert_instance *a,
			      const char *key)
{
	for (size_t i = 0; a->annotations && i < r->nannotations; i++)
		if (!strcmp(r->annotations[i].key, key))
			return a->annotations[i];
	return NULL;
}

/* The webhook's body and the callbacks' argument. */
static json_t *notification_json(const struct alert_rule *r, const struct alert_instance *a)
{
	bool resolved = a->state == ALERT_INACTIVE;

	return json_pack(
		"{s:s, s:s, s:o, s:o, s:o, s:o, s:o}", "status", resolved ? "resolved" : "firing",
		"alert", r->name, "labels", labels_json(&a->l), "annotations",
		annotations_json(r, a), "startsAt", json_time(a->fired_ms), "endsAt",
		resolved ? json_time(a->resolved_ms) : json_null(), "value", json_value(a->value));
}

/* Alertmanager's postableAlert. A firing alert is valid until four resend
 * intervals from now, so that AM resolves it by itself if the agent dies. */
static json_t *am_alert_json(struct alert_engine *e, const struct alert_rule *r,
			     const struct alert_instance *a, int64_t now)
{
	int64_t every =
		e->delivery.resend_ms > e->interval_ms ? e->delivery.resend_ms : e->interval_ms;
	int64_t ends = a->state == ALERT_INACTIVE ? a->resolved_ms : now + 4 * every;
	json_t *o = json_pack("{s:o, s:o, s:o, s:o}", "labels", labels_json(&a->l), "annotations",
			      annotations_json(r, a), "startsAt", json_time(a->fired_ms), "endsAt",
			      json_time(ends));

	if (e->generator_url)
		json_object_set_new(o, "generatorURL", json_string(e->generator_url));
	return o;
}

/* ---- evaluation ---- */

static void labels_text(const struct alert_labels *l, char *buf, size_t len)
{
	size_t o = snprintf(buf, len, "{");

	for (size_t i = 0; i < l->n && o < len; i++) {
		if (!strcmp(l->kv[2 * i], "alertname"))
			continue;
		o += snprintf(buf + o, len - o, "%s%s=\"%s\"", o > 1 ? ", " : "", l->kv[2 * i],
			      l->kv[2 * i + 1]);
	}
	if (o < len)
		snprintf(buf + o, len - o, "}");
}

/* Hands body to sink es: its worker, or the test hook. */
static void sink_post(struct alert_engine *e, const struct engine_sink *es, const char *body)
{
	if (e->hook)
		e->hook(e->hook_ctx, es->kind, es->url, body);
	else
		alert_sink__push(es->s, xstrdup(body));
}

static void notify(struct alert_engine *e, const struct alert_rule *r,
		   const struct alert_instance *a)
{
	const char *summary = annotation(r, a, "summary");
	char labels[512], dur[64];
	json_t *n;
	char *body = NULL;

	labels_text(&a->l, labels, sizeof(labels));
	if (a->state == ALERT_FIRING) {
		pr_warn("alert %s firing: %s%s%s", r->name, summary && *summary ? summary : "",
			summary && *summary ? " " : "", labels);
	} else {
		alert_format_humanize_duration(dur, sizeof(dur),
					       (a->resolved_ms - a->fired_ms) / 1000.0);
		pr_info("alert %s resolved after %s: %s", r->name, dur, labels);
	}
	n = notification_json(r, a);
	for (size_t i = 0; i < e->ncallbacks; i++)
		e->callbacks[i].fn(e->callbacks[i].ctx, n);
	for (size_t i = 0; i < e->nsinks; i++) {
		if (e->sinks[i].kind != ALERT_SINK_WEBHOOK)
			continue;
		if (!body)
			body = json_dumps(n, JSON_COMPACT | JSON_REAL_PRECISION(15));
		sink_post(e, &e->sinks[i], body);
	}
	free(body);
	json_decref(n);
}

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

/* The alert's labels for sample s: the series' labels, the rule's labels
 * over them, alertname, then the external labels where still absent. In
 * snap's arena. */
static struct alert_labels instance_labels(struct alert_engine *e, struct alert_rule *r,
					   const struct alert_sample *s)
{
	size_t max = s->l.n + r->nlabels + 1 + e->next, n = 0;
	struct alert_labels l = {
		.kv = alert_arena__alloc(&e->snap.arena, (2 * max + 1) * sizeof(char *))};

	for (size_t i = 0; i < s->l.n; i++) {
		l.kv[2 * n] = s->l.kv[2 * i];
		l.kv[2 * n + 1] = s->l.kv[2 * i + 1];
		n++;
	}
	for (size_t i = 0; i < r->nlabels + 1 + e->next; i++) {
		const char *k, *v;
		size_t j;
		bool ext = i > r->nlabels;

		if (i < r->nlabels) {
			char *text = alert_tmpl__render(r->labels[i].t, &s->l, s->v);

			k = r->labels[i].key;
			v = alert_arena__strdup(&e->snap.arena, text);
			free(text);
		} else if (i == r->nlabels) {
			k = "alertname";
			v = r->name;
		} else {
			k = e->ext[2 * (i - r->nlabels - 1)];
			v = e->ext[2 * (i - r->nlabels - 1) + 1];
		}
		for (j = 0; j < n && strcmp(l.kv[2 * j], k); j++)
			;
		if (j < n && ext)
			continue;
		if (j == n)
			n++;
		l.kv[2 * j] = k;
		l.kv[2 * j + 1] = v;
	}
	/* An empty label is no label (Prometheus drops them). */
	for (size_t i = 0; i < n;) {
		if (*l.kv[2 * i + 1]) {
			i++;
			continue;
		}
		memmove(&l.kv[2 * i], &l.kv[2 * i + 2], 2 * (n - i - 1) * sizeof(char *));
		n--;
	}
	l.n = n;
	for (size_t i = 1; i < n; i++) {
		const char *k = l.kv[2 * i], *v = l.kv[2 * i + 1];
		size_t j = i;

		for (; j > 0 && strcmp(l.kv[2 * (j - 1)], k) > 0; j--) {
			l.kv[2 * j] = l.kv[2 * (j - 1)];
			l.kv[2 * j + 1] = l.kv[2 * (j - 1) + 1];
		}
		l.kv[2 * j] = k;
		l.kv[2 * j + 1] = v;
	}
	return l;
}

/* "k\0v\0k\0v\0" of sorted labels: the instance key. */
static char *labels_key(const struct alert_labels *l, size_t *len)
{
	size_t n = 0, o = 0;
	char *k;

	for (size_t i = 0; i < 2 * l->n; i++)
		n += strlen(l->kv[i]) + 1;
	k = xmalloc(n ? n : 1);
	for (size_t i = 0; i < 2 * l->n; i++) {
		size_t m = strlen(l->kv[i]) + 1;

		memcpy(k + o, l->kv[i], m);
		o += m;
	}
	*len = n;
	return k;
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

static void eval_rule(struct alert_engine *e, struct alert_rule *r, int64_t now)
{
	struct alert_instance *a, *tmp;
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
	for (size_t i = 0; i < v.n; i++) {
		struct alert_labels l = instance_labels(e, r, &v.s[i]);
		size_t klen;
		char *key = labels_key(&l, &klen);

		HASH_FIND(hh, r->active, key, klen, a);
		if (a && a->last_seen_ms == now && a->state != ALERT_INACTIVE) {
			if (!r->dup_warned)
				pr_warn("alert rule %s: two series give the same alert labels at "
					"once; keeping the first -- add labels that tell them "
					"apart",
					r->name);
			dup = true;
			free(key);
			continue;
		}
		if (a && a->state == ALERT_INACTIVE) {
			/* Resolved, and back: a new alert, as in Prometheus. */
			HASH_DEL(r->active, a);
			instance_free(r, a);
			a = NULL;
		}
		if (!a) {
			a = xcalloc(1, sizeof(*a));
			a->key = key;
			a->klen = klen;
			a->l.n = l.n;
			a->l.kv = xcalloc(2 * l.n + 1, sizeof(char *));
			for (size_t j = 0; j < 2 * l.n; j++)
				a->l.kv[j] = xstrdup(l.kv[j]);
			a->state = ALERT_PENDING;
			a->active_ms = now;
			HASH_ADD_KEYPTR(hh, r->active, a->key, a->klen, a);
		} else {
			free(key);
		}
		a->value = v.s[i].v;
		a->last_seen_ms = now;
		render_annotations(r, a);
	}
	alert_vector__free(&v);
	r->dup_warned = dup;

	HASH_ITER(hh, r->active, a, tmp)
	{
		bool seen = a->last_seen_ms == now;

		switch (a->state) {
		case ALERT_PENDING:
			if (!seen) {
				HASH_DEL(r->active, a);
				instance_free(r, a);
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
			if (now - a->resolved_ms >= RESOLVED_RETENTION_MS) {
				HASH_DEL(r->active, a);
				instance_free(r, a);
			}
			break;
		}
	}
}

/* Alerts that Alertmanager should hear about now: changed since last sent,
 * or not sent for a resend interval. */
static void send_alertmanager(struct alert_engine *e, int64_t now)
{
	json_t *batch = NULL;
	char *body;
	size_t nam = 0;

	for (size_t i = 0; i < e->nsinks; i++)
		nam += e->sinks[i].kind == ALERT_SINK_ALERTMANAGER;
	if (!nam)
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
			json_array_append_new(batch, am_alert_json(e, r, a, now));
			a->am_sent_ms = now;
			a->am_sent_resolved = resolved;
		}
	}
	if (!batch)
		return;
	body = json_dumps(batch, JSON_COMPACT | JSON_REAL_PRECISION(15));
	json_decref(batch);
	for (size_t i = 0; i < e->nsinks; i++) {
		if (e->sinks[i].kind == ALERT_SINK_ALERTMANAGER)
			sink_post(e, &e->sinks[i], body);
	}
	free(body);
}

/* Every resend interval, the firing alerts again to the sinks that keep
 * state (a sonde server): one that restarted, or missed a notification,
 * learns what is firing. Resolutions go out once, at the transition. */
static void resend_firing(struct alert_engine *e, int64_t now)
{
	size_t nresend = 0;

	for (size_t i = 0; i < e->nsinks; i++)
		nresend += e->sinks[i].resend;
	if (!nresend || now - e->resent_ms < (int64_t)e->delivery.resend_ms)
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
			n = notification_json(r, a);
			body = json_dumps(n, JSON_COMPACT | JSON_REAL_PRECISION(15));
			json_decref(n);
			for (size_t k = 0; body && k < e->nsinks; k++)
				if (e->sinks[k].resend)
					sink_post(e, &e->sinks[k], body);
			free(body);
		}
	}
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

/* ---- reading ---- */

json_t *alert_engine__list(struct alert_engine *e)
{
	json_t *out = json_array();

	pthread_mutex_lock(&e->lock);
	for (size_t i = 0; i < e->nrules; i++) {
		struct alert_rule *r = &e->rules[i];

		for (struct alert_instance *a = r->active; a; a = a->hh.next) {
			const char *summary = annotation(r, a, "summary");
			json_t *o;

			if (a->state == ALERT_INACTIVE)
				continue;
			o = json_pack("{s:s, s:o, s:s, s:o, s:o, s:s, s:o}", "name", r->name,
				      "labels", labels_json(&a->l), "state",
				      a->state == ALERT_FIRING ? "firing" : "pending", "activeAt",
				      json_time(a->active_ms), "value", json_value(a->value),
				      "summary", summary ? summary : "", "annotations",
				      annotations_json(r, a));
			if (a->state == ALERT_FIRING)
				json_object_set_new(o, "firedAt", json_time(a->fired_ms));
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

void alert_engine__stats(struct alert_engine *e, struct alert_engine_stats *st)
{
	memset(st, 0, sizeof(*st));
	pthread_mutex_lock(&e->lock);
	st->evals = e->evals;
	st->eval_errors = e->eval_errors;
	for (size_t i = 0; i < e->nrules; i++)
		for (struct alert_instance *a = e->rules[i].active; a; a = a->hh.next) {
			st->pending += a->state == ALERT_PENDING;
			st->firing += a->state == ALERT_FIRING;
		}
	for (size_t i = 0; i < e->nsinks; i++)
		if (e->sinks[i].s)
			alert_sink__stats(e->sinks[i].s, &st->notifications[e->sinks[i].kind],
					  &st->notifications_failed[e->sinks[i].kind],
					  &st->notifications_dropped[e->sinks[i].kind],
					  &st->queued);
	pthread_mutex_unlock(&e->lock);
}

int alert_engine__flush(struct alert_engine *e, unsigned timeout_ms)
{
	uint64_t deadline = mono_ms() + timeout_ms;
	struct alert_sink **sinks;
	size_t n;
	int err = 0;

	/* Sinks live as long as the engine: wait without holding up evals. */
	pthread_mutex_lock(&e->lock);
	n = e->nsinks;
	sinks = xcalloc(n + 1, sizeof(*sinks));
	for (size_t i = 0; i < n; i++)
		sinks[i] = e->sinks[i].s;
	pthread_mutex_unlock(&e->lock);
	for (size_t i = 0; i < n && !err; i++)
		if (sinks[i])
			err = alert_sink__flush(sinks[i], deadline);
	free(sinks);
	return err;
}

void alert_engine__collect(void *ctx, struct prom_out *o)
{
	static const char *const sinks[ALERT_SINK_KINDS] = {"webhook", "alertmanager"};
	static const struct {
		const char *name, *help;
	} per_sink[] = {
		{"sonde_alerts_notifications_total", "Notifications delivered (2xx), by sink."},
		{"sonde_alerts_notifications_failed_total", "Notifications given up on, by sink."},
		{"sonde_alerts_notifications_dropped_total",
		 "Notifications dropped because a sink's queue was full."},
	};
	struct alert_engine_stats st;
	const char *l[] = {"sink", NULL, NULL};
	const char *state[] = {"state", NULL, NULL};

	alert_engine__stats(ctx, &st);
	prom__metric(o, "sonde_alerts_evaluations_total", "counter",
		     "Evaluations of the alert rules.", (double)st.evals);
	prom__metric(o, "sonde_alerts_evaluation_errors_total", "counter",
		     "Rule evaluations that failed.", (double)st.eval_errors);
	prom__family(o, "sonde_alerts", "gauge", "Alerts by state.");
	state[1] = "pending";
	prom__sample(o, "sonde_alerts", state, st.pending);
	state[1] = "firing";
	prom__sample(o, "sonde_alerts", state, st.firing);
	for (size_t m = 0; m < ARRAY_SIZE(per_sink); m++) {
		const uint64_t *v = m == 0   ? st.notifications
				    : m == 1 ? st.notifications_failed
					     : st.notifications_dropped;

		prom__family(o, per_sink[m].name, "counter", per_sink[m].help);
		for (int k = 0; k < ALERT_SINK_KINDS; k++) {
			l[1] = sinks[k];
			prom__sample(o, per_sink[m].name, l, (double)v[k]);
		}
	}
}
