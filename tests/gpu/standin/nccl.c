/*
 * nccl.c: the libnccl.so.2 stand-in, for Sonde's tests on machines without a GPU. It
 * exports what the real NCCL 2.28 exports for the functions it implements: each ncclXxx
 * as a weak symbol and its profiling twin pncclXxx as a global alias at the same address,
 * none versioned (libnccl.map), with the signatures of the real nccl.h. Collectives
 * behave as NCCL's do: the call validates its arguments and returns at once; the work
 * goes on the stream, taking a latency plus the bytes each rank moves divided by a bus
 * bandwidth, so the host waits for it in cudaStreamSynchronize. Between ncclGroupStart
 * and ncclGroupEnd, work is queued when the outermost group ends. Ranks do not meet: a
 * communicator of N ranks can be built by one process that claims one of them.
 *
 * A collective can be made to hang: with SONDE_STANDIN_NCCL_HANG_MS=N, the K-th
 * collective or point-to-point call of the process (K = SONDE_STANDIN_NCCL_HANG_AT, 1 by
 * default) returns normally but its stream is busy for N ms; N=-1 keeps it busy until a
 * signal interrupts the wait. The stream work goes to the fake GPU of the libcuda.so.1
 * stand-in through its private table, as real NCCL launches its kernels through the
 * driver; no runtime or driver function a profiler probes is called.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include <nccl.h>

#include "ptrmap.h"
#include "standin.h"

#define LIB "libnccl: "
#define COMM_MAGIC 0x6e63636cu

/* Each function is weak and has a global pncclXxx alias, as in the real library. */
#define NCCL_API __attribute__((weak))
#define NCCL_ALIAS(name) __typeof__(name) p##name __attribute__((alias(#name)))

struct ncclComm {
	uint32_t magic;
	int rank;
	int nranks;
	int dev;
	unsigned char id[8]; /* the first bytes of the unique id, for trace lines */
};

enum op {
	OP_ALL_REDUCE,
	OP_ALL_GATHER,
	OP_REDUCE_SCATTER,
	OP_BROADCAST,
	OP_REDUCE,
	OP_ALL_TO_ALL,
	OP_GATHER,
	OP_SCATTER,
	OP_SEND,
	OP_RECV,
};

static const char *const op_names[] = {
	[OP_ALL_REDUCE] = "ncclAllReduce",
	[OP_ALL_GATHER] = "ncclAllGather",
	[OP_REDUCE_SCATTER] = "ncclReduceScatter",
	[OP_BROADCAST] = "ncclBroadcast",
	[OP_REDUCE] = "ncclReduce",
	[OP_ALL_TO_ALL] = "ncclAlltoAll",
	[OP_GATHER] = "ncclGather",
	[OP_SCATTER] = "ncclScatter",
	[OP_SEND] = "ncclSend",
	[OP_RECV] = "ncclRecv",
};

struct pending {
	CUstream stream;
	uint64_t ns;
};

static struct {
	double gbps;
	uint64_t latency_ns;
	int64_t hang_ms;
	uint64_t hang_at;
} cfg;

static const struct standin_gpu *G;
static const char *gpu_why;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct ptrmap comms;
static uint64_t ncalls; /* collective and point-to-point calls so far */

static __thread int group_depth;
static __thread struct pending *group_ops;
static __thread size_t group_len, group_cap;

static void setup(void)
{
	double us;

	cfg.gbps = standin_env_double("SONDE_STANDIN_NCCL_GBPS", 100);
	if (cfg.gbps <= 0)
		cfg.gbps = 100;
	us = standin_env_double("SONDE_STANDIN_NCCL_LATENCY_US", 20);
	cfg.latency_ns = us > 0 ? (uint64_t)(us * 1000) : 0;
	cfg.hang_ms = standin_env_int("SONDE_STANDIN_NCCL_HANG_MS", 0);
	cfg.hang_at = (uint64_t)standin_env_int("SONDE_STANDIN_NCCL_HANG_AT", 1);
	G = standin_gpu_table(&gpu_why);
	if (!G)
		STANDIN_TRACE(LIB "%s", gpu_why);
}

