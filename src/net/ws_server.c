/* ws_server.c: the WebSocket server of ws_server.h. The handshake is the
 * fallback route of an HTTP server (net/http.h, its own thread); after the
 * 101 the upgrade callback hands the socket to our loop thread through a
 * pending list and an eventfd. The loop thread owns every client: one
 * wslay context each, poll() over all of them, a snapshot broadcast at
 * each tick of a fixed schedule (CLOCK_MONOTONIC), per-client frame
 * skipping and stall detection as ws_server.h describes. */
#include "net/ws_server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>
#include <wslay/wslay.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/prom.h"
#include "common/xalloc.h"
#include "net/http.h"
#include "net/ws_internal.h"

#define WS_MAX_RECV_MSG (64 * 1024)
/* The handshake must complete within this; upgraded sockets are ours. */
#define WS_HANDSHAKE_TIMEOUT_S 10
#define WS_SNDBUF (512 * 1024)
/* Connections an address may hold besides its WebSocket clients: its
 * handshakes under way. */
#define WS_SPARE_PER_ADDR 8

struct ws_client {
	struct ws_conn conn; /* first: wslay's user data */
	struct http_upgrade *up;
	char addr[INET6_ADDRSTRLEN]; /* the peer's, as http_request__client() */
	wslay_event_context_ptr ctx;
	struct ws_client *next; /* pending list */
};

/* A handshake answered 101 whose connection is not upgraded yet: it holds
 * its slot meanwhile, so that handshakes on other threads see it. One whose
 * upgrade never comes (the client went away) lets it go after
 * WS_RESERVE_NS. */
struct ws_reserve {
	char addr[INET6_ADDRSTRLEN];
	uint64_t ns;
};

#define WS_RESERVE_NS (10ull * NS_PER_SEC)

struct ws_server {
	struct http_server *http;
	struct ws_opts opts;
	ws_snapshot_fn fn;
	void *ctx;
	int wake; /* eventfd */
	pthread_t thread;
	bool thread_started;
	pthread_mutex_t lock; /* guards pending, reserved, stopping, stats */
	struct ws_client *pending;
	struct ws_reserve *reserved;
	size_t nreserved, capreserved;
	bool stopping;
	struct ws_stats stats;
	/* Changed by the loop thread alone, under lock (the handshake counts
	 * an address's clients). */
	struct ws_client **clients;
	size_t nclients, capclients;
};

static void wake(struct ws_server *s)
{
	uint64_t one = 1;

	if (write(s->wake, &one, sizeof(one)) < 0 && errno != EAGAIN)
		pr_warn("websocket: can't wake the stream thread: %s", strerror(errno));
}

static void on_msg(wslay_event_context_ptr ctx, const struct wslay_event_on_msg_recv_arg *arg,
		   void *user)
{
	/* Text and binary messages from clients carry nothing for us; wslay
	 * answers pings and closes by itself. */
}

static const struct wslay_event_callbacks callbacks = {
	.recv_callback = ws_conn_recv,
	.send_callback = ws_conn_send,
	.on_msg_recv_callback = on_msg,
};

/* ---- clients (loop thread) ---- */

static void client_free(struct ws_client *c)
{
	if (c->ctx)
		wslay_event_context_free(c->ctx);
	/* The HTTP server closes the socket; we must not. */
	http_upgrade__close(c->up);
	ws_conn__free_extra(&c->conn);
	free(c);
}

static void client_remove(struct ws_server *s, size_t i, bool stalled)
{
	struct ws_client *c = s->clients[i];

	pthread_mutex_lock(&s->lock);
	s->clients[i] = s->clients[--s->nclients];
	s->stats.clients = s->nclients;
	if (stalled)
		s->stats.clients_dropped++;
	pthread_mutex_unlock(&s->lock);
	client_free(c);
}

/* Queues msg for c unless its queue is full; tries to send at once. */
static void client_push(struct ws_server *s, struct ws_client *c, const char *msg, size_t len)
{
	struct wslay_event_msg m = {WSLAY_TEXT_FRAME, (const uint8_t *)msg, len};
	bool queued = false;

	if (!wslay_event_get_write_enabled(c->ctx))
		return;
	if (wslay_event_get_queued_msg_count(c->ctx) >= s->opts.max_queued) {
		pthread_mutex_lock(&s->lock);
		s->stats.frames_skipped++;
		pthread_mutex_unlock(&s->lock);
		return;
	}
	if (!wslay_event_want_write(c->ctx))
		c->conn.progress_ms = mono_ms();
	if (wslay_event_queue_msg(c->ctx, &m) == 0)
		queued = true;
	pthread_mutex_lock(&s->lock);
	s->stats.frames_queued += queued;
	pthread_mutex_unlock(&s->lock);
	wslay_event_send(c->ctx);
}

