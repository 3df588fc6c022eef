/* dataloader.c: DataLoader waits from PyTorch's record_function scopes.
 * See dataloader.h. */
#include "agent/dataloader.h"
#include "probe/gpu_probes.h"
#include "common/htable.h"
#include "common/log.h"
#include "common/xalloc.h"
#include "metrics/gpu_metrics.h"
#include "python/names.h"
#include "symbolize/symbolize.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uthash.h>

/* The Python frames between a record_function scope's constructor and
 * the code that opened it: record_function.__enter__
 * (torch/autograd/profiler.py) and the torch.ops.profiler call it makes
 * (OpOverloadPacket.__call__, torch/_ops.py). Then the iterator method
 * that opens a DataLoader's. */
static const char *const plumbing[] = {"/torch/autograd/profiler.py", "/torch/_ops.py"};
#define DATALOADER_FILE "/torch/utils/data/dataloader.py"
#define NEXT_METHOD "__next__"

struct wait_key {
	uint32_t pid;
	uint32_t pad;
	uint64_t obj;
};

struct wait_ent {
	UT_hash_handle hh;
	struct wait_key key;
	uint32_t tid;
	uint64_t since_ns;
	int line;
	char file[256];
	char function[128];
};

struct dataloader {
	struct symbolizer *sym;
	struct gpu_metrics *m;
	struct wait_ent *waits;
	size_t nwaits;
	struct dataloader_stats st;
};

struct dataloader *dataloader__new(struct symbolizer *sym, struct gpu_metrics *m)
{
	struct dataloader *d = xcalloc(1, sizeof(*d));

	d->sym = sym;
	d->m = m;
	return d;
}

void dataloader__free(struct dataloader *d)
{
	if (!d)
		return;
	HTABLE_CLEAR(hh, d->waits, e, free(e));
	free(d);
}

static bool ends_with(const char *s, const char *suffix)
{
	size_t n = strlen(s), k = strlen(suffix);

	return n >= k && !memcmp(s + n - k, suffix, k);
}

/* The qualified name of a frame named "QUALNAME (FILE)", into buf. */
static const char *qualname(const struct py_name *pn, char *buf, size_t size)
{
	const char *paren = strstr(pn->name, " (");
	size_t n = paren ? (size_t)(paren - pn->name) : strlen(pn->name);

	snprintf(buf, size, "%.*s", (int)n, pn->name);
	return buf;
}

/* The Python frame ip of pid, named (read now, while the process lives). */
static const struct py_name *py_frame(struct symbolizer *sym, uint32_t pid, uint64_t ip)
{
	struct py_names *names = symbolizer__python(sym);
	const struct py_name *pn = py_names__get(names, pid, ip);

	if (!pn && !py_names__load(names, pid, ip))
		pn = py_names__get(names, pid, ip);
	return pn;
}

bool python_line(struct symbolizer *sym, uint32_t pid, const uint64_t *ips, int n,
		 struct python_line *out)
{
	char q[sizeof(out->function)];

	for (int i = 0; sym && i < n; i++) {
		const struct py_name *pn;

		if (!py_names__is_frame(ips[i]))
			continue;
		pn = py_frame(sym, pid, ips[i]);
		if (!pn || !pn->file)
			return false;
		snprintf(out->file, sizeof(out->file), "%s", pn->file);
		snprintf(out->function, sizeof(out->function), "%s", qualname(pn, q, sizeof(q)));
		out->line = pn->line;
		return true;
	}
	return false;
}

static bool is_plumbing(const char *file)
{
	for (size_t i = 0; i < sizeof(plumbing) / sizeof(plumbing[0]); i++)
		if (ends_with(file, plumbing[i]))
			return true;
	return false;
}

/* Whether the scope's stack is a DataLoader's: its first Python frame
 * past record_function's own is __next__ in torch/utils/data/dataloader.py
 * -- an iterator's, whatever its class.
 * The frame that called that __next__ (the loop that waits) goes into e.
 * -1: the stack has no Python frame to tell by. */
