/* alerts.h: the alert engine. Rules come from a YAML file (--rules) or the
 * defaults; each is evaluated every tick over the agent's current series
 * (a series_source), fires after its condition has held for its `for:`
 * duration, resolves when it stops holding, and notifies each state change
 * exactly once to every sink: the log, a webhook (JSON POST), Alertmanager's
 * v2 API. See docs/alerts.md for the rule grammar. */
#ifndef SONDE_METRICS_ALERTS_H
#define SONDE_METRICS_ALERTS_H

#include <stdint.h>
#include <stddef.h>

#include "metrics/series.h"

struct alert_engine;
typedef struct json_t json_t;

struct alert_defaults {
	double gpu_memory_ratio;   /* default 0.95 */
	double nccl_stuck_seconds; /* default 60 */
	double launch_p99_seconds; /* launch-latency p99 spike threshold */
};

/* Engine with the default rules. */
struct alert_engine *alert_engine__new_defaults(const struct alert_defaults *d);
/* Engine with the rules of a YAML file; NULL on a bad file, with
 * "FILE:LINE: reason" written into err. */
struct alert_engine *alert_engine__load(const char *path, char *err, size_t errlen);
void alert_engine__free(struct alert_engine *e);

/* Sinks. url: http://... Returns 0 or -EINVAL. */
int alert_engine__add_webhook(struct alert_engine *e, const char *url);
int alert_engine__add_alertmanager(struct alert_engine *e, const char *url);

/* Evaluates every rule at now_ms over src's series; sends notifications. */
void alert_engine__eval(struct alert_engine *e, uint64_t now_ms, series_source src, void *src_ctx);

/* Current alerts (pending and firing) as a JSON array; caller decrefs. */
json_t *alert_engine__list(struct alert_engine *e);

#endif
