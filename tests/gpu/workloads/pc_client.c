/*
 * pc_client.c: a client of CUPTI's PC sampling API (cupti_pcsampling.h) driven as a
 * profiler's injection library drives it (NVIDIA's pc_sampling_continuous sample): it
 * subscribes to the resource domain's context callbacks; in CONTEXT_CREATED it enables PC
 * sampling, reads the stall reasons and configures the context (period, stall reasons,
 * buffer sizes, continuous mode, parsed output, a sampling data buffer); it reads the
 * samples with cuptiPCSamplingGetData while remainingNumPcs > 0, and in
 * CONTEXT_DESTROY_STARTING reads them and disables; in MODULE_LOADED it keeps the module's
 * cubin and its cuptiGetCubinCrc, as a profiler keeps them for a disassembler. Linked to
 * the stand-ins (libcuda.so.1, libcudart.so.13, libcupti.so.13), it launches kernels on
 * the primary context and on created ones, and checks every answer of the CUPTI stand-in
 * against its sampling rule (tests/gpu/standin/cupti.c, "PC sampling"), recomputed here
 * sample by sample, its module loads (once per module, inside its first launch, the cubin
 * naming the module's kernels, each PC record's cubinCrc that cubin's CRC), and its errors
 * against the header's: one "ok: ..." line a check, and exit 1 at the first that fails.
 * With PC_CLIENT_CUBIN_DIR set it writes each cubin it was given there, as
 * module-ID.cubin, for the fake nvdisasm. tests/integration/test_gpu_cupti_standin.py runs
 * it. Test-only.
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <cupti.h>
#include <cupti_pcsampling.h>

#include "cupti_client.h"
#include "nvcc_abi.h"

#define KERNEL_NS 37000 /* SONDE_STANDIN_KERNEL_US=37 */
#define NREASONS 5
#define NSLOTS 4
#define MAX_FNS 8
#define MAX_EVENTS 32
#define MAX_LOADS 8
#define MAGIC "SONDE-STANDIN-CUBIN 1\n" /* the stand-in cubins' first line */

static const uint32_t table[NREASONS] = {2, 5, 7, 11, 13}; /* the stand-in's, in its order */
static const char image[] = "sonde-standin pc_client module";
static const char *const names[] = {"_Z5alphav", "_Z4betav",	"_Z5gammav",
				    "_Z5deltav", "_Z7epsilonv", "_Z4zetav"};
enum { ALPHA, BETA, GAMMA, DELTA, EPSILON, ZETA };
/* The modules it loads: by cuModuleLoadData, one a context but M4, and the runtime's. */
enum { M1, M2, M3, M4, MRT, NMODS };

/* ---- the rule, recomputed one sample at a time ---------------------------------------- */

/* What the process's functions have been sampled for so far (process-wide). */
static struct {
	uint64_t ns, j;
	int index; /* the order of its first sampled run; -1: none yet */
} fns[MAX_FNS];
static int nsampled;

/* What a context should hold: the samples not yet read. */
struct model {
	uint32_t period;
	unsigned selected; /* bit i: table[i] */
	size_t max_pcs;
	bool pc[MAX_FNS][NSLOTS];
	uint64_t n[MAX_FNS][NSLOTS][NREASONS];
	size_t npcs;
	uint64_t total, dropped;
};

static void model_run(struct model *m, int fn, uint64_t ns)
{
	uint64_t n = ((fns[fn].ns + ns) >> m->period) - (fns[fn].ns >> m->period);

	if (fns[fn].index < 0)
		fns[fn].index = nsampled++;
	fns[fn].ns += ns;
	for (uint64_t k = 0; k < n; k++) {
		uint64_t j = fns[fn].j++;
		int slot = (int)(j % NSLOTS), reason = (int)(j / NSLOTS % NREASONS);

		m->total++;
		if (!(m->selected & 1u << reason))
			continue;
		if (!m->pc[fn][slot] && m->npcs >= m->max_pcs) {
			m->dropped++;
			continue;
		}
		if (!m->pc[fn][slot]) {
			m->pc[fn][slot] = true;
			m->npcs++;
		}
		m->n[fn][slot][reason]++;
	}
}

/* ---- the client ------------------------------------------------------------------------ */

/* One context as the client samples it. */
struct sampled {
	CUcontext ctx;
	bool configured;
	size_t nsel;
	CUpti_PCSamplingData data; /* the configured sampling data buffer */
	CUpti_PCSamplingPCData *pcs;
	struct model m;
	/* What came out of the last read (drain()), as the model says it. */
	uint64_t got[MAX_FNS][NSLOTS][NREASONS];
	uint64_t total, dropped;
	size_t records, calls;
};

/* The plan for the next context made: how the callback configures it. */
static struct {
	bool configure;
	uint32_t period;
	uint32_t sel[NREASONS];
	size_t nsel, collect, max_pcs;
} plan;

static struct sampled ctxs[4];
static int nctxs;
static struct {
	CUpti_CallbackId cbid;
	CUcontext ctx;
	pthread_t thread;
} events[MAX_EVENTS];
static int nevents;
static pthread_mutex_t events_lock = PTHREAD_MUTEX_INITIALIZER;
static char *fn_name[MAX_FNS]; /* the functionName pointer first seen for each */
static uint64_t fn_crc[MAX_FNS];

/* Each MODULE_LOADED, its cubin copied (the header: valid only in the callback). */
static struct {
	uint32_t id;
	CUcontext ctx;
	pthread_t thread;
	bool in_launch; /* told inside a launch call of its thread */
	char *cubin;
	size_t size;
	CUptiResult crc_r;
	uint64_t crc; /* cuptiGetCubinCrc's */
} loads[MAX_LOADS];
static int nloads;
static __thread bool launching;
static int mod_load[NMODS] = {-1, -1, -1, -1, -1}; /* each module's current cubin in loads[] */
static bool fn_ran[MAX_FNS];
static uint64_t fn_want_crc[MAX_FNS]; /* the CRC of the cubin its sampled launches ran from */

