/* store_bench.c: what the embedded store costs, on one node's realistic
 * data -- `make bench-store` runs it through bench/store.sh, which writes
 * the report docs/perf.md quotes.
 *
 * The generator models one node sampled at 99 Hz on 2 CPUs in 10 s windows:
 * ~200 processes running ~24 programs (a few programs many processes, as
 * Python workers), a Zipf spread of CPU time over the processes, and per
 * program a pool of stacks 10-60 frames deep grown from shared prefixes
 * (main, the interpreter loop, ...) with Zipf popularity, a third of them
 * ending in a kernel syscall path; names from the program's binary, shared
 * libraries and the kernel. Each window is split per process into a series
 * {type, service_name, node, pid, comm, exe}, as the server does, and put in
 * one call. A few processes restart every hour (new pids: new series).
 * 24 hours is 8640 puts; to make them fast, the windows are drawn from a pool
 * of pre-built node windows, so only the store's work is timed.
 *
 * Measured: ingest CPU time (the putting thread's, user + system: not the
 * fsync wait) per stored sample (a distinct stack of a series in a window,
 * store_stats.samples) and per sampled event (the sum of values); bytes on
 * disk per both; select (a flame graph's, as the query API reads it: a tree
 * of stacks, store__select_tree; and one sorted into a profile,
 * store__select), a flame graph's whole answer as the query API makes it
 * (the select's tree built into a flame tree and written as flamebearer),
 * timeline and label latency over the last hour and 24 hours; put latency and select throughput with readers running, against
 * the same calls serialized by one mutex (the single-connection design). */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "common/sbuf.h"
#include "profile/profile.h"
#include "server/flame.h"
#include "store/store.h"

#define CPUS 2
#define HZ 99
#define WINDOW_MS 10000
#define SAMPLES_PER_WINDOW (CPUS * HZ * WINDOW_MS / 1000)
#define NPROCS 200
#define NPROGS 24
#define FUNCS_PER_PROG 400
#define NSHARED 600 /* libc, libpython, libtorch... functions */
#define NKERNEL 300
#define MAX_DEPTH 80
#define T0 1800000000000LL /* an hour boundary, ms */
#define HOUR_MS 3600000LL

/* ---- random numbers ---- */

static uint64_t rng = 0x9e3779b97f4a7c15ULL;

static uint64_t rnd(void)
{
	rng ^= rng >> 12;
	rng ^= rng << 25;
	rng ^= rng >> 27;
	return rng * 0x2545f4914f6cdd1dULL;
}

static double rnd01(void)
{
	return (double)(rnd() >> 11) / (double)(1ULL << 53);
}

static unsigned int rnd_below(unsigned int n)
{
	return (unsigned int)(rnd() % n);
}

/* Zipf(s) over n ranks, as a cumulative table. */
struct zipf {
	double *cdf;
	unsigned int n;
};

static void zipf_init(struct zipf *z, unsigned int n, double s)
{
	double sum = 0;
	unsigned int i;

	z->cdf = malloc(n * sizeof(*z->cdf));
	z->n = n;
	for (i = 0; i < n; i++)
		sum += 1.0 / pow(i + 1, s);
	for (i = 0; i < n; i++)
		z->cdf[i] = (i ? z->cdf[i - 1] : 0) + 1.0 / pow(i + 1, s) / sum;
}

