/* test_server_flame.c: unit tests of the flame graph, diff and top
 * builders (src/server/flame.c) on constructed profiles. Every answer is
 * decoded the way Pyroscope's UI decodes it (x from the deltas) and checked
 * as a whole: each node inside its parent, totals equal self plus children,
 * siblings in name order, every stack's value where it should be; then the
 * exact values of known stacks. max_nodes collapsing keeps the totals and
 * the heaviest nodes; a diff carries both sides; top counts a recursive
 * function once per stack. A tree of over 100 000 nodes is built and
 * checked too (its time is printed; docs/perf.md has the benchmark). */
#include <errno.h>
#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cmocka.h>
#include <jansson.h>

#include "profile/profile.h"
#include "server/flame.h"
#include "store/store.h"

/* Adds a stack given root first as "a;b;c" (a "_[k]" suffix marks a
 * kernel frame). */
static void add_stack(struct profile *p, const char *folded, int64_t count)
{
	struct prof_frame fr[PROF_MAX_FRAMES];
	char *copy = strdup(folded), *names[PROF_MAX_FRAMES], *tok, *save = NULL;
	size_t n = 0;

	for (tok = strtok_r(copy, ";", &save); tok; tok = strtok_r(NULL, ";", &save))
		names[n++] = tok;
	for (size_t i = 0; i < n; i++) {
		char *name = names[n - 1 - i];
		size_t len = strlen(name);

		memset(&fr[i], 0, sizeof(fr[i]));
		if (len > 4 && !strcmp(name + len - 4, "_[k]")) {
			name[len - 4] = '\0';
			fr[i].kernel = true;
			fr[i].module = "[kernel.kallsyms]";
		} else {
			fr[i].module = "/usr/bin/shares";
		}
		fr[i].func = name;
	}
	assert_int_equal(profile__add(p, 0, 0, "", fr, n, count), 0);
	free(copy);
}

/* A decoded node. */
struct dnode {
	int depth;
	int64_t x[2], total[2], self[2];
	const char *name;
	int parent;
	char path[4096];
};

struct decoded {
	struct dnode *v;
	size_t n;
	json_t *root;
	int64_t num_ticks, max_self;
};

/* Decodes and checks a flamebearer object of nsides sides. */
static void decode(const char *text, int nsides, struct decoded *d)
{
	json_error_t jerr;
	json_t *names, *levels;
	int stride = nsides == 1 ? 4 : 7;
	size_t cap = 1024;

	memset(d, 0, sizeof(*d));
	d->root = json_loads(text, 0, &jerr);
	if (!d->root)
		fail_msg("not JSON: %s", jerr.text);
	names = json_object_get(d->root, "names");
	levels = json_object_get(d->root, "levels");
	assert_true(json_is_array(names) && json_is_array(levels));
	d->num_ticks = json_integer_value(json_object_get(d->root, "numTicks"));
	d->max_self = json_integer_value(json_object_get(d->root, "maxSelf"));
	d->v = calloc(cap, sizeof(*d->v));
	for (size_t lv = 0; lv < json_array_size(levels); lv++) {
		json_t *level = json_array_get(levels, lv);
		int64_t prev_end[2] = {0, 0};
		size_t first_parent = 0;

		assert_int_equal(json_array_size(level) % stride, 0);
		for (size_t k = 0; k < json_array_size(level); k += stride) {
			struct dnode *nd;
			size_t ni;

			if (d->n == cap) {
				cap *= 2;
				d->v = realloc(d->v, cap * sizeof(*d->v));
			}
			nd = &d->v[d->n];
			memset(nd, 0, sizeof(*nd));
			nd->depth = (int)lv;
			for (int s = 0; s < nsides; s++) {
				int64_t delta =
					json_integer_value(json_array_get(level, k + 3 * s));

				assert_true(delta >= 0);
				nd->x[s] = prev_end[s] + delta;
				nd->total[s] =
					json_integer_value(json_array_get(level, k + 3 * s + 1));
				nd->self[s] =
					json_integer_value(json_array_get(level, k + 3 * s + 2));
				prev_end[s] = nd->x[s] + nd->total[s];
				assert_true(nd->self[s] <= nd->total[s]);
				assert_true(nd->self[s] <= d->max_self);
			}
			ni = (size_t)json_integer_value(json_array_get(level, k + stride - 1));
			assert_true(ni < json_array_size(names));
			nd->name = json_string_value(json_array_get(names, ni));
			nd->parent = -1;
			if (lv) {
				/* The parent: the node of the level above whose
				 * left-side range holds this one (right side for a
				 * node only on the right). */
				int side = nsides == 2 && !nd->total[0] ? 1 : 0;

				for (size_t pi = first_parent; pi < d->n; pi++) {
					struct dnode *p = &d->v[pi];

					if (p->depth != (int)lv - 1)
						continue;
					if (nd->x[side] >= p->x[side] &&
					    nd->x[side] + nd->total[side] <=
						    p->x[side] + p->total[side] &&
					    (p->total[side] > 0)) {
						/* Zero-width nodes: take the last candidate
						 * whose range starts at or before ours. */
						nd->parent = (int)pi;
						if (nd->total[side])
							break;
					}
				}
				if (nd->parent < 0)
					fail_msg("node '%s' at depth %zu has no parent", nd->name,
						 lv);
				snprintf(nd->path, sizeof(nd->path), "%.3000s;%.1000s",
					 d->v[nd->parent].path, nd->name);
			} else {
				assert_string_equal(nd->name, "total");
				snprintf(nd->path, sizeof(nd->path), "%s", "");
			}
			d->n++;
		}
		(void)first_parent;
	}
	/* Totals: self plus the children's, on every side. */
	for (size_t i = 0; i < d->n; i++) {
		int64_t sum[2] = {d->v[i].self[0], d->v[i].self[1]};
		const char *prev = NULL;

		for (size_t j = 0; j < d->n; j++) {
			if (d->v[j].parent != (int)i)
				continue;
			for (int s = 0; s < nsides; s++)
				sum[s] += d->v[j].total[s];
			/* Siblings by name ("other" ties allowed). */
			if (prev)
				assert_true(strcmp(prev, d->v[j].name) <= 0);
			prev = d->v[j].name;
		}
		for (int s = 0; s < nsides; s++)
			if (sum[s] != d->v[i].total[s])
				fail_msg("node %s: self + children = %" PRId64 ", total %" PRId64,
					 d->v[i].path, sum[s], d->v[i].total[s]);
	}
}

