/* http.c: the HTTP server of http.h on libmicrohttpd. MHD calls
 * on_request() several times per request: first with the headers (the
 * route is chosen and the method, Content-Length and Content-Type checked
 * before a byte of the body is read), then once per chunk of body, then
 * once more at its end, when the route runs. A request's state lives in
 * struct http_request from the first call to MHD's completion notice. The
 * listening socket is ours (net/listen.h), handed to MHD. HTTPS is MHD's
 * (GnuTLS), with the files net/tls.c read and checked; with mutual TLS,
 * MHD asks each client for a certificate but requires none, so the first
 * call of every request verifies the client's against the client CA and
 * refuses the request (403) unless it passes.
 *
 * MHD's timeout is one of inactivity, which a client sending a byte every
 * few seconds resets: a request head that never ends would hold its
 * connection for ever, and enough of them (a slowloris from many
 * addresses) every connection. So each connection is listed (MHD's
 * connection notices) with when it started or its last request ended, and
 * a thread of the server cuts, every second, those whose head is not in
 * head_timeout_s after it started (the idle timeout after a kept-alive
 * request) -- after a second, checked five times a second, while the
 * server holds three quarters of its connections -- by shutdown() of its
 * socket, which MHD then closes as a reset. A connection whose whole head
 * waits unread in its socket is not late: its thread was busy with another
 * connection's request, its client was not slow. */
#include "net/http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <gnutls/gnutls.h>
#include <inttypes.h>
#include <jansson.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/json.h"
#include "common/log.h"
#include "common/sbuf.h"
#include "common/xalloc.h"
#include "net/listen.h"
#include "net/tls.h"

#define HTTP_DEFAULT_MAX_CONNECTIONS 128
/* Open files a server leaves for the rest of its process (the store, the
 * BPF maps of `sonde run`, logs). */
#define HTTP_SPARE_FILES 256
#define HTTP_DEFAULT_TIMEOUT_S 30
#define HTTP_DEFAULT_MAX_BODY (16u << 20)
/* MHD's per-connection pool: headers and the chunks of body it hands us. */
#define HTTP_CONNECTION_MEMORY (128 * 1024)
/* The post processor's buffer for a multipart body. */
#define HTTP_POST_BUFFER (64 * 1024)
/* Parts of a multipart body a route may keep. */
#define HTTP_MAX_PARTS 8
/* GnuTLS's defaults less the protocol versions before TLS 1.2, which
 * libmicrohttpd's default ("NORMAL") still takes. */
#define HTTP_TLS_PRIORITIES "NORMAL:-VERS-ALL:+VERS-TLS1.3:+VERS-TLS1.2"
/* A sender that goes on past its limit is cut off after this many times
 * the limit (counted and dropped until then, so that it reads the 413). */
#define HTTP_DROP_FACTOR 16
/* A request head's deadline from its connection's start. */
#define HTTP_DEFAULT_HEAD_TIMEOUT_S 10
/* The same while the server holds HTTP_PRESSED_SHARE of its connections,
 * checked every HTTP_PRESSED_SWEEP_MS: a client's head takes milliseconds,
 * and the server must keep room to take new connections -- once it holds
 * all it may, they wait in the listen backlog, and past it their SYNs are
 * dropped and tried again seconds later. */
#define HTTP_PRESSED_HEAD_MS 1000
#define HTTP_PRESSED_SHARE 0.75
#define HTTP_PRESSED_SWEEP_MS 200
/* What a 503 for a full slow queue says to wait, in seconds. */
#define HTTP_SLOW_RETRY_AFTER "1"

/* A connection, from MHD's start notice to its close notice. */
struct http_conn {
	struct http_conn *prev, *next;
	struct MHD_Connection *mc;
	uint64_t since_ns;	      /* its start, or its last request's end */
	bool kept;		      /* a request ended: waiting for the next */
	bool in_request;	      /* the head is in: MHD's timeout applies */
	bool upgraded;		      /* a WebSocket: no longer HTTP */
	bool cut;		      /* shut down by the sweep */
	struct sockaddr_storage peer; /* to check that the fd is still its */
	socklen_t peerlen;
};

struct http_server {
	struct MHD_Daemon *daemon;
	struct http_opts o;
	int port;
	pthread_mutex_t lock; /* guards routes and the fallback */
	struct http_route *routes;
	size_t nroutes, caproutes;
	struct http_route fallback;
	bool has_fallback;
	struct tls_server_pem pem; /* HTTPS: what MHD was given */
	bool mtls;		   /* client certificates verified */
	/* The connections held, and the sweep that cuts slow heads. */
	pthread_mutex_t conns_lock;
	pthread_cond_t sweep_cond;
	struct http_conn *conns;
	size_t nconns;
	bool sweeping, stopping;
	pthread_t sweeper;
	uint64_t head_cuts;
	struct log_limit cut_log;
	char *peek; /* the sweep's look into a late connection's socket */
	bool tls;
	uint64_t uri_refusals; /* atomically */
	/* The slow routes' threads and the requests waiting for them. */
	pthread_mutex_t slow_lock;
	pthread_cond_t slow_cond;
	struct http_request *slow_head, *slow_tail;
	size_t slow_waiting;
	uint64_t slow_refused;
	pthread_t *slow;
	unsigned nslow;
	bool slow_stopping;
};

/* While this thread starts a daemon: where MHD's messages go, so that a
 * failed start can say why (a certificate GnuTLS refused). */
static __thread char *start_err;
static __thread size_t start_err_len;

struct http_request {
	struct http_server *srv;
	struct MHD_Connection *conn;
	const char *method, *path;
	unsigned method_bit;
	struct http_route route; /* a copy: routes may change meanwhile */
	bool begun;		 /* its head is in: the first call is done */
	bool routed;
	uint64_t start_ns;
	/* A URI past HTTP_MAX_URI or HTTP_MAX_ARGS (its arguments cut). */
	bool uri_refused;
	size_t uri_len, uri_args;
	bool answered;
	bool close; /* the connection ends with the answer */
	/* The body, up to limit; past it, too_big and the rest is counted
	 * and dropped. */
	uint64_t limit, seen;
	struct sbuf body;
	bool too_big;
	bool skip_body; /* a method without one: what comes is dropped */
	/* multipart/form-data: the route's parts. */
	struct MHD_PostProcessor *pp;
	bool multipart, pp_failed;
	struct sbuf parts[HTTP_MAX_PARTS];
	bool have_part[HTTP_MAX_PARTS];
	/* After a 101. */
	http_upgrade_fn upgrade;
	void *upgrade_ctx;
	/* What the admit function kept (http_request__keep). */
	void *kept;
	void (*kept_free)(void *);
	/* A slow route's: waiting for a slow thread (the connection
	 * suspended), then its answer, made there. */
	struct http_request *slow_next;
	bool queued, ran;
	int run_err;
	struct http_reply *slow_rep;
	/* A local request (no conn): its query arguments, key then value. */
	char **args;
	size_t nargs;
};

