/* http.c: the agent's HTTP endpoint of http.h on libmicrohttpd -- a route
 * table of exact paths, the built-in /metrics, /json and /healthz routes,
 * and the listening-socket helpers ws.c shares. We open and bind the socket
 * ourselves so that a taken port fails with errno and a useful message
 * rather than a bare NULL from MHD_start_daemon. */
#include "metrics/http.h"
#include "common/prom.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "common/xalloc.h"
#include "metrics/gpu_metrics.h"

/* Enough for Prometheus, a few dashboards and curl; each idle connection is
 * closed after the timeout so slow clients cannot hold them all. */
#define HTTP_MAX_CONNECTIONS 128
#define HTTP_TIMEOUT_S 30

struct route {
	char *path;
	http_route_fn fn;
	void *ctx;
};

struct exposition {
	prom_collect_fn fn;
	void *ctx;
};

struct http_server {
	struct MHD_Daemon *daemon;
	struct gpu_metrics *m;
	int port;
	pthread_mutex_t lock; /* guards routes and expos */
	struct route *routes;
	size_t nroutes, caproutes;
	struct exposition *expos;
	size_t nexpos, capexpos;
};

struct http_request {
	struct MHD_Connection *conn;
	const char *path;
};

const char *http_request__path(const struct http_request *req)
{
	return req->path;
}

const char *http_request__query(const struct http_request *req, const char *key)
{
	return MHD_lookup_connection_value(req->conn, MHD_GET_ARGUMENT_KIND, key);
}

int metrics_parse_addr(const char *addr, struct sockaddr_storage *ss, socklen_t *sslen, char *err,
		       size_t errlen)
{
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV};
	struct addrinfo *res = NULL;
	char host[256], *end;
	const char *colon, *port;
	size_t hostlen;
	long portnum;
	int rc;

	if (!addr || !*addr)
		goto bad;
	if (addr[0] == '[') {
		const char *close = strchr(addr, ']');

		if (!close || close[1] != ':')
			goto bad;
		hostlen = (size_t)(close - addr - 1);
		if (hostlen >= sizeof(host))
			goto bad;
		memcpy(host, addr + 1, hostlen);
		port = close + 2;
	} else {
		colon = strrchr(addr, ':');
		if (!colon)
			goto bad;
		hostlen = (size_t)(colon - addr);
		if (hostlen >= sizeof(host))
			goto bad;
		memcpy(host, addr, hostlen);
		port = colon + 1;
	}
	host[hostlen] = '\0';
	errno = 0;
	portnum = strtol(port, &end, 10);
	if (!*port || *end || errno || portnum < 0 || portnum > 65535)
		goto bad;
	rc = getaddrinfo(hostlen ? host : "127.0.0.1", port, &hints, &res);
	if (rc || !res || res->ai_addrlen > sizeof(*ss)) {
		snprintf(err, errlen, "can't resolve '%s' in address '%s': %s", host, addr,
			 rc ? gai_strerror(rc) : "no address");
		if (res)
			freeaddrinfo(res);
		return -EINVAL;
	}
	memcpy(ss, res->ai_addr, res->ai_addrlen);
	*sslen = res->ai_addrlen;
	freeaddrinfo(res);
	return 0;
bad:
	snprintf(err, errlen, "invalid address '%s': expected HOST:PORT, [IPV6]:PORT or :PORT",
		 addr ? addr : "");
	return -EINVAL;
}

int metrics_listen(const char *addr, const char *what, int *port)
{
	struct sockaddr_storage ss;
	socklen_t sslen;
	char err[512];
	int fd, one = 1, e;

	if (metrics_parse_addr(addr, &ss, &sslen, err, sizeof(err))) {
		pr_err("can't serve %s: %s", what, err);
		return -EINVAL;
	}
	fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		e = errno;
		pr_err("can't create the %s socket: %s", what, strerror(e));
		return -e;
	}
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *)&ss, sslen) || listen(fd, 64)) {
		e = errno;
		pr_err("can't listen for %s on %s: %s -- %s", what, addr, strerror(e),
		       e == EADDRINUSE ? "is another sonde agent running? choose another address"
				       : "check the address");
		close(fd);
		return -e;
	}
	sslen = sizeof(ss);
	getsockname(fd, (struct sockaddr *)&ss, &sslen);
	*port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
					       : ((struct sockaddr_in *)&ss)->sin_port);
	return fd;
}

/* MHD's own diagnostics (resets, timeouts) are routine for a public
 * endpoint: debug level. */
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
	pr_debug("http: %s", buf);
}

static enum MHD_Result reply(struct MHD_Connection *conn, int status, const char *type, char *body,
			     size_t len, bool head_allow)
{
	struct MHD_Response *r;
	enum MHD_Result ret;

	r = MHD_create_response_from_buffer(body ? len : 0, body ? body : (void *)"",
					    body ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
	if (!r) {
		free(body);
		return MHD_NO;
	}
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type ? type : HTTP_CONTENT_TEXT);
	if (head_allow)
		MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
	ret = MHD_queue_response(conn, (unsigned)status, r);
	MHD_destroy_response(r);
	return ret;
}

