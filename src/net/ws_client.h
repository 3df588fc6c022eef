/* ws_client.h: the client end of a WebSocket, for reading a stream such as
 * the agent's (net/ws_server.h): a URL, a TCP connection with a deadline,
 * the HTTP upgrade with a checked Sec-WebSocket-Accept, then wslay frames
 * (masked, as a client's must be). The caller owns the loop: it polls
 * ws_client__fd() for ws_client__events() beside its own descriptors and
 * hands what came back to ws_client__io(), which calls on_text for each
 * text message. Used by `sonde watch` (src/cli/watch.c). */
#ifndef SONDE_NET_WS_CLIENT_H
#define SONDE_NET_WS_CLIENT_H

#include <stdbool.h>
#include <stddef.h>

struct ws_client;

/* Close codes (RFC 6455 7.4.1). */
#define WS_CLOSE_NORMAL 1000
#define WS_CLOSE_GOING_AWAY 1001

/* A ws:// URL taken apart. */
struct ws_url {
	char host[256], port[8], path[512];
};

/* Parses "ws://HOST[:PORT][/PATH]" (the scheme may be left out; HOST may
 * be "[V6]"), default_port when it has none, path "/" when none. 0, or
 * -EINVAL (-ENOTSUP for wss://) with the reason in err. */
int ws_url__parse(struct ws_url *u, const char *url, const char *default_port, char *err,
		  size_t errlen);

/* A text message, valid during the call. */
typedef void (*ws_text_fn)(void *ctx, const char *msg, size_t len);

struct ws_client_opts {
	int timeout_ms;		/* to connect, and then to complete the handshake */
	size_t max_message;	/* longer messages end the connection */
	const char *user_agent; /* the User-Agent header */
	ws_text_fn on_text;
	void *ctx;
};

/* Connects to u (url is how the user wrote it, for messages) and
 * completes the handshake. NULL with errno set and the reason in err:
 * the connection's errno (ECONNREFUSED, ETIMEDOUT...), EADDRNOTAVAIL when
 * the host doesn't resolve, EPROTO when the server doesn't switch to
 * WebSocket, EINTR on a signal, ENOMEM. */
struct ws_client *ws_client__connect(const struct ws_url *u, const char *url,
				     const struct ws_client_opts *o, char *err, size_t errlen);
/* The socket, and the poll() events the client waits for (0: none). */
int ws_client__fd(const struct ws_client *c);
short ws_client__events(const struct ws_client *c);
/* Reads and writes what revents says is ready (POLLIN also serves the
 * bytes that came with the handshake: call it once with POLLIN before the
 * first poll()). Calls on_text for each text message, none after
 * ws_client__close(). 0, or -EPIPE once the connection has ended. */
int ws_client__io(struct ws_client *c, short revents);
/* Whether there is nothing more to read or write: the end. */
bool ws_client__done(const struct ws_client *c);
/* Queues a normal close (once); the peer's answering close ends it. */
void ws_client__close(struct ws_client *c);
bool ws_client__closing(const struct ws_client *c);
/* Whether the peer's close came, and its status code (1005 when it had
 * none; 0 while none came). */
bool ws_client__close_received(const struct ws_client *c);
int ws_client__close_code(const struct ws_client *c);
/* Closes the socket and frees c; NULL is a no-op. */
void ws_client__free(struct ws_client *c);

#endif
