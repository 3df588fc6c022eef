/* expr.c: the lexer and parser of the alert rules' PromQL subset --
 * selectors with label matchers, + - * / and comparisons between series and
 * numbers or between series with one-to-one or group_left/group_right
 * matching, and the sum, min, max, avg and count aggregations. A rule's
 * expression is parsed once when the rule file loads (rules.c), so that a
 * mistake is a load error naming its column, and what PromQL has and the
 * subset lacks is refused by name. expr_eval.c evaluates the tree every tick;
 * the grammar is in docs/alerts.md. */
#include "alerts/alerts_internal.h"

#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/regex.h"
#include "common/xalloc.h"

/* ---- lexer ---- */

enum tok {
	T_EOF,
	T_IDENT,
	T_NUM,
	T_STR,
	T_LBRACE,
	T_RBRACE,
	T_LPAREN,
	T_RPAREN,
	T_LBRACKET,
	T_COMMA,
	T_ASSIGN, /* = */
	T_NEQ,	  /* != */
	T_RE,	  /* =~ */
	T_NRE,	  /* !~ */
	T_EQ,	  /* == */
	T_GT,
	T_GE,
	T_LT,
	T_LE,
	T_ADD,
	T_SUB,
	T_MUL,
	T_DIV,
	T_OTHER,
};

struct parser {
	const char *src;
	int pos;    /* next character */
	enum tok t; /* current token */
	int tpos;   /* its offset */
	int tlen;   /* its length in the source */
	char *text; /* T_IDENT, T_STR: its text (owned) */
	double num; /* T_NUM */
	char *err;
	size_t errlen;
	int errpos;
	bool failed;
};

