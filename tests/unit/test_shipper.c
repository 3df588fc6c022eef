/* test_shipper.c: unit tests of src/agent/shipper.c against a real HTTP
 * receiver on 127.0.0.1 (libmicrohttpd in its own threads) that records every
 * request and answers the statuses a test scripts, or holds a request until
 * the test lets it go: windows and points posted in order with their keys,
 * retries after 5xx/408/429 with a backoff that doubles up to its cap,
 * refusals (4xx) dropped and the queue going on, the bound in bytes (which
 * never drops the window on the wire) and in age, drops counted by reason,
 * the unsent rest dropped and logged at shutdown, and the collector's
 * families. Tests wait for conditions with deadlines, never for a fixed
 * time. */
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "agent/shipper.h"
#include "common/clock.h"
#include "common/prom.h"
#include "common/xalloc.h"

/* Longest any condition is waited for: far past what a loaded machine
 * needs, short enough that a broken shipper fails rather than hangs. */
#define DEADLINE_MS 10000
#define MAX_REQS 64

/* ---- the receiver ---- */

struct req {
	char path[128], type[32], from[32], until[32], node[128], key[256], ctype[64];
	char *body;
	size_t len;
	uint64_t at_ms; /* mono_ms() when the whole request had arrived */
	unsigned status;
};

struct receiver {
	struct MHD_Daemon *d;
	int port;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct req reqs[MAX_REQS];
	size_t nreqs;
	unsigned script[16]; /* statuses for the next requests, then 200 */
	size_t nscript, next;
	bool hold;    /* a request that arrives waits until hold is cleared */
	bool holding; /* one is waiting */
};

struct upload {
	char *buf;
	size_t len, cap;
};

static void copy_arg(struct MHD_Connection *c, const char *name, char *out, size_t size)
{
	const char *v = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, name);

	snprintf(out, size, "%s", v ? v : "");
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
				  const char *method, const char *version, const char *data,
				  size_t *size, void **con_cls)
{
	struct receiver *r = cls;
	struct upload *u = *con_cls;
	struct MHD_Response *resp;
	enum MHD_Result ret;
	const char *ctype;
	struct req *q;
	unsigned status;

	if (!u) {
		*con_cls = xcalloc(1, sizeof(*u));
		return MHD_YES;
	}
	if (*size) {
		xgrow((void **)&u->buf, &u->cap, u->len + *size, 1);
		memcpy(u->buf + u->len, data, *size);
		u->len += *size;
		*size = 0;
		return MHD_YES;
	}

	pthread_mutex_lock(&r->lock);
	status = r->next < r->nscript ? r->script[r->next++] : 200;
	if (r->nreqs < MAX_REQS) {
		q = &r->reqs[r->nreqs++];
		snprintf(q->path, sizeof(q->path), "%s", url);
		copy_arg(c, "type", q->type, sizeof(q->type));
		copy_arg(c, "from", q->from, sizeof(q->from));
		copy_arg(c, "until", q->until, sizeof(q->until));
		copy_arg(c, "node", q->node, sizeof(q->node));
		copy_arg(c, "key", q->key, sizeof(q->key));
		ctype = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Type");
		snprintf(q->ctype, sizeof(q->ctype), "%s", ctype ? ctype : "");
		q->body = u->buf;
		q->len = u->len;
		q->at_ms = mono_ms();
		q->status = status;
		u->buf = NULL;
	}
	pthread_cond_broadcast(&r->cond);
	while (r->hold) {
		r->holding = true;
		pthread_cond_broadcast(&r->cond);
		pthread_cond_wait(&r->cond, &r->lock);
	}
	r->holding = false;
	pthread_mutex_unlock(&r->lock);

	resp = MHD_create_response_from_buffer(3, (void *)"ok\n", MHD_RESPMEM_PERSISTENT);
	ret = MHD_queue_response(c, status, resp);
	MHD_destroy_response(resp);
	return ret;
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
			 enum MHD_RequestTerminationCode toe)
{
	struct upload *u = *con_cls;

