/* parse.c: the query-string parsers of parse.h -- selectors, times,
 * durations and Pyroscope ingest names. They run on every request with
 * text straight from the URL, so they check lengths before copying,
 * allocate only in proportion to the text, and name the byte where they
 * gave up. Regular expressions are compiled once here (and thrown away) so
 * that a bad one is a 400 rather than a store error. */
#include "server/parse.h"

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

/* Saturating a * b and a + b, capped past the expansion limit. */
static unsigned long sat_mul(unsigned long a, unsigned long b)
{
	return a && b > (SELECTOR_MAX_EXPANSION + 1) / a ? SELECTOR_MAX_EXPANSION + 1 : a * b;
}

static unsigned long sat_add(unsigned long a, unsigned long b)
{
	return a + b > SELECTOR_MAX_EXPANSION + 1 ? SELECTOR_MAX_EXPANSION + 1 : a + b;
}

/* Length of the bracket expression at re (re[0] == '['), or 0 when it does
 * not close: ']' first is literal, and [:class:], [=e=], [.c.] hold their
 * own ']'. */
static size_t bracket_len(const char *re)
{
	size_t i = 1;

	if (re[i] == '^')
		i++;
	if (re[i] == ']')
		i++;
	while (re[i] && re[i] != ']') {
		if (re[i] == '[' && (re[i + 1] == ':' || re[i + 1] == '=' || re[i + 1] == '.')) {
			char kind = re[i + 1];

			i += 2;
			while (re[i] && !(re[i] == kind && re[i + 1] == ']'))
				i++;
			if (!re[i])
				return 0;
			i += 2;
			continue;
		}
		i++;
	}
	return re[i] ? i + 1 : 0;
}

/* The interval {m}, {m,} or {m,n} at re: its length and how many copies of
 * the atom before it glibc makes; 0 when re is not an interval. */
static size_t interval_len(const char *re, unsigned long *copies)
{
	unsigned long m = 0, n = 0;
	bool have_n = false;
	size_t i = 1;

	/* glibc takes "{,n}" for "{0,n}". */
	if ((re[i] < '0' || re[i] > '9') && re[i] != ',')
		return 0;
	for (; re[i] >= '0' && re[i] <= '9'; i++)
		m = m > 100000 ? m : m * 10 + (unsigned long)(re[i] - '0');
	if (re[i] == ',') {
		i++;
		for (; re[i] >= '0' && re[i] <= '9'; i++) {
			n = n > 100000 ? n : n * 10 + (unsigned long)(re[i] - '0');
			have_n = true;
		}
	}
	/* "{,}" is "{0,}" to glibc, a star. */
	if (re[i] != '}')
		return 0;
	*copies = (have_n && n > m ? n : m) + 1;
	return i + 1;
}

/* Closes the last atom of a branch (its states, nesting and emptiness
 * join the branch's) and starts a new one of one state. */
static void regex_next_atom(unsigned long *total, unsigned long *last, unsigned *depth,
			    unsigned *last_depth, bool *branch_empty, bool last_empty)
{
	if (*last)
		*branch_empty &= last_empty;
	*total = sat_add(*total, *last);
	*last = 1;
	if (*last_depth > *depth)
		*depth = *last_depth;
	*last_depth = 0;
}

/* Checks what regcomp can't be trusted with: parentheses that close more
 * than they open (the anchoring wrapper would change the meaning),
 * back-references (whose matching time has no bound), and repetitions that
 * glibc would take too long or too much memory to compile. It copies an
 * atom once per '+' and per count of an interval, so nesting them
 * multiplies ("(a+)+..." doubles per level): the states are estimated per
 * group as the sum of its atoms, each times its repetitions. And a
 * repetition of a repetition of a repetition -- "((a+)*)+" or "a+*+" --
 * can take it seconds to compile whatever the states, so repetitions nest
 * at most SELECTOR_MAX_NESTING deep. 0 or -EINVAL with err set. */
