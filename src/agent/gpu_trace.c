/* gpu_trace.c: the kernel timeline (gpu_trace.h). */
#include "agent/gpu_trace.h"

#include "common/htable.h"
#include "common/xalloc.h"
#include "symbolize/symbolize.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* A kernel's track id in its process: apart from its threads' ids. */
#define GPU_TID_BASE 1000000000u

struct clock_ent {
	UT_hash_handle hh;
	uint32_t pid;
	int64_t host_minus_gpu;
};

struct launch_ent {
	UT_hash_handle hh;
	uint64_t key; /* pid << 32 | correlation */
	uint32_t tid;
	uint64_t ts_ns;
};

/* A kernel's name, as a JSON string (quoted, escaped), once. */
struct name_ent {
	UT_hash_handle hh;
	char *json;
	char name[];
};

struct proc_ent {
	UT_hash_handle hh;
	uint32_t pid;
	char comm[64];
	char *json; /* "comm (pid)", as a JSON string */
};

struct kernel {
	uint32_t pid, tid; /* tid: the launching thread, 0 when unknown */
	int32_t device;
	uint32_t stream, correlation;
	uint64_t start, end, launch_ns; /* CLOCK_MONOTONIC (or CUPTI's: no_clock) */
	const char *name;		/* a name_ent's json */
};

struct gpu_trace {
	struct clock_ent *clocks;
	struct launch_ent *launches;
	size_t nlaunches;
	struct name_ent *names;
	struct proc_ent *procs;
	struct kernel *k;
	size_t n, cap;
	struct gpu_trace_stats st;
};

struct gpu_trace *gpu_trace__new(void)
{
	return xcalloc(1, sizeof(struct gpu_trace));
}

void gpu_trace__free(struct gpu_trace *t)
{
	if (!t)
		return;
	HTABLE_CLEAR(hh, t->clocks, c, free(c));
	HTABLE_CLEAR(hh, t->launches, l, free(l));
	HTABLE_CLEAR(hh, t->names, e, (free(e->json), free(e)));
	HTABLE_CLEAR(hh, t->procs, p, (free(p->json), free(p)));
	free(t->k);
	free(t);
}

/* s as a JSON string (quoted, escaped), malloc()ed. */
static char *json_text(const char *s)
{
	json_t *j = json_string(s);
	char *out = j ? json_dumps(j, JSON_ENCODE_ANY) : NULL;

	json_decref(j);
	return out ? out : xstrdup("\"?\"");
}

void gpu_trace__clock(struct gpu_trace *t, uint32_t pid, uint64_t gpu, uint64_t host)
{
	struct clock_ent *c;

	HASH_FIND(hh, t->clocks, &pid, sizeof(pid), c);
	if (!c) {
		c = xcalloc(1, sizeof(*c));
		c->pid = pid;
		HASH_ADD(hh, t->clocks, pid, sizeof(c->pid), c);
	}
	c->host_minus_gpu = (int64_t)(host - gpu);
}

void gpu_trace__launch(struct gpu_trace *t, uint32_t pid, uint32_t tid, uint64_t ts_ns,
		       uint32_t correlation)
{
	uint64_t key = (uint64_t)pid << 32 | correlation;
	struct launch_ent *l;

	HASH_FIND(hh, t->launches, &key, sizeof(key), l);
	if (!l) {
		/* The oldest goes (a table keeps its order of insertion): a
		 * launch stays after its kernel came, for a graph's others. */
		if (t->nlaunches >= GPU_TRACE_MAX_PENDING) {
			struct launch_ent *old = t->launches;

			HASH_DELETE(hh, t->launches, old);
			free(old);
			t->nlaunches--;
		}
		l = xcalloc(1, sizeof(*l));
		l->key = key;
		HASH_ADD(hh, t->launches, key, sizeof(l->key), l);
		t->nlaunches++;
	}
	l->tid = tid;
	l->ts_ns = ts_ns;
}

static const char *name_of(struct gpu_trace *t, const char *name)
{
	struct name_ent *e;
	size_t n = strlen(name);
	char *demangled;

	HASH_FIND(hh, t->names, name, n, e);
	if (e)
		return e->json;
	e = xmalloc(sizeof(*e) + n + 1);
	memset(&e->hh, 0, sizeof(e->hh));
	memcpy(e->name, name, n + 1);
	demangled = sym_demangle(name);
	e->json = json_text(demangled ? demangled : name);
	free(demangled);
	HASH_ADD_KEYPTR(hh, t->names, e->name, n, e);
	return e->json;
}

void gpu_trace__kernel(struct gpu_trace *t, uint32_t pid, int device, uint32_t stream,
		       uint64_t start, uint64_t end, uint32_t correlation, const char *name)
{
	uint64_t key = (uint64_t)pid << 32 | correlation;
	struct launch_ent *l;
	struct clock_ent *c;
	struct kernel *k;

	if (t->n >= GPU_TRACE_MAX_KERNELS) {
		t->st.dropped++;
		return;
	}
	xgrow((void **)&t->k, &t->cap, t->n + 1, sizeof(*t->k));
	k = &t->k[t->n++];
	*k = (struct kernel){.pid = pid,
			     .device = device,
			     .stream = stream,
			     .correlation = correlation,
			     .start = start,
			     .end = end > start ? end : start};
	HASH_FIND(hh, t->clocks, &pid, sizeof(pid), c);
	if (c) {
		k->start += (uint64_t)c->host_minus_gpu;
		k->end += (uint64_t)c->host_minus_gpu;
	} else {
		t->st.no_clock++;
	}
	HASH_FIND(hh, t->launches, &key, sizeof(key), l);
	if (l) {
		k->tid = l->tid;
		k->launch_ns = l->ts_ns;
	} else {
		t->st.no_launch++;
	}
	k->name = name_of(t, name && *name ? name : "[unknown kernel]");
	t->st.kernels++;
}

