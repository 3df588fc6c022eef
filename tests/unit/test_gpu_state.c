/* test_gpu_state.c: unit tests of src/probe/gpu_state.c -- the hash
 * table, the decoding of ring-buffer records (bpf/gpu.h) into struct
 * gpu_event, and what decoding keeps: kernel handle to stub and name,
 * communicator to rank, blocked threads. Records are built here as the BPF
 * programs build them, including malformed ones, which must be rejected
 * and counted. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "probe/gpu_probes_internal.h"
#include "probe/libscan.h"
#include "metrics/gpu_metrics.h"

/* The consumer maps these onto the metrics' enums by value. */
_Static_assert((int)GPU_COLL_ALLREDUCE == (int)NCCL_OP_ALLREDUCE &&
		       (int)GPU_COLL_ALLGATHER == (int)NCCL_OP_ALLGATHER &&
		       (int)GPU_COLL_REDUCESCATTER == (int)NCCL_OP_REDUCESCATTER &&
		       (int)GPU_COLL_BROADCAST == (int)NCCL_OP_BROADCAST &&
		       (int)GPU_COLL_REDUCE == (int)NCCL_OP_REDUCE &&
		       (int)GPU_COLL_SEND == (int)NCCL_OP_SEND &&
		       (int)GPU_COLL_RECV == (int)NCCL_OP_RECV,
	       "enum gpu_coll follows enum nccl_op");
_Static_assert(GPU_COPY_H2H == 0 && GPU_COPY_H2D == 1 && GPU_COPY_D2H == 2 && GPU_COPY_D2D == 3 &&
		       GPU_COPY_DEFAULT == 4,
	       "enum gpu_copy_kind is cudaMemcpyKind");

/* A record as the ring buffer holds it, of any of the three sizes. */
static union {
	struct gpu_rec r;
	struct gpu_rec_stack s;
	struct gpu_rec_name n;
} rec_buf;

static struct gpu_rec *rec(uint16_t type, enum gpu_api api, uint32_t pid, uint32_t tid)
{
	memset(&rec_buf, 0, sizeof(rec_buf));
	rec_buf.r.type = type;
	rec_buf.r.api = api;
	rec_buf.r.pid = pid;
	rec_buf.r.tid = tid;
	rec_buf.r.ts_ns = 1000;
	rec_buf.r.dur_ns = 10;
	rec_buf.r.device = 0;
	return &rec_buf.r;
}

static int decode(struct gpu_state *st, size_t size, struct gpu_event *ev)
{
	bool new_pid;

	return gpu_state__decode(st, &rec_buf, size, ev, &new_pid);
}

static void test_api_table(void **state)
{
	for (int a = 1; a < GPU_API_MAX; a++) {
		const struct gpu_api_info *i = &gpu_apis[a];
		unsigned fam = GPU_API_LAYER(a) == GPU_LAYER_RT	     ? LIBSCAN_RT
			       : GPU_API_LAYER(a) == GPU_LAYER_DRV   ? LIBSCAN_DRV
			       : GPU_API_LAYER(a) == GPU_LAYER_NCCL  ? LIBSCAN_NCCL
			       : GPU_API_LAYER(a) == GPU_LAYER_CUPTI ? LIBSCAN_CUPTI
								     : LIBSCAN_TORCH;

		assert_non_null(i->name);
		/* The layer the BPF side derives from the id is the family
		 * the library scan attaches it in. */
		if (i->family != fam)
			fail_msg("%s: family %u, layer says %u", i->name, i->family, fam);
		assert_string_equal(gpu_api_name(a), i->name);
		for (int b = 1; b < a; b++)
			assert_string_not_equal(gpu_apis[b].name, i->name);
	}
	assert_string_equal(gpu_api_name(GPU_API_MAX), "?");
	assert_string_equal(gpu_api_name(GPU_API_NONE), "?");
	assert_string_equal(gpu_api_name(GPU_API_cudaLaunchKernel), "cudaLaunchKernel");
	assert_string_equal(gpu_api_name(GPU_API_ncclCommInitRankConfig), "ncclCommInitRankConfig");
	assert_string_equal(gpu_coll_name(GPU_COLL_REDUCESCATTER), "reducescatter");
	assert_string_equal(gpu_drop_name(GPU_DROP_RINGBUF), "ringbuf");
	assert_string_equal(gpu_drop_name(GPU_DROP_MAX), "?");
}

