/* server_bench.c: what the server's own work costs -- `make bench-server`
 * runs it through bench/server.sh, whose Markdown report docs/perf.md
 * quotes.
 *
 * 1. Flame graphs (src/server/flame.c): profiles of random stacks 10-50
 *    frames deep, grown from shared prefixes with 8 children a frame, sized
 *    to give trees of about 100 000, 300 000 and 1 000 000 nodes; the time
 *    to build the tree from the profile (flame__add) and from the same
 *    stacks as a store with a stack trie hands them over (flame__add_tree
 *    of a struct store_tree, what the query API builds from), and to write
 *    its flamebearer (flame__write) whole and cut to the default 65 536
 *    nodes, and the answer's size. Median of 5 runs.
 * 2. Ingest bodies (src/server/ingest.c): one node's 10 s window as an
 *    agent sends it -- 200 processes, 1980 samples, gzip pprof from Sonde's
 *    writer -- split into series; requests per second of one thread.
 * 3. End to end over HTTP on loopback with the SQLite store in a fresh
 *    directory (argv[1], on a real disk: fsync costs what it costs): that
 *    window POSTed to /api/v1/ingest 300 times in sequence (each answer
 *    waits for the fsync), then /api/v1/flamegraph and /pyroscope/render
 *    over the 50 minutes, /api/v1/top and /api/v1/timeseries; latency
 *    percentiles. */
#include <curl/curl.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "profile/profile.h"
#include "server/flame.h"
#include "server/ingest.h"
#include "server/server.h"
#include "store/store.h"

static uint64_t rng = 0x9e3779b97f4a7c15ULL;

