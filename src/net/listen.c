/* listen.c: the address grammar and listening sockets of listen.h. */
#include "net/listen.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"

/* Connections the kernel queues before the server accepts them: a burst of
 * clients (agents reconnecting after an outage) waits here. */
#define NET_BACKLOG 1024

/* Splits addr into host (NUL-terminated, "" for ":PORT") and the port
 * text; false when it has neither form. */
static bool split_addr(const char *addr, char *host, size_t hostcap, const char **port)
{
	const char *end;
	size_t hostlen;

	if (addr[0] == '[') {
		end = strchr(addr, ']');
		if (!end || end[1] != ':')
			return false;
		hostlen = (size_t)(end - addr - 1);
		addr++;
		*port = end + 2;
	} else {
		end = strrchr(addr, ':');
		if (!end)
			return false;
		hostlen = (size_t)(end - addr);
		*port = end + 1;
	}
	if (hostlen >= hostcap)
		return false;
	memcpy(host, addr, hostlen);
	host[hostlen] = '\0';
	return true;
}

int net_parse_addr(const char *addr, struct sockaddr_storage *ss, socklen_t *sslen, char *err,
		   size_t errlen)
{
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV};
	struct addrinfo *res = NULL;
	char host[256], *end;
	const char *port;
	long portnum;
	int rc;

	if (!addr || !*addr || !split_addr(addr, host, sizeof(host), &port))
		goto bad;
	errno = 0;
	portnum = strtol(port, &end, 10);
	if (!*port || *end || errno || portnum < 0 || portnum > 65535)
		goto bad;
	rc = getaddrinfo(*host ? host : "127.0.0.1", port, &hints, &res);
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

int net_listen(const char *addr, const char *service, const char *busy_hint, int *port)
{
	struct sockaddr_storage ss;
	socklen_t sslen;
	char err[512];
	int fd, one = 1, e;

	if (net_parse_addr(addr, &ss, &sslen, err, sizeof(err))) {
		pr_err("can't serve %s: %s", service, err);
		return -EINVAL;
	}
	fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		e = errno;
		pr_err("can't create a socket for %s: %s", service, strerror(e));
		return -e;
	}
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *)&ss, sslen) || listen(fd, NET_BACKLOG)) {
		e = errno;
		pr_err("can't listen for %s on %s: %s -- %s", service, addr, strerror(e),
		       e != EADDRINUSE ? "check the address"
		       : busy_hint     ? busy_hint
				   : "is another program listening there? choose another address");
		close(fd);
		return -e;
	}
	sslen = sizeof(ss);
	getsockname(fd, (struct sockaddr *)&ss, &sslen);
	*port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
					       : ((struct sockaddr_in *)&ss)->sin_port);
	return fd;
}
