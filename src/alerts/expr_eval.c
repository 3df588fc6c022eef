/* expr_eval.c: evaluation of the alert rules' PromQL subset (parsed by
 * expr.c) over the snapshot of one tick (snapshot.c): selectors filter the
 * snapshot's series, aggregations group them by label key, and binary
 * operators combine series with numbers or with series matched one-to-one or
 * through group_left/group_right, refusing many-to-many matches and
 * duplicate results as Prometheus does. Every label set it makes lives in the
 * snapshot's arena. Used by the engine (eval.c) once per rule and tick. */
#include "alerts/alerts_internal.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct eval_ctx {
	struct alert_snapshot *snap;
	struct alert_key key; /* scratch */
	char *err;
	size_t errlen;
};

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

/* Series sharing one label key: an aggregation's group, or a match. */
struct group {
	const char *key;
	size_t idx; /* index of the first sample */
	size_t count;
	double v, sum;
	UT_hash_handle hh;
};

/* The group of key k in *h, made (in a) when new. */
static struct group *group_find(struct group **h, struct alert_arena *a, const struct alert_key *k,
				size_t idx, bool *created)
{
	struct group *g;

	HASH_FIND(hh, *h, k->b, k->n, g);
	*created = !g;
	if (g)
		return g;
	g = alert_arena__alloc(a, sizeof(*g));
	memset(g, 0, sizeof(*g));
	g->key = memcpy(alert_arena__alloc(a, k->n ? k->n : 1), k->b, k->n);
	g->idx = idx;
	HASH_ADD_KEYPTR(hh, *h, g->key, k->n, g);
	return g;
}

/* Empties the hash; the groups are in the arena. */
static void groups_clear(struct group **h)
{
	struct group *g, *tmp;

	HASH_ITER(hh, *h, g, tmp)
	{
		HASH_DEL(*h, g);
	}
}

/* l with the listed labels copied from (or, where absent, removed after) src. */
static struct alert_labels include_labels(struct alert_arena *a, const struct alert_labels *l,
					  const struct alert_labels *src, char *const *names,
					  size_t n)
{
	struct alert_labels out = alert_labels__reduce(a, l, names, n, false);
	struct alert_labels grown = {
		.kv = alert_arena__alloc(a, (2 * (out.n + n) + 1) * sizeof(char *))};

	memcpy(grown.kv, out.kv, 2 * out.n * sizeof(char *));
	grown.n = out.n;
	for (size_t i = 0; i < n; i++) {
		const char *v = alert_labels__get(src, names[i]);

		if (!*v || alert_name_in(names[i], names, i))
			continue;
		grown.kv[2 * grown.n] = names[i];
		grown.kv[2 * grown.n + 1] = v;
		grown.n++;
	}
	alert_labels__sort(&grown);
	return grown;
}

/* l op r into *out (arithmetic), or for a comparison l into *out and
 * whether it holds. */
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

static int eval(struct eval_ctx *c, const struct alert_expr *x, struct alert_vector *out,
		double *num);

static int eval_aggregation(struct eval_ctx *c, const struct alert_expr *x,
			    struct alert_vector *out)
{
	struct alert_vector in = {0};
	struct group *groups = NULL, *g;
	int err = eval(c, x->arg, &in, NULL);

	if (err)
		goto cleanup;
	for (size_t i = 0; i < in.n; i++) {
		const struct alert_sample *s = &in.s[i];
		bool created;

		alert_key__set(&c->key, &s->l, x->labels, x->nlabels, !x->without);
		g = group_find(&groups, &c->snap->arena, &c->key, i, &created);
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
				   alert_labels__reduce(&c->snap->arena, &in.s[g->idx].l, x->labels,
							x->nlabels, !x->without),
				   v);
	}
cleanup:
	groups_clear(&groups);
	alert_vector__free(&in);
	return err;
}

/* One series-op-series evaluation. The "one" side (rhs unless group_right)
 * is hashed by match key; each element of the "many" side finds its
 * partner there. */
struct vector_match {
	struct eval_ctx *c;
	const struct alert_expr *x;
	bool right_many; /* group_right: the left side is the "many" side */
	bool include;	 /* on(...): the key is the listed labels, else all but them */
	const struct alert_vector *one;
	struct group *hash; /* the "one" side by key */
	struct group *seen; /* keys matched (one-to-one) or results made (group_*) */
};

static int match_index(struct vector_match *vm)
{
	struct eval_ctx *c = vm->c;
	const struct alert_expr *x = vm->x;
	char buf[256];

	for (size_t i = 0; i < vm->one->n; i++) {
		bool created;

		alert_key__set(&c->key, &vm->one->s[i].l, x->labels, x->nlabels, vm->include);
		group_find(&vm->hash, &c->snap->arena, &c->key, i, &created);
		if (!created)
			return eval_fail(c,
					 "many-to-many matching: more than one series for %s on "
					 "the %s side -- match on more labels or aggregate",
					 alert_key__text(&c->key, buf, sizeof(buf)),
					 vm->right_many ? "left" : "right");
	}
	return 0;
}

