/* http.h: the agent's HTTP endpoint (default 127.0.0.1:9091), on
 * libmicrohttpd with one internal polling thread: GET /metrics (Prometheus
 * text 0.0.4), /json (the snapshot the WebSocket pushes), /healthz, and any
 * route the agent adds (e.g. /alerts). Other paths answer 404; methods other
 * than GET and HEAD answer 405. Used by `sonde agent` and the metrics test
 * harness. */
#ifndef SONDE_METRICS_HTTP_H
#define SONDE_METRICS_HTTP_H

#include <stddef.h>
#include <sys/socket.h>

#include "common/prom.h"

struct gpu_metrics;
struct http_server;
struct http_request;

#define HTTP_CONTENT_JSON "application/json"
#define HTTP_CONTENT_TEXT "text/plain; charset=utf-8"

/* What a route answers. */
struct http_reply {
	int status;		  /* 0 means 200 */
	const char *content_type; /* static string; NULL means HTTP_CONTENT_TEXT */
	char *body;		  /* malloc()ed; the server takes it (NULL: empty) */
	size_t len;		  /* bytes of body */
};

/* A route: fills rep and returns 0, or returns a negative errno for a 500
 * (rep->body, if set, is freed). Runs on the server's thread, so it must
 * not block for long. */
typedef int (*http_route_fn)(void *ctx, const struct http_request *req, struct http_reply *rep);

/* Request accessors, valid during the route call. */
const char *http_request__path(const struct http_request *req);
/* The value of query parameter key (?key=value), or NULL. */
const char *http_request__query(const struct http_request *req, const char *key);

/* Starts serving on addr ("HOST:PORT", "[V6]:PORT", ":PORT" for 127.0.0.1;
 * port 0 picks a free one) with /metrics, /json and /healthz over m (which
 * must outlive the server; NULL serves only added routes). NULL with errno
 * set on failure, after logging why. */
struct http_server *metrics_http__start(const char *addr, struct gpu_metrics *m);
/* Adds (or replaces) the route for an exact path; safe while serving.
 * 0, -EINVAL (path not absolute) or -ENOMEM. */
int metrics_http__add_route(struct http_server *s, const char *path, http_route_fn fn, void *ctx);
/* Adds fn's families to every /metrics page -- for metrics kept outside
 * gpu_metrics (the alert engine's, the WebSocket server's). */
int metrics_http__add_exposition(struct http_server *s, prom_collect_fn fn, void *ctx);
/* The port actually bound. */
int metrics_http__port(const struct http_server *s);
/* Stops serving and frees s; NULL is a no-op. */
void metrics_http__stop(struct http_server *s);

/* Resolves "HOST:PORT" / "[V6]:PORT" / ":PORT" (meaning 127.0.0.1) into ss;
 * 0 or -EINVAL, with a message naming addr in err. Shared with ws.c. */
int metrics_parse_addr(const char *addr, struct sockaddr_storage *ss, socklen_t *sslen, char *err,
		       size_t errlen);
/* A listening TCP socket (close-on-exec, SO_REUSEADDR) on addr, or a
 * negative errno after logging why; *port gets the port bound. what names
 * the service in the message ("metrics", "WebSocket"). */
int metrics_listen(const char *addr, const char *what, int *port);

#endif
