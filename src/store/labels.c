/* labels.c: label sets and matchers for every store -- the limits of
 * store.h (store_check_labels, store_check_matchers) and the checks of a
 * put's windows and points (store_check_window, store_check_point), the
 * canonical encoding of a label set that the stores key their series by, and Prometheus
 * style matchers (=, !=, =~, !~ with anchored POSIX extended regexes) that
 * the stores evaluate against series. The server calls the two checks to
 * answer 400 before it calls a store. */
#include "store/store_internal.h"
#include "common/regex.h"
#include "common/utf8.h"
#include "common/search.h"
#include "common/log.h"
#include "common/clock.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(char *err, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int fail(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	if (err && errlen) {
		va_start(ap, fmt);
		vsnprintf(err, errlen, fmt, ap);
		va_end(ap);
	}
	return -EINVAL;
}

/* Quotes at most 40 bytes of s for an error message, non-printable bytes as
 * '?' (the message may go to a log or a JSON error). */
static const char *shown(const char *s, char *buf, size_t size)
{
	size_t i, n = 0;

	for (i = 0; s[i] && n + 4 < size && i < 40; i++)
		buf[n++] = s[i] >= 0x20 && s[i] < 0x7f ? s[i] : '?';
	if (s[i] && n + 4 < size) {
		memcpy(buf + n, "...", 3);
		n += 3;
	}
	buf[n] = '\0';
	return buf;
}

static bool name_char(char c, bool first, bool colon)
{
	if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_' || (colon && c == ':'))
		return true;
	return !first && c >= '0' && c <= '9';
}

/* A name of at most max bytes of name_char()s, not empty. */
static bool name_valid(const char *name, size_t max, bool colon)
{
	size_t i;

	if (!name || !*name)
		return false;
	for (i = 0; name[i]; i++)
		if (i >= max || !name_char(name[i], i == 0, colon))
			return false;
	return true;
}

bool label_name_valid(const char *name)
{
	return name_valid(name, STORE_MAX_LABEL_NAME, false);
}

bool label_name_sanitize(char *name)
{
	for (char *p = name; p && *p; p++)
		if (*p == '.')
			*p = '_';
	return label_name_valid(name);
}

bool metric_name_valid(const char *name)
{
	return name_valid(name, STORE_MAX_METRIC_NAME, true);
}

/* Valid UTF-8 of at most max bytes (common/utf8.h): the length, or -1. */
static long utf8_len(const char *str, size_t max)
{
	size_t n = strnlen(str, max + 1);

	return n <= max && utf8_valid(str, n) ? (long)n : -1;
}

int store_check_labels(const struct store_label *labels, size_t n, char *err, size_t errlen)
{
	char buf[64];
	size_t i, j;

	if (n > STORE_MAX_LABELS)
		return fail(err, errlen, "%zu labels, at most %d are allowed", n, STORE_MAX_LABELS);
	if (n && !labels)
		return fail(err, errlen, "labels missing");
	for (i = 0; i < n; i++) {
		const char *name = labels[i].name, *value = labels[i].value;

		if (!name)
			return fail(err, errlen, "label %zu has no name", i);
		if (!label_name_valid(name)) {
			if (strnlen(name, STORE_MAX_LABEL_NAME + 1) > STORE_MAX_LABEL_NAME)
				return fail(err, errlen, "label name '%s' is longer than %d bytes",
					    shown(name, buf, sizeof(buf)), STORE_MAX_LABEL_NAME);
			return fail(err, errlen, "label name '%s' is not [A-Za-z_][A-Za-z0-9_]*",
				    shown(name, buf, sizeof(buf)));
		}
		if (!value)
			return fail(err, errlen, "label '%s' has no value", name);
		if (utf8_len(value, STORE_MAX_LABEL_VALUE) < 0) {
			if (strnlen(value, STORE_MAX_LABEL_VALUE + 1) > STORE_MAX_LABEL_VALUE)
				return fail(err, errlen,
					    "value of label '%s' is longer than %d bytes", name,
					    STORE_MAX_LABEL_VALUE);
			return fail(err, errlen, "value of label '%s' is not valid UTF-8", name);
		}
		for (j = 0; j < i; j++)
			if (!strcmp(labels[j].name, name))
				return fail(err, errlen, "label '%s' is given twice", name);
	}
	return 0;
}

