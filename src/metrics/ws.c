/* ws.c: the WebSocket stream of ws.h. libmicrohttpd (its own thread) parses
 * the upgrade request and sends the 101; its upgrade callback hands the
 * socket to our loop thread through a pending list and an eventfd. The loop
 * thread owns every client: one wslay context each, poll() over all of them,
 * a snapshot broadcast at each tick of a fixed schedule (CLOCK_MONOTONIC),
 * per-client frame skipping and stall detection as ws.h describes. */
#include "metrics/ws.h"
#include "common/prom.h"
#include "common/clock.h"

#include <errno.h>
#include <fcntl.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/evp.h>
#include <openssl/sha.h>
#include <poll.h>
#include <stdarg.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <wslay/wslay.h>

#include "common/log.h"
#include "common/xalloc.h"
#include "metrics/http.h"

#define WS_GUID "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
#define WS_MAX_RECV_MSG (64 * 1024)
/* The handshake must complete within this; upgraded sockets are ours. */
#define WS_HANDSHAKE_TIMEOUT_S 10
#define WS_SNDBUF (512 * 1024)

struct ws_client {
	int fd;
	struct MHD_UpgradeResponseHandle *urh;
	wslay_event_context_ptr ctx;
	char *extra; /* bytes MHD read past the request, fed to wslay first */
	size_t nextra, extra_off;
	uint64_t progress_ms; /* last time the socket took bytes or the queue was empty */
	bool eof;
	struct ws_client *next; /* pending list */
};

struct ws_server {
	struct MHD_Daemon *daemon;
	struct ws_opts opts;
	ws_snapshot_fn fn;
	void *ctx;
	int port;
	int wake; /* eventfd */
	pthread_t thread;
	bool thread_started;
	pthread_mutex_t lock; /* guards pending, stopping, stats */
	struct ws_client *pending;
	bool stopping;
	struct ws_stats stats;
	/* Loop thread only. */
	struct ws_client **clients;
	size_t nclients, capclients;
};

int ws_accept_key(const char *key, char *out, size_t outlen)
{
	unsigned char md[SHA_DIGEST_LENGTH];
	char buf[128];
	int n;

	if (!key || outlen < 29)
		return -EINVAL;
	n = snprintf(buf, sizeof(buf), "%s%s", key, WS_GUID);
	if (n < 0 || (size_t)n >= sizeof(buf))
		return -EINVAL;
	SHA1((const unsigned char *)buf, (size_t)n, md);
	EVP_EncodeBlock((unsigned char *)out, md, SHA_DIGEST_LENGTH);
	return 0;
}

static void wake(struct ws_server *s)
{
	uint64_t one = 1;

	if (write(s->wake, &one, sizeof(one)) < 0 && errno != EAGAIN)
		pr_warn("websocket: can't wake the stream thread: %s", strerror(errno));
}

/* ---- wslay callbacks ---- */

static ssize_t on_recv(wslay_event_context_ptr ctx, uint8_t *buf, size_t len, int flags, void *user)
{
	struct ws_client *c = user;
	ssize_t n;

	if (c->extra_off < c->nextra) {
		size_t k = c->nextra - c->extra_off;

		if (k > len)
			k = len;
		memcpy(buf, c->extra + c->extra_off, k);
		c->extra_off += k;
		return (ssize_t)k;
	}
	n = recv(c->fd, buf, len, 0);
	if (n > 0)
		return n;
	if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
		wslay_event_set_error(ctx, WSLAY_ERR_WOULDBLOCK);
		return -1;
	}
	c->eof = true;
	wslay_event_set_error(ctx, WSLAY_ERR_CALLBACK_FAILURE);
	return -1;
}

static ssize_t on_send(wslay_event_context_ptr ctx, const uint8_t *data, size_t len, int flags,
		       void *user)
{
	struct ws_client *c = user;
	ssize_t n;

	n = send(c->fd, data, len, MSG_NOSIGNAL | (flags & WSLAY_MSG_MORE ? MSG_MORE : 0));
	if (n > 0) {
		c->progress_ms = mono_ms();
		return n;
	}
	if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
		wslay_event_set_error(ctx, WSLAY_ERR_WOULDBLOCK);
	else
		wslay_event_set_error(ctx, WSLAY_ERR_CALLBACK_FAILURE);
	return -1;
}

