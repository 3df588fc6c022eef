/* test_net.c: unit tests of src/net -- the address grammar and a taken
 * port (listen.h); the HTTP router (http.h) over real sockets on
 * 127.0.0.1: exact routes and the fallback, query arguments and headers,
 * extra response headers, HEAD, 404 with the caller's hint, 405 with
 * Allow, a failing route's 500, body limits (413 from Content-Length
 * before the body is sent, and past the limit for a chunked body), 415,
 * multipart parts and their limits, JSON errors, the answer observer; the
 * WebSocket accept key of RFC 6455, and a WebSocket client (ws_client.h)
 * reading the stream of a WebSocket server (ws_server.h), and its
 * errors. */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <cmocka.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/clock.h"
#include "net/http.h"
#include "net/listen.h"
#include "net/ws_client.h"
#include "net/ws_internal.h"
#include "net/ws_server.h"

#define DEADLINE_MS 10000

/* ---- addresses ---- */

static void test_parse_addr(void **state)
{
	struct sockaddr_storage ss;
	socklen_t len;
	char err[256];
	struct sockaddr_in *in = (struct sockaddr_in *)&ss;

	assert_int_equal(net_parse_addr("127.0.0.1:9091", &ss, &len, err, sizeof(err)), 0);
	assert_int_equal(ss.ss_family, AF_INET);
	assert_int_equal(ntohs(in->sin_port), 9091);
	assert_int_equal(in->sin_addr.s_addr, htonl(INADDR_LOOPBACK));
	assert_int_equal(net_parse_addr(":0", &ss, &len, err, sizeof(err)), 0);
	assert_int_equal(in->sin_addr.s_addr, htonl(INADDR_LOOPBACK));
	assert_int_equal(net_parse_addr("0.0.0.0:80", &ss, &len, err, sizeof(err)), 0);
	assert_int_equal(net_parse_addr("[::1]:9092", &ss, &len, err, sizeof(err)), 0);
	assert_int_equal(ss.ss_family, AF_INET6);
	assert_int_equal(net_parse_addr("9091", &ss, &len, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "9091"));
	assert_int_equal(net_parse_addr("host:99999", &ss, &len, err, sizeof(err)), -EINVAL);
	assert_int_equal(net_parse_addr("127.0.0.1:", &ss, &len, err, sizeof(err)), -EINVAL);
	assert_int_equal(net_parse_addr("[::1", &ss, &len, err, sizeof(err)), -EINVAL);
	assert_int_equal(net_parse_addr("", &ss, &len, err, sizeof(err)), -EINVAL);
}

static void test_listen_busy(void **state)
{
	char addr[64];
	int port, port2, fd, fd2;

	fd = net_listen("127.0.0.1:0", "a test", "a hint", &port);
	assert_true(fd >= 0);
	assert_true(port > 0);
	snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);
	fd2 = net_listen(addr, "a test", "a hint", &port2);
	assert_int_equal(fd2, -EADDRINUSE);
	assert_int_equal(net_listen("nowhere", "a test", NULL, &port2), -EINVAL);
	close(fd);
}

/* ---- a raw HTTP client ---- */

/* Sends raw to port and reads the answer until the server closes (the
 * requests say Connection: close); a malloc()ed string. */
static char *exchange(int port, const char *raw, size_t len)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	uint64_t deadline = mono_ms() + DEADLINE_MS;
	size_t got = 0, cap = 65536;
	char *buf = malloc(cap);
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	ssize_t n;

	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(send(fd, raw, len, MSG_NOSIGNAL), (ssize_t)len);
	for (;;) {
		struct pollfd p = {.fd = fd, .events = POLLIN};

		assert_true(mono_ms() < deadline);
		if (poll(&p, 1, 100) <= 0)
			continue;
		if (got + 1 == cap)
			buf = realloc(buf, cap *= 2);
		n = recv(fd, buf + got, cap - 1 - got, 0);
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	buf[got] = '\0';
	close(fd);
	return buf;
}