/* ---- replies ---- */

int http_reply__header(struct http_reply *rep, const char *name, const char *value)
{
	size_t n = strlen(value);

	if (rep->nheaders >= HTTP_REPLY_MAX_HEADERS || n >= sizeof(rep->headers[0].value))
		return -ENOSPC;
	rep->headers[rep->nheaders].name = name;
	memcpy(rep->headers[rep->nheaders].value, value, n + 1);
	rep->nheaders++;
	return 0;
}

int http_reply__message(struct http_reply *rep, int status, bool json, const char *msg)
{
	char *body = NULL;

	if (json) {
		json_t *j = json_object(), *m = json_string_lossy(msg);

		if (j && m && !json_object_set_new(j, "error", m))
			body = json_dumps(j, JSON_COMPACT);
		else
			json_decref(m);
		json_decref(j);
	} else if (asprintf(&body, "%s\n", msg) < 0) {
		body = NULL;
	}
	if (!body)
		return -ENOMEM;
	free(rep->body);
	rep->body = body;
	rep->len = strlen(body);
	rep->status = status;
	rep->content_type = json ? HTTP_CONTENT_JSON : HTTP_CONTENT_TEXT;
	return 0;
}

static unsigned method_bit(const char *method);

/* ---- request accessors ---- */

const char *http_request__method(const struct http_request *req)
{
	return req->method;
}

const char *http_request__path(const struct http_request *req)
{
	return req->path;
}

const char *http_request__query(const struct http_request *req, const char *key)
{
	if (!req->conn) {
		for (size_t i = 0; i < req->nargs; i++)
			if (!strcmp(req->args[2 * i], key))
				return req->args[2 * i + 1];
		return NULL;
	}
	return MHD_lookup_connection_value(req->conn, MHD_GET_ARGUMENT_KIND, key);
}

struct each_query {
	void (*fn)(void *ctx, const char *key, const char *value);
	void *ctx;
};

static enum MHD_Result each_query_cb(void *cls, enum MHD_ValueKind kind, const char *key,
				     const char *value)
{
	struct each_query *e = cls;

	e->fn(e->ctx, key, value ? value : "");
	return MHD_YES;
}

void http_request__each_query(const struct http_request *req,
			      void (*fn)(void *ctx, const char *key, const char *value), void *ctx)
{
	struct each_query e = {fn, ctx};

	if (!req->conn) {
		for (size_t i = 0; i < req->nargs; i++)
			fn(ctx, req->args[2 * i], req->args[2 * i + 1] ? req->args[2 * i + 1] : "");
		return;
	}
	MHD_get_connection_values(req->conn, MHD_GET_ARGUMENT_KIND, each_query_cb, &e);
}

const char *http_request__header(const struct http_request *req, const char *name)
{
	if (!req->conn)
		return NULL;
	return MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND, name);
}

const char *http_request__client(const struct http_request *req)
{
	static __thread char buf[INET6_ADDRSTRLEN];
	const union MHD_ConnectionInfo *ci;
	const struct sockaddr *sa;
	const void *addr;

	if (!req->conn)
		return "";
	ci = MHD_get_connection_info(req->conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
	sa = ci ? ci->client_addr : NULL;
	if (!sa || (sa->sa_family != AF_INET && sa->sa_family != AF_INET6))
		return "";
	addr = sa->sa_family == AF_INET
		       ? (const void *)&((const struct sockaddr_in *)sa)->sin_addr
		       : (const void *)&((const struct sockaddr_in6 *)sa)->sin6_addr;
	return inet_ntop(sa->sa_family, addr, buf, sizeof(buf)) ? buf : "";
}

const char *http_request__body(const struct http_request *req, size_t *len)
{
	*len = req->body.len;
	return req->body.buf ? req->body.buf : "";
}

bool http_request__multipart(const struct http_request *req)
{
	return req->multipart;
}

const char *http_request__part(const struct http_request *req, const char *name, size_t *len)
{
	for (size_t i = 0; req->route.parts && i < HTTP_MAX_PARTS && req->route.parts[i].name; i++)
		if (req->have_part[i] && !strcmp(req->route.parts[i].name, name)) {
			*len = req->parts[i].len;
			return req->parts[i].buf ? req->parts[i].buf : "";
		}
	return NULL;
}

void *http_request__route_ctx(const struct http_request *req)
{
	return req->routed ? req->route.ctx : NULL;
}

void http_request__keep(struct http_request *req, void *p, void (*free_fn)(void *))
{
	if (req->kept_free)
		req->kept_free(req->kept);
	req->kept = p;
	req->kept_free = free_fn;
}

void *http_request__kept(const struct http_request *req)
{
	return req->kept;
}

uint64_t http_request__start_ns(const struct http_request *req)
{
	return req->start_ns;
}

uint64_t http_request__body_bytes(const struct http_request *req)
{
	return req->seen;
}

/* One argument of a query string, decoded as MHD decodes a received
 * one ('+' a space, then %XX); NULL on ENOMEM. */
static char *query_unescape(const char *s, size_t n)
{
	char *out = strndup(s, n);

	if (!out)
		return NULL;
	for (char *c = out; *c; c++)
		if (*c == '+')
			*c = ' ';
	MHD_http_unescape(out);
	return out;
}

struct http_request *http_request__new_local(const char *method, const char *path,
					     const char *query)
{
	struct http_request *rq = calloc(1, sizeof(*rq));
	size_t cap = 1;

	if (!rq)
		return NULL;
	rq->method = method;
	rq->path = path;
	rq->method_bit = method_bit(method);
	rq->start_ns = mono_ns();
	for (const char *c = query; c && *c; c++)
		cap += *c == '&';
	rq->args = calloc(2 * cap, sizeof(*rq->args));
	if (!rq->args)
		goto fail;
	while (query && *query) {
		size_t len = strcspn(query, "&"), klen = strcspn(query, "=");
		const char *next = query + len + (query[len] == '&');

		if (klen > len)
			klen = len;
		if (len) {
			char **kv = &rq->args[2 * rq->nargs];

			/* "?key" has no value (NULL), as MHD has it. */
			kv[0] = query_unescape(query, klen);
			kv[1] = klen < len ? query_unescape(query + klen + 1, len - klen - 1)
					   : NULL;
			rq->nargs++;
			if (!kv[0] || (klen < len && !kv[1]))
				goto fail;
		}
		query = next;
	}
	return rq;
fail:
	http_request__free_local(rq);
	return NULL;
}

void http_request__free_local(struct http_request *req)
{
	if (!req)
		return;
	for (size_t i = 0; i < 2 * req->nargs; i++)
		free(req->args[i]);
	free(req->args);
	if (req->kept_free)
		req->kept_free(req->kept);
	free(req);
}

/* ---- connections ---- */

enum conn_event { CONN_HEAD, CONN_ENDED, CONN_UPGRADED };

static void on_connection(void *cls, struct MHD_Connection *mc, void **socket_context,
			  enum MHD_ConnectionNotificationCode toe)
{
	struct http_server *s = cls;
	struct http_conn *c = *socket_context;

	if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
		const union MHD_ConnectionInfo *fd =
			MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CONNECTION_FD);

		c = calloc(1, sizeof(*c));
		if (!c)
			return; /* not swept: MHD's timeout still holds */
		c->mc = mc;
		c->since_ns = mono_ns();
		c->peerlen = sizeof(c->peer);
		if (!fd || getpeername(fd->connect_fd, (struct sockaddr *)&c->peer, &c->peerlen))
			c->peerlen = 0;
		pthread_mutex_lock(&s->conns_lock);
		c->next = s->conns;
		if (s->conns)
			s->conns->prev = c;
		s->conns = c;
		s->nconns++;
		pthread_mutex_unlock(&s->conns_lock);
		*socket_context = c;
		return;
	}
	if (toe != MHD_CONNECTION_NOTIFY_CLOSED || !c)
		return;
	/* MHD says so before it closes the socket: once c is off the list,
	 * the sweep can't touch an fd that is no longer this connection's. */
	pthread_mutex_lock(&s->conns_lock);
	if (c->prev)
		c->prev->next = c->next;
	else
		s->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	s->nconns--;
	pthread_mutex_unlock(&s->conns_lock);
	*socket_context = NULL;
	free(c);
}

