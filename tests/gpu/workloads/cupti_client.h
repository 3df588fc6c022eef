/* cupti_client.h: what the CUPTI stand-in's test clients (pc_client.c,
 * mem_client.c, graph_sync_client.c) share: one "ok: ..." line a check and
 * exit 1 at the first that fails, the CUDA calls' results checked the same
 * way, and the activity buffers handed to CUPTI (CLIENT_BUF_BYTES each,
 * 4 MiB unless the client says). Test-only. */
#ifndef SONDE_TESTS_CUPTI_CLIENT_H
#define SONDE_TESTS_CUPTI_CLIENT_H

#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <cupti.h>

#ifndef CLIENT_BUF_BYTES
#define CLIENT_BUF_BYTES (4 << 20)
#endif

static int checks; /* passed so far */

static void check(bool cond, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void check(bool cond, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fputs(cond ? "ok: " : "FAIL: ", stdout);
	vprintf(fmt, ap);
	putchar('\n');
	va_end(ap);
	fflush(stdout);
	if (!cond)
		exit(1);
	checks++;
}

static __attribute__((unused)) void cu(CUresult e, const char *what)
{
	const char *s = NULL;

	if (e == CUDA_SUCCESS)
		return;
	cuGetErrorString(e, &s);
	printf("FAIL: %s: %s\n", what, s ? s : "unknown error");
	exit(1);
}

static __attribute__((unused)) void rt(cudaError_t e, const char *what)
{
	if (e == cudaSuccess)
		return;
	printf("FAIL: %s: error %d\n", what, (int)e);
	exit(1);
}

/* CUPTI's request for an activity buffer. */
static __attribute__((unused)) void CUPTIAPI on_request(uint8_t **buffer, size_t *size, size_t *max)
{
	*buffer = aligned_alloc(8, CLIENT_BUF_BYTES);
	*size = *buffer ? CLIENT_BUF_BYTES : 0;
	*max = 0;
}

#endif
