/* alerts.h: the alert engine. Rules come from a YAML file (--rules) or the
 * defaults; each is evaluated every tick over the agent's current series
 * (a series_source), fires after its condition has held for its `for:`
 * duration, resolves when it stops holding, and notifies each state change
 * exactly once to every sink: the log, a webhook (JSON POST), Alertmanager's
 * v2 API. See docs/alerts.md for the rule grammar.
 *
 * Thread-safe: one thread evaluates while others list, read the stats or
 * add sinks. HTTP deliveries run on one worker thread per sink, so a slow or
 * dead receiver never holds up evaluation.
 *
 * Used by the agent (src/agent/agent.c: the tick, /alerts, /rules, /metrics)
 * and `sonde agent --print-rules` (src/cli/agent.c); the engine's files are
 * listed in alerts_internal.h. */
#ifndef SONDE_ALERTS_ALERTS_H
#define SONDE_ALERTS_ALERTS_H

#include <stdint.h>
#include <stddef.h>

#include "metrics/series.h"

struct alert_engine;
typedef struct json_t json_t;

/* Thresholds of the default rules; a field left 0 keeps its default. */
struct alert_defaults {
	double gpu_memory_ratio;	 /* default 0.95 */
	double nccl_stuck_seconds;	 /* default 60 */
	double dataloader_stuck_seconds; /* a DataLoader wait, default 60 */
	double sync_stuck_seconds;	 /* a CUDA synchronisation, default 60 */
	double launch_p99_seconds;	 /* launch-latency p99 spike threshold, default 0.001 */
};

/* Engine with the default rules (d may be NULL). */
struct alert_engine *alert_engine__new_defaults(const struct alert_defaults *d);
/* Engine with the rules of a YAML file; NULL on a bad file, with
 * "FILE:LINE: reason" written into err. */
struct alert_engine *alert_engine__load(const char *path, char *err, size_t errlen);
/* The same from a string; name stands for FILE in messages. */
struct alert_engine *alert_engine__load_string(const char *text, const char *name, char *err,
					       size_t errlen);
/* Stops the sink workers after a short drain (at most about 2 s) of what they
 * still hold; what can't be delivered by then counts as failed. */
void alert_engine__free(struct alert_engine *e);

/* The default rules as a rule file (a starting point for --rules). Caller frees. */
char *alert_defaults__yaml(const struct alert_defaults *d);

/* Delivery settings of the HTTP sinks added after the call; 0 keeps a default. */
struct alert_delivery {
	unsigned timeout_ms; /* per POST, default 5000 */
	unsigned retries;    /* after the first attempt, default 3 */
	unsigned backoff_ms; /* before the first retry, doubled each time, default 1000 */
	unsigned queue_len;  /* notifications waiting per sink, default 256 */
	unsigned resend_ms;  /* re-send of active alerts (Alertmanager, server), default 30000 */
};
void alert_engine__set_delivery(struct alert_engine *e, const struct alert_delivery *d);

/* Sinks. url: http://... Returns 0 or -EINVAL. The webhook gets one POST per
 * firing and one per resolution of each alert; Alertmanager gets
 * {url}/api/v2/alerts with every changed alert at once and the active ones
 * again every resend_ms (it deduplicates). */
int alert_engine__add_webhook(struct alert_engine *e, const char *url);
/* A webhook that keeps the state of alerts (a sonde server's
 * /api/v1/alerts): besides each firing and resolution, it gets the firing
 * alerts again every resend_ms, so that it knows them after a restart. */
int alert_engine__add_server(struct alert_engine *e, const char *url);
/* The same for an https:// server or one run with --auth: its TLS files
 * (net/tls.h; the CA, client certificate and key, copied; NULL: the
 * system's CAs) and its token (copied; NULL: none). Only this sink gets
 * them: webhooks and Alertmanager never see the server's CA or token. */
struct tls_client_opts;
int alert_engine__add_server_auth(struct alert_engine *e, const char *url,
				  const struct tls_client_opts *tls, const char *token);
int alert_engine__add_alertmanager(struct alert_engine *e, const char *url);
/* An in-process sink: fn runs on the evaluating thread, inside
 * alert_engine__eval, with the same JSON object a webhook would receive
 * (borrowed for the call). It must not call back into the engine. */
typedef void (*alert_notify_fn)(void *ctx, json_t *notification);
int alert_engine__add_callback(struct alert_engine *e, alert_notify_fn fn, void *ctx);

/* A label added to every alert that doesn't already carry it (Prometheus'
 * external labels); the engines start with node=<hostname> so that alerts of
 * different nodes stay apart in Alertmanager. value NULL removes the label.
 * Applies to alerts that become active afterwards. Returns 0 or -EINVAL. */
int alert_engine__set_external_label(struct alert_engine *e, const char *key, const char *value);
/* The generatorURL sent to Alertmanager (default http://<hostname>:9091/alerts). */
void alert_engine__set_generator_url(struct alert_engine *e, const char *url);

/* Evaluates every rule at now_ms (wall-clock milliseconds since the Unix
 * epoch: the timestamps sent out come from it) over src's series; sends
 * notifications. */
void alert_engine__eval(struct alert_engine *e, uint64_t now_ms, series_source src, void *src_ctx);

/* Current alerts (pending and firing) as a JSON array; caller decrefs. */
json_t *alert_engine__list(struct alert_engine *e);
/* The loaded rules as a JSON array (alert, expr, for, labels, annotations,
 * line, health, lastError); caller decrefs. */
json_t *alert_engine__rules(struct alert_engine *e);

enum alert_sink_kind { ALERT_SINK_WEBHOOK, ALERT_SINK_ALERTMANAGER, ALERT_SINK_KINDS };

struct alert_engine_stats {
	uint64_t evals;	      /* alert_engine__eval calls */
	uint64_t eval_errors; /* rule evaluations that failed (each logged) */
	uint32_t pending, firing;
	uint64_t notifications[ALERT_SINK_KINDS]; /* POSTs answered 2xx */
	/* POSTs given up on (after the retries, on a 4xx, or at shutdown),
	 * including those dropped because the sink's queue was full. */
	uint64_t notifications_failed[ALERT_SINK_KINDS];
	uint64_t notifications_dropped[ALERT_SINK_KINDS]; /* queue full */
	uint64_t queued;				  /* waiting now, all sinks */
};
void alert_engine__stats(struct alert_engine *e, struct alert_engine_stats *st);

/* The engine's own families on /metrics (sonde_alerts_*): a
 * prom_collect_fn, ctx the engine. */
struct prom_out;
void alert_engine__collect(void *ctx, struct prom_out *o);

/* Waits up to timeout_ms for every sink's queue to empty (delivered or given
 * up). Returns 0, or -ETIMEDOUT. */
int alert_engine__flush(struct alert_engine *e, unsigned timeout_ms);

#endif