static uint64_t rnd(void)
{
	rng ^= rng >> 12;
	rng ^= rng << 25;
	rng ^= rng >> 27;
	return rng * 0x2545f4914f6cdd1dULL;
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static double pct(double *v, size_t n, double p)
{
	qsort(v, n, sizeof(*v), cmp_double);
	return v[(size_t)(p * (double)(n - 1) + 0.5)];
}

/* Function names: "fn_<level>_<index>", interned once. */
#define FANOUT 8
#define MAX_LEVEL 50
static char names[MAX_LEVEL][FANOUT * 64][24];

/* A profile of nstacks random stacks: the frame at each level is one of
 * FANOUT children of the frame above (64 * FANOUT names per level). */
static struct profile *random_profile(size_t nstacks)
{
	struct profile *p = profile__new("cpu", "samples", 10101010);
	struct prof_frame fr[MAX_LEVEL];

	for (size_t s = 0; s < nstacks; s++) {
		size_t depth = 10 + rnd() % 41, i;
		uint64_t path = 0;

		for (i = 0; i < depth; i++) {
			uint64_t child = rnd() % FANOUT;

			path = path * FANOUT + child;
			memset(&fr[depth - 1 - i], 0, sizeof(fr[0]));
			fr[depth - 1 - i].func = names[i][path % (FANOUT * 64)];
			fr[depth - 1 - i].module =
				i > depth - 4 ? "[kernel.kallsyms]" : "/usr/bin/app";
			fr[depth - 1 - i].kernel = i > depth - 4;
		}
		profile__add(p, 0, 0, "", fr, depth, 1 + (int64_t)(rnd() % 100));
	}
	return p;
}

/* p's stacks as a store with a stack trie hands them over: a node per
 * distinct (parent, location), each after its parent, the locations as
 * functions; its arrays malloc()ed (free nodes and funcs). */
static struct store_tree trie_of(const struct profile *p)
{
	struct store_tree t = {0};
	struct store_func *funcs = calloc(p->nlocs + 1, sizeof(*funcs));
	struct store_node *nodes;
	uint32_t *tab;
	size_t frames = 0, cap = 2, i;

	for (i = 0; i < p->nsamples; i++)
		frames += p->samples[i].nlocs;
	while (cap < 2 * frames)
		cap *= 2;
	nodes = malloc((frames + 1) * sizeof(*nodes));
	tab = malloc(cap * sizeof(*tab));
	if (!funcs || !nodes || !tab)
		abort();
	memset(tab, 0xff, cap * sizeof(*tab));
	for (i = 0; i < p->nlocs; i++) {
		const struct prof_location *l = &p->locs[i];

		funcs[i] = (struct store_func){profile__str(p, l->func),
					       l->module ? profile__str(p, l->module) : "", "", 0,
					       l->kernel};
	}
	for (i = 0; i < p->nsamples; i++) {
		const struct prof_sample *smp = &p->samples[i];
		uint32_t parent = STORE_NO_PARENT;

		for (uint32_t j = smp->nlocs; j-- > 0;) {
			uint32_t loc = smp->locs[j];
			size_t h = (size_t)((parent * 0x9e3779b97f4a7c15ULL ^ loc) *
						    0xff51afd7ed558ccdULL >>
					    17) &
				   (cap - 1);

			for (; tab[h] != UINT32_MAX; h = (h + 1) & (cap - 1))
				if (nodes[tab[h]].parent == parent && nodes[tab[h]].func == loc)
					break;
			if (tab[h] == UINT32_MAX) {
				nodes[t.nnodes] = (struct store_node){parent, loc, 0};
				tab[h] = (uint32_t)t.nnodes++;
			}
			parent = tab[h];
		}
		if (smp->nlocs)
			nodes[parent].value += smp->count;
		else
			t.root_value += smp->count;
	}
	free(tab);
	t.funcs = funcs;
	t.nfuncs = p->nlocs;
	t.nodes = nodes;
	return t;
}

static void bench_flame(void)
{
	static const size_t sizes[] = {4000, 12000, 40000};
	const int runs = 5;

	printf("### Flame graphs (src/server/flame.c)\n\n");
	printf("| stacks | tree nodes | build | build from a trie | write whole | bytes | write "
	       "65 536 nodes | bytes |\n");
	printf("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
	for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
		struct profile *p = random_profile(sizes[k]);
		struct store_tree trie = trie_of(p);
		double build[5], tbuild[5], whole[5], cut[5];
		size_t nodes = 0, bw = 0, bc = 0;

		for (int r = 0; r < runs; r++) {
			struct flame *f = flame__new(1), *ft = flame__new(1);
			struct sbuf b1 = {0}, b2 = {0};
			double t0 = now_s(), t1, t2, t3;

			flame__add_tree(ft, 0, NULL, &trie);
			tbuild[r] = now_s() - t0;
			flame__free(ft);
			t0 = now_s();
			flame__add(f, 0, p);
			t1 = now_s();
			flame__write(f, FLAME_LIMIT_MAX_NODES, &b1);
			t2 = now_s();
			flame__write(f, FLAME_DEFAULT_MAX_NODES, &b2);
			t3 = now_s();
			build[r] = t1 - t0;
			whole[r] = t2 - t1;
			cut[r] = t3 - t2;
			nodes = flame__nodes(f);
			bw = b1.len;
			bc = b2.len;
			sbuf__free(&b1);
			sbuf__free(&b2);
			flame__free(f);
		}
		printf("| %zu | %zu | %.0f ms | %.0f ms | %.0f ms | %.1f MB | %.0f ms | %.1f MB "
		       "|\n",
		       p->nsamples, nodes, 1e3 * pct(build, runs, 0.5),
		       1e3 * pct(tbuild, runs, 0.5), 1e3 * pct(whole, runs, 0.5), bw / 1e6,
		       1e3 * pct(cut, runs, 0.5), bc / 1e6);
		free((void *)trie.funcs);
		free((void *)trie.nodes);
		profile__free(p);
	}
	printf("\n");
}

/* One node's window: 200 processes sharing 1980 samples (2 CPUs, 99 Hz,
 * 10 s), Zipf-ish, as Sonde's pprof writer writes it. */
static char *node_window(size_t *len)
{
	struct profile *p = profile__new("cpu", "nanoseconds", 10101010);
	struct prof_frame fr[MAX_LEVEL];
	char comm[32];
	char *buf = NULL;
	FILE *f = open_memstream(&buf, len);

	for (int s = 0; s < 1980; s++) {
		uint32_t pid = 1000 + (uint32_t)(rnd() % 200) * (uint32_t)(rnd() % 200) / 200;
		size_t depth = 10 + rnd() % 31;
		uint64_t path = pid;

		snprintf(comm, sizeof(comm), "prog%u", pid % 24);
		for (size_t i = 0; i < depth; i++) {
			path = path * FANOUT + rnd() % 3;
			memset(&fr[depth - 1 - i], 0, sizeof(fr[0]));
			fr[depth - 1 - i].func = names[i][path % (FANOUT * 64)];
			fr[depth - 1 - i].module = "/usr/bin/app";
		}
		profile__add(p, pid, pid, comm, fr, depth, 1);
	}
	profile__write_pprof(p, f);
	fclose(f);
	profile__free(p);
	return buf;
}

static void bench_ingest(const char *body, size_t len, const char *what)
{
	struct ingest_opts o = {
		.now_ms = 1800000000000LL, .max_bytes = 64u << 20, .max_series = 1024};
	int n = 0;
	double t0 = now_s(), t;
	size_t series = 0;
	uint64_t samples = 0;

	do {
		struct ingest_batch b = {0};
		char err[256];

		ingest__pprof(&b, body, len, &o, err, sizeof(err));
		ingest_batch__windows(&b);
		series = b.n;
		samples = b.samples;
		ingest_batch__free(&b);
		n++;
		t = now_s() - t0;
	} while (t < 3);
	printf("%s: %zu bytes of gzip pprof, %" PRIu64
	       " samples in %zu series: %.2f ms to split (%.0f windows/s on one thread).\n\n",
	       what, len, samples, series, 1e3 * t / n, n / t);
}

/* A real window: a whole-machine recording by `sonde record`, when
 * bench/server.sh could make one (root); its stacks recur as real ones do. */
static void bench_ingest_file(const char *path)
{
	FILE *f = fopen(path, "rb");
	char *buf = malloc(64u << 20);
	size_t len;

	if (!f || !buf) {
		fprintf(stderr, "server_bench: can't read %s\n", path);
		exit(1);
	}
	len = fread(buf, 1, 64u << 20, f);
	fclose(f);
	bench_ingest(
		buf, len,
		"A whole-machine recording (`sonde record`, 3 s, 99 Hz, a Python program running)");
	free(buf);
}

static size_t discard(char *p, size_t sz, size_t n, void *ctx)
{
	*(size_t *)ctx += sz * n;
	return sz * n;
}

static double request(CURL *c, const char *url, const char *body, size_t len, long *code,
		      size_t *bytes)
{
	struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/octet-stream");
	double t0 = now_s();

	*bytes = 0;
	curl_easy_reset(c);
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, discard);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, bytes);
	if (body) {
		curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
		curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
		curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
	}
	*code = 0;
	if (curl_easy_perform(c) == CURLE_OK)
		curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, code);
	curl_slist_free_all(h);
	return now_s() - t0;
}