static void on_msg(wslay_event_context_ptr ctx, const struct wslay_event_on_msg_recv_arg *arg,
		   void *user)
{
	/* Text and binary messages from clients carry nothing for us; wslay
	 * answers pings and closes by itself. */
}

static const struct wslay_event_callbacks callbacks = {
	.recv_callback = on_recv,
	.send_callback = on_send,
	.on_msg_recv_callback = on_msg,
};

/* ---- clients (loop thread) ---- */

static void client_free(struct ws_client *c)
{
	if (c->ctx)
		wslay_event_context_free(c->ctx);
	/* MHD closes the socket; we must not. */
	MHD_upgrade_action(c->urh, MHD_UPGRADE_ACTION_CLOSE);
	free(c->extra);
	free(c);
}

static void client_remove(struct ws_server *s, size_t i, bool stalled)
{
	client_free(s->clients[i]);
	s->clients[i] = s->clients[--s->nclients];
	pthread_mutex_lock(&s->lock);
	s->stats.clients = s->nclients;
	if (stalled)
		s->stats.clients_dropped++;
	pthread_mutex_unlock(&s->lock);
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
		c->progress_ms = mono_ms();
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
	size_t len = 0;

	pthread_mutex_lock(&s->lock);
	c = s->pending;
	s->pending = NULL;
	pthread_mutex_unlock(&s->lock);
	for (; c; c = next) {
		next = c->next;
		c->next = NULL;
		if (wslay_event_context_server_init(&c->ctx, &callbacks, c)) {
			pr_warn("websocket: out of memory for a client: dropped");
			client_free(c);
			continue;
		}
		wslay_event_config_set_max_recv_msg_length(c->ctx, WS_MAX_RECV_MSG);
		c->progress_ms = mono_ms();
		xgrow((void **)&s->clients, &s->capclients, s->nclients + 1, sizeof(*s->clients));
		s->clients[s->nclients++] = c;
		pthread_mutex_lock(&s->lock);
		s->stats.clients = s->nclients;
		s->stats.accepted++;
		pthread_mutex_unlock(&s->lock);
		/* A new client sees data at once, not an interval later. */
		if (!msg)
			msg = s->fn(s->ctx, &len);
		if (msg)
			client_push(s, c, msg, len);
		/* Bytes that arrived with the handshake. */
		if (c->nextra)
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

		if (c->eof || (!want_r && !want_w)) {
			client_remove(s, i, false);
			continue;
		}
		if (want_w && now > c->progress_ms && now - c->progress_ms > s->opts.stall_ms) {
			pr_info("websocket: dropping a client that read nothing for %u ms",
				s->opts.stall_ms);
			client_remove(s, i, true);
			continue;
		}
		i++;
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
		fds[0] = (struct pollfd){.fd = s->wake, .events = POLLIN};
		for (size_t i = 0; i < s->nclients; i++) {
			struct ws_client *c = s->clients[i];

			fds[i + 1] = (struct pollfd){.fd = c->fd};
			if (wslay_event_want_read(c->ctx))
				fds[i + 1].events |= POLLIN;
			if (wslay_event_want_write(c->ctx))
				fds[i + 1].events |= POLLOUT;
		}
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
		if (fds[0].revents & POLLIN) {
			uint64_t v;

			if (read(s->wake, &v, sizeof(v)) < 0 && errno != EAGAIN)
				pr_warn("websocket: can't read the wake-up: %s", strerror(errno));
		}
		/* Clients adopted below are not in fds yet; the ones polled keep
		 * their index until then. */
		for (size_t i = 0; i < s->nclients; i++) {
			struct ws_client *c = s->clients[i];
			short re = fds[i + 1].revents;

			if (re & (POLLIN | POLLHUP | POLLERR))
				if (wslay_event_recv(c->ctx) && !c->eof)
					c->eof = true;
			if (re & POLLOUT && !c->eof)
				if (wslay_event_send(c->ctx))
					c->eof = true;
		}
		pthread_mutex_lock(&s->lock);
		stop = s->stopping;
		pthread_mutex_unlock(&s->lock);
		if (stop)
			break;
		adopt_pending(s);
	}
	/* Going away: say so to each client that can still hear it. */
	adopt_pending(s);
	while (s->nclients) {
		struct ws_client *c = s->clients[0];

		if (wslay_event_get_write_enabled(c->ctx) && !c->eof) {
			wslay_event_queue_close(c->ctx, WSLAY_CODE_GOING_AWAY, NULL, 0);
			wslay_event_send(c->ctx);
		}
		client_remove(s, 0, false);
	}
	free(fds);
	return NULL;
}

