/* parse.c: the query-string parsers of parse.h -- selectors, times,
 * durations and Pyroscope ingest names. They run on every request with
 * text straight from the URL, so they check lengths before copying,
 * allocate only in proportion to the text, and name the byte where they
 * gave up. Regular expressions are compiled once here (and thrown away) so
 * that a bad one is a 400 rather than a store error. */
#include "server/parse.h"
#include "common/clock.h"
#include "common/duration.h"
#include "common/escape.h"
#include "common/regex.h"
#include "common/utf8.h"

#include <errno.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool is_space(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

static const char *skip_space(const char *s)
{
	while (is_space(*s))
		s++;
	return s;
}

int selector__add(struct selector *sel, const char *name, enum store_match op, const char *value)
{
	char *n, *v;

	if (sel->n == sel->cap) {
		size_t cap = sel->cap ? 2 * sel->cap : 8;
		struct store_matcher *m = realloc(sel->m, cap * sizeof(*m));

		if (!m)
			return -ENOMEM;
		sel->m = m;
		sel->cap = cap;
	}
	n = strdup(name);
	v = strdup(value);
	if (!n || !v) {
		free(n);
		free(v);
		return -ENOMEM;
	}
	sel->m[sel->n++] = (struct store_matcher){.name = n, .value = v, .op = op};
	return 0;
}

const char *selector__eq(const struct selector *sel, const char *name)
{
	for (size_t i = 0; i < sel->n; i++)
		if (sel->m[i].op == STORE_EQ && !strcmp(sel->m[i].name, name))
			return sel->m[i].value;
	return NULL;
}

void selector__free(struct selector *sel)
{
	for (size_t i = 0; i < sel->n; i++) {
		free((char *)sel->m[i].name);
		free((char *)sel->m[i].value);
	}
	free(sel->m);
	memset(sel, 0, sizeof(*sel));
}

/* Reads a quoted string at *sp into a new malloc()ed string. */
static int parse_quoted(const char **sp, const char *start, char **out, char *err, size_t errlen)
{
	const char *s = *sp;
	char q = *s++, *buf, *o;
	size_t n = 0;

	/* The unescaped string is never longer than the quoted one. */
	while (s[n] && s[n] != q) {
		if (q != '`' && s[n] == '\\' && s[n + 1])
			n++;
		n++;
	}
	if (!s[n]) {
		snprintf(err, errlen, "unterminated string at offset %zu", (size_t)(*sp - start));
		return -EINVAL;
	}
	buf = malloc(n + 1);
	if (!buf)
		return -ENOMEM;
	o = buf;
	while (*s != q) {
		char c = *s++;

		if (q != '`' && c == '\\') {
			int e = escape_decode(*s);

			if (e < 0) {
				snprintf(err, errlen, "unknown escape '\\%c' at offset %zu", *s,
					 (size_t)(s - 1 - start));
				free(buf);
				return -EINVAL;
			}
			c = (char)e;
			s++;
		}
		*o++ = c;
	}
	*o = '\0';
	*sp = s + 1;
	*out = buf;
	return 0;
}

static bool is_name_start(char c)
{
	return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_';
}

static bool is_name_char(char c)
{
	return is_name_start(c) || (c >= '0' && c <= '9');
}

/* APP.TYPE -> service_name and type matchers. */
static int add_app_type(struct selector *sel, const char *app, size_t len, size_t off, char *err,
			size_t errlen)
{
	const char *dot = memrchr(app, '.', len);
	char *svc, *type;
	int rc;

	if (dot && (dot == app || dot == app + len - 1)) {
		snprintf(err, errlen, "'%.*s' at offset %zu: expected APP.TYPE (e.g. shares.cpu)",
			 (int)(len > 64 ? 64 : len), app, off);
		return -EINVAL;
	}
	svc = strndup(app, dot ? (size_t)(dot - app) : len);
	type = strndup(dot ? dot + 1 : "cpu", dot ? (size_t)(app + len - dot - 1) : 3);
	if (!svc || !type) {
		rc = -ENOMEM;
	} else if (!utf8_valid(svc, strlen(svc)) || !utf8_valid(type, strlen(type))) {
		snprintf(err, errlen, "the application name at offset %zu is not UTF-8", off);
		rc = -EINVAL;
	} else {
		rc = selector__add(sel, "service_name", STORE_EQ, svc);
		if (!rc)
			rc = selector__add(sel, "type", STORE_EQ, type);
	}
	free(svc);
	free(type);
	return rc;
}

