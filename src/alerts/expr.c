/* expr.c: the PromQL subset of alert rules -- selectors with label
 * matchers, + - * / and comparisons between series and numbers or between
 * series with one-to-one or group_left/group_right matching, and the sum,
 * min, max, avg and count aggregations -- parsed once at load and evaluated
 * every tick over a snapshot of the agent's current series. Used by the alert
 * engine (engine.c); the grammar is in docs/alerts.md. */
#include "alerts/alerts_internal.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/regex.h"
#include "common/xalloc.h"

/* ---- arena ---- */

struct alert_arena_block {
	struct alert_arena_block *next;
	size_t used, cap;
	char data[];
};

#define ARENA_BLOCK (64 * 1024)

void *alert_arena__alloc(struct alert_arena *a, size_t n)
{
	struct alert_arena_block *b = a->head;
	void *p;

	n = (n + 7) & ~(size_t)7;
	if (!b || b->cap - b->used < n) {
		size_t cap = n > ARENA_BLOCK ? n : ARENA_BLOCK;

		b = xmalloc(sizeof(*b) + cap);
		b->used = 0;
		b->cap = cap;
		/* A block that can't take the next small allocation goes behind
		 * the current head, so the head keeps serving small ones. */
		if (a->head && cap > ARENA_BLOCK) {
			b->next = a->head->next;
			a->head->next = b;
		} else {
			b->next = a->head;
			a->head = b;
		}
	}
	p = b->data + b->used;
	b->used += n;
	return p;
}

char *alert_arena__strdup(struct alert_arena *a, const char *s)
{
	size_t n = strlen(s) + 1;

	return memcpy(alert_arena__alloc(a, n), s, n);
}

void alert_arena__reset(struct alert_arena *a)
{
	struct alert_arena_block *b, *next;

	if (!a->head)
		return;
	for (b = a->head->next; b; b = next) {
		next = b->next;
		free(b);
	}
	a->head->next = NULL;
	a->head->used = 0;
}

static void alert_arena__free(struct alert_arena *a)
{
	alert_arena__reset(a);
	free(a->head);
	a->head = NULL;
}

/* ---- labels and vectors ---- */

const char *alert_labels__get(const struct alert_labels *l, const char *key)
{
	for (size_t i = 0; i < l->n; i++)
		if (!strcmp(l->kv[2 * i], key))
			return l->kv[2 * i + 1];
	return "";
}

static void labels_sort(struct alert_labels *l)
{
	for (size_t i = 1; i < l->n; i++) {
		const char *k = l->kv[2 * i], *v = l->kv[2 * i + 1];
		size_t j = i;

		for (; j > 0 && strcmp(l->kv[2 * (j - 1)], k) > 0; j--) {
			l->kv[2 * j] = l->kv[2 * (j - 1)];
			l->kv[2 * j + 1] = l->kv[2 * (j - 1) + 1];
		}
		l->kv[2 * j] = k;
		l->kv[2 * j + 1] = v;
	}
}

void alert_vector__push(struct alert_vector *v, struct alert_labels l, double value)
{
	xgrow((void **)&v->s, &v->cap, v->n + 1, sizeof(*v->s));
	v->s[v->n].l = l;
	v->s[v->n].v = value;
	v->n++;
}

void alert_vector__free(struct alert_vector *v)
{
	free(v->s);
	v->s = NULL;
	v->n = v->cap = 0;
}

/* ---- snapshot ---- */

void alert_snapshot__want(struct alert_snapshot *s, const char *name)
{
	struct alert_snap_metric *m;

	HASH_FIND_STR(s->metrics, name, m);
	if (m)
		return;
	m = xcalloc(1, sizeof(*m));
	m->name = xstrdup(name);
	HASH_ADD_KEYPTR(hh, s->metrics, m->name, strlen(m->name), m);
}