static void test_type_sizes(void **state)
{
	static const unsigned want[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};

	for (unsigned t = 0; t < 12; t++)
		assert_int_equal(gpu_nccl_type_size(t), want[t]);
	assert_int_equal(gpu_nccl_type_size(12), 0);
	assert_int_equal(gpu_nccl_type_size(0xffffffffu), 0);
}

/* gpu_table__filter's keep: the even values. */
static bool keep_even(void *ctx, uint64_t a, uint64_t b, void *val)
{
	(void)a;
	(void)b;
	++*(unsigned *)ctx;
	return *(uint64_t *)val % 2 == 0;
}

/* Random operations against a plain array: the table, with the entries
 * moved as others are deleted, must agree at every step; a filter looks
 * at every entry once and keeps what it says. */
static void test_table(void **state)
{
	enum { N = 4096 };
	static uint64_t ref[N];
	static bool live[N];
	struct gpu_table t;
	size_t n = 0;

	gpu_table__init(&t, sizeof(uint64_t), N);
	srand(7);
	for (int step = 0; step < 200000; step++) {
		/* Few distinct keys so that there are collisions and re-puts. */
		unsigned k = rand() % N;
		uint64_t *v;
		bool created;

		if (rand() % 3) {
			v = gpu_table__put(&t, k * 0x100000001ull, k & 7, &created);
			assert_non_null(v);
			assert_int_equal(created, !live[k]);
			if (created) {
				assert_int_equal(*v, 0);
				n++;
			}
			*v = ref[k] = step;
			live[k] = true;
		} else {
			gpu_table__del(&t, k * 0x100000001ull, k & 7);
			n -= live[k];
			live[k] = false;
		}
		if (step % 997 == 0)
			for (unsigned j = 0; j < N; j++) {
				v = gpu_table__get(&t, j * 0x100000001ull, j & 7);
				assert_int_equal(v != NULL, live[j]);
				if (v)
					assert_int_equal(*v, ref[j]);
			}
		assert_int_equal(t.n, n);
	}
	{
		unsigned seen = 0, left = 0;

		gpu_table__filter(&t, keep_even, &seen);
		assert_int_equal(seen, n);
		for (unsigned j = 0; j < N; j++) {
			uint64_t *v = gpu_table__get(&t, j * 0x100000001ull, j & 7);

			assert_int_equal(v != NULL, live[j] && ref[j] % 2 == 0);
			left += v != NULL;
		}
		assert_int_equal(t.n, left);
		assert_true(left > 0 && left < n);
		for (size_t i = 0; i < t.n; i++)
			assert_int_equal(*(uint64_t *)gpu_table__val(&t, i) % 2, 0);
	}
	gpu_table__fini(&t);

	/* Full: no more entries, existing ones still reachable. */
	gpu_table__init(&t, 1, 3);
	assert_non_null(gpu_table__put(&t, 1, 1, NULL));
	assert_non_null(gpu_table__put(&t, 2, 2, NULL));
	assert_non_null(gpu_table__put(&t, 3, 3, NULL));
	assert_null(gpu_table__put(&t, 4, 4, NULL));
	assert_non_null(gpu_table__put(&t, 3, 3, NULL));
	gpu_table__fini(&t);
}

