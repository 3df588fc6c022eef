/* ws_client.c: the WebSocket client of ws_client.h -- the URL, a
 * non-blocking connect with a deadline, the upgrade request and its
 * checked answer, then wslay over the socket (net/ws.c's callbacks, fed
 * first with the bytes that came after the answer's headers). */
#include "net/ws_client.h"

#include <errno.h>
#include <netdb.h>
#include <openssl/evp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>
#include <wslay/wslay.h>

#include "common/clock.h"
#include "common/xalloc.h"
#include "net/ws_internal.h"

#define WS_MAX_ANSWER 16384

struct ws_client {
	struct ws_conn conn; /* first: wslay's user data */
	wslay_event_context_ptr ctx;
	struct ws_client_opts o;
	int close_code;
	bool closing; /* we queued our close */
};

/* ---- the URL ---- */

static int url_fail(char *err, size_t errlen, int e, const char *msg)
{
	snprintf(err, errlen, "%s", msg);
	return e;
}

/* Copies s[0..n) into out (cap bytes); false when it doesn't fit. */
static bool copy_part(char *out, size_t cap, const char *s, size_t n)
{
	if (n >= cap)
		return false;
	memcpy(out, s, n);
	out[n] = '\0';
	return true;
}

int ws_url__parse(struct ws_url *u, const char *url, const char *default_port, char *err,
		  size_t errlen)
{
	static const char bad[] = "expected ws://HOST:PORT[/PATH]";
	const char *p = url, *host_end, *slash;
	size_t n;

	if (!strncmp(p, "wss://", 6))
		return url_fail(err, errlen, -ENOTSUP,
				"TLS (wss://) is not supported -- use ws://");
	if (!strncmp(p, "ws://", 5))
		p += 5;
	else if (strstr(p, "://"))
		return url_fail(err, errlen, -EINVAL, "expected a ws://HOST:PORT URL");
	slash = strchr(p, '/');
	snprintf(u->path, sizeof(u->path), "%s", slash ? slash : "/");
	if (!slash)
		slash = p + strlen(p);
	if (*p == '[') {
		host_end = memchr(p, ']', (size_t)(slash - p));
		if (!host_end ||
		    !copy_part(u->host, sizeof(u->host), p + 1, (size_t)(host_end - p - 1)))
			return url_fail(err, errlen, -EINVAL, bad);
		p = host_end + 1;
	} else {
		const char *colon = memchr(p, ':', (size_t)(slash - p));

		host_end = colon ? colon : slash;
		if (!copy_part(u->host, sizeof(u->host), p, (size_t)(host_end - p)))
			return url_fail(err, errlen, -EINVAL, bad);
		p = host_end;
	}
	if (!u->host[0])
		return url_fail(err, errlen, -EINVAL, bad);
	if (*p == ':') {
		n = (size_t)(slash - p - 1);
		if (!n || strspn(p + 1, "0123456789") < n ||
		    !copy_part(u->port, sizeof(u->port), p + 1, n))
			return url_fail(err, errlen, -EINVAL, bad);
	} else if (p == slash) {
		snprintf(u->port, sizeof(u->port), "%s", default_port);
	} else {
		return url_fail(err, errlen, -EINVAL, bad);
	}
	return 0;
}

/* ---- connecting ---- */

static int ms_left(uint64_t deadline)
{
	uint64_t now = mono_ms();

	return now >= deadline ? 0 : (int)(deadline - now);
}

/* A connected non-blocking socket, or a negative errno with err set. */
static int dial(const struct ws_url *u, const char *url, int timeout_ms, char *err, size_t errlen)
{
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res, *ai;
	int rc, fd = -1, e = 0;

	rc = getaddrinfo(u->host, u->port, &hints, &res);
	if (rc) {
		snprintf(err, errlen, "can't connect to %s: %s -- check the host name", url,
			 gai_strerror(rc));
		return -EADDRNOTAVAIL;
	}
	for (ai = res; ai; ai = ai->ai_next) {
		struct pollfd pfd;
		socklen_t len = sizeof(e);

		fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		if (fd < 0) {
			e = errno;
			continue;
		}
		if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0)
			break;
		e = errno;
		if (e == EINPROGRESS) {
			pfd = (struct pollfd){.fd = fd, .events = POLLOUT};
			rc = poll(&pfd, 1, timeout_ms);
			if (rc == 0)
				e = ETIMEDOUT;
			else if (rc < 0)
				e = errno;
			else if (!getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &len) && !e)
				break;
		}
		close(fd);
		fd = -1;
	}
	freeaddrinfo(res);
	if (fd >= 0)
		return fd;
	snprintf(err, errlen, "can't connect to %s: %s", url, strerror(e));
	return -e;
}