static void snapshot_add(void *ctx, const char *name, const char *const *labels, double value)
{
	struct alert_snapshot *s = ctx;
	struct alert_snap_metric *m;
	struct alert_labels l = {0};
	size_t n = 0;

	if (!name)
		return;
	HASH_FIND_STR(s->metrics, name, m);
	if (!m)
		return;
	while (labels && labels[2 * n] && labels[2 * n + 1])
		n++;
	l.kv = alert_arena__alloc(&s->arena, (2 * n + 1) * sizeof(*l.kv));
	for (size_t i = 0; i < 2 * n; i++)
		l.kv[i] = alert_arena__strdup(&s->arena, labels[i]);
	l.n = n;
	labels_sort(&l);
	alert_vector__push(&m->v, l, value);
	s->nseries++;
}

void alert_snapshot__collect(struct alert_snapshot *s, series_source src, void *src_ctx)
{
	if (src)
		src(src_ctx, snapshot_add, s);
}

void alert_snapshot__clear(struct alert_snapshot *s)
{
	struct alert_snap_metric *m, *tmp;

	HASH_ITER(hh, s->metrics, m, tmp)
	{
		m->v.n = 0;
	}
	alert_arena__reset(&s->arena);
	s->nseries = 0;
}

void alert_snapshot__free(struct alert_snapshot *s)
{
	struct alert_snap_metric *m, *tmp;

	HASH_ITER(hh, s->metrics, m, tmp)
	{
		HASH_DEL(s->metrics, m);
		alert_vector__free(&m->v);
		free(m->name);
		free(m);
	}
	alert_arena__free(&s->arena);
}

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