static void decoded__free(struct decoded *d)
{
	json_decref(d->root);
	free(d->v);
}

/* The node at path ";a;b" (root first, leading ';'). */
static const struct dnode *find(const struct decoded *d, const char *path)
{
	for (size_t i = 0; i < d->n; i++)
		if (!strcmp(d->v[i].path, path))
			return &d->v[i];
	return NULL;
}

static char *write_flame(struct flame *f, size_t max_nodes)
{
	struct sbuf b = {0};

	assert_int_equal(flame__write(f, max_nodes, &b), 0);
	return sbuf__steal(&b, NULL);
}

static struct profile *shares_profile(void)
{
	struct profile *p = profile__new("cpu", "samples", 0);

	add_stack(p, "main;run;hot_a", 600);
	add_stack(p, "main;run;hot_b", 300);
	add_stack(p, "main;run;hot_c", 90);
	add_stack(p, "main;run", 5);
	add_stack(p, "main;read;sys_read_[k]", 4);
	add_stack(p, "main;run;hot_a", 0); /* zero: adds nothing */
	return p;
}

static void test_single(void **state)
{
	struct profile *p = shares_profile();
	struct flame *f = flame__new(1);
	struct decoded d;
	const struct dnode *n;
	char *text;

	assert_non_null(f);
	assert_int_equal(flame__add(f, 0, p), 0);
	assert_int_equal(flame__ticks(f, 0), 999);
	text = write_flame(f, FLAME_DEFAULT_MAX_NODES);
	decode(text, 1, &d);
	assert_int_equal(d.num_ticks, 999);
	assert_int_equal(d.max_self, 600);
	assert_int_equal(d.n, 8);
	n = find(&d, ";main;run;hot_a");
	assert_non_null(n);
	assert_int_equal(n->total[0], 600);
	assert_int_equal(n->self[0], 600);
	n = find(&d, ";main;run");
	assert_int_equal(n->total[0], 995);
	assert_int_equal(n->self[0], 5);
	n = find(&d, ";main;read;sys_read_[k]");
	assert_non_null(n);
	assert_int_equal(n->total[0], 4);
	/* Children by name: read before run, hot_a < hot_b < hot_c. */
	assert_true(find(&d, ";main;read")->x[0] < find(&d, ";main;run")->x[0]);
	assert_true(find(&d, ";main;run;hot_b")->x[0] > find(&d, ";main;run;hot_a")->x[0]);
	/* The exact encoding of the first levels. */
	assert_non_null(strstr(text, "\"levels\":[[0,999,0,0],[0,999,0,"));
	decoded__free(&d);
	free(text);
	flame__free(f);
	profile__free(p);
}