static int bench_http(const char *dir, const char *body, size_t len)
{
	struct store *st = store_sqlite__open(dir);
	struct server_opts o = {.listen = "127.0.0.1:0"};
	struct server *srv;
	CURL *c = curl_easy_init();
	char url[512];
	double lat[300], total = 0;
	int64_t t0 = (int64_t)time(NULL) * 1000 - 3000 * 1000;
	long code;
	size_t bytes;
	static const struct {
		const char *what, *path;
	} queries[] = {
		{"`/api/v1/flamegraph` (all series, 50 min)", "/api/v1/flamegraph?from=now-1h"},
		{"`/pyroscope/render` of one service",
		 "/pyroscope/render?query=prog7.cpu&from=now-1h"},
		{"`/api/v1/top`", "/api/v1/top?from=now-1h"},
		{"`/api/v1/timeseries` (300 steps)", "/api/v1/timeseries?from=now-1h"},
		{"`/api/v1/label/values?name=pid`", "/api/v1/label/values?name=pid&from=now-1h"},
	};

	if (!st)
		return 1;
	o.store = st;
	srv = server__start(&o);
	if (!srv)
		return 1;
	for (int i = 0; i < 300; i++) {
		snprintf(url, sizeof(url),
			 "http://127.0.0.1:%d/api/v1/ingest?node=bench&from=%" PRId64
			 "&until=%" PRId64,
			 server__port(srv), t0 + i * 10000, t0 + (i + 1) * 10000);
		lat[i] = request(c, url, body, len, &code, &bytes);
		total += lat[i];
		if (code != 200) {
			fprintf(stderr, "ingest answered %ld\n", code);
			return 1;
		}
	}
	printf("### End to end over HTTP (SQLite store, loopback)\n\n");
	printf("300 node windows POSTed one after the other to /api/v1/ingest, each "
	       "answered once durable: %.0f windows/s; latency p50 %.1f ms, p99 %.1f ms.\n\n",
	       300 / total, 1e3 * pct(lat, 300, 0.5), 1e3 * pct(lat, 300, 0.99));
	printf("| query (50 minutes of one node) | p50 | max of 5 | answer |\n");
	printf("| --- | ---: | ---: | ---: |\n");
	for (size_t q = 0; q < sizeof(queries) / sizeof(queries[0]); q++) {
		double l[5];

		snprintf(url, sizeof(url), "http://127.0.0.1:%d%s", server__port(srv),
			 queries[q].path);
		for (int r = 0; r < 5; r++) {
			l[r] = request(c, url, NULL, 0, &code, &bytes);
			if (code != 200) {
				fprintf(stderr, "%s answered %ld\n", queries[q].path, code);
				return 1;
			}
		}
		printf("| %s | %.1f ms | %.1f ms | %.0f KB |\n", queries[q].what,
		       1e3 * pct(l, 5, 0.5), 1e3 * pct(l, 5, 1), bytes / 1e3);
	}
	printf("\n");
	curl_easy_cleanup(c);
	server__stop(srv);
	store__close(st);
	return 0;
}

int main(int argc, char **argv)
{
	char *body;
	size_t len;
	int rc;

	if (argc != 2 && argc != 3) {
		fprintf(stderr, "usage: server_bench DIR [PPROF] (an empty directory for the "
				"store; a recorded window)\n");
		return 2;
	}
	for (int l = 0; l < MAX_LEVEL; l++)
		for (int i = 0; i < FANOUT * 64; i++)
			snprintf(names[l][i], sizeof(names[l][i]), "fn_%d_%d", l, i);
	curl_global_init(CURL_GLOBAL_ALL);
	bench_flame();
	body = node_window(&len);
	printf("### Ingest bodies (src/server/ingest.c)\n\n");
	bench_ingest(body, len, "One node's 10 s window (generated)");
	if (argc == 3)
		bench_ingest_file(argv[2]);
	rc = bench_http(argv[1], body, len);
	free(body);
	curl_global_cleanup();
	return rc;
}