static bool is_app_char(char c)
{
	return c && !is_space(c) && c != '{' && c != '}' && c != '"' && c != '\'' && c != '`' &&
	       c != ',' && c != '=' && (unsigned char)c >= 0x20;
}

/* The operator at *sp (=, !=, =~ or !~), stepped past; -1 when none. */
static int parse_op(const char **sp)
{
	const char *s = *sp;
	int op;

	if (s[0] == '=' && s[1] == '~')
		op = STORE_RE;
	else if (s[0] == '!' && s[1] == '~')
		op = STORE_NRE;
	else if (s[0] == '!' && s[1] == '=')
		op = STORE_NE;
	else if (s[0] == '=')
		op = STORE_EQ;
	else
		return -1;
	*sp = s + (s[0] == '=' && s[1] != '~' ? 1 : 2);
	return op;
}

/* Checks the value of a matcher on name (at offset at): its size, UTF-8,
 * and for a regex its size and that it compiles. 0, -EINVAL with err set,
 * -ENOMEM. */
static int check_value(const char *name, enum store_match op, const char *value, size_t at,
		       char *err, size_t errlen)
{
	char rerr[160];
	regex_t re;
	int rc;

	if (strlen(value) > STORE_MAX_MATCHER_VALUE) {
		snprintf(err, errlen, "the value of '%s' at offset %zu is longer than %d bytes",
			 name, at, STORE_MAX_MATCHER_VALUE);
		return -EINVAL;
	}
	if (!utf8_valid(value, strlen(value))) {
		snprintf(err, errlen, "the value of '%s' at offset %zu is not UTF-8", name, at);
		return -EINVAL;
	}
	if (op != STORE_RE && op != STORE_NRE)
		return 0;
	if (strlen(value) > SELECTOR_MAX_REGEX) {
		snprintf(err, errlen, "the regex of '%s' at offset %zu is longer than %d bytes",
			 name, at, SELECTOR_MAX_REGEX);
		return -EINVAL;
	}
	rc = regex_compile_anchored(value, &re, rerr, sizeof(rerr));
	if (rc) {
		if (rc == -EINVAL)
			snprintf(err, errlen, "%s for '%s' at offset %zu", rerr, name, at);
		return rc;
	}
	regfree(&re);
	return 0;
}

/* A matcher's label name at *sp: plain, dots allowed (otel.scope.name), or
 * double-quoted as Prometheus 3 writes names that are not plain
 * ({"otel.scope.name"="x"}); either way stored as label_name_sanitize()
 * makes it, as the name was at ingest. Steps past it. */
static int parse_label_name(const char **sp, const char *start, char *name, char *err,
			    size_t errlen)
{
	const char *s = *sp, *at = s;
	char *quoted = NULL;
	size_t nlen = 0;
	int rc;

	if (*s == '"') {
		rc = parse_quoted(&s, start, &quoted, err, errlen);
		if (rc)
			return rc;
		nlen = strlen(quoted);
		*sp = s;
	} else {
		while (is_name_char(s[nlen]) || s[nlen] == '.')
			nlen++;
	}
	if (nlen > STORE_MAX_LABEL_NAME) {
		free(quoted);
		snprintf(err, errlen, "label name at offset %zu is longer than %d bytes",
			 (size_t)(at - start), STORE_MAX_LABEL_NAME);
		return -EINVAL;
	}
	memcpy(name, quoted ? quoted : s, nlen);
	name[nlen] = '\0';
	if (!label_name_sanitize(name)) {
		free(quoted);
		snprintf(err, errlen,
			 "label name at offset %zu is not [A-Za-z_.][A-Za-z0-9_.]* (a dot is "
			 "taken as '_')",
			 (size_t)(at - start));
		return -EINVAL;
	}
	if (!quoted)
		*sp = s + nlen;
	free(quoted);
	return 0;
}

/* Parses one matcher, name OP "value", at *sp (a name starts there) into
 * sel, and steps past it. */