static bool fail_at(struct parser *p, int pos, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static bool fail_at(struct parser *p, int pos, const char *fmt, ...)
{
	va_list ap;

	if (p->failed)
		return false;
	p->failed = true;
	p->errpos = pos;
	va_start(ap, fmt);
	vsnprintf(p->err, p->errlen, fmt, ap);
	va_end(ap);
	return false;
}

/* The current token as the user wrote it, for messages. */
static const char *tok_str(struct parser *p, char *buf, size_t len)
{
	int n = p->tlen > 24 ? 24 : p->tlen;

	if (p->t == T_EOF)
		return "end of the expression";
	snprintf(buf, len, "`%.*s%s`", n, p->src + p->tpos, n < p->tlen ? "..." : "");
	return buf;
}

static bool unexpected(struct parser *p, const char *wanted)
{
	char b[40];

	return fail_at(p, p->tpos, "unexpected %s: expected %s", tok_str(p, b, sizeof(b)), wanted);
}

static bool is_ident_start(int c)
{
	return isalpha(c) || c == '_' || c == ':';
}

static bool is_ident_char(int c)
{
	return isalnum(c) || c == '_' || c == ':';
}

static bool lex_string(struct parser *p)
{
	const char *s = p->src;
	char q = s[p->pos];
	size_t cap = 16, n = 0;
	char *out = xmalloc(cap);
	int i = p->pos + 1;

	for (;; i++) {
		char c = s[i];

		if (!c) {
			free(out);
			return fail_at(p, p->tpos, "unterminated string");
		}
		if (c == q)
			break;
		if (c == '\\' && q != '`') {
			switch (s[++i]) {
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
				c = '\\';
				break;
			case '"':
				c = '"';
				break;
			case '\'':
				c = '\'';
				break;
			default:
				free(out);
				return fail_at(p, i - 1, "unknown escape `\\%c` in string",
					       s[i] ? s[i] : ' ');
			}
		}
		if (n + 2 > cap)
			out = xrealloc(out, cap *= 2);
		out[n++] = c;
	}
	out[n] = '\0';
	p->text = out;
	p->pos = i + 1;
	return true;
}

/* The current token is t, from p->tpos up to end, where the next starts. */
static bool token(struct parser *p, enum tok t, int end)
{
	p->t = t;
	p->tlen = end - p->tpos;
	p->pos = end;
	return true;
}

/* A number at p->pos: digits, a fraction, an exponent, and no unit. */
static bool lex_number(struct parser *p)
{
	const char *s = p->src;
	int i = p->pos;

	while (isdigit((unsigned char)s[i]))
		i++;
	if (s[i] == '.')
		for (i++; isdigit((unsigned char)s[i]); i++)
			;
	if ((s[i] == 'e' || s[i] == 'E') &&
	    (isdigit((unsigned char)s[i + 1]) ||
	     ((s[i + 1] == '+' || s[i + 1] == '-') && isdigit((unsigned char)s[i + 2])))) {
		for (i += 2; isdigit((unsigned char)s[i]); i++)
			;
	}
	if (is_ident_char((unsigned char)s[i]))
		return fail_at(p, p->pos,
			       "bad number `%.*s`: durations belong in `for:`, and "
			       "numbers take no unit",
			       (int)(i - p->pos + 1), s + p->pos);
	p->num = strtod(s + p->pos, NULL);
	return token(p, T_NUM, i);
}

/* A name at p->pos, or Inf and NaN (numbers). */
static bool lex_word(struct parser *p)
{
	const char *s = p->src;
	int i = p->pos;

	while (is_ident_char((unsigned char)s[i]))
		i++;
	p->text = xstrndup(s + p->pos, i - p->pos);
	if (strcasecmp(p->text, "inf") && strcasecmp(p->text, "nan"))
		return token(p, T_IDENT, i);
	p->num = tolower((unsigned char)p->text[0]) == 'i' ? INFINITY : NAN;
	return token(p, T_NUM, i);
}

/* An operator or a bracket at p->pos; the longest first. */
static bool lex_operator(struct parser *p)
{
	static const struct {
		const char *text;
		enum tok t;
	} ops[] = {
		{"==", T_EQ},	 {"!=", T_NEQ},	    {"=~", T_RE},    {"!~", T_NRE},
		{">=", T_GE},	 {"<=", T_LE},	    {"=", T_ASSIGN}, {">", T_GT},
		{"<", T_LT},	 {"+", T_ADD},	    {"-", T_SUB},    {"*", T_MUL},
		{"/", T_DIV},	 {"{", T_LBRACE},   {"}", T_RBRACE}, {"(", T_LPAREN},
		{")", T_RPAREN}, {"[", T_LBRACKET}, {",", T_COMMA},
	};

	for (size_t i = 0; i < ARRAY_SIZE(ops); i++) {
		size_t n = strlen(ops[i].text);

		if (!strncmp(p->src + p->pos, ops[i].text, n))
			return token(p, ops[i].t, p->pos + n);
	}
	token(p, T_OTHER, p->pos + 1);
	return fail_at(p, p->tpos, "unexpected character `%c`", p->src[p->tpos]);
}

/* Reads the next token into p->t. */
static bool next(struct parser *p)
{
	const char *s = p->src;
	char c;

	free(p->text);
	p->text = NULL;
	if (p->failed)
		return false;
	while (isspace((unsigned char)s[p->pos]))
		p->pos++;
	p->tpos = p->pos;
	c = s[p->pos];
	if (!c)
		return token(p, T_EOF, p->pos);
	if (isdigit((unsigned char)c) || (c == '.' && isdigit((unsigned char)s[p->pos + 1])))
		return lex_number(p);
	if (is_ident_start((unsigned char)c))
		return lex_word(p);
	if (c == '"' || c == '\'' || c == '`') {
		if (!lex_string(p))
			return false;
		return token(p, T_STR, p->pos);
	}
	return lex_operator(p);
}

/* The next non-blank character after the current token. */
static char peek_char(struct parser *p)
{
	int i = p->pos;

	while (isspace((unsigned char)p->src[i]))
		i++;
	return p->src[i];
}

/* Whether the word after the current token is w. */
static bool peek_word(struct parser *p, const char *w)
{
	int i = p->pos;
	size_t n = strlen(w);

	while (isspace((unsigned char)p->src[i]))
		i++;
	return !strncmp(p->src + i, w, n) && !is_ident_char((unsigned char)p->src[i + n]);
}

/* ---- parser ---- */

static struct alert_expr *new_expr(enum expr_kind kind, int pos)
{
	struct alert_expr *x = xcalloc(1, sizeof(*x));

	x->kind = kind;
	x->pos = pos;
	return x;
}

static void free_strv(char **v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(v[i]);
	free(v);
}

void alert_expr__free(struct alert_expr *x)
{
	if (!x)
		return;
	free(x->name);
	for (size_t i = 0; i < x->nm; i++) {
		free(x->m[i].label);
		free(x->m[i].value);
		if (x->m[i].op == MATCH_RE || x->m[i].op == MATCH_NRE)
			regfree(&x->m[i].re);
	}
	free(x->m);
	free_strv(x->labels, x->nlabels);
	free_strv(x->include, x->ninclude);
	alert_expr__free(x->l);
	alert_expr__free(x->r);
	alert_expr__free(x->arg);
	free(x);
}

static const char *const aggregations[] = {"sum", "min", "max", "avg", "count"};
static const char *const keywords[] = {
	"by",  "without", "on",	    "ignoring", "group_left", "group_right",
	"and", "or",	  "unless", "bool",	"offset",     "atan2",
};

static struct alert_expr *parse_expr(struct parser *p);

/* item (`,` item)* [`,`] up to the token close, read by item; the current
 * token is the one after the opening bracket. sep names what may follow an
 * item, for the message. */
static bool parse_list(struct parser *p, enum tok close, const char *sep,
		       bool (*item)(struct parser *p, void *ctx), void *ctx)
{
	while (p->t != close) {
		if (!item(p, ctx))
			return false;
		if (p->t == T_COMMA) {
			if (!next(p))
				return false;
		} else if (p->t != close) {
			return unexpected(p, sep);
		}
	}
	return next(p);
}

struct label_list {
	char ***v;
	size_t *n, cap;
};

static bool parse_label(struct parser *p, void *ctx)
{
	struct label_list *ll = ctx;

	if (p->t != T_IDENT || strchr(p->text, ':'))
		return unexpected(p, "a label name");
	xgrow((void **)ll->v, &ll->cap, *ll->n + 1, sizeof(**ll->v));
	(*ll->v)[(*ll->n)++] = xstrdup(p->text);
	return next(p);
}

/* ( label, label, ... ) into *v, *n; the current token is `(`. */
static bool parse_label_list(struct parser *p, char ***v, size_t *n)
{
	struct label_list ll = {.v = v, .n = n};

	if (p->t != T_LPAREN)
		return unexpected(p, "`(` and a list of labels");
	return next(p) && parse_list(p, T_RPAREN, "`,` or `)`", parse_label, &ll);
}

struct matcher_list {
	struct alert_expr *x;
	size_t cap;
};

/* label op "value" into the selector; the current token is the label. */
static bool parse_matcher(struct parser *p, void *ctx)
{
	static const struct {
		enum tok t;
		enum match_op op;
	} ops[] = {
		{T_ASSIGN, MATCH_EQ},
		{T_NEQ, MATCH_NE},
		{T_RE, MATCH_RE},
		{T_NRE, MATCH_NRE},
	};
	struct matcher_list *ml = ctx;
	struct alert_matcher *m;
	char msg[160];
	size_t k;

	if (p->t != T_IDENT || strchr(p->text, ':'))
		return unexpected(p, "a label name");
	xgrow((void **)&ml->x->m, &ml->cap, ml->x->nm + 1, sizeof(*ml->x->m));
	m = &ml->x->m[ml->x->nm++];
	memset(m, 0, sizeof(*m)); /* MATCH_EQ: no regex to free until one is compiled */
	m->label = xstrdup(p->text);
	if (!next(p))
		return false;
	for (k = 0; k < ARRAY_SIZE(ops) && ops[k].t != p->t; k++)
		;
	if (k == ARRAY_SIZE(ops))
		return p->t == T_EQ
			       ? fail_at(p, p->tpos, "unexpected `==` in a label matcher: use `=`")
			       : unexpected(p, "`=`, `!=`, `=~` or `!~`");
	if (!next(p))
		return false;
	if (p->t != T_STR)
		return unexpected(p, "a quoted label value");
	m->value = xstrdup(p->text);
	/* PromQL anchors regular expressions at both ends. */
	if ((ops[k].op == MATCH_RE || ops[k].op == MATCH_NRE) &&
	    regex_compile_anchored(m->value, &m->re, msg, sizeof(msg)))
		return fail_at(p, p->tpos, "bad regular expression \"%s\": %s", m->value, msg);
	m->op = ops[k].op;
	return next(p);
}

/* name{matchers}; the current token is the name. */
static struct alert_expr *parse_selector(struct parser *p)
{
	struct alert_expr *x = new_expr(EXPR_SEL, p->tpos);
	struct matcher_list ml = {.x = x};

	x->name = xstrdup(p->text);
	if (!next(p))
		goto fail;
	if (p->t == T_LBRACE &&
	    !(next(p) && parse_list(p, T_RBRACE, "`,` or `}`", parse_matcher, &ml)))
		goto fail;
	if (p->t == T_LBRACKET) {
		fail_at(p, p->tpos,
			"range selectors (`[5m]`) are not supported: rules see current values; "
			"use `for:` to require a condition to hold");
		goto fail;
	}
	return x;
fail:
	alert_expr__free(x);
	return NULL;
}

static bool parse_grouping(struct parser *p, struct alert_expr *x)
{
	bool without = p->t == T_IDENT && !strcmp(p->text, "without");

	if (x->labels || x->without) {
		fail_at(p, p->tpos, "an aggregation takes one `by` or `without` clause");
		return false;
	}
	x->without = without;
	if (!next(p))
		return false;
	if (!parse_label_list(p, &x->labels, &x->nlabels))
		return false;
	if (!x->labels && !without)
		x->labels = xcalloc(1, sizeof(char *)); /* `by ()`: one group */
	return true;
}

static bool is_grouping(struct parser *p)
{
	return p->t == T_IDENT && (!strcmp(p->text, "by") || !strcmp(p->text, "without"));
}

/* sum by (l) (expr) | sum (expr) by (l); the current token is the operator. */
static struct alert_expr *parse_aggregation(struct parser *p, enum agg_op op)
{
	struct alert_expr *x = new_expr(EXPR_AGG, p->tpos);

	x->agg = op;
	if (!next(p))
		goto fail;
	if (is_grouping(p) && !parse_grouping(p, x))
		goto fail;
	if (p->t != T_LPAREN) {
		unexpected(p, "`(`");
		goto fail;
	}
	if (!next(p))
		goto fail;
	x->arg = parse_expr(p);
	if (!x->arg)
		goto fail;
	if (p->t == T_COMMA) {
		fail_at(p, p->tpos,
			"aggregations with a parameter (topk, quantile) are not supported");
		goto fail;
	}
	if (p->t != T_RPAREN) {
		unexpected(p, "`)`");
		goto fail;
	}
	if (!next(p))
		goto fail;
	if (is_grouping(p) && !parse_grouping(p, x))
		goto fail;
	if (x->arg->scalar) {
		fail_at(p, x->arg->pos, "%s() needs series, not a number", aggregations[op]);
		goto fail;
	}
	return x;
fail:
	alert_expr__free(x);
	return NULL;
}

/* ( expr ); the current token is `(`. */
static struct alert_expr *parse_paren(struct parser *p)
{
	int pos = p->tpos;
	struct alert_expr *x;

	if (!next(p))
		return NULL;
	x = parse_expr(p);
	if (!x)
		return NULL;
	if (p->t != T_RPAREN) {
		fail_at(p, p->t == T_EOF ? pos : p->tpos,
			p->t == T_EOF ? "unclosed `(`" : "expected `)`");
		goto fail;
	}
	if (!next(p))
		goto fail;
	return x;
fail:
	alert_expr__free(x);
	return NULL;
}

/* An aggregation or a selector; the current token is a name. What PromQL
 * has and the subset lacks is named as such. */
static struct alert_expr *parse_name(struct parser *p)
{
	for (size_t i = 0; i < ARRAY_SIZE(aggregations); i++)
		if (!strcmp(p->text, aggregations[i]) &&
		    (peek_char(p) == '(' || peek_word(p, "by") || peek_word(p, "without")))
			return parse_aggregation(p, (enum agg_op)i);
	for (size_t i = 0; i < ARRAY_SIZE(keywords); i++)
		if (!strcmp(p->text, keywords[i])) {
			fail_at(p, p->tpos, "`%s` is not supported here (see docs/alerts.md)",
				p->text);
			return NULL;
		}
	if (peek_char(p) == '(') {
		fail_at(p, p->tpos,
			"function `%s` is not supported: only sum, min, max, avg and "
			"count aggregations",
			p->text);
		return NULL;
	}
	return parse_selector(p);
}

static struct alert_expr *parse_primary(struct parser *p)
{
	struct alert_expr *x;

	switch (p->t) {
	case T_NUM:
		x = new_expr(EXPR_NUM, p->tpos);
		x->scalar = true;
		x->num = p->num;
		if (!next(p)) {
			alert_expr__free(x);
			return NULL;
		}
		return x;
	case T_LPAREN:
		return parse_paren(p);
	case T_LBRACE:
		fail_at(p, p->tpos, "a selector needs a metric name before `{`");
		return NULL;
	case T_IDENT:
		return parse_name(p);
	default:
		unexpected(p, "a metric, a number or `(`");
		return NULL;
	}
}

static struct alert_expr *parse_unary(struct parser *p)
{
	if (p->t == T_SUB || p->t == T_ADD) {
		bool neg = p->t == T_SUB;
		int pos = p->tpos;
		struct alert_expr *x, *arg;

		if (!next(p))
			return NULL;
		arg = parse_unary(p);
		if (!arg || !neg)
			return arg;
		if (arg->kind == EXPR_NUM) {
			arg->num = -arg->num;
			arg->pos = pos;
			return arg;
		}
		x = new_expr(EXPR_NEG, pos);
		x->scalar = arg->scalar;
		x->arg = arg;
		return x;
	}
	return parse_primary(p);
}

/* on(...)/ignoring(...) and group_left/group_right after a binary operator. */
static bool parse_matching(struct parser *p, struct alert_expr *x)
{
	if (p->t == T_IDENT && !strcmp(p->text, "bool"))
		return fail_at(p, p->tpos,
			       "`bool` is not supported: an alert fires for the series a "
			       "comparison keeps");
	if (p->t != T_IDENT || (strcmp(p->text, "on") && strcmp(p->text, "ignoring")) ||
	    peek_char(p) != '(')
		return true;
	x->matching = true;
	x->on = !strcmp(p->text, "on");
	if (!next(p) || !parse_label_list(p, &x->labels, &x->nlabels))
		return false;
	if (p->t == T_IDENT &&
	    (!strcmp(p->text, "group_left") || !strcmp(p->text, "group_right"))) {
		x->card = p->text[6] == 'l' ? CARD_MANY_TO_ONE : CARD_ONE_TO_MANY;
		if (!next(p))
			return false;
		if (p->t == T_LPAREN && !parse_label_list(p, &x->include, &x->ninclude))
			return false;
	}
	return true;
}

/* The binary operators by precedence, loosest first; all left-associative. */
#define PREC_COMPARISON 1
#define PREC_ADD 2
#define PREC_MUL 3

static const struct {
	enum tok t;
	enum bin_op op;
	int prec;
} binary_ops[] = {
	{T_EQ, OP_EQ, PREC_COMPARISON}, {T_NEQ, OP_NE, PREC_COMPARISON},
	{T_GT, OP_GT, PREC_COMPARISON}, {T_GE, OP_GE, PREC_COMPARISON},
	{T_LT, OP_LT, PREC_COMPARISON}, {T_LE, OP_LE, PREC_COMPARISON},
	{T_ADD, OP_ADD, PREC_ADD},	{T_SUB, OP_SUB, PREC_ADD},
	{T_MUL, OP_MUL, PREC_MUL},	{T_DIV, OP_DIV, PREC_MUL},
};

static struct alert_expr *parse_binary(struct parser *p, int prec);

/* l op operand, where the operand binds tighter than prec; the current
 * token is op. */
static struct alert_expr *binary(struct parser *p, enum bin_op op, int prec, struct alert_expr *l)
{
	int pos = p->tpos;
	struct alert_expr *x = new_expr(EXPR_BIN, pos);

	x->op = op;
	x->l = l;
	if (!next(p) || !parse_matching(p, x))
		goto fail;
	x->r = parse_binary(p, prec + 1);
	if (!x->r)
		goto fail;
	x->scalar = l->scalar && x->r->scalar;
	if (x->scalar && bin_op_is_comparison(op)) {
		fail_at(p, pos, "comparison of two numbers: one side must be a metric");
		goto fail;
	}
	if (x->matching && (l->scalar || x->r->scalar)) {
		fail_at(p, pos, "on()/ignoring() apply between two sets of series, not a number");
		goto fail;
	}
	return x;
fail:
	x->l = NULL;
	alert_expr__free(x);
	return NULL;
}

/* The operators of precedence prec and tighter. */
static struct alert_expr *parse_binary(struct parser *p, int prec)
{
	struct alert_expr *x;
	size_t k;

	if (prec > PREC_MUL)
		return parse_unary(p);
	x = parse_binary(p, prec + 1);
	while (x) {
		struct alert_expr *b;

		for (k = 0; k < ARRAY_SIZE(binary_ops); k++)
			if (binary_ops[k].t == p->t && binary_ops[k].prec == prec)
				break;
		if (k == ARRAY_SIZE(binary_ops))
			break;
		b = binary(p, binary_ops[k].op, prec, x);
		if (!b)
			alert_expr__free(x);
		x = b;
	}
	return x;
}

static struct alert_expr *parse_expr(struct parser *p)
{
	struct alert_expr *x = parse_binary(p, PREC_COMPARISON);

	if (x && p->t == T_ASSIGN) {
		fail_at(p, p->tpos, "unexpected `=`: compare with `==`");
		alert_expr__free(x);
		return NULL;
	}
	return x;
}

struct alert_expr *alert_expr__parse(const char *src, char *err, size_t errlen, int *errpos)
{
	struct parser p = {.src = src, .err = err, .errlen = errlen};
	struct alert_expr *x = NULL;

	if (next(&p)) {
		if (p.t == T_EOF)
			fail_at(&p, 0, "empty expression");
		else
			x = parse_expr(&p);
	}
	if (x && p.t != T_EOF) {
		if (p.t == T_IDENT &&
		    (!strcmp(p.text, "and") || !strcmp(p.text, "or") || !strcmp(p.text, "unless")))
			fail_at(&p, p.tpos, "`%s` is not supported: write one rule per condition",
				p.text);
		else
			unexpected(&p, "an operator or the end of the expression");
	}
	if (x && !p.failed && x->scalar)
		fail_at(&p, 0, "the expression is a number: compare a metric, e.g. `metric > 5`");
	free(p.text);
	if (p.failed) {
		alert_expr__free(x);
		if (errpos)
			*errpos = p.errpos;
		return NULL;
	}
	return x;
}

void alert_expr__names(const struct alert_expr *x, void (*fn)(void *ctx, const char *name),
		       void *ctx)
{
	if (!x)
		return;
	if (x->kind == EXPR_SEL)
		fn(ctx, x->name);
	alert_expr__names(x->l, fn, ctx);
	alert_expr__names(x->r, fn, ctx);
	alert_expr__names(x->arg, fn, ctx);
}