static struct sampled *sampled_of(CUcontext ctx)
{
	for (int i = nctxs - 1; i >= 0; i--)
		if (ctxs[i].ctx == ctx)
			return &ctxs[i];
	return NULL;
}

static CUptiResult get_data(CUcontext ctx, CUpti_PCSamplingData *d)
{
	CUpti_PCSamplingGetDataParams p = {
		.size = CUpti_PCSamplingGetDataParamsSize, .ctx = ctx, .pcSamplingData = d};

	return cuptiPCSamplingGetData(&p);
}

static CUptiResult disable(CUcontext ctx)
{
	CUpti_PCSamplingDisableParams p = {.size = CUpti_PCSamplingDisableParamsSize, .ctx = ctx};

	return cuptiPCSamplingDisable(&p);
}

static CUptiResult enable(CUcontext ctx)
{
	CUpti_PCSamplingEnableParams p = {.size = CUpti_PCSamplingEnableParamsSize, .ctx = ctx};

	return cuptiPCSamplingEnable(&p);
}

static CUptiResult set_attrs(CUcontext ctx, CUpti_PCSamplingConfigurationInfo *a, size_t n)
{
	CUpti_PCSamplingConfigurationInfoParams p = {
		.size = CUpti_PCSamplingConfigurationInfoParamsSize,
		.ctx = ctx,
		.numAttributes = n,
		.pPCSamplingConfigurationInfo = a,
	};

	return cuptiPCSamplingSetConfigurationAttribute(&p);
}

static uint32_t get_period(CUcontext ctx, CUptiResult *r)
{
	CUpti_PCSamplingConfigurationInfo a = {
		.attributeType = CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_SAMPLING_PERIOD};
	CUpti_PCSamplingConfigurationInfoParams p = {
		.size = CUpti_PCSamplingConfigurationInfoParamsSize,
		.ctx = ctx,
		.numAttributes = 1,
		.pPCSamplingConfigurationInfo = &a,
	};

	*r = cuptiPCSamplingGetConfigurationAttribute(&p);
	return a.attributeData.samplingPeriodData.samplingPeriod;
}

/* Records the PCs of one read into s->got, checking each record's fields. */
static void take(struct sampled *s, const CUpti_PCSamplingData *d)
{
	for (size_t i = 0; i < d->totalNumPcs; i++) {
		const CUpti_PCSamplingPCData *p = &d->pPcData[i];
		int fn = -1, slot = (int)(p->pcOffset / 0x10);

		for (int k = 0; k < MAX_FNS; k++)
			if (fns[k].index == (int)p->functionIndex && fns[k].index >= 0)
				fn = k;
		if (fn < 0 || !p->functionName || strcmp(p->functionName, names[fn]))
			check(false, "PC record %zu: function %u is %s, the one of that index", i,
			      p->functionIndex, p->functionName ? p->functionName : "(null)");
		if (!fn_name[fn]) {
			check(fn_ran[fn] && p->cubinCrc == fn_want_crc[fn] &&
				      p->functionIndex == (uint32_t)fns[fn].index,
			      "%s: function index %u (the order first sampled), cubinCrc %#llx, "
			      "cuptiGetCubinCrc's of the cubin of its module (%#llx), given at "
			      "MODULE_LOADED",
			      names[fn], p->functionIndex, (unsigned long long)p->cubinCrc,
			      (unsigned long long)fn_want_crc[fn]);
			fn_name[fn] = p->functionName;
			fn_crc[fn] = p->cubinCrc;
		}
		if (p->functionName != fn_name[fn] || p->cubinCrc != fn_crc[fn] ||
		    p->cubinCrc != fn_want_crc[fn])
			check(false,
			      "%s: one functionName pointer and cubinCrc in all its records, "
			      "cuptiGetCubinCrc's of its module's cubin",
			      names[fn]);
		if (p->size != sizeof(*p) || p->correlationId || p->pcOffset % 0x10 ||
		    slot >= NSLOTS || !p->stallReasonCount || p->stallReasonCount > s->nsel)
			check(false,
			      "PC record %zu of %s: size %zu, offset %#llx, %zu reasons, "
			      "correlation %u",
			      i, names[fn], p->size, (unsigned long long)p->pcOffset,
			      p->stallReasonCount, p->correlationId);
		for (size_t k = 0; k < p->stallReasonCount; k++) {
			int r = 0;

			while (r < NREASONS &&
			       table[r] != p->stallReason[k].pcSamplingStallReasonIndex)
				r++;
			if (r == NREASONS || !(s->m.selected & 1u << r) ||
			    !p->stallReason[k].samples || s->got[fn][slot][r])
				check(false,
				      "%s+%#llx: reason %u (%u samples) is a selected one, once",
				      names[fn], (unsigned long long)p->pcOffset,
				      p->stallReason[k].pcSamplingStallReasonIndex,
				      p->stallReason[k].samples);
			s->got[fn][slot][r] = p->stallReason[k].samples;
		}
		s->records++;
	}
}

/* Reads s's context as a profiler's thread does, while remainingNumPcs > 0, with a
 * buffer of `collect` PCs, into s->got. */