static char *request(int port, const char *method, const char *path, const char *headers,
		     const char *body)
{
	char raw[8192];
	int n;

	n = snprintf(raw, sizeof(raw), "%s %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n%s%s%s",
		     method, path, headers ? headers : "", body ? "" : "\r\n", body ? body : "");
	return exchange(port, raw, (size_t)n);
}

static int status_of(const char *answer)
{
	int st = 0;

	sscanf(answer, "HTTP/1.1 %d", &st);
	return st;
}

static const char *body_of(const char *answer)
{
	const char *b = strstr(answer, "\r\n\r\n");

	return b ? b + 4 : "";
}

/* ---- routes ---- */

struct counts {
	int answers, not_routed;
	int last_status;
};

static int route_hello(void *ctx, const struct http_request *req, struct http_reply *rep)
{
	const char *name = http_request__query(req, "name"),
		   *h = http_request__header(req, "X-Test");

	assert_ptr_equal(http_request__route_ctx(req), ctx);
	if (asprintf(&rep->body, "hi %s %s", name ? name : "-", h ? h : "-") < 0)
		return -ENOMEM;
	rep->len = strlen(rep->body);
	return http_reply__header(rep, "X-Extra", "yes");
}

static int route_fail(void *ctx, const struct http_request *req, struct http_reply *rep)
{
	return -EIO;
}

static int route_post(void *ctx, const struct http_request *req, struct http_reply *rep)
{
	size_t len;
	const char *b = http_request__body(req, &len);

	if (asprintf(&rep->body, "%s %zu [%s]", http_request__method(req), len, b) < 0)
		return -ENOMEM;
	rep->len = strlen(rep->body);
	rep->status = 201;
	rep->content_type = HTTP_CONTENT_JSON;
	return 0;
}

static int route_form(void *ctx, const struct http_request *req, struct http_reply *rep)
{
	size_t la = 0, lb = 0;
	const char *a = http_request__part(req, "a", &la), *b = http_request__part(req, "b", &lb);

	if (asprintf(&rep->body, "%d a=%s b=%s", http_request__multipart(req), a ? a : "(none)",
		     b ? b : "(none)") < 0)
		return -ENOMEM;
	rep->len = strlen(rep->body);
	return 0;
}

static int route_fallback(void *ctx, const struct http_request *req, struct http_reply *rep)
{
	if (asprintf(&rep->body, "fallback %s", http_request__path(req)) < 0)
		return -ENOMEM;
	rep->len = strlen(rep->body);
	return 0;
}

static int route_prefix(void *ctx, const struct http_request *req, struct http_reply *rep)
{
	if (asprintf(&rep->body, "prefix %s %s", http_request__method(req),
		     http_request__path(req)) < 0)
		return -ENOMEM;
	rep->len = strlen(rep->body);
	return 0;
}

static void on_answered(void *ctx, const struct http_request *req, int status)
{
	struct counts *c = ctx;

	c->answers++;
	c->not_routed += !http_request__route_ctx(req);
	c->last_status = status;
}

static const char *const json_only[] = {"application/json", NULL};
static const struct http_part form_parts[] = {{"a", 4}, {"b", 0}, {NULL, 0}};
static int hello_ctx, post_ctx, fail_ctx, form_ctx, fallback_ctx, prefix_ctx;