static int regex_precheck(const char *re, char *err, size_t errlen)
{
	struct level {
		unsigned long total, last;  /* states: so far, of the last atom */
		unsigned depth, last_depth; /* repetition nesting: likewise */
		/* Whether the last atom, the branch so far and some earlier
		 * branch of the group can match the empty string. */
		bool last_empty, branch_empty, group_empty;
	} stack[SELECTOR_MAX_REGEX + 1], *cur = stack;
	size_t i = 0, k;
	unsigned long copies;
	unsigned anchors = 0, empty_loops = 0;

	memset(cur, 0, sizeof(*cur));
	cur->branch_empty = true;
	while (re[i]) {
		char c = re[i];
		bool repeat = false;

		switch (c) {
		case '(':
			if (cur == stack + SELECTOR_MAX_REGEX)
				goto too_deep;
			cur++;
			memset(cur, 0, sizeof(*cur));
			cur->branch_empty = true;
			i++;
			continue;
		case ')': {
			bool empty = cur->group_empty || (cur->branch_empty && cur->last_empty) ||
				     (cur->branch_empty && !cur->last);
			unsigned depth;

			if (cur == stack) {
				snprintf(err, errlen, "unmatched ')' at offset %zu of the regex",
					 i);
				return -EINVAL;
			}
			copies = sat_add(cur->total, cur->last);
			depth = cur->depth > cur->last_depth ? cur->depth : cur->last_depth;
			cur--;
			regex_next_atom(&cur->total, &cur->last, &cur->depth, &cur->last_depth,
					&cur->branch_empty, cur->last_empty);
			cur->last = copies ? copies : 1;
			cur->last_depth = depth;
			cur->last_empty = empty;
			i++;
			break;
		}
		case '|':
			regex_next_atom(&cur->total, &cur->last, &cur->depth, &cur->last_depth,
					&cur->branch_empty, cur->last_empty);
			cur->group_empty |= cur->branch_empty;
			cur->branch_empty = true;
			/* The alternation is a state of its own; the branch is
			 * empty until an atom comes. */
			cur->last_depth = 0;
			cur->last_empty = true;
			i++;
			continue;
		case '*':
		case '+':
		case '?':
			/* A loop over what can match nothing makes glibc's
			 * epsilon closures grow past the square of its states:
			 * "(){,31}*" takes 10 MB. */
			if (c != '?' && cur->last_empty && cur->last > SELECTOR_MAX_EMPTY_REPEAT)
				goto empty_repeat;
			/* ...and a few such loops in a row compile in seconds:
			 * "(d*)+" 40 times does not end. */
			if (c != '?' && cur->last_empty && ++empty_loops > SELECTOR_MAX_EMPTY_LOOPS)
				goto empty_loops;
			if (c == '+')
				cur->last = sat_mul(cur->last, 2);
			else
				cur->last_empty = true;
			repeat = true;
			i++;
			break;
		case '{':
			k = interval_len(re + i, &copies);
			if (k) {
				/* Copies of what can match nothing cost glibc the
				 * cube of their number: "(){8,484}" takes 20 s. */
				if (cur->last_empty &&
				    sat_mul(cur->last, copies) > SELECTOR_MAX_EMPTY_REPEAT)
					goto empty_repeat;
				if (cur->last_empty && ++empty_loops > SELECTOR_MAX_EMPTY_LOOPS)
					goto empty_loops;
				cur->last = sat_mul(cur->last, copies);
				cur->last_empty |= re[i + 1] == ',' || re[i + 1] == '0';
				repeat = true;
				i += k;
				break;
			}
			/* A '{' that opens no interval is a literal. */
			goto atom;
		case '[':
			k = bracket_len(re + i);
			regex_next_atom(&cur->total, &cur->last, &cur->depth, &cur->last_depth,
					&cur->branch_empty, cur->last_empty);
			cur->last_empty = false;
			i += k ? k : 1;
			break;
		case '^':
		case '$':
			/* Anchors match the empty string, and glibc's states
			 * multiply by their contexts: 290 '^' take 35 MB. The
			 * regex is anchored already; a few are plenty. */
			if (++anchors > SELECTOR_MAX_ANCHORS) {
				snprintf(err, errlen, "the regex has more than %d anchors (^ $)",
					 SELECTOR_MAX_ANCHORS);
				return -EINVAL;
			}
			regex_next_atom(&cur->total, &cur->last, &cur->depth, &cur->last_depth,
					&cur->branch_empty, cur->last_empty);
			cur->last_empty = true;
			i++;
			break;
		case '\\':
			if (re[i + 1] >= '1' && re[i + 1] <= '9') {
				snprintf(err, errlen,
					 "back-reference '\\%c' at offset %zu of the regex: not "
					 "supported",
					 re[i + 1], i);
				return -EINVAL;
			}
			i++;
			/* fallthrough */
		default:
		atom:
			regex_next_atom(&cur->total, &cur->last, &cur->depth, &cur->last_depth,
					&cur->branch_empty, cur->last_empty);
			cur->last_empty = false;
			i += re[i] ? 1 : 0;
			break;
		}
		if (repeat && ++cur->last_depth > SELECTOR_MAX_NESTING) {
			snprintf(err, errlen,
				 "the regex nests repetitions more than %d deep (offset %zu)",
				 SELECTOR_MAX_NESTING, i - 1);
			return -EINVAL;
		}
		for (struct level *l = stack; l <= cur; l++)
			if (sat_add(l->total, l->last) > SELECTOR_MAX_EXPANSION)
				goto too_big;
	}
	return 0;
too_big:
	snprintf(err, errlen, "the regex repeats too much (it would expand past %d states)",
		 SELECTOR_MAX_EXPANSION);
	return -EINVAL;
too_deep:
	snprintf(err, errlen, "the regex nests too deep");
	return -EINVAL;
empty_loops:
	snprintf(err, errlen,
		 "the regex repeats parts that can match nothing more than %d times (offset %zu)",
		 SELECTOR_MAX_EMPTY_LOOPS, i);
	return -EINVAL;
empty_repeat:
	snprintf(err, errlen,
		 "the regex repeats a part that can match nothing into more than %d states "
		 "(offset %zu)",
		 SELECTOR_MAX_EMPTY_REPEAT, i);
	return -EINVAL;
}

