/* http.c: the agent's metrics endpoint of http.h -- three routes and a
 * list of collectors on a net/http.h server, which does the rest. */
#include "metrics/http.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/xalloc.h"
#include "metrics/gpu_metrics.h"

/* Enough for Prometheus, a few dashboards and curl; each idle connection is
 * closed after the timeout so slow clients cannot hold them all. */
#define METRICS_HTTP_MAX_CONNECTIONS 128
#define METRICS_HTTP_TIMEOUT_S 30

struct exposition {
	prom_collect_fn fn;
	void *ctx;
};

struct metrics_http {
	struct http_server *http;
	struct gpu_metrics *m;
	pthread_mutex_t lock; /* guards expos */
	struct exposition *expos;
	size_t nexpos, capexpos;
};

static int route_metrics(void *ctx, const struct http_request *req, struct http_reply *rep)
{
	struct metrics_http *mh = ctx;
	struct prom_text t;

	if (prom_text__open(&t))
		return -ENOMEM;
	if (mh->m)
		gpu_metrics__collect(mh->m, &t.out);
	pthread_mutex_lock(&mh->lock);
	for (size_t i = 0; i < mh->nexpos; i++)
		mh->expos[i].fn(mh->expos[i].ctx, &t.out);
	pthread_mutex_unlock(&mh->lock);
	/* A page with a family missing would read as series that ended. */
	rep->body = prom_text__close(&t, &rep->len);
	if (!rep->body)
		return -ENOMEM;
	rep->content_type = PROM_CONTENT_TYPE;
	return 0;
}

static int route_json(void *ctx, const struct http_request *req, struct http_reply *rep)
{
	struct metrics_http *mh = ctx;

	rep->body = gpu_metrics__snapshot_text(mh->m, &rep->len);
	if (!rep->body)
		return -ENOMEM;
	rep->content_type = HTTP_CONTENT_JSON;
	return 0;
}

static int route_healthz(void *ctx, const struct http_request *req, struct http_reply *rep)
{
	rep->body = xstrdup("ok\n");
	rep->len = strlen(rep->body);
	return 0;
}

int metrics_http__add_route(struct metrics_http *mh, const char *path, http_route_fn fn, void *ctx)
{
	if (!path)
		return -EINVAL;
	return http_server__add_route(mh->http, &(struct http_route){
							.path = path,
							.methods = HTTP_READ,
							.fn = fn,
							.ctx = ctx,
						});
}

int metrics_http__add_exposition(struct metrics_http *mh, prom_collect_fn fn, void *ctx)
{
	if (!fn)
		return -EINVAL;
	pthread_mutex_lock(&mh->lock);
	xgrow((void **)&mh->expos, &mh->capexpos, mh->nexpos + 1, sizeof(*mh->expos));
	mh->expos[mh->nexpos++] = (struct exposition){fn, ctx};
	pthread_mutex_unlock(&mh->lock);
	return 0;
}

struct metrics_http *metrics_http__start(const char *addr, struct gpu_metrics *m)
{
	struct metrics_http *mh = xcalloc(1, sizeof(*mh));
	/* Without metrics, only /healthz: the first two are skipped. */
	const struct http_route routes[] = {
		{.path = "/metrics", .fn = route_metrics, .ctx = mh},
		{.path = "/json", .fn = route_json, .ctx = mh},
		{.path = "/healthz", .fn = route_healthz, .ctx = mh},
		{0},
	};
	struct http_opts o = {
		.listen = addr,
		.service = "the metrics endpoint",
		.busy_hint = "is another sonde agent running? choose another address",
		.not_found_hint = m ? "try /metrics, /json or /healthz" : "try /healthz",
		.max_connections = METRICS_HTTP_MAX_CONNECTIONS,
		.timeout_s = METRICS_HTTP_TIMEOUT_S,
		.routes = m ? routes : routes + 2,
	};
	int e;

	pthread_mutex_init(&mh->lock, NULL);
	mh->m = m;
	mh->http = http_server__start(&o);
	if (!mh->http) {
		e = errno;
		metrics_http__stop(mh);
		errno = e;
		return NULL;
	}
	return mh;
}

int metrics_http__port(const struct metrics_http *mh)
{
	return http_server__port(mh->http);
}

void metrics_http__stop(struct metrics_http *mh)
{
	if (!mh)
		return;
	http_server__stop(mh->http);
	free(mh->expos);
	pthread_mutex_destroy(&mh->lock);
	free(mh);
}
