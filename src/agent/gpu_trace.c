/* gpu_trace.c: the kernel timeline (gpu_trace.h): kernels and copies in an
 * array (a min-heap by length in the agent's windows, so that the longest
 * stay), names and stack descriptions interned as JSON strings, written as
 * a Chrome trace or taken as the spans of an ingest body. */
#include "agent/gpu_trace.h"

#include "agent/gpu_time.h"
#include "agent/stack_agg.h"
#include "common/clock.h"
#include "cupti/sonde_cupti.h"
#include "common/hash.h"
#include "common/htable.h"
#include "common/sbuf.h"
#include "common/xalloc.h"
#include "profile/profile.h"
#include "symbolize/symbolize.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* A kind's bytes at most (the server's bound: store.h's STORE_MAX_SPAN_KIND). */
#define STORE_KIND_MAX 32

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

/* A launching stack's description, as a JSON string, by (pid, stack). */
struct from_ent {
	UT_hash_handle hh;
	uint64_t key;
	char *json;
};

struct kernel {
	uint32_t pid, tid; /* tid: the launching thread, 0 when unknown */
	int32_t device;
	uint32_t stream, correlation;
	uint64_t start, end, launch_ns; /* CLOCK_MONOTONIC (or CUPTI's: no_clock) */
	uint64_t bytes;			/* a copy's */
	const char *name;		/* a name_ent's json */
	const char *kind;		/* a name_ent's json: "kernel", "memcpy HtoD"... */
	const char *from;		/* a from_ent's json, NULL: unknown */
	const char *cat;		/* the Chrome trace's category: "kernel", "copy",
					 * "graph", "sync"; static */
	bool clocked, copy;
	bool host; /* a wait of the host (sync): no launch of its own, device -1 */
};