static int parse_matcher(struct selector *sel, const char **sp, const char *start, char *err,
			 size_t errlen)
{
	const char *s = *sp, *at;
	char *value = NULL, name[STORE_MAX_LABEL_NAME + 1];
	int op, rc;

	rc = parse_label_name(&s, start, name, err, errlen);
	if (rc)
		return rc;
	s = skip_space(s);
	op = parse_op(&s);
	if (op < 0) {
		snprintf(err, errlen, "expected =, !=, =~ or !~ after '%s' at offset %zu", name,
			 (size_t)(s - start));
		return -EINVAL;
	}
	s = skip_space(s);
	if (*s != '"' && *s != '\'' && *s != '`') {
		snprintf(err, errlen, "expected a quoted value for '%s' at offset %zu", name,
			 (size_t)(s - start));
		return -EINVAL;
	}
	at = s;
	rc = parse_quoted(&s, start, &value, err, errlen);
	if (rc)
		return rc;
	rc = check_value(name, op, value, (size_t)(at - start), err, errlen);
	if (!rc && sel->n >= SELECTOR_MAX_MATCHERS) {
		snprintf(err, errlen, "more than %d matchers", SELECTOR_MAX_MATCHERS);
		rc = -EINVAL;
	}
	if (!rc)
		rc = selector__add(sel, name, op, value);
	free(value);
	*sp = s;
	return rc;
}

int selector__parse(struct selector *sel, const char *text, char *err, size_t errlen)
{
	const char *s, *start = text;
	int rc = 0;

	if (!text)
		return 0;
	if (strlen(text) > SELECTOR_MAX_LEN) {
		snprintf(err, errlen, "the selector is longer than %d bytes", SELECTOR_MAX_LEN);
		return -EINVAL;
	}
	s = skip_space(text);
	if (*s && *s != '{') {
		const char *app = s;

		while (is_app_char(*s))
			s++;
		if (s == app) {
			snprintf(err, errlen,
				 "unexpected '%c' at offset %zu: expected APP.TYPE or '{'", *s,
				 (size_t)(s - start));
			return -EINVAL;
		}
		rc = add_app_type(sel, app, (size_t)(s - app), (size_t)(app - start), err, errlen);
		if (rc)
			return rc;
		s = skip_space(s);
	}
	if (*s == '{') {
		s = skip_space(s + 1);
		while (*s != '}') {
			if (!is_name_start(*s) && *s != '.' && *s != '"') {
				snprintf(err, errlen,
					 *s ? "expected a label name at offset %zu"
					    : "unexpected end at offset %zu: expected a label name "
					      "or '}'",
					 (size_t)(s - start));
				return -EINVAL;
			}
			rc = parse_matcher(sel, &s, start, err, errlen);
			if (rc)
				return rc;
			s = skip_space(s);
			if (*s == ',')
				s = skip_space(s + 1);
			else if (*s != '}') {
				snprintf(err, errlen,
					 *s ? "expected ',' or '}' at offset %zu"
					    : "unexpected end at offset %zu: expected ',' or '}'",
					 (size_t)(s - start));
				return -EINVAL;
			}
		}
		s = skip_space(s + 1);
	}
	if (*s) {
		snprintf(err, errlen, "unexpected '%c' at offset %zu after the selector", *s,
			 (size_t)(s - start));
		return -EINVAL;
	}
	return 0;
}

int parse_time_ms(const char *s, enum time_unit unit, int64_t now, int64_t *out_ms, char *err,
		  size_t errlen)
{
	int64_t v = 0;
	uint64_t d;
	const char *p;

	if (!s || !*s) {
		snprintf(err, errlen, "empty time: expected now, now-DURATION or an integer");
		return -EINVAL;
	}
	if (!strncmp(s, "now", 3)) {
		if (!s[3]) {
			*out_ms = now;
			return 0;
		}
		if (s[3] == '-' && !duration_parse(s + 4, &d) && d <= (uint64_t)now) {
			*out_ms = now - (int64_t)d;
			return 0;
		}
		goto bad;
	}
	for (p = s; *p; p++) {
		if (*p < '0' || *p > '9' || v > (INT64_MAX - 9) / 10)
			goto bad;
		v = v * 10 + (*p - '0');
	}
	if (unit == TIME_PYROSCOPE_S && v <= 100000000000LL) {
		if (v > INT64_MAX / MS_PER_SEC)
			goto bad;
		v *= MS_PER_SEC;
	}
	*out_ms = v;
	return 0;
bad:
	snprintf(err, errlen, "bad time '%.40s': expected now, now-DURATION (30s, 5m, 1h) or %s", s,
		 unit == TIME_MS ? "milliseconds since the epoch" : "seconds since the epoch");
	return -EINVAL;
}