static struct http_server *start_router(struct counts *c, bool json_errors)
{
	const struct http_route routes[] = {
		{.path = "/hello", .fn = route_hello, .ctx = &hello_ctx},
		{.path = "/fail", .fn = route_fail, .ctx = &fail_ctx},
		{.path = "/post",
		 .methods = HTTP_POST | HTTP_GET,
		 .fn = route_post,
		 .ctx = &post_ctx,
		 .max_body = 16,
		 .body_types = json_only,
		 .body_types_hint = "JSON"},
		{.path = "/form",
		 .methods = HTTP_POST,
		 .fn = route_form,
		 .ctx = &form_ctx,
		 .parts = form_parts},
		{.path = "/pre",
		 .prefix = true,
		 .methods = HTTP_READ | HTTP_OTHER,
		 .fn = route_prefix,
		 .ctx = &prefix_ctx},
		{.path = "/pre/exact", .fn = route_fallback, .ctx = &fallback_ctx},
		{.path = NULL, .methods = HTTP_GET, .fn = route_fallback, .ctx = &fallback_ctx},
		{0},
	};
	struct http_opts o = {
		.listen = "127.0.0.1:0",
		.service = "the test server",
		.not_found_hint = "try /hello",
		.threads = 2,
		.json_errors = json_errors,
		.answered = on_answered,
		.answered_ctx = c,
		.routes = routes,
	};
	struct http_server *s = http_server__start(&o);

	assert_non_null(s);
	assert_true(http_server__port(s) > 0);
	return s;
}

static void test_http_routes(void **state)
{
	struct counts c = {0};
	struct http_server *s = start_router(&c, false);
	int port = http_server__port(s), n = 0;
	char *a;

	a = request(port, "GET", "/hello?name=x", "X-Test: y\r\n", NULL);
	n++;
	assert_int_equal(status_of(a), 200);
	assert_string_equal(body_of(a), "hi x y");
	assert_non_null(strstr(a, "X-Extra: yes\r\n"));
	assert_non_null(strstr(a, "Content-Type: text/plain; charset=utf-8\r\n"));
	assert_non_null(strstr(a, "X-Content-Type-Options: nosniff\r\n"));
	free(a);
	a = request(port, "HEAD", "/hello", NULL, NULL);
	n++;
	assert_int_equal(status_of(a), 200);
	assert_string_equal(body_of(a), "");
	free(a);
	a = request(port, "GET", "/else/where", NULL, NULL);
	n++;
	assert_int_equal(status_of(a), 200);
	assert_string_equal(body_of(a), "fallback /else/where");
	free(a);
	/* The fallback doesn't take POST: no such endpoint. */
	a = request(port, "POST", "/else/where", "Content-Length: 0\r\n", NULL);
	n++;
	assert_int_equal(status_of(a), 404);
	assert_string_equal(body_of(a), "no such endpoint: POST /else/where -- try /hello\n");
	assert_int_equal(c.not_routed, 1);
	free(a);
	a = request(port, "DELETE", "/hello", NULL, NULL);
	n++;
	assert_int_equal(status_of(a), 405);
	assert_non_null(strstr(a, "Allow: GET, HEAD\r\n"));
	assert_string_equal(body_of(a), "method DELETE is not allowed on /hello: use GET\n");
	free(a);
	a = request(port, "PUT", "/post", NULL, NULL);
	n++;
	assert_int_equal(status_of(a), 405);
	assert_non_null(strstr(a, "Allow: GET, POST\r\n"));
	assert_non_null(strstr(body_of(a), "use GET or POST"));
	free(a);
	/* A prefix route takes its path and those under it, not others that
	 * start alike; an exact route under it wins. */
	a = request(port, "GET", "/pre", NULL, NULL);
	n++;
	assert_string_equal(body_of(a), "prefix GET /pre");
	free(a);
	a = request(port, "DELETE", "/pre/x/y?z=1", NULL, NULL);
	n++;
	assert_int_equal(status_of(a), 200);
	assert_string_equal(body_of(a), "prefix DELETE /pre/x/y");
	free(a);
	a = request(port, "GET", "/prefix", NULL, NULL);
	n++;
	assert_string_equal(body_of(a), "fallback /prefix");
	free(a);
	a = request(port, "GET", "/pre/exact", NULL, NULL);
	n++;
	assert_string_equal(body_of(a), "fallback /pre/exact");
	free(a);
	a = request(port, "GET", "/fail", NULL, NULL);
	n++;
	assert_int_equal(status_of(a), 500);
	assert_string_equal(body_of(a), "internal error answering /fail: Input/output error\n");
	free(a);
	assert_int_equal(c.answers, n);
	assert_int_equal(c.last_status, 500);
	http_server__stop(s);
	http_server__stop(NULL);
}