/* Initializes once; a thread that never touched the runtime gets its default context. */
static ncclResult_t enter(void)
{
	pthread_once(&once, setup);
	if (!G)
		return ncclSystemError;
	return G->ensure_context(NULL) ? ncclUnhandledCudaError : ncclSuccess;
}

static struct ncclComm *comm_get(const ncclComm_t comm)
{
	struct ncclComm *c;

	pthread_mutex_lock(&lock);
	c = ptrmap__get(&comms, (uintptr_t)comm);
	pthread_mutex_unlock(&lock);
	return c && c->magic == COMM_MAGIC ? c : NULL;
}

static size_t type_size(ncclDataType_t t)
{
	switch (t) {
	case ncclInt8:
	case ncclUint8:
	case ncclFloat8e4m3:
	case ncclFloat8e5m2:
		return 1;
	case ncclFloat16:
	case ncclBfloat16:
		return 2;
	case ncclInt32:
	case ncclUint32:
	case ncclFloat32:
		return 4;
	case ncclInt64:
	case ncclUint64:
	case ncclFloat64:
		return 8;
	default:
		return 0;
	}
}

/* Time on the stream: latency plus what one rank sends over the bus, ring algorithms. */
static uint64_t op_ns(enum op op, size_t bytes, int nranks)
{
	double n = nranks, moved;

	switch (op) {
	case OP_ALL_REDUCE:
		moved = bytes * 2 * (n - 1) / n;
		break;
	case OP_ALL_GATHER:
	case OP_REDUCE_SCATTER:
	case OP_ALL_TO_ALL:
	case OP_GATHER:
	case OP_SCATTER:
		moved = bytes * (n - 1);
		break;
	default:
		moved = bytes;
		break;
	}
	return cfg.latency_ns + (uint64_t)(moved / cfg.gbps);
}

static ncclResult_t queue(CUstream stream, uint64_t ns)
{
	struct pending *p;

	if (!group_depth)
		return G->stream_delay(stream, ns) ? ncclUnhandledCudaError : ncclSuccess;
	if (group_len == group_cap) {
		size_t cap = group_cap ? group_cap * 2 : 16;

		p = realloc(group_ops, cap * sizeof(*p));
		if (!p)
			return ncclSystemError;
		group_ops = p;
		group_cap = cap;
	}
	group_ops[group_len++] = (struct pending){stream, ns};
	return ncclSuccess;
}

/*
 * Every collective and point-to-point call: checks like NCCL's argument checks, then
 * queues the work, or a hang if this is the call SONDE_STANDIN_NCCL_HANG_* picks.
 */
static ncclResult_t collective(enum op op, const void *sendbuff, const void *recvbuff, size_t count,
			       ncclDataType_t datatype, int redop, int root, ncclComm_t comm,
			       cudaStream_t stream)
{
	size_t size = type_size(datatype);
	ncclResult_t r = enter();
	struct ncclComm *c;
	uint64_t ns = 0, call;

	if (r)
		goto out;
	c = comm_get(comm);
	r = ncclInvalidArgument;
	if (!c || !size || (unsigned int)redop >= (unsigned int)ncclMaxRedOp || root < 0 ||
	    root >= c->nranks)
		goto out;
	if (count && ((op != OP_RECV && !sendbuff) || (op != OP_SEND && !recvbuff)))
		goto out;
	call = __atomic_add_fetch(&ncalls, 1, __ATOMIC_RELAXED);
	ns = op_ns(op, count * size, c->nranks);
	if (cfg.hang_ms && call == cfg.hang_at)
		ns = cfg.hang_ms < 0 ? STANDIN_FOREVER : (uint64_t)cfg.hang_ms * 1000000;
	r = queue(stream, ns);
out:
	STANDIN_TRACE(LIB "%s(count=%zu datatype=%d op=%d root=%d comm=%p rank=%d/%d stream=%p) = "
			  "%d bytes=%zu busy=%s%lluns",
		      op_names[op], count, (int)datatype, redop, root, (void *)comm,
		      comm_get(comm) ? comm->rank : -1, comm_get(comm) ? comm->nranks : -1,
		      (void *)stream, r, count * size, ns == STANDIN_FOREVER ? "forever " : "",
		      ns == STANDIN_FOREVER ? 0ull : (unsigned long long)ns);
	return r;
}

