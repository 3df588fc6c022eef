/*
 * truth.c: the ground-truth bookkeeping and JSON line of truth.h, linked into every GPU
 * workload. Small tables searched linearly: a workload names a handful of APIs, kernels
 * and devices, and keeps at most a few thousand allocations live.
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "truth.h"

#define MAX_DEVICES 64

struct counter {
	char name[320];	 /* a kernel name, a graph launch's label */
	char extra[512]; /* a kernel's mangled symbol, or a note's JSON value */
	uint64_t n;
	uint64_t sum;
};

struct table {
	struct counter *v;
	size_t len, cap;
};

struct live {
	uint64_t ptr;
	size_t size;
	int dev;
};

struct device {
	uint64_t allocs, frees, alloc_bytes, free_bytes, current, peak;
	int used;
};

struct comm {
	int rank, nranks, dev;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static const char *name = "unknown";
static struct table launches, kernels, failed, allocs, frees, waits, copies, copy_apis, nccl;
static struct table notes;
static uint64_t captured, groups;
static struct device devices[MAX_DEVICES];
static struct live *lives;
static size_t nlive, caplive;
static struct comm *comms;
static size_t ncomms;

static void die(const char *what)
{
	fprintf(stderr, "truth: out of memory in %s\n", what);
	exit(2);
}

static struct counter *counter(struct table *t, const char *key)
{
	for (size_t i = 0; i < t->len; i++) {
		if (!strcmp(t->v[i].name, key))
			return &t->v[i];
	}
	if (t->len == t->cap) {
		t->cap = t->cap ? t->cap * 2 : 16;
		t->v = realloc(t->v, t->cap * sizeof(*t->v));
		if (!t->v)
			die("counter");
	}
	memset(&t->v[t->len], 0, sizeof(t->v[0]));
	snprintf(t->v[t->len].name, sizeof(t->v[0].name), "%s", key);
	return &t->v[t->len++];
}

static void add(struct table *t, const char *key, uint64_t n, uint64_t sum)
{
	struct counter *c;

	pthread_mutex_lock(&lock);
	c = counter(t, key);
	c->n += n;
	c->sum += sum;
	pthread_mutex_unlock(&lock);
}

uint64_t truth_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void truth_init(const char *workload)
{
	name = workload;
}

void truth_note(const char *key, const char *fmt, ...)
{
	struct counter *c;
	va_list ap;

	pthread_mutex_lock(&lock);
	c = counter(&notes, key);
	va_start(ap, fmt);
	vsnprintf(c->extra, sizeof(c->extra), fmt, ap);
	va_end(ap);
	pthread_mutex_unlock(&lock);
}

void truth_launch(const char *api, const char *kernel, const char *symbol, uint64_t n)
{
	struct counter *c;

	add(&launches, api, n, 0);
	if (kernel) {
		pthread_mutex_lock(&lock);
		c = counter(&kernels, kernel);
		c->n += n;
		snprintf(c->extra, sizeof(c->extra), "%s", symbol ? symbol : "");
		pthread_mutex_unlock(&lock);
	}
}

void truth_captured(uint64_t n)
{
	pthread_mutex_lock(&lock);
	captured += n;
	pthread_mutex_unlock(&lock);
}

void truth_failed(const char *api)
{
	add(&failed, api, 1, 0);
}

void truth_alloc(const char *api, int dev, uint64_t ptr, size_t size)
{
	struct device *d = &devices[dev >= 0 && dev < MAX_DEVICES ? dev : 0];

	add(&allocs, api, 1, size);
	pthread_mutex_lock(&lock);
	if (nlive == caplive) {
		caplive = caplive ? caplive * 2 : 64;
		lives = realloc(lives, caplive * sizeof(*lives));
		if (!lives)
			die("alloc");
	}
	lives[nlive++] = (struct live){ptr, size, dev};
	d->used = 1;
	d->allocs++;
	d->alloc_bytes += size;
	d->current += size;
	if (d->current > d->peak)
		d->peak = d->current;
	pthread_mutex_unlock(&lock);
}

void truth_free(const char *api, uint64_t ptr)
{
	size_t size = 0;

	pthread_mutex_lock(&lock);
	for (size_t i = 0; i < nlive; i++) {
		if (lives[i].ptr == ptr) {
			struct device *d = &devices[lives[i].dev];

			size = lives[i].size;
			d->frees++;
			d->free_bytes += size;
			d->current -= size;
			lives[i] = lives[--nlive];
			break;
		}
	}
	pthread_mutex_unlock(&lock);
	add(&frees, api, 1, size);
}

static pthread_mutex_t mem_order = PTHREAD_MUTEX_INITIALIZER;

void truth_mem_begin(void)
{
	pthread_mutex_lock(&mem_order);
}

void truth_mem_end(void)
{
	pthread_mutex_unlock(&mem_order);
}

void truth_wait(const char *api, uint64_t ns)
{
	add(&waits, api, 1, ns);
}

void truth_copy(const char *api, const char *kind, size_t bytes)
{
	add(&copies, kind, 1, bytes);
	add(&copy_apis, api, 1, bytes);
}

void truth_nccl(const char *op, size_t bytes)
{
	add(&nccl, op, 1, bytes);
}

void truth_nccl_group(void)
{
	pthread_mutex_lock(&lock);
	groups++;
	pthread_mutex_unlock(&lock);
}

void truth_comm(int rank, int nranks, int dev)
{
	pthread_mutex_lock(&lock);
	comms = realloc(comms, (ncomms + 1) * sizeof(*comms));
	if (!comms)
		die("comm");
	comms[ncomms++] = (struct comm){rank, nranks, dev};
	pthread_mutex_unlock(&lock);
}

static uint64_t total(const struct table *t, bool sum)
{
	uint64_t v = 0;

	for (size_t i = 0; i < t->len; i++)
		v += sum ? t->v[i].sum : t->v[i].n;
	return v;
}

/* {"name": n, ...} */
static void print_counts(FILE *f, const struct table *t)
{
	fputc('{', f);
	for (size_t i = 0; i < t->len; i++)
		fprintf(f, "%s\"%s\":%llu", i ? "," : "", t->v[i].name,
			(unsigned long long)t->v[i].n);
	fputc('}', f);
}

/* {"name": {"calls": n, "<sum_key>": sum}, ...} */
static void print_pairs(FILE *f, const struct table *t, const char *calls, const char *sum_key)
{
	fputc('{', f);
	for (size_t i = 0; i < t->len; i++)
		fprintf(f, "%s\"%s\":{\"%s\":%llu,\"%s\":%llu}", i ? "," : "", t->v[i].name, calls,
			(unsigned long long)t->v[i].n, sum_key, (unsigned long long)t->v[i].sum);
	fputc('}', f);
}

void truth_print(void)
{
	FILE *f = stdout;
	bool first = true;

	pthread_mutex_lock(&lock);
	fprintf(f, "{\"workload\":\"%s\",\"pid\":%d", name, (int)getpid());

	fprintf(f, ",\"launches\":{\"total\":%llu,\"captured\":%llu,\"by_api\":",
		(unsigned long long)total(&launches, false), (unsigned long long)captured);
	print_counts(f, &launches);
	fputs(",\"by_kernel\":", f);
	print_counts(f, &kernels);
	fputs(",\"symbols\":{", f);
	for (size_t i = 0; i < kernels.len; i++)
		fprintf(f, "%s\"%s\":\"%s\"", i ? "," : "", kernels.v[i].name, kernels.v[i].extra);
	fputs("}}", f);

	fputs(",\"memory\":{\"devices\":[", f);
	for (int i = 0; i < MAX_DEVICES; i++) {
		struct device *d = &devices[i];

		if (!d->used)
			continue;
		fprintf(f,
			"%s{\"device\":%d,\"allocs\":%llu,\"frees\":%llu,\"alloc_bytes\":%llu,"
			"\"free_bytes\":%llu,\"current_bytes\":%llu,\"peak_bytes\":%llu}",
			first ? "" : ",", i, (unsigned long long)d->allocs,
			(unsigned long long)d->frees, (unsigned long long)d->alloc_bytes,
			(unsigned long long)d->free_bytes, (unsigned long long)d->current,
			(unsigned long long)d->peak);
		first = false;
	}
	fputs("],\"allocs_by_api\":", f);
	print_pairs(f, &allocs, "calls", "bytes");
	fputs(",\"frees_by_api\":", f);
	print_pairs(f, &frees, "calls", "bytes");
	fputs("}", f);

	fputs(",\"failed\":", f);
	print_counts(f, &failed);

	fprintf(f, ",\"waits\":{\"count\":%llu,\"total_ns\":%llu,\"by_api\":",
		(unsigned long long)total(&waits, false), (unsigned long long)total(&waits, true));
	print_pairs(f, &waits, "count", "total_ns");
	fputc('}', f);

	fprintf(f, ",\"memcpy\":{\"count\":%llu,\"bytes\":{",
		(unsigned long long)total(&copies, false));
	for (size_t i = 0; i < copies.len; i++)
		fprintf(f, "%s\"%s\":%llu", i ? "," : "", copies.v[i].name,
			(unsigned long long)copies.v[i].sum);
	fputs("},\"by_api\":", f);
	print_pairs(f, &copy_apis, "calls", "bytes");
	fputc('}', f);

	fprintf(f, ",\"nccl\":{\"calls\":%llu,\"bytes\":%llu,\"groups\":%llu,\"by_op\":",
		(unsigned long long)total(&nccl, false), (unsigned long long)total(&nccl, true),
		(unsigned long long)groups);
	print_pairs(f, &nccl, "calls", "bytes");
	fputs(",\"comms\":[", f);
	for (size_t i = 0; i < ncomms; i++)
		fprintf(f, "%s{\"rank\":%d,\"nranks\":%d,\"device\":%d}", i ? "," : "",
			comms[i].rank, comms[i].nranks, comms[i].dev);
	fputs("]}", f);

	for (size_t i = 0; i < notes.len; i++)
		fprintf(f, ",\"%s\":%s", notes.v[i].name, notes.v[i].extra);
	fputs("}\n", f);
	fflush(f);
	pthread_mutex_unlock(&lock);
}