static void test_http_bodies(void **state)
{
	struct counts c = {0};
	struct http_server *s = start_router(&c, false);
	int port = http_server__port(s);
	char *a;

	a = request(port, "POST", "/post",
		    "Content-Type: application/json\r\nContent-Length: 7\r\n", "\r\n{\"a\":1}");
	assert_int_equal(status_of(a), 201);
	assert_string_equal(body_of(a), "POST 7 [{\"a\":1}]");
	assert_non_null(strstr(a, "Content-Type: application/json\r\n"));
	free(a);
	/* A GET on a route that also takes POST reads no body. */
	a = request(port, "GET", "/post", NULL, NULL);
	assert_string_equal(body_of(a), "GET 0 []");
	free(a);
	/* Too long by its Content-Length: answered from the headers. */
	a = request(port, "POST", "/post", "Content-Length: 1000000\r\n\r\n", "");
	assert_int_equal(status_of(a), 413);
	assert_string_equal(body_of(a),
			    "the body of 1000000 bytes is over the limit of 16 bytes for /post\n");
	assert_non_null(strstr(a, "Connection: close\r\n"));
	free(a);
	/* Chunked past the limit: dropped, then 413. */
	a = request(port, "POST", "/post", "Transfer-Encoding: chunked\r\n",
		    "\r\n10\r\n0123456789abcdef\r\n4\r\nmore\r\n0\r\n\r\n");
	assert_int_equal(status_of(a), 413);
	assert_string_equal(body_of(a), "the body is over the limit of 16 bytes for /post\n");
	free(a);
	a = request(port, "POST", "/post", "Content-Type: text/html\r\nContent-Length: 2\r\n",
		    "\r\nhi");
	assert_int_equal(status_of(a), 415);
	assert_string_equal(body_of(a), "Content-Type 'text/html' is not JSON\n");
	free(a);
	http_server__stop(s);
}

#define FORM_HEAD "Content-Type: multipart/form-data; boundary=XX\r\nContent-Length: %zu\r\n\r\n%s"
#define PART(name, value)                                                                          \
	"--XX\r\nContent-Disposition: form-data; name=\"" name "\"\r\n\r\n" value "\r\n"

static char *post_form(int port, const char *form)
{
	char headers[1024];

	snprintf(headers, sizeof(headers), FORM_HEAD, strlen(form), form);
	return request(port, "POST", "/form", headers, "");
}

static void test_http_multipart(void **state)
{
	struct counts c = {0};
	struct http_server *s = start_router(&c, false);
	int port = http_server__port(s);
	char *a;

	a = post_form(port, PART("a", "1234") PART("skip", "x") PART("b", "hello") "--XX--\r\n");
	assert_int_equal(status_of(a), 200);
	assert_string_equal(body_of(a), "1 a=1234 b=hello");
	free(a);
	a = post_form(port, PART("b", "only") "--XX--\r\n");
	assert_string_equal(body_of(a), "1 a=(none) b=only");
	free(a);
	/* Part a is kept up to 4 bytes. */
	a = post_form(port, PART("a", "12345") "--XX--\r\n");
	assert_int_equal(status_of(a), 413);
	free(a);
	a = request(port, "POST", "/form",
		    "Content-Type: multipart/form-data\r\n"
		    "Content-Length: 1\r\n",
		    "\r\nx");
	assert_int_equal(status_of(a), 400);
	assert_non_null(strstr(body_of(a), "boundary"));
	free(a);
	/* Not multipart: the body as it is, no parts. */
	a = request(port, "POST", "/form", "Content-Length: 3\r\n", "\r\nabc");
	assert_string_equal(body_of(a), "0 a=(none) b=(none)");
	free(a);
	http_server__stop(s);
}