NCCL_API ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
				    ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
				    cudaStream_t stream)
{
	return collective(OP_ALL_REDUCE, sendbuff, recvbuff, count, datatype, op, 0, comm, stream);
}
NCCL_ALIAS(ncclAllReduce);

NCCL_API ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
				    ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream)
{
	return collective(OP_ALL_GATHER, sendbuff, recvbuff, sendcount, datatype, ncclSum, 0, comm,
			  stream);
}
NCCL_ALIAS(ncclAllGather);

NCCL_API ncclResult_t ncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount,
					ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
					cudaStream_t stream)
{
	return collective(OP_REDUCE_SCATTER, sendbuff, recvbuff, recvcount, datatype, op, 0, comm,
			  stream);
}
NCCL_ALIAS(ncclReduceScatter);

NCCL_API ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count,
				    ncclDataType_t datatype, int root, ncclComm_t comm,
				    cudaStream_t stream)
{
	return collective(OP_BROADCAST, sendbuff, recvbuff, count, datatype, ncclSum, root, comm,
			  stream);
}
NCCL_ALIAS(ncclBroadcast);

NCCL_API ncclResult_t ncclBcast(void *buff, size_t count, ncclDataType_t datatype, int root,
				ncclComm_t comm, cudaStream_t stream)
{
	return collective(OP_BROADCAST, buff, buff, count, datatype, ncclSum, root, comm, stream);
}
NCCL_ALIAS(ncclBcast);

NCCL_API ncclResult_t ncclReduce(const void *sendbuff, void *recvbuff, size_t count,
				 ncclDataType_t datatype, ncclRedOp_t op, int root, ncclComm_t comm,
				 cudaStream_t stream)
{
	return collective(OP_REDUCE, sendbuff, recvbuff, count, datatype, op, root, comm, stream);
}
NCCL_ALIAS(ncclReduce);

NCCL_API ncclResult_t ncclAlltoAll(const void *sendbuff, void *recvbuff, size_t count,
				   ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream)
{
	return collective(OP_ALL_TO_ALL, sendbuff, recvbuff, count, datatype, ncclSum, 0, comm,
			  stream);
}
NCCL_ALIAS(ncclAlltoAll);

NCCL_API ncclResult_t ncclGather(const void *sendbuff, void *recvbuff, size_t count,
				 ncclDataType_t datatype, int root, ncclComm_t comm,
				 cudaStream_t stream)
{
	return collective(OP_GATHER, sendbuff, recvbuff, count, datatype, ncclSum, root, comm,
			  stream);
}
NCCL_ALIAS(ncclGather);

NCCL_API ncclResult_t ncclScatter(const void *sendbuff, void *recvbuff, size_t count,
				  ncclDataType_t datatype, int root, ncclComm_t comm,
				  cudaStream_t stream)
{
	return collective(OP_SCATTER, sendbuff, recvbuff, count, datatype, ncclSum, root, comm,
			  stream);
}
NCCL_ALIAS(ncclScatter);

NCCL_API ncclResult_t ncclSend(const void *sendbuff, size_t count, ncclDataType_t datatype,
			       int peer, ncclComm_t comm, cudaStream_t stream)
{
	return collective(OP_SEND, sendbuff, NULL, count, datatype, ncclSum, peer, comm, stream);
}
NCCL_ALIAS(ncclSend);

NCCL_API ncclResult_t ncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype, int peer,
			       ncclComm_t comm, cudaStream_t stream)
{
	return collective(OP_RECV, NULL, recvbuff, count, datatype, ncclSum, peer, comm, stream);
}
NCCL_ALIAS(ncclRecv);