static void test_malformed(void **state)
{
	struct gpu_state st;
	struct gpu_event ev;

	gpu_state__init(&st);
	rec(GPU_EV_ALLOC, GPU_API_cudaMalloc, 1, 1);
	assert_int_equal(decode(&st, sizeof(struct gpu_rec) - 1, &ev), -EINVAL);
	/* A launch record needs its stack. */
	rec(GPU_EV_LAUNCH, GPU_API_cudaLaunchKernel, 1, 1);
	assert_int_equal(decode(&st, sizeof(struct gpu_rec), &ev), -EINVAL);
	/* A name record needs its name. */
	rec(GPU_EV_KERNEL_NAME, GPU_API_cuModuleGetFunction, 1, 1);
	assert_int_equal(decode(&st, sizeof(struct gpu_rec), &ev), -EINVAL);
	/* Types and APIs out of range, or that don't go together. */
	rec(0, GPU_API_cudaMalloc, 1, 1);
	assert_int_equal(decode(&st, sizeof(rec_buf), &ev), -EINVAL);
	rec(GPU_EV_MAX, GPU_API_cudaMalloc, 1, 1);
	assert_int_equal(decode(&st, sizeof(rec_buf), &ev), -EINVAL);
	rec(GPU_EV_ALLOC, GPU_API_NONE, 1, 1);
	assert_int_equal(decode(&st, sizeof(rec_buf), &ev), -EINVAL);
	rec(GPU_EV_ALLOC, GPU_API_MAX, 1, 1);
	assert_int_equal(decode(&st, sizeof(rec_buf), &ev), -EINVAL);
	rec(GPU_EV_ALLOC, GPU_API_cudaFree, 1, 1);
	assert_int_equal(decode(&st, sizeof(rec_buf), &ev), -EINVAL);
	rec(GPU_EV_PROCESS_EXIT, GPU_API_cudaFree, 1, 1);
	assert_int_equal(decode(&st, sizeof(rec_buf), &ev), -EINVAL);
	assert_int_equal(st.bad_records, 9);
	/* Frames past the record are not read. */
	rec(GPU_EV_SYNC_END, GPU_API_cudaDeviceSynchronize, 1, 1)->nframes = 100000;
	assert_int_equal(decode(&st, sizeof(rec_buf), &ev), 0);
	assert_int_equal(ev.nips, GPU_MAX_FRAMES);
	rec(GPU_EV_SYNC_END, GPU_API_cudaDeviceSynchronize, 1, 1)->nframes = -14;
	assert_int_equal(decode(&st, sizeof(rec_buf), &ev), 0);
	assert_int_equal(ev.nips, 0);
	assert_null(ev.ips);
	assert_int_equal(ev.stack_err, -14);
	gpu_state__fini(&st);
}

