/* pc_sampling.c: why kernels stall, by CUPTI's PC sampling -- opt-in
 * (SONDE_CUPTI_PC_SAMPLING=1; `sonde record --gpu-stalls` sets it). Each
 * SM's warp scheduler is sampled every 2^period cycles (SONDE_CUPTI_PC_PERIOD,
 * 5..31, default SONDE_CUPTI_PC_PERIOD_DEFAULT); CUPTI counts the samples
 * per SASS instruction (its offset in its cubin) and stall reason, and the
 * library hands them to the probes as SONDE_CUPTI_REC_STALL records, the
 * reasons' names as SONDE_CUPTI_REC_STALL_REASON ones (at each context's
 * start and again about every RETELL_TICKS clock ticks, for an agent that
 * comes late).
 *
 * As NVIDIA's continuous-mode sample does: sampling is enabled and
 * configured in each context's creation callback, and its data taken
 * (cuptiPCSamplingGetData) on the application's own threads, in CUPTI's
 * callbacks -- at a launch's exit at most every DRAIN_EVERY_NS per context,
 * before a module is unloaded (the docs require it there) and before a
 * context is destroyed -- and at exit, where cuptiPCSamplingDisable hands
 * over what is left. A launching thread never waits for another's drain
 * (trylock). Samples CUPTI dropped (its hardware buffer full) are counted
 * and told with the clock.
 *
 * So that an instruction's offset can be named (its mnemonic, by the
 * toolkit's nvdisasm where the agent finds one), each module's cubin is
 * saved as it loads (CUPTI_CBID_RESOURCE_MODULE_LOADED) into
 * SONDE_CUPTI_CUBIN_DIR (default /tmp/sonde-cubins-UID, mode 0700), named by
 * the CRC CUPTI gives its samples (cuptiGetCubinCrc), once per CRC whatever
 * the process, at most SONDE_CUPTI_CUBIN_BYTES (default 512 MiB) a process,
 * and told as SONDE_CUPTI_REC_CUBIN records (again with the reasons).
 *
 * Continuous mode has no correlation ids: a sample names its kernel, not
 * the launch; the agent puts it under that kernel's latest launching stack.
 * Function names are CUPTI's, shared with its other records and kept for
 * the process's life (one per distinct kernel). */
#include "cupti/sonde_cupti.h"
#include "cupti/sonde_cupti_internal.h"

#include <cupti_callbacks.h>
#include <cupti_pcsampling.h>
#include <cupti_result.h>

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_CONTEXTS 64
#define DRAIN_EVERY_NS 250000000ull
#define MAX_DRAINS 64 /* GetData calls a drain makes, at most */
#define RETELL_TICKS 10

static struct {
	CUptiResult (*enable)(CUpti_PCSamplingEnableParams *);
	CUptiResult (*disable)(CUpti_PCSamplingDisableParams *);
	CUptiResult (*num_reasons)(CUpti_PCSamplingGetNumStallReasonsParams *);
	CUptiResult (*reasons)(CUpti_PCSamplingGetStallReasonsParams *);
	CUptiResult (*configure)(CUpti_PCSamplingConfigurationInfoParams *);
	CUptiResult (*get_data)(CUpti_PCSamplingGetDataParams *);
	CUptiResult (*cubin_crc)(CUpti_GetCubinCrcParams *);
} pc;

#define MAX_CUBINS 4096
#define CUBIN_BYTES (512ull << 20)

/* The cubins saved (or found saved) by this process. */
static struct cubin {
	uint64_t crc, size;
	char path[SONDE_CUPTI_NVTX_PATH_LEN]; /* what the probes read of a name */
} * cubins;
static size_t ncubins;
static uint64_t cubin_bytes, cubin_max = CUBIN_BYTES;
static char cubin_dir[SONDE_CUPTI_NVTX_PATH_LEN - 32];

