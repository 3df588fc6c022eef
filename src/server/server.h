/* server.h: `sonde server` as a library -- the HTTP API of docs/api.md
 * (ingest, query, Pyroscope compatibility, alerts), the web UI, /metrics and
 * /healthz, over a store (src/store/store.h). `sonde server` runs one;
 * `sonde run` runs one in the same process as an agent, which ships to it
 * over loopback like any other agent. */
#ifndef SONDE_SERVER_SERVER_H
#define SONDE_SERVER_SERVER_H

#include <stdint.h>

struct server;
struct store;
struct tokens;
struct tls_server_opts;

struct server_opts {
	const char *listen;   /* "HOST:PORT" ("127.0.0.1:7470"); port 0 picks one */
	struct store *store;  /* borrowed; must outlive the server */
	int64_t retention_ms; /* data older than this is expired; 0: 7 days */
	unsigned threads;     /* HTTP worker threads; 0: the number of CPUs */
	/* How long one query may run (its matching and its reads): past it,
	 * a 503 that names it. 0: SERVER_DEFAULT_QUERY_TIMEOUT_MS (30 s). */
	uint64_t query_timeout_ms;
	uint64_t max_body_bytes; /* 0: 16 MiB */
	/* --auth: every request but /healthz and the UI's files needs a token
	 * of these (auth/tokens.h) with the route's role, and reads and
	 * writes its project's data alone. Borrowed. NULL: no auth. */
	struct tokens *tokens;
	/* HTTPS (and mutual TLS) on listen, its files checked beforehand
	 * (net/tls.h). Borrowed. NULL: plain HTTP. */
	const struct tls_server_opts *tls;
};

/* Starts serving (and expiring every minute). NULL with errno set after
 * logging why (address in use, ...). */
struct server *server__start(const struct server_opts *opts);
/* The port bound. */
int server__port(const struct server *s);
/* Stops serving, waits for requests in flight, frees s. NULL is a no-op. */
void server__stop(struct server *s);

#endif