static void test_launch(void **state)
{
	struct gpu_state st;
	struct gpu_event ev;
	struct gpu_rec *r;
	bool new_pid;

	gpu_state__init(&st);
	/* A launch before the handle is known: the runtime's func is the stub. */
	r = rec(GPU_EV_LAUNCH, GPU_API_cudaLaunchKernel, 10, 11);
	r->args.launch.func = 0x5000;
	r->args.launch.grid[0] = 3;
	r->args.launch.grid[1] = 5;
	r->args.launch.grid[2] = 7;
	r->args.launch.block[0] = 32;
	r->args.launch.shmem = 1024;
	r->args.launch.stream = 0x33;
	r->nframes = 2;
	rec_buf.s.ips[0] = 0x401000;
	rec_buf.s.ips[1] = 0x402000;
	/* The process's name, and the thread's filling its field without a
	 * NUL: the event's names are terminated. */
	memcpy(rec_buf.s.comm, "python3", 8);
	memcpy(rec_buf.s.thread, "pt_autograd_0123", 16);
	r->ret = 0;
	assert_int_equal(gpu_state__decode(&st, &rec_buf, sizeof(rec_buf), &ev, &new_pid), 0);
	assert_string_equal(ev.process, "python3");
	assert_string_equal(ev.thread, "pt_autograd_012");
	assert_true(new_pid);
	assert_int_equal(ev.type, GPU_EV_LAUNCH);
	assert_string_equal(ev.api_name, "cudaLaunchKernel");
	assert_int_equal(ev.pid, 10);
	assert_int_equal(ev.tid, 11);
	assert_int_equal(ev.launch.func, 0x5000);
	assert_int_equal(ev.launch.stub, 0x5000);
	assert_null(ev.launch.name);
	assert_int_equal(ev.launch.grid[2], 7);
	assert_int_equal(ev.launch.block[0], 32);
	assert_int_equal(ev.launch.shmem, 1024);
	assert_int_equal(ev.launch.stream, 0x33);
	assert_false(ev.launch.graph);
	assert_int_equal(ev.nips, 2);
	assert_int_equal(ev.ips[1], 0x402000);

	/* CUDA 13: __cudaGetKernel maps a handle to the stub. */
	r = rec(GPU_EV_KERNEL_STUB, GPU_API___cudaGetKernel, 10, 11);
	r->args.kernel.handle = 0xabc0;
	r->args.kernel.stub = 0x5000;
	assert_int_equal(decode(&st, sizeof(struct gpu_rec), &ev), 0);
	r = rec(GPU_EV_LAUNCH, GPU_API_cudaLaunchKernel, 10, 11);
	r->args.launch.func = 0xabc0;
	assert_int_equal(decode(&st, sizeof(rec_buf), &ev), 0);
	assert_int_equal(ev.launch.stub, 0x5000);
	/* ... in that process only. */
	r = rec(GPU_EV_LAUNCH, GPU_API_cudaLaunchKernel, 12, 12);
	r->args.launch.func = 0xabc0;
	assert_int_equal(decode(&st, sizeof(rec_buf), &ev), 0);
	assert_int_equal(ev.launch.stub, 0xabc0);

	/* Driver API: handle -> name, only from a lookup that succeeded. */
	r = rec(GPU_EV_KERNEL_NAME, GPU_API_cuModuleGetFunction, 10, 11);
	r->args.kernel.handle = 0xf00;
	r->ret = 500; /* CUDA_ERROR_NOT_FOUND */
	strcpy(rec_buf.n.name, "wrong");
	assert_int_equal(decode(&st, sizeof(struct gpu_rec_name), &ev), 0);
	assert_string_equal(ev.kernel.name, "wrong");
	r = rec(GPU_EV_KERNEL_NAME, GPU_API_cuModuleGetFunction, 10, 11);
	r->args.kernel.handle = 0xf00;
	/* Not NUL-terminated: decoding cuts it. */
	memset(rec_buf.n.name, 'k', GPU_NAME_MAX);
	assert_int_equal(decode(&st, sizeof(struct gpu_rec_name), &ev), 0);
	assert_int_equal(strlen(ev.kernel.name), GPU_NAME_MAX);
	r = rec(GPU_EV_KERNEL_NAME, GPU_API_cuLibraryGetKernel, 10, 11);
	r->args.kernel.handle = 0xf00;
	strcpy(rec_buf.n.name, "gemm_kernel");
	assert_int_equal(decode(&st, sizeof(struct gpu_rec_name), &ev), 0);
	r = rec(GPU_EV_LAUNCH, GPU_API_cuLaunchKernel, 10, 11);
	r->args.launch.func = 0xf00;
	assert_int_equal(decode(&st, sizeof(rec_buf), &ev), 0);
	assert_string_equal(ev.launch.name, "gemm_kernel");
	assert_int_equal(ev.launch.stub, 0); /* a CUfunction is no address */
	{
		const struct gpu_kernel_ent *k = gpu_table__get(&st.kernels, 10, 0xf00);
		const char *name;

		assert_non_null(k);
		name = k->name;
		/* Names outlive their process's tables. */
		gpu_state__forget_pid(&st, 10);
		assert_null(gpu_table__get(&st.kernels, 10, 0xf00));
		assert_string_equal(name, "gemm_kernel");
	}
	/* Graphs name no kernel. */
	r = rec(GPU_EV_LAUNCH, GPU_API_cudaGraphLaunch, 10, 11);
	r->args.launch.func = 0x6666;
	assert_int_equal(decode(&st, sizeof(rec_buf), &ev), 0);
	assert_true(ev.launch.graph);
	assert_int_equal(ev.launch.stub, 0);
	gpu_state__fini(&st);
}