static CUptiResult drain(struct sampled *s, size_t collect)
{
	CUpti_PCSamplingPCData pcs[64];
	CUpti_PCSamplingStallReason reasons[64][NREASONS];
	CUpti_PCSamplingData d;
	CUptiResult r;

	memset(s->got, 0, sizeof(s->got));
	s->total = s->dropped = s->records = s->calls = 0;
	for (size_t i = 0; i < collect; i++)
		pcs[i] =
			(CUpti_PCSamplingPCData){.size = sizeof(pcs[i]), .stallReason = reasons[i]};
	do {
		d = (CUpti_PCSamplingData){
			.size = sizeof(d), .collectNumPcs = collect, .pPcData = pcs};
		r = get_data(s->ctx, &d);
		s->calls++;
		if (r == CUPTI_ERROR_OUT_OF_MEMORY) {
			/* The hardware buffer filled: the drops are told now, the PCs next. */
			check(d.hardwareBufferFull == 1 && !d.totalNumPcs,
			      "GetData: CUPTI_ERROR_OUT_OF_MEMORY, hardwareBufferFull, no PC, "
			      "%llu samples dropped",
			      (unsigned long long)d.droppedSamples);
			s->total += d.totalSamples;
			s->dropped += d.droppedSamples;
			continue;
		}
		if (r)
			return r;
		check(d.totalNumPcs <= collect && !d.hardwareBufferFull && !d.rangeId &&
			      !d.nonUsrKernelsTotalSamples,
		      "GetData: %zu PCs of %zu asked, %zu remaining, buffer not full, range 0",
		      d.totalNumPcs, collect, d.remainingNumPcs);
		s->total += d.totalSamples;
		s->dropped += d.droppedSamples;
		take(s, &d);
	} while (d.remainingNumPcs > 0);
	return CUPTI_SUCCESS;
}

/* Whether what s read is what its model held; then the model's pending samples are gone. */
static void compare(struct sampled *s, const char *when)
{
	bool same = s->total == s->m.total && s->dropped == s->m.dropped && s->records == s->m.npcs;

	for (int f = 0; f < MAX_FNS; f++)
		for (int k = 0; k < NSLOTS; k++)
			for (int r = 0; r < NREASONS; r++)
				same = same && s->got[f][k][r] == s->m.n[f][k][r];
	check(same,
	      "%s: %llu samples (%llu dropped) in %zu PC records, each PC's count per "
	      "stall reason as the rule says (expected %llu, %llu, %zu)",
	      when, (unsigned long long)s->total, (unsigned long long)s->dropped, s->records,
	      (unsigned long long)s->m.total, (unsigned long long)s->m.dropped, s->m.npcs);
	memset(s->m.pc, 0, sizeof(s->m.pc));
	memset(s->m.n, 0, sizeof(s->m.n));
	s->m.npcs = 0;
	s->m.total = s->m.dropped = 0;
}

/* Enables and configures s->ctx as the plan says, checking what the header promises on the
 * way (errors before Enable, the stall reason table, refused values). */
