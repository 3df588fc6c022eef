/* ws_server.h: a WebSocket server that pushes one message to every client
 * at a fixed interval -- the agent's stream (default 127.0.0.1:9092; the
 * agent passes gpu_metrics__snapshot_text), read by `sonde watch`
 * (net/ws_client.h) and any WebSocket client. Every client that completes
 * the RFC 6455 handshake (on any path) gets a message at once and then one
 * per interval, as a text message holding what the snapshot function
 * returns. The handshake is an HTTP route of net/http.h, which hands us
 * the socket after the 101; the frames are wslay's.
 *
 * Slow and dead clients: sockets are non-blocking and served by one poll()
 * thread, so no client can delay another or the caller. A client holds at
 * most max_queued frames (default 2) not yet taken by its socket; at a tick
 * where it is full, it skips that snapshot (it gets the next one it has room
 * for, never a stale backlog). A client whose socket has taken no byte for
 * stall_ms (default 30 s) while data waits is disconnected. Client messages
 * are read and ignored (at most 64 KiB each); pings are answered with pongs
 * and a close is answered and the connection closed.
 *
 * One client can't take every slot: an address holds at most
 * max_per_addr of the max_clients (a quarter by default) -- past it, or
 * past max_clients, a handshake is answered 503 -- and at most 8 more
 * connections not upgraded yet (the HTTP server closes the rest at once).
 * There is no token: the stream serves what the agent's metrics endpoint
 * serves, which takes none either. */
#ifndef SONDE_NET_WS_SERVER_H
#define SONDE_NET_WS_SERVER_H

#include <stddef.h>
#include <stdint.h>

struct ws_server;
struct prom_out;

/* Returns a malloc()ed message to push (the server frees it), or NULL to
 * skip this tick. Called on the server's thread. */
typedef char *(*ws_snapshot_fn)(void *ctx, size_t *len);

struct ws_opts {
	unsigned interval_ms;  /* 0 means 1000 */
	unsigned max_clients;  /* 0 means 64; more get HTTP 503 */
	unsigned max_per_addr; /* from one address; 0 means max_clients / 4 */
	unsigned max_queued;   /* 0 means 2 frames per client */
	unsigned stall_ms;     /* 0 means 30000 */
};

/* Serves on addr (net/listen.h; port 0 picks one). fn/ctx must outlive
 * the server. NULL with errno set on failure, after logging why. */
struct ws_server *ws_server__start(const char *addr, unsigned interval_ms, ws_snapshot_fn fn,
				   void *ctx);
struct ws_server *ws_server__start_opts(const char *addr, const struct ws_opts *opts,
					ws_snapshot_fn fn, void *ctx);
int ws_server__port(const struct ws_server *s);

struct ws_stats {
	uint64_t clients;	  /* connected now */
	uint64_t accepted;	  /* handshakes completed */
	uint64_t frames_queued;	  /* snapshots handed to a client's queue */
	uint64_t frames_skipped;  /* snapshots a full client queue skipped */
	uint64_t clients_dropped; /* disconnected for stalling */
	uint64_t refused_full;	  /* handshakes refused: max_clients held */
	uint64_t refused_addr;	  /* ...: the address held its share */
};
void ws_server__stats(struct ws_server *s, struct ws_stats *st);
/* The stats as Prometheus families (sonde_ws_*), a prom_collect_fn; s is a
 * struct ws_server. */
void ws_server__collect(void *s, struct prom_out *o);
/* Closes every client (status 1001) and stops; NULL is a no-op. */
void ws_server__stop(struct ws_server *s);

#endif