static void test_memory(void **state)
{
	struct gpu_state st;
	struct gpu_event ev;
	struct gpu_rec *r;

	gpu_state__init(&st);
	r = rec(GPU_EV_ALLOC, GPU_API_cudaMallocAsync_ptsz, 1, 1);
	r->args.mem.addr = 0x7000;
	r->args.mem.size = 4096;
	r->args.mem.stream = 9;
	r->args.mem.out = 0x7ffc;
	r->device = 3;
	assert_int_equal(decode(&st, sizeof(struct gpu_rec), &ev), 0);
	assert_int_equal(ev.mem.addr, 0x7000);
	assert_int_equal(ev.mem.size, 4096);
	assert_int_equal(ev.mem.out, 0x7ffc);
	assert_int_equal(ev.device, 3);
	assert_true(ev.mem.async);
	assert_false(ev.mem.managed);
	r = rec(GPU_EV_ALLOC, GPU_API_cuMemCreate, 1, 1);
	assert_int_equal(decode(&st, sizeof(struct gpu_rec), &ev), 0);
	assert_true(ev.mem.handle);
	assert_false(ev.mem.async);
	r = rec(GPU_EV_ALLOC, GPU_API_cudaMallocManaged, 1, 1);
	assert_int_equal(decode(&st, sizeof(struct gpu_rec), &ev), 0);
	assert_true(ev.mem.managed);
	/* An unmatched free has no size, whatever the record holds. */
	r = rec(GPU_EV_FREE, GPU_API_cudaFree, 1, 1);
	r->args.mem.size = 77;
	r->flags = GPU_RF_UNMATCHED;
	assert_int_equal(decode(&st, sizeof(struct gpu_rec), &ev), 0);
	assert_int_equal(ev.mem.size, 0);
	assert_int_equal(ev.flags, GPU_RF_UNMATCHED);
	r = rec(GPU_EV_MEMCPY, GPU_API_cudaMemcpyAsync, 1, 1);
	r->args.copy.bytes = 100;
	r->args.copy.kind = 2;
	assert_int_equal(decode(&st, sizeof(struct gpu_rec), &ev), 0);
	assert_int_equal(ev.copy.bytes, 100);
	assert_int_equal(ev.copy.kind, 2);
	assert_true(ev.copy.async);
	r = rec(GPU_EV_CAPACITY, GPU_API_cudaMemGetInfo, 1, 1);
	r->args.capacity.total = 80ull << 30;
	r->args.capacity.free = 1ull << 30;
	assert_int_equal(decode(&st, sizeof(struct gpu_rec), &ev), 0);
	assert_int_equal(ev.capacity.total, 80ull << 30);
	assert_int_equal(ev.capacity.free, 1ull << 30);
	gpu_state__fini(&st);
}

static void test_nccl(void **state)
{
	struct gpu_state st;
	struct gpu_event ev;
	struct gpu_rec *r;

	gpu_state__init(&st);
	/* Before ncclCommInitRank is seen, the rank is unknown. */
	r = rec(GPU_EV_NCCL_END, GPU_API_ncclAllReduce, 5, 5);
	r->args.nccl.comm = 0xc0;
	r->args.nccl.count = 1000;
	r->args.nccl.datatype = 9; /* ncclBfloat16 */
	assert_int_equal(decode(&st, sizeof(rec_buf), &ev), 0);
	assert_int_equal(ev.nccl.coll, GPU_COLL_ALLREDUCE);
	assert_int_equal(ev.nccl.bytes, 2000);
	assert_int_equal(ev.nccl.rank, -1);
	/* A failed init teaches nothing. */
	r = rec(GPU_EV_NCCL_COMM, GPU_API_ncclCommInitRank, 5, 5);
	r->args.comm.comm = 0xc0;
	r->args.comm.rank = 9;
	r->args.comm.nranks = 16;
	r->ret = 1;
	assert_int_equal(decode(&st, sizeof(struct gpu_rec), &ev), 0);
	r = rec(GPU_EV_NCCL_COMM, GPU_API_ncclCommInitRankConfig, 5, 5);
	r->args.comm.comm = 0xc0;
	r->args.comm.rank = 3;
	r->args.comm.nranks = 8;
	assert_int_equal(decode(&st, sizeof(struct gpu_rec), &ev), 0);
	r = rec(GPU_EV_NCCL_BEGIN, GPU_API_ncclSend, 5, 6);
	r->args.nccl.comm = 0xc0;
	r->args.nccl.count = 10;
	r->args.nccl.datatype = 11; /* ncclFloat8e5m2 */
	r->args.nccl.peer = 4;
	assert_int_equal(decode(&st, sizeof(struct gpu_rec), &ev), 0);
	assert_int_equal(ev.nccl.coll, GPU_COLL_SEND);
	assert_int_equal(ev.nccl.bytes, 10);
	assert_int_equal(ev.nccl.peer, 4);
	assert_int_equal(ev.nccl.rank, 3);
	assert_int_equal(ev.nccl.nranks, 8);
	/* Unknown types and overflowing counts. */
	r = rec(GPU_EV_NCCL_END, GPU_API_ncclAllGather, 5, 5);
	r->args.nccl.datatype = 12;
	r->args.nccl.count = 10;
	assert_int_equal(decode(&st, sizeof(rec_buf), &ev), 0);
	assert_int_equal(ev.nccl.type_size, 0);
	assert_int_equal(ev.nccl.bytes, 0);
	r = rec(GPU_EV_NCCL_END, GPU_API_ncclAllGather, 5, 5);
	r->args.nccl.datatype = 8;
	r->args.nccl.count = UINT64_MAX / 4;
	assert_int_equal(decode(&st, sizeof(rec_buf), &ev), 0);
	assert_int_equal(ev.nccl.bytes, UINT64_MAX);
	/* Groups carry no type. */
	r = rec(GPU_EV_NCCL_GROUP, GPU_API_ncclGroupStart, 5, 5);
	assert_int_equal(decode(&st, sizeof(struct gpu_rec), &ev), 0);
	assert_int_equal(ev.nccl.coll, GPU_COLL_NONE);
	assert_int_equal(ev.nccl.type_size, 0);
	gpu_state__fini(&st);
}

