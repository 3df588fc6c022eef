/* prom.h: the one writer of Prometheus text exposition (format 0.0.4), for
 * every /metrics Sonde serves: the agent's (GPU metrics, the alert engine,
 * the WebSocket server, the shipper) and the server's.
 *
 * Metrics are written to a struct prom_out, two callbacks: a family header
 * and a sample. prom_text writes them as text; gpu_metrics walks the same
 * callbacks with its own output to hand every series to the alert engine,
 * so that what /metrics shows and what the rules see never disagree.
 * Label sets are NULL-terminated arrays of alternating names and values
 * ({"pid", "123", "gpu_id", "0", NULL}); values are escaped as the format
 * wants (\\ \" \n), numbers written so that they read back exactly. */
#ifndef SONDE_COMMON_PROM_H
#define SONDE_COMMON_PROM_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define PROM_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"
/* Labels of one sample at most, the le or quantile that histograms and
 * summaries add included. */
#define PROM_MAX_LABELS 8

struct prom_out {
	/* "# HELP" and "# TYPE" of a family (type: counter, gauge,
	 * histogram, summary, untyped). */
	void (*family)(struct prom_out *o, const char *name, const char *type, const char *help);
	void (*sample)(struct prom_out *o, const char *name, const char *const *labels, double v);
};

static inline void prom__family(struct prom_out *o, const char *name, const char *type,
				const char *help)
{
	o->family(o, name, type, help);
}

static inline void prom__sample(struct prom_out *o, const char *name, const char *const *labels,
				double v)
{
	o->sample(o, name, labels, v);
}

/* A family of one sample without labels. */
void prom__metric(struct prom_out *o, const char *name, const char *type, const char *help,
		  double v);

/* The samples of one histogram series: NAME_bucket for each upper bound
 * (bounds[i], ascending, in the exposed unit, with cum[i] values at or
 * below it) and for +Inf (count), NAME_sum and NAME_count. */
void prom__histogram(struct prom_out *o, const char *name, const char *const *labels,
		     const double *bounds, const uint64_t *cum, size_t nbounds, uint64_t count,
		     double sum);
/* The samples of one summary series: NAME{quantile=q[i]} = v[i], NAME_sum
 * and NAME_count. */
void prom__summary(struct prom_out *o, const char *name, const char *const *labels, const double *q,
		   const double *v, size_t n, uint64_t count, double sum);

/* What a module that keeps metrics of its own offers to a /metrics page:
 * it writes its families to o. ctx is the module's object. */
typedef void (*prom_collect_fn)(void *ctx, struct prom_out *o);

/* Text exposition into a growing buffer. */
struct prom_text {
	struct prom_out out;
	FILE *f;
	char *buf;
	size_t len;
};

/* Starts a text exposition. 0 or -ENOMEM. */
int prom_text__open(struct prom_text *t);
/* Ends it: the text (malloc()ed, *len bytes), or NULL with errno set when
 * memory ran out on the way. */
char *prom_text__close(struct prom_text *t, size_t *len);

/* v as the exposition writes it: the shortest of %.15g and %.17g that
 * reads back as v; NaN, +Inf, -Inf spelled out. */
void prom_format_value(char *buf, size_t len, double v);

#endif
