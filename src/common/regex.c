/* regex.c: the one guard in front of glibc's regcomp for regexes from
 * outside (selectors, store matchers, alert rules), see regex.h. The limits
 * come from fuzzing (tests/fuzz/crashes/README): each names an input that
 * cost glibc seconds or megabytes before it was refused. */
#include "common/regex.h"

#include <errno.h>
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
 * at most REGEX_MAX_NESTING deep. 0 or -EINVAL with err set. */
static int regex_precheck(const char *re, char *err, size_t errlen)
{
	struct level {
		unsigned long total, last;  /* states: so far, of the last atom */
		unsigned depth, last_depth; /* repetition nesting: likewise */
		/* Whether the last atom, the branch so far and some earlier
		 * branch of the group can match the empty string. */
		bool last_empty, branch_empty, group_empty;
	} stack[REGEX_MAX_GROUPS + 1], *cur = stack;
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
			if (cur == stack + REGEX_MAX_GROUPS)
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
			if (c != '?' && cur->last_empty && cur->last > REGEX_MAX_EMPTY_REPEAT)
				goto empty_repeat;
			/* ...and a few such loops in a row compile in seconds:
			 * "(d*)+" 40 times does not end. */
			if (c != '?' && cur->last_empty && ++empty_loops > REGEX_MAX_EMPTY_LOOPS)
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
				    sat_mul(cur->last, copies) > REGEX_MAX_EMPTY_REPEAT)
					goto empty_repeat;
				if (cur->last_empty && ++empty_loops > REGEX_MAX_EMPTY_LOOPS)
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
			if (++anchors > REGEX_MAX_ANCHORS) {
				snprintf(err, errlen, "the regex has more than %d anchors (^ $)",
					 REGEX_MAX_ANCHORS);
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
		if (repeat && ++cur->last_depth > REGEX_MAX_NESTING) {
			snprintf(err, errlen,
				 "the regex nests repetitions more than %d deep (offset %zu)",
				 REGEX_MAX_NESTING, i - 1);
			return -EINVAL;
		}
		for (struct level *l = stack; l <= cur; l++)
			if (sat_add(l->total, l->last) > REGEX_MAX_EXPANSION)
				goto too_big;
	}
	return 0;
too_big:
	snprintf(err, errlen, "the regex repeats too much (it would expand past %d states)",
		 REGEX_MAX_EXPANSION);
	return -EINVAL;
too_deep:
	snprintf(err, errlen, "the regex nests too deep");
	return -EINVAL;
empty_loops:
	snprintf(err, errlen,
		 "the regex repeats parts that can match nothing more than %d times (offset %zu)",
		 REGEX_MAX_EMPTY_LOOPS, i);
	return -EINVAL;
empty_repeat:
	snprintf(err, errlen,
		 "the regex repeats a part that can match nothing into more than %d states "
		 "(offset %zu)",
		 REGEX_MAX_EMPTY_REPEAT, i);
	return -EINVAL;
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