	if (u) {
		free(u->buf);
		free(u);
		*con_cls = NULL;
	}
}

/* A receiver on 127.0.0.1 (an ephemeral port) answering the given statuses
 * in turn, then 200. */
static struct receiver *receiver_start(const unsigned *script, size_t n)
{
	struct receiver *r = xcalloc(1, sizeof(*r));
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	const union MHD_DaemonInfo *info;

	assert_true(n <= 16);
	memcpy(r->script, script, n * sizeof(*script));
	r->nscript = n;
	pthread_mutex_init(&r->lock, NULL);
	pthread_cond_init(&r->cond, NULL);
	r->d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION, 0,
				NULL, NULL, on_request, r, MHD_OPTION_SOCK_ADDR,
				(struct sockaddr *)&sa, MHD_OPTION_NOTIFY_COMPLETED, on_completed,
				NULL, MHD_OPTION_END);
	assert_non_null(r->d);
	info = MHD_get_daemon_info(r->d, MHD_DAEMON_INFO_BIND_PORT);
	assert_non_null(info);
	r->port = info->port;
	assert_true(r->port > 0);
	return r;
}

static void receiver_release(struct receiver *r)
{
	pthread_mutex_lock(&r->lock);
	r->hold = false;
	pthread_cond_broadcast(&r->cond);
	pthread_mutex_unlock(&r->lock);
}

/* The server goes away: nothing listens on its port any more. */
static void receiver_close(struct receiver *r)
{
	receiver_release(r);
	if (r->d)
		MHD_stop_daemon(r->d);
	r->d = NULL;
}

static void receiver_stop(struct receiver *r)
{
	receiver_close(r);
	for (size_t i = 0; i < r->nreqs; i++)
		free(r->reqs[i].body);
	pthread_mutex_destroy(&r->lock);
	pthread_cond_destroy(&r->cond);
	free(r);
}

/* How many requests the receiver has had, and whether it holds one now. */
static size_t receiver_count(struct receiver *r, bool *holding)
{
	size_t n;

	pthread_mutex_lock(&r->lock);
	n = r->nreqs;
	if (holding)
		*holding = r->holding;
	pthread_mutex_unlock(&r->lock);
	return n;
}

static bool receiver_holding(struct receiver *r)
{
	bool h;

	receiver_count(r, &h);
	return h;
}

/* ---- helpers ---- */

static void nap(void)
{
	struct timespec ts = {0, 1000000};

	nanosleep(&ts, NULL);
}

/* Evaluates cond until it holds or DEADLINE_MS have passed; its last value. */
#define WAIT_UNTIL(cond)                                                                           \
	({                                                                                         \
		uint64_t end_ = mono_ms() + DEADLINE_MS;                                           \
		bool ok_;                                                                          \
		while (!(ok_ = (cond)) && mono_ms() < end_)                                        \
			nap();                                                                     \
		ok_;                                                                               \
	})

static struct shipper *new_shipper(struct receiver *r, struct ship_opts o)
{
	char url[64];
	struct shipper *s;

	snprintf(url, sizeof(url), "http://127.0.0.1:%d/", r->port);
	o.url = url; /* copied by shipper__new */
	s = shipper__new(&o);
	assert_non_null(s);
	return s;
}

/* A window body of n bytes of c (malloc()ed: the shipper takes it). */
static char *body_of(char c, size_t n)
{
	char *b = xmalloc(n);

	memset(b, c, n);
	return b;
}

static void window(struct shipper *s, const char *key, char c, size_t n)
{
	shipper__window(s, "cpu", 1000, 2000, key, body_of(c, n), n);
}

/* Windows B, C and D of 1000 bytes each, after a window A of as many. */
static void windows_bcd(struct shipper *s)
{
	window(s, "B", 'B', 1000);
	window(s, "C", 'C', 1000);
	window(s, "D", 'D', 1000);
}

static struct ship_stats stats(struct shipper *s)
{
	struct ship_stats st;

	shipper__stats(s, &st);
	return st;
}

