/* util.c: the server's shared helpers of util.h -- a growable buffer, UTF-8
 * validation and repair, jansson strings that survive bad bytes, label sets
 * with the store's limits. */
#include "server/util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int sbuf__reserve(struct sbuf *b, size_t more)
{
	size_t need, cap;
	char *nb;

	if (more > SIZE_MAX - b->len - 1)
		return -ENOMEM;
	need = b->len + more + 1;
	if (need <= b->cap)
		return 0;
	cap = b->cap ? b->cap : 256;
	while (cap < need)
		cap = cap > SIZE_MAX / 2 ? need : cap * 2;
	nb = realloc(b->buf, cap);
	if (!nb)
		return -ENOMEM;
	b->buf = nb;
	b->cap = cap;
	return 0;
}

int sbuf__add(struct sbuf *b, const void *data, size_t n)
{
	if (sbuf__reserve(b, n))
		return -ENOMEM;
	if (n)
		memcpy(b->buf + b->len, data, n);
	b->len += n;
	b->buf[b->len] = '\0';
	return 0;
}

int sbuf__puts(struct sbuf *b, const char *s)
{
	return sbuf__add(b, s, strlen(s));
}

int sbuf__printf(struct sbuf *b, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0 || sbuf__reserve(b, (size_t)n))
		return -ENOMEM;
	va_start(ap, fmt);
	vsnprintf(b->buf + b->len, (size_t)n + 1, fmt, ap);
	va_end(ap);
	b->len += (size_t)n;
	return 0;
}

static int sbuf__json_cb(const char *buffer, size_t size, void *data)
{
	return sbuf__add(data, buffer, size) ? -1 : 0;
}

int sbuf__json(struct sbuf *b, const json_t *j)
{
	size_t before = b->len;

	if (json_dump_callback(j, sbuf__json_cb, b,
			       JSON_COMPACT | JSON_ENCODE_ANY | JSON_REAL_PRECISION(12))) {
		b->len = before;
		if (b->buf)
			b->buf[b->len] = '\0';
		return -ENOMEM;
	}
	return 0;
}

char *sbuf__steal(struct sbuf *b, size_t *len)
{
	char *s = b->buf;

	if (len)
		*len = b->len;
	if (!s)
		s = calloc(1, 1);
	b->buf = NULL;
	b->len = b->cap = 0;
	return s;
}

void sbuf__free(struct sbuf *b)
{
	free(b->buf);
	b->buf = NULL;
	b->len = b->cap = 0;
}

/* Length of the valid UTF-8 sequence at s (at most n bytes), or 0. */
static size_t utf8_seq(const unsigned char *s, size_t n)
{
	unsigned c = s[0];
	size_t len, i;
	uint32_t cp;

	if (c < 0x80)
		return 1;
	if (c >= 0xc2 && c <= 0xdf) {
		len = 2;
		cp = c & 0x1f;
	} else if (c >= 0xe0 && c <= 0xef) {
		len = 3;
		cp = c & 0x0f;
	} else if (c >= 0xf0 && c <= 0xf4) {
		len = 4;
		cp = c & 0x07;
	} else {
		return 0;
	}
	if (n < len)
		return 0;
	for (i = 1; i < len; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		cp = cp << 6 | (s[i] & 0x3f);
	}
	if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
	    (cp >= 0xd800 && cp <= 0xdfff))
		return 0;
	return len;
}

bool utf8_valid(const char *s, size_t n)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t i = 0, k;

	while (i < n) {
		k = utf8_seq(p + i, n - i);
		if (!k)
			return false;
		i += k;
	}
	return true;
}

char *utf8_repair(const char *s, size_t n)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t i = 0, o = 0, k;
	char *out;

	/* Each bad byte grows to 3: bounded by 3n. */
	if (n > (SIZE_MAX - 1) / 3)
		return NULL;
	out = malloc(3 * n + 1);
	if (!out)
		return NULL;
	while (i < n) {
		k = utf8_seq(p + i, n - i);
		if (!k) {
			memcpy(out + o, "\xef\xbf\xbd", 3);
			o += 3;
			i++;
			continue;
		}
		if (!(k == 1 && !p[i])) {
			memcpy(out + o, p + i, k);
			o += k;
		}
		i += k;
	}
	out[o] = '\0';
	return out;
}

json_t *json_string_lossy(const char *s)
{
	size_t n = s ? strlen(s) : 0;
	json_t *j;
	char *fixed;

	if (!s)
		return json_string("");
	if (utf8_valid(s, n))
		return json_stringn(s, n);
	fixed = utf8_repair(s, n);
	if (!fixed)
		return NULL;
	j = json_string(fixed);
	free(fixed);
	return j;
}

bool label_name_valid(const char *s)
{
	size_t i;

	if (!s || !*s)
		return false;
	for (i = 0; s[i]; i++) {
		char c = s[i];
		bool alpha = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_';

		if (i >= STORE_MAX_LABEL_NAME)
			return false;
		if (!alpha && !(i && c >= '0' && c <= '9'))
			return false;
	}
	return true;
}

int lset__setn(struct lset *ls, const char *name, const char *value, size_t vlen)
{
	char *n = NULL, *v = NULL;
	size_t i;

	v = malloc(vlen + 1);
	if (!v)
		return -ENOMEM;
	memcpy(v, value, vlen);
	v[vlen] = '\0';
	for (i = 0; i < ls->n; i++)
		if (!strcmp(ls->v[i].name, name)) {
			free((char *)ls->v[i].value);
			ls->v[i].value = v;
			return 0;
		}
	if (ls->n == ls->cap) {
		size_t cap = ls->cap ? 2 * ls->cap : 8;
		struct store_label *nv = realloc(ls->v, cap * sizeof(*nv));

		if (!nv)
			goto nomem;
		ls->v = nv;
		ls->cap = cap;
	}
	n = strdup(name);
	if (!n)
		goto nomem;
	ls->v[ls->n].name = n;
	ls->v[ls->n].value = v;
	ls->n++;
	return 0;
nomem:
	free(v);
	return -ENOMEM;
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

static int label__cmp(const void *a, const void *b)
{
	return strcmp(((const struct store_label *)a)->name, ((const struct store_label *)b)->name);
}

void lset__sort(struct lset *ls)
{
	if (ls->n > 1)
		qsort(ls->v, ls->n, sizeof(*ls->v), label__cmp);
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
