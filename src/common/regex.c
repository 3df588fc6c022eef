/* regex.c: the one guard in front of glibc's regcomp for regexes from
 * outside (selectors, store matchers, alert rules), see regex.h. The limits
 * come from fuzzing (tests/fuzz/crashes/README): each names an input that
 * cost glibc seconds or megabytes before it was refused. */
#include "common/regex.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Saturating a * b and a + b, capped past the expansion limit. */
static unsigned long sat_mul(unsigned long a, unsigned long b)
{
	return a && b > (REGEX_MAX_EXPANSION + 1) / a ? REGEX_MAX_EXPANSION + 1 : a * b;
}

static unsigned long sat_add(unsigned long a, unsigned long b)
{
	return a + b > REGEX_MAX_EXPANSION + 1 ? REGEX_MAX_EXPANSION + 1 : a + b;
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

/* One nesting level of the regex being checked: a group, or the whole. */
struct rx_level {
	unsigned long total, last;  /* states: so far, of the last atom */
	unsigned depth, last_depth; /* repetition nesting: likewise */
	/* Whether the last atom, the branch so far and some earlier branch of
	 * the group can match the empty string. */
	bool last_empty, branch_empty, group_empty;
};

struct rx_check {
	const char *re;
	size_t i; /* where the scan is */
	struct rx_level stack[REGEX_MAX_GROUPS + 1], *cur;
	unsigned anchors, empty_loops;
	char *err;
	size_t errlen;
};

static int rx_fail(struct rx_check *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int rx_fail(struct rx_check *c, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(c->err, c->errlen, fmt, ap);
	va_end(ap);
	return -EINVAL;
}

static void level_reset(struct rx_level *l)
{
	memset(l, 0, sizeof(*l));
	l->branch_empty = true;
}

/* Closes the last atom of the current branch (its states, nesting and
 * emptiness join the branch's) and starts a new one of one state. */
static void next_atom(struct rx_level *l)
{
	if (l->last)
		l->branch_empty &= l->last_empty;
	l->total = sat_add(l->total, l->last);
	l->last = 1;
	if (l->last_depth > l->depth)
		l->depth = l->last_depth;
	l->last_depth = 0;
}

/* ')': the group becomes the last atom of the level around it. */
static int close_group(struct rx_check *c)
{
	struct rx_level *g = c->cur;
	bool empty = g->group_empty || (g->branch_empty && (g->last_empty || !g->last));
	unsigned long copies = sat_add(g->total, g->last);
	unsigned depth = g->depth > g->last_depth ? g->depth : g->last_depth;

	if (g == c->stack)
		return rx_fail(c, "unmatched ')' at offset %zu of the regex", c->i);
	c->cur--;
	next_atom(c->cur);
	c->cur->last = copies ? copies : 1;
	c->cur->last_depth = depth;
	c->cur->last_empty = empty;
	return 0;
}

/* A repetition of the last atom into copies of it (may_empty: the
 * repetition can match nothing, as '*', '?' and {0,n} can). */
static int repeat(struct rx_check *c, unsigned long copies, bool loop, bool may_empty)
{
	struct rx_level *l = c->cur;

	/* A loop over what can match nothing makes glibc's epsilon closures
	 * grow past the square of its states ("(){,31}*" takes 10 MB), and
	 * copies of it cost the cube of their number ("(){8,484}" 20 s). */
	if (loop && l->last_empty && sat_mul(l->last, copies) > REGEX_MAX_EMPTY_REPEAT)
		return rx_fail(c,
			       "the regex repeats a part that can match nothing into more than %d "
			       "states (offset %zu)",
			       REGEX_MAX_EMPTY_REPEAT, c->i);
	/* ...and a few such loops in a row compile in seconds: "(d*)+" 40
	 * times does not end. */
	if (loop && l->last_empty && ++c->empty_loops > REGEX_MAX_EMPTY_LOOPS)
		return rx_fail(c,
			       "the regex repeats parts that can match nothing more than %d times "
			       "(offset %zu)",
			       REGEX_MAX_EMPTY_LOOPS, c->i);
	l->last = sat_mul(l->last, copies);
	l->last_empty |= may_empty;
	if (++l->last_depth > REGEX_MAX_NESTING)
		return rx_fail(c, "the regex nests repetitions more than %d deep (offset %zu)",
			       REGEX_MAX_NESTING, c->i);
	return 0;
}

/* One token at c->i, which it passes. */
static int token(struct rx_check *c)
{
	const char *re = c->re;
	char ch = re[c->i];
	unsigned long copies;
	size_t k;

	switch (ch) {
	case ')':
		if (close_group(c))
			return -EINVAL;
		c->i++;
		return 0;
	case '*':
	case '+':
	case '?':
		c->i++;
		return repeat(c, ch == '+' ? 2 : 1, ch != '?', ch != '+');
	case '{':
		k = interval_len(re + c->i, &copies);
		/* A '{' that opens no interval is a literal. */
		if (k) {
			bool may_empty = re[c->i + 1] == ',' || re[c->i + 1] == '0';

			c->i += k;
			return repeat(c, copies, true, may_empty);
		}
		break;
	case '[':
		k = bracket_len(re + c->i);
		next_atom(c->cur);
		c->cur->last_empty = false;
		c->i += k ? k : 1;
		return 0;
	case '^':
	case '$':
		/* Anchors match the empty string, and glibc's states multiply
		 * by their contexts: 290 '^' take 35 MB. The regex is anchored
		 * already; a few are plenty. */
		if (++c->anchors > REGEX_MAX_ANCHORS)
			return rx_fail(c,
				       "the regex has more than %d anchors (^ $ \\b \\B \\< \\>)",
				       REGEX_MAX_ANCHORS);
		next_atom(c->cur);
		c->cur->last_empty = true;
		c->i++;
		return 0;
	case '\\':
		if (re[c->i + 1] >= '1' && re[c->i + 1] <= '9')
			return rx_fail(c,
				       "back-reference '\\%c' at offset %zu of the regex: not "
				       "supported",
				       re[c->i + 1], c->i);
		/* glibc's word boundaries and buffer ends are anchors too:
		 * they match the empty string ("(d|\\b){,26}" took 52 MB). */
		if (re[c->i + 1] && strchr("bB<>`'", re[c->i + 1])) {
			if (++c->anchors > REGEX_MAX_ANCHORS)
				return rx_fail(
					c,
					"the regex has more than %d anchors (^ $ \\b \\B \\< "
					"\\>)",
					REGEX_MAX_ANCHORS);
			next_atom(c->cur);
			c->cur->last_empty = true;
			c->i += 2;
			return 0;
		}
		c->i++;
		break;
	}
	next_atom(c->cur);
	c->cur->last_empty = false;
	c->i += re[c->i] ? 1 : 0;
	return 0;
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
 * at most REGEX_MAX_NESTING deep. 0 or -EINVAL with err set. */
static int regex_precheck(const char *re, char *err, size_t errlen)
{
	struct rx_check c = {.re = re, .err = err, .errlen = errlen};

	c.cur = c.stack;
	level_reset(c.cur);
	while (re[c.i]) {
		if (re[c.i] == '(') {
			if (c.cur == c.stack + REGEX_MAX_GROUPS)
				return rx_fail(&c, "the regex nests too deep");
			level_reset(++c.cur);
			c.i++;
			continue;
		}
		if (re[c.i] == '|') {
			next_atom(c.cur);
			c.cur->group_empty |= c.cur->branch_empty;
			c.cur->branch_empty = true;
			/* The alternation is a state of its own; the branch is
			 * empty until an atom comes. */
			c.cur->last_depth = 0;
			c.cur->last_empty = true;
			c.i++;
			continue;
		}
		if (token(&c))
			return -EINVAL;
		for (struct rx_level *l = c.stack; l <= c.cur; l++)
			if (sat_add(l->total, l->last) > REGEX_MAX_EXPANSION)
				return rx_fail(
					&c,
					"the regex repeats too much (it would expand past %d "
					"states)",
					REGEX_MAX_EXPANSION);
	}
	return 0;
}

int regex_check(const char *re, char *err, size_t errlen)
{
	size_t n = strlen(re);

	if (n > REGEX_MAX_LEN) {
		snprintf(err, errlen, "the regex is longer than %d bytes", REGEX_MAX_LEN);
		return -EINVAL;
	}
	return regex_precheck(re, err, errlen);
}

int regex_compile_anchored(const char *re, regex_t *out, char *err, size_t errlen)
{
	size_t n = strlen(re);
	char *anchored;
	int rc;

	if (regex_check(re, err, errlen))
		return -EINVAL;
	/* On its own first: "a)|(b" compiles once wrapped in "^(...)$", as
	 * "^(a)|(b)$", which means something else. */
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
	if (!anchored) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
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

bool regex_match_anchored(const char *re, const char *value)
{
	char err[160];
	regex_t r;
	bool ok;

	if (regex_compile_anchored(re, &r, err, sizeof(err)))
		return false;
	ok = !regexec(&r, value, 0, NULL, 0);
	regfree(&r);
	return ok;
}