static const char *find_header(const char *headers, const char *name)
{
	size_t n = strlen(name);

	for (const char *l = strstr(headers, "\r\n"); l; l = strstr(l, "\r\n")) {
		l += 2;
		if (!strncasecmp(l, name, n) && l[n] == ':') {
			l += n + 1;
			while (*l == ' ' || *l == '\t')
				l++;
			return l;
		}
	}
	return NULL;
}

/* Sends the request, then reads the answer's headers into buf (at most
 * WS_MAX_ANSWER bytes, NUL-terminated) until the blank line; *got is what
 * was read, *end where the headers end. 0 or a negative errno. */
static int exchange(struct ws_client *c, const char *url, const char *req, size_t reqlen, char *buf,
		    size_t *got, const char **end, char *err, size_t errlen)
{
	uint64_t deadline = mono_ms() + (uint64_t)c->o.timeout_ms;
	size_t sent = 0;

	for (;;) {
		struct pollfd pfd = {.fd = c->conn.fd, .events = sent < reqlen ? POLLOUT : POLLIN};
		int left = ms_left(deadline), rc;
		ssize_t n;

		rc = left ? poll(&pfd, 1, left) : 0;
		if (rc < 0 && errno == EINTR) {
			snprintf(err, errlen, "can't open a WebSocket to %s: interrupted", url);
			return -EINTR;
		}
		if (rc <= 0) {
			snprintf(err, errlen,
				 "can't open a WebSocket to %s: no answer to the handshake in %d s",
				 url, c->o.timeout_ms / MS_PER_SEC);
			return -EPROTO;
		}
		if (sent < reqlen) {
			n = send(c->conn.fd, req + sent, reqlen - sent, MSG_NOSIGNAL);
			if (n < 0 && errno != EAGAIN && errno != EINTR) {
				snprintf(err, errlen, "can't open a WebSocket to %s: %s", url,
					 strerror(errno));
				return -errno;
			}
			sent += n > 0 ? (size_t)n : 0;
			continue;
		}
		n = recv(c->conn.fd, buf + *got, WS_MAX_ANSWER - *got, 0);
		if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
			snprintf(err, errlen,
				 "can't open a WebSocket to %s: the connection closed during the "
				 "handshake%s%s",
				 url, n ? ": " : "", n ? strerror(errno) : "");
			return -EPROTO;
		}
		if (n < 0)
			continue;
		*got += (size_t)n;
		buf[*got] = '\0';
		*end = strstr(buf, "\r\n\r\n");
		if (*end)
			return 0;
		if (*got == WS_MAX_ANSWER) {
			snprintf(err, errlen,
				 "can't open a WebSocket to %s: the handshake answer is too long",
				 url);
			return -EPROTO;
		}
	}
}

/* Checks the answer: a 101 with the accept key of key. */
static int check_answer(const char *buf, const char *key, const char *url, char *err, size_t errlen)
{
	char expect[32];
	const char *accept;
	int status = 0;

	if (sscanf(buf, "HTTP/1.%*d %d", &status) != 1 || status != 101) {
		snprintf(err, errlen,
			 "can't open a WebSocket to %s: the server answered '%.*s', not a "
			 "WebSocket upgrade",
			 url, (int)(strcspn(buf, "\r\n") < 100 ? strcspn(buf, "\r\n") : 100), buf);
		return -EPROTO;
	}
	ws_accept_key(key, expect, sizeof(expect));
	accept = find_header(buf, "Sec-WebSocket-Accept");
	if (!accept || strncmp(accept, expect, 28) || (accept[28] != '\r' && accept[28] != ' ')) {
		snprintf(err, errlen,
			 "can't open a WebSocket to %s: the server's "
			 "Sec-WebSocket-Accept is %s",
			 url, accept ? "wrong" : "missing");
		return -EPROTO;
	}
	return 0;
}