static void adopt_pending(struct ws_server *s)
{
	struct ws_client *c, *next;
	char *msg = NULL;
	size_t len = 0, first;

	/* Into clients at once, under the lock that handshakes count them
	 * under: a client out of pending and not yet in clients would be
	 * counted by none, and its address let past its share. */
	pthread_mutex_lock(&s->lock);
	first = s->nclients;
	for (c = s->pending; c; c = next) {
		next = c->next;
		c->next = NULL;
		xgrow((void **)&s->clients, &s->capclients, s->nclients + 1, sizeof(*s->clients));
		s->clients[s->nclients++] = c;
	}
	s->pending = NULL;
	s->stats.clients = s->nclients;
	pthread_mutex_unlock(&s->lock);
	/* From the last: a client removed here is replaced by one done. */
	for (size_t i = s->nclients; i-- > first;) {
		c = s->clients[i];
		if (wslay_event_context_server_init(&c->ctx, &callbacks, &c->conn)) {
			pr_warn("websocket: out of memory for a client: dropped");
			client_remove(s, i, false);
			continue;
		}
		wslay_event_config_set_max_recv_msg_length(c->ctx, WS_MAX_RECV_MSG);
		c->conn.progress_ms = mono_ms();
		pthread_mutex_lock(&s->lock);
		s->stats.accepted++;
		pthread_mutex_unlock(&s->lock);
		/* A new client sees data at once, not an interval later. */
		if (!msg)
			msg = s->fn(s->ctx, &len);
		if (msg)
			client_push(s, c, msg, len);
		/* Bytes that arrived with the handshake. */
		if (c->conn.nextra)
			wslay_event_recv(c->ctx);
	}
	free(msg);
}

static void broadcast(struct ws_server *s)
{
	char *msg;
	size_t len = 0;

	if (!s->nclients)
		return;
	msg = s->fn(s->ctx, &len);
	if (!msg)
		return;
	for (size_t i = 0; i < s->nclients; i++)
		client_push(s, s->clients[i], msg, len);
	free(msg);
}

/* Closes clients that are done, failed or stalled. */
static void reap(struct ws_server *s, uint64_t now)
{
	for (size_t i = 0; i < s->nclients;) {
		struct ws_client *c = s->clients[i];
		bool want_r = wslay_event_want_read(c->ctx),
		     want_w = wslay_event_want_write(c->ctx);

		if (c->conn.eof || (!want_r && !want_w)) {
			client_remove(s, i, false);
			continue;
		}
		if (want_w && now > c->conn.progress_ms &&
		    now - c->conn.progress_ms > s->opts.stall_ms) {
			pr_info("websocket: dropping a client that read nothing for %u ms",
				s->opts.stall_ms);
			client_remove(s, i, true);
			continue;
		}
		i++;
	}
}

/* The wake-up eventfd and each client's socket, as each wants. */
static void fill_pollfds(struct ws_server *s, struct pollfd *fds)
{
	fds[0] = (struct pollfd){.fd = s->wake, .events = POLLIN};
	for (size_t i = 0; i < s->nclients; i++) {
		struct ws_client *c = s->clients[i];

		fds[i + 1] = (struct pollfd){.fd = c->conn.fd};
		if (wslay_event_want_read(c->ctx))
			fds[i + 1].events |= POLLIN;
		if (wslay_event_want_write(c->ctx))
			fds[i + 1].events |= POLLOUT;
	}
}

/* Reads and writes what poll() found ready. Clients adopted after the
 * poll are not in fds yet; the ones polled keep their index until then. */
static void serve_ready(struct ws_server *s, const struct pollfd *fds)
{
	if (fds[0].revents & POLLIN) {
		uint64_t v;

		if (read(s->wake, &v, sizeof(v)) < 0 && errno != EAGAIN)
			pr_warn("websocket: can't read the wake-up: %s", strerror(errno));
	}
	for (size_t i = 0; i < s->nclients; i++) {
		struct ws_client *c = s->clients[i];
		short re = fds[i + 1].revents;

		if (re & (POLLIN | POLLHUP | POLLERR))
			if (wslay_event_recv(c->ctx) && !c->conn.eof)
				c->conn.eof = true;
		if (re & POLLOUT && !c->conn.eof)
			if (wslay_event_send(c->ctx))
				c->conn.eof = true;
	}
}