static void test_http_json_errors(void **state)
{
	struct counts c = {0};
	struct http_server *s = start_router(&c, true);
	char *a;

	a = request(http_server__port(s), "POST", "/nope", "Content-Length: 0\r\n", NULL);
	assert_int_equal(status_of(a), 404);
	assert_non_null(strstr(a, "Content-Type: application/json\r\n"));
	assert_string_equal(body_of(a),
			    "{\"error\":\"no such endpoint: POST /nope -- try /hello\"}");
	free(a);
	http_server__stop(s);
}

/* ---- WebSocket ---- */

static void test_ws_accept_key(void **state)
{
	char out[32];

	/* RFC 6455 section 1.3. */
	assert_int_equal(ws_accept_key("dGhlIHNhbXBsZSBub25jZQ==", out, sizeof(out)), 0);
	assert_string_equal(out, "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
	assert_int_equal(ws_accept_key("x", out, 10), -EINVAL);
	assert_int_equal(ws_accept_key(NULL, out, sizeof(out)), -EINVAL);
}

static void test_ws_url(void **state)
{
	struct ws_url u;
	char err[128];

	assert_int_equal(ws_url__parse(&u, "ws://127.0.0.1:9092", "1", err, sizeof(err)), 0);
	assert_string_equal(u.host, "127.0.0.1");
	assert_string_equal(u.port, "9092");
	assert_string_equal(u.path, "/");
	assert_int_equal(ws_url__parse(&u, "[::1]/stream", "9092", err, sizeof(err)), 0);
	assert_string_equal(u.host, "::1");
	assert_string_equal(u.port, "9092");
	assert_string_equal(u.path, "/stream");
	assert_int_equal(ws_url__parse(&u, "wss://h:1", "1", err, sizeof(err)), -ENOTSUP);
	assert_non_null(strstr(err, "not supported"));
	assert_int_equal(ws_url__parse(&u, "http://h:1", "1", err, sizeof(err)), -EINVAL);
	assert_int_equal(ws_url__parse(&u, "ws://h:x1", "1", err, sizeof(err)), -EINVAL);
	assert_int_equal(ws_url__parse(&u, "ws://:1", "1", err, sizeof(err)), -EINVAL);
}

static unsigned snapshots;

static char *snapshot(void *ctx, size_t *len)
{
	char *s;

	if (asprintf(&s, "snapshot %u", ++snapshots) < 0)
		return NULL;
	*len = strlen(s);
	return s;
}

struct got {
	int n;
	char first[64];
};

static void on_text(void *ctx, const char *msg, size_t len)
{
	struct got *g = ctx;

	if (!g->n++)
		snprintf(g->first, sizeof(g->first), "%.*s", (int)len, msg);
}

static void test_ws_stream(void **state)
{
	struct ws_opts wo = {.interval_ms = 20};
	struct ws_server *ws = ws_server__start_opts("127.0.0.1:0", &wo, snapshot, NULL);
	struct got g = {0};
	struct ws_client_opts co = {.timeout_ms = DEADLINE_MS, .on_text = on_text, .ctx = &g};
	uint64_t deadline = mono_ms() + DEADLINE_MS;
	struct ws_client *c;
	struct ws_stats st;
	struct ws_url u;
	char url[64], err[256];

	assert_non_null(ws);
	snprintf(url, sizeof(url), "ws://127.0.0.1:%d/any/path", ws_server__port(ws));
	assert_int_equal(ws_url__parse(&u, url, "1", err, sizeof(err)), 0);
	c = ws_client__connect(&u, url, &co, err, sizeof(err));
	assert_non_null(c);
	ws_client__io(c, POLLIN);
	while (g.n < 3 && !ws_client__done(c)) {
		struct pollfd p = {.fd = ws_client__fd(c), .events = ws_client__events(c)};

		assert_true(mono_ms() < deadline);
		if (poll(&p, 1, 100) > 0)
			assert_int_equal(ws_client__io(c, p.revents), 0);
	}
	assert_true(g.n >= 3);
	assert_non_null(strstr(g.first, "snapshot "));
	ws_client__close(c);
	assert_true(ws_client__closing(c));
	while (!ws_client__close_received(c) && !ws_client__done(c)) {
		struct pollfd p = {.fd = ws_client__fd(c), .events = ws_client__events(c)};

		assert_true(mono_ms() < deadline);
		if (poll(&p, 1, 100) > 0)
			ws_client__io(c, p.revents);
	}
	assert_int_equal(ws_client__close_code(c), WS_CLOSE_NORMAL);
	ws_client__free(c);
	ws_server__stats(ws, &st);
	assert_int_equal(st.accepted, 1);
	ws_server__stop(ws);
}

/* A snapshot that waits at a gate: each call takes a permit, and waits
 * for one while none is left; test_ws_share_adopting counts the calls. */
static struct {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int permits, calls; /* permits < 0: open */
} gate = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, -1, 0};