static void configure(struct sampled *s)
{
	size_t nreasons = 0;
	uint32_t idx[NREASONS];
	char *rnames[NREASONS], buf[NREASONS][CUPTI_STALL_REASON_STRING_SIZE];
	CUpti_PCSamplingGetNumStallReasonsParams num = {
		.size = CUpti_PCSamplingGetNumStallReasonsParamsSize,
		.ctx = s->ctx,
		.numStallReasons = &nreasons};
	CUpti_PCSamplingGetStallReasonsParams get = {
		.size = CUpti_PCSamplingGetStallReasonsParamsSize,
		.ctx = s->ctx,
		.numStallReasons = NREASONS,
		.stallReasonIndex = idx,
		.stallReasons = rnames};
	CUpti_PCSamplingStartParams start = {.size = CUpti_PCSamplingStartParamsSize,
					     .ctx = s->ctx};
	CUpti_PCSamplingData probe = {.size = sizeof(probe)};
	CUpti_PCSamplingConfigurationInfo bad = {0}, two[2] = {{0}};
	CUpti_PCSamplingConfigurationInfo a[8] = {{0}};
	uint32_t no_such = 3;
	CUptiResult r;
	bool same = true;

	check(get_data(s->ctx, &probe) == CUPTI_ERROR_INVALID_OPERATION,
	      "GetData before Enable: CUPTI_ERROR_INVALID_OPERATION");
	check(enable(s->ctx) == CUPTI_SUCCESS, "cuptiPCSamplingEnable in CONTEXT_CREATED");
	check(enable(s->ctx) == CUPTI_ERROR_INVALID_OPERATION,
	      "a second Enable of the context: CUPTI_ERROR_INVALID_OPERATION");
	r = cuptiPCSamplingGetNumStallReasons(&num);
	check(r == CUPTI_SUCCESS && nreasons == NREASONS, "GetNumStallReasons: %zu", nreasons);
	for (int i = 0; i < NREASONS; i++)
		rnames[i] = buf[i];
	r = cuptiPCSamplingGetStallReasons(&get);
	for (int i = 0; i < NREASONS; i++)
		same = same && idx[i] == table[i] &&
		       !strncmp(rnames[i], "smsp__pcsamp_warps_issue_stalled_", 33);
	check(r == CUPTI_SUCCESS && same,
	      "GetStallReasons: indices 2 5 7 11 13, CUPTI's names (%s ... %s)", rnames[0],
	      rnames[4]);
	check(get_period(s->ctx, &r) == 10 && r == CUPTI_SUCCESS, "the sampling period is 10 "
								  "until set");

	bad.attributeType = CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_SAMPLING_PERIOD;
	bad.attributeData.samplingPeriodData.samplingPeriod = 4;
	check(set_attrs(s->ctx, &bad, 1) == CUPTI_ERROR_INVALID_PARAMETER &&
		      bad.attributeStatus == CUPTI_ERROR_INVALID_PARAMETER,
	      "a sampling period of 4: CUPTI_ERROR_INVALID_PARAMETER, in its status too");
	bad.attributeData.samplingPeriodData.samplingPeriod = 32;
	check(set_attrs(s->ctx, &bad, 1) == CUPTI_ERROR_INVALID_PARAMETER,
	      "a sampling period of 32: CUPTI_ERROR_INVALID_PARAMETER");
	two[0].attributeType = CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_SAMPLING_PERIOD;
	two[0].attributeData.samplingPeriodData.samplingPeriod = 6;
	two[1].attributeType = CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_STALL_REASON;
	two[1].attributeData.stallReasonData.stallReasonCount = 1;
	two[1].attributeData.stallReasonData.pStallReasonIndex = &no_such;
	check(set_attrs(s->ctx, two, 2) == CUPTI_ERROR_INVALID_PARAMETER &&
		      !two[0].attributeStatus &&
		      two[1].attributeStatus == CUPTI_ERROR_INVALID_PARAMETER &&
		      get_period(s->ctx, &r) == 10,
	      "stall reason 3 (not in the table) refused, and the valid period beside it not set");
	bad = (CUpti_PCSamplingConfigurationInfo){
		.attributeType = CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_COLLECTION_MODE};
	bad.attributeData.collectionModeData.collectionMode =
		CUPTI_PC_SAMPLING_COLLECTION_MODE_KERNEL_SERIALIZED;
	check(set_attrs(s->ctx, &bad, 1) == CUPTI_ERROR_NOT_SUPPORTED,
	      "KERNEL_SERIALIZED mode: CUPTI_ERROR_NOT_SUPPORTED (the stand-in is continuous)");
	bad = (CUpti_PCSamplingConfigurationInfo){
		.attributeType =
			CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_ENABLE_START_STOP_CONTROL};
	bad.attributeData.enableStartStopControlData.enableStartStopControl = 1;
	check(set_attrs(s->ctx, &bad, 1) == CUPTI_ERROR_NOT_SUPPORTED,
	      "start/stop control: CUPTI_ERROR_NOT_SUPPORTED");
	bad = (CUpti_PCSamplingConfigurationInfo){
		.attributeType = CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_SAMPLING_DATA_BUFFER};
	probe.size = 8;
	bad.attributeData.samplingDataBufferData.samplingDataBuffer = &probe;
	check(set_attrs(s->ctx, &bad, 1) == CUPTI_ERROR_INVALID_PARAMETER,
	      "a sampling data buffer whose size is 8: CUPTI_ERROR_INVALID_PARAMETER");
	check(cuptiPCSamplingStart(&start) == CUPTI_ERROR_INVALID_OPERATION,
	      "Start without start/stop control: CUPTI_ERROR_INVALID_OPERATION");

	/* As the sample configures it. */
	s->nsel = plan.nsel;
	s->pcs = calloc(plan.collect, sizeof(*s->pcs));
	for (size_t i = 0; i < plan.collect; i++)
		s->pcs[i].stallReason = calloc(plan.nsel, sizeof(CUpti_PCSamplingStallReason));
	s->data = (CUpti_PCSamplingData){
		.size = sizeof(s->data), .collectNumPcs = plan.collect, .pPcData = s->pcs};
	a[0].attributeType = CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_SAMPLING_PERIOD;
	a[0].attributeData.samplingPeriodData.samplingPeriod = plan.period;
	a[1].attributeType = CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_STALL_REASON;
	a[1].attributeData.stallReasonData.stallReasonCount = plan.nsel;
	a[1].attributeData.stallReasonData.pStallReasonIndex = plan.sel;
	a[2].attributeType = CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_SCRATCH_BUFFER_SIZE;
	a[2].attributeData.scratchBufferSizeData.scratchBufferSize = 1 << 20;
	a[3].attributeType = CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_HARDWARE_BUFFER_SIZE;
	a[3].attributeData.hardwareBufferSizeData.hardwareBufferSize = 512 << 20;
	a[4].attributeType = CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_COLLECTION_MODE;
	a[4].attributeData.collectionModeData.collectionMode =
		CUPTI_PC_SAMPLING_COLLECTION_MODE_CONTINUOUS;
	a[5].attributeType = CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_ENABLE_START_STOP_CONTROL;
	a[5].attributeData.enableStartStopControlData.enableStartStopControl = 0;
	a[6].attributeType = CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_OUTPUT_DATA_FORMAT;
	a[6].attributeData.outputDataFormatData.outputDataFormat =
		CUPTI_PC_SAMPLING_OUTPUT_DATA_FORMAT_PARSED;
	a[7].attributeType = CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_SAMPLING_DATA_BUFFER;
	a[7].attributeData.samplingDataBufferData.samplingDataBuffer = &s->data;
	r = set_attrs(s->ctx, a, 8);
	same = true;
	for (int i = 0; i < 8; i++)
		same = same && a[i].attributeStatus == CUPTI_SUCCESS;
	check(r == CUPTI_SUCCESS && same, "the configuration of NVIDIA's sample is taken (%d)", r);
	check(get_period(s->ctx, &r) == plan.period, "the period reads back as %u", plan.period);
	s->m.period = plan.period;
	s->m.selected = 0;
	for (size_t i = 0; i < plan.nsel; i++)
		for (int k = 0; k < NREASONS; k++)
			if (table[k] == plan.sel[i])
				s->m.selected |= 1u << k;
	s->m.max_pcs = plan.max_pcs;
	s->configured = true;
}

/* A module loaded: its cubin and CRC kept, as a profiler keeps them for a disassembler,
 * and written to PC_CLIENT_CUBIN_DIR when set. */
static void module_loaded(const CUpti_ResourceData *d)
{
	const CUpti_ModuleResourceData *m = d->resourceDescriptor;
	CUpti_GetCubinCrcParams p = {.size = CUpti_GetCubinCrcParamsSize};
	const char *dir = getenv("PC_CLIENT_CUBIN_DIR");
	typeof(loads[0]) *l = &loads[nloads];
	char path[4096];
	FILE *f;

	if (nloads == MAX_LOADS || !m || !m->pCubin || !m->cubinSize)
		check(false, "MODULE_LOADED %d: a CUpti_ModuleResourceData with a cubin", nloads);
	l->id = m->moduleId;
	l->ctx = d->context;
	l->thread = pthread_self();
	l->in_launch = launching;
	l->size = m->cubinSize;
	l->cubin = malloc(l->size + 1);
	if (!l->cubin)
		check(false, "MODULE_LOADED: %zu bytes for a copy of the cubin", l->size);
	memcpy(l->cubin, m->pCubin, l->size);
	l->cubin[l->size] = 0;
	p.cubinSize = m->cubinSize;
	p.cubin = m->pCubin;
	l->crc_r = cuptiGetCubinCrc(&p);
	l->crc = p.cubinCrc;
	if (dir && *dir) {
		snprintf(path, sizeof(path), "%s/module-%u.cubin", dir, l->id);
		f = fopen(path, "wb");
		if (!f || fwrite(l->cubin, 1, l->size, f) != l->size || fclose(f))
			check(false, "can write the cubin to %s", path);
	}
	nloads++;
}