/* A request's head is in, its answer sent, or the connection upgraded. */
static void conn__mark(struct http_server *s, struct MHD_Connection *mc, enum conn_event ev)
{
	const union MHD_ConnectionInfo *ci =
		MHD_get_connection_info(mc, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
	struct http_conn *c = ci ? ci->socket_context : NULL;

	if (!c)
		return;
	pthread_mutex_lock(&s->conns_lock);
	switch (ev) {
	case CONN_HEAD:
		c->in_request = true;
		break;
	case CONN_ENDED:
		c->in_request = false;
		c->kept = true;
		c->since_ns = mono_ns();
		break;
	case CONN_UPGRADED:
		c->upgraded = true;
		break;
	}
	pthread_mutex_unlock(&s->conns_lock);
}

/* Whether fd is still c's socket (the same peer), so that shutting it
 * down can't hit another connection's. */
static bool conn__same_socket(const struct http_conn *c, int fd)
{
	struct sockaddr_storage peer;
	socklen_t len = sizeof(peer);

	if (!c->peerlen || getpeername(fd, (struct sockaddr *)&peer, &len))
		return false;
	return len == c->peerlen && !memcmp(&peer, &c->peer, len);
}

/* Whether a whole request head waits unread in the socket fd: the
 * connection's thread was busy (a long route of another of its
 * connections) while it came, its client was not slow. MHD reads what
 * comes at once when its thread is free, so only a busy thread leaves
 * bytes there. The end of a head is an empty line; a part of the head
 * MHD read before the thread got busy may hold all but that line. Over
 * TLS the bytes can't be looked at without taking them: any byte waiting
 * counts. */
static bool head_waiting(struct http_server *s, int fd)
{
	ssize_t n;
	int avail = 0;

	if (s->tls)
		return !ioctl(fd, FIONREAD, &avail) && avail > 0;
	n = recv(fd, s->peek, HTTP_CONNECTION_MEMORY, MSG_PEEK | MSG_DONTWAIT);
	if (n <= 0)
		return false;
	if (s->peek[0] == '\n' || (n > 1 && s->peek[0] == '\r' && s->peek[1] == '\n'))
		return true;
	return memmem(s->peek, (size_t)n, "\n\r\n", 3) || memmem(s->peek, (size_t)n, "\n\n", 2);
}

/* Whether the server holds HTTP_PRESSED_SHARE of its connections. Called
 * with conns_lock held. */
static bool conns_pressed(const struct http_server *s)
{
	return s->nconns >= HTTP_PRESSED_SHARE * s->o.max_connections;
}

/* Cuts the connections whose request head is late, but for those whose
 * head is all there, unread; their count. Called with conns_lock held. */
static unsigned sweep(struct http_server *s, uint64_t now)
{
	bool pressed = conns_pressed(s);
	uint64_t head = (uint64_t)s->o.head_timeout_s * NS_PER_SEC;
	uint64_t idle = (uint64_t)s->o.timeout_s * NS_PER_SEC;
	uint64_t pressed_ns = (uint64_t)HTTP_PRESSED_HEAD_MS * NS_PER_MS;
	unsigned cut = 0;

	for (struct http_conn *c = s->conns; c; c = c->next) {
		uint64_t limit = c->kept ? idle : head;
		const union MHD_ConnectionInfo *fd;

		if (c->in_request || c->upgraded || c->cut)
			continue;
		if (pressed && limit > pressed_ns)
			limit = pressed_ns;
		if (now - c->since_ns < limit)
			continue;
		fd = MHD_get_connection_info(c->mc, MHD_CONNECTION_INFO_CONNECTION_FD);
		if (!fd || !conn__same_socket(c, fd->connect_fd) || head_waiting(s, fd->connect_fd))
			continue;
		shutdown(fd->connect_fd, SHUT_RDWR);
		c->cut = true;
		cut++;
	}
	s->head_cuts += cut;
	return cut;
}

static void *sweeper(void *arg)
{
	struct http_server *s = arg;
	unsigned long long skipped, cuts = 0;
	struct timespec ts;

	pthread_mutex_lock(&s->conns_lock);
	while (!s->stopping) {
		long step_ns = conns_pressed(s) ? HTTP_PRESSED_SWEEP_MS * NS_PER_MS : NS_PER_SEC;

		clock_gettime(CLOCK_MONOTONIC, &ts);
		ts.tv_nsec += step_ns;
		if (ts.tv_nsec >= NS_PER_SEC) {
			ts.tv_sec++;
			ts.tv_nsec -= NS_PER_SEC;
		}
		pthread_cond_timedwait(&s->sweep_cond, &s->conns_lock, &ts);
		if (s->stopping)
			break;
		cuts += sweep(s, mono_ns());
		if (cuts && log_limit__take(&s->cut_log, 10000, &skipped)) {
			pr_warn("%s: closed %llu connection%s whose request head took longer than "
				"%u s (%s; %zu connections held)",
				s->o.service, cuts, cuts == 1 ? "" : "s", s->o.head_timeout_s,
				"slow or stalled clients, or a slowloris", s->nconns);
			cuts = 0;
		}
	}
	pthread_mutex_unlock(&s->conns_lock);
	return NULL;
}

uint64_t http_server__uri_refusals(struct http_server *s)
{
	return __atomic_load_n(&s->uri_refusals, __ATOMIC_RELAXED);
}

uint64_t http_server__head_timeouts(struct http_server *s)
{
	uint64_t n;

	pthread_mutex_lock(&s->conns_lock);
	n = s->head_cuts;
	pthread_mutex_unlock(&s->conns_lock);
	return n;
}

/* ---- answering ---- */

static void on_upgrade(void *cls, struct MHD_Connection *conn, void *con_cls, const char *extra_in,
		       size_t extra_in_size, MHD_socket sock, struct MHD_UpgradeResponseHandle *urh)
{
	struct http_request *rq = con_cls;

	conn__mark(rq->srv, conn, CONN_UPGRADED);
	rq->upgrade(rq->upgrade_ctx, sock, extra_in, extra_in_size, (struct http_upgrade *)urh);
}

void http_upgrade__close(struct http_upgrade *up)
{
	MHD_upgrade_action((struct MHD_UpgradeResponseHandle *)up, MHD_UPGRADE_ACTION_CLOSE);
}

static struct MHD_Response *response_new(struct http_request *rq, struct http_reply *rep)
{
	struct MHD_Response *r;

	if (rep->upgrade) {
		rq->upgrade = rep->upgrade;
		rq->upgrade_ctx = rep->upgrade_ctx;
		return MHD_create_response_for_upgrade(on_upgrade, NULL);
	}
	if (rep->static_body)
		return MHD_create_response_from_buffer(rep->len, (void *)rep->static_body,
						       MHD_RESPMEM_PERSISTENT);
	if (!rep->body)
		return MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
	r = MHD_create_response_from_buffer(rep->len, rep->body, MHD_RESPMEM_MUST_FREE);
	if (r)
		rep->body = NULL; /* MHD's now */
	return r;
}

/* Queues rep (taking its body) and reports it to the observer. */
static enum MHD_Result request__send(struct http_request *rq, struct http_reply *rep)
{
	struct http_server *s = rq->srv;
	int status = rep->status ? rep->status : MHD_HTTP_OK;
	struct MHD_Response *r = response_new(rq, rep);
	enum MHD_Result ret;

	free(rep->body);
	rep->body = NULL;
	if (!r)
		return MHD_NO;
	if (!rep->upgrade) {
		MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE,
					rep->content_type ? rep->content_type : HTTP_CONTENT_TEXT);
		MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
	}
	for (size_t i = 0; i < rep->nheaders; i++)
		MHD_add_response_header(r, rep->headers[i].name, rep->headers[i].value);
	/* A sender of an oversized or broken body is not one to keep. */
	if (rq->too_big || rq->pp_failed || rq->close)
		MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close");
	ret = MHD_queue_response(rq->conn, (unsigned)status, r);
	MHD_destroy_response(r);
	rq->answered = true;
	if (s->o.answered)
		s->o.answered(s->o.answered_ctx, rq, status);
	return ret;
}