/* Going away: says so to each client that can still hear it. */
static void close_all(struct ws_server *s)
{
	adopt_pending(s);
	while (s->nclients) {
		struct ws_client *c = s->clients[0];

		if (wslay_event_get_write_enabled(c->ctx) && !c->conn.eof) {
			wslay_event_queue_close(c->ctx, WSLAY_CODE_GOING_AWAY, NULL, 0);
			wslay_event_send(c->ctx);
		}
		client_remove(s, 0, false);
	}
}

static void *loop(void *arg)
{
	struct ws_server *s = arg;
	uint64_t next_tick = mono_ms() + s->opts.interval_ms;
	struct pollfd *fds = NULL;
	size_t capfds = 0;

	for (;;) {
		uint64_t now = mono_ms();
		bool stop;
		int timeout, n;

		if (now >= next_tick) {
			broadcast(s);
			next_tick += s->opts.interval_ms;
			/* After a long stall (a suspended machine), don't
			 * replay the missed ticks. */
			if (next_tick <= now)
				next_tick = now + s->opts.interval_ms;
		}
		reap(s, now);
		xgrow((void **)&fds, &capfds, s->nclients + 1, sizeof(*fds));
		fill_pollfds(s, fds);
		timeout = (int)(next_tick - now);
		/* Wake up for a stalled client's deadline too. */
		if (timeout > 1000 && s->nclients)
			timeout = 1000;
		n = poll(fds, s->nclients + 1, timeout);
		if (n < 0 && errno != EINTR) {
			pr_err("websocket: poll failed: %s", strerror(errno));
			break;
		}
		if (n <= 0)
			continue;
		serve_ready(s, fds);
		pthread_mutex_lock(&s->lock);
		stop = s->stopping;
		pthread_mutex_unlock(&s->lock);
		if (stop)
			break;
		adopt_pending(s);
	}
	close_all(s);
	free(fds);
	return NULL;
}

/* ---- the handshake (the HTTP server's thread) ---- */

/* The peer address of socket fd, written as http_request__client() does
 * ("" when it has none). */
static void peer_addr(int fd, char *out, size_t len)
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	const void *a = NULL;

	out[0] = '\0';
	if (getpeername(fd, (struct sockaddr *)&ss, &sl))
		return;
	if (ss.ss_family == AF_INET)
		a = &((struct sockaddr_in *)&ss)->sin_addr;
	else if (ss.ss_family == AF_INET6)
		a = &((struct sockaddr_in6 *)&ss)->sin6_addr;
	if (!a || !inet_ntop(ss.ss_family, a, out, (socklen_t)len))
		out[0] = '\0';
}

/* Lets go the oldest reservation of addr, or those past WS_RESERVE_NS
 * (addr NULL). Called under lock. */
static void unreserve(struct ws_server *s, const char *addr)
{
	uint64_t now = mono_ns();
	size_t kept = 0;
	bool done = false;

	for (size_t i = 0; i < s->nreserved; i++) {
		struct ws_reserve *r = &s->reserved[i];

		if ((addr && !done && !strcmp(r->addr, addr)) || now - r->ns > WS_RESERVE_NS) {
			done = done || addr;
			continue;
		}
		s->reserved[kept++] = *r;
	}
	s->nreserved = kept;
}

static void on_upgrade(void *ctx, int fd, const char *extra, size_t nextra, struct http_upgrade *up)
{
	struct ws_server *s = ctx;
	struct ws_client *c = calloc(1, sizeof(*c));
	int flags, one = 1, sndbuf = WS_SNDBUF;

	if (!c || ws_conn__set_extra(&c->conn, extra, nextra)) {
		pr_warn("websocket: out of memory for a client: dropped");
		free(c);
		http_upgrade__close(up);
		return;
	}
	c->conn.fd = fd;
	c->up = up;
	peer_addr(fd, c->addr, sizeof(c->addr));
	flags = fcntl(fd, F_GETFL);
	if (flags >= 0)
		fcntl(fd, F_SETFL, flags | O_NONBLOCK);
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	/* Bounds what a client that stops reading pins in the kernel (loopback
	 * autotuning would let it grow to 4 MiB). */
	setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf));
	pthread_mutex_lock(&s->lock);
	if (s->stopping) {
		/* The loop thread is gone or going: nobody would serve it. */
		pthread_mutex_unlock(&s->lock);
		client_free(c);
		return;
	}
	c->next = s->pending;
	s->pending = c;
	unreserve(s, c->addr);
	pthread_mutex_unlock(&s->lock);
	wake(s);
}