static void test_blocked(void **state)
{
	struct gpu_state st;
	struct gpu_event ev;
	struct gpu_blocked *b;
	struct gpu_proc_ent *p;
	struct gpu_rec *r;

	gpu_state__init(&st);
	r = rec(GPU_EV_NCCL_BEGIN, GPU_API_ncclAllReduce, 7, 7);
	r->ts_ns = 500;
	r->args.nccl.comm = 0xc0;
	assert_int_equal(decode(&st, sizeof(struct gpu_rec), &ev), 0);
	r = rec(GPU_EV_NCCL_END, GPU_API_ncclAllReduce, 7, 7);
	assert_int_equal(decode(&st, sizeof(rec_buf), &ev), 0);
	assert_int_equal(st.blocked.n, 0);
	/* A thread of the process now waits on a stream. */
	r = rec(GPU_EV_SYNC_BEGIN, GPU_API_cudaStreamSynchronize, 7, 8);
	r->ts_ns = 900;
	r->args.sync.handle = 0x99;
	assert_int_equal(decode(&st, sizeof(struct gpu_rec), &ev), 0);
	assert_int_equal(st.blocked.n, 1);
	b = gpu_table__get(&st.blocked, 8, 0);
	assert_non_null(b);
	assert_int_equal(b->pid, 7);
	assert_int_equal(b->api, GPU_API_cudaStreamSynchronize);
	assert_int_equal(b->since_ns, 900);
	assert_int_equal(b->handle, 0x99);
	p = gpu_table__get(&st.procs, 7, 0);
	assert_non_null(p);
	assert_true(p->has_coll);
	assert_int_equal(p->coll, GPU_COLL_ALLREDUCE);
	assert_int_equal(p->comm, 0xc0);
	assert_int_equal(p->coll_ts_ns, 500);
	/* ncclGroupEnd blocks too, and is not a collective. */
	rec(GPU_EV_NCCL_BEGIN, GPU_API_ncclGroupEnd, 7, 9);
	assert_int_equal(decode(&st, sizeof(struct gpu_rec), &ev), 0);
	assert_int_equal(st.blocked.n, 2);
	assert_int_equal(p->coll, GPU_COLL_ALLREDUCE);
	rec(GPU_EV_NCCL_GROUP, GPU_API_ncclGroupEnd, 7, 9);
	assert_int_equal(decode(&st, sizeof(struct gpu_rec), &ev), 0);
	assert_int_equal(st.blocked.n, 1);
	rec(GPU_EV_SYNC_END, GPU_API_cudaStreamSynchronize, 7, 8);
	assert_int_equal(decode(&st, sizeof(rec_buf), &ev), 0);
	assert_int_equal(st.blocked.n, 0);
	/* A process that exits mid-wait leaves nothing behind. */
	rec(GPU_EV_SYNC_BEGIN, GPU_API_cuCtxSynchronize, 7, 8);
	assert_int_equal(decode(&st, sizeof(struct gpu_rec), &ev), 0);
	gpu_state__forget_pid(&st, 7);
	assert_int_equal(st.blocked.n, 0);
	assert_null(gpu_table__get(&st.procs, 7, 0));
	gpu_state__fini(&st);
}