static bool body_is(const struct req *q, char c, size_t n)
{
	if (q->len != n)
		return false;
	for (size_t i = 0; i < n; i++)
		if (q->body[i] != c)
			return false;
	return true;
}

/* What the code between capture_begin() and capture_end() logs (stderr). */
struct capture {
	FILE *tmp;
	int saved;
	char text[4096];
};

static void capture_begin(struct capture *c)
{
	c->tmp = tmpfile();
	assert_non_null(c->tmp);
	fflush(stderr);
	c->saved = dup(2);
	assert_true(c->saved >= 0);
	assert_true(dup2(fileno(c->tmp), 2) >= 0);
}

static const char *capture_end(struct capture *c)
{
	size_t n;

	fflush(stderr);
	dup2(c->saved, 2);
	close(c->saved);
	rewind(c->tmp);
	n = fread(c->text, 1, sizeof(c->text) - 1, c->tmp);
	c->text[n] = 0;
	fclose(c->tmp);
	fputs(c->text, stderr);
	return c->text;
}

/* The shipper's families as /metrics shows them. */
static char *exposition(struct shipper *s)
{
	struct prom_text t;
	char *text;

	assert_int_equal(prom_text__open(&t), 0);
	shipper__collect(s, &t.out);
	text = prom_text__close(&t, NULL);
	assert_non_null(text);
	return text;
}

static bool has_line(const char *text, const char *line)
{
	size_t n = strlen(line);

	for (const char *l = text; *l; l = strchr(l, '\n') + 1) {
		if (!strncmp(l, line, n) && l[n] == '\n')
			return true;
		if (!strchr(l, '\n'))
			break;
	}
	return false;
}

static void assert_line(const char *text, const char *fmt, ...)
{
	char line[256];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	if (!has_line(text, line))
		fail_msg("no line '%s' in:\n%s", line, text);
}

/* Every family of the collector, with its HELP and TYPE, says what st
 * says. */
static void assert_families(struct shipper *s, const struct ship_stats *st)
{
	static const char *const reasons[SHIP_DROP_MAX] = {
		[SHIP_DROP_BUFFER] = "buffer_full",
		[SHIP_DROP_AGE] = "too_old",
		[SHIP_DROP_REJECTED] = "rejected",
		[SHIP_DROP_SHUTDOWN] = "shutdown",
	};
	static const char *const families[][2] = {
		{"sonde_agent_ship_requests_total", "counter"},
		{"sonde_agent_ship_bytes_total", "counter"},
		{"sonde_agent_ship_failures_total", "counter"},
		{"sonde_agent_ship_dropped_total", "counter"},
		{"sonde_agent_ship_queue", "gauge"},
		{"sonde_agent_ship_queue_bytes", "gauge"},
		{"sonde_agent_ship_last_success_timestamp_seconds", "gauge"},
	};
	char *t = exposition(s);
	char v[64];

	for (size_t i = 0; i < ARRAY_SIZE(families); i++) {
		char help[128];

		snprintf(help, sizeof(help), "# HELP %s ", families[i][0]);
		assert_non_null(strstr(t, help));
		assert_line(t, "# TYPE %s %s", families[i][0], families[i][1]);
	}
	assert_line(t, "sonde_agent_ship_requests_total %llu", (unsigned long long)st->sent);
	assert_line(t, "sonde_agent_ship_bytes_total %llu", (unsigned long long)st->sent_bytes);
	assert_line(t, "sonde_agent_ship_failures_total %llu",
		    (unsigned long long)st->attempts_failed);
	for (int i = 0; i < SHIP_DROP_MAX; i++)
		assert_line(t, "sonde_agent_ship_dropped_total{reason=\"%s\"} %llu", reasons[i],
			    (unsigned long long)st->dropped[i]);
	assert_line(t, "sonde_agent_ship_queue %llu", (unsigned long long)st->queued);
	assert_line(t, "sonde_agent_ship_queue_bytes %llu", (unsigned long long)st->queued_bytes);
	prom_format_value(v, sizeof(v), (double)st->last_success_ms / 1000.0);
	assert_line(t, "sonde_agent_ship_last_success_timestamp_seconds %s", v);
	free(t);
}