/* A Pyroscope label value: plain up to ',' or '}', or double-quoted. */
static int pyro_value(const char **sp, const char *start, char **out, char *err, size_t errlen)
{
	const char *s = skip_space(*sp), *e;

	if (*s == '"') {
		int rc = parse_quoted(&s, start, out, err, errlen);

		if (rc)
			return rc;
		*sp = s;
		return 0;
	}
	e = s;
	while (*e && *e != ',' && *e != '}')
		e++;
	*sp = e;
	while (e > s && is_space(e[-1]))
		e--;
	*out = strndup(s, (size_t)(e - s));
	return *out ? 0 : -ENOMEM;
}

int pyroscope_name__parse(const char *name, struct lset *out, char *err, size_t errlen)
{
	const char *s, *app, *app_end, *dot;
	char *value = NULL;
	int rc = 0;

	if (!name || !*name) {
		snprintf(err, errlen, "name is missing: expected APP.TYPE{k=v,...}");
		return -EINVAL;
	}
	if (strlen(name) > SELECTOR_MAX_LEN) {
		snprintf(err, errlen, "name is longer than %d bytes", SELECTOR_MAX_LEN);
		return -EINVAL;
	}
	app = skip_space(name);
	app_end = strchr(app, '{');
	if (!app_end)
		app_end = app + strlen(app);
	s = app_end;
	while (app_end > app && is_space(app_end[-1]))
		app_end--;
	if (app_end == app) {
		snprintf(err, errlen, "name '%.64s' has no application: expected APP.TYPE{k=v,...}",
			 name);
		return -EINVAL;
	}
	dot = memrchr(app, '.', (size_t)(app_end - app));
	if (dot && (dot == app || dot == app_end - 1)) {
		snprintf(err, errlen, "name '%.64s': expected APP.TYPE with both parts", name);
		return -EINVAL;
	}
	rc = lset__setn(out, "service_name", app, (size_t)((dot ? dot : app_end) - app));
	if (!rc && dot)
		rc = lset__setn(out, "type", dot + 1, (size_t)(app_end - dot - 1));
	if (rc)
		return rc;
	if (!*s)
		return 0;
	s = skip_space(s + 1);
	while (*s != '}') {
		const char *k = s, *ke;
		char key[STORE_MAX_LABEL_NAME + 1];

		while (*s && *s != '=' && *s != ',' && *s != '}')
			s++;
		if (*s != '=') {
			snprintf(err, errlen, "expected KEY=VALUE at offset %zu of the name",
				 (size_t)(k - name));
			return -EINVAL;
		}
		ke = s;
		while (ke > k && is_space(ke[-1]))
			ke--;
		if ((size_t)(ke - k) > STORE_MAX_LABEL_NAME || ke == k) {
			snprintf(err, errlen, "bad label name at offset %zu of the name",
				 (size_t)(k - name));
			return -EINVAL;
		}
		memcpy(key, k, (size_t)(ke - k));
		key[ke - k] = '\0';
		if (!label_name_sanitize(key)) {
			snprintf(err, errlen,
				 "label name at offset %zu of the name is not "
				 "[A-Za-z_.][A-Za-z0-9_.]* (a dot is taken as '_')",
				 (size_t)(k - name));
			return -EINVAL;
		}
		s++;
		rc = pyro_value(&s, name, &value, err, errlen);
		if (rc)
			return rc;
		/* The application and type come from the name itself. */
		if (strcmp(key, "service_name") && strcmp(key, "type") && *value)
			rc = lset__set(out, key, value);
		free(value);
		value = NULL;
		if (rc)
			return rc;
		s = skip_space(s);
		if (*s == ',')
			s = skip_space(s + 1);
		else if (*s != '}') {
			snprintf(err, errlen, "expected ',' or '}' at offset %zu of the name",
				 (size_t)(s - name));
			return -EINVAL;
		}
	}
	s = skip_space(s + 1);
	if (*s) {
		snprintf(err, errlen, "unexpected text at offset %zu after the labels of the name",
			 (size_t)(s - name));
		return -EINVAL;
	}
	return 0;
}