static void test_empty(void **state)
{
	struct profile *p = profile__new("cpu", "samples", 0);
	struct flame *f = flame__new(1);
	struct decoded d;
	char *text;

	assert_int_equal(flame__add(f, 0, p), 0);
	text = write_flame(f, 10);
	decode(text, 1, &d);
	assert_int_equal(d.n, 1);
	assert_int_equal(d.num_ticks, 0);
	assert_string_equal(
		text,
		"{\"names\":[\"total\"],\"levels\":[[0,0,0,0]],\"numTicks\":0,\"maxSelf\":0}");
	decoded__free(&d);
	free(text);
	flame__free(f);
	profile__free(p);
	/* A bad side is refused. */
	f = flame__new(1);
	p = profile__new("cpu", "samples", 0);
	assert_int_equal(flame__add(f, 1, p), -EINVAL);
	flame__free(f);
	profile__free(p);
	assert_null(flame__new(3));
}

/* A wide random tree collapsed to max_nodes keeps the totals, holds at
 * most max_nodes nodes, and keeps the heaviest stack whole. */
static void test_max_nodes(void **state)
{
	struct profile *p = profile__new("cpu", "samples", 0);
	struct flame *f = flame__new(1);
	struct decoded d;
	unsigned seed = 42;
	size_t others = 0;
	char *text;

	add_stack(p, "main;big;heavy", 100000);
	for (int i = 0; i < 3000; i++) {
		char buf[200];

		snprintf(buf, sizeof(buf), "main;f%d;g%d;h%d", rand_r(&seed) % 50,
			 rand_r(&seed) % 20, i);
		add_stack(p, buf, 1 + rand_r(&seed) % 100);
	}
	assert_int_equal(flame__add(f, 0, p), 0);
	assert_true(flame__nodes(f) > 3000);
	for (size_t max = 2; max <= 4096; max *= 4) {
		text = write_flame(f, max);
		decode(text, 1, &d);
		if (d.n > max)
			fail_msg("%zu nodes written for max_nodes %zu", d.n, max);
		assert_int_equal(d.num_ticks, p->total);
		assert_int_equal(d.v[0].total[0], p->total);
		for (size_t i = 0; i < d.n; i++)
			others += !strcmp(d.v[i].name, "other");
		if (max >= 8) {
			const struct dnode *h = find(&d, ";main;big;heavy");

			assert_non_null(h);
			assert_int_equal(h->total[0], 100000);
		}
		decoded__free(&d);
		free(text);
	}
	assert_true(others > 0);
	/* max_nodes 1 still gives the root and its "other". */
	text = write_flame(f, 1);
	decode(text, 1, &d);
	assert_int_equal(d.n, 2);
	assert_string_equal(d.v[1].name, "other");
	assert_int_equal(d.v[1].total[0], p->total);
	decoded__free(&d);
	free(text);
	flame__free(f);
	profile__free(p);
}

/* Long names: past FLAME_MAX_TEXT bytes of them the lightest nodes go into
 * "other" as past max_nodes -- the answer says "truncated", keeps the
 * totals and the heaviest names, and its names fit in the bound. A tree
 * written whole says nothing of it; one cut by max_nodes says it too. */