/* The router's own answer: a message (text or JSON) and maybe Allow. */
static enum MHD_Result request__refuse(struct http_request *rq, int status, const char *allow,
				       const char *fmt, ...) __attribute__((format(printf, 4, 5)));

static enum MHD_Result request__refuse(struct http_request *rq, int status, const char *allow,
				       const char *fmt, ...)
{
	struct http_reply rep = {0};
	char msg[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (http_reply__message(&rep, status, rq->srv->o.json_errors, msg))
		return MHD_NO;
	if (allow)
		http_reply__header(&rep, MHD_HTTP_HEADER_ALLOW, allow);
	return request__send(rq, &rep);
}

/* Runs the route into rep, turning its failure into a 500. 0, or -ENOMEM
 * when not even that can be said. */
static int request__call(struct http_request *rq, struct http_reply *rep)
{
	struct http_server *s = rq->srv;
	char msg[512];
	int err;

	err = rq->route.fn(rq->route.ctx, rq, rep);
	if (err < 0) {
		free(rep->body);
		memset(rep, 0, sizeof(*rep));
		pr_warn("%s: %s %s failed: %s", s->o.service, rq->method, rq->path, strerror(-err));
		snprintf(msg, sizeof(msg), "internal error answering %s: %s", rq->path,
			 strerror(-err));
		return http_reply__message(rep, 500, s->o.json_errors, msg);
	}
	return 0;
}

/* Runs the route and answers. */
static enum MHD_Result request__run(struct http_request *rq)
{
	struct http_reply rep = {0};

	if (request__call(rq, &rep))
		return MHD_NO;
	return request__send(rq, &rep);
}

/* ---- slow routes ---- */

/* A slow route's request, all in: to the slow threads, its connection
 * suspended until one has made its answer (then MHD calls on_request
 * again, which sends it). A 503 when too many wait, or the server stops. */
static enum MHD_Result request__queue(struct http_request *rq)
{
	struct http_server *s = rq->srv;
	struct http_reply rep = {0};
	bool stopping;

	pthread_mutex_lock(&s->slow_lock);
	if (!s->nslow && !s->slow_stopping) {
		/* No slow thread could be started: here, then. */
		pthread_mutex_unlock(&s->slow_lock);
		return request__run(rq);
	}
	stopping = s->slow_stopping;
	if (!stopping && s->slow_waiting < HTTP_SLOW_QUEUE) {
		MHD_suspend_connection(rq->conn);
		rq->queued = true;
		if (s->slow_tail)
			s->slow_tail->slow_next = rq;
		else
			s->slow_head = rq;
		s->slow_tail = rq;
		s->slow_waiting++;
		pthread_cond_signal(&s->slow_cond);
		pthread_mutex_unlock(&s->slow_lock);
		return MHD_YES;
	}
	s->slow_refused += !stopping;
	pthread_mutex_unlock(&s->slow_lock);
	if (http_reply__message(&rep, MHD_HTTP_SERVICE_UNAVAILABLE, s->o.json_errors,
				stopping ? "the server is stopping"
					 : "too many requests wait for an answer: retry later"))
		return MHD_NO;
	http_reply__header(&rep, MHD_HTTP_HEADER_RETRY_AFTER, HTTP_SLOW_RETRY_AFTER);
	return request__send(rq, &rep);
}

/* A slow route's request back from its thread: its answer. */
static enum MHD_Result request__finish(struct http_request *rq)
{
	struct http_reply *rep = rq->slow_rep;
	enum MHD_Result ret = MHD_NO;

	rq->slow_rep = NULL;
	if (rep && !rq->run_err)
		ret = request__send(rq, rep);
	else if (rep)
		free(rep->body);
	free(rep);
	return ret;
}

static void *slow_main(void *arg)
{
	struct http_server *s = arg;
	struct http_request *rq;
	bool stopping;

	pthread_mutex_lock(&s->slow_lock);
	for (;;) {
		while (!s->slow_head && !s->slow_stopping)
			pthread_cond_wait(&s->slow_cond, &s->slow_lock);
		rq = s->slow_head;
		if (!rq)
			break;
		s->slow_head = rq->slow_next;
		if (!s->slow_head)
			s->slow_tail = NULL;
		s->slow_waiting--;
		stopping = s->slow_stopping;
		pthread_mutex_unlock(&s->slow_lock);
		rq->slow_rep = calloc(1, sizeof(*rq->slow_rep));
		if (!rq->slow_rep)
			rq->run_err = -ENOMEM;
		else if (stopping)
			rq->run_err =
				http_reply__message(rq->slow_rep, MHD_HTTP_SERVICE_UNAVAILABLE,
						    s->o.json_errors, "the server is stopping");
		else
			rq->run_err = request__call(rq, rq->slow_rep);
		rq->ran = true;
		/* rq is MHD's again from here: it may be freed at once. */
		MHD_resume_connection(rq->conn);
		pthread_mutex_lock(&s->slow_lock);
	}
	pthread_mutex_unlock(&s->slow_lock);
	return NULL;
}

/* Starts the slow threads, at the first slow route; called with s->lock
 * held. A thread that can't be started is logged; with none, slow routes
 * run on their connection's thread. */
static void slow_start(struct http_server *s)
{
	unsigned want = s->o.slow_threads ? s->o.slow_threads : s->o.threads ? s->o.threads : 1;
	pthread_t *t = calloc(want, sizeof(*t));
	unsigned n = 0;
	int e = ENOMEM;

	pthread_mutex_lock(&s->slow_lock);
	if (s->slow || s->slow_stopping || !t) {
		pthread_mutex_unlock(&s->slow_lock);
		free(t);
		return;
	}
	for (n = 0; n < want; n++) {
		e = pthread_create(&t[n], NULL, slow_main, s);
		if (e)
			break;
	}
	if (n < want)
		pr_warn("%s: %u of %u threads for slow requests started: %s", s->o.service, n, want,
			strerror(e));
	s->slow = t;
	s->nslow = n;
	pthread_mutex_unlock(&s->slow_lock);
}

/* Stops the slow threads: the requests still waiting are answered 503,
 * so that no connection is left suspended (MHD can't stop with one). */
static void slow_stop(struct http_server *s)
{
	pthread_mutex_lock(&s->slow_lock);
	s->slow_stopping = true;
	pthread_cond_broadcast(&s->slow_cond);
	pthread_mutex_unlock(&s->slow_lock);
	for (unsigned i = 0; i < s->nslow; i++)
		pthread_join(s->slow[i], NULL);
}

void http_server__slow_queue(struct http_server *s, uint64_t *waiting, uint64_t *refused)
{
	pthread_mutex_lock(&s->slow_lock);
	*waiting = s->slow_waiting;
	*refused = s->slow_refused;
	pthread_mutex_unlock(&s->slow_lock);
}

/* ---- routing ---- */

static unsigned method_bit(const char *method)
{
	if (!strcmp(method, MHD_HTTP_METHOD_GET))
		return HTTP_GET;
	if (!strcmp(method, MHD_HTTP_METHOD_HEAD))
		return HTTP_HEAD;
	if (!strcmp(method, MHD_HTTP_METHOD_POST))
		return HTTP_POST;
	return HTTP_OTHER;
}

static bool route_takes(const struct http_route *r, unsigned bit)
{
	return (r->methods & bit) || (r->methods & HTTP_OTHER);
}

/* Copies the route for rq's path and method into rq->route; false when
 * there is none (a fallback that doesn't take the method is none). */
static bool request__find_route(struct http_request *rq)
{
	struct http_server *s = rq->srv;
	bool found = false;

	size_t best = 0;

	pthread_mutex_lock(&s->lock);
	for (size_t i = 0; i < s->nroutes && !found; i++)
		if (!strcmp(s->routes[i].path, rq->path)) {
			rq->route = s->routes[i];
			found = true;
		}
	/* Else the longest prefix route the path is under. */
	for (size_t i = 0; i < s->nroutes && !found; i++) {
		const struct http_route *r = &s->routes[i];
		size_t n = strlen(r->path);

		if (r->prefix && n > best && !strncmp(r->path, rq->path, n) &&
		    (rq->path[n] == '/' || r->path[n - 1] == '/')) {
			rq->route = *r;
			best = n;
		}
	}
	found = found || best;
	if (!found && s->has_fallback && route_takes(&s->fallback, rq->method_bit)) {
		rq->route = s->fallback;
		found = true;
	}
	pthread_mutex_unlock(&s->lock);
	return found;
}

/* "GET, HEAD, POST" for Allow (sep ", ") or "GET or POST" for a message
 * (sep " or ", HEAD left out) of a route's methods. */
static void method_list(unsigned methods, const char *sep, bool head, char *out, size_t len)
{
	static const struct {
		unsigned bit;
		const char *name;
	} names[] = {{HTTP_GET, "GET"}, {HTTP_HEAD, "HEAD"}, {HTTP_POST, "POST"}};
	size_t o = 0;

	out[0] = '\0';
	for (size_t i = 0; i < ARRAY_SIZE(names); i++) {
		if (!(methods & names[i].bit) || (!head && names[i].bit == HTTP_HEAD))
			continue;
		o += (size_t)snprintf(out + o, len - o, "%s%s", o ? sep : "", names[i].name);
		if (o >= len)
			break;
	}
}

/* The media type of a Content-Type header, lowercased, without
 * parameters, into out. */
static void media_type(const char *ct, char *out, size_t outlen)
{
	size_t o = 0;

	while (ct && (*ct == ' ' || *ct == '\t'))
		ct++;
	for (; ct && *ct && *ct != ';' && *ct != ' ' && o + 1 < outlen; ct++)
		out[o++] = (char)((*ct >= 'A' && *ct <= 'Z') ? *ct + 32 : *ct);
	out[o] = '\0';
}

static bool type_listed(const char *const *types, const char *mt)
{
	for (; *types; types++)
		if (!strcmp(*types, mt))
			return true;
	return false;
}

static enum MHD_Result post_iter(void *cls, enum MHD_ValueKind kind, const char *key,
				 const char *filename, const char *content_type,
				 const char *transfer_encoding, const char *data, uint64_t off,
				 size_t size)
{
	struct http_request *rq = cls;
	const struct http_part *parts = rq->route.parts;

	for (size_t i = 0; key && i < HTTP_MAX_PARTS && parts[i].name; i++) {
		uint64_t max = parts[i].max ? parts[i].max : rq->limit;

		if (strcmp(parts[i].name, key))
			continue;
		rq->have_part[i] = true;
		if (rq->parts[i].len + size > max) {
			rq->too_big = true;
			return MHD_NO;
		}
		if (size && sbuf__add(&rq->parts[i], data, size))
			return MHD_NO;
		return MHD_YES;
	}
	return MHD_YES; /* a part the route doesn't keep */
}

/* A POST with a body to come: its limit, type and form, checked before
 * any of it is read. MHD_YES with nothing queued reads the body. */
static enum MHD_Result request__expect_body(struct http_request *rq)
{
	const struct http_route *r = &rq->route;
	const char *cl, *ct;
	char mt[128];

	rq->limit = r->max_body ? r->max_body : rq->srv->o.max_body;
	cl = http_request__header(rq, MHD_HTTP_HEADER_CONTENT_LENGTH);
	if (cl) {
		char *end;
		unsigned long long n;

		errno = 0;
		n = strtoull(cl, &end, 10);
		if (!errno && end != cl && n > rq->limit)
			return request__refuse(
				rq, MHD_HTTP_CONTENT_TOO_LARGE, NULL,
				"the body of %llu bytes is over the limit of %" PRIu64
				" bytes for %s",
				n, rq->limit, rq->path);
	}
	ct = http_request__header(rq, MHD_HTTP_HEADER_CONTENT_TYPE);
	media_type(ct, mt, sizeof(mt));
	if (r->parts && !strcmp(mt, "multipart/form-data")) {
		rq->multipart = true;
		rq->pp = MHD_create_post_processor(rq->conn, HTTP_POST_BUFFER, post_iter, rq);
		if (!rq->pp)
			return request__refuse(rq, MHD_HTTP_BAD_REQUEST, NULL,
					       "bad multipart/form-data body: the Content-Type has "
					       "no usable boundary (2 to 70 characters)");
		return MHD_YES;
	}
	if (r->body_types && *mt && !type_listed(r->body_types, mt))
		return request__refuse(
			rq, MHD_HTTP_UNSUPPORTED_MEDIA_TYPE, NULL, "Content-Type '%.80s' is not %s",
			ct, r->body_types_hint ? r->body_types_hint : "one this route takes");
	return MHD_YES;
}

/* The first call for a request: its route and method. */
static enum MHD_Result request__begin(struct http_request *rq)
{
	const char *hint = rq->srv->o.not_found_hint;
	char allow[64], use[64];

	if (!request__find_route(rq))
		return request__refuse(rq, MHD_HTTP_NOT_FOUND, NULL, "no such endpoint: %s %s%s%s",
				       rq->method, rq->path, hint ? " -- " : "", hint ? hint : "");
	rq->routed = true;
	if (!route_takes(&rq->route, rq->method_bit)) {
		method_list(rq->route.methods, ", ", true, allow, sizeof(allow));
		method_list(rq->route.methods, " or ", false, use, sizeof(use));
		return request__refuse(rq, MHD_HTTP_METHOD_NOT_ALLOWED, allow,
				       "method %s is not allowed on %s: use %s", rq->method,
				       rq->path, use);
	}
	if (rq->route.admit) {
		struct http_reply rep = {0};
		int err = rq->route.admit(rq->route.ctx, rq, &rep);

		if (err) {
			/* Refused on its head: the body is never read. */
			rq->close = true;
			if (err == HTTP_ANSWERED)
				return request__send(rq, &rep);
			free(rep.body);
			return request__refuse(rq, MHD_HTTP_INTERNAL_SERVER_ERROR, NULL,
					       "internal error checking a request to %s: %s",
					       rq->path, strerror(-err));
		}
	}
	if (rq->method_bit == HTTP_POST && rq->route.methods & HTTP_POST)
		return request__expect_body(rq);
	/* Run at the end of the request, not now: libmicrohttpd closes a
	 * connection whose answer was queued with the head (it can't know
	 * what follows), and a client's next request would need a new one.
	 * A body sent anyway is read and dropped. */
	rq->skip_body = true;
	return MHD_YES;
}

/* A chunk of body. */
static enum MHD_Result request__take(struct http_request *rq, const char *data, size_t n)
{
	rq->seen += n;
	if (rq->skip_body)
		return rq->seen > HTTP_DROP_FACTOR * rq->srv->o.max_body ? MHD_NO : MHD_YES;
	if (rq->too_big || rq->pp_failed)
		return rq->seen > HTTP_DROP_FACTOR * rq->limit ? MHD_NO : MHD_YES;
	if (rq->seen > rq->limit) {
		rq->too_big = true;
		sbuf__free(&rq->body);
		for (size_t i = 0; i < HTTP_MAX_PARTS; i++)
			sbuf__free(&rq->parts[i]);
		return MHD_YES;
	}
	if (rq->multipart) {
		if (MHD_post_process(rq->pp, data, n) != MHD_YES)
			rq->pp_failed = true;
		return MHD_YES;
	}
	return sbuf__add(&rq->body, data, n) ? MHD_NO : MHD_YES;
}

/* The body is all in. */
static enum MHD_Result request__end(struct http_request *rq)
{
	if (rq->too_big)
		return request__refuse(rq, MHD_HTTP_CONTENT_TOO_LARGE, NULL,
				       "the body is over the limit of %" PRIu64 " bytes for %s",
				       rq->limit, rq->path);
	if (rq->pp_failed)
		return request__refuse(rq, MHD_HTTP_BAD_REQUEST, NULL,
				       "malformed multipart/form-data body");
	if (rq->route.slow)
		return request__queue(rq);
	return request__run(rq);
}

/* ---- mutual TLS ---- */

/* Why GnuTLS's verification status refuses a certificate. */
static const char *verify_status_why(unsigned int status)
{
	if (status & GNUTLS_CERT_SIGNER_NOT_FOUND)
		return "it is not signed by a CA this server trusts (its --tls-client-ca)";
	if (status & GNUTLS_CERT_EXPIRED)
		return "it has expired";
	if (status & GNUTLS_CERT_NOT_ACTIVATED)
		return "it is not valid yet";
	if (status & GNUTLS_CERT_REVOKED)
		return "it is revoked";
	if (status & GNUTLS_CERT_SIGNER_NOT_CA)
		return "its signer is not a CA";
	if (status & GNUTLS_CERT_INSECURE_ALGORITHM)
		return "it is signed with an insecure algorithm";
	if (status & GNUTLS_CERT_SIGNATURE_FAILURE)
		return "its signature does not verify";
	return "it does not verify";
}

/* Whether rq's client presented a certificate that the client CA signed,
 * valid now; why not into why. Every request is checked, not only a
 * connection's first: the check is a signature or two, and a connection
 * is never trusted on the strength of an earlier request. */
static bool request__client_verified(struct http_request *rq, char *why, size_t len)
{
	const union MHD_ConnectionInfo *ci =
		MHD_get_connection_info(rq->conn, MHD_CONNECTION_INFO_GNUTLS_SESSION);
	unsigned int status = 0;
	int rc;

	if (!ci || !ci->tls_session) {
		snprintf(why, len, "the connection has no TLS session");
		return false;
	}
	/* libmicrohttpd's sessions are GnuTLS's, the one GnuTLS call made. */
	rc = gnutls_certificate_verify_peers2((gnutls_session_t)ci->tls_session, &status);
	if (rc == GNUTLS_E_NO_CERTIFICATE_FOUND)
		snprintf(why, len,
			 "no client certificate: this server takes requests from clients that "
			 "present one signed by its CA (mutual TLS)");
	else if (rc < 0)
		snprintf(why, len, "the client certificate can't be checked (GnuTLS error %d)", rc);
	else if (status)
		snprintf(why, len, "the client certificate is refused: %s",
			 verify_status_why(status));
	return rc == 0 && !status;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
				  const char *method, const char *version, const char *upload_data,
				  size_t *upload_data_size, void **con_cls)
{
	struct http_request *rq = *con_cls;
	size_t n;

	if (!rq || !rq->begun) {
		if (!rq) {
			rq = calloc(1, sizeof(*rq));
			if (!rq)
				return MHD_NO;
			*con_cls = rq;
		}
		rq->begun = true;
		rq->srv = cls;
		rq->conn = conn;
		rq->path = url;
		rq->method = method;
		rq->method_bit = method_bit(method);
		rq->start_ns = mono_ns();
		conn__mark(rq->srv, conn, CONN_HEAD);
		if (rq->srv->mtls) {
			char why[256];

			if (!request__client_verified(rq, why, sizeof(why))) {
				pr_debug("%s: %s %s refused: %s", rq->srv->o.service, method, url,
					 why);
				rq->close = true;
				return request__refuse(rq, MHD_HTTP_FORBIDDEN, NULL, "%s", why);
			}
		}
		if (rq->uri_refused) {
			__atomic_add_fetch(&rq->srv->uri_refusals, 1, __ATOMIC_RELAXED);
			rq->close = true;
			return request__refuse(rq, MHD_HTTP_URI_TOO_LONG, NULL,
					       "the request's URI has %zu bytes and %zu query "
					       "arguments: at most %d bytes and %d arguments are "
					       "taken",
					       rq->uri_len, rq->uri_args, HTTP_MAX_URI,
					       HTTP_MAX_ARGS);
		}
		return request__begin(rq);
	}
	if (rq->ran)
		return request__finish(rq);
	if (rq->queued)
		return MHD_YES; /* not back from its slow thread yet */
	if (rq->answered) {
		/* Answered early (413, 415...): the rest is not ours to read. */
		*upload_data_size = 0;
		return MHD_YES;
	}
	if (*upload_data_size) {
		n = *upload_data_size;
		*upload_data_size = 0;
		return request__take(rq, upload_data, n);
	}
	return request__end(rq);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
			 enum MHD_RequestTerminationCode toe)
{
	struct http_request *rq = *con_cls;

	if (!rq)
		return;
	if (rq->conn && !rq->upgrade)
		conn__mark(rq->srv, conn, CONN_ENDED);
	if (rq->pp)
		MHD_destroy_post_processor(rq->pp);
	sbuf__free(&rq->body);
	for (size_t i = 0; i < HTTP_MAX_PARTS; i++)
		sbuf__free(&rq->parts[i]);
	if (rq->slow_rep)
		free(rq->slow_rep->body);
	free(rq->slow_rep);
	if (rq->kept_free)
		rq->kept_free(rq->kept);
	free(rq);
	*con_cls = NULL;
}

/* MHD's first look at a request: its URI, before it parses the query
 * arguments into the connection's pool, where a few thousand of them
 * leave no room even for the error it would answer (it answers nothing).
 * The request's state starts here. A URI past HTTP_MAX_URI or
 * HTTP_MAX_ARGS is marked for a 414, and its query string cut where MHD
 * will read it (MHD ends the URI at the '?' and parses from the byte
 * after it, once this returns) so that none of it is parsed. */
static void *on_uri(void *cls, const char *uri, struct MHD_Connection *conn)
{
	struct http_request *rq = calloc(1, sizeof(*rq));
	char *q = strchr(uri, '?');
	size_t len = strlen(uri), nargs = 0;

	if (!rq)
		return NULL; /* on_request makes one (or closes) */
	rq->srv = cls;
	for (const char *c = q; c && *c; c++)
		nargs += *c == '&' || c == q;
	if (len > HTTP_MAX_URI || nargs > HTTP_MAX_ARGS) {
		rq->uri_refused = true;
		rq->uri_len = len;
		rq->uri_args = nargs;
		if (q)
			q[1] = '\0';
	}
	return rq;
}

/* MHD's own diagnostics (resets, timeouts) are routine for a public
 * endpoint: debug level. The one log callback of every MHD daemon. */
static void mhd_log(void *cls, const char *fmt, va_list ap)
{
	const struct http_server *s = cls;
	char buf[512];
	size_t n;

	if (!start_err && !log_enabled(LOG_DEBUG))
		return;
	vsnprintf(buf, sizeof(buf), fmt, ap);
	n = strlen(buf);
	while (n && buf[n - 1] == '\n')
		buf[--n] = '\0';
	if (start_err)
		snprintf(start_err, start_err_len, "%s", buf);
	pr_debug("%s: http: %s", s->o.service, buf);
}

/* ---- the server ---- */

static int http_server__tls(struct http_server *s, const struct tls_server_opts *tls, char *err,
			    size_t errlen);

int http_server__add_route(struct http_server *s, const struct http_route *r)
{
	struct http_route copy = *r;
	size_t i;

	if (!r->fn || (r->path && r->path[0] != '/'))
		return -EINVAL;
	if (!copy.methods)
		copy.methods = HTTP_READ;
	pthread_mutex_lock(&s->lock);
	if (r->slow)
		slow_start(s);
	if (!r->path) {
		s->fallback = copy;
		s->has_fallback = true;
		goto out;
	}
	for (i = 0; i < s->nroutes; i++)
		if (!strcmp(s->routes[i].path, r->path))
			break;
	if (i == s->nroutes) {
		xgrow((void **)&s->routes, &s->caproutes, s->nroutes + 1, sizeof(*s->routes));
		copy.path = xstrdup(r->path);
		s->nroutes++;
	} else {
		copy.path = s->routes[i].path; /* requests in flight may hold it */
	}
	s->routes[i] = copy;
out:
	pthread_mutex_unlock(&s->lock);
	return 0;
}

/* The connections a server can hold with the process's open files: the
 * soft limit raised toward the hard one for want connections (and room
 * for the rest of the process), else want cut to what fits. */
static unsigned fit_open_files(const char *service, unsigned want)
{
	struct rlimit rl;
	rlim_t need = (rlim_t)want + HTTP_SPARE_FILES;

	if (getrlimit(RLIMIT_NOFILE, &rl))
		return want;
	if (rl.rlim_cur < need && rl.rlim_cur != RLIM_INFINITY) {
		rlim_t old = rl.rlim_cur;

		rl.rlim_cur =
			rl.rlim_max == RLIM_INFINITY || rl.rlim_max > need ? need : rl.rlim_max;
		if (setrlimit(RLIMIT_NOFILE, &rl))
			rl.rlim_cur = old;
	}
	if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < need) {
		unsigned fit = rl.rlim_cur > 2 * HTTP_SPARE_FILES
				       ? (unsigned)(rl.rlim_cur - HTTP_SPARE_FILES)
				       : (unsigned)rl.rlim_cur / 2;

		pr_info("%s: %u connections at most, as the open-file limit is %llu -- raise it "
			"(ulimit -n) for more",
			service, fit, (unsigned long long)rl.rlim_cur);
		return fit;
	}
	return want;
}

