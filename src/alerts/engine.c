/* engine.c: the alert engine object of `sonde agent` (alerts.h) -- made
 * from a rule file or the default rules (rules.c, defaults.c), given its
 * sinks and settings, and read for its statistics and its own families on
 * /metrics. Each tick is eval.c's; what the engine says in JSON is json.c's;
 * HTTP delivery is sinks.c's. docs/alerts.md describes all of it. */
#include "alerts/alerts_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/prom.h"
#include "common/xalloc.h"

#define RULE_FILE_MAX (1 << 20)
#define DRAIN_MS 2000

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

/* The text of the rule file path (malloc()ed); NULL with errno set and
 * "PATH: reason" in err. */
static char *read_rule_file(const char *path, char *err, size_t errlen)
{
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
	}
cleanup:
	if (fd >= 0)
		close(fd);
	if (saved) {
		free(text);
		text = NULL;
		errno = saved;
	}
	return text;
}

struct alert_engine *alert_engine__load(const char *path, char *err, size_t errlen)
{
	char *text = read_rule_file(path, err, errlen);
	struct alert_engine *e;
	int saved;

	if (!text)
		return NULL;
	e = alert_engine__load_string(text, path, err, errlen);
	saved = errno;
	free(text);
	errno = saved;
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
	for (size_t i = 0; i < e->nrules; i++) {
		alert_rule__drop_instances(&e->rules[i]);
		alert_rule__free(&e->rules[i]);
	}
	free(e->rules);
	alert_snapshot__free(&e->snap);
	alert_key__free(&e->key);
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

/* Alertmanager's v2 alerts API under url, whether url names it or not. */
static char *alertmanager_url(const char *url)
{
	static const char api[] = "/api/v2/alerts";
	size_t n = strlen(url), m = strlen(api);
	char *out;

	while (n > 0 && url[n - 1] == '/')
		n--;
	if (n >= m && !strncmp(url + n - m, api, m))
		n -= m;
	out = xmalloc(n + m + 1);
	memcpy(out, url, n);
	memcpy(out + n, api, m + 1);
	return out;
}

static int add_sink(struct alert_engine *e, enum alert_sink_kind kind, const char *url, bool resend)
{
	struct alert_engine_sink es = {.kind = kind, .resend = resend};

	if (!valid_url(url))
		return -EINVAL;
	es.url = kind == ALERT_SINK_ALERTMANAGER ? alertmanager_url(url) : xstrdup(url);
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

int alert_engine__add_server_auth(struct alert_engine *e, const char *url,
				  const struct tls_client_opts *tls, const char *token)
{
	int err = add_sink(e, ALERT_SINK_WEBHOOK, url, true);

	if (err)
		return err;
	pthread_mutex_lock(&e->lock);
	if (e->sinks[e->nsinks - 1].s)
		alert_sink__set_auth(e->sinks[e->nsinks - 1].s, tls, token);
	e->sinks[e->nsinks - 1].auth = true;
	pthread_mutex_unlock(&e->lock);
	return 0;
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
	e->callbacks[e->ncallbacks++] = (struct alert_callback){fn, ctx};
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

	if (!key || !alert_name_valid(key, false) || !strcmp(key, "alertname"))
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

/* ---- reading ---- */

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