/* Whether the key in vm->c->key is new among vm->seen; records it. */
static bool first_seen(struct vector_match *vm, size_t i)
{
	bool created;

	group_find(&vm->seen, &vm->c->snap->arena, &vm->c->key, i, &created);
	return created;
}

/* Element i, m, of the "many" side against its partner, into out. */
static int match_sample(struct vector_match *vm, size_t i, const struct alert_sample *m,
			struct alert_vector *out)
{
	struct eval_ctx *c = vm->c;
	const struct alert_expr *x = vm->x;
	const struct alert_sample *o, *l, *r;
	struct alert_labels res;
	struct group *g;
	char buf[256];
	double v;

	alert_key__set(&c->key, &m->l, x->labels, x->nlabels, vm->include);
	HASH_FIND(hh, vm->hash, c->key.b, c->key.n, g);
	if (!g)
		return 0;
	o = &vm->one->s[g->idx];
	l = vm->right_many ? o : m;
	r = vm->right_many ? m : o;
	if (x->card == CARD_ONE_TO_ONE && !first_seen(vm, i))
		return eval_fail(c,
				 "more than one series on the left side match %s -- "
				 "use group_left or match on more labels",
				 alert_key__text(&c->key, buf, sizeof(buf)));
	if (!apply(x->op, l->v, r->v, &v))
		return 0;
	if (x->card == CARD_ONE_TO_ONE) {
		res = x->matching ? alert_labels__reduce(&c->snap->arena, &l->l, x->labels,
							 x->nlabels, x->on)
				  : l->l;
	} else {
		res = include_labels(&c->snap->arena, &m->l, &o->l, x->include, x->ninclude);
		alert_key__set(&c->key, &res, NULL, 0, false);
		if (!first_seen(vm, i))
			return eval_fail(c,
					 "two results with the labels %s -- the group_left/"
					 "group_right labels must keep results apart",
					 alert_key__text(&c->key, buf, sizeof(buf)));
	}
	alert_vector__push(out, res, v);
	return 0;
}

static int eval_vector_binary(struct eval_ctx *c, const struct alert_expr *x,
			      const struct alert_vector *lv, const struct alert_vector *rv,
			      struct alert_vector *out)
{
	bool right_many = x->card == CARD_ONE_TO_MANY;
	struct vector_match vm = {
		.c = c,
		.x = x,
		.right_many = right_many,
		.include = x->matching && x->on,
		.one = right_many ? lv : rv,
	};
	const struct alert_vector *many = right_many ? rv : lv;
	int err = match_index(&vm);

	for (size_t i = 0; !err && i < many->n; i++)
		err = match_sample(&vm, i, &many->s[i], out);
	groups_clear(&vm.hash);
	groups_clear(&vm.seen);
	return err;
}

/* Number op series or series op number: a comparison keeps the series'
 * samples for which it holds, arithmetic changes every value. */
static void eval_scalar_binary(const struct alert_expr *x, double num,
			       const struct alert_vector *in, struct alert_vector *out)
{
	bool num_left = x->l->scalar;

	for (size_t i = 0; i < in->n; i++) {
		double v, s = in->s[i].v;
		bool holds = apply(x->op, num_left ? num : s, num_left ? s : num, &v);

		if (!bin_op_is_comparison(x->op))
			alert_vector__push(out, in->s[i].l, v);
		else if (holds)
			alert_vector__push(out, in->s[i].l, s);
	}
}

static int eval_binary(struct eval_ctx *c, const struct alert_expr *x, struct alert_vector *out,
		       double *num)
{
	struct alert_vector lv = {0}, rv = {0};
	double ln = 0, rn = 0;
	int err;

	err = eval(c, x->l, &lv, &ln);
	if (!err)
		err = eval(c, x->r, &rv, &rn);
	if (err)
		goto cleanup;
	if (x->scalar)
		apply(x->op, ln, rn, num);
	else if (x->l->scalar)
		eval_scalar_binary(x, ln, &rv, out);
	else if (x->r->scalar)
		eval_scalar_binary(x, rn, &lv, out);
	else
		err = eval_vector_binary(c, x, &lv, &rv, out);
cleanup:
	alert_vector__free(&lv);
	alert_vector__free(&rv);
	return err;
}

static void eval_selector(struct eval_ctx *c, const struct alert_expr *x, struct alert_vector *out)
{
	struct alert_snap_metric *m;

	HASH_FIND_STR(c->snap->metrics, x->name, m);
	for (size_t i = 0; m && i < m->v.n; i++) {
		size_t j = 0;

		while (j < x->nm && matches(&x->m[j], &m->v.s[i].l))
			j++;
		if (j == x->nm)
			alert_vector__push(out, m->v.s[i].l, m->v.s[i].v);
	}
}

static int eval(struct eval_ctx *c, const struct alert_expr *x, struct alert_vector *out,
		double *num)
{
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
		eval_selector(c, x, out);
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

	alert_key__free(&c.key);
	if (rc)
		alert_vector__free(out);
	return rc;
}
