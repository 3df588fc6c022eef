/* prom.c: the Prometheus text writer of prom.h. */
#include "common/prom.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void prom_format_value(char *buf, size_t len, double v)
{
	if (isnan(v))
		snprintf(buf, len, "NaN");
	else if (isinf(v))
		snprintf(buf, len, v > 0 ? "+Inf" : "-Inf");
	else {
		snprintf(buf, len, "%.15g", v);
		if (strtod(buf, NULL) != v)
			snprintf(buf, len, "%.17g", v);
	}
}

void prom__metric(struct prom_out *o, const char *name, const char *type, const char *help,
		  double v)
{
	static const char *const none[] = {NULL};

	o->family(o, name, type, help);
	o->sample(o, name, none, v);
}

/* labels + {key, value} into out (2 * PROM_MAX_LABELS + 1 slots). */
static void labels_plus(const char **out, const char *const *labels, const char *key,
			const char *value)
{
	size_t n = 0;

	for (; labels && labels[n] && n < 2 * (PROM_MAX_LABELS - 1); n += 2) {
		out[n] = labels[n];
		out[n + 1] = labels[n + 1];
	}
	out[n++] = key;
	out[n++] = value;
	out[n] = NULL;
}

static void sum_and_count(struct prom_out *o, const char *name, const char *const *labels,
			  uint64_t count, double sum)
{
	char n[256];

	snprintf(n, sizeof(n), "%s_sum", name);
	o->sample(o, n, labels, sum);
	snprintf(n, sizeof(n), "%s_count", name);
	o->sample(o, n, labels, (double)count);
}

void prom__histogram(struct prom_out *o, const char *name, const char *const *labels,
		     const double *bounds, const uint64_t *cum, size_t nbounds, uint64_t count,
		     double sum)
{
	const char *l[2 * PROM_MAX_LABELS + 1];
	char n[256], le[40];

	snprintf(n, sizeof(n), "%s_bucket", name);
	for (size_t i = 0; i <= nbounds; i++) {
		if (i < nbounds)
			prom_format_value(le, sizeof(le), bounds[i]);
		else
			snprintf(le, sizeof(le), "+Inf");
		labels_plus(l, labels, "le", le);
		o->sample(o, n, l, (double)(i < nbounds ? cum[i] : count));
	}
	sum_and_count(o, name, labels, count, sum);
}

void prom__summary(struct prom_out *o, const char *name, const char *const *labels, const double *q,
		   const double *v, size_t n, uint64_t count, double sum)
{
	const char *l[2 * PROM_MAX_LABELS + 1];
	char qs[40];

	for (size_t i = 0; i < n; i++) {
		snprintf(qs, sizeof(qs), "%g", q[i]);
		labels_plus(l, labels, "quantile", qs);
		o->sample(o, name, l, v[i]);
	}
	sum_and_count(o, name, labels, count, sum);
}

/* ---- text ---- */

static void put_escaped(FILE *f, const char *s, bool quote)
{
	for (; *s; s++) {
		if (*s == '\\')
			fputs("\\\\", f);
		else if (*s == '\n')
			fputs("\\n", f);
		else if (quote && *s == '"')
			fputs("\\\"", f);
		else
			fputc(*s, f);
	}
}

static void text_family(struct prom_out *o, const char *name, const char *type, const char *help)
{
	FILE *f = ((struct prom_text *)o)->f;

	fprintf(f, "# HELP %s ", name);
	put_escaped(f, help, false);
	fprintf(f, "\n# TYPE %s %s\n", name, type);
}

static void text_sample(struct prom_out *o, const char *name, const char *const *labels, double v)
{
	FILE *f = ((struct prom_text *)o)->f;
	char val[40];

	fputs(name, f);
	if (labels && labels[0]) {
		fputc('{', f);
		for (size_t i = 0; labels[i]; i += 2) {
			fprintf(f, "%s%s=\"", i ? "," : "", labels[i]);
			put_escaped(f, labels[i + 1], true);
			fputc('"', f);
		}
		fputc('}', f);
	}
	prom_format_value(val, sizeof(val), v);
	fprintf(f, " %s\n", val);
}

int prom_text__open(struct prom_text *t)
{
	memset(t, 0, sizeof(*t));
	t->out.family = text_family;
	t->out.sample = text_sample;
	t->f = open_memstream(&t->buf, &t->len);
	return t->f ? 0 : -ENOMEM;
}

char *prom_text__close(struct prom_text *t, size_t *len)
{
	int err = ferror(t->f);

	if (fclose(t->f) || err) {
		free(t->buf);
		errno = ENOMEM;
		return NULL;
	}
	if (len)
		*len = t->len;
	return t->buf;
}