static void test_text_bound(void **state)
{
	struct profile *p = profile__new("cpu", "samples", 0);
	struct flame *f = flame__new(1);
	size_t n = FLAME_MAX_TEXT / 4000 + 1000, bytes = 0;
	char *name = malloc(4100), *stack = malloc(4200), *text;
	bool heaviest = false, other = false;
	json_t *root, *names;

	for (size_t i = 0; i < n; i++) {
		memset(name, 'a' + i % 26, 4000);
		snprintf(name + 3990, 100, "_%zu", i);
		snprintf(stack, 4200, "main;%s", name);
		add_stack(p, stack, (int64_t)(n - i));
	}
	assert_int_equal(flame__add(f, 0, p), 0);
	text = write_flame(f, FLAME_LIMIT_MAX_NODES);
	flame__free(f);
	root = json_loads(text, 0, NULL);
	free(text);
	assert_non_null(root);
	assert_true(json_is_true(json_object_get(root, "truncated")));
	assert_int_equal(json_integer_value(json_object_get(root, "numTicks")), p->total);
	names = json_object_get(root, "names");
	for (size_t i = 0; i < json_array_size(names); i++) {
		const char *s = json_string_value(json_array_get(names, i));

		bytes += strlen(s);
		heaviest |= !strncmp(s, "aaaa", 4) && !strcmp(s + 3990, "_0");
		other |= !strcmp(s, "other");
	}
	assert_true(bytes <= FLAME_MAX_TEXT);
	assert_true(bytes > FLAME_MAX_TEXT / 2);
	assert_true(json_array_size(names) < n);
	assert_true(heaviest && other);
	json_decref(root);
	profile__free(p);

	/* Small: whole, no mark; cut by max_nodes: marked. */
	p = profile__new("cpu", "samples", 0);
	f = flame__new(1);
	add_stack(p, "main;a", 2);
	add_stack(p, "main;b", 1);
	assert_int_equal(flame__add(f, 0, p), 0);
	text = write_flame(f, FLAME_DEFAULT_MAX_NODES);
	assert_null(strstr(text, "truncated"));
	free(text);
	text = write_flame(f, 3);
	assert_non_null(strstr(text, "\"truncated\":true"));
	free(text);
	flame__free(f);
	profile__free(p);
	free(name);
	free(stack);
}

static void test_diff(void **state)
{
	struct profile *l = shares_profile(), *r = profile__new("cpu", "samples", 0);
	struct flame *f = flame__new(2);
	struct decoded d;
	const struct dnode *n;
	char *text;

	add_stack(r, "main;run;hot_a", 100);
	add_stack(r, "main;run;hot_d", 50);
	add_stack(r, "main;run;hot_b", 300);
	assert_int_equal(flame__add(f, 0, l), 0);
	assert_int_equal(flame__add(f, 1, r), 0);
	assert_int_equal(flame__ticks(f, 0), 999);
	assert_int_equal(flame__ticks(f, 1), 450);
	text = write_flame(f, FLAME_DEFAULT_MAX_NODES);
	decode(text, 2, &d);
	assert_int_equal(d.num_ticks, 999 + 450);
	n = find(&d, ";main;run;hot_a");
	assert_int_equal(n->total[0], 600);
	assert_int_equal(n->total[1], 100);
	n = find(&d, ";main;run;hot_d");
	assert_non_null(n);
	assert_int_equal(n->total[0], 0);
	assert_int_equal(n->total[1], 50);
	n = find(&d, ";main;run;hot_c");
	assert_int_equal(n->total[0], 90);
	assert_int_equal(n->total[1], 0);
	assert_int_equal(find(&d, ";main;read;sys_read_[k]")->total[1], 0);
	/* Seven integers per node. */
	assert_non_null(strstr(text, "\"levels\":[[0,999,0,0,450,0,0]"));
	assert_non_null(strstr(text, "\"leftTicks\":999,\"rightTicks\":450}"));
	decoded__free(&d);
	free(text);
	flame__free(f);
	profile__free(l);
	profile__free(r);
}

static void test_top(void **state)
{
	struct profile *p = profile__new("cpu", "samples", 0);
	struct top_fn *fns;
	size_t n;

	add_stack(p, "main;rec;rec;rec;leaf", 10);
	add_stack(p, "main;rec;other", 5);
	add_stack(p, "main;leaf", 7);
	add_stack(p, "main;write_[k]", 3);
	assert_int_equal(top__build(p, TOP_BY_SELF, FLAME_ALL, 100, &fns, &n), 0);
	assert_int_equal(n, 5);
	assert_string_equal(fns[0].func, "leaf");
	assert_int_equal(fns[0].self, 17);
	assert_int_equal(fns[0].total, 17);
	assert_string_equal(fns[0].module, "shares");
	assert_string_equal(fns[1].func, "other");
	assert_int_equal(fns[1].self, 5);
	assert_string_equal(fns[2].func, "write");
	assert_true(fns[2].kernel);
	assert_string_equal(fns[2].module, "[kernel.kallsyms]");
	/* Then by total: main 25 and rec 15, each counted once per stack. */
	assert_string_equal(fns[3].func, "main");
	assert_int_equal(fns[3].total, 25);
	assert_int_equal(fns[3].self, 0);
	assert_string_equal(fns[4].func, "rec");
	assert_int_equal(fns[4].total, 15);
	free(fns);

	assert_int_equal(top__build(p, TOP_BY_TOTAL, FLAME_ALL, 2, &fns, &n), 0);
	assert_int_equal(n, 2);
	assert_string_equal(fns[0].func, "main");
	assert_string_equal(fns[1].func, "leaf");
	free(fns);
	profile__free(p);
}