/* A context being sampled. */
struct pc_ctx {
	CUcontext ctx;
	uint64_t due; /* CLOCK_MONOTONIC ns of its next drain at a launch */
	size_t nreasons;
	uint32_t *index;
	char **names;
	CUpti_PCSamplingData data;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct pc_ctx *ctxs[MAX_CONTEXTS];
static bool wanted;
static uint32_t period;
static atomic_ullong dropped; /* samples CUPTI dropped, so far */
static unsigned ticks;

bool pc_sampling_setup(void *lib)
{
	const char *v = getenv("SONDE_CUPTI_PC_SAMPLING");

	if (!v || strcmp(v, "1"))
		return false;
	period = (uint32_t)env_long("SONDE_CUPTI_PC_PERIOD", SONDE_CUPTI_PC_PERIOD_DEFAULT, 5, 31);
#define SYM(field, name) *(void **)&pc.field = dlsym(lib, name)
	SYM(enable, "cuptiPCSamplingEnable");
	SYM(disable, "cuptiPCSamplingDisable");
	SYM(num_reasons, "cuptiPCSamplingGetNumStallReasons");
	SYM(reasons, "cuptiPCSamplingGetStallReasons");
	SYM(configure, "cuptiPCSamplingSetConfigurationAttribute");
	SYM(get_data, "cuptiPCSamplingGetData");
	SYM(cubin_crc, "cuptiGetCubinCrc");
#undef SYM
	if (!pc.enable || !pc.disable || !pc.num_reasons || !pc.reasons || !pc.configure ||
	    !pc.get_data) {
		fprintf(stderr, "sonde_cupti: this CUPTI has no PC sampling API -- GPU stall "
				"reasons are not recorded\n");
		return false;
	}
	wanted = true;
	cubin_max =
		(uint64_t)env_long("SONDE_CUPTI_CUBIN_BYTES", (long)(CUBIN_BYTES >> 20), 0, 1 << 20)
		<< 20;
	v = getenv("SONDE_CUPTI_CUBIN_DIR");
	if (v && *v && strlen(v) >= sizeof(cubin_dir))
		fprintf(stderr,
			"sonde_cupti: SONDE_CUPTI_CUBIN_DIR is longer than %zu bytes -- "
			"GPU instructions are not named\n",
			sizeof(cubin_dir) - 1);
	else if (v && *v)
		snprintf(cubin_dir, sizeof(cubin_dir), "%s", v);
	else
		snprintf(cubin_dir, sizeof(cubin_dir), "/tmp/sonde-cubins-%u", (unsigned)getuid());
	return true;
}

uint64_t pc_sampling_dropped(void)
{
	return atomic_load(&dropped);
}

static void tell_reasons(const struct pc_ctx *p)
{
	struct record_batch b = {.n = 0};

	for (size_t i = 0; i < p->nreasons; i++)
		batch_push(&b, &(struct sonde_cupti_record){
				       .kind = SONDE_CUPTI_REC_STALL_REASON,
				       .name = (uint64_t)(uintptr_t)p->names[i],
				       .reason = p->index[i],
			       });
	batch_flush(&b);
}

/* The cubins saved from the first on, to the probes. */
static void tell_cubins_from(size_t first)
{
	struct record_batch b = {.n = 0};

	for (size_t i = first; i < ncubins; i++)
		batch_push(&b, &(struct sonde_cupti_record){
				       .kind = SONDE_CUPTI_REC_CUBIN,
				       .cubin = cubins[i].crc,
				       .bytes = cubins[i].size,
				       .name = (uint64_t)(uintptr_t)cubins[i].path,
			       });
	batch_flush(&b);
}

/* Writes size bytes of data to path, through a file of its own renamed
 * into place (another process may save the same cubin). 0 or -errno. */
static int write_file(const char *path, const void *data, size_t size)
{
	char tmp[PATH_MAX + 32];
	const char *p = data;
	int fd, err = 0;

	snprintf(tmp, sizeof(tmp), "%s.%d.tmp", path, (int)getpid());
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	while (size && !err) {
		ssize_t w = write(fd, p, size);

		if (w < 0 && errno != EINTR)
			err = -errno;
		else if (w > 0)
			p += w, size -= (size_t)w;
	}
	if (close(fd) && !err)
		err = -errno;
	if (!err && rename(tmp, path))
		err = -errno;
	if (err)
		unlink(tmp);
	return err;
}

/* A module loaded: its cubin saved under its CRC, and told. Under lock. */
static void save_cubin(const CUpti_ModuleResourceData *m)
{
	CUpti_GetCubinCrcParams p = {.size = CUpti_GetCubinCrcParamsSize};
	static bool said;
	struct cubin *c;
	int err;

	if (!*cubin_dir || !m || !m->pCubin || !m->cubinSize || !pc.cubin_crc ||
	    ncubins >= MAX_CUBINS || cubin_bytes + m->cubinSize > cubin_max)
		return;
	p.cubinSize = m->cubinSize;
	p.cubin = m->pCubin;
	if (pc.cubin_crc(&p))
		return;
	for (size_t i = 0; i < ncubins; i++)
		if (cubins[i].crc == p.cubinCrc)
			return;
	if (!cubins && !(cubins = calloc(MAX_CUBINS, sizeof(*cubins))))
		return;
	c = &cubins[ncubins];
	snprintf(c->path, sizeof(c->path), "%s/%016llx.cubin", cubin_dir,
		 (unsigned long long)p.cubinCrc);
	if (mkdir(cubin_dir, 0700) && errno != EEXIST)
		err = -errno;
	else if (access(c->path, R_OK))
		err = write_file(c->path, m->pCubin, m->cubinSize);
	else
		err = 0;
	if (err) {
		if (!said)
			fprintf(stderr,
				"sonde_cupti: can't save cubins in %s: %s -- GPU instructions are "
				"not named\n",
				cubin_dir, strerror(-err));
		said = true;
		return;
	}
	c->crc = p.cubinCrc;
	c->size = m->cubinSize;
	cubin_bytes += m->cubinSize;
	ncubins++;
	tell_cubins_from(ncubins - 1);
}

/* The PCs in p's data buffer to the probes. */
static void tell_pcs(const struct pc_ctx *p)
{
	const CUpti_PCSamplingData *d = &p->data;
	size_t npcs = d->totalNumPcs < d->collectNumPcs ? d->totalNumPcs : d->collectNumPcs;
	struct record_batch b = {.n = 0};

	for (size_t i = 0; i < npcs; i++) {
		const CUpti_PCSamplingPCData *pcd = &d->pPcData[i];
		size_t nr =
			pcd->stallReasonCount < p->nreasons ? pcd->stallReasonCount : p->nreasons;

		for (size_t r = 0; r < nr; r++) {
			if (!pcd->stallReason[r].samples)
				continue;
			batch_push(&b,
				   &(struct sonde_cupti_record){
					   .kind = SONDE_CUPTI_REC_STALL,
					   .pc = pcd->pcOffset,
					   .cubin = pcd->cubinCrc,
					   .name = (uint64_t)(uintptr_t)pcd->functionName,
					   .samples = pcd->stallReason[r].samples,
					   .reason = pcd->stallReason[r].pcSamplingStallReasonIndex,
					   .correlation = pcd->correlationId,
				   });
		}
	}
	batch_flush(&b);
}

/* Takes what CUPTI holds of p's samples, MAX_DRAINS buffers at most. Under
 * lock. */
static void drain(struct pc_ctx *p)
{
	CUpti_PCSamplingGetDataParams g = {
		.size = CUpti_PCSamplingGetDataParamsSize,
		.ctx = p->ctx,
		.pcSamplingData = &p->data,
	};
	CUptiResult r;

	for (int i = 0; i < MAX_DRAINS; i++) {
		p->data.totalNumPcs = 0;
		p->data.remainingNumPcs = 0;
		p->data.droppedSamples = 0;
		p->data.hardwareBufferFull = 0;
		r = pc.get_data(&g);
		if (p->data.droppedSamples)
			atomic_fetch_add(&dropped, p->data.droppedSamples);
		if (r)
			return; /* CUPTI_ERROR_OUT_OF_MEMORY: its buffer was full, counted */
		tell_pcs(p);
		if (!p->data.remainingNumPcs)
			return;
	}
}

static void free_ctx(struct pc_ctx *p)
{
	if (!p)
		return;
	for (size_t i = 0; i < p->data.collectNumPcs && p->data.pPcData; i++)
		free(p->data.pPcData[i].stallReason);
	free(p->data.pPcData);
	for (size_t i = 0; i < p->nreasons && p->names; i++)
		free(p->names[i]);
	free(p->names);
	free(p->index);
	free(p);
}

/* p's stall reasons and its data buffer. */
static bool make_buffers(struct pc_ctx *p)
{
	CUpti_PCSamplingGetNumStallReasonsParams nr = {
		.size = CUpti_PCSamplingGetNumStallReasonsParamsSize,
		.ctx = p->ctx,
		.numStallReasons = &p->nreasons,
	};
	CUpti_PCSamplingGetStallReasonsParams rs = {
		.size = CUpti_PCSamplingGetStallReasonsParamsSize,
		.ctx = p->ctx,
	};

	if (pc.num_reasons(&nr) || !p->nreasons || p->nreasons > 1024)
		return false;
	p->index = calloc(p->nreasons, sizeof(*p->index));
	p->names = calloc(p->nreasons, sizeof(*p->names));
	if (!p->index || !p->names)
		return false;
	for (size_t i = 0; i < p->nreasons; i++)
		if (!(p->names[i] = calloc(1, CUPTI_STALL_REASON_STRING_SIZE)))
			return false;
	rs.numStallReasons = p->nreasons;
	rs.stallReasonIndex = p->index;
	rs.stallReasons = p->names;
	if (pc.reasons(&rs))
		return false;
	for (size_t i = 0; i < p->nreasons; i++)
		p->names[i][CUPTI_STALL_REASON_STRING_SIZE - 1] = 0;
	p->data.size = sizeof(p->data);
	p->data.collectNumPcs = SONDE_CUPTI_PC_BATCH;
	p->data.pPcData = calloc(SONDE_CUPTI_PC_BATCH, sizeof(*p->data.pPcData));
	if (!p->data.pPcData)
		return false;
	for (size_t i = 0; i < SONDE_CUPTI_PC_BATCH; i++) {
		p->data.pPcData[i].size = sizeof(p->data.pPcData[i]);
		p->data.pPcData[i].stallReason =
			calloc(p->nreasons, sizeof(*p->data.pPcData[i].stallReason));
		if (!p->data.pPcData[i].stallReason)
			return false;
	}
	return true;
}

static CUptiResult configure(struct pc_ctx *p)
{
	CUpti_PCSamplingConfigurationInfo info[] = {
		{.attributeType = CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_SAMPLING_PERIOD,
		 .attributeData.samplingPeriodData.samplingPeriod = period},
		{.attributeType = CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_STALL_REASON,
		 .attributeData.stallReasonData = {p->nreasons, p->index}},
		{.attributeType = CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_COLLECTION_MODE,
		 .attributeData.collectionModeData.collectionMode =
			 CUPTI_PC_SAMPLING_COLLECTION_MODE_CONTINUOUS},
		{.attributeType =
			 CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_ENABLE_START_STOP_CONTROL,
		 .attributeData.enableStartStopControlData.enableStartStopControl = 0},
		{.attributeType = CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_OUTPUT_DATA_FORMAT,
		 .attributeData.outputDataFormatData.outputDataFormat =
			 CUPTI_PC_SAMPLING_OUTPUT_DATA_FORMAT_PARSED},
		{.attributeType = CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_SAMPLING_DATA_BUFFER,
		 .attributeData.samplingDataBufferData.samplingDataBuffer = &p->data},
	};
	CUpti_PCSamplingConfigurationInfoParams params = {
		.size = CUpti_PCSamplingConfigurationInfoParamsSize,
		.ctx = p->ctx,
		.numAttributes = sizeof(info) / sizeof(info[0]),
		.pPCSamplingConfigurationInfo = info,
	};

	return pc.configure(&params);
}

static void disable(CUcontext ctx)
{
	CUpti_PCSamplingDisableParams d = {.size = CUpti_PCSamplingDisableParamsSize, .ctx = ctx};

	pc.disable(&d);
}

/* A new context: sampled from now on. */
static void started(CUcontext ctx)
{
	CUpti_PCSamplingEnableParams e = {.size = CUpti_PCSamplingEnableParamsSize, .ctx = ctx};
	struct pc_ctx *p = calloc(1, sizeof(*p));
	CUptiResult r;
	int slot = -1;

	if (!p)
		return;
	p->ctx = ctx;
	for (int i = 0; i < MAX_CONTEXTS && slot < 0; i++)
		if (!ctxs[i])
			slot = i;
	if (slot < 0) {
		fprintf(stderr,
			"sonde_cupti: %d contexts sampled already -- this one's GPU stall "
			"reasons are not recorded\n",
			MAX_CONTEXTS);
		free(p);
		return;
	}
	r = pc.enable(&e);
	if (r) {
		fprintf(stderr,
			"sonde_cupti: can't sample this context's PCs: %s -- GPU stall reasons "
			"are not recorded\n",
			cupti_why(r));
		free(p);
		return;
	}
	if (!make_buffers(p) || (r = configure(p))) {
		fprintf(stderr,
			"sonde_cupti: can't configure PC sampling: %s -- GPU stall "
			"reasons are not recorded\n",
			r ? cupti_why(r) : "its stall reasons could not be read");
		disable(ctx);
		free_ctx(p);
		return;
	}
	p->due = mono_ns() + DRAIN_EVERY_NS;
	ctxs[slot] = p;
	tell_reasons(p);
}

static struct pc_ctx *find(CUcontext ctx)
{
	for (int i = 0; i < MAX_CONTEXTS; i++)
		if (ctxs[i] && ctxs[i]->ctx == ctx)
			return ctxs[i];
	return NULL;
}

/* ctx goes: its samples, then its sampling's end. */
static void ended(CUcontext ctx)
{
	for (int i = 0; i < MAX_CONTEXTS; i++) {
		struct pc_ctx *p = ctxs[i];

		if (!p || p->ctx != ctx)
			continue;
		drain(p);
		disable(ctx);
		ctxs[i] = NULL;
		free_ctx(p);
	}
}

void pc_sampling_resource(uint32_t cbid, const void *cbdata)
{
	const CUpti_ResourceData *d = cbdata;
	struct pc_ctx *p;

	if (!wanted || !d)
		return;
	pthread_mutex_lock(&lock);
	if (cbid == CUPTI_CBID_RESOURCE_CONTEXT_CREATED) {
		started(d->context);
	} else if (cbid == CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING) {
		ended(d->context);
	} else if (cbid == CUPTI_CBID_RESOURCE_MODULE_LOADED) {
		save_cubin(d->resourceDescriptor);
	} else if (cbid == CUPTI_CBID_RESOURCE_MODULE_UNLOAD_STARTING) {
		/* A module loaded again could reuse the PCs: take them first. */
		if ((p = find(d->context)))
			drain(p);
	}
	pthread_mutex_unlock(&lock);
}

void pc_sampling_launched(void *ctx)
{
	struct pc_ctx *p;
	uint64_t now;

	if (!wanted || pthread_mutex_trylock(&lock))
		return;
	p = find(ctx);
	if (p && (now = mono_ns()) >= p->due) {
		p->due = now + DRAIN_EVERY_NS;
		drain(p);
	}
	pthread_mutex_unlock(&lock);
}

void pc_sampling_tick(void)
{
	if (!wanted || ++ticks % RETELL_TICKS || pthread_mutex_trylock(&lock))
		return;
	for (int i = 0; i < MAX_CONTEXTS; i++)
		if (ctxs[i])
			tell_reasons(ctxs[i]);
	tell_cubins_from(0);
	pthread_mutex_unlock(&lock);
}

void pc_sampling_end(void)
{
	if (!wanted)
		return;
	pthread_mutex_lock(&lock);
	for (int i = 0; i < MAX_CONTEXTS; i++) {
		struct pc_ctx *p = ctxs[i];

		if (!p)
			continue;
		drain(p);
		/* Disable writes what is left into the buffer. */
		p->data.totalNumPcs = 0;
		disable(p->ctx);
		tell_pcs(p);
		ctxs[i] = NULL;
		free_ctx(p);
	}
	wanted = false;
	pthread_mutex_unlock(&lock);
}
