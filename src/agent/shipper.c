/* shipper.c: the agent's queue of windows for the server and the thread that
 * posts them. See shipper.h. */
#include "agent/shipper.h"
#include "common/prom.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/xalloc.h"
#include "net/libcurl.h"
#include "net/tls.h"

#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>

#define DEFAULT_MAX_BYTES (64ull << 20)
#define DEFAULT_MAX_AGE_MS (15ull * 60 * MS_PER_SEC)
#define DEFAULT_TIMEOUT_MS 10000
#define DEFAULT_BACKOFF_MAX_MS 30000
#define DEFAULT_BACKOFF_FIRST_MS 1000
#define WARN_EVERY_MS 10000
#define ANSWER_KEEP 200 /* bytes of an error answer that go into the log */

static const char *const drop_names[SHIP_DROP_MAX] = {"buffer_full", "too_old", "rejected",
						      "shutdown"};

struct item {
	struct item *next;
	char *query; /* path and query string */
	const char *content_type;
	char *body;
	size_t len;
	uint64_t ts_ms; /* when queued (wall) */
};

struct shipper {
	struct ship_opts o;
	char *url, *node;
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct item *head, *tail;
	bool stop;
	uint64_t drain_until_ms;
	uint64_t last_warn_ms[SHIP_DROP_MAX + 1];
	struct ship_stats st;
	CURL *curl;
	struct tls_client_opts tls; /* copied strings */
	char *auth;		    /* "Authorization: Bearer TOKEN"; NULL: none */
	/* state_path, open and locked (-1: none); the end of the newest
	 * window acknowledged, and when the file was last written. */
	int state_fd;
	uint64_t acked_ms, state_written_ms;
};

/* ---- the state file ---- */

/* Writes the state -- this run's pid, the end of its newest window the
 * server acknowledged, the time it was last seen alive, whether it stopped
 * cleanly -- over the state file. Under the lock. */
static void state_write(struct shipper *s, bool clean)
{
	char line[128];
	int n;

	if (s->state_fd < 0)
		return;
	n = snprintf(line, sizeof(line),
		     "sonde-agent-state 2 pid=%d acked_ms=%" PRIu64 " alive_ms=%" PRIu64
		     " clean=%d\n",
		     (int)getpid(), s->acked_ms, wall_ms(), clean);
	if (pwrite(s->state_fd, line, (size_t)n, 0) != n || ftruncate(s->state_fd, n) ||
	    (clean && fsync(s->state_fd)))
		pr_debug("can't write the state file %s: %s", s->o.state_path, strerror(errno));
	s->state_written_ms = wall_ms();
}

/* Opens and locks the state file; reads what the previous run left. A run
 * that didn't stop cleanly lost what it profiled between its last window
 * acknowledged and its last sign of life (a second at most before it
 * died): logged, and counted in lost_ms. */