/* PyTorch's record_function scopes: a begin carries its stack and names,
 * an end the duration; both the object they share. A begin without its
 * stack, or either from the other's probe, is malformed. */
static void test_record_function(void **state)
{
	struct gpu_state st;
	struct gpu_event ev;
	struct gpu_rec *r;

	gpu_state__init(&st);
	r = rec(GPU_EV_RF_BEGIN, GPU_API_torch_rf_begin, 40, 41);
	r->args.rf.obj = 0x5500;
	r->args.rf.start = 1000;
	r->nframes = 2;
	rec_buf.s.ips[0] = 0x401000;
	rec_buf.s.ips[1] = 1ull << 63 | 0x7f00;
	memcpy(rec_buf.s.comm, "python3", 8);
	memcpy(rec_buf.s.thread, "pt_main_thread", 15);
	assert_int_equal(decode(&st, sizeof(rec_buf), &ev), 0);
	assert_int_equal(ev.type, GPU_EV_RF_BEGIN);
	assert_int_equal(ev.pid, 40);
	assert_int_equal(ev.tid, 41);
	assert_int_equal(ev.rf.obj, 0x5500);
	assert_int_equal(ev.rf.start_ns, 1000);
	assert_int_equal(ev.nips, 2);
	assert_int_equal(ev.ips[1], 1ull << 63 | 0x7f00);
	assert_string_equal(ev.process, "python3");
	assert_string_equal(ev.thread, "pt_main_thread");
	assert_string_equal(ev.api_name, "at::RecordFunction::RecordFunction(at::RecordScope)");
	assert_non_null(gpu_table__get(&st.procs, 40, 0));

	r = rec(GPU_EV_RF_END, GPU_API_torch_rf_end, 40, 41);
	r->args.rf.obj = 0x5500;
	r->args.rf.start = 1000;
	r->dur_ns = 40000000;
	assert_int_equal(decode(&st, sizeof(struct gpu_rec), &ev), 0);
	assert_int_equal(ev.type, GPU_EV_RF_END);
	assert_int_equal(ev.rf.obj, 0x5500);
	assert_int_equal(ev.rf.start_ns, 1000);
	assert_int_equal(ev.dur_ns, 40000000);
	assert_int_equal(ev.nips, 0);

	rec(GPU_EV_RF_BEGIN, GPU_API_torch_rf_begin, 40, 41);
	assert_int_equal(decode(&st, sizeof(struct gpu_rec), &ev), -EINVAL);
	rec(GPU_EV_RF_END, GPU_API_torch_rf_begin, 40, 41);
	assert_int_equal(decode(&st, sizeof(rec_buf), &ev), -EINVAL);
	rec(GPU_EV_RF_BEGIN, GPU_API_torch_rf_end, 40, 41);
	assert_int_equal(decode(&st, sizeof(rec_buf), &ev), -EINVAL);
	assert_int_equal(st.bad_records, 3);
	gpu_state__fini(&st);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_api_table),
		cmocka_unit_test(test_type_sizes),
		cmocka_unit_test(test_table),
		cmocka_unit_test(test_malformed),
		cmocka_unit_test(test_launch),
		cmocka_unit_test(test_memory),
		cmocka_unit_test(test_nccl),
		cmocka_unit_test(test_blocked),
		cmocka_unit_test(test_record_function),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
