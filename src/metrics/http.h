/* http.h: the agent's metrics endpoint (default 127.0.0.1:9091): GET
 * /metrics (Prometheus text 0.0.4: gpu_metrics and the collectors added
 * for what is kept elsewhere), /json (the snapshot the WebSocket stream
 * pushes), /healthz, and the routes the agent adds (/alerts, /rules,
 * /profile/TYPE), on the HTTP server of net/http.h (one thread). Used by
 * `sonde agent` and the metrics test harness (tests/metrics/harness.c). */
#ifndef SONDE_METRICS_HTTP_H
#define SONDE_METRICS_HTTP_H

#include "common/prom.h"
#include "net/http.h"

struct gpu_metrics;
struct metrics_http;

/* Starts serving on addr (net/listen.h; port 0 picks a free one) with
 * /metrics, /json and /healthz over m (which must outlive the endpoint;
 * NULL serves /healthz and added routes only). NULL with errno set on
 * failure, after logging why. */
struct metrics_http *metrics_http__start(const char *addr, struct gpu_metrics *m);
/* Adds (or replaces) the GET route of an exact path; safe while serving.
 * 0 or -EINVAL (path not absolute). */
int metrics_http__add_route(struct metrics_http *mh, const char *path, http_route_fn fn, void *ctx);
/* Adds fn's families to every /metrics page -- for metrics kept outside
 * gpu_metrics (the alert engine's, the WebSocket server's). */
int metrics_http__add_exposition(struct metrics_http *mh, prom_collect_fn fn, void *ctx);
/* The port actually bound. */
int metrics_http__port(const struct metrics_http *mh);
/* Stops serving and frees mh; NULL is a no-op. */
void metrics_http__stop(struct metrics_http *mh);

#endif