/* ---- tests ---- */

static void test_bad_url(void **state)
{
	struct ship_opts o = {.url = "ftp://127.0.0.1:1"};

	errno = 0;
	assert_null(shipper__new(&o));
	assert_int_equal(errno, EINVAL);
	o.url = NULL;
	assert_null(shipper__new(&o));
	assert_int_equal(errno, EINVAL);
	shipper__free(NULL, 0);
}

/* A window and a points batch arrive in order, each with what it says it
 * is: the window's type, range, node and key in its query, both bodies
 * intact under their content types. */
static void test_windows_in_order_keyed(void **state)
{
	struct receiver *r = receiver_start(NULL, 0);
	struct shipper *s = new_shipper(r, (struct ship_opts){.node = "node a&b=c"});
	const char *points = "{\"points\":[]}";
	uint64_t t0 = wall_ms();
	struct ship_stats st;
	const struct req *q;

	window(s, "node a&b=c/cpu/1000", 'w', 3000);
	shipper__points(s, xstrdup(points), strlen(points), wall_ms());
	assert_true(WAIT_UNTIL(stats(s).sent == 2));
	assert_int_equal(receiver_count(r, NULL), 2);

	q = &r->reqs[0];
	assert_string_equal(q->path, "/api/v1/ingest");
	assert_string_equal(q->type, "cpu");
	assert_string_equal(q->from, "1000");
	assert_string_equal(q->until, "2000");
	assert_string_equal(q->node, "node a&b=c");
	assert_string_equal(q->key, "node a&b=c/cpu/1000");
	assert_string_equal(q->ctype, "application/octet-stream");
	assert_true(body_is(q, 'w', 3000));
	q = &r->reqs[1];
	assert_string_equal(q->path, "/api/v1/ingest/points");
	assert_string_equal(q->ctype, "application/json");
	assert_int_equal(q->len, strlen(points));
	assert_memory_equal(q->body, points, q->len);

	st = stats(s);
	assert_int_equal(st.sent_bytes, 3000 + strlen(points));
	assert_int_equal(st.queued, 0);
	assert_int_equal(st.queued_bytes, 0);
	assert_int_equal(st.attempts_failed, 0);
	for (int i = 0; i < SHIP_DROP_MAX; i++)
		assert_int_equal(st.dropped[i], 0);
	assert_true(st.last_success_ms >= t0 && st.last_success_ms <= wall_ms());
	assert_families(s, &st);
	shipper__free(s, 1000);
	receiver_stop(r);
}

/* 503, 500 and 503s: the same window (same key, same body) is tried again
 * after waits that start at backoff_first_ms and double up to
 * backoff_max_ms, until it is acknowledged. */
static void test_retry_with_backoff(void **state)
{
	static const unsigned script[] = {503, 500, 503, 503, 503};
	const unsigned first = 25, max = 50;
	const unsigned want[] = {25, 50, 50, 50, 50}; /* the waits before tries 2..6 */
	struct receiver *r = receiver_start(script, ARRAY_SIZE(script));
	struct shipper *s = new_shipper(
		r, (struct ship_opts){.backoff_first_ms = first, .backoff_max_ms = max});
	uint64_t capped = 0;
	struct ship_stats st;

	window(s, "k1", 'r', 500);
	assert_true(WAIT_UNTIL(stats(s).sent == 1));
	st = stats(s);
	assert_int_equal(st.attempts_failed, ARRAY_SIZE(script));
	for (int i = 0; i < SHIP_DROP_MAX; i++)
		assert_int_equal(st.dropped[i], 0);
	assert_int_equal(receiver_count(r, NULL), ARRAY_SIZE(script) + 1);
	for (size_t i = 0; i <= ARRAY_SIZE(script); i++) {
		assert_string_equal(r->reqs[i].key, "k1");
		assert_true(body_is(&r->reqs[i], 'r', 500));
	}
	for (size_t i = 0; i < ARRAY_SIZE(want); i++) {
		uint64_t gap = r->reqs[i + 1].at_ms - r->reqs[i].at_ms;

		/* The wait is measured in whole ms on both sides. */
		if (gap + 2 < want[i])
			fail_msg("try %zu came %llu ms after the one before, not >= %u ms", i + 2,
				 (unsigned long long)gap, want[i]);
		if (i >= 2)
			capped += gap;
	}
	/* Uncapped, the last three waits would be 100 + 200 + 400 ms. */
	if (capped >= 400)
		fail_msg("the last three waits took %llu ms: the backoff is not capped at %u ms",
			 (unsigned long long)capped, max);
	assert_families(s, &st);
	shipper__free(s, 1000);
	receiver_stop(r);
}

