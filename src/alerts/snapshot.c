/* snapshot.c: the series the alert rules see in one evaluation -- copied
 * from the agent's series_source (metrics/series.h) into an arena that is
 * reset after every evaluation, by metric name, only for the names some rule
 * selects -- and the label sets, label keys and instant vectors that the
 * expression evaluator (expr_eval.c) and the engine (eval.c) build from
 * them. */
#include "alerts/alerts_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/xalloc.h"

/* ---- arena ---- */

struct alert_arena_block {
	struct alert_arena_block *next;
	size_t used, cap;
	char data[];
};

#define ALERT_ARENA_BLOCK (64 * 1024)

void *alert_arena__alloc(struct alert_arena *a, size_t n)
{
	struct alert_arena_block *b = a->head;
	void *p;

	n = (n + 7) & ~(size_t)7;
	if (!b || b->cap - b->used < n) {
		size_t cap = n > ALERT_ARENA_BLOCK ? n : ALERT_ARENA_BLOCK;

		b = xmalloc(sizeof(*b) + cap);
		b->used = 0;
		b->cap = cap;
		/* A block that can't take the next small allocation goes behind
		 * the current head, so the head keeps serving small ones. */
		if (a->head && cap > ALERT_ARENA_BLOCK) {
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

/* ---- label sets ---- */

const char *alert_labels__get(const struct alert_labels *l, const char *key)
{
	for (size_t i = 0; i < l->n; i++)
		if (!strcmp(l->kv[2 * i], key))
			return l->kv[2 * i + 1];
	return "";
}

void alert_labels__sort(struct alert_labels *l)
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

bool alert_name_valid(const char *s, bool metric)
{
	for (const char *p = s; *p; p++) {
		bool alpha = (*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') || *p == '_' ||
			     (metric && *p == ':');

		if (!alpha && !(p > s && *p >= '0' && *p <= '9'))
			return false;
	}
	return *s != '\0';
}

bool alert_name_in(const char *s, char *const *names, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!strcmp(names[i], s))
			return true;
	return false;
}

struct alert_labels alert_labels__reduce(struct alert_arena *a, const struct alert_labels *l,
					 char *const *names, size_t n, bool keep)
{
	struct alert_labels out = {.kv = alert_arena__alloc(a, (2 * l->n + 1) * sizeof(char *))};

	for (size_t i = 0; i < l->n; i++) {
		if (alert_name_in(l->kv[2 * i], names, n) != keep)
			continue;
		out.kv[2 * out.n] = l->kv[2 * i];
		out.kv[2 * out.n + 1] = l->kv[2 * i + 1];
		out.n++;
	}
	return out;
}

/* ---- label keys ---- */

static void key_put(struct alert_key *k, const char *str)
{
	size_t n = strlen(str) + 1;

	xgrow((void **)&k->b, &k->cap, k->n + n, 1);
	memcpy(k->b + k->n, str, n);
	k->n += n;
}

void alert_key__set(struct alert_key *k, const struct alert_labels *l, char *const *names, size_t n,
		    bool include)
{
	k->n = 0;
	xgrow((void **)&k->b, &k->cap, 1, 1); /* never NULL, even when empty */
	if (include) {
		for (size_t i = 0; i < n; i++) {
			key_put(k, names[i]);
			key_put(k, alert_labels__get(l, names[i]));
		}
		return;
	}
	for (size_t i = 0; i < l->n; i++) {
		if (alert_name_in(l->kv[2 * i], names, n))
			continue;
		key_put(k, l->kv[2 * i]);
		key_put(k, l->kv[2 * i + 1]);
	}
}

const char *alert_key__text(const struct alert_key *k, char *buf, size_t len)
{
	size_t o = 0;

	o += snprintf(buf + o, len - o, "{");
	for (size_t i = 0; i < k->n && o < len;) {
		const char *name = k->b + i, *v = name + strlen(name) + 1;

		o += snprintf(buf + o, len - o, "%s%s=\"%s\"", i ? ", " : "", name, v);
		i = v + strlen(v) + 1 - k->b;
	}
	if (o < len)
		snprintf(buf + o, len - o, "}");
	return buf;
}

void alert_key__free(struct alert_key *k)
{
	free(k->b);
	k->b = NULL;
	k->n = k->cap = 0;
}

/* ---- vectors ---- */

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
	alert_labels__sort(&l);
	alert_vector__push(&m->v, l, value);
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