static char *gated_snapshot(void *ctx, size_t *len)
{
	pthread_mutex_lock(&gate.lock);
	gate.calls++;
	pthread_cond_broadcast(&gate.cond);
	while (!gate.permits)
		pthread_cond_wait(&gate.cond, &gate.lock);
	if (gate.permits > 0)
		gate.permits--;
	pthread_mutex_unlock(&gate.lock);
	*len = 1;
	return strdup("s");
}

static void gate_set(int permits)
{
	pthread_mutex_lock(&gate.lock);
	gate.permits = permits;
	pthread_cond_broadcast(&gate.cond);
	pthread_mutex_unlock(&gate.lock);
}

static void gate_wait_calls(int n)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += DEADLINE_MS / 1000;
	pthread_mutex_lock(&gate.lock);
	while (gate.calls < n)
		assert_int_equal(pthread_cond_timedwait(&gate.cond, &gate.lock, &ts), 0);
	pthread_mutex_unlock(&gate.lock);
}

/* An address's share counts the clients the server is taking on: upgraded
 * clients handed over together, while the first of them is given its
 * first snapshot (the snapshot held here), are all counted -- they were
 * counted by none for that while, and an address was upgraded once past
 * its share (17 of 16 in a stressed run of test_faults_ws_share). */
static void test_ws_share_adopting(void **state)
{
	struct ws_opts wo = {.interval_ms = 600000, .max_clients = 12, .max_per_addr = 3};
	struct ws_client_opts co = {.timeout_ms = DEADLINE_MS};
	struct ws_client *c[4] = {0};
	struct ws_server *ws;
	struct ws_stats st;
	struct ws_url u;
	char url[64], err[256];

	gate.calls = 0;
	gate_set(0);
	ws = ws_server__start_opts("127.0.0.1:0", &wo, gated_snapshot, NULL);
	assert_non_null(ws);
	snprintf(url, sizeof(url), "ws://127.0.0.1:%d/", ws_server__port(ws));
	assert_int_equal(ws_url__parse(&u, url, "1", err, sizeof(err)), 0);
	/* The first client's first snapshot holds the server's loop. */
	c[0] = ws_client__connect(&u, url, &co, err, sizeof(err));
	assert_non_null(c[0]);
	gate_wait_calls(1);
	/* Two more wait to be taken on, together (given the time to get
	 * there: either way they must be counted). */
	for (int i = 1; i < 3; i++) {
		c[i] = ws_client__connect(&u, url, &co, err, sizeof(err));
		assert_non_null(c[i]);
	}
	usleep(200 * 1000);
	/* The loop takes them on and holds in the first one's snapshot. */
	gate_set(1);
	gate_wait_calls(2);
	/* The address holds 3 of its 3: a fourth is refused. */
	c[3] = ws_client__connect(&u, url, &co, err, sizeof(err));
	if (c[3])
		fail_msg("a fourth client of one address was upgraded past its share of 3");
	assert_non_null(strstr(err, "503"));
	gate_set(-1);
	ws_server__stats(ws, &st);
	assert_int_equal(st.refused_addr, 1);
	for (int i = 0; i < 3; i++)
		ws_client__free(c[i]);
	ws_server__stop(ws);
}