/* ---- the handshake (MHD's thread) ---- */

static void on_upgrade(void *cls, struct MHD_Connection *conn, void *con_cls, const char *extra_in,
		       size_t extra_in_size, MHD_socket sock, struct MHD_UpgradeResponseHandle *urh)
{
	struct ws_server *s = cls;
	struct ws_client *c = calloc(1, sizeof(*c));
	int flags, one = 1, sndbuf = WS_SNDBUF;

	if (!c || (extra_in_size && !(c->extra = malloc(extra_in_size)))) {
		pr_warn("websocket: out of memory for a client: dropped");
		free(c);
		MHD_upgrade_action(urh, MHD_UPGRADE_ACTION_CLOSE);
		return;
	}
	c->fd = sock;
	c->urh = urh;
	if (extra_in_size) {
		memcpy(c->extra, extra_in, extra_in_size);
		c->nextra = extra_in_size;
	}
	flags = fcntl(sock, F_GETFL);
	if (flags >= 0)
		fcntl(sock, F_SETFL, flags | O_NONBLOCK);
	setsockopt(sock, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	/* Bounds what a client that stops reading pins in the kernel (loopback
	 * autotuning would let it grow to 4 MiB). */
	setsockopt(sock, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf));
	pthread_mutex_lock(&s->lock);
	if (s->stopping) {
		/* The loop thread is gone or going: nobody would serve it. */
		pthread_mutex_unlock(&s->lock);
		client_free(c);
		return;
	}
	c->next = s->pending;
	s->pending = c;
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

static enum MHD_Result plain(struct MHD_Connection *conn, unsigned status, const char *msg)
{
	struct MHD_Response *r;
	enum MHD_Result ret;

	r = MHD_create_response_from_buffer(strlen(msg), (void *)msg, MHD_RESPMEM_PERSISTENT);
	if (!r)
		return MHD_NO;
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, HTTP_CONTENT_TEXT);
	if (status == MHD_HTTP_UPGRADE_REQUIRED) {
		MHD_add_response_header(r, MHD_HTTP_HEADER_UPGRADE, "websocket");
		MHD_add_response_header(r, "Sec-WebSocket-Version", "13");
	}
	if (status == MHD_HTTP_METHOD_NOT_ALLOWED)
		MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, "GET");
	ret = MHD_queue_response(conn, status, r);
	MHD_destroy_response(r);
	return ret;
}