/* The subscriber: what a profiler's injection library does at a context's birth and
 * death, and at a module's load. */
static void CUPTIAPI on_callback(void *userdata, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
				 const void *cbdata)
{
	const CUpti_ResourceData *d = cbdata;
	struct sampled *s;

	if (domain != CUPTI_CB_DOMAIN_RESOURCE)
		return;
	pthread_mutex_lock(&events_lock);
	if (nevents < MAX_EVENTS)
		events[nevents++] = (typeof(events[0])){cbid, d->context, pthread_self()};
	if (cbid == CUPTI_CBID_RESOURCE_MODULE_LOADED)
		module_loaded(d);
	pthread_mutex_unlock(&events_lock);
	if (cbid == CUPTI_CBID_RESOURCE_CONTEXT_CREATED && plan.configure) {
		s = &ctxs[nctxs++];
		memset(s, 0, sizeof(*s));
		s->ctx = d->context;
		configure(s);
	} else if (cbid == CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING &&
		   (s = sampled_of(d->context)) && s->configured) {
		check(drain(s, 16) == CUPTI_SUCCESS, "GetData in CONTEXT_DESTROY_STARTING");
		compare(s, "the context's last read, as it goes");
		check(disable(s->ctx) == CUPTI_SUCCESS, "Disable in CONTEXT_DESTROY_STARTING");
		s->configured = false;
	}
}

/* s on one line, each newline written \n; in a static buffer. */
static const char *oneline(const char *s)
{
	static char buf[512];
	size_t n = 0;

	for (; *s && n + 3 < sizeof(buf); s++) {
		if (*s == '\n') {
			buf[n++] = '\\';
			buf[n++] = 'n';
		} else {
			buf[n++] = *s;
		}
	}
	buf[n] = 0;
	return buf;
}

/* Checks the module loads a launch of fn (or a runtime kernel: -1) made, the first being
 * loads[before]: when want is set, one MODULE_LOADED of module mod, told inside the launch,
 * on the launching thread, in its context, under an id of its own, its cubin want (the
 * magic line, then the module's kernels); else none. */
static void loaded(int before, int fn, int mod, const char *want)
{
	static const char *const mods[NMODS] = {"M1", "M2", "M3", "M4", "the runtime's"};
	const char *what = fn >= 0 ? names[fn] : "the runtime kernel";
	bool fresh = true;
	CUcontext ctx = NULL;

	if (!want) {
		if (nloads != before)
			check(false, "%s's launch: no MODULE_LOADED (module %s is loaded): %d came",
			      what, mods[mod], nloads - before);
		return;
	}
	cuCtxGetCurrent(&ctx);
	for (int i = 0; i < before; i++)
		fresh = fresh && loads[i].id != loads[before].id;
	check(nloads == before + 1 && loads[before].in_launch &&
		      pthread_equal(loads[before].thread, pthread_self()) &&
		      loads[before].ctx == ctx && fresh && !loads[before].crc_r &&
		      loads[before].size == strlen(want) && !strcmp(loads[before].cubin, want),
	      "%s's launch: MODULE_LOADED of module %s, once, inside the launch, on its thread, in "
	      "its context, a new module id (%u), cubin \"%s\"",
	      what, mods[mod], nloads > before ? loads[before].id : 0,
	      oneline(nloads > before ? loads[before].cubin : ""));
	mod_load[mod] = before;
}

/* Launches f, function fn of module mod, checking the module loads (loaded()); m: the
 * model of the context's samples, NULL when the context is not sampled. */
static void launch(CUfunction f, int fn, int mod, const char *want, struct model *m)
{
	int before = nloads;

	launching = true;
	cu(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, NULL, NULL, NULL), "cuLaunchKernel");
	launching = false;
	loaded(before, fn, mod, want);
	if (m) {
		if (mod_load[mod] < 0)
			check(false, "%s: its module was loaded before it ran", names[fn]);
		fn_ran[fn] = true;
		fn_want_crc[fn] = loads[mod_load[mod]].crc;
		model_run(m, fn, KERNEL_NS);
	}
}

/* A host stub of a kernel registered as nvcc's module constructor does, and one more in
 * its fat binary that is never launched: the module loads with both. */
void rt_one(void) __asm__("_Z6rt_onev");
void rt_one(void)
{
}

void rt_two(void) __asm__("_Z6rt_twov");
void rt_two(void)
{
}

__attribute__((constructor)) static void register_kernels(void)
{
	static const struct {
		int magic, version;
		const void *data, *unused;
	} wrapper = {0x466243b1, 1, "sonde-standin pc_client fatbin", NULL};
	void **h = __cudaRegisterFatBinary((void *)&wrapper);

	__cudaRegisterFunction(h, (const char *)rt_one, (char *)"_Z6rt_onev", "_Z6rt_onev", -1,
			       NULL, NULL, NULL, NULL, NULL);
	__cudaRegisterFunction(h, (const char *)rt_two, (char *)"_Z6rt_twov", "_Z6rt_twov", -1,
			       NULL, NULL, NULL, NULL, NULL);
	__cudaRegisterFatBinaryEnd(h);
}

