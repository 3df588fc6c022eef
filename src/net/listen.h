/* listen.h: where a Sonde service listens -- the one address grammar of
 * every --listen, --metrics and --ws option ("HOST:PORT", "[V6]:PORT",
 * ":PORT" for 127.0.0.1; port 0 picks a free one) and the listening socket
 * behind it. We open and bind the socket ourselves so that a taken port
 * fails with errno and a message naming the service and what to do, rather
 * than a bare NULL from libmicrohttpd. Used by the HTTP server
 * (net/http.c), so by every service that answers HTTP or WebSocket. */
#ifndef SONDE_NET_LISTEN_H
#define SONDE_NET_LISTEN_H

#include <stddef.h>
#include <sys/socket.h>

/* Resolves addr into ss; 0, or -EINVAL with a message naming addr in err. */
int net_parse_addr(const char *addr, struct sockaddr_storage *ss, socklen_t *sslen, char *err,
		   size_t errlen);
/* A listening TCP socket (close-on-exec, SO_REUSEADDR) on addr and the
 * port bound in *port, or a negative errno after logging why: service
 * names what would have listened ("the metrics endpoint"), busy_hint
 * what to do when the port is taken (NULL: a generic hint). */
int net_listen(const char *addr, const char *service, const char *busy_hint, int *port);

#endif
