/* nccl_calls.c: calls the real libnccl.so.2 with known, distinct arguments
 * for test_gpu_real_nccl.py. Collectives get a NULL communicator, which NCCL
 * rejects with ncclInvalidArgument without touching anything else; to see a
 * non-NULL communicator decoded, each collective is also called once in a
 * forked child with a communicator pointing at an inaccessible page (NCCL
 * then faults reading it, after the entry probe has run). AllReduce is
 * called once per ncclDataType_t, so that every element size is checked.
 *
 * Protocol as cuda_calls.cu: "ready", wait for a line on stdin, call, and
 * write the addresses, the header's enum values and the return codes as
 * JSON to argv[1]. */
#include <nccl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define U64(x) ((unsigned long long)(uintptr_t)(x))
#define S(x) ((cudaStream_t)(uintptr_t)(x))
#define P(x) ((void *)(uintptr_t)(x))

enum { ALLREDUCE, ALLGATHER, REDUCESCATTER, BROADCAST, REDUCE, SEND, RECV, NOPS };

/* The calls, with comm given; each op's arguments are the same in the
 * NULL-comm and the poisoned-comm runs. */
__attribute__((noinline)) static ncclResult_t sonde_nccl_op(int op, ncclComm_t comm)
{
	switch (op) {
	case ALLREDUCE:
		return ncclAllReduce(P(0x1000), P(0x2000), 1000, ncclFloat32, ncclMax, comm,
				     S(0x77));
	case ALLGATHER:
		return ncclAllGather(P(0x1100), P(0x2100), 2000, ncclBfloat16, comm, S(0x78));
	case REDUCESCATTER:
		return ncclReduceScatter(P(0x1200), P(0x2200), 3000, ncclFloat16, ncclProd, comm,
					 S(0x79));
	case BROADCAST:
		return ncclBroadcast(P(0x1300), P(0x2300), 4000, ncclInt64, 3, comm, S(0x7a));
	case REDUCE:
		return ncclReduce(P(0x1400), P(0x2400), 5000, ncclUint8, ncclMin, 2, comm, S(0x7b));
	case SEND:
		return ncclSend(P(0x1500), 6000, ncclFloat64, 5, comm, S(0x7c));
	default:
		return ncclRecv(P(0x2600), 7000, ncclFloat8e4m3, 6, comm, S(0x7d));
	}
}

int main(int argc, char **argv)
{
	ncclComm_t c1 = (ncclComm_t)0x7171, c2 = (ncclComm_t)0x7272;
	ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
	int rc[64], k = 0, status[NOPS];
	ncclUniqueId id;
	void *poison;
	char line[64];
	FILE *out;

	if (argc < 2) {
		fprintf(stderr, "usage: %s OUT.json\n", argv[0]);
		return 2;
	}
	poison = mmap(NULL, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (poison == MAP_FAILED) {
		perror("mmap");
		return 2;
	}
	printf("ready\n");
	fflush(stdout);
	if (!fgets(line, sizeof(line), stdin))
		return 3;

	for (int op = 0; op < NOPS; op++)
		rc[k++] = sonde_nccl_op(op, NULL);
	rc[k++] = ncclGroupStart();
	rc[k++] = ncclGroupEnd();
	for (int t = 0; t < ncclNumTypes; t++)
		rc[k++] = ncclAllReduce(P(0x3000 + t), P(0x4000 + t), 100 + t, (ncclDataType_t)t,
					ncclSum, NULL, S(0x100 + t));
	memset(&id, 0x5e, sizeof(id));
	rc[k++] = ncclCommInitRank(&c1, 4, id, 2);
	rc[k++] = ncclCommInitRankConfig(&c2, 8, id, 5, &config);
	for (int op = 0; op < NOPS; op++) {
		pid_t pid = fork();

		if (pid == 0) {
			/* A fault is the expected end; keep it out of core files. */
			signal(SIGSEGV, SIG_DFL);
			_exit(sonde_nccl_op(op, (ncclComm_t)poison) + 100);
		}
		waitpid(pid, &status[op], 0);
	}

	out = fopen(argv[1], "w");
	if (!out) {
		perror(argv[1]);
		return 4;
	}
	fprintf(out, "{\"c1\": %llu, \"c2\": %llu, \"poison\": %llu, \"num_types\": %d, ", U64(&c1),
		U64(&c2), U64(poison), (int)ncclNumTypes);
	fprintf(out,
		"\"types\": {\"ncclInt8\": %d, \"ncclUint8\": %d, \"ncclInt32\": %d, "
		"\"ncclUint32\": %d, \"ncclInt64\": %d, \"ncclUint64\": %d, \"ncclFloat16\": %d, "
		"\"ncclFloat32\": %d, \"ncclFloat64\": %d, \"ncclBfloat16\": %d, "
		"\"ncclFloat8e4m3\": %d, \"ncclFloat8e5m2\": %d}, ",
		ncclInt8, ncclUint8, ncclInt32, ncclUint32, ncclInt64, ncclUint64, ncclFloat16,
		ncclFloat32, ncclFloat64, ncclBfloat16, ncclFloat8e4m3, ncclFloat8e5m2);
	fprintf(out,
		"\"ops\": {\"ncclSum\": %d, \"ncclProd\": %d, \"ncclMax\": %d, \"ncclMin\": %d}, ",
		ncclSum, ncclProd, ncclMax, ncclMin);
	fprintf(out, "\"poison_status\": [");
	for (int op = 0; op < NOPS; op++)
		fprintf(out, "%s%d", op ? ", " : "", status[op]);
	fprintf(out, "], \"rc\": [");
	for (int i = 0; i < k; i++)
		fprintf(out, "%s%d", i ? ", " : "", rc[i]);
	fprintf(out, "]}\n");
	fclose(out);
	return 0;
}
