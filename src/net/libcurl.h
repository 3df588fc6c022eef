/* libcurl.h: libcurl's global initialisation, once per process, for every
 * client that makes HTTP requests with it -- the agent's shipper
 * (agent/shipper.c), the alert sinks (alerts/sinks.c), the coordinator's
 * fan-out (coord/) and the ClickHouse store (store/clickhouse.c).
 * curl_global_init() is not thread-safe and must run before any other
 * libcurl call: each of them calls net_init_curl() before its first. */
#ifndef SONDE_NET_LIBCURL_H
#define SONDE_NET_LIBCURL_H

/* Runs curl_global_init(CURL_GLOBAL_DEFAULT) the first time it is called;
 * any thread, any number of times. */
void net_init_curl(void);

#endif