/* Whether the comma-separated header value has token (case-insensitive). */
static bool has_token(const char *value, const char *token)
{
	size_t n = strlen(token);

	while (value && *value) {
		while (*value == ' ' || *value == '\t' || *value == ',')
			value++;
		if (!strncasecmp(value, token, n) &&
		    (value[n] == '\0' || value[n] == ',' || value[n] == ' ' || value[n] == '\t'))
			return true;
		value = strchr(value, ',');
	}
	return false;
}

/* The accept key of a valid upgrade request into accept; false when it
 * is none. */
static bool upgrade_request(const struct http_request *req, char *accept, size_t len)
{
	const char *upgrade = http_request__header(req, "Upgrade");
	const char *connection = http_request__header(req, "Connection");
	const char *key = http_request__header(req, "Sec-WebSocket-Key");
	const char *ver = http_request__header(req, "Sec-WebSocket-Version");

	return upgrade && has_token(upgrade, "websocket") && connection &&
	       has_token(connection, "upgrade") && key && ver && !strcmp(ver, "13") &&
	       strlen(key) == 24 && !ws_accept_key(key, accept, len);
}

static int handshake(void *ctx, const struct http_request *req, struct http_reply *rep)
{
	struct ws_server *s = ctx;
	char accept[32], msg[256];
	const char *addr;
	unsigned mine = 0;
	size_t clients;
	bool full;

	if (strcmp(http_request__method(req), "GET")) {
		http_reply__header(rep, "Allow", "GET");
		return http_reply__message(rep, 405, false, "method not allowed: GET only");
	}
	if (!upgrade_request(req, accept, sizeof(accept))) {
		http_reply__header(rep, "Upgrade", "websocket");
		http_reply__header(rep, "Sec-WebSocket-Version", "13");
		return http_reply__message(
			rep, 426, false,
			"this is the sonde WebSocket stream: connect with a "
			"WebSocket client (sonde watch ws://HOST:PORT, websocat)");
	}
	addr = http_request__client(req);
	pthread_mutex_lock(&s->lock);
	unreserve(s, NULL);
	clients = s->nclients + s->nreserved;
	for (size_t i = 0; i < s->nclients; i++)
		mine += !strcmp(s->clients[i]->addr, addr);
	for (size_t i = 0; i < s->nreserved; i++)
		mine += !strcmp(s->reserved[i].addr, addr);
	for (struct ws_client *c = s->pending; c; c = c->next) {
		clients++;
		mine += !strcmp(c->addr, addr);
	}
	full = clients >= s->opts.max_clients;
	if (full) {
		s->stats.refused_full++;
	} else if (mine >= s->opts.max_per_addr) {
		s->stats.refused_addr++;
	} else {
		/* Its slot, until its upgrade or its reservation's end. */
		xgrow((void **)&s->reserved, &s->capreserved, s->nreserved + 1,
		      sizeof(*s->reserved));
		snprintf(s->reserved[s->nreserved].addr, sizeof(s->reserved[0].addr), "%s", addr);
		s->reserved[s->nreserved++].ns = mono_ns();
	}
	pthread_mutex_unlock(&s->lock);
	if (full)
		return http_reply__message(rep, 503, false,
					   "too many WebSocket clients: try again later");
	if (mine >= s->opts.max_per_addr) {
		snprintf(msg, sizeof(msg),
			 "too many WebSocket clients from %s: it holds %u of the %u it may (of %u "
			 "in all) -- close some",
			 addr, mine, s->opts.max_per_addr, s->opts.max_clients);
		return http_reply__message(rep, 503, false, msg);
	}
	rep->status = 101;
	rep->upgrade = on_upgrade;
	rep->upgrade_ctx = s;
	http_reply__header(rep, "Upgrade", "websocket");
	http_reply__header(rep, "Sec-WebSocket-Accept", accept);
	return 0;
}

static void opts_defaults(struct ws_opts *o)
{
	if (!o->interval_ms)
		o->interval_ms = 1000;
	if (!o->max_clients)
		o->max_clients = 64;
	if (!o->max_per_addr)
		o->max_per_addr = o->max_clients >= 4 ? o->max_clients / 4 : 1;
	if (!o->max_queued)
		o->max_queued = 2;
	if (!o->stall_ms)
		o->stall_ms = 30000;
}