/* Compiles re anchored at both ends into *out (regfree() it). */
static int regex_compile(const char *re, regex_t *out, char *err, size_t errlen)
{
	size_t n = strlen(re);
	char *anchored;
	int rc;

	if (regex_precheck(re, err, errlen))
		return -EINVAL;
	rc = regcomp(out, re, REG_EXTENDED | REG_NOSUB);
	if (rc) {
		char msg[128];

		regerror(rc, out, msg, sizeof(msg));
		regfree(out);
		snprintf(err, errlen, "bad regex: %s", msg);
		return -EINVAL;
	}
	regfree(out);
	anchored = malloc(n + 5);
	if (!anchored)
		return -ENOMEM;
	snprintf(anchored, n + 5, "^(%s)$", re);
	rc = regcomp(out, anchored, REG_EXTENDED | REG_NOSUB);
	free(anchored);
	if (rc) {
		regfree(out);
		snprintf(err, errlen, "bad regex");
		return -EINVAL;
	}
	return 0;
}

bool selector_regex_match(const char *re, const char *value)
{
	char err[160];
	regex_t r;
	bool ok;

	if (regex_compile(re, &r, err, sizeof(err)))
		return false;
	ok = !regexec(&r, value, 0, NULL, 0);
	regfree(&r);
	return ok;
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
			c = *s++;
			switch (c) {
			case 'n':
				c = '\n';
				break;
			case 't':
				c = '\t';
				break;
			case 'r':
				c = '\r';
				break;
			case '\\':
			case '"':
			case '\'':
				break;
			default:
				snprintf(err, errlen, "unknown escape '\\%c' at offset %zu", c,
					 (size_t)(s - 2 - start));
				free(buf);
				return -EINVAL;
			}
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

int selector__parse(struct selector *sel, const char *text, char *err, size_t errlen)
{
	const char *s, *start = text;
	char *value = NULL, name[STORE_MAX_LABEL_NAME + 1];
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
			const char *at = s;
			enum store_match op;
			size_t nlen = 0;

			if (!is_name_start(*s)) {
				snprintf(err, errlen,
					 *s ? "expected a label name at offset %zu"
					    : "unexpected end at offset %zu: expected a label name "
					      "or '}'",
					 (size_t)(s - start));
				return -EINVAL;
			}
			while (is_name_char(s[nlen]))
				nlen++;
			if (nlen > STORE_MAX_LABEL_NAME) {
				snprintf(err, errlen,
					 "label name at offset %zu is longer than %d bytes",
					 (size_t)(at - start), STORE_MAX_LABEL_NAME);
				return -EINVAL;
			}
			memcpy(name, s, nlen);
			name[nlen] = '\0';
			s = skip_space(s + nlen);
			if (s[0] == '=' && s[1] == '~') {
				op = STORE_RE;
				s += 2;
			} else if (s[0] == '!' && s[1] == '~') {
				op = STORE_NRE;
				s += 2;
			} else if (s[0] == '!' && s[1] == '=') {
				op = STORE_NE;
				s += 2;
			} else if (s[0] == '=') {
				op = STORE_EQ;
				s += 1;
			} else {
				snprintf(err, errlen,
					 "expected =, !=, =~ or !~ after '%s' at offset %zu", name,
					 (size_t)(s - start));
				return -EINVAL;
			}
			s = skip_space(s);
			if (*s != '"' && *s != '\'' && *s != '`') {
				snprintf(err, errlen,
					 "expected a quoted value for '%s' at offset %zu", name,
					 (size_t)(s - start));
				return -EINVAL;
			}
			at = s;
			rc = parse_quoted(&s, start, &value, err, errlen);
			if (rc)
				return rc;
			if (strlen(value) > STORE_MAX_MATCHER_VALUE) {
				snprintf(err, errlen,
					 "the value of '%s' at offset %zu is longer than %d bytes",
					 name, (size_t)(at - start), STORE_MAX_MATCHER_VALUE);
				rc = -EINVAL;
				goto cleanup;
			}
			if (!utf8_valid(value, strlen(value))) {
				snprintf(err, errlen,
					 "the value of '%s' at offset %zu is not UTF-8", name,
					 (size_t)(at - start));
				rc = -EINVAL;
				goto cleanup;
			}
			if (op == STORE_RE || op == STORE_NRE) {
				char rerr[160];
				regex_t re;

				if (strlen(value) > SELECTOR_MAX_REGEX) {
					snprintf(err, errlen,
						 "the regex of '%s' at offset %zu is longer than "
						 "%d bytes",
						 name, (size_t)(at - start), SELECTOR_MAX_REGEX);
					rc = -EINVAL;
					goto cleanup;
				}
				rc = regex_compile(value, &re, rerr, sizeof(rerr));
				if (rc) {
					if (rc == -EINVAL)
						snprintf(err, errlen, "%s for '%s' at offset %zu",
							 rerr, name, (size_t)(at - start));
					goto cleanup;
				}
				regfree(&re);
			}
			if (sel->n >= SELECTOR_MAX_MATCHERS) {
				snprintf(err, errlen, "more than %d matchers",
					 SELECTOR_MAX_MATCHERS);
				rc = -EINVAL;
				goto cleanup;
			}
			rc = selector__add(sel, name, op, value);
			if (rc)
				goto cleanup;
			free(value);
			value = NULL;
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
cleanup:
	free(value);
	return rc;
}

int parse_duration_ms(const char *s, int64_t *out_ms)
{
	static const struct {
		const char *unit;
		int64_t ms;
	} units[] = {{"ms", 1},	     {"s", 1000},     {"m", 60000},
		     {"h", 3600000}, {"d", 86400000}, {"w", 604800000}};
	int64_t total = 0;
	int last = -1;

	if (!s || !*s)
		return -EINVAL;
	if (!strcmp(s, "0")) {
		*out_ms = 0;
		return 0;
	}
	while (*s) {
		int64_t n = 0, v;
		int u, found = -1;

		if (*s < '0' || *s > '9')
			return -EINVAL;
		while (*s >= '0' && *s <= '9') {
			if (n > (INT64_MAX - 9) / 10)
				return -EINVAL;
			n = n * 10 + (*s++ - '0');
		}
		/* "ms" before "m" so that 5ms is not 5 minutes and an 's'. */
		for (u = 0; u < (int)(sizeof(units) / sizeof(units[0])); u++) {
			size_t ul = strlen(units[u].unit);

			if (!strncmp(s, units[u].unit, ul) &&
			    (found < 0 || ul > strlen(units[found].unit)))
				found = u;
		}
		if (found < 0)
			return -EINVAL;
		/* Units from the largest down, each once. */
		if (last >= 0 && units[found].ms >= units[last].ms)
			return -EINVAL;
		s += strlen(units[found].unit);
		if (__builtin_mul_overflow(n, units[found].ms, &v) ||
		    __builtin_add_overflow(total, v, &total))
			return -EINVAL;
		last = found;
	}
	*out_ms = total;
	return 0;
}

int parse_time_ms(const char *s, enum time_unit unit, int64_t now, int64_t *out_ms, char *err,
		  size_t errlen)
{
	int64_t v = 0, d;
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
		if (s[3] == '-' && !parse_duration_ms(s + 4, &d) && d <= now) {
			*out_ms = now - d;
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
		if (v > INT64_MAX / 1000)
			goto bad;
		v *= 1000;
	}
	*out_ms = v;
	return 0;
bad:
	snprintf(err, errlen, "bad time '%.40s': expected now, now-DURATION (s m h d) or %s", s,
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
	if (!rc)
		rc = dot ? lset__setn(out, "type", dot + 1, (size_t)(app_end - dot - 1))
			 : lset__set(out, "type", "cpu");
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
		if (!label_name_valid(key)) {
			snprintf(err, errlen,
				 "label name at offset %zu of the name is not "
				 "[A-Za-z_][A-Za-z0-9_]*",
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