static int events_of(CUpti_CallbackId cbid, CUcontext ctx)
{
	int n = 0;

	pthread_mutex_lock(&events_lock);
	for (int i = 0; i < nevents; i++)
		n += events[i].cbid == cbid && events[i].ctx == ctx;
	pthread_mutex_unlock(&events_lock);
	return n;
}

/* A thread that retains the primary context while another is told of its making. */
static struct {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool done;
	CUresult r;
} racer = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false, CUDA_SUCCESS};

static void *retain_primary(void *arg)
{
	CUcontext c;
	CUresult r = cuDevicePrimaryCtxRetain(&c, 0);

	pthread_mutex_lock(&racer.lock);
	racer.r = r;
	racer.done = true;
	pthread_cond_broadcast(&racer.cond);
	pthread_mutex_unlock(&racer.lock);
	return NULL;
}

static pthread_t racer_thread;
static bool racer_waited;

/* Subscribes only to see the runtime make the primary context on a fresh thread: checks
 * that a second thread retaining it meanwhile waits for the callback to end. */
static void CUPTIAPI on_runtime_ctx(void *userdata, CUpti_CallbackDomain domain,
				    CUpti_CallbackId cbid, const void *cbdata)
{
	struct timespec until;

	on_callback(userdata, domain, cbid, cbdata);
	if (domain != CUPTI_CB_DOMAIN_RESOURCE || cbid != CUPTI_CBID_RESOURCE_CONTEXT_CREATED)
		return;
	pthread_create(&racer_thread, NULL, retain_primary, NULL);
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_nsec += 200 * 1000000L;
	if (until.tv_nsec >= 1000000000L) {
		until.tv_sec++;
		until.tv_nsec -= 1000000000L;
	}
	pthread_mutex_lock(&racer.lock);
	while (!racer.done && !pthread_cond_timedwait(&racer.cond, &racer.lock, &until))
		;
	racer_waited = !racer.done;
	pthread_mutex_unlock(&racer.lock);
}

static void *runtime_thread(void *arg)
{
	*(cudaError_t *)arg = cudaFree(NULL);
	return NULL;
}

