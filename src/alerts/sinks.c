/* sinks.c: delivery of alert notifications over HTTP (libcurl) -- one
 * worker thread per sink (a webhook or an Alertmanager) with a bounded FIFO
 * queue, so that a slow or dead receiver delays neither the evaluation nor
 * the other sinks and a sink sees its notifications in order. Each POST has a
 * timeout and is retried with exponential backoff; what is given up is
 * logged and counted. Made by engine.c (alert_engine__add_*), fed by eval.c. */
#include "alerts/alerts_internal.h"
#include "common/clock.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <curl/curl.h>

#include "net/libcurl.h"
#include "net/tls.h"

#include "common/log.h"
#include "common/xalloc.h"

struct sink_msg {
	struct sink_msg *next;
	char *body;
};

struct alert_sink {
	enum alert_sink_kind kind;
	char *url;
	struct alert_delivery d;
	CURL *curl;
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t wake; /* to the worker: a message, or stop */
	pthread_cond_t idle; /* to flushers: the queue drained */
	struct sink_msg *head, *tail;
	size_t len;
	bool busy; /* the worker holds a message */
	bool stop;
	uint64_t drain_deadline;
	uint64_t sent, failed, dropped;
	uint64_t last_warn_ms;
	uint64_t unlogged; /* failures since the last warning */
	/* The server sink's (alert_sink__set_auth): under lock. */
	struct tls_client_opts tls;
	char *auth; /* "Authorization: Bearer TOKEN" */
};

static void deadline_ts(struct timespec *ts, uint64_t deadline_ms)
{
	ts->tv_sec = deadline_ms / MS_PER_SEC;
	ts->tv_nsec = (deadline_ms % MS_PER_SEC) * NS_PER_MS;
}

static const char *kind_name(enum alert_sink_kind k)
{
	return k == ALERT_SINK_WEBHOOK ? "webhook" : "Alertmanager";
}

/* Called with s->lock held. Warns at most every 10 s per sink, with the
 * number of failures in between. */
static void warn_failure(struct alert_sink *s, const char *why)
{
	uint64_t now = mono_ms();

	s->unlogged++;
	if (s->last_warn_ms && now - s->last_warn_ms < 10000)
		return;
	pr_warn("can't deliver an alert notification to %s %s: %s -- is it up and reachable?%s",
		kind_name(s->kind), s->url, why, s->unlogged > 1 ? " (and earlier failures)" : "");
	s->last_warn_ms = now;
	s->unlogged = 0;
}

struct response {
	char text[200];
	size_t n;
};

static size_t on_body(char *data, size_t size, size_t nmemb, void *ctx)
{
	struct response *r = ctx;
	size_t n = size * nmemb, room = sizeof(r->text) - 1 - r->n;

	memcpy(r->text + r->n, data, n < room ? n : room);
	r->n += n < room ? n : room;
	r->text[r->n] = '\0';
	return n;
}

/* Aborts a transfer once a stopping sink's drain time is over. */
static int on_progress(void *ctx, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
		       curl_off_t ulnow)
{
	struct alert_sink *s = ctx;
	bool abort;

	pthread_mutex_lock(&s->lock);
	abort = s->stop && mono_ms() >= s->drain_deadline;
	pthread_mutex_unlock(&s->lock);
	return abort;
}

enum post_result { POST_OK, POST_RETRY, POST_FATAL };

static enum post_result post(struct alert_sink *s, const char *body, char *why, size_t whylen)
{
	struct curl_slist *headers = NULL;
	char curl_err[CURL_ERROR_SIZE] = "";
	struct response resp = {0};
	long status = 0;
	CURLcode rc;

