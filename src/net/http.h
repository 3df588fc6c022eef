/* http.h: the HTTP server every Sonde service answers on: libmicrohttpd
 * behind a router that knows nothing of what it serves. Routes are exact
 * paths (plus at most one fallback for the paths no route has), each with
 * its methods; a request offers its method, path, query arguments, headers
 * and body, read up to the route's limit (413 before reading when
 * Content-Length says too much; past the limit a chunked body is counted
 * and dropped, never buffered), of an accepted media type (415), and for a
 * multipart/form-data body its named parts. A route answers a status, a
 * content type, a body, extra headers, or a switch of protocol (the
 * WebSocket server's 101, which hands it the socket). The router's own
 * answers (404, 405, 413, 415, a failed route's 500) are text, or
 * {"error": "..."} for a server that answers JSON. A route may check a
 * request's head (its token) before any of its body is read, and refuse
 * it there. A URI of too many query arguments is a 414. It can run a pool
 * of threads, and slow routes (queries) on threads of their own, so that
 * they never hold up the others; it reports every answer to an observer
 * (the server's request statistics).
 *
 * It serves plain HTTP, or HTTPS with a certificate and key (net/tls.h),
 * and with mutual TLS a request whose client presented no certificate, or
 * one the client CA did not sign, is refused with a 403 before any route
 * sees it (libmicrohttpd asks GnuTLS for the client's certificate without
 * requiring one: the check is ours, on every request). Plain HTTP sent to
 * an HTTPS port fails the handshake and gets no answer.
 *
 * Used by the agent's metrics endpoint (metrics/http.c), the WebSocket
 * server (net/ws_server.c) and `sonde server` (server/server.c). */
#ifndef SONDE_NET_HTTP_H
#define SONDE_NET_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define HTTP_CONTENT_JSON "application/json"
#define HTTP_CONTENT_TEXT "text/plain; charset=utf-8"

/* A request's URI (path and query string) of more than HTTP_MAX_URI bytes
 * or more than HTTP_MAX_ARGS query arguments is refused with a 414 before
 * libmicrohttpd parses its arguments (into a per-connection pool that a
 * few thousand of them would exhaust, leaving the request unanswered). */
#define HTTP_MAX_URI (32 * 1024)
#define HTTP_MAX_ARGS 256

/* Methods, as a route's bitmask. HTTP_OTHER is every method the route's
 * other bits don't name: the route runs at once, its body unread. */
enum {
	HTTP_GET = 1,
	HTTP_HEAD = 2,
	HTTP_POST = 4,
	HTTP_OTHER = 8,
};
#define HTTP_READ (HTTP_GET | HTTP_HEAD)

struct http_server;
struct http_request;
struct tls_server_opts;
/* A connection switched to another protocol (see http_reply.upgrade). */
struct http_upgrade;

/* Takes over a connection after the 101: fd is its socket, non-blocking
 * state as the server left it, and extra[0..nextra) the bytes the client
 * sent past the request (valid during the call only). Runs on the
 * server's thread. The socket is closed by http_upgrade__close(up), never
 * by close(). */
typedef void (*http_upgrade_fn)(void *ctx, int fd, const char *extra, size_t nextra,
				struct http_upgrade *up);
/* Closes an upgraded connection; any thread. */
void http_upgrade__close(struct http_upgrade *up);

#define HTTP_REPLY_MAX_HEADERS 4

/* What a route answers; the router zeroes it before the call. */
struct http_reply {
	int status;		  /* 0 means 200 */
	const char *content_type; /* static string; NULL means HTTP_CONTENT_TEXT */
	char *body;		  /* malloc()ed; the server takes it (NULL: empty) */
	const void *static_body;  /* or bytes that outlive the server */
	size_t len;		  /* bytes of body */
	/* Extra headers (http_reply__header). */
	struct {
		const char *name; /* static string */
		char value[192];
	} headers[HTTP_REPLY_MAX_HEADERS];
	size_t nheaders;
	/* Set with status 101 (and its headers): the connection goes to
	 * upgrade(upgrade_ctx, ...) once the answer is sent. */
	http_upgrade_fn upgrade;
	void *upgrade_ctx;
};

/* Adds a header (name static); 0, or -ENOSPC past HTTP_REPLY_MAX_HEADERS
 * or a value of 192 bytes and more. */