int main(void)
{
	CUpti_SubscriberHandle sub;
	CUcontext primary, other, third;
	CUfunction f[3], g, h;
	CUmodule mod;
	CUdevice dev;
	CUpti_PCSamplingData d;
	CUpti_PCSamplingGetDataParams gp = {.size = CUpti_PCSamplingGetDataParamsSize - 1};
	CUpti_PCSamplingEnableParams ep = {.size = CUpti_PCSamplingEnableParamsSize,
					   .ctx = (CUcontext)&sub};
	CUpti_PCSamplingPCData pcs[16];
	CUpti_PCSamplingStallReason rs[16][NREASONS];
	struct sampled *s1, *s2, *s3;
	int before;
	CUptiResult r;
	cudaError_t ce;
	pthread_t t;
	uint64_t sum;

	setenv("SONDE_STANDIN_KERNEL_US", "37", 1);
	setenv("SONDE_STANDIN_PC_MAX_PCS", "4096", 1);
	for (int i = 0; i < MAX_FNS; i++)
		fns[i].index = -1;

	check(cuptiPCSamplingGetData(NULL) == CUPTI_ERROR_INVALID_PARAMETER,
	      "GetData(NULL): CUPTI_ERROR_INVALID_PARAMETER");
	check(cuptiPCSamplingGetData(&gp) == CUPTI_ERROR_INVALID_PARAMETER,
	      "GetData with a size 1 short of CUpti_PCSamplingGetDataParamsSize: "
	      "CUPTI_ERROR_INVALID_PARAMETER");
	check(cuptiPCSamplingEnable(&ep) == CUPTI_ERROR_INVALID_PARAMETER,
	      "Enable of something not a context: CUPTI_ERROR_INVALID_PARAMETER");

	check(cuptiSubscribe(&sub, on_callback, NULL) == CUPTI_SUCCESS, "cuptiSubscribe");
	check(cuptiEnableCallback(1, sub, CUPTI_CB_DOMAIN_RESOURCE,
				  CUPTI_CBID_RESOURCE_CONTEXT_CREATED) == CUPTI_SUCCESS &&
		      cuptiEnableCallback(1, sub, CUPTI_CB_DOMAIN_RESOURCE,
					  CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING) ==
			      CUPTI_SUCCESS &&
		      cuptiEnableCallback(1, sub, CUPTI_CB_DOMAIN_RESOURCE,
					  CUPTI_CBID_RESOURCE_MODULE_LOADED) == CUPTI_SUCCESS,
	      "the resource domain's context (and module) callbacks can be enabled");
	check(cuptiEnableCallback(1, sub, CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_SIZE) ==
		      CUPTI_ERROR_INVALID_PARAMETER,
	      "a resource callback id past the last: CUPTI_ERROR_INVALID_PARAMETER");

	/* The primary context: period 10, three of the five reasons, 5 PCs a read. */
	plan.configure = true;
	plan.period = 10;
	plan.sel[0] = 5;
	plan.sel[1] = 11;
	plan.sel[2] = 13;
	plan.nsel = 3;
	plan.collect = 5;
	plan.max_pcs = 4096;
	cu(cuInit(0), "cuInit");
	cu(cuDeviceGet(&dev, 0), "cuDeviceGet");
	cu(cuDevicePrimaryCtxRetain(&primary, dev), "cuDevicePrimaryCtxRetain");
	check(events_of(CUPTI_CBID_RESOURCE_CONTEXT_CREATED, primary) == 1 && nctxs == 1,
	      "CONTEXT_CREATED for the primary context at its first retain");
	s1 = &ctxs[0];
	cu(cuCtxSetCurrent(primary), "cuCtxSetCurrent");
	cu(cuModuleLoadData(&mod, image), "cuModuleLoadData");
	for (int i = 0; i < 3; i++)
		cu(cuModuleGetFunction(&f[i], mod, names[i]), "cuModuleGetFunction");
	/* Loaded at the first launch of one of its kernels, with the three looked up. */
	launch(f[ALPHA], ALPHA, M1, MAGIC "_Z5alphav\n_Z4betav\n_Z5gammav\n", &s1->m);
	for (int i = 0; i < 2; i++)
		launch(f[ALPHA], ALPHA, M1, NULL, &s1->m);
	launch(f[BETA], BETA, M1, NULL, &s1->m);
	launch(f[BETA], BETA, M1, NULL, &s1->m);
	check(s1->m.total == 108 + 72, "the rule: alpha 3 x 37 us at 2^10 = 108 samples, beta 2 x "
				       "37 us = 72");
	r = drain(s1, 5);
	check(r == CUPTI_SUCCESS && s1->calls == 2,
	      "GetData read 8 PCs 5 at a time: %zu calls (%d)", s1->calls, r);
	compare(s1, "primary, alpha x3 and beta x2");
	r = drain(s1, 5);
	check(r == CUPTI_SUCCESS && s1->calls == 1 && !s1->total && !s1->records,
	      "nothing more to read: no PC, no sample");
	d = (CUpti_PCSamplingData){.size = 8, .collectNumPcs = 1, .pPcData = pcs};
	check(get_data(primary, &d) == CUPTI_ERROR_INVALID_PARAMETER,
	      "GetData into a CUpti_PCSamplingData whose size is 8: CUPTI_ERROR_INVALID_PARAMETER");

	/* A created context, at most 3 PCs pending: the fourth PC's samples are dropped. */
	setenv("SONDE_STANDIN_PC_MAX_PCS", "3", 1);
	plan.nsel = 5;
	for (int i = 0; i < NREASONS; i++)
		plan.sel[i] = table[i];
	plan.collect = 16;
	plan.max_pcs = 3;
	cu(cuCtxCreate(&other, NULL, 0, dev), "cuCtxCreate");
	check(events_of(CUPTI_CBID_RESOURCE_CONTEXT_CREATED, other) == 1 && nctxs == 2,
	      "CONTEXT_CREATED for a created context");
	s2 = &ctxs[1];
	cu(cuModuleLoadData(&mod, image), "cuModuleLoadData");
	cu(cuModuleGetFunction(&g, mod, names[GAMMA]), "cuModuleGetFunction");
	launch(g, GAMMA, M2, MAGIC "_Z5gammav\n", &s2->m);
	check(s2->m.total == 36 && s2->m.dropped == 9, "the rule: gamma 37 us = 36 samples, the 9 "
						       "at PC 0x30 dropped");
	for (int i = 0; i < 16; i++)
		pcs[i] = (CUpti_PCSamplingPCData){.size = sizeof(pcs[i]), .stallReason = rs[i]};
	d = (CUpti_PCSamplingData){.size = sizeof(d), .collectNumPcs = 16, .pPcData = pcs};
	r = get_data(other, &d);
	check(r == CUPTI_ERROR_OUT_OF_MEMORY && d.hardwareBufferFull == 1 && d.totalNumPcs == 0 &&
		      d.droppedSamples == 9 && d.totalSamples == 36 && d.remainingNumPcs == 3,
	      "GetData after the drop: CUPTI_ERROR_OUT_OF_MEMORY (%d), hardwareBufferFull %u, "
	      "%zu PCs, %llu of %llu samples dropped, %zu PCs left",
	      r, d.hardwareBufferFull, d.totalNumPcs, (unsigned long long)d.droppedSamples,
	      (unsigned long long)d.totalSamples, d.remainingNumPcs);
	s2->m.total = s2->m.dropped = 0; /* told by the failed call */
	check(drain(s2, 16) == CUPTI_SUCCESS, "the next GetData succeeds");
	compare(s2, "the created context's 3 PCs, after the drop");
	launch(g, GAMMA, M2, NULL, &s2->m);
	cu(cuCtxDestroy(other), "cuCtxDestroy");
	check(events_of(CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING, other) == 1 &&
		      !s2->configured,
	      "CONTEXT_DESTROY_STARTING for it at cuCtxDestroy, read and disabled there");
	d = (CUpti_PCSamplingData){.size = sizeof(d), .collectNumPcs = 16, .pPcData = pcs};
	check(get_data(other, &d) == CUPTI_ERROR_INVALID_PARAMETER &&
		      enable(other) == CUPTI_ERROR_INVALID_PARAMETER,
	      "GetData and Enable of a destroyed context: CUPTI_ERROR_INVALID_PARAMETER");

	/* Disable writes what is pending into the configured buffer. */
	cu(cuCtxSetCurrent(primary), "cuCtxSetCurrent");
	launch(f[ALPHA], ALPHA, M1, NULL, &s1->m);
	check(disable(primary) == CUPTI_SUCCESS, "Disable of the primary context");
	memset(s1->got, 0, sizeof(s1->got));
	s1->records = 0;
	take(s1, &s1->data);
	s1->total = s1->data.totalSamples;
	s1->dropped = s1->data.droppedSamples;
	check(s1->data.remainingNumPcs == 0, "Disable wrote into the configured buffer");
	s1->configured = false;
	compare(s1, "what Disable wrote");
	check(get_data(primary, &d) == CUPTI_ERROR_INVALID_OPERATION,
	      "GetData after Disable: CUPTI_ERROR_INVALID_OPERATION");
	check(enable(primary) == CUPTI_SUCCESS && get_period(primary, &r) == 10,
	      "Enable again: a fresh configuration (period 10)");
	launch(f[ALPHA], ALPHA, M1, NULL, NULL); /* no sampling data buffer yet: not sampled */
	d = (CUpti_PCSamplingData){.size = sizeof(d), .collectNumPcs = 16, .pPcData = pcs};
	check(get_data(primary, &d) == CUPTI_SUCCESS && !d.totalNumPcs && !d.totalSamples,
	      "no sampling data buffer configured: no sample");
	check(disable(primary) == CUPTI_SUCCESS, "Disable");
	cu(cuDevicePrimaryCtxRelease(dev), "cuDevicePrimaryCtxRelease");
	check(events_of(CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING, primary) == 1,
	      "CONTEXT_DESTROY_STARTING for the primary context at its last release");

	/* A module whose kernels are looked up one at a time: a kernel looked up after the
	 * module loaded is in a second load of it (a new id, a cubin with both), and each
	 * kernel's records carry the CRC of the cubin its launches ran from. */
	setenv("SONDE_STANDIN_PC_MAX_PCS", "4096", 1);
	plan.configure = true;
	plan.collect = 16;
	plan.max_pcs = 4096;
	cu(cuCtxCreate(&third, NULL, 0, dev), "cuCtxCreate");
	check(nctxs == 3, "CONTEXT_CREATED for a third context");
	s3 = &ctxs[2];
	cu(cuModuleLoadData(&mod, image), "cuModuleLoadData");
	cu(cuModuleGetFunction(&g, mod, names[DELTA]), "cuModuleGetFunction");
	launch(g, DELTA, M3, MAGIC "_Z5deltav\n", &s3->m);
	cu(cuModuleGetFunction(&h, mod, names[EPSILON]), "cuModuleGetFunction");
	launch(h, EPSILON, M3, MAGIC "_Z5deltav\n_Z7epsilonv\n", &s3->m);
	launch(h, EPSILON, M3, NULL, &s3->m);
	check(drain(s3, 16) == CUPTI_SUCCESS, "GetData of the third context");
	compare(s3, "delta once and epsilon twice, across two loads of their module");
	check(fn_crc[DELTA] == loads[nloads - 2].crc && fn_crc[EPSILON] == loads[nloads - 1].crc &&
		      fn_crc[DELTA] != fn_crc[EPSILON],
	      "delta's records carry the first load's cubin's CRC, epsilon's the second's");
	cu(cuCtxDestroy(third), "cuCtxDestroy");

	/* The runtime makes the primary context again on a thread of its own; a second
	 * thread retaining it meanwhile waits until the callback returns. */
	plan.configure = false;
	cuptiUnsubscribe(sub);
	check(cuptiSubscribe(&sub, on_runtime_ctx, NULL) == CUPTI_SUCCESS &&
		      cuptiEnableDomain(1, sub, CUPTI_CB_DOMAIN_RESOURCE) == CUPTI_SUCCESS,
	      "subscribed again, the whole resource domain enabled");
	pthread_create(&t, NULL, runtime_thread, &ce);
	pthread_join(t, NULL);
	pthread_join(racer_thread, NULL);
	check(ce == cudaSuccess && events_of(CUPTI_CBID_RESOURCE_CONTEXT_CREATED, primary) == 2 &&
		      pthread_equal(events[nevents - 1].thread, t),
	      "the runtime's first call on a thread made the primary context: CONTEXT_CREATED "
	      "on that thread");
	check(racer_waited && racer.r == CUDA_SUCCESS,
	      "a thread retaining the primary context meanwhile waited for the callback");

	/* MODULE_LOADED disabled: a module loads at its first launch all the same, untold,
	 * and is not told later. */
	cu(cuCtxSetCurrent(primary), "cuCtxSetCurrent");
	check(cuptiEnableCallback(0, sub, CUPTI_CB_DOMAIN_RESOURCE,
				  CUPTI_CBID_RESOURCE_MODULE_LOADED) == CUPTI_SUCCESS,
	      "MODULE_LOADED disabled");
	cu(cuModuleLoadData(&mod, image), "cuModuleLoadData");
	cu(cuModuleGetFunction(&g, mod, names[ZETA]), "cuModuleGetFunction");
	before = nloads;
	launch(g, ZETA, M4, NULL, NULL);
	check(cuptiEnableCallback(1, sub, CUPTI_CB_DOMAIN_RESOURCE,
				  CUPTI_CBID_RESOURCE_MODULE_LOADED) == CUPTI_SUCCESS,
	      "MODULE_LOADED enabled again");
	launch(g, ZETA, M4, NULL, NULL);
	check(nloads == before, "a module loaded while MODULE_LOADED was disabled is never told");

	/* The runtime: the module of a registered fat binary loads at the first launch of one
	 * of its kernels, with every kernel registered in it. */
	before = nloads;
	launching = true;
	ce = cudaLaunchKernel((const void *)rt_one, (dim3){1, 1, 1}, (dim3){32, 1, 1}, NULL, 0,
			      NULL);
	launching = false;
	check(ce == cudaSuccess, "cudaLaunchKernel of a registered kernel");
	loaded(before, -1, MRT, MAGIC "_Z6rt_onev\n_Z6rt_twov\n");
	before = nloads;
	launching = true;
	ce = cudaLaunchKernel((const void *)rt_two, (dim3){1, 1, 1}, (dim3){32, 1, 1}, NULL, 0,
			      NULL);
	launching = false;
	check(ce == cudaSuccess, "cudaLaunchKernel of the other kernel of its fat binary");
	loaded(before, -1, MRT, NULL);

	sum = 0;
	for (int i = 0; i < nevents; i++)
		sum += events[i].cbid != CUPTI_CBID_RESOURCE_CONTEXT_CREATED &&
		       events[i].cbid != CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING &&
		       events[i].cbid != CUPTI_CBID_RESOURCE_MODULE_LOADED;
	check(nevents == 12 && nloads == 5 && !sum,
	      "12 resource callbacks in all: 7 of contexts, 5 of module loads (%d), no other "
	      "(%d events)",
	      nloads, nevents);
	printf("pc_client: %d checks passed\n", checks);
	return 0;
}