static unsigned int zipf_draw(const struct zipf *z)
{
	double u = rnd01();
	unsigned int lo = 0, hi = z->n - 1;

	while (lo < hi) {
		unsigned int mid = (lo + hi) / 2;

		if (z->cdf[mid] < u)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* ---- the node's programs ---- */

struct func {
	char *name;
	const char *module;
	bool kernel;
};

struct func;

struct stack {
	struct prof_frame *frames; /* leaf first */
	const struct func **path;  /* root first */
	unsigned int n;
};

struct program {
	char comm[16], exe[64];
	struct func *funcs; /* FUNCS_PER_PROG of its own */
	struct stack *stacks;
	unsigned int nstacks;
	struct zipf pop;
};

struct process {
	int prog;
	unsigned int pid;
	char pidstr[16];
};

static struct func shared[NSHARED], kernel[NKERNEL];
static struct program progs[NPROGS];
static struct process procs[NPROCS];
static unsigned int next_pid = 1000;

static const char *const words[] = {
	"eval",	  "frame", "dispatch", "tensor", "matmul", "alloc", "read",  "write", "parse",
	"encode", "hash",  "lookup",   "insert", "batch",  "queue", "poll",  "recv",  "send",
	"copy",	  "sort",  "merge",    "reduce", "gather", "scan",  "apply", "visit", "load"};

static char *func_name(const char *prefix, unsigned int i)
{
	char buf[128];
	unsigned int k, n = 1 + rnd_below(4);
	size_t len = (size_t)snprintf(buf, sizeof(buf), "%s", prefix);

	for (k = 0; k < n && len < sizeof(buf) - 16; k++)
		len += (size_t)snprintf(buf + len, sizeof(buf) - len, "_%s",
					words[rnd_below(sizeof(words) / sizeof(words[0]))]);
	snprintf(buf + len, sizeof(buf) - len, "_%u", i);
	return strdup(buf);
}

static void set_frame(struct prof_frame *f, const struct func *fn)
{
	memset(f, 0, sizeof(*f));
	f->func = fn->name;
	f->module = fn->module;
	f->kernel = fn->kernel;
	f->addr = (uint64_t)(uintptr_t)fn->name; /* any address unique to the function */
}

static const struct func *pick_func(const struct program *p)
{
	return rnd01() < 0.6 ? &p->funcs[rnd_below(FUNCS_PER_PROG)] : &shared[rnd_below(NSHARED)];
}

/* A program's stacks: each grows from a prefix of an earlier one. */
static void build_program(struct program *p, int idx)
{
	const struct func *path[MAX_DEPTH];
	unsigned int i, j;

	snprintf(p->comm, sizeof(p->comm), "prog%d", idx);
	snprintf(p->exe, sizeof(p->exe), "/opt/apps/bin/prog%d", idx);
	p->funcs = calloc(FUNCS_PER_PROG, sizeof(*p->funcs));
	for (i = 0; i < FUNCS_PER_PROG; i++) {
		p->funcs[i].name = func_name(p->comm, i);
		p->funcs[i].module = p->exe;
	}
	p->nstacks = 200 + rnd_below(800);
	p->stacks = calloc(p->nstacks, sizeof(*p->stacks));
	for (i = 0; i < p->nstacks; i++) {
		unsigned int depth, cut, target = 10 + rnd_below(51);

		if (i == 0) {
			path[0] = &shared[0];	/* _start */
			path[1] = &shared[1];	/* __libc_start_main */
			path[2] = &p->funcs[0]; /* main */
			cut = 3;
		} else {
			const struct stack *parent = &p->stacks[rnd_below(i)];

			cut = 3 + rnd_below(parent->n > 3 ? parent->n - 3 : 1);
			for (j = 0; j < cut && !parent->path[j]->kernel; j++)
				path[j] = parent->path[j];
			cut = j;
		}
		for (depth = cut; depth < target; depth++)
			path[depth] = pick_func(p);
		if (rnd01() < 0.33) { /* ends in a syscall */
			unsigned int chain = rnd_below(NKERNEL / 10), nk = 4 + rnd_below(9);

			for (j = 0; j < nk && depth < MAX_DEPTH; j++)
				path[depth++] = &kernel[(chain * 10 + j) % NKERNEL];
		}
		p->stacks[i].n = depth;
		p->stacks[i].path = malloc(depth * sizeof(*path));
		memcpy(p->stacks[i].path, path, depth * sizeof(*path));
		p->stacks[i].frames = calloc(depth, sizeof(struct prof_frame));
		for (j = 0; j < depth; j++)
			set_frame(&p->stacks[i].frames[depth - 1 - j], path[j]);
	}
	zipf_init(&p->pop, p->nstacks, 1.1);
}

static void new_pid(struct process *pr)
{
	pr->pid = next_pid++;
	snprintf(pr->pidstr, sizeof(pr->pidstr), "%u", pr->pid);
}

static void build_node(void)
{
	struct zipf progpick;
	unsigned int i;

	for (i = 0; i < NSHARED; i++) {
		shared[i].name = i == 0	  ? strdup("_start")
				 : i == 1 ? strdup("__libc_start_main")
					  : func_name(i < 300 ? "libc" : "PyEval", i);
		shared[i].module = i < 300 ? "/usr/lib/x86_64-linux-gnu/libc.so.6"
					   : "/usr/lib/x86_64-linux-gnu/libpython3.11.so.1.0";
	}
	for (i = 0; i < NKERNEL; i++) {
		kernel[i].name = func_name("sys", i);
		kernel[i].module = "[kernel.kallsyms]";
		kernel[i].kernel = true;
	}
	for (i = 0; i < NPROGS; i++)
		build_program(&progs[i], (int)i);
	zipf_init(&progpick, NPROGS, 1.0);
	for (i = 0; i < NPROCS; i++) {
		procs[i].prog = (int)zipf_draw(&progpick);
		new_pid(&procs[i]);
	}
	free(progpick.cdf);
}

/* ---- pre-built node windows ---- */

struct node_window {
	struct profile *prof[NPROCS]; /* NULL: no sample */
	int64_t total;
};

static struct zipf cpu_share;

static void build_window(struct node_window *w)
{
	unsigned int i;

	memset(w, 0, sizeof(*w));
	for (i = 0; i < SAMPLES_PER_WINDOW; i++) {
		unsigned int pi = zipf_draw(&cpu_share);
		struct program *p = &progs[procs[pi].prog];
		const struct stack *st = &p->stacks[zipf_draw(&p->pop)];

		if (!w->prof[pi])
			w->prof[pi] = profile__new("cpu", "samples", 1000000000LL / HZ);
		/* tid as the server leaves it: not a series label, not kept */
		if (profile__add(w->prof[pi], procs[pi].pid, procs[pi].pid, p->comm, st->frames,
				 st->n, 1)) {
			fprintf(stderr, "store_bench: profile__add failed\n");
			exit(1);
		}
		w->total++;
	}
}

/* ---- timing ---- */

static double now(clockid_t clk)
{
	struct timespec ts;

	clock_gettime(clk, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static double pct(double *v, size_t n, double p)
{
	size_t i;

	qsort(v, n, sizeof(*v), cmp_double);
	i = (size_t)(p * (double)(n - 1) + 0.5);
	return v[i < n ? i : n - 1];
}

/* ---- ingest ---- */

struct labels {
	struct store_label l[6];
};

/* The single-connection design: every call behind one lock, first come
 * first served (a plain mutex would let the selecting threads starve the
 * putting one, which says more about the mutex than about the design). */
static pthread_mutex_t big_mutex = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t big_cond = PTHREAD_COND_INITIALIZER;
static unsigned long big_next, big_serving;
static bool serialize;

static void big_lock(void)
{
	unsigned long me;

	pthread_mutex_lock(&big_mutex);
	me = big_next++;
	while (big_serving != me)
		pthread_cond_wait(&big_cond, &big_mutex);
	pthread_mutex_unlock(&big_mutex);
}

static void big_unlock(void)
{
	pthread_mutex_lock(&big_mutex);
	big_serving++;
	pthread_cond_broadcast(&big_cond);
	pthread_mutex_unlock(&big_mutex);
}

/* The server puts profiles it has just built from a request: their strings,
 * locations and samples are in the CPU's caches. The pool's were built long
 * before; read them once, untimed, to put them where the server's would be. */
static volatile uint64_t sink;

static void warm(const struct node_window *nw)
{
	uint64_t x = 0;
	size_t i, k, j;

	for (i = 0; i < NPROCS; i++) {
		const struct profile *p = nw->prof[i];

		if (!p)
			continue;
		for (k = 0; k < p->nstrings; k++)
			x += strlen(p->strings[k]);
		for (k = 0; k < p->nlocs; k++)
			x += p->locs[k].func + p->locs[k].module;
		for (k = 0; k < p->nsamples; k++)
			for (j = 0; j < p->samples[k].nlocs; j++)
				x += p->samples[k].locs[j];
	}
	sink += x;
}

static int put_step(struct store *s, const struct node_window *nw, int64_t step, double *cpu,
		    double *wall)
{
	struct store_window ws[NPROCS];
	struct labels lab[NPROCS];
	size_t n = 0, i;
	double c0, w0;
	int err;

	for (i = 0; i < NPROCS; i++) {
		const struct program *p = &progs[procs[i].prog];

		if (!nw->prof[i])
			continue;
		lab[n].l[0] = (struct store_label){"type", "cpu"};
		lab[n].l[1] = (struct store_label){"service_name", p->comm};
		lab[n].l[2] = (struct store_label){"node", "node-1"};
		lab[n].l[3] = (struct store_label){"pid", procs[i].pidstr};
		lab[n].l[4] = (struct store_label){"comm", p->comm};
		lab[n].l[5] = (struct store_label){"exe", p->exe};
		ws[n] = (struct store_window){
			.labels = lab[n].l,
			.nlabels = 6,
			.start_ms = T0 + step * WINDOW_MS,
			.end_ms = T0 + (step + 1) * WINDOW_MS,
			.prof = nw->prof[i],
		};
		n++;
	}
	warm(nw);
	w0 = now(CLOCK_MONOTONIC);
	if (serialize)
		big_lock();
	c0 = now(CLOCK_THREAD_CPUTIME_ID);
	err = store__put_windows(s, ws, n);
	if (cpu)
		*cpu += now(CLOCK_THREAD_CPUTIME_ID) - c0;
	if (serialize)
		big_unlock();
	if (wall)
		*wall = now(CLOCK_MONOTONIC) - w0;
	return err;
}

/* ---- reads ---- */

static struct store_matcher m_cpu[] = {{"type", "cpu", STORE_EQ}};
static struct store_matcher m_one[] = {{"type", "cpu", STORE_EQ},
				       {"service_name", "prog0", STORE_EQ}};
static struct store_matcher m_re[] = {{"type", "cpu", STORE_EQ}, {"comm", "prog1[0-9]", STORE_RE}};
static char node_name[32] = "node-1";
static struct store_matcher m_node[] = {{"type", "cpu", STORE_EQ},
					{"service_name", "prog0", STORE_EQ},
					{"node", node_name, STORE_EQ}};

/* What a select's tree holds: its stacks and their values' sum. */
struct tree_count {
	size_t nstacks;
	int64_t total;
};

static int count_tree(void *ctx, const struct store_tree *t)
{
	struct tree_count *c = ctx;

	c->total = t->root_value;
	c->nstacks = t->root_value > 0;
	for (size_t i = 0; i < t->nnodes; i++)
		if (t->nodes[i].value > 0) {
			c->total += t->nodes[i].value;
			c->nstacks++;
		}
	return 0;
}

/* A select as a flame graph reads it (store__select_tree), or, sorted, as
 * a profile (store__select: pprof and speedscope downloads, top). */
static int64_t select_total(struct store *s, const struct store_matcher *m, size_t nm, int64_t from,
			    int64_t until, size_t *nstacks, bool sorted)
{
	struct store_query q = {m, nm, from, until};
	struct profile *p = sorted ? profile__new("cpu", "", 0) : NULL;
	struct tree_count c = {0};
	char unit[32];
	int err;

	if (serialize)
		big_lock();
	if (sorted)
		err = store__select(s, &q, p, unit, sizeof(unit));
	else
		err = store__select_tree(s, &q, count_tree, &c, unit, sizeof(unit));
	if (serialize)
		big_unlock();
	if (err) {
		fprintf(stderr, "store_bench: select failed: %s\n", strerror(-err));
		exit(1);
	}
	if (sorted) {
		c.total = p->total;
		c.nstacks = p->nsamples;
		profile__free(p);
	}
	if (nstacks)
		*nstacks = c.nstacks;
	return c.total;
}

static int add_tree(void *ctx, const struct store_tree *t)
{
	return flame__add_tree(ctx, 0, NULL, t);
}

/* A flame graph's whole answer as the query API makes it: the select's
 * tree into a flame tree (src/server/flame.c), written as a flamebearer of
 * at most 65 536 nodes. Its bytes; the tree's nodes into *nodes. */
static int64_t flame_answer(struct store *s, const struct store_matcher *m, size_t nm, int64_t from,
			    int64_t until, size_t *nodes)
{
	struct store_query q = {m, nm, from, until};
	struct flame *f = flame__new(1);
	struct sbuf b = {0};
	char unit[32];
	int64_t len;

	if (!f || store__select_tree(s, &q, add_tree, f, unit, sizeof(unit)) ||
	    flame__write(f, FLAME_DEFAULT_MAX_NODES, &b)) {
		fprintf(stderr, "store_bench: the flame graph's answer failed\n");
		exit(1);
	}
	*nodes = flame__nodes(f);
	len = (int64_t)b.len;
	sbuf__free(&b);
	flame__free(f);
	return len;
}

static void count_str(void *ctx, const char *s)
{
	(*(size_t *)ctx)++;
}

/* Median and max of reps runs of one read, in ms; returns its result (a
 * select's total, a timeline's sum, a count of label values, an answer's
 * bytes). kind: 0 a flame graph's select, 1 a timeline, 2 label values, 3
 * a sorted select, 4 a flame graph's whole answer. */
static int64_t time_read(struct store *s, const char *what, int kind, const struct store_matcher *m,
			 size_t nm, int64_t from, int64_t until, int reps)
{
	double t[16], first = 0;
	size_t nstacks = 0, n = 0;
	int64_t total = 0;
	int r;

	for (r = 0; r < reps + 1; r++) {
		double t0 = now(CLOCK_MONOTONIC);

		if (kind == 0 || kind == 3) {
			total = select_total(s, m, nm, from, until, &nstacks, kind == 3);
		} else if (kind == 4) {
			total = flame_answer(s, m, nm, from, until, &n);
		} else if (kind == 1) {
			struct store_query q = {m, nm, from, until};
			static double v[1000];
			double sum = 0;
			int i;

			if (store__timeline(s, &q, (until - from) / 1000, v, 1000))
				exit(1);
			for (i = 0; i < 1000; i++)
				sum += v[i];
			total = (int64_t)llround(sum);
		} else {
			struct store_query q = {m, nm, from, until};

			n = 0;
			if (store__label_values(s, &q, "pid", count_str, &n))
				exit(1);
			total = (int64_t)n;
		}
		if (r == 0)
			first = (now(CLOCK_MONOTONIC) - t0) * 1e3;
		else
			t[r - 1] = (now(CLOCK_MONOTONIC) - t0) * 1e3;
	}
	printf("| %s | %.1f | %.1f | %.1f | ", what, pct(t, (size_t)reps, 0.5),
	       pct(t, (size_t)reps, 1.0), first);
	if (kind == 0 || kind == 3)
		printf("%" PRId64 " samples, %zu stacks |\n", total, nstacks);
	else if (kind == 4)
		printf("%zu nodes, %" PRId64 " bytes |\n", n, total);
	else if (kind == 1)
		printf("sum %" PRId64 " |\n", total);
	else
		printf("%" PRId64 " pids |\n", total);
	return total;
}

/* ---- contention ---- */

struct loop {
	struct store *s;
	int64_t from, until;
	volatile bool stop;
	unsigned long n;
};

static void *select_loop(void *arg)
{
	struct loop *l = arg;

	while (!l->stop) {
		select_total(l->s, m_cpu, 1, l->from, l->until, NULL, false);
		l->n++;
	}
	return NULL;
}

/* Put latency while two threads select the last 24 h in a loop, and how
 * many selects of the last hour two threads complete in a few seconds. */
static void contention(struct store *s, struct node_window *pool, int npool, int64_t step,
		       int64_t hours, bool ser)
{
	struct loop l[2];
	pthread_t th[2];
	double lat[40], wall;
	int i;

	serialize = ser;
	for (i = 0; i < 2; i++) {
		l[i] = (struct loop){.s = s,
				     .from = T0 + (hours - 24 > 0 ? hours - 24 : 0) * HOUR_MS,
				     .until = T0 + hours * HOUR_MS};
		pthread_create(&th[i], NULL, select_loop, &l[i]);
	}
	usleep(100000);
	for (i = 0; i < 40; i++) {
		if (put_step(s, &pool[rnd_below((unsigned int)npool)], step + i, NULL, &lat[i]))
			exit(1);
		lat[i] *= 1e3;
		usleep(20000);
	}
	for (i = 0; i < 2; i++) {
		l[i].stop = true;
		pthread_join(th[i], NULL);
	}
	printf("| %s, put while 2 threads select 24 h | p50 %.1f ms | p90 %.1f ms | max %.1f ms "
	       "|\n",
	       ser ? "one mutex" : "reader pool", pct(lat, 40, 0.5), pct(lat, 40, 0.9),
	       pct(lat, 40, 1.0));

	for (i = 0; i < 2; i++) {
		l[i] = (struct loop){
			.s = s, .from = T0 + (hours - 1) * HOUR_MS, .until = T0 + hours * HOUR_MS};
	}
	wall = now(CLOCK_MONOTONIC);
	for (i = 0; i < 2; i++)
		pthread_create(&th[i], NULL, select_loop, &l[i]);
	usleep(3000000);
	for (i = 0; i < 2; i++) {
		l[i].stop = true;
		pthread_join(th[i], NULL);
	}
	wall = now(CLOCK_MONOTONIC) - wall;
	printf("| %s, 2 threads selecting 1 h | %.1f selects/s | | |\n",
	       ser ? "one mutex" : "reader pool", (double)(l[0].n + l[1].n) / wall);
	serialize = false;
}

/* Reads over nodes copies of the node that was put (the copies are made in
 * ClickHouse by bench/clickhouse_fleet.sh, node-2 to node-N, with their
 * own series): each whole read's result is checked against the copies'
 * sum. raw: the events put, last_hour: those of the last hour. */
static int fleet_reads(const char *url, int64_t hours, int nodes, int64_t raw, int64_t last_hour)
{
	int64_t end = T0 + hours * HOUR_MS, day = T0 + (hours > 24 ? hours - 24 : 0) * HOUR_MS;
	int64_t want_day = raw * nodes, want_hour = last_hour * nodes, got;
	struct store *s = store__open(url);
	char what[128];

	if (!s)
		return 1;
	printf("### Reads over %d nodes (%" PRId64 " h each; ms over 3 runs after a first one)\n\n",
	       nodes, hours);
	printf("| read | median ms | max ms | first ms | result |\n| --- | --- | --- | --- | --- "
	       "|\n");
	snprintf(what, sizeof(what), "flame graph, last 1 h, all %d nodes", nodes);
	got = time_read(s, what, 0, m_cpu, 1, end - HOUR_MS, end, 3);
	if (got != want_hour) {
		fprintf(stderr,
			"store_bench: the last hour of %d nodes gave %" PRId64 ", want %" PRId64
			"\n",
			nodes, got, want_hour);
		return 1;
	}
	snprintf(what, sizeof(what), "flame graph, last 24 h, all %d nodes", nodes);
	got = time_read(s, what, 0, m_cpu, 1, day, end, 3);
	if (hours <= 24 && got != want_day) {
		fprintf(stderr, "store_bench: %d nodes gave %" PRId64 ", want %" PRId64 "\n", nodes,
			got, want_day);
		return 1;
	}
	snprintf(what, sizeof(what), "flame graph, last 1 h, service_name=\"prog0\" on %d nodes",
		 nodes);
	time_read(s, what, 0, m_one, 2, end - HOUR_MS, end, 3);
	snprintf(what, sizeof(what), "flame graph, last 24 h, service_name=\"prog0\" on %d nodes",
		 nodes);
	time_read(s, what, 0, m_one, 2, day, end, 3);
	snprintf(node_name, sizeof(node_name), "node-%d", nodes / 2 + 1);
	snprintf(what, sizeof(what), "flame graph, last 24 h, service_name=\"prog0\", node=\"%s\"",
		 node_name);
	time_read(s, what, 0, m_node, 3, day, end, 3);
	snprintf(what, sizeof(what), "timeline, last 24 h, all %d nodes, 1000 steps", nodes);
	time_read(s, what, 1, m_cpu, 1, day, end, 3);
	store__close(s);
	return 0;
}

int main(int argc, char **argv)
{
	const char *dir = argc > 1 ? argv[1] : NULL;
	int64_t hours = argc > 2 ? atoll(argv[2]) : 24, steps, step;
	int npool = argc > 3 ? atoi(argv[3]) : 32, i, r;
	struct node_window *pool;
	double cpu = 0, cpu_1h = 0, cpu_last = 0, wall0, wall, gen;
	int64_t raw = 0, raw_1h = 0, raw_last = 0, sel;
	uint64_t rows_1h = 0, rows_last = 0;
	struct store_stats st;
	struct store *s;
	char path[4096];
	bool clickhouse, reads_only = argc > 4 && !strcmp(argv[4], "reads");
	int nodes = reads_only && argc > 5 ? atoi(argv[5]) : 1;
	FILE *f;

	log_init(); /* SONDE_LOG=debug: the store's queries, timed */

	if (!dir || hours < 1 || npool < 1 || (reads_only && nodes < 1)) {
		fprintf(stderr, "usage: store_bench DIR|clickhouse://URL [HOURS=24] [POOL=32] "
				"[ingest | reads NODES]\n");
		return 2;
	}
	steps = hours * HOUR_MS / WINDOW_MS;
	clickhouse = !strncmp(dir, "clickhouse://", 13);

	wall0 = now(CLOCK_MONOTONIC);
	zipf_init(&cpu_share, NPROCS, 1.0);
	build_node();
	pool = calloc((size_t)npool, sizeof(*pool));
	for (i = 0; i < npool; i++)
		build_window(&pool[i]);
	gen = now(CLOCK_MONOTONIC) - wall0;

	/* reads: the same steps without the puts, for what they put */
	s = reads_only ? NULL : store__open(dir);
	if (!s && !reads_only)
		return 1;
	wall0 = now(CLOCK_MONOTONIC);
	for (step = 0; step < steps; step++) {
		const struct node_window *nw = &pool[rnd_below((unsigned int)npool)];

		if (step && step % (HOUR_MS / WINDOW_MS) == 0)
			for (r = 0; r < 10; r++) /* restarts */
				new_pid(&procs[rnd_below(NPROCS)]);
		if (!reads_only && put_step(s, nw, step, &cpu, NULL)) {
			fprintf(stderr, "store_bench: put failed at step %" PRId64 "\n", step);
			return 1;
		}
		raw += nw->total;
		if (reads_only) {
			if (step + 1 == steps - HOUR_MS / WINDOW_MS)
				raw_last = raw;
			continue;
		}
		if (step + 1 == HOUR_MS / WINDOW_MS) {
			cpu_1h = cpu;
			raw_1h = raw;
			store__stats(s, &st);
			rows_1h = st.samples;
		}
		if (step + 1 == steps - HOUR_MS / WINDOW_MS) { /* the last hour starts */
			cpu_last = cpu;
			raw_last = raw;
			store__stats(s, &st);
			rows_last = st.samples;
		}
		if (isatty(2) && step % 360 == 0)
			fprintf(stderr, "\rstore_bench: %" PRId64 "/%" PRId64 " h ingested",
				step / 360, hours);
	}
	wall = now(CLOCK_MONOTONIC) - wall0;
	if (isatty(2))
		fprintf(stderr, "\n");
	if (reads_only)
		return fleet_reads(dir, hours, nodes, raw, raw - (hours > 1 ? raw_last : 0));
	store__stats(s, &st);
	store__close(s);

	/* Closing folds the WAL in: the file is what the data costs (a
	 * ClickHouse store reports its parts' bytes itself). */
	snprintf(path, sizeof(path), "%s/sonde.db", dir);
	f = clickhouse ? NULL : fopen(path, "rb");
	if (f) {
		fseek(f, 0, SEEK_END);
		st.bytes_on_disk = (uint64_t)ftell(f);
		fclose(f);
	}

	printf("### Ingest (%" PRId64
	       " h of one node, %d node windows in the pool, made in %.1f s)\n\n",
	       hours, npool, gen);
	printf("| | value |\n| --- | --- |\n");
	printf("| puts (one per 10 s node window) | %" PRId64 " |\n", steps);
	printf("| series / windows | %" PRIu64 " / %" PRIu64 " |\n", st.series, st.windows);
	printf("| sampled events (99 Hz x 2 CPUs) | %" PRId64 " |\n", raw);
	printf("| stored samples (distinct stack per window and series) | %" PRIu64 " |\n",
	       st.samples);
	printf("| %s / functions | %" PRIu64 " / %" PRIu64 " |\n",
	       clickhouse ? "distinct stacks" : "stack nodes", st.stacks, st.functions);
	printf("| ingest CPU, first hour | %.2f s: **%.0f stored samples/s**, %.0f events/s |\n",
	       cpu_1h, (double)rows_1h / cpu_1h, (double)raw_1h / cpu_1h);
	if (hours > 1)
		printf("| ingest CPU, last hour | %.2f s: **%.0f stored samples/s**, %.0f events/s "
		       "|\n",
		       cpu - cpu_last, (double)(st.samples - rows_last) / (cpu - cpu_last),
		       (double)(raw - raw_last) / (cpu - cpu_last));
	printf("| ingest CPU, all %" PRId64 " h | %.2f s: **%.0f stored samples/s**, %.0f events/s "
	       "|\n",
	       hours, cpu, (double)st.samples / cpu, (double)raw / cpu);
	printf("| ingest wall time (%s) | %.1f s, %.2f ms per put |\n",
	       clickhouse ? "one INSERT per put, answered" : "fsync per put", wall,
	       wall * 1e3 / (double)steps);
	printf("| bytes on disk | %" PRIu64 " (%.1f MiB) |\n", st.bytes_on_disk,
	       (double)st.bytes_on_disk / 1048576.0);
	printf("| bytes per stored sample | **%.2f** |\n",
	       (double)st.bytes_on_disk / (double)st.samples);
	printf("| bytes per sampled event | %.2f |\n\n", (double)st.bytes_on_disk / (double)raw);

	if (argc > 4 && !strcmp(argv[4], "ingest"))
		return 0; /* for profiling the ingest alone */
	wall0 = now(CLOCK_MONOTONIC);
	s = store__open(dir);
	if (!s)
		return 1;
	printf("Reopening the store (%s): %.0f ms\n\n",
	       clickhouse ? "the schema's check, no dictionary" : "loading its dictionaries",
	       (now(CLOCK_MONOTONIC) - wall0) * 1e3);

	sel = select_total(s, m_cpu, 1, T0, T0 + hours * HOUR_MS, NULL, false);
	if (sel == raw)
		sel = select_total(s, m_cpu, 1, T0, T0 + hours * HOUR_MS, NULL, true);
	if (sel != raw) {
		fprintf(stderr,
			"store_bench: select of everything gave %" PRId64 ", put %" PRId64 "\n",
			sel, raw);
		return 1;
	}
	printf("### Reads (warm page cache; ms over 5 runs after a first one)\n\n");
	printf("| read | median ms | max ms | first ms | result |\n| --- | --- | --- | --- | --- "
	       "|\n");
	time_read(s, "flame graph, last 1 h, all processes", 0, m_cpu, 1,
		  T0 + (hours - 1) * HOUR_MS, T0 + hours * HOUR_MS, 5);
	time_read(s, "flame graph, last 24 h, all processes", 0, m_cpu, 1,
		  T0 + (hours > 24 ? hours - 24 : 0) * HOUR_MS, T0 + hours * HOUR_MS, 5);
	time_read(s, "flame graph, last 24 h, service_name=\"prog0\"", 0, m_one, 2,
		  T0 + (hours > 24 ? hours - 24 : 0) * HOUR_MS, T0 + hours * HOUR_MS, 5);
	time_read(s, "flame graph, 23 h from 23 min past an hour, service_name=\"prog0\"", 0, m_one,
		  2, T0 + (hours > 24 ? hours - 24 : 0) * HOUR_MS + 23 * 60000,
		  T0 + (hours > 24 ? hours - 24 : 0) * HOUR_MS + 23 * 60000 + 23 * HOUR_MS, 5);
	time_read(s, "flame graph, last 24 h, comm=~\"prog1[0-9]\"", 0, m_re, 2,
		  T0 + (hours > 24 ? hours - 24 : 0) * HOUR_MS, T0 + hours * HOUR_MS, 5);
	time_read(s, "flame graph's answer (tree, flamebearer of 65 536 nodes), last 1 h", 4, m_cpu,
		  1, T0 + (hours - 1) * HOUR_MS, T0 + hours * HOUR_MS, 5);
	time_read(s, "flame graph's answer (tree, flamebearer of 65 536 nodes), last 24 h", 4,
		  m_cpu, 1, T0 + (hours > 24 ? hours - 24 : 0) * HOUR_MS, T0 + hours * HOUR_MS, 5);
	time_read(s, "sorted profile (pprof download, top), last 24 h, all processes", 3, m_cpu, 1,
		  T0 + (hours > 24 ? hours - 24 : 0) * HOUR_MS, T0 + hours * HOUR_MS, 5);
	time_read(s, "timeline, last 24 h, 1000 steps", 1, m_cpu, 1,
		  T0 + (hours > 24 ? hours - 24 : 0) * HOUR_MS, T0 + hours * HOUR_MS, 5);
	time_read(s, "label values of pid, last 24 h", 2, m_cpu, 1,
		  T0 + (hours > 24 ? hours - 24 : 0) * HOUR_MS, T0 + hours * HOUR_MS, 5);

	printf("\n### Concurrency\n\n| design | | | |\n| --- | --- | --- | --- |\n");
	contention(s, pool, npool, steps, hours, false);
	contention(s, pool, npool, steps + 100, hours, true);
	store__close(s);

	for (i = 0; i < npool; i++)
		for (r = 0; r < NPROCS; r++)
			profile__free(pool[i].prof[r]);
	free(pool);
	return 0;
}