struct gpu_trace {
	struct clock_ent *clocks;
	struct launch_ent *launches;
	size_t nlaunches;
	struct name_ent *names;
	struct proc_ent *procs;
	struct from_ent *froms;
	size_t nfroms;
	struct gpu_time *gt;	/* launching stacks; NULL: none */
	struct symbolizer *sym; /* names them */
	struct kernel *k;
	size_t n, cap;
	size_t window_max; /* 0: GPU_TRACE_MAX_KERNELS, the first kept */
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
	HTABLE_CLEAR(hh, t->froms, e, (free(e->json), free(e)));
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

void gpu_trace__set_launches(struct gpu_trace *t, struct gpu_time *gt, struct symbolizer *sym)
{
	t->gt = gt;
	t->sym = sym;
}

void gpu_trace__set_window_max(struct gpu_trace *t, size_t max)
{
	t->window_max = max < GPU_TRACE_MAX_KERNELS ? max : GPU_TRACE_MAX_KERNELS;
}

/* Whether a symbolized frame is a Python function's (python_frame of
 * stack_agg.c: no module, a source file). */
static bool python_frame(const struct prof_frame *f)
{
	return !f->module && f->file && !f->kernel;
}

/* Appends frame f to b ("func (file.py:12)"), with sep before it. */
static void describe_frame(struct sbuf *b, const struct prof_frame *f, const char *sep)
{
	const char *file = f->file ? strrchr(f->file, '/') : NULL;

	file = file ? file + 1 : f->file;
	if (file && f->line)
		sbuf__printf(b, "%s%s (%s:%u)", sep, f->func ? f->func : "?", file, f->line);
	else
		sbuf__printf(b, "%s%s", sep, f->func ? f->func : "?");
}

#define FROM_FRAMES 4 /* frames a description names */
#define FROM_WALK 64  /* frames looked at for them */
#define FROM_MAX_BYTES 512

/* A launching stack s, described: its innermost FROM_FRAMES Python frames
 * when it has any, else its innermost native ones (CUDA's and CUPTI's are
 * gone already: gpu_time keeps the stack below the API call). As a JSON
 * string, malloc()ed; NULL when there is nothing to say. */
static char *describe(struct gpu_trace *t, const struct stack *s)
{
	struct prof_frame frames[FROM_WALK];
	char(*names)[256] = xmalloc(FROM_WALK * sizeof(*names));
	struct sbuf b = {0};
	size_t n = symbolize_stack(t->sym, s, 0, frames, names, FROM_WALK), i, used = 0;
	bool py = false;
	char *out;

	for (i = 0; i < n && !py; i++)
		py = python_frame(&frames[i]);
	for (i = 0; i < n && used < FROM_FRAMES; i++) {
		if (frames[i].kernel || (py && !python_frame(&frames[i])))
			continue;
		describe_frame(&b, &frames[i], used ? " < " : "");
		used++;
	}
	free(names);
	if (!b.len || !b.buf || !strcmp(b.buf, "[no stack]")) {
		sbuf__free(&b);
		return NULL;
	}
	if (b.len > FROM_MAX_BYTES) {
		/* Cut on a character's start: the text is UTF-8. */
		size_t cut = FROM_MAX_BYTES;

		while (cut && ((unsigned char)b.buf[cut] & 0xc0) == 0x80)
			cut--;
		b.buf[cut] = '\0';
	}
	out = json_text(b.buf);
	sbuf__free(&b);
	return out;
}

/* The description of the stack that launched (pid, correlation), or
 * NULL. */
static const char *from_of(struct gpu_trace *t, uint32_t pid, uint32_t correlation)
{
	const struct stack *s;
	struct from_ent *e;
	uint64_t key;

	if (!t->gt || !t->sym)
		return NULL;
	s = gpu_time__launch_stack(t->gt, pid, correlation);
	if (!s)
		return NULL;
	key = hash_bytes(s->frames, s->nframes * sizeof(s->frames[0]),
			 (uint64_t)pid << 32 | s->nframes);
	HASH_FIND(hh, t->froms, &key, sizeof(key), e);
	if (e)
		return e->json;
	if (t->nfroms >= GPU_TRACE_MAX_FROM)
		return NULL;
	e = xcalloc(1, sizeof(*e));
	e->key = key;
	e->json = describe(t, s);
	HASH_ADD(hh, t->froms, key, sizeof(e->key), e);
	t->nfroms++;
	return e->json;
}

static uint64_t span_len(const struct kernel *k)
{
	return k->end - k->start;
}

/* The min-heap of the window's spans by length: k[i]'s children are
 * k[2i+1] and k[2i+2]. */
static void heap_up(struct kernel *k, size_t i)
{
	while (i) {
		size_t up = (i - 1) / 2;
		struct kernel tmp;

		if (span_len(&k[up]) <= span_len(&k[i]))
			break;
		tmp = k[up];
		k[up] = k[i];
		k[i] = tmp;
		i = up;
	}
}

static void heap_down(struct kernel *k, size_t n, size_t i)
{
	for (;;) {
		size_t l = 2 * i + 1, r = l + 1, m = i;
		struct kernel tmp;

		if (l < n && span_len(&k[l]) < span_len(&k[m]))
			m = l;
		if (r < n && span_len(&k[r]) < span_len(&k[m]))
			m = r;
		if (m == i)
			break;
		tmp = k[m];
		k[m] = k[i];
		k[i] = tmp;
		i = m;
	}
}

/* A place for a span of length len, or NULL (counted as dropped). */
static struct kernel *span_slot(struct gpu_trace *t, uint64_t len)
{
	if (!t->window_max) {
		if (t->n >= GPU_TRACE_MAX_KERNELS) {
			t->st.dropped++;
			return NULL;
		}
		xgrow((void **)&t->k, &t->cap, t->n + 1, sizeof(*t->k));
		return &t->k[t->n++];
	}
	if (t->n < t->window_max) {
		xgrow((void **)&t->k, &t->cap, t->n + 1, sizeof(*t->k));
		return &t->k[t->n++];
	}
	/* Full: the longest stay. */
	t->st.dropped++;
	if (!t->n || len <= span_len(&t->k[0]))
		return NULL;
	t->st.kernels--;
	return &t->k[0];
}

/* Fills a span's slot and puts it in its place. */
static void span_add(struct gpu_trace *t, const struct kernel *in)
{
	uint64_t key = (uint64_t)in->pid << 32 | in->correlation;
	uint64_t start = in->start, end = in->end > in->start ? in->end : in->start;
	struct launch_ent *l;
	struct clock_ent *c;
	struct kernel *k, span = *in;

	HASH_FIND(hh, t->clocks, &in->pid, sizeof(in->pid), c);
	if (c) {
		start += (uint64_t)c->host_minus_gpu;
		end += (uint64_t)c->host_minus_gpu;
	}
	k = span_slot(t, end - start);
	if (!k)
		return;
	span.start = start;
	span.end = end;
	span.clocked = c != NULL;
	if (!c)
		t->st.no_clock++;
	if (!span.host) {
		HASH_FIND(hh, t->launches, &key, sizeof(key), l);
		if (l) {
			span.tid = l->tid;
			span.launch_ns = l->ts_ns;
		} else {
			t->st.no_launch++;
		}
		span.from = from_of(t, in->pid, in->correlation);
		if (!span.from)
			t->st.no_from++;
	}
	*k = span;
	if (t->window_max) {
		if (k == &t->k[0] && t->n == t->window_max && t->n > 1)
			heap_down(t->k, t->n, 0);
		else
			heap_up(t->k, (size_t)(k - t->k));
	}
	t->st.kernels++;
	t->st.copies += span.copy;
}

/* A span of pid's on device and stream from start to end (CUPTI's
 * clock), of the launch with that correlation id, of category cat. */
static struct kernel span_of(uint32_t pid, int device, uint32_t stream, uint64_t start,
			     uint64_t end, uint32_t correlation, const char *cat)
{
	return (struct kernel){.pid = pid,
			       .device = device,
			       .stream = stream,
			       .correlation = correlation,
			       .start = start,
			       .end = end,
			       .cat = cat};
}

void gpu_trace__kernel(struct gpu_trace *t, uint32_t pid, int device, uint32_t stream,
		       uint64_t start, uint64_t end, uint32_t correlation, const char *name)
{
	struct kernel k = span_of(pid, device, stream, start, end, correlation, "kernel");

	k.name = name_of(t, name && *name ? name : "[unknown kernel]");
	k.kind = name_of(t, "kernel");
	span_add(t, &k);
}

void gpu_trace__graph(struct gpu_trace *t, uint32_t pid, int device, uint32_t stream,
		      uint64_t start, uint64_t end, uint32_t correlation, uint32_t graph)
{
	struct kernel k = span_of(pid, device, stream, start, end, correlation, "graph");
	char name[48];

	k.name = name_of(t, gpu_graph_label(graph, name, sizeof(name)));
	k.kind = name_of(t, "graph");
	span_add(t, &k);
}

const char *gpu_sync_label(uint32_t type)
{
	static const char *const names[SONDE_CUPTI_SYNC_TYPES] = {
		"[synchronize]", "[event synchronize]", "[stream wait event]",
		"[stream synchronize]", "[context synchronize]"};

	return names[type < SONDE_CUPTI_SYNC_TYPES ? type : 0];
}

void gpu_trace__sync(struct gpu_trace *t, uint32_t pid, uint32_t stream, uint64_t start,
		     uint64_t end, uint32_t correlation, uint32_t type)
{
	struct kernel k = span_of(pid, -1, stream == SONDE_CUPTI_NO_ID ? 0 : stream, start, end,
				  correlation, "sync");

	k.host = true;
	k.name = name_of(t, gpu_sync_label(type));
	k.kind = name_of(t, "sync");
	span_add(t, &k);
}

void gpu_trace__copy(struct gpu_trace *t, uint32_t pid, int device, uint32_t stream, uint64_t start,
		     uint64_t end, uint32_t correlation, const char *label, uint64_t bytes)
{
	struct kernel k = span_of(pid, device, stream, start, end, correlation, "copy");
	char kind[STORE_KIND_MAX];
	size_t n;

	if (!label || !*label)
		label = "[memcpy]";
	/* "[memcpy HtoD]" is of kind "memcpy HtoD". */
	snprintf(kind, sizeof(kind), "%s", label + (*label == '['));
	n = strlen(kind);
	if (n && kind[n - 1] == ']')
		kind[n - 1] = '\0';
	k.bytes = bytes;
	k.copy = true;
	k.name = name_of(t, label);
	k.kind = name_of(t, *kind ? kind : "memcpy");
	span_add(t, &k);
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
	/* The host's waits: a track below the devices'. */
	if (k->device < 0)
		return GPU_TID_BASE - 1000000u + k->stream % 1000000u;
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
		if (t->k[i].device < 0)
			fprintf(f,
				"%s{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":%" PRIu32
				",\"tid\":%" PRIu32
				",\"args\":{\"name\":\"host waits stream %" PRIu32 "\"}}",
				sep, t->k[i].pid, gpu_tid(&t->k[i]), t->k[i].stream);
		else
			fprintf(f,
				"%s{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":%" PRIu32
				",\"tid\":%" PRIu32 ",\"args\":{\"name\":\"GPU %d stream %" PRIu32
				"\"}}",
				sep, t->k[i].pid, gpu_tid(&t->k[i]), t->k[i].device,
				t->k[i].stream);
		sep = ",\n";
	}
	HTABLE_CLEAR(hh, tracks, e, free(e));
	for (size_t i = 0; i < t->n; i++, sep = ",\n") {
		const struct kernel *k = &t->k[i];

		fprintf(f,
			"%s{\"ph\":\"X\",\"cat\":\"%s\",\"name\":%s,\"pid\":%" PRIu32
			",\"tid\":%" PRIu32 ",\"ts\":%.3f,\"dur\":%.3f,\"args\":{\"device\":%d,"
			"\"stream\":%" PRIu32 ",\"correlation\":%" PRIu32 "}}",
			sep, k->cat ? k->cat : "kernel", k->name, k->pid, gpu_tid(k),
			(double)k->start / NS_PER_US, (double)(k->end - k->start) / NS_PER_US,
			k->device, k->stream, k->correlation);
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
				k->pid, k->tid, (double)k->launch_ns / NS_PER_US, k->correlation);
		fprintf(f,
			",\n{\"ph\":\"s\",\"cat\":\"launch\",\"name\":\"launch\",\"id\":%zu"
			",\"pid\":%" PRIu32 ",\"tid\":%" PRIu32 ",\"ts\":%.3f}",
			i + 1, k->pid, k->tid, (double)k->launch_ns / NS_PER_US);
		fprintf(f,
			",\n{\"ph\":\"f\",\"bp\":\"e\",\"cat\":\"launch\",\"name\":\"launch\","
			"\"id\":%zu,\"pid\":%" PRIu32 ",\"tid\":%" PRIu32 ",\"ts\":%.3f}",
			i + 1, k->pid, gpu_tid(k), (double)k->start / NS_PER_US);
	}
	HTABLE_CLEAR(hh, launches, e, free(e));
	fputs("\n]}\n", f);
	return ferror(f) ? -EIO : 0;
}