static enum MHD_Result handshake(void *cls, struct MHD_Connection *conn, const char *url,
				 const char *method, const char *version, const char *upload_data,
				 size_t *upload_data_size, void **con_cls)
{
	struct ws_server *s = cls;
	const char *upgrade, *connection, *key, *ver;
	struct MHD_Response *r;
	enum MHD_Result ret;
	char accept[32];
	uint64_t clients;

	if (strcmp(method, MHD_HTTP_METHOD_GET))
		return plain(conn, MHD_HTTP_METHOD_NOT_ALLOWED, "method not allowed: GET only\n");
	upgrade = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_UPGRADE);
	connection = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONNECTION);
	key = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Sec-WebSocket-Key");
	ver = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Sec-WebSocket-Version");
	if (!upgrade || !has_token(upgrade, "websocket") || !connection ||
	    !has_token(connection, "upgrade") || !key || !ver || strcmp(ver, "13") ||
	    strlen(key) != 24 || ws_accept_key(key, accept, sizeof(accept)))
		return plain(conn, MHD_HTTP_UPGRADE_REQUIRED,
			     "this is the sonde WebSocket stream: connect with a WebSocket client "
			     "(sonde watch ws://HOST:PORT, websocat)\n");
	pthread_mutex_lock(&s->lock);
	clients = s->stats.clients;
	for (struct ws_client *c = s->pending; c; c = c->next)
		clients++;
	pthread_mutex_unlock(&s->lock);
	if (clients >= s->opts.max_clients)
		return plain(conn, MHD_HTTP_SERVICE_UNAVAILABLE,
			     "too many WebSocket clients: try again later\n");
	r = MHD_create_response_for_upgrade(on_upgrade, s);
	if (!r)
		return MHD_NO;
	MHD_add_response_header(r, MHD_HTTP_HEADER_UPGRADE, "websocket");
	MHD_add_response_header(r, "Sec-WebSocket-Accept", accept);
	ret = MHD_queue_response(conn, MHD_HTTP_SWITCHING_PROTOCOLS, r);
	MHD_destroy_response(r);
	return ret;
}

static void mhd_log(void *cls, const char *fmt, va_list ap)
{
	char buf[512];
	size_t n;

	if (!log_enabled(LOG_DEBUG))
		return;
	vsnprintf(buf, sizeof(buf), fmt, ap);
	n = strlen(buf);
	while (n && buf[n - 1] == '\n')
		buf[--n] = '\0';
	pr_debug("websocket: %s", buf);
}

struct ws_server *ws_server__start_opts(const char *addr, const struct ws_opts *opts,
					ws_snapshot_fn fn, void *ctx)
{
	struct ws_server *s = xcalloc(1, sizeof(*s));
	int fd = -1, e;

	pthread_mutex_init(&s->lock, NULL);
	s->wake = -1;
	if (opts)
		s->opts = *opts;
	if (!s->opts.interval_ms)
		s->opts.interval_ms = 1000;
	if (!s->opts.max_clients)
		s->opts.max_clients = 64;
	if (!s->opts.max_queued)
		s->opts.max_queued = 2;
	if (!s->opts.stall_ms)
		s->opts.stall_ms = 30000;
	s->fn = fn;
	s->ctx = ctx;
	s->wake = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (s->wake < 0) {
		e = errno;
		pr_err("can't create the WebSocket wake-up eventfd: %s", strerror(e));
		goto fail;
	}
	fd = metrics_listen(addr, "WebSocket", &s->port);
	if (fd < 0) {
		e = -fd;
		goto fail;
	}
	e = pthread_create(&s->thread, NULL, loop, s);
	if (e) {
		pr_err("can't start the WebSocket thread: %s", strerror(e));
		close(fd);
		goto fail;
	}
	s->thread_started = true;
	s->daemon = MHD_start_daemon(
		MHD_USE_AUTO_INTERNAL_THREAD | MHD_ALLOW_UPGRADE | MHD_USE_ERROR_LOG, 0, NULL, NULL,
		handshake, s, MHD_OPTION_LISTEN_SOCKET, fd, MHD_OPTION_CONNECTION_LIMIT,
		s->opts.max_clients + 16, MHD_OPTION_CONNECTION_TIMEOUT,
		(unsigned)WS_HANDSHAKE_TIMEOUT_S, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL,
		MHD_OPTION_END);
	if (!s->daemon) {
		e = errno ? errno : EIO;
		pr_err("can't start the WebSocket server on %s: %s", addr, strerror(e));
		close(fd);
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
	return s->port;
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
	 * closes any that completes from now on: MHD can stop. */
	while (s->pending) {
		struct ws_client *c = s->pending;

		s->pending = c->next;
		client_free(c);
	}
	if (s->daemon)
		MHD_stop_daemon(s->daemon);
	free(s->clients);
	if (s->wake >= 0)
		close(s->wake);
	pthread_mutex_destroy(&s->lock);
	free(s);
}