static char *text(const char *s, size_t *len)
{
	*len = strlen(s);
	return xstrdup(s);
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *conn, const char *url,
			      const char *method, const char *version, const char *upload_data,
			      size_t *upload_data_size, void **con_cls)
{
	struct http_server *s = cls;
	struct http_request req = {conn, url};
	struct http_reply rep = {0};
	http_route_fn fn = NULL;
	void *ctx = NULL;
	size_t len;
	char *body;
	int err;

	if (strcmp(method, MHD_HTTP_METHOD_GET) && strcmp(method, MHD_HTTP_METHOD_HEAD)) {
		body = text("method not allowed: only GET and HEAD\n", &len);
		return reply(conn, MHD_HTTP_METHOD_NOT_ALLOWED, NULL, body, len, true);
	}
	pthread_mutex_lock(&s->lock);
	for (size_t i = 0; i < s->nroutes; i++)
		if (!strcmp(s->routes[i].path, url)) {
			fn = s->routes[i].fn;
			ctx = s->routes[i].ctx;
			break;
		}
	pthread_mutex_unlock(&s->lock);
	if (!fn) {
		body = text("not found: try /metrics, /json or /healthz\n", &len);
		return reply(conn, MHD_HTTP_NOT_FOUND, NULL, body, len, false);
	}
	err = fn(ctx, &req, &rep);
	if (err) {
		free(rep.body);
		pr_warn("http: %s failed: %s", url, strerror(-err));
		body = text("internal error\n", &len);
		return reply(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, NULL, body, len, false);
	}
	return reply(conn, rep.status ? rep.status : MHD_HTTP_OK, rep.content_type, rep.body,
		     rep.len, false);
}

static int route_metrics(void *ctx, const struct http_request *req, struct http_reply *rep)
{
	struct http_server *s = ctx;
	struct prom_text t;

	if (prom_text__open(&t))
		return -ENOMEM;
	if (s->m)
		gpu_metrics__collect(s->m, &t.out);
	pthread_mutex_lock(&s->lock);
	for (size_t i = 0; i < s->nexpos; i++)
		s->expos[i].fn(s->expos[i].ctx, &t.out);
	pthread_mutex_unlock(&s->lock);
	/* A page with a family missing would read as series that ended. */
	rep->body = prom_text__close(&t, &rep->len);
	if (!rep->body)
		return -ENOMEM;
	rep->content_type = PROM_CONTENT_TYPE;
	return 0;
}

static int route_json(void *ctx, const struct http_request *req, struct http_reply *rep)
{
	struct http_server *s = ctx;

	rep->body = gpu_metrics__snapshot_text(s->m, &rep->len);
	if (!rep->body)
		return -ENOMEM;
	rep->content_type = HTTP_CONTENT_JSON;
	return 0;
}

static int route_healthz(void *ctx, const struct http_request *req, struct http_reply *rep)
{
	rep->body = text("ok\n", &rep->len);
	return 0;
}

int metrics_http__add_route(struct http_server *s, const char *path, http_route_fn fn, void *ctx)
{
	size_t i;

	if (!path || path[0] != '/' || !fn)
		return -EINVAL;
	pthread_mutex_lock(&s->lock);
	for (i = 0; i < s->nroutes; i++)
		if (!strcmp(s->routes[i].path, path))
			break;
	if (i == s->nroutes) {
		xgrow((void **)&s->routes, &s->caproutes, s->nroutes + 1, sizeof(*s->routes));
		s->routes[i].path = xstrdup(path);
		s->nroutes++;
	}
	s->routes[i].fn = fn;
	s->routes[i].ctx = ctx;
	pthread_mutex_unlock(&s->lock);
	return 0;
}

int metrics_http__add_exposition(struct http_server *s, prom_collect_fn fn, void *ctx)
{
	if (!fn)
		return -EINVAL;
	pthread_mutex_lock(&s->lock);
	xgrow((void **)&s->expos, &s->capexpos, s->nexpos + 1, sizeof(*s->expos));
	s->expos[s->nexpos++] = (struct exposition){fn, ctx};
	pthread_mutex_unlock(&s->lock);
	return 0;
}

struct http_server *metrics_http__start(const char *addr, struct gpu_metrics *m)
{
	struct http_server *s = xcalloc(1, sizeof(*s));
	int fd, e;

	pthread_mutex_init(&s->lock, NULL);
	s->m = m;
	if (m) {
		metrics_http__add_route(s, "/metrics", route_metrics, s);
		metrics_http__add_route(s, "/json", route_json, s);
	}
	metrics_http__add_route(s, "/healthz", route_healthz, s);
	fd = metrics_listen(addr, "metrics", &s->port);
	if (fd < 0) {
		e = -fd;
		goto fail;
	}
	s->daemon = MHD_start_daemon(MHD_USE_AUTO_INTERNAL_THREAD | MHD_USE_ERROR_LOG, 0, NULL,
				     NULL, handle, s, MHD_OPTION_LISTEN_SOCKET, fd,
				     MHD_OPTION_CONNECTION_LIMIT, (unsigned)HTTP_MAX_CONNECTIONS,
				     MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)HTTP_TIMEOUT_S,
				     MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL, MHD_OPTION_END);
	if (!s->daemon) {
		e = errno ? errno : EIO;
		pr_err("can't start the metrics server on %s: %s", addr, strerror(e));
		close(fd);
		goto fail;
	}
	return s;
fail:
	metrics_http__stop(s);
	errno = e;
	return NULL;
}

int metrics_http__port(const struct http_server *s)
{
	return s->port;
}

void metrics_http__stop(struct http_server *s)
{
	if (!s)
		return;
	if (s->daemon)
		MHD_stop_daemon(s->daemon);
	for (size_t i = 0; i < s->nroutes; i++)
		free(s->routes[i].path);
	free(s->routes);
	free(s->expos);
	pthread_mutex_destroy(&s->lock);
	free(s);
}
