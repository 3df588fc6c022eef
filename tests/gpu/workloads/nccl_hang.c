/*
 * nccl_hang.c: an NCCL rank whose collective gets stuck, for Sonde's stuck-collective
 * alert. It joins a communicator as rank R of N (the stand-in needs no other rank),
 * runs --before collectives each followed by cudaStreamSynchronize, then one more whose
 * stream the NCCL stand-in keeps busy for SONDE_STANDIN_NCCL_HANG_MS (set it; -1 hangs
 * until a signal): the call returns at once and the host blocks in the
 * cudaStreamSynchronize after it, as with a real hung collective. It sets
 * SONDE_STANDIN_NCCL_HANG_AT to that call unless already set. Before the hanging wait it
 * prints "nccl_hang: waiting ..." on stderr. SIGTERM, SIGINT or SIGUSR1 end a wait that
 * hangs for ever: the wait fails, the truth line is printed, and the exit status is 0.
 */
#include <getopt.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "truth.h"

struct op {
	const char *name;
	const char *api;
};

static const struct op ops[] = {
	{"allreduce", "ncclAllReduce"},
	{"allgather", "ncclAllGather"},
	{"reducescatter", "ncclReduceScatter"},
	{"broadcast", "ncclBroadcast"},
	{"reduce", "ncclReduce"},
	{"send", "ncclSend"},
	{"recv", "ncclRecv"},
};

static volatile sig_atomic_t signaled;

static void on_signal(int sig)
{
	signaled = sig;
}

static ncclResult_t run(const struct op *op, void *send, void *recv, size_t count, ncclComm_t comm,
			cudaStream_t s, int rank, int nranks)
{
	int peer = (rank + 1) % nranks;

	switch (op - ops) {
	case 0:
		return ncclAllReduce(send, recv, count, ncclBfloat16, ncclSum, comm, s);
	case 1:
		return ncclAllGather(send, recv, count, ncclBfloat16, comm, s);
	case 2:
		return ncclReduceScatter(send, recv, count, ncclBfloat16, ncclSum, comm, s);
	case 3:
		return ncclBroadcast(send, recv, count, ncclBfloat16, 0, comm, s);
	case 4:
		return ncclReduce(send, recv, count, ncclBfloat16, ncclSum, 0, comm, s);
	case 5:
		return ncclSend(send, count, ncclBfloat16, peer, comm, s);
	default:
		return ncclRecv(recv, count, ncclBfloat16, peer, comm, s);
	}
}

static void usage(FILE *f)
{
	fprintf(f, "usage: nccl_hang [--before N] [--op OP] [--count ELEMENTS] [--rank R]\n"
		   "                 [--nranks N]\n"
		   "  OP: allreduce (default), allgather, reducescatter, broadcast, reduce, send,\n"
		   "  recv, on bfloat16 elements. Set SONDE_STANDIN_NCCL_HANG_MS=MS (-1: until a\n"
		   "  signal). Prints one JSON line of ground truth (tests/gpu/README.md).\n");
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"before", required_argument, NULL, 'b'},
		{"op", required_argument, NULL, 'o'},
		{"count", required_argument, NULL, 'c'},
		{"rank", required_argument, NULL, 'r'},
		{"nranks", required_argument, NULL, 'n'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	int before = 3, rank = 0, nranks = 2, ngpus = 0, c;
	const struct op *op = &ops[0];
	size_t count = 1 << 20, bytes;
	struct sigaction sa = {.sa_handler = on_signal};
	uint64_t t0, waited;
	char at[32];
	ncclUniqueId id;
	ncclComm_t comm;
	cudaStream_t s;
	cudaError_t e;
	void *send, *recv;

	while ((c = getopt_long(argc, argv, "b:o:c:r:n:h", longopts, NULL)) != -1) {
		switch (c) {
		case 'b':
			before = atoi(optarg);
			break;
		case 'o':
			for (op = ops; op < ops + sizeof(ops) / sizeof(ops[0]); op++) {
				if (!strcmp(op->name, optarg))
					break;
			}
			if (op == ops + sizeof(ops) / sizeof(ops[0])) {
				usage(stderr);
				return 2;
			}
			break;
		case 'c':
			count = strtoull(optarg, NULL, 0);
			break;
		case 'r':
			rank = atoi(optarg);
			break;
		case 'n':
			nranks = atoi(optarg);
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (before < 0 || nranks < 1 || rank < 0 || rank >= nranks) {
		usage(stderr);
		return 2;
	}
	/* The stand-in reads this at its first call, which has not happened yet. */
	snprintf(at, sizeof(at), "%d", before + 1);
	setenv("SONDE_STANDIN_NCCL_HANG_AT", at, 0);
	sigemptyset(&sa.sa_mask);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGUSR1, &sa, NULL);

	truth_init("nccl_hang");
	if (cudaGetDeviceCount(&ngpus) || cudaSetDevice(rank % ngpus) || cudaStreamCreate(&s)) {
		fprintf(stderr, "nccl_hang: no GPU: %s\n", cudaGetErrorString(cudaGetLastError()));
		return 1;
	}
	bytes = count * 2;
	if (cudaMalloc(&send, bytes * nranks) || cudaMalloc(&recv, bytes * nranks)) {
		fprintf(stderr, "nccl_hang: cudaMalloc failed\n");
		return 1;
	}
	truth_alloc("cudaMalloc", rank % ngpus, (uintptr_t)send, bytes * nranks);
	truth_alloc("cudaMalloc", rank % ngpus, (uintptr_t)recv, bytes * nranks);
	if (ncclGetUniqueId(&id) || ncclCommInitRank(&comm, nranks, id, rank)) {
		fprintf(stderr, "nccl_hang: can't create the communicator\n");
		return 1;
	}
	truth_comm(rank, nranks, rank % ngpus);

	for (int i = 0; i <= before; i++) {
		bool hanging = i == before;

		if (run(op, send, recv, count, comm, s, rank, nranks)) {
			truth_failed(op->api);
			continue;
		}
		truth_nccl(op->api, bytes);
		if (hanging)
			fprintf(stderr,
				"nccl_hang: waiting in cudaStreamSynchronize after %s call %d "
				"(pid %d)\n",
				op->api, i + 1, (int)getpid());
		t0 = truth_now_ns();
		e = cudaStreamSynchronize(s);
		waited = truth_now_ns() - t0;
		if (e)
			truth_failed("cudaStreamSynchronize");
		else
			truth_wait("cudaStreamSynchronize", waited);
		if (hanging) {
			truth_note("hang",
				   "{\"op\":\"%s\",\"call\":%d,\"rank\":%d,\"nranks\":%d,"
				   "\"hang_ms\":%lld,\"waited_ns\":%llu,\"interrupted\":%s,"
				   "\"signal\":%d}",
				   op->api, i + 1, rank, nranks,
				   (long long)strtoll(getenv("SONDE_STANDIN_NCCL_HANG_MS") ?: "0",
						      NULL, 0),
				   (unsigned long long)waited, e ? "true" : "false", (int)signaled);
		}
	}
	if (!signaled) {
		ncclCommDestroy(comm);
		if (!cudaFree(send))
			truth_free("cudaFree", (uintptr_t)send);
		if (!cudaFree(recv))
			truth_free("cudaFree", (uintptr_t)recv);
	}
	truth_print();
	return 0;
}