int http_reply__header(struct http_reply *rep, const char *name, const char *value);
/* Sets status and a message body: msg and a newline as text, or with json
 * {"error": msg} (repaired to valid UTF-8). 0 or -ENOMEM. */
int http_reply__message(struct http_reply *rep, int status, bool json, const char *msg);

/* What a route returns, and its admit function, and each step a route
 * takes on its way (a parse of its arguments, a check, a read): one status.
 *   0              go on: the step went well (a route that returns 0 has
 *                  its answer in rep);
 *   HTTP_ANSWERED  the request is answered in rep already (a 400 naming a
 *                  bad argument, a refused token, or a step that made the
 *                  whole answer): the caller passes it on at once, and the
 *                  router sends rep as for 0;
 *   < 0            a negative errno: the request failed (a 500).
 * So a route reads `err = step(...); if (err) return err;` for each step. */
#define HTTP_ANSWERED 1

/* A route: fills rep and returns 0 or HTTP_ANSWERED, or returns a negative
 * errno for a 500 (rep->body, if set, is freed). Runs on one of the
 * server's threads, so it must not block for long (unless the route is
 * slow: see there); requests may run concurrently with a pool. */
typedef int (*http_route_fn)(void *ctx, const struct http_request *req, struct http_reply *rep);
/* A route's check of a request's head (its token), before any of its body
 * is read: 0 to go on, or HTTP_ANSWERED with a refusal in rep (its status
 * set) that is answered at once -- the body left unread, the connection
 * closed -- so that a refused request costs nothing beyond its head (a
 * negative errno: a 500, the same). What it learns for the route it keeps
 * with http_request__keep(). */
typedef int (*http_admit_fn)(void *ctx, struct http_request *req, struct http_reply *rep);

/* A part of a multipart/form-data body that a route keeps. */
struct http_part {
	const char *name;
	uint64_t max; /* bytes; 0: the route's body limit. Past it: 413 */
};

/* Requests of slow routes that may wait for a slow thread at once. */
#define HTTP_SLOW_QUEUE 1024

struct http_route {
	const char *path; /* exact ("/metrics"; the query string is not part
			   * of it); NULL: the fallback, for the paths no route
			   * has (other methods there are a 404) */
	bool prefix;	  /* path also takes every path under it ("/tsp/api":
			   * "/tsp/api/traces"); an exact route wins, then the
			   * longest prefix */
	unsigned methods; /* HTTP_GET | ...; 0 means HTTP_READ */
	http_route_fn fn;
	void *ctx;
	/* POST bodies (read only when methods has HTTP_POST). */
	uint64_t max_body;	       /* 0: the server's */
	const char *const *body_types; /* media types accepted, NULL-ended;
					 * NULL: any. No Content-Type is fine */
	const char *body_types_hint;   /* the 415's "Content-Type 'x' is not ..." */
	const struct http_part *parts; /* kept of a multipart body, {NULL}-ended;
					 * NULL: multipart bodies are not taken apart */
	http_admit_fn admit;	       /* NULL: every request goes on */
	/* Runs on the server's slow threads (http_opts.slow_threads), in the
	 * order requests came, never on a connection's thread: a route that
	 * may take long (a query) never holds up the others (a health check,
	 * an ingest), whose connections those threads serve. Past
	 * HTTP_SLOW_QUEUE requests waiting, a 503 with Retry-After. */
	bool slow;
};

/* Observes every answer: the request as the route saw it, and the status
 * sent. Runs on the thread that answered. */
typedef void (*http_answered_fn)(void *ctx, const struct http_request *req, int status);

struct http_opts {
	const char *listen;	    /* "HOST:PORT" (net/listen.h) */
	const char *service;	    /* in messages: "the metrics endpoint" */
	const char *busy_hint;	    /* when the port is taken (NULL: generic) */
	const char *not_found_hint; /* ends a 404's message (NULL: none) */
	unsigned threads;	    /* 0 or 1: one thread; more: a pool */
	unsigned max_connections;   /* 0: 128; fewer when the open-file limit
				     * can't be raised for them */
	unsigned max_per_ip;	    /* connections one address may hold at
				     * once, past which it is closed; 0: any */
	unsigned timeout_s;	    /* an idle connection's; 0: 30 */
	unsigned head_timeout_s;    /* a request head's, from the connection's
				     * start, however it trickles (1 s while
				     * 3/4 of the connections are held); 0: 10.
				     * A head all in but unread (the thread
				     * busy) is not late */
	uint64_t max_body;	    /* a POST body's; 0: 16 MiB */
	unsigned slow_threads;	    /* for the slow routes; 0: threads' count */
	bool json_errors;	    /* the router's answers as {"error": ...} */
	http_answered_fn answered;  /* NULL: none */
	void *answered_ctx;
	/* Routes served from the start, {.fn = NULL}-ended (NULL: none). */
	const struct http_route *routes;
	/* HTTPS with these files (read and checked at start), mutual TLS
	 * when it has a client CA; NULL: plain HTTP. */
	const struct tls_server_opts *tls;
};

