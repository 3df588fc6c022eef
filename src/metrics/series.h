/* series.h: the one shape in which the agent's metrics are read by anything
 * other than the Prometheus exposition -- the alert engine walks every current
 * series through a series_source. */
#ifndef SONDE_METRICS_SERIES_H
#define SONDE_METRICS_SERIES_H

/* One series: a metric name, its labels as a NULL-terminated array of
 * alternating keys and values ({"pid", "123", "gpu_id", "0", NULL}), and its
 * current value. Everything is borrowed for the duration of the call. */
typedef void (*series_fn)(void *ctx, const char *name, const char *const *labels, double value);

/* Calls fn once per current series of src. */
typedef void (*series_source)(void *src, series_fn fn, void *ctx);

#endif