/* ---- the agent's windows ---- */

static int cmp_span(const void *a, const void *b)
{
	const struct kernel *x = a, *y = b;

	if (x->pid != y->pid)
		return x->pid < y->pid ? -1 : 1;
	if (x->start != y->start)
		return x->start < y->start ? -1 : 1;
	if (x->device != y->device)
		return x->device < y->device ? -1 : 1;
	if (x->stream != y->stream)
		return x->stream < y->stream ? -1 : 1;
	return x->correlation < y->correlation ? -1 : x->correlation > y->correlation;
}

/* Opens the series of pid in b: its labels, then the spans' array. */
static int series_head(const struct gpu_trace *t, struct sbuf *b, const char *node_json,
		       uint32_t pid, bool first)
{
	const struct proc_ent *p;
	char *comm;

	HASH_FIND(hh, t->procs, &pid, sizeof(pid), p);
	int err;

	comm = json_text(p && p->comm[0] ? p->comm : "");
	err = sbuf__printf(
		b, "%s{\"labels\":{\"node\":%s,\"pid\":\"%" PRIu32 "\",\"process\":%s},\"spans\":[",
		first ? "" : "]},", node_json, pid, comm);
	free(comm);
	return err;
}

char *gpu_trace__take_json(struct gpu_trace *t, const char *node, int64_t real_minus_mono,
			   size_t *len, size_t *n)
{
	struct sbuf b = {0};
	char *node_json = json_text(node ? node : "");
	size_t i, out = 0;
	uint32_t pid = 0;
	int err;

	*len = *n = 0;
	qsort(t->k, t->n, sizeof(*t->k), cmp_span);
	err = sbuf__puts(&b, "{\"series\":[");
	for (i = 0; i < t->n; i++) {
		const struct kernel *k = &t->k[i];

		if (!k->clocked)
			continue;
		if (!out || k->pid != pid)
			err |= series_head(t, &b, node_json, k->pid, !out);
		else
			err |= sbuf__puts(&b, ",");
		pid = k->pid;
		err |= sbuf__printf(&b,
				    "{\"start_ns\":%" PRId64 ",\"end_ns\":%" PRId64
				    ",\"device\":%d,\"stream\":%" PRIu32 ",\"correlation\":%" PRIu32
				    ",\"tid\":%" PRIu32 ",\"kind\":%s,\"name\":%s",
				    (int64_t)k->start + real_minus_mono,
				    (int64_t)k->end + real_minus_mono,
				    k->device < -1 ? -1 : k->device, k->stream, k->correlation,
				    k->tid, k->kind, k->name);
		if (k->bytes)
			err |= sbuf__printf(&b, ",\"bytes\":%" PRIu64, k->bytes & INT64_MAX);
		if (k->from)
			err |= sbuf__printf(&b, ",\"from\":%s", k->from);
		err |= sbuf__puts(&b, "}");
		out++;
	}
	err |= sbuf__puts(&b, out ? "]}]}" : "]}");
	free(node_json);
	t->n = 0;
	t->st.shipped += out;
	/* Descriptions are kept across windows (a loop launches from the
	 * same stacks), within their bound: when it is reached, they start
	 * afresh here, where no span refers to them. */
	if (t->nfroms >= GPU_TRACE_MAX_FROM) {
		HTABLE_CLEAR(hh, t->froms, e, (free(e->json), free(e)));
		t->nfroms = 0;
	}
	if (!out || !b.buf || err) {
		sbuf__free(&b);
		return NULL;
	}
	*len = b.len;
	*n = out;
	return b.buf;
}