/* 429 and 408 are "later", not "never": retried, nothing dropped. */
static void test_retry_429_408(void **state)
{
	static const unsigned script[] = {429, 408};
	struct receiver *r = receiver_start(script, ARRAY_SIZE(script));
	struct shipper *s =
		new_shipper(r, (struct ship_opts){.backoff_first_ms = 5, .backoff_max_ms = 10});
	struct ship_stats st;

	window(s, "k", 'x', 100);
	assert_true(WAIT_UNTIL(stats(s).sent == 1));
	st = stats(s);
	assert_int_equal(st.attempts_failed, 2);
	assert_int_equal(st.dropped[SHIP_DROP_REJECTED], 0);
	assert_int_equal(receiver_count(r, NULL), 3);
	shipper__free(s, 1000);
	receiver_stop(r);
}

/* A 4xx refuses that window for good: dropped as "rejected", not retried,
 * and the next window goes on. */
static void test_rejected_dropped(void **state)
{
	static const unsigned script[] = {400};
	struct receiver *r = receiver_start(script, ARRAY_SIZE(script));
	struct shipper *s =
		new_shipper(r, (struct ship_opts){.backoff_first_ms = 5, .backoff_max_ms = 10});
	struct ship_stats st;
	struct capture c;
	const char *log;

	capture_begin(&c);
	window(s, "refused", 'a', 100);
	window(s, "taken", 'b', 200);
	assert_true(WAIT_UNTIL(stats(s).sent == 1));
	log = capture_end(&c);
	/* One line, naming the server and its answer. */
	assert_non_null(strstr(log, "refused a window (HTTP 400: ok): dropped\n"));
	st = stats(s);
	assert_int_equal(st.dropped[SHIP_DROP_REJECTED], 1);
	assert_int_equal(st.attempts_failed, 0);
	assert_int_equal(st.sent_bytes, 200);
	assert_int_equal(receiver_count(r, NULL), 2);
	assert_string_equal(r->reqs[0].key, "refused");
	assert_string_equal(r->reqs[1].key, "taken");
	assert_families(s, &st);
	shipper__free(s, 1000);
	receiver_stop(r);
}

/* Past max_bytes the oldest queued windows go, never the one being sent:
 * A is on the wire (the receiver holds it) when B, C and D come; B is
 * dropped, A, C and D arrive whole. */
static void test_bytes_bound_spares_window_in_flight(void **state)
{
	struct receiver *r = receiver_start(NULL, 0);
	struct shipper *s = new_shipper(r, (struct ship_opts){.max_bytes = 2500});
	struct ship_stats st;

	r->hold = true;
	window(s, "A", 'A', 1000);
	assert_true(WAIT_UNTIL(receiver_holding(r)));
	windows_bcd(s);
	st = stats(s);
	assert_int_equal(st.dropped[SHIP_DROP_BUFFER], 1);
	assert_int_equal(st.queued, 2);
	assert_int_equal(st.queued_bytes, 2000);
	assert_families(s, &st);

	receiver_release(r);
	assert_true(WAIT_UNTIL(stats(s).sent == 3));
	st = stats(s);
	assert_int_equal(st.sent_bytes, 3000);
	assert_int_equal(st.dropped[SHIP_DROP_BUFFER], 1);
	assert_int_equal(receiver_count(r, NULL), 3);
	assert_string_equal(r->reqs[0].key, "A");
	assert_true(body_is(&r->reqs[0], 'A', 1000));
	assert_string_equal(r->reqs[1].key, "C");
	assert_true(body_is(&r->reqs[1], 'C', 1000));
	assert_string_equal(r->reqs[2].key, "D");
	assert_true(body_is(&r->reqs[2], 'D', 1000));
	shipper__free(s, 1000);
	receiver_stop(r);
}