/* Reads the next token into p->t. */
static bool next(struct parser *p)
{
	const char *s = p->src;
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

	free(p->text);
	p->text = NULL;
	if (p->failed)
		return false;
	while (isspace((unsigned char)s[p->pos]))
		p->pos++;
	p->tpos = p->pos;
	if (!s[p->pos]) {
		p->t = T_EOF;
		p->tlen = 0;
		return true;
	}
	if (isdigit((unsigned char)s[p->pos]) ||
	    (s[p->pos] == '.' && isdigit((unsigned char)s[p->pos + 1]))) {
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
		p->t = T_NUM;
		p->tlen = i - p->pos;
		p->pos = i;
		return true;
	}
	if (is_ident_start((unsigned char)s[p->pos])) {
		int i = p->pos;

		while (is_ident_char((unsigned char)s[i]))
			i++;
		p->text = xstrndup(s + p->pos, i - p->pos);
		p->tlen = i - p->pos;
		p->pos = i;
		if (!strcasecmp(p->text, "inf") || !strcasecmp(p->text, "nan")) {
			p->num = tolower((unsigned char)p->text[0]) == 'i' ? INFINITY : NAN;
			p->t = T_NUM;
		} else {
			p->t = T_IDENT;
		}
		return true;
	}
	if (s[p->pos] == '"' || s[p->pos] == '\'' || s[p->pos] == '`') {
		int start = p->pos;

		if (!lex_string(p))
			return false;
		p->t = T_STR;
		p->tlen = p->pos - start;
		return true;
	}
	for (size_t i = 0; i < ARRAY_SIZE(ops); i++) {
		size_t n = strlen(ops[i].text);

		if (!strncmp(s + p->pos, ops[i].text, n)) {
			p->t = ops[i].t;
			p->tlen = n;
			p->pos += n;
			return true;
		}
	}
	p->t = T_OTHER;
	p->tlen = 1;
	return fail_at(p, p->pos, "unexpected character `%c`", s[p->pos]);
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

/* ( label, label, ... ) into *v, *n; the current token is `(`. */
static bool parse_label_list(struct parser *p, char ***v, size_t *n)
{
	size_t cap = 0;

	if (p->t != T_LPAREN)
		return unexpected(p, "`(` and a list of labels");
	if (!next(p))
		return false;
	while (p->t != T_RPAREN) {
		if (p->t != T_IDENT || strchr(p->text, ':'))
			return unexpected(p, "a label name");
		xgrow((void **)v, &cap, *n + 1, sizeof(**v));
		(*v)[(*n)++] = xstrdup(p->text);
		if (!next(p))
			return false;
		if (p->t == T_COMMA) {
			if (!next(p))
				return false;
		} else if (p->t != T_RPAREN) {
			return unexpected(p, "`,` or `)`");
		}
	}
	return next(p);
}

static bool compile_matcher(struct parser *p, struct alert_matcher *m, int pos)
{
	char msg[160];

	if (m->op != MATCH_RE && m->op != MATCH_NRE)
		return true;
	/* PromQL anchors regular expressions at both ends. */
	if (regex_compile_anchored(m->value, &m->re, msg, sizeof(msg))) {
		m->op = MATCH_EQ; /* nothing to regfree */
		return fail_at(p, pos, "bad regular expression \"%s\": %s", m->value, msg);
	}
	return true;
}

/* name{matchers}; the current token is the name. */
static struct alert_expr *parse_selector(struct parser *p)
{
	struct alert_expr *x = new_expr(EXPR_SEL, p->tpos);
	size_t cap = 0;

	x->name = xstrdup(p->text);
	if (!next(p))
		goto fail;
	if (p->t == T_LBRACE) {
		if (!next(p))
			goto fail;
		while (p->t != T_RBRACE) {
			struct alert_matcher *m;
			int vpos;

			if (p->t != T_IDENT || strchr(p->text, ':')) {
				unexpected(p, "a label name");
				goto fail;
			}
			xgrow((void **)&x->m, &cap, x->nm + 1, sizeof(*x->m));
			m = &x->m[x->nm++];
			memset(m, 0, sizeof(*m));
			m->label = xstrdup(p->text);
			if (!next(p))
				goto fail;
			switch (p->t) {
			case T_ASSIGN:
				m->op = MATCH_EQ;
				break;
			case T_NEQ:
				m->op = MATCH_NE;
				break;
			case T_RE:
				m->op = MATCH_RE;
				break;
			case T_NRE:
				m->op = MATCH_NRE;
				break;
			case T_EQ:
				fail_at(p, p->tpos, "unexpected `==` in a label matcher: use `=`");
				goto fail;
			default:
				unexpected(p, "`=`, `!=`, `=~` or `!~`");
				goto fail;
			}
			if (!next(p))
				goto fail;
			if (p->t != T_STR) {
				unexpected(p, "a quoted label value");
				goto fail;
			}
			m->value = xstrdup(p->text);
			vpos = p->tpos;
			if (!compile_matcher(p, m, vpos) || !next(p))
				goto fail;
			if (p->t == T_COMMA) {
				if (!next(p))
					goto fail;
			} else if (p->t != T_RBRACE) {
				unexpected(p, "`,` or `}`");
				goto fail;
			}
		}
		if (!next(p))
			goto fail;
	}
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

static struct alert_expr *parse_unary(struct parser *p);

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
	case T_LPAREN: {
		int pos = p->tpos;

		if (!next(p))
			return NULL;
		x = parse_expr(p);
		if (!x)
			return NULL;
		if (p->t != T_RPAREN) {
			alert_expr__free(x);
			fail_at(p, p->t == T_EOF ? pos : p->tpos,
				p->t == T_EOF ? "unclosed `(`" : "expected `)`");
			return NULL;
		}
		if (!next(p)) {
			alert_expr__free(x);
			return NULL;
		}
		return x;
	}
	case T_LBRACE:
		fail_at(p, p->tpos, "a selector needs a metric name before `{`");
		return NULL;
	case T_IDENT:
		for (size_t i = 0; i < ARRAY_SIZE(aggregations); i++)
			if (!strcmp(p->text, aggregations[i]) &&
			    (peek_char(p) == '(' || peek_word(p, "by") || peek_word(p, "without")))
				return parse_aggregation(p, (enum agg_op)i);
		for (size_t i = 0; i < ARRAY_SIZE(keywords); i++)
			if (!strcmp(p->text, keywords[i])) {
				fail_at(p, p->tpos,
					"`%s` is not supported here (see docs/alerts.md)", p->text);
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

static bool is_comparison(enum bin_op op)
{
	return op >= OP_EQ;
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

static struct alert_expr *binary(struct parser *p, enum bin_op op, int pos, struct alert_expr *l,
				 struct alert_expr *(*operand)(struct parser *))
{
	struct alert_expr *x = new_expr(EXPR_BIN, pos);

	x->op = op;
	x->l = l;
	if (!next(p) || !parse_matching(p, x))
		goto fail;
	x->r = operand(p);
	if (!x->r)
		goto fail;
	x->scalar = l->scalar && x->r->scalar;
	if (x->scalar && is_comparison(op)) {
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

static struct alert_expr *parse_mul(struct parser *p)
{
	struct alert_expr *x = parse_unary(p);

	while (x && (p->t == T_MUL || p->t == T_DIV)) {
		struct alert_expr *b =
			binary(p, p->t == T_MUL ? OP_MUL : OP_DIV, p->tpos, x, parse_unary);

		if (!b)
			alert_expr__free(x);
		x = b;
	}
	return x;
}

static struct alert_expr *parse_add(struct parser *p)
{
	struct alert_expr *x = parse_mul(p);

	while (x && (p->t == T_ADD || p->t == T_SUB)) {
		struct alert_expr *b =
			binary(p, p->t == T_ADD ? OP_ADD : OP_SUB, p->tpos, x, parse_mul);

		if (!b)
			alert_expr__free(x);
		x = b;
	}
	return x;
}

static bool comparison_op(enum tok t, enum bin_op *op)
{
	switch (t) {
	case T_EQ:
		*op = OP_EQ;
		return true;
	case T_NEQ:
		*op = OP_NE;
		return true;
	case T_GT:
		*op = OP_GT;
		return true;
	case T_GE:
		*op = OP_GE;
		return true;
	case T_LT:
		*op = OP_LT;
		return true;
	case T_LE:
		*op = OP_LE;
		return true;
	default:
		return false;
	}
}

static struct alert_expr *parse_expr(struct parser *p)
{
	struct alert_expr *x = parse_add(p);
	enum bin_op op;

	while (x && comparison_op(p->t, &op)) {
		struct alert_expr *b = binary(p, op, p->tpos, x, parse_add);

		if (!b)
			alert_expr__free(x);
		x = b;
	}
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

/* ---- evaluation ---- */

static bool matches(const struct alert_matcher *m, const struct alert_labels *l)
{
	const char *v = alert_labels__get(l, m->label);

	switch (m->op) {
	case MATCH_EQ:
		return !strcmp(v, m->value);
	case MATCH_NE:
		return strcmp(v, m->value) != 0;
	case MATCH_RE:
		return !regexec(&m->re, v, 0, NULL, 0);
	case MATCH_NRE:
		return regexec(&m->re, v, 0, NULL, 0) != 0;
	}
	return false;
}

static bool in_list(char *const *v, size_t n, const char *s)
{
	for (size_t i = 0; i < n; i++)
		if (!strcmp(v[i], s))
			return true;
	return false;
}

struct sigbuf {
	char *b;
	size_t n, cap;
};

static void sig_put(struct sigbuf *s, const char *str)
{
	size_t n = strlen(str) + 1;

	xgrow((void **)&s->b, &s->cap, s->n + n, 1);
	memcpy(s->b + s->n, str, n);
	s->n += n;
}

/* The match-group signature of l: the listed labels (include) or all but
 * them, as "key\0value\0...". Borrowed until the next call. */
static void signature(struct sigbuf *s, const struct alert_labels *l, char *const *names, size_t n,
		      bool include)
{
	s->n = 0;
	xgrow((void **)&s->b, &s->cap, 1, 1); /* never NULL, even when empty */
	if (include) {
		for (size_t i = 0; i < n; i++) {
			sig_put(s, names[i]);
			sig_put(s, alert_labels__get(l, names[i]));
		}
		return;
	}
	for (size_t i = 0; i < l->n; i++) {
		if (in_list(names, n, l->kv[2 * i]))
			continue;
		sig_put(s, l->kv[2 * i]);
		sig_put(s, l->kv[2 * i + 1]);
	}
}

static const char *sig_text(struct sigbuf *s, char *buf, size_t len)
{
	size_t o = 0;

	o += snprintf(buf + o, len - o, "{");
	for (size_t i = 0; i < s->n && o < len;) {
		const char *k = s->b + i, *v = k + strlen(k) + 1;

		o += snprintf(buf + o, len - o, "%s%s=\"%s\"", i ? ", " : "", k, v);
		i = v + strlen(v) + 1 - s->b;
	}
	if (o < len)
		snprintf(buf + o, len - o, "}");
	return buf;
}

struct group {
	const char *key;
	size_t idx; /* index of the first sample */
	size_t count;
	double v, sum;
	UT_hash_handle hh;
};

static struct group *group_find(struct group **h, struct alert_arena *a, struct sigbuf *s,
				size_t idx, bool *created)
{
	struct group *g;

	HASH_FIND(hh, *h, s->b, s->n, g);
	*created = !g;
	if (g)
		return g;
	g = alert_arena__alloc(a, sizeof(*g));
	memset(g, 0, sizeof(*g));
	g->key = memcpy(alert_arena__alloc(a, s->n ? s->n : 1), s->b, s->n);
	g->idx = idx;
	HASH_ADD_KEYPTR(hh, *h, g->key, s->n, g);
	return g;
}

/* l reduced to (keep) or stripped of (!keep) the listed labels. */
static struct alert_labels reduce(struct alert_arena *a, const struct alert_labels *l,
				  char *const *names, size_t n, bool keep)
{
	struct alert_labels out = {.kv = alert_arena__alloc(a, (2 * l->n + 1) * sizeof(char *))};

	for (size_t i = 0; i < l->n; i++) {
		if (in_list(names, n, l->kv[2 * i]) != keep)
			continue;
		out.kv[2 * out.n] = l->kv[2 * i];
		out.kv[2 * out.n + 1] = l->kv[2 * i + 1];
		out.n++;
	}
	return out;
}

/* l with the listed labels copied from (or, where absent, removed after) src. */
static struct alert_labels include_labels(struct alert_arena *a, const struct alert_labels *l,
					  const struct alert_labels *src, char *const *names,
					  size_t n)
{
	struct alert_labels out = reduce(a, l, names, n, false);
	struct alert_labels grown = {
		.kv = alert_arena__alloc(a, (2 * (out.n + n) + 1) * sizeof(char *))};

	memcpy(grown.kv, out.kv, 2 * out.n * sizeof(char *));
	grown.n = out.n;
	for (size_t i = 0; i < n; i++) {
		const char *v = alert_labels__get(src, names[i]);

		if (!*v || in_list(names, i, names[i]))
			continue;
		grown.kv[2 * grown.n] = names[i];
		grown.kv[2 * grown.n + 1] = v;
		grown.n++;
	}
	labels_sort(&grown);
	return grown;
}

static bool apply(enum bin_op op, double l, double r, double *out)
{
	switch (op) {
	case OP_ADD:
		*out = l + r;
		return true;
	case OP_SUB:
		*out = l - r;
		return true;
	case OP_MUL:
		*out = l * r;
		return true;
	case OP_DIV:
		*out = l / r;
		return true;
	case OP_EQ:
		*out = l;
		return l == r;
	case OP_NE:
		*out = l;
		return l != r;
	case OP_GT:
		*out = l;
		return l > r;
	case OP_GE:
		*out = l;
		return l >= r;
	case OP_LT:
		*out = l;
		return l < r;
	case OP_LE:
		*out = l;
		return l <= r;
	}
	return false;
}

struct eval_ctx {
	struct alert_snapshot *snap;
	struct sigbuf sig;
	char *err;
	size_t errlen;
};

static int eval(struct eval_ctx *c, const struct alert_expr *x, struct alert_vector *out,
		double *num);

static int eval_aggregation(struct eval_ctx *c, const struct alert_expr *x,
			    struct alert_vector *out)
{
	struct alert_vector in = {0};
	struct group *groups = NULL, *g, *tmp;
	int err = eval(c, x->arg, &in, NULL);

	if (err)
		goto cleanup;
	for (size_t i = 0; i < in.n; i++) {
		const struct alert_sample *s = &in.s[i];
		bool created;

		signature(&c->sig, &s->l, x->labels, x->nlabels, !x->without);
		g = group_find(&groups, &c->snap->arena, &c->sig, i, &created);
		g->count++;
		g->sum += s->v;
		if (created || (x->agg == AGG_MAX && (s->v > g->v || isnan(g->v))) ||
		    (x->agg == AGG_MIN && (s->v < g->v || isnan(g->v))))
			g->v = s->v;
	}
	/* uthash iterates in insertion order: the output follows the input. */
	for (g = groups; g; g = g->hh.next) {
		double v = g->v;

		switch (x->agg) {
		case AGG_SUM:
			v = g->sum;
			break;
		case AGG_AVG:
			v = g->sum / g->count;
			break;
		case AGG_COUNT:
			v = g->count;
			break;
		case AGG_MIN:
		case AGG_MAX:
			break;
		}
		alert_vector__push(out,
				   reduce(&c->snap->arena, &in.s[g->idx].l, x->labels, x->nlabels,
					  !x->without),
				   v);
	}
cleanup:
	HASH_ITER(hh, groups, g, tmp)
	{
		HASH_DEL(groups, g);
	}
	alert_vector__free(&in);
	return err;
}

static int eval_fail(struct eval_ctx *c, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static int eval_fail(struct eval_ctx *c, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(c->err, c->errlen, fmt, ap);
	va_end(ap);
	return -EINVAL;
}

/* Series op series. The "one" side (rhs unless group_right) is hashed by
 * match signature; each element of the other side finds its partner. */
static int eval_vector_binary(struct eval_ctx *c, const struct alert_expr *x,
			      struct alert_vector *lv, struct alert_vector *rv,
			      struct alert_vector *out)
{
	bool right_many = x->card == CARD_ONE_TO_MANY;
	struct alert_vector *one = right_many ? lv : rv, *many = right_many ? rv : lv;
	struct group *hash = NULL, *seen = NULL, *g, *tmp;
	bool include = x->matching && x->on;
	int err = 0;
	char buf[256];

	for (size_t i = 0; i < one->n; i++) {
		bool created;

		signature(&c->sig, &one->s[i].l, x->labels, x->nlabels, include);
		g = group_find(&hash, &c->snap->arena, &c->sig, i, &created);
		if (!created) {
			err = eval_fail(c,
					"many-to-many matching: more than one series for %s on "
					"the %s side -- match on more labels or aggregate",
					sig_text(&c->sig, buf, sizeof(buf)),
					right_many ? "left" : "right");
			goto cleanup;
		}
	}
	for (size_t i = 0; i < many->n; i++) {
		const struct alert_sample *m = &many->s[i], *o;
		const struct alert_sample *l, *r;
		struct alert_labels res;
		double v;
		bool created;

		signature(&c->sig, &m->l, x->labels, x->nlabels, include);
		HASH_FIND(hh, hash, c->sig.b, c->sig.n, g);
		if (!g)
			continue;
		o = &one->s[g->idx];
		l = right_many ? o : m;
		r = right_many ? m : o;
		if (x->card == CARD_ONE_TO_ONE) {
			group_find(&seen, &c->snap->arena, &c->sig, i, &created);
			if (!created) {
				err = eval_fail(c,
						"more than one series on the left side match %s -- "
						"use group_left or match on more labels",
						sig_text(&c->sig, buf, sizeof(buf)));
				goto cleanup;
			}
		}
		if (!apply(x->op, l->v, r->v, &v))
			continue;
		if (x->card == CARD_ONE_TO_ONE)
			res = x->matching
				      ? reduce(&c->snap->arena, &l->l, x->labels, x->nlabels, x->on)
				      : l->l;
		else
			res = include_labels(&c->snap->arena, &m->l, &o->l, x->include,
					     x->ninclude);
		if (x->card != CARD_ONE_TO_ONE) {
			signature(&c->sig, &res, NULL, 0, false);
			group_find(&seen, &c->snap->arena, &c->sig, i, &created);
			if (!created) {
				err = eval_fail(c,
						"two results with the labels %s -- the group_left/"
						"group_right labels must keep results apart",
						sig_text(&c->sig, buf, sizeof(buf)));
				goto cleanup;
			}
		}
		alert_vector__push(out, res, v);
	}
cleanup:
	HASH_ITER(hh, hash, g, tmp)
	{
		HASH_DEL(hash, g);
	}
	HASH_ITER(hh, seen, g, tmp)
	{
		HASH_DEL(seen, g);
	}
	return err;
}

static int eval_binary(struct eval_ctx *c, const struct alert_expr *x, struct alert_vector *out,
		       double *num)
{
	struct alert_vector lv = {0}, rv = {0};
	double ln = 0, rn = 0, v;
	int err;

	err = eval(c, x->l, &lv, &ln);
	if (!err)
		err = eval(c, x->r, &rv, &rn);
	if (err)
		goto cleanup;
	if (x->scalar) {
		apply(x->op, ln, rn, num);
	} else if (x->l->scalar) {
		for (size_t i = 0; i < rv.n; i++) {
			bool keep = apply(x->op, ln, rv.s[i].v, &v);

			if (is_comparison(x->op) && keep)
				alert_vector__push(out, rv.s[i].l, rv.s[i].v);
			else if (!is_comparison(x->op))
				alert_vector__push(out, rv.s[i].l, v);
		}
	} else if (x->r->scalar) {
		for (size_t i = 0; i < lv.n; i++)
			if (apply(x->op, lv.s[i].v, rn, &v) || !is_comparison(x->op))
				alert_vector__push(out, lv.s[i].l, v);
	} else {
		err = eval_vector_binary(c, x, &lv, &rv, out);
	}
cleanup:
	alert_vector__free(&lv);
	alert_vector__free(&rv);
	return err;
}

static int eval(struct eval_ctx *c, const struct alert_expr *x, struct alert_vector *out,
		double *num)
{
	struct alert_snap_metric *m;
	int err;

	switch (x->kind) {
	case EXPR_NUM:
		*num = x->num;
		return 0;
	case EXPR_NEG:
		err = eval(c, x->arg, out, num);
		if (x->scalar)
			*num = -*num;
		for (size_t i = 0; i < out->n; i++)
			out->s[i].v = -out->s[i].v;
		return err;
	case EXPR_SEL:
		HASH_FIND_STR(c->snap->metrics, x->name, m);
		for (size_t i = 0; m && i < m->v.n; i++) {
			size_t j = 0;

			while (j < x->nm && matches(&x->m[j], &m->v.s[i].l))
				j++;
			if (j == x->nm)
				alert_vector__push(out, m->v.s[i].l, m->v.s[i].v);
		}
		return 0;
	case EXPR_AGG:
		return eval_aggregation(c, x, out);
	case EXPR_BIN:
		return eval_binary(c, x, out, num);
	}
	return 0;
}

int alert_expr__eval(const struct alert_expr *x, struct alert_snapshot *snap,
		     struct alert_vector *out, char *err, size_t errlen)
{
	struct eval_ctx c = {.snap = snap, .err = err, .errlen = errlen};
	double num = 0;
	int rc = eval(&c, x, out, &num);

	free(c.sig.b);
	if (rc)
		alert_vector__free(out);
	return rc;
}