/* Over 100 000 nodes: built, collapsed and written whole. */
static void test_large(void **state)
{
	struct profile *p = profile__new("cpu", "samples", 0);
	struct flame *f = flame__new(1);
	struct decoded d;
	struct timespec t0, t1, t2;
	int64_t total = 0;
	char *text;

	for (int i = 0; i < 55000; i++) {
		char buf[200];

		snprintf(buf, sizeof(buf), "main;mod%d;fn%d;leaf%d", i % 97, i % 1013, i);
		add_stack(p, buf, 1 + i % 7);
		total += 1 + i % 7;
	}
	clock_gettime(CLOCK_MONOTONIC, &t0);
	assert_int_equal(flame__add(f, 0, p), 0);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	assert_true(flame__nodes(f) > 100000);
	text = write_flame(f, FLAME_LIMIT_MAX_NODES);
	clock_gettime(CLOCK_MONOTONIC, &t2);
	print_message(
		"%zu nodes: built in %.1f ms, written in %.1f ms (%zu bytes)\n", flame__nodes(f),
		(t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6,
		(t2.tv_sec - t1.tv_sec) * 1e3 + (t2.tv_nsec - t1.tv_nsec) / 1e6, strlen(text));
	assert_int_equal(flame__ticks(f, 0), total);
	/* The whole tree is written; spot-check one leaf's chain. */
	{
		json_t *j = json_loads(text, 0, NULL), *levels = json_object_get(j, "levels");
		size_t nodes = 0;

		for (size_t i = 0; i < json_array_size(levels); i++)
			nodes += json_array_size(json_array_get(levels, i)) / 4;
		assert_int_equal(nodes, flame__nodes(f));
		json_decref(j);
	}
	free(text);
	text = write_flame(f, 5000);
	decode(text, 1, &d);
	assert_true(d.n <= 5000);
	assert_int_equal(d.num_ticks, total);
	decoded__free(&d);
	free(text);
	flame__free(f);
	profile__free(p);
}

/* The module of each name ("modules" beside "names"): its module's
 * basename, "" for a frame without one. */
static const char *module_of(const struct decoded *d, const char *name)
{
	json_t *names = json_object_get(d->root, "names"),
	       *mods = json_object_get(d->root, "modules");

	assert_true(json_is_array(mods));
	assert_int_equal(json_array_size(mods), json_array_size(names));
	for (size_t i = 0; i < json_array_size(names); i++)
		if (!strcmp(json_string_value(json_array_get(names, i)), name))
			return json_string_value(json_array_get(mods, i));
	fail_msg("no name %s", name);
	return NULL;
}

/* Group frames under the root (the query API's group_by), each holding its
 * profile's stacks, none for an empty profile; modules by name. */
static void test_groups_and_modules(void **state)
{
	struct profile *a = shares_profile(), *b = profile__new("cpu", "samples", 0),
		       *none = profile__new("cpu", "samples", 0);
	struct flame *f = flame__new(1);
	struct decoded d;
	const struct dnode *n;
	char *text;

	add_stack(b, "main;work", 10);
	add_stack(b, "main;run;hot_a", 7);
	assert_int_equal(flame__add_under(f, 0, "thread=b", b), 0);
	assert_int_equal(flame__add_under(f, 0, "thread=a", a), 0);
	assert_int_equal(flame__add_under(f, 0, "thread=none", none), 0);
	assert_int_equal(flame__add_under(f, 0, NULL, a), -EINVAL);
	assert_int_equal(flame__add_under(f, 1, "x", a), -EINVAL);
	assert_int_equal(flame__ticks(f, 0), 999 + 17);
	text = write_flame(f, FLAME_DEFAULT_MAX_NODES);
	decode(text, 1, &d);
	assert_int_equal(d.num_ticks, 1016);
	/* root, thread=a and its 7 nodes below, thread=b, main, work, run, hot_a */
	assert_int_equal(d.n, 1 + 1 + 7 + 1 + 4);
	n = find(&d, ";thread=a");
	assert_int_equal(n->total[0], 999);
	assert_int_equal(n->self[0], 0);
	assert_int_equal(n->depth, 1);
	assert_int_equal(find(&d, ";thread=a;main;run;hot_a")->total[0], 600);
	assert_int_equal(find(&d, ";thread=a;main;read;sys_read_[k]")->total[0], 4);
	n = find(&d, ";thread=b");
	assert_int_equal(n->total[0], 17);
	assert_int_equal(find(&d, ";thread=b;main;work")->self[0], 10);
	assert_int_equal(find(&d, ";thread=b;main;run;hot_a")->total[0], 7);
	assert_null(find(&d, ";thread=none"));
	assert_null(find(&d, ";main"));
	/* Groups in name order, like every node's children. */
	assert_true(find(&d, ";thread=a")->x[0] < find(&d, ";thread=b")->x[0]);
	assert_string_equal(module_of(&d, "hot_a"), "shares");
	assert_string_equal(module_of(&d, "sys_read_[k]"), "[kernel.kallsyms]");
	assert_string_equal(module_of(&d, "thread=a"), "");
	assert_string_equal(module_of(&d, "total"), "");
	decoded__free(&d);
	free(text);
	flame__free(f);
	profile__free(a);
	profile__free(b);
	profile__free(none);
}

/* The shares profile's stacks as a store with a stack trie hands them over
 * (store.h's struct store_tree): each prefix one node, children after
 * their parent, a node of no value on the way to others, and a dead end
 * (a node with nothing under it, which shows nothing). */
static const struct store_func tree_funcs[] = {
	{"hot_a", "/usr/bin/shares", "", 0, false},
	{"main", "/usr/bin/shares", "", 0, false},
	{"run", "/usr/bin/shares", "", 0, false},
	{"sys_read", "[kernel.kallsyms]", "", 0, true},
	{"read", "/usr/bin/shares", "", 0, false},
	{"hot_b", "/usr/bin/shares", "", 0, false},
	{"hot_c", "/usr/bin/shares", "", 0, false},
	{"dead", "/usr/bin/shares", "/src/dead.c", 1, false},
};
static const struct store_node tree_nodes[] = {
	{STORE_NO_PARENT, 1, 0}, /* 0 main */
	{0, 4, 0},		 /* 1 main;read */
	{0, 2, 5},		 /* 2 main;run */
	{2, 6, 90},		 /* 3 main;run;hot_c */
	{1, 3, 4},		 /* 4 main;read;sys_read_[k] */
	{2, 0, 600},		 /* 5 main;run;hot_a */
	{2, 7, 0},		 /* 6 main;run;dead: no value */
	{2, 5, 300},		 /* 7 main;run;hot_b */
};

static int flame_tree_cb(void *ctx, const struct store_tree *t)
{
	return flame__add_tree(ctx, 0, NULL, t);
}

/* A tree from a store's trie and the chains a profile makes
 * (store_tree__of_profile) give the same graph; a tree is checked. */
static void test_tree(void **state)
{
	struct store_tree t = {tree_funcs, 8, tree_nodes, 8, 0, 0};
	struct store_node bad[2] = {{1, 0, 1}, {STORE_NO_PARENT, 0, 1}};
	struct store_node badfn[1] = {{STORE_NO_PARENT, 8, 1}};
	struct profile *p = shares_profile();
	struct flame *a = flame__new(1), *b = flame__new(1);
	char *ta, *tb;

	assert_int_equal(flame__add_tree(a, 0, NULL, &t), 0);
	assert_int_equal(store_tree__of_profile(p, flame_tree_cb, b), 0);
	ta = write_flame(a, FLAME_DEFAULT_MAX_NODES);
	tb = write_flame(b, FLAME_DEFAULT_MAX_NODES);
	assert_string_equal(ta, tb);
	assert_null(strstr(ta, "dead"));
	assert_int_equal(flame__nodes(a), 8);
	free(ta);
	free(tb);
	/* A stack of no frames is the root's own. */
	t.root_value = 1;
	t.nnodes = 0;
	assert_int_equal(flame__add_tree(a, 0, NULL, &t), 0);
	assert_int_equal(flame__ticks(a, 0), 1000);
	/* A node before its parent, a function the tree lacks, a bad side. */
	t = (struct store_tree){tree_funcs, 8, bad, 2, 0, 0};
	assert_int_equal(flame__add_tree(a, 0, NULL, &t), -EINVAL);
	t = (struct store_tree){tree_funcs, 8, badfn, 1, 0, 0};
	assert_int_equal(flame__add_tree(a, 0, NULL, &t), -EINVAL);
	t = (struct store_tree){tree_funcs, 8, tree_nodes, 8, 0, 0};
	assert_int_equal(flame__add_tree(a, 1, NULL, &t), -EINVAL);
	/* Nothing under a group: no group frame. */
	t.nnodes = 1;
	assert_int_equal(flame__add_tree(b, 0, "g=x", &t), 0);
	ta = write_flame(b, FLAME_DEFAULT_MAX_NODES);
	assert_null(strstr(ta, "g=x"));
	free(ta);
	flame__free(a);
	flame__free(b);
	profile__free(p);
}

/* Adds a stack given root first as "func@module" or "func:file" (a Python
 * frame: a file, no module). */
static void add_mixed(struct profile *p, const char *const *frames, size_t n, int64_t count)
{
	struct prof_frame fr[16];
	char names[16][64];

	for (size_t i = 0; i < n; i++) {
		const char *f = frames[n - 1 - i], *at = strchr(f, '@'), *colon = strchr(f, ':');
		const char *sep = at ? at : colon;

		memset(&fr[i], 0, sizeof(fr[i]));
		snprintf(names[i], sizeof(names[i]), "%.*s", (int)(sep - f), f);
		fr[i].func = names[i];
		if (at)
			fr[i].module = at + 1;
		else
			fr[i].file = colon + 1;
	}
	assert_int_equal(profile__add(p, 0, 0, "", fr, n, count), 0);
}

/* FLAME_PYTHON: a Python program as py-spy shows it -- its Python frames
 * and the native code they call, the interpreter folded; a thread without
 * Python frames whole. The same from a profile and from a tree. */
static void test_python_frames(void **state)
{
	static const char *const s1[] = {"_start@/usr/bin/python3.11",
					 "__libc_start_call_main@/lib/libc.so.6",
					 "Py_RunMain@/usr/bin/python3.11",
					 "<module>:train.py",
					 "_PyEval_EvalFrameDefault@/usr/bin/python3.11",
					 "train_step:train.py",
					 "_PyObject_MakeTpCall@/usr/lib/libpython3.11.so.1.0",
					 "at::mm@/lib/libtorch_cpu.so",
					 "sgemm_@/lib/libblas.so.3"};
	static const char *const s2[] = {"_start@/usr/bin/python3.11",
					 "Py_RunMain@/usr/bin/python3.11", "<module>:train.py",
					 "_PyEval_EvalFrameDefault@/usr/bin/python3.11"};
	static const char *const s3[] = {"start_thread@/lib/libc.so.6",
					 "blas_thread_server@/lib/libblas.so.3"};
	struct profile *p = profile__new("cpu", "samples", 0);
	struct decoded d;

	add_mixed(p, s1, 9, 30);
	add_mixed(p, s2, 4, 5);
	add_mixed(p, s3, 2, 10);
	assert_int_equal(flame__frame_kind("/usr/bin/python3", "", false), 2);
	assert_int_equal(flame__frame_kind("/usr/lib/libpython3.12.so.1.0", "", false), 2);
	assert_int_equal(flame__frame_kind("/usr/bin/python3-config", "", false), 0);
	assert_int_equal(flame__frame_kind("", "x.py", false), 1);
	assert_int_equal(flame__frame_kind("", "<frozen importlib._bootstrap>", false), 1);
	assert_int_equal(flame__frame_kind("", "/src/main.c", false), 0);
	assert_int_equal(flame__frame_kind("", "", true), 0);
	for (int way = 0; way < 3; way++) {
		struct flame *f = flame__new(1);
		char *text;

		if (way)
			flame__set_frames(f, FLAME_PYTHON);
		if (way == 2)
			assert_int_equal(store_tree__of_profile(p, flame_tree_cb, f), 0);
		else
			assert_int_equal(flame__add(f, 0, p), 0);
		text = write_flame(f, FLAME_DEFAULT_MAX_NODES);
		decode(text, 1, &d);
		assert_int_equal(d.num_ticks, 45);
		if (!way) {
			assert_non_null(
				find(&d, ";_start;__libc_start_call_main;Py_RunMain;<module>"));
		} else {
			assert_int_equal(find(&d, ";<module>;train_step;at::mm;sgemm_")->total[0],
					 30);
			assert_int_equal(find(&d, ";<module>")->self[0], 5);
			assert_int_equal(find(&d, ";<module>")->total[0], 35);
			assert_int_equal(find(&d, ";start_thread;blas_thread_server")->total[0],
					 10);
			assert_null(strstr(text, "_PyEval_EvalFrameDefault"));
			assert_null(strstr(text, "_start\""));
			assert_null(strstr(text, "Py_RunMain"));
		}
		decoded__free(&d);
		free(text);
		flame__free(f);
	}
	/* The table of that view agrees: a folded frame's time is its
	 * caller's. */
	{
		struct top_fn *fns;
		size_t n;
		int64_t module_self = -1, sgemm_self = -1, eval_total = 0, start_total = 0;

		assert_int_equal(top__build(p, TOP_BY_SELF, FLAME_PYTHON, 100, &fns, &n), 0);
		for (size_t i = 0; i < n; i++) {
			if (!strcmp(fns[i].func, "<module>"))
				module_self = fns[i].self;
			if (!strcmp(fns[i].func, "sgemm_"))
				sgemm_self = fns[i].self;
			if (!strcmp(fns[i].func, "_PyEval_EvalFrameDefault"))
				eval_total = fns[i].total;
			if (!strcmp(fns[i].func, "_start"))
				start_total = fns[i].total;
		}
		assert_int_equal(module_self, 5);
		assert_int_equal(sgemm_self, 30);
		assert_int_equal(eval_total, 0);
		assert_int_equal(start_total, 0);
		free(fns);
	}
	profile__free(p);
}

/* Adds "main;work" with work at (module, file, line) to p, count. */
static void add_work(struct profile *p, const char *module, const char *file, uint32_t line,
		     int64_t count)
{
	struct prof_frame fr[2] = {
		{.func = "work", .module = module, .file = file, .start_line = line},
		{.func = "main", .module = "/usr/bin/app"},
	};

	assert_int_equal(profile__add(p, 0, 0, "", fr, 2, count), 0);
}

/* What the answer's key ("sources", "modules") says of name. */
static const char *says(const char *text, const char *key, const char *name)
{
	static char out[256];
	json_t *j = json_loads(text, 0, NULL), *names, *vals;

	assert_non_null(j);
	names = json_object_get(j, "names");
	vals = json_object_get(j, key);
	out[0] = '\0';
	for (size_t i = 0; i < json_array_size(names); i++)
		if (!strcmp(json_string_value(json_array_get(names, i)), name))
			snprintf(out, sizeof(out), "%s",
				 json_string_value(json_array_get(vals, i)));
	json_decref(j);
	return out;
}

/* A name of several functions (modules, files, a first line unknown)
 * shows the least file, line and module of them, whatever order they
 * come in: every order of the same stacks gives the same answer. */
static void test_name_rule(void **state)
{
	static const struct {
		const char *module, *file;
		uint32_t line;
	} w[] = {
		{"/opt/b/libb.so", "/src/b.c", 20}, {"/opt/a/liba.so", "/src/a.c", 30},
		{"/usr/bin/app", "/src/a.c", 0},    {NULL, NULL, 0},
		{"/opt/c/libc.so", "/src/a.c", 31},
	};
	static const int orders[][5] = {{0, 1, 2, 3, 4}, {4, 3, 2, 1, 0}, {2, 4, 0, 3, 1}};
	char *first = NULL;

	for (size_t o = 0; o < sizeof(orders) / sizeof(orders[0]); o++) {
		struct profile *p = profile__new("cpu", "samples", 0);
		struct flame *f = flame__new(1);
		char *text;

		for (int i = 0; i < 5; i++) {
			int k = orders[o][i];

			add_work(p, w[k].module, w[k].file, w[k].line, k + 1);
		}
		assert_int_equal(flame__add(f, 0, p), 0);
		text = write_flame(f, FLAME_DEFAULT_MAX_NODES);
		if (!first) {
			first = text;
			assert_string_equal(says(text, "sources", "work"), "/src/a.c:30");
			assert_string_equal(says(text, "modules", "work"), "app");
			assert_string_equal(says(text, "sources", "main"), "");
			assert_string_equal(says(text, "modules", "main"), "app");
		} else {
			assert_string_equal(text, first);
			free(text);
		}
		flame__free(f);
		profile__free(p);
	}
	free(first);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_single),	  cmocka_unit_test(test_empty),
		cmocka_unit_test(test_max_nodes), cmocka_unit_test(test_text_bound),
		cmocka_unit_test(test_diff),	  cmocka_unit_test(test_top),
		cmocka_unit_test(test_large),	  cmocka_unit_test(test_groups_and_modules),
		cmocka_unit_test(test_tree),	  cmocka_unit_test(test_python_frames),
		cmocka_unit_test(test_name_rule),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
