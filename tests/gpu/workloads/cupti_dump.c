/*
 * cupti_dump.c: an injection library (CUDA_INJECTION64_PATH) that asks CUPTI for what a
 * profiler asks -- the runtime and driver launch callbacks, kernel activity records -- and
 * at exit writes what it was told, one JSON object a line, to $CUPTI_DUMP_OUT: the tests'
 * window on the CUPTI stand-in (tests/gpu/standin/cupti.c), and later on the real one.
 *
 *   {"type":"init","subscribe":0,"second_subscribe":39,"enable":0}  (CUptiResult codes)
 *   {"type":"api","domain":1|2,"cbid":N,"name":"cuLaunchKernel","site":"enter"|"exit",
 *    "symbol":"...","correlation":N,"ret":N}
 *   {"type":"kernel","kind":10,"name":"...","start":ns,"end":ns,"device":N,"context":N,
 *    "stream":N,"grid":[x,y,z],"block":[x,y,z],"correlation":N}
 *   {"type":"end","dropped":N,"buffers":N}
 *
 * CUPTI_DUMP_BUFFERS and CUPTI_DUMP_BUF_BYTES bound the buffers it hands CUPTI.
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cupti.h>

#include "cupti/sonde_cupti.h" /* the launch callbacks Sonde's library enables */

#define MAX_LINES 200000
#define BUF_SIZE (64 << 10) /* records come back in several buffers */

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static char **lines;
static size_t nlines;
static uint64_t buffers;
static CUptiResult subscribe_r, second_r, enable_r;

static void add(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void add(const char *fmt, ...)
{
	va_list ap;
	char *s = NULL;

	va_start(ap, fmt);
	if (vasprintf(&s, fmt, ap) < 0)
		s = NULL;
	va_end(ap);
	pthread_mutex_lock(&lock);
	if (s && nlines < MAX_LINES)
		lines[nlines++] = s;
	else
		free(s);
	pthread_mutex_unlock(&lock);
}

static void CUPTIAPI on_callback(void *userdata, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
				 const void *cbdata)
{
	const CUpti_CallbackData *d = cbdata;

	add("{\"type\":\"api\",\"domain\":%d,\"cbid\":%u,\"name\":\"%s\",\"site\":\"%s\","
	    "\"symbol\":\"%s\",\"correlation\":%u,\"ret\":%d}",
	    (int)domain, (unsigned)cbid, d->functionName,
	    d->callbackSite == CUPTI_API_ENTER ? "enter" : "exit",
	    d->symbolName ? d->symbolName : "", d->correlationId,
	    d->callbackSite == CUPTI_API_EXIT && d->functionReturnValue
		    ? *(const int *)d->functionReturnValue
		    : 0);
}

/* CUPTI_DUMP_BUFFERS=N hands out N buffers of CUPTI_DUMP_BUF_BYTES (64 KiB) at most,
 * then none: what does not fit must be counted as dropped. */
static void CUPTIAPI on_request(uint8_t **buffer, size_t *size, size_t *max)
{
	static long handed;
	const char *n = getenv("CUPTI_DUMP_BUFFERS"), *b = getenv("CUPTI_DUMP_BUF_BYTES");
	size_t bytes = b ? strtoul(b, NULL, 10) : BUF_SIZE;

	*buffer = NULL;
	*size = 0;
	*max = 0;
	if (n && __atomic_fetch_add(&handed, 1, __ATOMIC_RELAXED) >= atol(n))
		return;
	*buffer = aligned_alloc(8, (bytes + 7) / 8 * 8);
	*size = *buffer ? bytes : 0;
}

static void CUPTIAPI on_complete(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size,
				 size_t valid)
{
	CUpti_Activity *rec = NULL;

	while (cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
		const CUpti_ActivityKernel10 *k = (const CUpti_ActivityKernel10 *)rec;

		if (rec->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL &&
		    rec->kind != CUPTI_ACTIVITY_KIND_KERNEL)
			continue;
		add("{\"type\":\"kernel\",\"kind\":%d,\"name\":\"%s\",\"start\":%llu,\"end\":%llu,"
		    "\"device\":%u,\"context\":%u,\"stream\":%u,\"grid\":[%d,%d,%d],"
		    "\"block\":[%d,%d,%d],\"correlation\":%u}",
		    (int)rec->kind, k->name ? k->name : "", (unsigned long long)k->start,
		    (unsigned long long)k->end, k->deviceId, k->contextId, k->streamId, k->gridX,
		    k->gridY, k->gridZ, k->blockX, k->blockY, k->blockZ, k->correlationId);
	}
	pthread_mutex_lock(&lock);
	buffers++;
	pthread_mutex_unlock(&lock);
	free(buffer);
}

static void at_exit(void)
{
	const char *path = getenv("CUPTI_DUMP_OUT");
	size_t dropped = 0;
	FILE *f;

	cuptiActivityFlushAll(1);
	cuptiActivityGetNumDroppedRecords(NULL, 0, &dropped);
	f = path ? fopen(path, "w") : NULL;
	if (!f)
		return;
	fprintf(f, "{\"type\":\"init\",\"subscribe\":%d,\"second_subscribe\":%d,\"enable\":%d}\n",
		(int)subscribe_r, (int)second_r, (int)enable_r);
	pthread_mutex_lock(&lock);
	for (size_t i = 0; i < nlines; i++)
		fprintf(f, "%s\n", lines[i]);
	fprintf(f, "{\"type\":\"end\",\"dropped\":%zu,\"buffers\":%llu}\n", dropped,
		(unsigned long long)buffers);
	pthread_mutex_unlock(&lock);
	fclose(f);
}

int InitializeInjection(void)
{
	static const CUpti_CallbackId rt[] = {SONDE_CUPTI_RUNTIME_LAUNCHES};
	static const CUpti_CallbackId drv[] = {SONDE_CUPTI_DRIVER_LAUNCHES};
	CUpti_SubscriberHandle sub, other;

	lines = calloc(MAX_LINES, sizeof(*lines));
	if (!lines)
		return 1;
	atexit(at_exit);
	subscribe_r = cuptiSubscribe(&sub, on_callback, NULL);
	second_r = cuptiSubscribe(&other, on_callback, NULL);
	if (subscribe_r)
		return 1;
	for (size_t i = 0; i < sizeof(rt) / sizeof(rt[0]); i++)
		cuptiEnableCallback(1, sub, CUPTI_CB_DOMAIN_RUNTIME_API, rt[i]);
	for (size_t i = 0; i < sizeof(drv) / sizeof(drv[0]); i++)
		cuptiEnableCallback(1, sub, CUPTI_CB_DOMAIN_DRIVER_API, drv[i]);
	cuptiActivityRegisterCallbacks(on_request, on_complete);
	enable_r = cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
	return 1;
}