NCCL_API ncclResult_t ncclGroupStart(void)
{
	ncclResult_t r = enter();

	if (!r)
		group_depth++;
	STANDIN_TRACE(LIB "ncclGroupStart() = %d depth=%d", r, group_depth);
	return r;
}
NCCL_ALIAS(ncclGroupStart);

NCCL_API ncclResult_t ncclGroupEnd(void)
{
	ncclResult_t r = enter();

	if (!r && !group_depth)
		r = ncclInvalidUsage;
	if (!r && !--group_depth) {
		/* The outermost end launches the group: every op queued, in call order. */
		for (size_t i = 0; i < group_len; i++) {
			if (G->stream_delay(group_ops[i].stream, group_ops[i].ns))
				r = ncclUnhandledCudaError;
		}
		group_len = 0;
	}
	STANDIN_TRACE(LIB "ncclGroupEnd() = %d depth=%d", r, group_depth);
	return r;
}
NCCL_ALIAS(ncclGroupEnd);

/* Communicators. */

static ncclResult_t comm_new(ncclComm_t *out, int nranks, const ncclUniqueId *id, int rank, int dev)
{
	struct ncclComm *c = calloc(1, sizeof(*c));

	if (!c)
		return ncclSystemError;
	*c = (struct ncclComm){.magic = COMM_MAGIC, .rank = rank, .nranks = nranks, .dev = dev};
	if (id)
		memcpy(c->id, id->internal, sizeof(c->id));
	pthread_mutex_lock(&lock);
	if (ptrmap__put(&comms, (uintptr_t)c, c)) {
		pthread_mutex_unlock(&lock);
		free(c);
		return ncclSystemError;
	}
	pthread_mutex_unlock(&lock);
	*out = c;
	return ncclSuccess;
}

static ncclResult_t init_rank(const char *api, ncclComm_t *comm, int nranks, ncclUniqueId commId,
			      int rank)
{
	ncclResult_t r = enter();
	CUdevice dev = -1;

	if (!r && (!comm || nranks < 1 || rank < 0 || rank >= nranks))
		r = ncclInvalidArgument;
	if (!r && G->ensure_context(&dev))
		r = ncclUnhandledCudaError;
	if (!r)
		r = comm_new(comm, nranks, &commId, rank, dev);
	STANDIN_TRACE(LIB "%s(nranks=%d rank=%d dev=%d) = %d comm=%p", api, nranks, rank, dev, r,
		      r ? NULL : (void *)*comm);
	return r;
}

NCCL_API ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank)
{
	return init_rank("ncclCommInitRank", comm, nranks, commId, rank);
}
NCCL_ALIAS(ncclCommInitRank);

NCCL_API ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId commId,
					     int rank, ncclConfig_t *config)
{
	return init_rank("ncclCommInitRankConfig", comm, nranks, commId, rank);
}
NCCL_ALIAS(ncclCommInitRankConfig);

NCCL_API ncclResult_t ncclCommInitAll(ncclComm_t *comm, int ndev, const int *devlist)
{
	ncclResult_t r = enter();
	int count = 0;

	if (!r && (!comm || ndev < 1))
		r = ncclInvalidArgument;
	if (!r)
		G->device_get_count(&count);
	for (int i = 0; !r && i < ndev; i++) {
		int dev = devlist ? devlist[i] : i;

		r = dev >= 0 && dev < count ? comm_new(&comm[i], ndev, NULL, i, dev)
					    : ncclInvalidArgument;
	}
	STANDIN_TRACE(LIB "ncclCommInitAll(ndev=%d) = %d", ndev, r);
	return r;
}
NCCL_ALIAS(ncclCommInitAll);