int store_check_window(const struct store_window *w, size_t i)
{
	char err[256];
	size_t k;

	if (store_check_labels(w->labels, w->nlabels, err, sizeof(err))) {
		pr_debug("store: window %zu: %s", i, err);
		return -EINVAL;
	}
	for (k = 0; k < w->nlabels; k++)
		if (!strcmp(w->labels[k].name, "type") && *w->labels[k].value)
			break;
	if (k == w->nlabels) {
		pr_debug("store: window %zu has no \"type\" label", i);
		return -EINVAL;
	}
	if (w->start_ms < 0 || w->start_ms >= w->end_ms || !w->prof) {
		pr_debug("store: window %zu: bad range [%" PRId64 ", %" PRId64 ") or no profile", i,
			 w->start_ms, w->end_ms);
		return -EINVAL;
	}
	return 0;
}

int store_check_point(const struct store_point *p, size_t i)
{
	char err[256];

	if (!metric_name_valid(p->name)) {
		pr_debug("store: point %zu: bad metric name", i);
		return -EINVAL;
	}
	if (store_check_labels(p->labels, p->nlabels, err, sizeof(err))) {
		pr_debug("store: point %zu: %s", i, err);
		return -EINVAL;
	}
	return 0;
}

int store_check_points(const struct store_point *p, size_t n)
{
	int err = n && !p ? -EINVAL : 0;

	for (size_t i = 0; !err && i < n; i++)
		err = store_check_point(&p[i], i);
	return err;
}

/* Whether s is a string of valid UTF-8 of at most max bytes. */
static bool span_text_ok(const char *s, size_t max)
{
	size_t n = s ? strnlen(s, max + 1) : max + 1;

	return n <= max && utf8_valid(s, n);
}

int store_check_span(const struct store_span *sp, size_t i, char *err, size_t errlen)
{
	const char *why = NULL;
	char lerr[256];

	if (sp->start_ns < 0 || sp->end_ns < sp->start_ns)
		why = "its end is before its start, or its start before 1970";
	else if (sp->end_ns - sp->start_ns > STORE_MAX_SPAN_NS)
		why = "it lasts longer than an hour";
	else if (!span_text_ok(sp->kind, STORE_MAX_SPAN_KIND) || !*sp->kind)
		why = "its kind is not a short UTF-8 name";
	else if (!span_text_ok(sp->name, STORE_MAX_SPAN_NAME))
		why = "its name is not UTF-8 of at most 2048 bytes";
	else if (!span_text_ok(sp->from ? sp->from : "", STORE_MAX_SPAN_NAME))
		why = "its launched-from is not UTF-8 of at most 2048 bytes";
	else if (store_check_labels(sp->labels, sp->nlabels, lerr, sizeof(lerr)))
		why = lerr;
	if (!why)
		return 0;
	if (err && errlen)
		snprintf(err, errlen, "span %zu: %s", i, why);
	pr_debug("store: span %zu: %s", i, why);
	return -EINVAL;
}

int store_check_spans(const struct store_span *sp, size_t n)
{
	int err = n && !sp ? -EINVAL : 0;

	for (size_t i = 0; !err && i < n; i++)
		err = store_check_span(&sp[i], i, NULL, 0);
	return err;
}

int labelset__encode(struct labelset *ls, const struct store_label *labels, size_t n, char *err,
		     size_t errlen)
{
	int ret;

	memset(ls, 0, sizeof(*ls));
	ret = store_check_labels(labels, n, err, errlen);
	return ret ? ret : labelset__encode_checked(ls, labels, n);
}