/* The upgrade request and its answer; keeps what came after the answer. */
static int handshake(struct ws_client *c, const struct ws_url *u, const char *url, char *err,
		     size_t errlen)
{
	unsigned char nonce[16];
	char key[32], req[1024], *buf;
	const char *end = NULL;
	size_t got = 0;
	int n, rc;

	if (getrandom(nonce, sizeof(nonce), 0) != sizeof(nonce)) {
		snprintf(err, errlen, "can't draw a WebSocket key: %s", strerror(errno));
		return -errno;
	}
	EVP_EncodeBlock((unsigned char *)key, nonce, sizeof(nonce));
	n = snprintf(req, sizeof(req),
		     "GET %s HTTP/1.1\r\n"
		     "Host: %s:%s\r\n"
		     "Upgrade: websocket\r\n"
		     "Connection: Upgrade\r\n"
		     "Sec-WebSocket-Key: %s\r\n"
		     "Sec-WebSocket-Version: 13\r\n"
		     "User-Agent: %s\r\n\r\n",
		     u->path, u->host, u->port, key, c->o.user_agent ? c->o.user_agent : "sonde");
	if (n < 0 || (size_t)n >= sizeof(req)) {
		snprintf(err, errlen, "can't open a WebSocket to %s: the URL is too long", url);
		return -EINVAL;
	}
	buf = xmalloc(WS_MAX_ANSWER + 1);
	rc = exchange(c, url, req, (size_t)n, buf, &got, &end, err, errlen);
	if (!rc)
		rc = check_answer(buf, key, url, err, errlen);
	if (!rc) {
		end += 4;
		rc = ws_conn__set_extra(&c->conn, end, got - (size_t)(end - buf));
	}
	free(buf);
	return rc;
}

/* ---- frames ---- */

static void on_msg(wslay_event_context_ptr ctx, const struct wslay_event_on_msg_recv_arg *arg,
		   void *user)
{
	struct ws_client *c = user;

	if (arg->opcode == WSLAY_CONNECTION_CLOSE) {
		c->close_code = arg->status_code ? arg->status_code : WSLAY_CODE_NO_STATUS_RCVD;
		return;
	}
	if (arg->opcode != WSLAY_TEXT_FRAME || c->closing || !c->o.on_text)
		return;
	c->o.on_text(c->o.ctx, (const char *)arg->msg, arg->msg_length);
}

static const struct wslay_event_callbacks callbacks = {
	.recv_callback = ws_conn_recv,
	.send_callback = ws_conn_send,
	.genmask_callback = ws_conn_genmask,
	.on_msg_recv_callback = on_msg,
};

struct ws_client *ws_client__connect(const struct ws_url *u, const char *url,
				     const struct ws_client_opts *o, char *err, size_t errlen)
{
	struct ws_client *c = xcalloc(1, sizeof(*c));
	int e;

	c->o = *o;
	c->conn.fd = dial(u, url, o->timeout_ms, err, errlen);
	if (c->conn.fd < 0) {
		e = -c->conn.fd;
		goto fail;
	}
	e = -handshake(c, u, url, err, errlen);
	if (e)
		goto fail;
	if (wslay_event_context_client_init(&c->ctx, &callbacks, c)) {
		snprintf(err, errlen, "can't open a WebSocket to %s: out of memory", url);
		e = ENOMEM;
		goto fail;
	}
	if (o->max_message)
		wslay_event_config_set_max_recv_msg_length(c->ctx, o->max_message);
	return c;
fail:
	ws_client__free(c);
	errno = e;
	return NULL;
}

int ws_client__fd(const struct ws_client *c)
{
	return c->conn.fd;
}

short ws_client__events(const struct ws_client *c)
{
	return (short)((wslay_event_want_read(c->ctx) ? POLLIN : 0) |
		       (wslay_event_want_write(c->ctx) ? POLLOUT : 0));
}

int ws_client__io(struct ws_client *c, short revents)
{
	if (revents & (POLLIN | POLLHUP | POLLERR))
		if (wslay_event_recv(c->ctx))
			c->conn.eof = true;
	if (revents & POLLOUT)
		if (wslay_event_send(c->ctx))
			c->conn.eof = true;
	return c->conn.eof ? -EPIPE : 0;
}

bool ws_client__done(const struct ws_client *c)
{
	return c->conn.eof || !ws_client__events(c);
}

void ws_client__close(struct ws_client *c)
{
	if (c->closing)
		return;
	wslay_event_queue_close(c->ctx, WSLAY_CODE_NORMAL_CLOSURE, NULL, 0);
	c->closing = true;
}

bool ws_client__closing(const struct ws_client *c)
{
	return c->closing;
}

bool ws_client__close_received(const struct ws_client *c)
{
	return wslay_event_get_close_received(c->ctx);
}

int ws_client__close_code(const struct ws_client *c)
{
	return c->close_code;
}

void ws_client__free(struct ws_client *c)
{
	if (!c)
		return;
	if (c->ctx)
		wslay_event_context_free(c->ctx);
	if (c->conn.fd >= 0)
		close(c->conn.fd);
	ws_conn__free_extra(&c->conn);
	free(c);
}