static int classify(struct dataloader *d, const struct gpu_event *ev, struct wait_ent *e)
{
	bool python = false, next = false;
	char q[256];

	if (!d->sym)
		return -1;
	for (int i = 0; i < ev->nips; i++) {
		const struct py_name *pn;

		if (!py_names__is_frame(ev->ips[i]))
			continue;
		python = true;
		pn = py_frame(d->sym, ev->pid, ev->ips[i]);
		if (!pn || !pn->file)
			return 0;
		if (next) {
			/* The caller of __next__: the loop's line. */
			snprintf(e->file, sizeof(e->file), "%s", pn->file);
			snprintf(e->function, sizeof(e->function), "%s",
				 qualname(pn, q, sizeof(q)));
			e->line = pn->line;
			return 1;
		}
		if (is_plumbing(pn->file))
			continue;
		if (!ends_with(pn->file, DATALOADER_FILE) ||
		    !ends_with(qualname(pn, q, sizeof(q)), NEXT_METHOD))
			return 0;
		next = true;
	}
	if (next)
		return 1; /* __next__ called from native code: no line */
	return python ? 0 : -1;
}

static bool begin(struct dataloader *d, const struct gpu_event *ev)
{
	struct wait_key k = {.pid = ev->pid, .obj = ev->rf.obj};
	struct wait_ent probe = {0}, *e;
	int c;

	d->st.scopes++;
	/* An object whose end we never saw: its address is reused. */
	HASH_FIND(hh, d->waits, &k, sizeof(k), e);
	if (e) {
		HASH_DEL(d->waits, e);
		d->nwaits--;
		d->st.unmatched++;
		free(e);
	}
	c = classify(d, ev, &probe);
	if (c < 0)
		d->st.unknown++;
	if (c < 0 && d->st.unknown == 1)
		pr_debug("a record_function scope of pid %u has no Python frame in its stack (%d "
			 "frames): not known whose it is",
			 ev->pid, ev->nips);
	if (c <= 0)
		return false;
	if (d->nwaits >= DATALOADER_MAX_WAITS) {
		d->st.dropped++;
		return false;
	}
	e = xmalloc(sizeof(*e));
	*e = probe;
	memset(&e->hh, 0, sizeof(e->hh));
	e->key = k;
	e->tid = ev->tid;
	e->since_ns = ev->rf.start_ns;
	HASH_ADD(hh, d->waits, key, sizeof(e->key), e);
	d->nwaits++;
	return true;
}

static bool end(struct dataloader *d, const struct gpu_event *ev)
{
	struct wait_key k = {.pid = ev->pid, .obj = ev->rf.obj};
	struct wait_ent *e;

	HASH_FIND(hh, d->waits, &k, sizeof(k), e);
	/* A scope of another record_function, or a wait that began before
	 * the probes were there. */
	if (!e || e->since_ns != ev->rf.start_ns)
		return false;
	HASH_DEL(d->waits, e);
	d->nwaits--;
	free(e);
	d->st.waits++;
	if (d->m)
		gpu_metrics__dataloader_wait(d->m, ev->pid, ev->dur_ns);
	return true;
}

static void forget_pid(struct dataloader *d, uint32_t pid)
{
	struct wait_ent *e, *tmp;

	HASH_ITER(hh, d->waits, e, tmp)
	{
		if (e->key.pid != pid)
			continue;
		HASH_DEL(d->waits, e);
		d->nwaits--;
		d->st.unmatched++;
		free(e);
	}
}

bool dataloader__event(struct dataloader *d, const struct gpu_event *ev)
{
	switch (ev->type) {
	case GPU_EV_RF_BEGIN:
		return begin(d, ev);
	case GPU_EV_RF_END:
		return end(d, ev);
	case GPU_EV_PROCESS_EXIT:
		forget_pid(d, ev->pid);
		return false;
	default:
		return false;
	}
}

void dataloader__each_waiting(struct dataloader *d, dataloader_wait_fn fn, void *ctx)
{
	for (struct wait_ent *e = d->waits; e; e = e->hh.next) {
		struct dataloader_wait w = {
			.pid = e->key.pid,
			.tid = e->tid,
			.since_ns = e->since_ns,
			.file = e->file,
			.line = e->line,
			.function = e->function,
		};

		fn(ctx, &w);
	}
}

void dataloader__stats(const struct dataloader *d, struct dataloader_stats *out)
{
	*out = d->st;
	out->waiting = (uint32_t)d->nwaits;
}