int labelset__encode_checked(struct labelset *ls, const struct store_label *labels, size_t n)
{
	struct store_label sorted[STORE_MAX_LABELS];
	size_t i, m = 0, len = 0, off = 0;

	memset(ls, 0, sizeof(*ls));
	if (n > STORE_MAX_LABELS)
		return -EINVAL;
	/* By name, as they come in (a handful: an insertion sort is quicker
	 * than qsort's indirect calls, and a put sorts every window's). */
	for (i = 0; i < n; i++) {
		size_t k = m++;

		if (!*labels[i].value) {
			m--;
			continue;
		}
		while (k && strcmp(sorted[k - 1].name, labels[i].name) > 0) {
			sorted[k] = sorted[k - 1];
			k--;
		}
		sorted[k] = labels[i];
		len += strlen(labels[i].name) + strlen(labels[i].value) + 2;
	}

	ls->key = malloc(len ? len : 1);
	ls->labels = malloc((m ? m : 1) * sizeof(*ls->labels));
	if (!ls->key || !ls->labels) {
		labelset__free(ls);
		return -ENOMEM;
	}
	for (i = 0; i < m; i++) {
		size_t nl = strlen(sorted[i].name) + 1, vl = strlen(sorted[i].value) + 1;

		memcpy(ls->key + off, sorted[i].name, nl);
		ls->labels[i].name = ls->key + off;
		off += nl;
		memcpy(ls->key + off, sorted[i].value, vl);
		ls->labels[i].value = ls->key + off;
		off += vl;
	}
	ls->len = len;
	ls->n = m;
	return 0;
}

int labelset__decode(struct labelset *ls, const void *key, size_t len)
{
	const char *p, *end;
	size_t n = 0, i;

	memset(ls, 0, sizeof(*ls));
	if (len && ((const char *)key)[len - 1] != '\0')
		return -EINVAL;
	for (p = key, end = p + len; p < end; p += strlen(p) + 1)
		n++;
	if (n % 2 || n / 2 > STORE_MAX_LABELS)
		return -EINVAL;
	ls->key = malloc(len ? len : 1);
	ls->labels = malloc((n ? n / 2 : 1) * sizeof(*ls->labels));
	if (!ls->key || !ls->labels) {
		labelset__free(ls);
		return -ENOMEM;
	}
	if (len)
		memcpy(ls->key, key, len);
	ls->len = len;
	ls->n = n / 2;
	p = ls->key;
	for (i = 0; i < ls->n; i++) {
		ls->labels[i].name = p;
		p += strlen(p) + 1;
		ls->labels[i].value = p;
		p += strlen(p) + 1;
	}
	return 0;
}

void labelset__free(struct labelset *ls)
{
	free(ls->key);
	free(ls->labels);
	memset(ls, 0, sizeof(*ls));
}

const char *labels_get(const struct store_label *labels, size_t n, const char *name)
{
	size_t i = PARTITION_POINT(n, j, strcmp(labels[j].name, name) < 0);

	return i < n && !strcmp(labels[i].name, name) ? labels[i].value : "";
}

/* Checks m; a regex is compiled into *re (the caller frees it). */
static int check_matcher(const struct store_matcher *m, regex_t *re, char *err, size_t errlen)
{
	char buf[64], msg[160];
	size_t len;
	int rc;

	if (!m->name || !label_name_valid(m->name))
		return fail(err, errlen, "matcher label name '%s' is not [A-Za-z_][A-Za-z0-9_]*",
			    m->name ? shown(m->name, buf, sizeof(buf)) : "");
	if (!m->value)
		return fail(err, errlen, "matcher on '%s' has no value", m->name);
	if (m->op != STORE_EQ && m->op != STORE_NE && m->op != STORE_RE && m->op != STORE_NRE)
		return fail(err, errlen, "matcher on '%s' has an unknown operator", m->name);
	len = strnlen(m->value, STORE_MAX_MATCHER_VALUE + 1);
	if (len > STORE_MAX_MATCHER_VALUE)
		return fail(err, errlen, "matcher value for '%s' is longer than %d bytes", m->name,
			    STORE_MAX_MATCHER_VALUE);
	if (utf8_len(m->value, STORE_MAX_MATCHER_VALUE) < 0)
		return fail(err, errlen, "matcher value for '%s' is not valid UTF-8", m->name);
	if (m->op == STORE_EQ || m->op == STORE_NE)
		return 0;

	rc = regex_compile_anchored(m->value, re, msg, sizeof(msg));
	if (rc == -EINVAL)
		return fail(err, errlen, "bad regex for '%s' ('%s'): %s", m->name,
			    shown(m->value, buf, sizeof(buf)), msg);
	return rc;
}