void gpu_trace__name(struct gpu_trace *t, uint32_t pid, const char *comm)
{
	struct proc_ent *p;
	char buf[64];

	HASH_FIND(hh, t->procs, &pid, sizeof(pid), p);
	if (!p) {
		p = xcalloc(1, sizeof(*p));
		p->pid = pid;
		HASH_ADD(hh, t->procs, pid, sizeof(p->pid), p);
	} else if (!strncmp(p->comm, comm ? comm : "", sizeof(p->comm) - 1)) {
		return;
	}
	snprintf(p->comm, sizeof(p->comm), "%s", comm ? comm : "");
	free(p->json);
	snprintf(buf, sizeof(buf), "%s (%" PRIu32 ")", comm && *comm ? comm : "?", pid);
	p->json = json_text(buf);
}

void gpu_trace__stats(const struct gpu_trace *t, struct gpu_trace_stats *out)
{
	*out = t->st;
}

/* The track of k's device and stream in its process. */
static uint32_t gpu_tid(const struct kernel *k)
{
	return GPU_TID_BASE + (uint32_t)k->device * 1000000u + k->stream % 1000000u;
}

struct seen_ent {
	UT_hash_handle hh;
	uint64_t key;
};

/* Whether key is in *seen already (put in if not). */
static bool seen(struct seen_ent **seen, uint64_t key)
{
	struct seen_ent *e;

	HASH_FIND(hh, *seen, &key, sizeof(key), e);
	if (e)
		return true;
	e = xcalloc(1, sizeof(*e));
	e->key = key;
	HASH_ADD(hh, *seen, key, sizeof(e->key), e);
	return false;
}

int gpu_trace__write(const struct gpu_trace *t, FILE *f)
{
	struct seen_ent *tracks = NULL, *launches = NULL;
	const char *sep = "\n";

	fputs("{\"displayTimeUnit\":\"ns\",\"traceEvents\":[", f);
	for (const struct proc_ent *p = t->procs; p; p = p->hh.next, sep = ",\n")
		fprintf(f,
			"%s{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":%" PRIu32
			",\"args\":{\"name\":%s}}",
			sep, p->pid, p->json);
	/* A name for each device and stream's track. */
	for (size_t i = 0; i < t->n; i++) {
		if (seen(&tracks, (uint64_t)t->k[i].pid << 32 | gpu_tid(&t->k[i])))
			continue;
		fprintf(f,
			"%s{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":%" PRIu32
			",\"tid\":%" PRIu32 ",\"args\":{\"name\":\"GPU %d stream %" PRIu32 "\"}}",
			sep, t->k[i].pid, gpu_tid(&t->k[i]), t->k[i].device, t->k[i].stream);
		sep = ",\n";
	}
	HTABLE_CLEAR(hh, tracks, e, free(e));
	for (size_t i = 0; i < t->n; i++, sep = ",\n") {
		const struct kernel *k = &t->k[i];

		fprintf(f,
			"%s{\"ph\":\"X\",\"cat\":\"kernel\",\"name\":%s,\"pid\":%" PRIu32
			",\"tid\":%" PRIu32 ",\"ts\":%.3f,\"dur\":%.3f,\"args\":{\"device\":%d,"
			"\"stream\":%" PRIu32 ",\"correlation\":%" PRIu32 "}}",
			sep, k->name, k->pid, gpu_tid(k), (double)k->start / 1e3,
			(double)(k->end - k->start) / 1e3, k->device, k->stream, k->correlation);
		if (!k->tid)
			continue;
		/* The launch on its thread (once: a graph's has a kernel for
		 * each node), and an arrow to each kernel (an id a kernel). */
		if (!seen(&launches, (uint64_t)k->pid << 32 | k->correlation))
			fprintf(f,
				",\n{\"ph\":\"X\",\"cat\":\"launch\",\"name\":\"launch\",\"pid\":"
				"%" PRIu32 ",\"tid\":%" PRIu32
				",\"ts\":%.3f,\"dur\":0.001,\"args\":{\"correlation\":%" PRIu32
				"}}",
				k->pid, k->tid, (double)k->launch_ns / 1e3, k->correlation);
		fprintf(f,
			",\n{\"ph\":\"s\",\"cat\":\"launch\",\"name\":\"launch\",\"id\":%zu"
			",\"pid\":%" PRIu32 ",\"tid\":%" PRIu32 ",\"ts\":%.3f}",
			i + 1, k->pid, k->tid, (double)k->launch_ns / 1e3);
		fprintf(f,
			",\n{\"ph\":\"f\",\"bp\":\"e\",\"cat\":\"launch\",\"name\":\"launch\","
			"\"id\":%zu,\"pid\":%" PRIu32 ",\"tid\":%" PRIu32 ",\"ts\":%.3f}",
			i + 1, k->pid, gpu_tid(k), (double)k->start / 1e3);
	}
	HTABLE_CLEAR(hh, launches, e, free(e));
	fputs("\n]}\n", f);
	return ferror(f) ? -EIO : 0;
}
