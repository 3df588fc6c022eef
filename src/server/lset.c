/* lset.c: the request label sets of lset.h. Names are checked by the
 * store's own label_name_valid(), so the server refuses exactly what the
 * store would. */
#include "server/lset.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/utf8.h"
#include "common/xalloc.h"

int lset__setn(struct lset *ls, const char *name, const char *value, size_t vlen)
{
	char *n = strdup(name), *v = malloc(vlen + 1);
	size_t i;

	if (!n || !v) {
		free(n);
		free(v);
		return -ENOMEM;
	}
	memcpy(v, value, vlen);
	v[vlen] = '\0';
	/* Dotted names as Pyroscope takes them (the last of two that become
	 * one wins); lset__check refuses what is still not a name. */
	label_name_sanitize(n);
	for (i = 0; i < ls->n; i++)
		if (!strcmp(ls->v[i].name, n)) {
			free((char *)ls->v[i].value);
			ls->v[i].value = v;
			free(n);
			return 0;
		}
	if (array_grow((void **)&ls->v, &ls->cap, ls->n + 1, sizeof(*ls->v))) {
		free(n);
		free(v);
		return -ENOMEM;
	}
	ls->v[ls->n].name = n;
	ls->v[ls->n].value = v;
	ls->n++;
	return 0;
}

int lset__set(struct lset *ls, const char *name, const char *value)
{
	return lset__setn(ls, name, value, strlen(value));
}

const char *lset__get(const struct lset *ls, const char *name)
{
	for (size_t i = 0; i < ls->n; i++)
		if (!strcmp(ls->v[i].name, name))
			return ls->v[i].value;
	return NULL;
}

int lset__copy(struct lset *dst, const struct lset *src)
{
	for (size_t i = 0; i < src->n; i++)
		if (lset__set(dst, src->v[i].name, src->v[i].value))
			return -ENOMEM;
	return 0;
}

static int label_cmp(const void *a, const void *b)
{
	return strcmp(((const struct store_label *)a)->name, ((const struct store_label *)b)->name);
}

void lset__sort(struct lset *ls)
{
	if (ls->n > 1)
		qsort(ls->v, ls->n, sizeof(*ls->v), label_cmp);
}

/* Up to 40 bytes of s, printable, for a message. */
static void label_excerpt(const char *s, char *out, size_t outlen)
{
	size_t i, o = 0;

	for (i = 0; s[i] && o + 5 < outlen && i < 40; i++) {
		unsigned char c = (unsigned char)s[i];

		if (c >= 0x20 && c < 0x7f && c != '\'' && c != '\\')
			out[o++] = (char)c;
		else
			o += (size_t)snprintf(out + o, outlen - o, "\\x%02x", c);
	}
	if (s[i] && o + 4 < outlen) {
		memcpy(out + o, "...", 3);
		o += 3;
	}
	out[o] = '\0';
}

int lset__check(const struct lset *ls, char *err, size_t errlen)
{
	char ex[200];

	if (ls->n > STORE_MAX_LABELS) {
		snprintf(err, errlen, "%zu labels: a series has at most %d (type included)", ls->n,
			 STORE_MAX_LABELS);
		return -EINVAL;
	}
	for (size_t i = 0; i < ls->n; i++) {
		const char *name = ls->v[i].name, *value = ls->v[i].value;
		size_t vlen = strlen(value);

		if (!label_name_valid(name)) {
			label_excerpt(name, ex, sizeof(ex));
			snprintf(
				err, errlen,
				"label name '%s' is not [A-Za-z_][A-Za-z0-9_]* of at most %d bytes",
				ex, STORE_MAX_LABEL_NAME);
			return -EINVAL;
		}
		if (vlen > STORE_MAX_LABEL_VALUE) {
			snprintf(err, errlen, "label '%s' has a value of %zu bytes: at most %d",
				 name, vlen, STORE_MAX_LABEL_VALUE);
			return -EINVAL;
		}
		if (!utf8_valid(value, vlen)) {
			label_excerpt(value, ex, sizeof(ex));
			snprintf(err, errlen, "label '%s' has a value that is not UTF-8: '%s'",
				 name, ex);
			return -EINVAL;
		}
	}
	return 0;
}

void lset__free(struct lset *ls)
{
	for (size_t i = 0; i < ls->n; i++) {
		free((char *)ls->v[i].name);
		free((char *)ls->v[i].value);
	}
	free(ls->v);
	ls->v = NULL;
	ls->n = ls->cap = 0;
}