int store_check_matchers(const struct store_matcher *m, size_t n, char *err, size_t errlen)
{
	regex_t re;
	size_t i;
	int ret;

	if (n > STORE_MAX_MATCHERS)
		return fail(err, errlen, "%zu matchers, at most %d are allowed", n,
			    STORE_MAX_MATCHERS);
	if (n && !m)
		return fail(err, errlen, "matchers missing");
	for (i = 0; i < n; i++) {
		ret = check_matcher(&m[i], &re, err, errlen);
		if (ret)
			return ret;
		if (m[i].op == STORE_RE || m[i].op == STORE_NRE)
			regfree(&re);
	}
	return 0;
}

int matchset__compile(struct matchset *ms, const struct store_matcher *m, size_t n, char *err,
		      size_t errlen)
{
	size_t i;
	int ret;

	memset(ms, 0, sizeof(*ms));
	if (n > STORE_MAX_MATCHERS)
		return fail(err, errlen, "%zu matchers, at most %d are allowed", n,
			    STORE_MAX_MATCHERS);
	if (n && !m)
		return fail(err, errlen, "matchers missing");
	ms->m = calloc(n ? n : 1, sizeof(*ms->m));
	if (!ms->m)
		return -ENOMEM;
	for (i = 0; i < n; i++) {
		struct matcher *mm = &ms->m[ms->n];

		ret = check_matcher(&m[i], &mm->re, err, errlen);
		if (ret)
			goto cleanup;
		mm->compiled = m[i].op == STORE_RE || m[i].op == STORE_NRE;
		mm->op = m[i].op;
		ms->n++;
		mm->name = strdup(m[i].name);
		mm->value = strdup(m[i].value);
		if (!mm->name || !mm->value) {
			ret = -ENOMEM;
			goto cleanup;
		}
	}
	return 0;
cleanup:
	matchset__free(ms);
	return ret;
}

bool matchset__match(const struct matchset *ms, const struct store_label *labels, size_t n)
{
	size_t i;

	for (i = 0; i < ms->n; i++) {
		const struct matcher *m = &ms->m[i];
		const char *v = labels_get(labels, n, m->name);
		bool hit;

		switch (m->op) {
		case STORE_EQ:
			hit = !strcmp(v, m->value);
			break;
		case STORE_NE:
			hit = !!strcmp(v, m->value);
			break;
		case STORE_RE:
			hit = !regexec(&m->re, v, 0, NULL, 0);
			break;
		default:
			hit = !!regexec(&m->re, v, 0, NULL, 0);
			break;
		}
		if (!hit)
			return false;
	}
	return true;
}

bool store_past_deadline(uint64_t deadline_ns, size_t i)
{
	return deadline_ns && !(i % STORE_DEADLINE_STEP) && mono_ns() > deadline_ns;
}

void matchset__free(struct matchset *ms)
{
	size_t i;

	for (i = 0; ms->m && i < ms->n; i++) {
		if (ms->m[i].compiled)
			regfree(&ms->m[i].re);
		free(ms->m[i].name);
		free(ms->m[i].value);
	}
	free(ms->m);
	memset(ms, 0, sizeof(*ms));
}