static ncclResult_t comm_end(const char *api, ncclComm_t comm)
{
	struct ncclComm *c;

	pthread_mutex_lock(&lock);
	c = ptrmap__del(&comms, (uintptr_t)comm);
	pthread_mutex_unlock(&lock);
	STANDIN_TRACE(LIB "%s(comm=%p) = %d", api, (void *)comm,
		      c ? ncclSuccess : ncclInvalidArgument);
	if (!c)
		return ncclInvalidArgument;
	c->magic = 0;
	free(c);
	return ncclSuccess;
}

NCCL_API ncclResult_t ncclCommFinalize(ncclComm_t comm)
{
	return comm_get(comm) ? ncclSuccess : ncclInvalidArgument;
}
NCCL_ALIAS(ncclCommFinalize);

NCCL_API ncclResult_t ncclCommDestroy(ncclComm_t comm)
{
	return comm_end("ncclCommDestroy", comm);
}
NCCL_ALIAS(ncclCommDestroy);

NCCL_API ncclResult_t ncclCommAbort(ncclComm_t comm)
{
	return comm_end("ncclCommAbort", comm);
}
NCCL_ALIAS(ncclCommAbort);

NCCL_API ncclResult_t ncclCommCount(const ncclComm_t comm, int *count)
{
	struct ncclComm *c = comm_get(comm);

	if (!c || !count)
		return ncclInvalidArgument;
	*count = c->nranks;
	return ncclSuccess;
}
NCCL_ALIAS(ncclCommCount);

NCCL_API ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int *device)
{
	struct ncclComm *c = comm_get(comm);

	if (!c || !device)
		return ncclInvalidArgument;
	*device = c->dev;
	return ncclSuccess;
}
NCCL_ALIAS(ncclCommCuDevice);

NCCL_API ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank)
{
	struct ncclComm *c = comm_get(comm);

	if (!c || !rank)
		return ncclInvalidArgument;
	*rank = c->rank;
	return ncclSuccess;
}
NCCL_ALIAS(ncclCommUserRank);

NCCL_API ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError)
{
	if (!comm_get(comm) || !asyncError)
		return ncclInvalidArgument;
	/* A hung collective is not an error until a watchdog says so. */
	*asyncError = ncclSuccess;
	return ncclSuccess;
}
NCCL_ALIAS(ncclCommGetAsyncError);

/* Versions, ids and errors. */

NCCL_API ncclResult_t ncclGetVersion(int *version)
{
	if (!version)
		return ncclInvalidArgument;
	*version = NCCL_VERSION_CODE;
	return ncclSuccess;
}
NCCL_ALIAS(ncclGetVersion);

NCCL_API ncclResult_t ncclGetUniqueId(ncclUniqueId *uniqueId)
{
	ncclResult_t r = enter();
	pid_t pid = getpid();

	if (!r && !uniqueId)
		r = ncclInvalidArgument;
	if (!r) {
		memset(uniqueId, 0, sizeof(*uniqueId));
		if (getrandom(uniqueId->internal, 16, 0) != 16)
			r = ncclSystemError;
		memcpy(uniqueId->internal + 16, &pid, sizeof(pid));
	}
	STANDIN_TRACE(LIB "ncclGetUniqueId() = %d", r);
	return r;
}
NCCL_ALIAS(ncclGetUniqueId);

NCCL_API const char *ncclGetErrorString(ncclResult_t result)
{
	switch (result) {
	case ncclSuccess:
		return "no error";
	case ncclUnhandledCudaError:
		return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
	case ncclSystemError:
		return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
	case ncclInternalError:
		return "internal error - please report this issue to the NCCL developers";
	case ncclInvalidArgument:
		return "invalid argument (run with NCCL_DEBUG=WARN for details)";
	case ncclInvalidUsage:
		return "invalid usage (run with NCCL_DEBUG=WARN for details)";
	case ncclRemoteError:
		return "remote process exited or there was a network error";
	case ncclInProgress:
		return "NCCL operation in progress";
	default:
		return "unknown result code";
	}
}
NCCL_ALIAS(ncclGetErrorString);

NCCL_API const char *ncclGetLastError(ncclComm_t comm)
{
	return "";
}
NCCL_ALIAS(ncclGetLastError);