static void test_ws_client_errors(void **state)
{
	struct counts cn = {0};
	struct http_server *s = start_router(&cn, false);
	struct ws_client_opts co = {.timeout_ms = DEADLINE_MS};
	struct ws_url u;
	char url[64], err[256];
	int fd, port;

	/* Nothing listens: the connection's errno. */
	fd = net_listen("127.0.0.1:0", "a test", NULL, &port);
	close(fd);
	snprintf(url, sizeof(url), "ws://127.0.0.1:%d", port);
	assert_int_equal(ws_url__parse(&u, url, "1", err, sizeof(err)), 0);
	assert_null(ws_client__connect(&u, url, &co, err, sizeof(err)));
	assert_int_equal(errno, ECONNREFUSED);
	assert_non_null(strstr(err, "can't connect to ws://127.0.0.1:"));
	/* An HTTP server that doesn't switch. */
	snprintf(url, sizeof(url), "ws://127.0.0.1:%d/hello", http_server__port(s));
	assert_int_equal(ws_url__parse(&u, url, "1", err, sizeof(err)), 0);
	assert_null(ws_client__connect(&u, url, &co, err, sizeof(err)));
	assert_int_equal(errno, EPROTO);
	assert_non_null(strstr(err, "'HTTP/1.1 200 OK', not a WebSocket upgrade"));
	http_server__stop(s);
}

static void each_arg(void *ctx, const char *key, const char *value)
{
	char *out = ctx;

	strcat(out, key);
	strcat(out, "=");
	strcat(out, value);
	strcat(out, ";");
}

/* A local request's arguments decode as a received one's would. */
static void test_http_local(void **state)
{
	struct http_request *r = http_request__new_local("GET", "/api/v1/top",
							 "a=1&q=%7Bx%3D%22y+z%22%7D&k&&a=2&e=");
	char all[256] = "";
	size_t len;

	assert_non_null(r);
	assert_string_equal(http_request__method(r), "GET");
	assert_string_equal(http_request__path(r), "/api/v1/top");
	assert_string_equal(http_request__query(r, "a"), "1");
	assert_string_equal(http_request__query(r, "q"), "{x=\"y z\"}");
	assert_null(http_request__query(r, "k"));
	assert_string_equal(http_request__query(r, "e"), "");
	assert_null(http_request__query(r, "missing"));
	assert_null(http_request__header(r, "Content-Type"));
	assert_string_equal(http_request__body(r, &len), "");
	assert_int_equal(len, 0);
	assert_null(http_request__route_ctx(r));
	http_request__each_query(r, each_arg, all);
	assert_string_equal(all, "a=1;q={x=\"y z\"};k=;a=2;e=;");
	http_request__free_local(r);
	r = http_request__new_local("GET", "/x", NULL);
	assert_non_null(r);
	assert_null(http_request__query(r, "a"));
	http_request__free_local(r);
	http_request__free_local(NULL);
}

/* ---- a busy thread ---- */

/* A route that holds its thread until released (or 10 s). */
struct blocker {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool started, released;
};

static int route_block(void *ctx, const struct http_request *req, struct http_reply *rep)
{
	struct blocker *b = ctx;
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += 10;
	pthread_mutex_lock(&b->lock);
	b->started = true;
	pthread_cond_broadcast(&b->cond);
	while (!b->released && pthread_cond_timedwait(&b->cond, &b->lock, &ts) == 0)
		;
	pthread_mutex_unlock(&b->lock);
	rep->static_body = "done";
	rep->len = 4;
	return 0;
}

static int connect_port(int port)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	return fd;
}

/* Reads one answer (its head and Content-Length bytes) into buf; its
 * status. */