struct ws_server *ws_server__start_opts(const char *addr, const struct ws_opts *opts,
					ws_snapshot_fn fn, void *ctx)
{
	struct ws_server *s = xcalloc(1, sizeof(*s));
	const struct http_route routes[] = {
		{.path = NULL, .methods = HTTP_GET | HTTP_OTHER, .fn = handshake, .ctx = s},
		{0},
	};
	struct http_opts ho = {
		.listen = addr,
		.service = "the WebSocket stream",
		.timeout_s = WS_HANDSHAKE_TIMEOUT_S,
		.routes = routes,
	};
	int e;

	pthread_mutex_init(&s->lock, NULL);
	if (opts)
		s->opts = *opts;
	opts_defaults(&s->opts);
	s->fn = fn;
	s->ctx = ctx;
	s->wake = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (s->wake < 0) {
		e = errno;
		pr_err("can't create the WebSocket wake-up eventfd: %s", strerror(e));
		goto fail;
	}
	e = pthread_create(&s->thread, NULL, loop, s);
	if (e) {
		pr_err("can't start the WebSocket thread: %s", strerror(e));
		goto fail;
	}
	s->thread_started = true;
	/* Upgraded connections count against the limit until they close. */
	ho.max_connections = s->opts.max_clients + 16;
	ho.max_per_ip = s->opts.max_per_addr + WS_SPARE_PER_ADDR;
	s->http = http_server__start(&ho);
	if (!s->http) {
		e = errno;
		goto fail;
	}
	return s;
fail:
	ws_server__stop(s);
	errno = e;
	return NULL;
}

struct ws_server *ws_server__start(const char *addr, unsigned interval_ms, ws_snapshot_fn fn,
				   void *ctx)
{
	struct ws_opts o = {.interval_ms = interval_ms};

	return ws_server__start_opts(addr, &o, fn, ctx);
}

int ws_server__port(const struct ws_server *s)
{
	return http_server__port(s->http);
}

void ws_server__stats(struct ws_server *s, struct ws_stats *st)
{
	pthread_mutex_lock(&s->lock);
	*st = s->stats;
	pthread_mutex_unlock(&s->lock);
}

void ws_server__collect(void *src, struct prom_out *o)
{
	struct ws_stats st;

	ws_server__stats(src, &st);
	prom__metric(o, "sonde_ws_clients", "gauge", "WebSocket clients connected now.",
		     (double)st.clients);
	prom__metric(o, "sonde_ws_connections_total", "counter", "WebSocket handshakes completed.",
		     (double)st.accepted);
	prom__metric(o, "sonde_ws_frames_queued_total", "counter",
		     "Snapshots queued to WebSocket clients.", (double)st.frames_queued);
	prom__metric(o, "sonde_ws_frames_skipped_total", "counter",
		     "Snapshots skipped for clients too slow to take them.",
		     (double)st.frames_skipped);
	prom__metric(o, "sonde_ws_clients_dropped_total", "counter",
		     "WebSocket clients disconnected for reading nothing.",
		     (double)st.clients_dropped);
	prom__family(o, "sonde_ws_refused_total", "counter",
		     "WebSocket handshakes refused (503), by reason: full (every slot held), "
		     "address (the client's address held its share of the slots).");
	prom__sample(o, "sonde_ws_refused_total", (const char *[]){"reason", "full", NULL},
		     (double)st.refused_full);
	prom__sample(o, "sonde_ws_refused_total", (const char *[]){"reason", "address", NULL},
		     (double)st.refused_addr);
}

void ws_server__stop(struct ws_server *s)
{
	if (!s)
		return;
	if (s->thread_started) {
		pthread_mutex_lock(&s->lock);
		s->stopping = true;
		pthread_mutex_unlock(&s->lock);
		wake(s);
		pthread_join(s->thread, NULL);
	}
	/* The loop thread closed every upgraded connection, and on_upgrade
	 * closes any that completes from now on: the HTTP server can stop. */
	while (s->pending) {
		struct ws_client *c = s->pending;

		s->pending = c->next;
		client_free(c);
	}
	http_server__stop(s->http);
	free(s->clients);
	free(s->reserved);
	if (s->wake >= 0)
		close(s->wake);
	pthread_mutex_destroy(&s->lock);
	free(s);
}