/* The server is down: the window that failed is the oldest again, and the
 * bound drops it first. At shutdown what is left is dropped and logged. */
static void test_outage_bound_and_shutdown(void **state)
{
	struct receiver *r = receiver_start(NULL, 0);
	struct shipper *s;
	struct ship_stats st;
	struct capture c;
	char want[128];
	uint64_t t0;

	receiver_close(r);
	s = new_shipper(r, (struct ship_opts){.max_bytes = 2500, .backoff_first_ms = 60000});
	window(s, "A", 'A', 1000);
	assert_true(WAIT_UNTIL(stats(s).attempts_failed == 1));
	assert_int_equal(stats(s).queued, 1);
	windows_bcd(s);
	st = stats(s);
	assert_int_equal(st.dropped[SHIP_DROP_BUFFER], 2);
	assert_int_equal(st.queued, 2);
	assert_int_equal(st.queued_bytes, 2000);
	assert_int_equal(st.sent, 0);
	assert_int_equal(st.last_success_ms, 0);
	assert_families(s, &st);

	/* The worker sleeps in a 60 s backoff: shutdown wakes it at once. */
	capture_begin(&c);
	t0 = mono_ms();
	shipper__free(s, 0);
	assert_true(mono_ms() - t0 < DEADLINE_MS);
	snprintf(want, sizeof(want), "2 windows not sent to http://127.0.0.1:%d before stopping",
		 r->port);
	if (!strstr(capture_end(&c), want))
		fail_msg("shutdown didn't log '%s'", want);
	assert_int_equal(receiver_count(r, NULL), 0);
	receiver_stop(r);
}

/* Past max_age_ms a window is dropped as "too old": at once when it is
 * queued already too old, and while the server is down as it ages. */
static void test_age_bound(void **state)
{
	struct receiver *r = receiver_start(NULL, 0);
	struct shipper *s = new_shipper(r, (struct ship_opts){.max_age_ms = 60000});
	const char *points = "{\"points\":[]}";
	struct ship_stats st;

	shipper__points(s, xstrdup(points), strlen(points), wall_ms() - 120000);
	st = stats(s);
	assert_int_equal(st.dropped[SHIP_DROP_AGE], 1);
	assert_int_equal(st.queued, 0);
	window(s, "fresh", 'f', 100);
	assert_true(WAIT_UNTIL(stats(s).sent == 1));
	assert_int_equal(receiver_count(r, NULL), 1);
	assert_string_equal(r->reqs[0].key, "fresh");
	shipper__free(s, 1000);

	/* Down: a batch 900 ms old with a 1 s bound ages out while retried. */
	receiver_close(r);
	s = new_shipper(r, (struct ship_opts){.max_age_ms = 1000,
					      .backoff_first_ms = 20,
					      .backoff_max_ms = 20});
	shipper__points(s, xstrdup(points), strlen(points), wall_ms() - 900);
	assert_int_equal(stats(s).dropped[SHIP_DROP_AGE], 0);
	assert_true(WAIT_UNTIL(stats(s).dropped[SHIP_DROP_AGE] == 1));
	st = stats(s);
	assert_true(st.attempts_failed >= 1);
	assert_int_equal(st.queued, 0);
	assert_families(s, &st);
	shipper__free(s, 0);
	receiver_stop(r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_bad_url),
		cmocka_unit_test(test_windows_in_order_keyed),
		cmocka_unit_test(test_retry_with_backoff),
		cmocka_unit_test(test_retry_429_408),
		cmocka_unit_test(test_rejected_dropped),
		cmocka_unit_test(test_bytes_bound_spares_window_in_flight),
		cmocka_unit_test(test_outage_bound_and_shutdown),
		cmocka_unit_test(test_age_bound),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
