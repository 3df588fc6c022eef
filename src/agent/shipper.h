/* shipper.h: sends the agent's windows to a server (`sonde agent --server URL`):
 * each profile window as POST {url}/api/v1/ingest (gzip pprof) and the
 * window's metric points as POST {url}/api/v1/ingest/points (JSON) and its
 * GPU kernels and copies as POST {url}/api/v1/ingest/spans (JSON), see
 * docs/api.md. One worker thread posts them in order; the agent never waits.
 *
 * While the server is unreachable (or answers 5xx, 408 or 429) what is
 * queued is retried with backoff (1 s, doubled up to 30 s), bounded by
 * memory (max_bytes) and time (max_age_ms): past either bound the oldest
 * queued windows are dropped, counted by reason and logged. The window being
 * sent is not queued meanwhile (memory holds at most max_bytes and that
 * one): it is not dropped under the sender, and if its send fails it is
 * queued again as the oldest. A 4xx other than 408 and 429 means the server
 * refuses that window: it is dropped (counted, logged), the queue goes on.
 * Nothing is dropped silently -- not even by a shipper killed with -9,
 * whose successor says what it lost (state_path). Each window carries a
 * key, so a window sent again after a lost answer is stored once. An
 * https:// server is verified against the system's CAs or the CA of tls,
 * and with mutual TLS the shipper presents tls's client certificate
 * (net/tls.h). Thread-safe. */
#ifndef SONDE_AGENT_SHIPPER_H
#define SONDE_AGENT_SHIPPER_H

#include <stddef.h>
#include <stdint.h>

struct shipper;
struct tls_client_opts;

struct ship_opts {
	const char *url;	   /* http://HOST:PORT of the server */
	const char *node;	   /* the node label of every window */
	uint64_t max_bytes;	   /* queued bytes; 0: 64 MiB */
	uint64_t max_age_ms;	   /* oldest queued window; 0: 15 min */
	unsigned timeout_ms;	   /* per POST; 0: 10 s */
	unsigned backoff_first_ms; /* wait after a first failure; 0: 1 s */
	unsigned backoff_max_ms;   /* 0: 30 s */
	/* https:// URLs: the CA to trust, the client certificate and key
	 * (paths, copied; checked beforehand with tls_client__check); NULL:
	 * the system's CAs and no client certificate. */
	const struct tls_client_opts *tls;
	/* A server run with --auth: the token sent with every POST
	 * (Authorization: Bearer; copied); NULL: none. A 401 or 403 refuses
	 * the window like any other 4xx. */
	const char *token;
	/* A file of the shipper's own (`sonde agent --state`), locked while
	 * it runs: how far the server has acknowledged the windows, and
	 * whether the shipper stopped cleanly. A run after one that didn't
	 * (killed with -9, a crash, a power cut) logs and counts what that one
	 * profiled and never shipped. NULL: none. */
	const char *state_path;
};

/* NULL with errno set (EINVAL: not an http:// or https:// URL) after
 * logging why. */
struct shipper *shipper__new(const struct ship_opts *opts);
/* Gives the worker up to drain_ms to send what is queued, then drops the
 * rest (counted, logged) and frees. NULL is a no-op. */
void shipper__free(struct shipper *s, unsigned drain_ms);

/* Queues a profile window of type ("cpu", ...) over [from_ms, until_ms);
 * takes pprof (malloc()ed, gzip) whatever the outcome. key names the window
 * uniquely (the server stores a key once: a retry whose answer was lost
 * doesn't count twice). */
void shipper__window(struct shipper *s, const char *type, uint64_t from_ms, uint64_t until_ms,
		     const char *key, char *pprof, size_t len);
/* Queues a points body (JSON text as docs/api.md, malloc()ed; taken). */
void shipper__points(struct shipper *s, char *json, size_t len, uint64_t ts_ms);
/* Queues a GPU timeline body (JSON text for POST /api/v1/ingest/spans,
 * docs/api.md; malloc()ed, taken). */
void shipper__spans(struct shipper *s, char *json, size_t len, uint64_t ts_ms);

enum ship_drop {
	SHIP_DROP_BUFFER,
	SHIP_DROP_AGE,
	SHIP_DROP_REJECTED,
	SHIP_DROP_SHUTDOWN,
	SHIP_DROP_MAX
};

struct ship_stats {
	uint64_t sent, sent_bytes; /* requests acknowledged (2xx) */
	uint64_t attempts_failed;  /* requests that failed and will be retried */
	uint64_t dropped[SHIP_DROP_MAX];
	uint64_t queued, queued_bytes; /* waiting now (not the one being sent) */
	uint64_t last_success_ms;      /* wall clock, 0: never */
	/* What the previous run of state_path profiled and never shipped
	 * (it did not stop cleanly): ms from its last window acknowledged to
	 * its last sign of life (written every second), the window it was
	 * making besides. */
	uint64_t lost_ms;
};
void shipper__stats(struct shipper *s, struct ship_stats *out);
/* The stats as Prometheus families (sonde_agent_ship_*), a prom_collect_fn;
 * ctx is the shipper. */
struct prom_out;
void shipper__collect(void *ctx, struct prom_out *o);

#endif