	if (!s->curl)
		s->curl = curl_easy_init();
	if (!s->curl) {
		snprintf(why, whylen, "can't create a curl handle");
		return POST_RETRY;
	}
	curl_easy_reset(s->curl);
	headers = curl_slist_append(headers, "Content-Type: application/json");
	pthread_mutex_lock(&s->lock);
	if (s->auth)
		headers = curl_slist_append(headers, s->auth);
	tls_client__curl(tls_client__on(&s->tls) ? &s->tls : NULL, s->curl);
	pthread_mutex_unlock(&s->lock);
	curl_easy_setopt(s->curl, CURLOPT_URL, s->url);
	curl_easy_setopt(s->curl, CURLOPT_HTTPHEADER, headers);
	curl_easy_setopt(s->curl, CURLOPT_POSTFIELDS, body);
	curl_easy_setopt(s->curl, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
	curl_easy_setopt(s->curl, CURLOPT_USERAGENT, "sonde-agent");
	curl_easy_setopt(s->curl, CURLOPT_TIMEOUT_MS, (long)s->d.timeout_ms);
	curl_easy_setopt(s->curl, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(s->curl, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(s->curl, CURLOPT_ERRORBUFFER, curl_err);
	curl_easy_setopt(s->curl, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(s->curl, CURLOPT_WRITEDATA, &resp);
	curl_easy_setopt(s->curl, CURLOPT_NOPROGRESS, 0L);
	curl_easy_setopt(s->curl, CURLOPT_XFERINFOFUNCTION, on_progress);
	curl_easy_setopt(s->curl, CURLOPT_XFERINFODATA, s);
	rc = curl_easy_perform(s->curl);
	curl_slist_free_all(headers);
	if (rc != CURLE_OK) {
		snprintf(why, whylen, "%s", curl_err[0] ? curl_err : curl_easy_strerror(rc));
		return POST_RETRY;
	}
	curl_easy_getinfo(s->curl, CURLINFO_RESPONSE_CODE, &status);
	if (status >= 200 && status < 300)
		return POST_OK;
	for (size_t i = 0; i < resp.n; i++)
		if (resp.text[i] == '\n' || resp.text[i] == '\r')
			resp.text[i] = ' ';
	snprintf(why, whylen, "HTTP %ld%s%s", status, resp.n ? ": " : "", resp.text);
	/* A request the receiver rejects won't be accepted the next time;
	 * throttling and server trouble may pass. */
	return status >= 400 && status < 500 && status != 408 && status != 429 ? POST_FATAL
									       : POST_RETRY;
}

/* Delivers one body, retrying with backoff unless stopping. */
static void deliver(struct alert_sink *s, const char *body)
{
	unsigned backoff = s->d.backoff_ms;
	char why[320] = "";

	for (unsigned attempt = 0;; attempt++) {
		enum post_result r = post(s, body, why, sizeof(why));
		struct timespec ts;
		uint64_t until;

		pthread_mutex_lock(&s->lock);
		if (r == POST_OK) {
			s->sent++;
			pthread_mutex_unlock(&s->lock);
			return;
		}
		pr_debug("alert notification to %s failed (attempt %u): %s", s->url, attempt + 1,
			 why);
		if (r == POST_FATAL || attempt >= s->d.retries || s->stop) {
			s->failed++;
			warn_failure(s, why);
			pthread_mutex_unlock(&s->lock);
			return;
		}
		until = mono_ms() + backoff;
		deadline_ts(&ts, until);
		while (!s->stop && mono_ms() < until)
			pthread_cond_timedwait(&s->wake, &s->lock, &ts);
		pthread_mutex_unlock(&s->lock);
		backoff = backoff > 60000 ? 120000 : backoff * 2;
	}
}

static void *worker(void *arg)
{
	struct alert_sink *s = arg;

	pthread_mutex_lock(&s->lock);
	for (;;) {
		struct sink_msg *m;

		while (!s->head && !s->stop)
			pthread_cond_wait(&s->wake, &s->lock);
		m = s->head;
		if (!m)
			break;
		s->head = m->next;
		if (!s->head)
			s->tail = NULL;
		s->len--;
		if (s->stop && mono_ms() >= s->drain_deadline) {
			s->failed++;
			warn_failure(s, "the agent is stopping");
		} else {
			s->busy = true;
			pthread_mutex_unlock(&s->lock);
			deliver(s, m->body);
			pthread_mutex_lock(&s->lock);
			s->busy = false;
		}
		free(m->body);
		free(m);
		if (!s->head)
			pthread_cond_broadcast(&s->idle);
	}
	pthread_cond_broadcast(&s->idle);
	pthread_mutex_unlock(&s->lock);
	return NULL;
}

/* What alert_sink__new made, once the worker is gone or never started. */
static void sink_destroy(struct alert_sink *s)
{
	if (s->curl)
		curl_easy_cleanup(s->curl);
	pthread_cond_destroy(&s->wake);
	pthread_cond_destroy(&s->idle);
	pthread_mutex_destroy(&s->lock);
	free(s->url);
	tls_client__free_copy(&s->tls);
	free(s->auth);
	free(s);
}

void alert_sink__set_auth(struct alert_sink *s, const struct tls_client_opts *tls,
			  const char *token)
{
	pthread_mutex_lock(&s->lock);
	tls_client__free_copy(&s->tls);
	tls_client__copy(&s->tls, tls);
	free(s->auth);
	s->auth = NULL;
	if (token && asprintf(&s->auth, "Authorization: Bearer %s", token) < 0)
		s->auth = NULL;
	pthread_mutex_unlock(&s->lock);
}

struct alert_sink *alert_sink__new(enum alert_sink_kind kind, const char *url,
				   const struct alert_delivery *d)
{
	struct alert_sink *s = xcalloc(1, sizeof(*s));
	pthread_condattr_t ca;
	int err;

	net_init_curl();
	s->kind = kind;
	s->url = xstrdup(url);
	s->d = *d;
	pthread_mutex_init(&s->lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&s->wake, &ca);
	pthread_cond_init(&s->idle, &ca);
	pthread_condattr_destroy(&ca);
	err = pthread_create(&s->thread, NULL, worker, s);
	if (err) {
		pr_err("can't start the %s delivery thread: %s", kind_name(kind), strerror(err));
		sink_destroy(s);
		errno = err;
		return NULL;
	}
	return s;
}

void alert_sink__push(struct alert_sink *s, char *body)
{
	struct sink_msg *m;

	pthread_mutex_lock(&s->lock);
	if (s->len >= s->d.queue_len || s->stop) {
		s->dropped++;
		s->failed++;
		warn_failure(s, "its queue is full (the receiver is slower than the alerts)");
		pthread_mutex_unlock(&s->lock);
		free(body);
		return;
	}
	m = xmalloc(sizeof(*m));
	m->next = NULL;
	m->body = body;
	if (s->tail)
		s->tail->next = m;
	else
		s->head = m;
	s->tail = m;
	s->len++;
	pthread_cond_signal(&s->wake);
	pthread_mutex_unlock(&s->lock);
}

void alert_sink__stats(struct alert_sink *s, uint64_t *sent, uint64_t *failed, uint64_t *dropped,
		       uint64_t *queued)
{
	pthread_mutex_lock(&s->lock);
	*sent += s->sent;
	*failed += s->failed;
	*dropped += s->dropped;
	*queued += s->len + s->busy;
	pthread_mutex_unlock(&s->lock);
}

int alert_sink__flush(struct alert_sink *s, uint64_t deadline_ms)
{
	struct timespec ts;
	int err = 0;

	deadline_ts(&ts, deadline_ms);
	pthread_mutex_lock(&s->lock);
	while ((s->head || s->busy) && !err)
		if (pthread_cond_timedwait(&s->idle, &s->lock, &ts) == ETIMEDOUT)
			err = -ETIMEDOUT;
	if (err && !s->head && !s->busy)
		err = 0;
	pthread_mutex_unlock(&s->lock);
	return err;
}

void alert_sink__free(struct alert_sink *s, unsigned drain_ms)
{
	if (!s)
		return;
	pthread_mutex_lock(&s->lock);
	s->stop = true;
	s->drain_deadline = mono_ms() + drain_ms;
	pthread_cond_broadcast(&s->wake);
	pthread_mutex_unlock(&s->lock);
	pthread_join(s->thread, NULL);
	sink_destroy(s);
}
