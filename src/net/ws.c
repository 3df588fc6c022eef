/* ws.c: the WebSocket pieces both ends share (ws_internal.h): the accept
 * key of the handshake, and wslay's I/O over a non-blocking socket that
 * first serves the bytes read along with the handshake. */
#include "net/ws_internal.h"

#include <errno.h>
#include <openssl/evp.h>
#include <openssl/sha.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>

#include "common/clock.h"

#define WS_GUID "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

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

int ws_conn__set_extra(struct ws_conn *c, const char *extra, size_t n)
{
	if (!n)
		return 0;
	c->extra = malloc(n);
	if (!c->extra)
		return -ENOMEM;
	memcpy(c->extra, extra, n);
	c->nextra = n;
	c->extra_off = 0;
	return 0;
}

void ws_conn__free_extra(struct ws_conn *c)
{
	free(c->extra);
	c->extra = NULL;
	c->nextra = c->extra_off = 0;
}

static bool would_block(void)
{
	return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
}

ssize_t ws_conn_recv(wslay_event_context_ptr ctx, uint8_t *buf, size_t len, int flags, void *user)
{
	struct ws_conn *c = user;
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
	if (n < 0 && would_block()) {
		wslay_event_set_error(ctx, WSLAY_ERR_WOULDBLOCK);
		return -1;
	}
	c->eof = true;
	wslay_event_set_error(ctx, WSLAY_ERR_CALLBACK_FAILURE);
	return -1;
}

ssize_t ws_conn_send(wslay_event_context_ptr ctx, const uint8_t *data, size_t len, int flags,
		     void *user)
{
	struct ws_conn *c = user;
	ssize_t n;

	n = send(c->fd, data, len, MSG_NOSIGNAL | (flags & WSLAY_MSG_MORE ? MSG_MORE : 0));
	if (n > 0) {
		c->progress_ms = mono_ms();
		return n;
	}
	if (n < 0 && would_block())
		wslay_event_set_error(ctx, WSLAY_ERR_WOULDBLOCK);
	else
		wslay_event_set_error(ctx, WSLAY_ERR_CALLBACK_FAILURE);
	return -1;
}

int ws_conn_genmask(wslay_event_context_ptr ctx, uint8_t *buf, size_t len, void *user)
{
	if (getrandom(buf, len, 0) != (ssize_t)len) {
		wslay_event_set_error(ctx, WSLAY_ERR_CALLBACK_FAILURE);
		return -1;
	}
	return 0;
}