struct http_server *http_server__start(const struct http_opts *o)
{
	struct http_server *s = xcalloc(1, sizeof(*s));
	unsigned flags = MHD_USE_AUTO_INTERNAL_THREAD | MHD_ALLOW_UPGRADE | MHD_USE_ERROR_LOG |
			 MHD_ALLOW_SUSPEND_RESUME;
	const struct tls_server_opts *tls = o->tls;
	struct MHD_OptionItem more[8];
	size_t nmore = 0;
	pthread_condattr_t ca;
	char err[1024];
	int fd, e;

	pthread_mutex_init(&s->lock, NULL);
	pthread_mutex_init(&s->conns_lock, NULL);
	pthread_mutex_init(&s->slow_lock, NULL);
	pthread_cond_init(&s->slow_cond, NULL);
	s->peek = xmalloc(HTTP_CONNECTION_MEMORY);
	s->tls = tls_server__on(o->tls);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&s->sweep_cond, &ca);
	pthread_condattr_destroy(&ca);
	s->o = *o;
	if (!s->o.service)
		s->o.service = "the HTTP server";
	if (!s->o.max_connections)
		s->o.max_connections = HTTP_DEFAULT_MAX_CONNECTIONS;
	s->o.max_connections = fit_open_files(s->o.service, s->o.max_connections);
	if (!s->o.timeout_s)
		s->o.timeout_s = HTTP_DEFAULT_TIMEOUT_S;
	if (!s->o.head_timeout_s)
		s->o.head_timeout_s = HTTP_DEFAULT_HEAD_TIMEOUT_S;
	if (!s->o.max_body)
		s->o.max_body = HTTP_DEFAULT_MAX_BODY;
	if (o->threads > 1)
		more[nmore++] =
			(struct MHD_OptionItem){MHD_OPTION_THREAD_POOL_SIZE, o->threads, NULL};
	/* One address holding every connection (a slowloris, a flood of idle
	 * sockets) must not shut everyone else out. */
	if (o->max_per_ip)
		more[nmore++] = (struct MHD_OptionItem){MHD_OPTION_PER_IP_CONNECTION_LIMIT,
							o->max_per_ip, NULL};
	if (tls_server__on(tls)) {
		e = -http_server__tls(s, tls, err, sizeof(err));
		if (e) {
			pr_err("can't serve %s over HTTPS: %s", s->o.service, err);
			goto fail;
		}
		flags |= MHD_USE_TLS;
		more[nmore++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_CERT, 0, s->pem.cert};
		more[nmore++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_KEY, 0, s->pem.key};
		more[nmore++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_PRIORITIES, 0,
							(void *)HTTP_TLS_PRIORITIES};
		if (s->mtls)
			more[nmore++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_TRUST, 0,
								s->pem.client_ca};
	}
	more[nmore] = (struct MHD_OptionItem){MHD_OPTION_END, 0, NULL};
	for (const struct http_route *r = o->routes; r && r->fn; r++) {
		e = -http_server__add_route(s, r);
		if (e) {
			pr_err("can't start %s: a route of path '%s' is invalid", s->o.service,
			       r->path ? r->path : "(fallback)");
			goto fail;
		}
	}
	s->o.routes = NULL; /* the caller's, maybe on its stack */
	fd = net_listen(o->listen, s->o.service, o->busy_hint, &s->port);
	if (fd < 0) {
		e = -fd;
		goto fail;
	}
	err[0] = '\0';
	start_err = err;
	start_err_len = sizeof(err);
	errno = 0;
	s->daemon = MHD_start_daemon(
		flags, 0, NULL, NULL, on_request, s, MHD_OPTION_LISTEN_SOCKET, fd,
		MHD_OPTION_CONNECTION_LIMIT, s->o.max_connections, MHD_OPTION_CONNECTION_TIMEOUT,
		s->o.timeout_s, MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)HTTP_CONNECTION_MEMORY,
		MHD_OPTION_NOTIFY_COMPLETED, on_completed, s, MHD_OPTION_NOTIFY_CONNECTION,
		on_connection, s, MHD_OPTION_URI_LOG_CALLBACK, on_uri, s,
		MHD_OPTION_EXTERNAL_LOGGER, mhd_log, s, MHD_OPTION_ARRAY, more, MHD_OPTION_END);
	start_err = NULL;
	if (!s->daemon) {
		e = errno ? errno : EIO;
		if (err[0])
			pr_err("can't start %s on %s: libmicrohttpd: %s%s", s->o.service, o->listen,
			       err,
			       tls_server__on(tls) ? " -- check --tls-cert and --tls-key" : "");
		else
			pr_err("can't start %s on %s: %s", s->o.service, o->listen, strerror(e));
		close(fd);
		goto fail;
	}
	e = pthread_create(&s->sweeper, NULL, sweeper, s);
	if (e) {
		pr_err("can't start %s: no thread for its connections: %s", s->o.service,
		       strerror(e));
		goto fail;
	}
	s->sweeping = true;
	return s;