static void state_open(struct shipper *s, uint64_t now)
{
	unsigned long long acked = 0, alive = 0;
	int pid = 0, clean = 1;
	char buf[160] = "";
	ssize_t n;

	s->state_fd = open(s->o.state_path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (s->state_fd < 0 || flock(s->state_fd, LOCK_EX | LOCK_NB)) {
		pr_warn("can't use the state file %s: %s -- what a crash of this agent leaves "
			"unsent won't be accounted for (another agent using it? give each its own "
			"--state)",
			s->o.state_path, errno == EWOULDBLOCK ? "it is in use" : strerror(errno));
		if (s->state_fd >= 0)
			close(s->state_fd);
		s->state_fd = -1;
		return;
	}
	n = pread(s->state_fd, buf, sizeof(buf) - 1, 0);
	if (n > 0) {
		buf[n] = '\0';
		/* Anything else is no state (a file of another program): a new
		 * start. */
		if (sscanf(buf, "sonde-agent-state 2 pid=%d acked_ms=%llu alive_ms=%llu clean=%d",
			   &pid, &acked, &alive, &clean) != 4)
			clean = 1;
	}
	if (!clean && acked && alive > acked && alive <= now) {
		s->st.lost_ms = alive - acked;
		pr_warn("the previous agent (pid %d) stopped without shutting down: what it "
			"profiled in its last %.1f s (after its last window the server "
			"acknowledged), and the window it was making, were never sent and are lost",
			pid, (double)s->st.lost_ms / MS_PER_SEC);
	}
	/* This run's windows start now. */
	s->acked_ms = now;
	state_write(s, false);
}

static void item_free(struct item *it)
{
	if (!it)
		return;
	free(it->query);
	free(it->body);
	free(it);
}

/* With the lock held: at most one warning per reason per WARN_EVERY_MS. */
static bool may_warn(struct shipper *s, int reason)
{
	uint64_t now = wall_ms();

	if (now - s->last_warn_ms[reason] < WARN_EVERY_MS)
		return false;
	s->last_warn_ms[reason] = now;
	return true;
}

/* With the lock held: takes the head off the queue. */
static struct item *pop(struct shipper *s)
{
	struct item *it = s->head;

	if (!it)
		return NULL;
	s->head = it->next;
	if (!s->head)
		s->tail = NULL;
	it->next = NULL;
	s->st.queued--;
	s->st.queued_bytes -= it->len;
	return it;
}

/* With the lock held: puts a window whose send failed back at the head,
 * the oldest again. */
static void push_front(struct shipper *s, struct item *it)
{
	it->next = s->head;
	s->head = it;
	if (!s->tail)
		s->tail = it;
	s->st.queued++;
	s->st.queued_bytes += it->len;
}

static void drop_head(struct shipper *s, enum ship_drop why)
{
	struct item *it = pop(s);

	if (!it)
		return;
	s->st.dropped[why]++;
	if (may_warn(s, why))
		pr_warn("dropped a window for %s (%s; %" PRIu64 " dropped so far for this reason) "
			"-- see sonde_agent_ship_dropped_total",
			s->url, drop_names[why], s->st.dropped[why]);
	item_free(it);
}

/* With the lock held: enforces the bounds. */
static void trim(struct shipper *s)
{
	uint64_t now = wall_ms();

	while (s->head && s->st.queued_bytes > s->o.max_bytes)
		drop_head(s, SHIP_DROP_BUFFER);
	while (s->head && now - s->head->ts_ms > s->o.max_age_ms)
		drop_head(s, SHIP_DROP_AGE);
}

static void push(struct shipper *s, struct item *it)
{
	pthread_mutex_lock(&s->lock);
	it->ts_ms = it->ts_ms ? it->ts_ms : wall_ms();
	if (s->tail)
		s->tail->next = it;
	else
		s->head = it;
	s->tail = it;
	s->st.queued++;
	s->st.queued_bytes += it->len;
	trim(s);
	pthread_cond_signal(&s->cond);
	pthread_mutex_unlock(&s->lock);
}

void shipper__window(struct shipper *s, const char *type, uint64_t from_ms, uint64_t until_ms,
		     const char *key, char *pprof, size_t len)
{
	struct item *it = xcalloc(1, sizeof(*it));
	char *node = curl_easy_escape(NULL, s->node, 0);
	char *k = curl_easy_escape(NULL, key, 0);
	char q[1024];

	snprintf(q, sizeof(q),
		 "/api/v1/ingest?type=%s&from=%" PRIu64 "&until=%" PRIu64 "&node=%s&key=%s", type,
		 from_ms, until_ms, node ? node : "", k ? k : "");
	curl_free(node);
	curl_free(k);
	it->query = xstrdup(q);
	it->content_type = "Content-Type: application/octet-stream";
	it->body = pprof;
	it->len = len;
	push(s, it);
}

/* Queues a JSON body for route (points, spans). */
static void push_json(struct shipper *s, const char *route, char *json, size_t len, uint64_t ts_ms)
{
	struct item *it = xcalloc(1, sizeof(*it));

	it->query = xstrdup(route);
	it->content_type = "Content-Type: application/json";
	it->body = json;
	it->len = len;
	it->ts_ms = ts_ms;
	push(s, it);
}

void shipper__points(struct shipper *s, char *json, size_t len, uint64_t ts_ms)
{
	push_json(s, "/api/v1/ingest/points", json, len, ts_ms);
}

void shipper__spans(struct shipper *s, char *json, size_t len, uint64_t ts_ms)
{
	push_json(s, "/api/v1/ingest/spans", json, len, ts_ms);
}

/* Keeps the start of the answer (for the log of an error), on one line. */
static size_t keep_answer(char *ptr, size_t size, size_t n, void *ctx)
{
	char *answer = ctx;
	size_t have = strlen(answer), take = size * n;

	for (size_t i = 0; i < take && have < ANSWER_KEEP; i++)
		answer[have++] = ptr[i] == '\n' || ptr[i] == '\r' || ptr[i] == '\t' ? ' ' : ptr[i];
	answer[have] = 0;
	return take;
}

/* POSTs it: 0 sent, 1 retry later, -1 refused for good. */
static int post(struct shipper *s, const struct item *it, char *why, size_t whylen)
{
	char url[1024], curl_err[CURL_ERROR_SIZE] = "", answer[ANSWER_KEEP + 1] = "";
	struct curl_slist *headers = NULL;
	long status = 0;
	CURLcode rc;

	snprintf(url, sizeof(url), "%s%s", s->url, it->query);
	if (!s->curl)
		s->curl = curl_easy_init();
	if (!s->curl) {
		snprintf(why, whylen, "can't make an HTTP client");
		return 1;
	}
	curl_easy_reset(s->curl);
	headers = curl_slist_append(headers, it->content_type);
	headers = curl_slist_append(headers, "Expect:");
	if (s->auth)
		headers = curl_slist_append(headers, s->auth);
	curl_easy_setopt(s->curl, CURLOPT_URL, url);
	curl_easy_setopt(s->curl, CURLOPT_HTTPHEADER, headers);
	curl_easy_setopt(s->curl, CURLOPT_POSTFIELDS, it->body);
	curl_easy_setopt(s->curl, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)it->len);
	curl_easy_setopt(s->curl, CURLOPT_USERAGENT, "sonde-agent");
	curl_easy_setopt(s->curl, CURLOPT_TIMEOUT_MS, (long)s->o.timeout_ms);
	curl_easy_setopt(s->curl, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(s->curl, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(s->curl, CURLOPT_ERRORBUFFER, curl_err);
	curl_easy_setopt(s->curl, CURLOPT_WRITEFUNCTION, keep_answer);
	curl_easy_setopt(s->curl, CURLOPT_WRITEDATA, (void *)answer);
	if (tls_client__curl(&s->tls, s->curl)) {
		curl_slist_free_all(headers);
		snprintf(why, whylen, "libcurl refuses the TLS files (--ca, --cert, --key)");
		return 1;
	}
	rc = curl_easy_perform(s->curl);
	curl_slist_free_all(headers);
	if (rc != CURLE_OK) {
		snprintf(why, whylen, "%s%s", curl_err[0] ? curl_err : curl_easy_strerror(rc),
			 tls_curl_hint(rc));
		return 1;
	}
	curl_easy_getinfo(s->curl, CURLINFO_RESPONSE_CODE, &status);
	if (status >= 200 && status < 300)
		return 0;
	for (size_t n = strlen(answer); n && answer[n - 1] == ' ';)
		answer[--n] = 0;
	snprintf(why, whylen, "HTTP %ld: %s", status, answer);
	if (status >= 400 && status < 500 && status != 408 && status != 429)
		return -1;
	return 1;
}

/* The wait before the next try after a failure: first_ms, then doubled up
 * to max_ms. */
static unsigned next_backoff(unsigned backoff, unsigned first_ms, unsigned max_ms)
{
	backoff = backoff ? (backoff > max_ms / 2 ? max_ms : backoff * 2) : first_ms;
	return backoff < max_ms ? backoff : max_ms;
}

/* With the lock held: stopping, and the time given to drain is over. */
static bool drain_over(struct shipper *s)
{
	return s->stop && wall_ms() >= s->drain_until_ms;
}

/* With the lock held: sleeps backoff ms, or until shipper__free's drain
 * time ends. */
static void wait_backoff(struct shipper *s, unsigned backoff)
{
	uint64_t until = wall_ms() + backoff;
	struct timespec ts;

	if (s->stop && until > s->drain_until_ms)
		until = s->drain_until_ms;
	ts.tv_sec = until / MS_PER_SEC;
	ts.tv_nsec = (long)(until % MS_PER_SEC) * NS_PER_MS;
	while (!drain_over(s) && wall_ms() < until)
		if (pthread_cond_timedwait(&s->cond, &s->lock, &ts) == ETIMEDOUT)
			break;
}

/* With the lock held: it could not be sent (why); it goes back at the head
 * of the queue, where the bounds may drop it, to be tried again after the
 * backoff. Returns the backoff. */
static unsigned send_failed(struct shipper *s, struct item *it, const char *why, unsigned backoff)
{
	s->st.attempts_failed++;
	backoff = next_backoff(backoff, s->o.backoff_first_ms, s->o.backoff_max_ms);
	push_front(s, it);
	if (may_warn(s, SHIP_DROP_MAX))
		pr_warn("can't send to the server %s: %s -- %" PRIu64 " windows (%" PRIu64
			" bytes) kept, retrying in %u ms",
			s->url, why, s->st.queued, s->st.queued_bytes, backoff);
	trim(s);
	return backoff;
}

/* The end of window it (from its query), 0 for points. */
static uint64_t item_until(const struct item *it)
{
	const char *u = strstr(it->query, "&until=");

	return u && !strncmp(it->query, "/api/v1/ingest?", 15) ? strtoull(u + 7, NULL, 10) : 0;
}

static void *worker(void *arg)
{
	struct shipper *s = arg;
	unsigned backoff = 0;

	pthread_mutex_lock(&s->lock);
	for (;;) {
		struct item *it;
		char why[512] = "";
		int r;

		while (!s->head && !s->stop) {
			/* Awake once a second to say, in the state file, that this
			 * run is alive (how long a run that dies was profiling). */
			uint64_t until = wall_ms() + 1000;
			struct timespec ts = {(time_t)(until / MS_PER_SEC),
					      (long)(until % MS_PER_SEC) * NS_PER_MS};

			if (s->state_fd >= 0 && wall_ms() - s->state_written_ms >= 1000)
				state_write(s, false);
			if (s->state_fd >= 0)
				pthread_cond_timedwait(&s->cond, &s->lock, &ts);
			else
				pthread_cond_wait(&s->cond, &s->lock);
		}
		if (!s->head || drain_over(s))
			break;
		/* Off the queue while it is posted without the lock: the agent
		 * keeps queueing meanwhile, and the bounds trim what waits,
		 * never the window on the wire. */
		it = pop(s);
		pthread_mutex_unlock(&s->lock);
		r = post(s, it, why, sizeof(why));
		pthread_mutex_lock(&s->lock);
		if (r > 0) {
			backoff = send_failed(s, it, why, backoff);
			if (drain_over(s))
				break;
			wait_backoff(s, backoff);
			continue;
		}
		if (r == 0) {
			uint64_t until = item_until(it);

			s->st.sent++;
			s->st.sent_bytes += it->len;
			s->st.last_success_ms = wall_ms();
			/* How far the server has what was profiled: kept in the
			 * state file (at most once a second). */
			if (until > s->acked_ms)
				s->acked_ms = until;
			if (s->st.last_success_ms - s->state_written_ms >= 1000)
				state_write(s, false);
			if (backoff)
				pr_info("the server %s answers again", s->url);
			backoff = 0;
		} else {
			pr_warn("the server %s refused a window (%s): dropped", s->url, why);
			s->st.dropped[SHIP_DROP_REJECTED]++;
		}
		item_free(it);
	}
	pthread_mutex_unlock(&s->lock);
	return NULL;
}

struct shipper *shipper__new(const struct ship_opts *opts)
{
	struct shipper *s;
	size_t n;
	int e;

	if (!opts->url || (strncmp(opts->url, "http://", 7) && strncmp(opts->url, "https://", 8))) {
		pr_err("invalid server URL '%s': expected http://HOST:PORT or https://HOST:PORT",
		       opts->url ? opts->url : "");
		errno = EINVAL;
		return NULL;
	}
	net_init_curl();
	s = xcalloc(1, sizeof(*s));
	s->o = *opts;
	if (!s->o.max_bytes)
		s->o.max_bytes = DEFAULT_MAX_BYTES;
	if (!s->o.max_age_ms)
		s->o.max_age_ms = DEFAULT_MAX_AGE_MS;
	if (!s->o.timeout_ms)
		s->o.timeout_ms = DEFAULT_TIMEOUT_MS;
	if (!s->o.backoff_first_ms)
		s->o.backoff_first_ms = DEFAULT_BACKOFF_FIRST_MS;
	if (!s->o.backoff_max_ms)
		s->o.backoff_max_ms = DEFAULT_BACKOFF_MAX_MS;
	s->url = xstrdup(opts->url);
	n = strlen(s->url);
	while (n > 0 && s->url[n - 1] == '/')
		s->url[--n] = 0;
	s->node = xstrdup(opts->node ? opts->node : "");
	tls_client__copy(&s->tls, opts->tls);
	s->o.tls = NULL; /* the caller's; s->tls is ours */
	if (opts->token && asprintf(&s->auth, "Authorization: Bearer %s", opts->token) < 0)
		s->auth = NULL;
	s->o.token = NULL; /* the caller's; s->auth is ours */
	pthread_mutex_init(&s->lock, NULL);
	pthread_cond_init(&s->cond, NULL);
	s->o.state_path = NULL; /* the caller's */
	if (opts->state_path) {
		s->o.state_path = xstrdup(opts->state_path);
		state_open(s, wall_ms());
	} else {
		s->state_fd = -1;
	}
	e = pthread_create(&s->thread, NULL, worker, s);
	if (e) {
		pr_err("can't start the thread that sends to the server: %s", strerror(e));
		free(s->url);
		free(s->node);
		tls_client__free_copy(&s->tls);
		free(s->auth);
		if (s->state_fd >= 0)
			close(s->state_fd);
		free((char *)s->o.state_path);
		free(s);
		errno = EAGAIN;
		return NULL;
	}
	return s;
}

void shipper__free(struct shipper *s, unsigned drain_ms)
{
	uint64_t left;

	if (!s)
		return;
	pthread_mutex_lock(&s->lock);
	s->stop = true;
	s->drain_until_ms = wall_ms() + drain_ms;
	pthread_cond_broadcast(&s->cond);
	pthread_mutex_unlock(&s->lock);
	pthread_join(s->thread, NULL);
	left = s->st.queued;
	while (s->head) {
		s->st.dropped[SHIP_DROP_SHUTDOWN]++;
		item_free(pop(s));
	}
	if (left)
		pr_warn("%" PRIu64 " windows not sent to %s before stopping: dropped", left,
			s->url);
	/* Stopped cleanly: what it didn't send is counted above, not lost to
	 * the next run's account. */
	state_write(s, true);
	if (s->state_fd >= 0)
		close(s->state_fd);
	if (s->curl)
		curl_easy_cleanup(s->curl);
	pthread_mutex_destroy(&s->lock);
	pthread_cond_destroy(&s->cond);
	free(s->url);
	free(s->node);
	tls_client__free_copy(&s->tls);
	free(s->auth);
	free((char *)s->o.state_path);
	free(s);
}

void shipper__stats(struct shipper *s, struct ship_stats *out)
{
	pthread_mutex_lock(&s->lock);
	*out = s->st;
	pthread_mutex_unlock(&s->lock);
}

void shipper__collect(void *ctx, struct prom_out *o)
{
	struct shipper *s = ctx;
	struct ship_stats st;
	const char *l[] = {"reason", NULL, NULL};

	shipper__stats(s, &st);
	prom__metric(o, "sonde_agent_ship_requests_total", "counter",
		     "Windows and point batches the server acknowledged.", (double)st.sent);
	prom__metric(o, "sonde_agent_ship_bytes_total", "counter", "Bytes the server acknowledged.",
		     (double)st.sent_bytes);
	prom__metric(o, "sonde_agent_ship_failures_total", "counter",
		     "Sends that failed and were retried.", (double)st.attempts_failed);
	prom__family(o, "sonde_agent_ship_dropped_total", "counter",
		     "Windows and point batches never sent, by reason.");
	for (int i = 0; i < SHIP_DROP_MAX; i++) {
		l[1] = drop_names[i];
		prom__sample(o, "sonde_agent_ship_dropped_total", l, (double)st.dropped[i]);
	}
	prom__metric(o, "sonde_agent_ship_queue", "gauge",
		     "Windows and point batches waiting to be sent.", (double)st.queued);
	prom__metric(o, "sonde_agent_ship_queue_bytes", "gauge", "Bytes waiting to be sent.",
		     (double)st.queued_bytes);
	prom__metric(o, "sonde_agent_ship_last_success_timestamp_seconds", "gauge",
		     "When the server last acknowledged a send.",
		     (double)st.last_success_ms / MS_PER_SEC);
	prom__metric(o, "sonde_agent_ship_lost_seconds", "gauge",
		     "What the previous agent of this --state profiled and never sent (it "
		     "stopped without shutting down): seconds from its last window the server "
		     "acknowledged to its last sign of life, the window it was making besides.",
		     (double)st.lost_ms / MS_PER_SEC);
}