/* Starts serving (routes may be added before or after). NULL with errno
 * set after logging why (the address, a taken port, a TLS file: missing,
 * not PEM, a key not the certificate's; a libmicrohttpd without TLS). */
struct http_server *http_server__start(const struct http_opts *o);
/* Adds a route, or replaces the one of the same path (or the fallback);
 * safe while serving. r's strings and arrays are borrowed and must outlive
 * the server, but for path. 0 or -EINVAL (a path not absolute, no fn). */
int http_server__add_route(struct http_server *s, const struct http_route *r);
/* The port bound. */
int http_server__port(const struct http_server *s);
/* Connections closed so far because their request head was late. */
uint64_t http_server__head_timeouts(struct http_server *s);
/* Requests refused with a 414 for a URI of more than HTTP_MAX_URI bytes or
 * HTTP_MAX_ARGS query arguments. */
uint64_t http_server__uri_refusals(struct http_server *s);
/* Requests of slow routes waiting for a slow thread now, and those
 * refused (503) because HTTP_SLOW_QUEUE were waiting. */
void http_server__slow_queue(struct http_server *s, uint64_t *waiting, uint64_t *refused);
/* Stops serving, waits for requests in flight, frees s; NULL is a no-op. */
void http_server__stop(struct http_server *s);

/* A request made in the process rather than received: a route function
 * called with it answers as it would over HTTP (the Trace Server Protocol
 * asks the server's query routes this way, src/server/tsp.h). Its query
 * arguments are those of query (a query string without the '?',
 * percent-encoded, '+' a space; NULL: none); it has no headers, no body,
 * and no route context. NULL on ENOMEM. */
struct http_request *http_request__new_local(const char *method, const char *path,
					     const char *query);
/* Frees a request of http_request__new_local(); NULL is a no-op. */
void http_request__free_local(struct http_request *req);

/* Request accessors, valid during the route call (and the observer's). */
const char *http_request__method(const struct http_request *req);
const char *http_request__path(const struct http_request *req);
/* The value of query argument key (?key=value), or NULL (as for ?key
 * without a value). */
const char *http_request__query(const struct http_request *req, const char *key);
/* Calls fn for each query argument, in order (value "" when it has none). */
void http_request__each_query(const struct http_request *req,
			      void (*fn)(void *ctx, const char *key, const char *value), void *ctx);
/* A request header (case-insensitive name), or NULL. */
const char *http_request__header(const struct http_request *req, const char *name);
/* The client's address ("127.0.0.1", "::1"; "" for a local request),
 * valid until the next call on the same thread. */
const char *http_request__client(const struct http_request *req);
/* The body read (never NULL: "" when there is none; NUL-terminated). */
const char *http_request__body(const struct http_request *req, size_t *len);
/* Whether the body was multipart/form-data taken apart into parts. */
bool http_request__multipart(const struct http_request *req);
/* A kept part of a multipart body (NUL-terminated), or NULL when the body
 * had none of that name. */
const char *http_request__part(const struct http_request *req, const char *name, size_t *len);
/* The ctx of the route that answered, NULL when none did (a 404). */
void *http_request__route_ctx(const struct http_request *req);
/* Keeps p with the request until it ends, when free_fn(p) is called
 * (free_fn NULL: nothing to free); what an admit function learned. */
void http_request__keep(struct http_request *req, void *p, void (*free_fn)(void *));
/* What http_request__keep() kept, or NULL. */
void *http_request__kept(const struct http_request *req);
/* When the request came in (common/clock.h mono_ns). */
uint64_t http_request__start_ns(const struct http_request *req);
/* Bytes of body received, those dropped past the limit included. */
uint64_t http_request__body_bytes(const struct http_request *req);

#endif
