/* nvtx.c: libsonde_cupti.so as the job's NVTX injection library too
 * (NVTX_INJECTION64_PATH; `sonde record --gpu` sets it beside
 * CUDA_INJECTION64_PATH): NVTX's push and pop of ranges -- torch.cuda.nvtx,
 * Megatron's and vLLM's ranges, anything built on NVTX's C API -- keep each
 * thread's open ranges, and each launch or copy carries the id of the
 * thread's range path then (sonde_cupti_launch's second argument), so that
 * the kernel's GPU time sits under the ranges that held its launch.
 *
 * A range path ("forward\x1fattention", outermost first) is told to the
 * probes once under its id (sonde_cupti_nvtx(id, path)), and again when
 * used after NVTX_RETELL_TICKS of the library's clock ticks (about a
 * second each), so that an agent started after the job learns it too.
 * Bounded: NVTX_DEPTH ranges a thread (deeper ones count for their pops,
 * not in the path), NVTX_PATHS paths a process (later ones have id 0, no
 * range), NVTX_PATH_LEN bytes a path. */
#include "cupti/sonde_cupti.h"
#include "cupti/sonde_cupti_internal.h"
/* Header-only: the library links nothing of the rest of src/. */
#include "common/hash.h"

#define NVTX_NO_IMPL
#include <nvtx3/nvToolsExt.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))

#define NVTX_DEPTH 16
#define NVTX_PATHS 4096
#define NVTX_RETELL_TICKS 10

/* This thread's open ranges: path holds them, outermost first, joined by
 * SONDE_CUPTI_NVTX_SEP; len[i] is its length with i ranges open. */
static __thread struct {
	int depth;
	uint32_t id; /* the path's, 0: none */
	uint32_t ids[NVTX_DEPTH + 1];
	uint16_t len[NVTX_DEPTH + 1];
	char path[SONDE_CUPTI_NVTX_PATH_LEN];
} th;

/* The paths seen, by id (1-based), in an open-addressing table by hash. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct path_ent {
	uint64_t hash;
	uint32_t id;
	char *path;
} table[2 * NVTX_PATHS];
static struct {
	char *path;
	atomic_uint told; /* clock tick it was last told at */
} by_id[NVTX_PATHS + 1];
static uint32_t npaths;
static atomic_uint ticks;

void nvtx_tick(void)
{
	atomic_fetch_add(&ticks, 1);
}

/* The id of the path (told to the probes when new), 0 when the table is
 * full. */
static uint32_t intern(const char *path, size_t n)
{
	uint64_t h = hash_bytes(path, n, 0);
	size_t i = h % (2 * NVTX_PATHS);
	uint32_t id = 0;

	pthread_mutex_lock(&lock);
	for (;; i = (i + 1) % (2 * NVTX_PATHS)) {
		struct path_ent *e = &table[i];

		if (!e->path) {
			if (npaths >= NVTX_PATHS)
				break;
			e->path = strndup(path, n);
			if (!e->path)
				break;
			e->hash = h;
			e->id = id = ++npaths;
			by_id[id].path = e->path;
			atomic_store(&by_id[id].told, atomic_load(&ticks));
			pthread_mutex_unlock(&lock);
			sonde_cupti_nvtx(id, by_id[id].path);
			return id;
		}
		if (e->hash == h && !strncmp(e->path, path, n) && !e->path[n]) {
			id = e->id;
			break;
		}
	}
	pthread_mutex_unlock(&lock);
	return id;
}

uint32_t nvtx_current(void)
{
	uint32_t id = th.id, now;

	if (!id)
		return 0;
	/* Told again now and then, for an agent that came later. */
	now = atomic_load(&ticks);
	if (now - atomic_load(&by_id[id].told) >= NVTX_RETELL_TICKS) {
		atomic_store(&by_id[id].told, now);
		sonde_cupti_nvtx(id, by_id[id].path);
	}
	return id;
}

static void push(const char *name)
{
	int d = th.depth++;
	size_t at, n;

	if (d >= NVTX_DEPTH)
		return;
	if (!d) {
		th.len[0] = 0;
		th.ids[0] = 0;
	}
	at = th.len[d];
	n = name ? strlen(name) : 0;
	if (at && at < sizeof(th.path) - 1)
		th.path[at++] = SONDE_CUPTI_NVTX_SEP;
	if (n > sizeof(th.path) - 1 - at)
		n = sizeof(th.path) - 1 - at;
	memcpy(th.path + at, name ? name : "", n);
	th.len[d + 1] = (uint16_t)(at + n);
	th.path[at + n] = 0;
	th.ids[d + 1] = th.id = intern(th.path, at + n);
}

static int pop(void)
{
	if (th.depth <= 0)
		return -1;
	th.depth--;
	if (th.depth <= NVTX_DEPTH)
		th.id = th.ids[th.depth];
	return th.depth;
}

/* The message of an event's attributes, when it is text. */
static const char *message(const nvtxEventAttributes_t *a)
{
	return a && a->messageType == NVTX_MESSAGE_TYPE_ASCII ? a->message.ascii : "[nvtx]";
}

static int NVTX_API push_a(const char *m)
{
	push(m);
	return th.depth - 1;
}

static int NVTX_API push_ex(const nvtxEventAttributes_t *a)
{
	push(message(a));
	return th.depth - 1;
}

static int NVTX_API push_w(const wchar_t *m)
{
	push("[nvtx]");
	return th.depth - 1;
}

static int NVTX_API domain_push_ex(nvtxDomainHandle_t d, const nvtxEventAttributes_t *a)
{
	return push_ex(a);
}

static int NVTX_API domain_pop(nvtxDomainHandle_t d)
{
	return pop();
}

/* Puts fn into slot cbid of module's table, where the table has it. */
static void hook(NvtxGetExportTableFunc_t get, NvtxCallbackModule module, unsigned int cbid,
		 NvtxFunctionPointer fn)
{
	const NvtxExportTableCallbacks *cb = get ? get(NVTX_ETID_CALLBACKS) : NULL;
	NvtxFunctionTable t = NULL;
	unsigned int size = 0;

	if (!cb || !cb->GetModuleFunctionTable || !cb->GetModuleFunctionTable(module, &t, &size) ||
	    !t || cbid >= size || !t[cbid])
		return;
	*t[cbid] = fn;
}

/* NVTX calls it once, at the job's first NVTX call. Returns 1 (NVTX's
 * success) when the ranges are hooked. */
EXPORT int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get)
{
	hook(get, NVTX_CB_MODULE_CORE, NVTX_CBID_CORE_RangePushA, (NvtxFunctionPointer)push_a);
	hook(get, NVTX_CB_MODULE_CORE, NVTX_CBID_CORE_RangePushW, (NvtxFunctionPointer)push_w);
	hook(get, NVTX_CB_MODULE_CORE, NVTX_CBID_CORE_RangePushEx, (NvtxFunctionPointer)push_ex);
	hook(get, NVTX_CB_MODULE_CORE, NVTX_CBID_CORE_RangePop, (NvtxFunctionPointer)pop);
	hook(get, NVTX_CB_MODULE_CORE2, NVTX_CBID_CORE2_DomainRangePushEx,
	     (NvtxFunctionPointer)domain_push_ex);
	hook(get, NVTX_CB_MODULE_CORE2, NVTX_CBID_CORE2_DomainRangePop,
	     (NvtxFunctionPointer)domain_pop);
	return 1;
}