static int read_answer(int fd, char *buf, size_t cap)
{
	uint64_t deadline = mono_ms() + DEADLINE_MS;
	size_t got = 0;
	const char *end, *cl;

	for (;;) {
		struct pollfd p = {.fd = fd, .events = POLLIN};
		ssize_t n;

		assert_true(mono_ms() < deadline);
		if (poll(&p, 1, 100) <= 0)
			continue;
		n = recv(fd, buf + got, cap - 1 - got, 0);
		assert_true(n > 0);
		got += (size_t)n;
		buf[got] = '\0';
		end = strstr(buf, "\r\n\r\n");
		cl = strcasestr(buf, "Content-Length:");
		if (end && cl && got >= (size_t)(end + 4 - buf) + strtoul(cl + 15, NULL, 10))
			return status_of(buf);
	}
}

/* A request whose head is all in, unread because the connection's one
 * thread is busy with another request, is not a slow head: the sweep of
 * late heads leaves it (it was cut, and counted as a slowloris, once its
 * deadline passed during the other request, though its client had sent
 * everything in time). Here a connection opened (and taken by the server)
 * before the one thread runs a route for 3 s sends its GET during it: past
 * its head deadline of 1 s and two sweeps after, it is answered. */
static void test_http_busy_thread(void **state)
{
	struct blocker b = {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};
	const struct http_route routes[] = {
		{.path = "/hello", .fn = route_hello, .ctx = &hello_ctx},
		{.path = "/block", .fn = route_block, .ctx = &b},
		{0},
	};
	struct http_opts o = {
		.listen = "127.0.0.1:0",
		.service = "the test server",
		.threads = 1,
		.head_timeout_s = 1,
		.routes = routes,
	};
	struct http_server *s = http_server__start(&o);
	static const char get[] = "GET /hello?name=late HTTP/1.1\r\nHost: x\r\n\r\n";
	static const char block[] = "GET /block HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
	struct pollfd p;
	char buf[4096];
	uint64_t deadline;
	int busy, late;

	assert_non_null(s);
	/* Both in the listen queue before the route runs: the server takes
	 * both (up to 10 a turn) before it reads the first's request. */
	busy = connect_port(http_server__port(s));
	late = connect_port(http_server__port(s));
	assert_int_equal(send(busy, block, strlen(block), MSG_NOSIGNAL), (ssize_t)strlen(block));
	deadline = mono_ms() + DEADLINE_MS;
	pthread_mutex_lock(&b.lock);
	while (!b.started) {
		pthread_mutex_unlock(&b.lock);
		assert_true(mono_ms() < deadline);
		poll(NULL, 0, 10);
		pthread_mutex_lock(&b.lock);
	}
	pthread_mutex_unlock(&b.lock);
	/* The thread is busy: the other connection's request, whole. */
	assert_int_equal(send(late, get, strlen(get), MSG_NOSIGNAL), (ssize_t)strlen(get));
	/* Past its head deadline and two sweeps after, it is still open. */
	p = (struct pollfd){.fd = late, .events = POLLIN};
	assert_int_equal(poll(&p, 1, 2500), 0);
	pthread_mutex_lock(&b.lock);
	b.released = true;
	pthread_cond_broadcast(&b.cond);
	pthread_mutex_unlock(&b.lock);
	assert_int_equal(read_answer(busy, buf, sizeof(buf)), 200);
	assert_int_equal(read_answer(late, buf, sizeof(buf)), 200);
	assert_non_null(strstr(buf, "hi late"));
	assert_int_equal(http_server__head_timeouts(s), 0);
	close(busy);
	close(late);
	http_server__stop(s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_parse_addr),	 cmocka_unit_test(test_listen_busy),
		cmocka_unit_test(test_http_routes),	 cmocka_unit_test(test_http_bodies),
		cmocka_unit_test(test_http_multipart),	 cmocka_unit_test(test_http_json_errors),
		cmocka_unit_test(test_ws_accept_key),	 cmocka_unit_test(test_ws_url),
		cmocka_unit_test(test_ws_stream),	 cmocka_unit_test(test_ws_share_adopting),
		cmocka_unit_test(test_ws_client_errors), cmocka_unit_test(test_http_local),
		cmocka_unit_test(test_http_busy_thread),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