fail:
	http_server__stop(s);
	errno = e;
	return NULL;
}

/* Reads and checks tls's files into s->pem for MHD, and makes ready to
 * verify clients with mutual TLS. 0, or a negative errno with why in err. */
static int http_server__tls(struct http_server *s, const struct tls_server_opts *tls, char *err,
			    size_t errlen)
{
	int e;

	if (MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES)
		return errmsg(err, errlen, -ENOTSUP,
			      "this libmicrohttpd is built without TLS -- install one built with "
			      "GnuTLS (Debian's libmicrohttpd12 is)");
	e = tls_server__load(tls, &s->pem, err, errlen);
	if (e)
		return e;
	if (!tls->client_ca)
		return 0;
	s->mtls = true;
	return 0;
}

int http_server__port(const struct http_server *s)
{
	return s->port;
}

void http_server__stop(struct http_server *s)
{
	if (!s)
		return;
	if (s->sweeping) {
		pthread_mutex_lock(&s->conns_lock);
		s->stopping = true;
		pthread_cond_signal(&s->sweep_cond);
		pthread_mutex_unlock(&s->conns_lock);
		pthread_join(s->sweeper, NULL);
	}
	/* Before MHD: every connection it suspended is resumed first. */
	slow_stop(s);
	if (s->daemon)
		MHD_stop_daemon(s->daemon);
	for (size_t i = 0; i < s->nroutes; i++)
		free((char *)s->routes[i].path);
	free(s->routes);
	tls_server_pem__free(&s->pem);
	free(s->slow);
	free(s->peek);
	pthread_mutex_destroy(&s->lock);
	pthread_mutex_destroy(&s->conns_lock);
	pthread_mutex_destroy(&s->slow_lock);
	pthread_cond_destroy(&s->slow_cond);
	pthread_cond_destroy(&s->sweep_cond);
	free(s);
}
