/* ws_internal.h: what the two ends of a WebSocket share inside src/net/ --
 * the handshake's accept key, and a connection as wslay sees it: a
 * non-blocking socket, the bytes that arrived with the handshake (fed to
 * wslay before the socket), and wslay's I/O callbacks over both. The
 * server (ws_server.c) and the client (ws_client.c) embed struct ws_conn
 * first in their own connection, so wslay's user data is both. The unit
 * test (tests/unit/test_net.c) checks the key against RFC 6455. */
#ifndef SONDE_NET_WS_INTERNAL_H
#define SONDE_NET_WS_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <wslay/wslay.h>

/* Sec-WebSocket-Accept for a Sec-WebSocket-Key: base64(SHA-1(key + GUID)),
 * 28 characters and a NUL into out (at least 29 bytes). 0 or -EINVAL. */
int ws_accept_key(const char *key, char *out, size_t outlen);

struct ws_conn {
	int fd;
	char *extra; /* malloc()ed: bytes read past the handshake, fed first */
	size_t nextra, extra_off;
	uint64_t progress_ms; /* mono_ms() of the last send that took bytes */
	bool eof;	      /* the socket ended or failed */
};

/* Keeps a copy of the bytes that came with the handshake; 0 or -ENOMEM. */
int ws_conn__set_extra(struct ws_conn *c, const char *extra, size_t n);
void ws_conn__free_extra(struct ws_conn *c);

/* wslay's recv, send and (for a client's masks) genmask callbacks; user
 * is the struct ws_conn. */
ssize_t ws_conn_recv(wslay_event_context_ptr ctx, uint8_t *buf, size_t len, int flags, void *user);
ssize_t ws_conn_send(wslay_event_context_ptr ctx, const uint8_t *data, size_t len, int flags,
		     void *user);
int ws_conn_genmask(wslay_event_context_ptr ctx, uint8_t *buf, size_t len, void *user);

#endif
