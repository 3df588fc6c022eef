/* test_gpu_probes.c: the GPU probes end to end in the real kernel, on the
 * paths the real libraries can't exercise without a GPU -- calls that
 * succeed. This executable defines functions with the names and x86-64
 * signatures of the CUDA runtime, driver and NCCL calls (a runtime call
 * calling the driver as libcudart does, __cudaLaunchKernel tail-calling
 * cudaLaunchKernel), so the probes find them in its .symtab as in a program
 * that links cudart statically. Checked: allocations matched to frees by
 * size and device, driver calls inside runtime calls reported once, the
 * device of a thread from cudaSetDevice and from a context, kernel names
 * from handles, blocked threads seen while they wait, communicator ranks,
 * the pid filter, and a process that exits holding memory. Needs root. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "probe/gpu_probes.h"
#include "probe/pid_filter.h"
#include "probe/libscan.h"
#include "probe/host.h"
#include "common/log.h"

/* ---- the fake API: real names, real signatures, calls that succeed ---- */

#define API __attribute__((noipa, used))

struct dim3 {
	unsigned x, y, z;
};

struct nccl_unique_id {
	char internal[128];
};

static volatile uint64_t sink;
static volatile int sync_ms;

API int cuMemAlloc_v2(uint64_t *dptr, size_t size)
{
	static uint64_t next = 0x7f0000000000ull;

	*dptr = __atomic_fetch_add(&next, 0x100000, __ATOMIC_RELAXED);
	sink = size;
	return 0;
}

API int cuMemFree_v2(uint64_t dptr)
{
	sink = dptr;
	return 0;
}

/* As libcudart does: the runtime call does its work through the driver. */
API int cudaMalloc(void **ptr, size_t size)
{
	uint64_t d;
	int rc = cuMemAlloc_v2(&d, size);

	*ptr = (void *)d;
	return rc;
}

API int cudaFree(void *ptr)
{
	return cuMemFree_v2((uint64_t)ptr);
}

API int cudaSetDevice(int dev)
{
	sink = dev;
	return 0;
}

API int cuDevicePrimaryCtxRetain(void **ctx, int dev)
{
	*ctx = (void *)(0xc0c0ull + dev);
	return 0;
}

API int cuCtxSetCurrent(void *ctx)
{
	sink = (uint64_t)ctx + 1;
	return 0;
}

API int __cudaGetKernel(void **handle, const void *stub)
{
	*handle = (void *)0x1234;
	sink = (uint64_t)stub;
	return 0;
}

API int cudaLaunchKernel(const void *func, struct dim3 grid, struct dim3 block, void **args,
			 size_t shmem, void *stream)
{
	sink = (uint64_t)func + grid.x + block.z + shmem + (uint64_t)stream + (uint64_t)args;
	return 0;
}

/* CUDA 13's launch entry point for <<<>>>, a tail call into the above. */
API int __cudaLaunchKernel(const void *func, struct dim3 grid, struct dim3 block, void **args,
			   size_t shmem, void *stream)
{
	return cudaLaunchKernel(func, grid, block, args, shmem, stream);
}

API int cuModuleGetFunction(void **func, void *module, const char *name)
{
	*func = (void *)0xf00d;
	sink = (uint64_t)module + name[0];
	return 0;
}

API int cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
		       unsigned bz, unsigned shmem, void *stream, void **params, void **extra)
{
	sink = (uint64_t)f + gx + gy + gz + bx + by + bz + shmem + (uint64_t)stream +
	       (uint64_t)params + (uint64_t)extra;
	return 0;
}

API int cudaStreamSynchronize(void *stream)
{
	usleep(sync_ms * 1000);
	sink = (uint64_t)stream;
	return 0;
}

API int ncclCommInitRank(void **comm, int nranks, struct nccl_unique_id id, int rank)
{
	*comm = (void *)0xcccc;
	sink = nranks + rank + id.internal[0];
	return 0;
}

API int ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count, int datatype, int op,
		      void *comm, void *stream)
{
	sink = (uint64_t)sendbuff + (uint64_t)recvbuff + count + datatype + op + (uint64_t)comm +
	       (uint64_t)stream;
	return 0;
}

/* A host stub, as nvcc generates one per kernel. */
API void sonde_fake_kernel_stub(void)
{
	sink = 1;
}

/* ---- the probes -------------------------------------------------------- */

#define MAX_EVENTS 256

struct seen {
	struct gpu_event ev[MAX_EVENTS];
	uint64_t ip0[MAX_EVENTS];
	int n;
};

static struct gpu_probes *gp;
static struct seen seen;

static void on_event(void *ctx, const struct gpu_event *ev)
{
	struct seen *s = ctx;

	if (s->n == MAX_EVENTS)
		return;
	s->ev[s->n] = *ev;
	s->ip0[s->n] = ev->nips ? ev->ips[0] : 0;
	s->ev[s->n].ips = NULL; /* not valid after the callback */
	s->n++;
}

static uint32_t gettid_(void)
{
	return syscall(SYS_gettid);
}

static void drain(void)
{
	assert_true(gpu_probes__poll(gp, 0) >= 0);
}

/* The events of a type and api since index from, for thread tid (0: any). */
static int find(int from, enum gpu_ev_type type, enum gpu_api api, uint32_t tid, int *count)
{
	int idx = -1, n = 0;

	for (int i = from; i < seen.n; i++)
		if (seen.ev[i].type == type && seen.ev[i].api == api &&
		    (!tid || seen.ev[i].tid == tid)) {
			if (idx < 0)
				idx = i;
			n++;
		}
	if (count)
		*count = n;
	return idx;
}

static const struct gpu_event *only(int from, enum gpu_ev_type type, enum gpu_api api, uint32_t tid)
{
	int n, i = find(from, type, api, tid, &n);

	if (n != 1)
		fail_msg("%d events of type %d from %s, expected 1", n, type, gpu_api_name(api));
	return &seen.ev[i];
}

static int setup(void **state)
{
	struct gpu_probes_opts opts = {.user_stacks = true};
	int n;

	gp = gpu_probes__open(&opts, on_event, &seen);
	if (!gp)
		return -1;
	n = gpu_probes__scan_pid(gp, getpid());
	if (n != 1) {
		fprintf(stderr, "scan of this executable attached %d files, expected 1\n", n);
		return -1;
	}
	return 0;
}

static int teardown(void **state)
{
	gpu_probes__free(gp);
	return 0;
}

static void test_attached(void **state)
{
	struct gpu_probes_stats st;

	gpu_probes__stats(gp, &st);
	assert_int_equal(st.files, 1);
	/* Every fake function, from the three families, and nothing else. */
	assert_int_equal(st.probes_attached, 15);
	assert_int_equal(st.probes_failed, 0);
	/* Found again: nothing new. */
	assert_int_equal(gpu_probes__scan_pid(gp, getpid()), 0);
}

static void test_memory(void **state)
{
	struct gpu_probes_stats before, after;
	uint32_t tid = gettid_();
	const struct gpu_event *ev;
	void *p = NULL, *q = NULL;
	uint64_t d = 0;
	int from = seen.n;

	gpu_probes__stats(gp, &before);
	assert_int_equal(cudaSetDevice(2), 0);
	assert_int_equal(cudaMalloc(&p, 1000), 0);
	assert_int_equal(cudaMalloc(&q, 3000), 0);
	assert_int_equal(cuMemAlloc_v2(&d, 5000), 0);
	assert_int_equal(cudaFree(p), 0);
	assert_int_equal(cudaFree((void *)0xbad0000), 0);
	assert_int_equal(cuMemFree_v2(d), 0);
	assert_int_equal(cudaFree(NULL), 0);
	drain();

	ev = only(from, GPU_EV_DEVICE, GPU_API_cudaSetDevice, tid);
	assert_int_equal(ev->device, 2);
	/* The runtime's allocations, once each: not again through the
	 * driver calls they make. */
	assert_int_equal(find(from, GPU_EV_ALLOC, GPU_API_cudaMalloc, tid, NULL) >= 0, 1);
	{
		int n;

		find(from, GPU_EV_ALLOC, GPU_API_cudaMalloc, tid, &n);
		assert_int_equal(n, 2);
	}
	ev = &seen.ev[find(from, GPU_EV_ALLOC, GPU_API_cudaMalloc, tid, NULL)];
	assert_int_equal(ev->mem.addr, (uint64_t)p);
	assert_int_equal(ev->mem.size, 1000);
	assert_int_equal(ev->device, 2);
	assert_int_equal(ev->ret, 0);
	assert_false(ev->flags & GPU_RF_DEVICE_GUESSED);
	ev = only(from, GPU_EV_ALLOC, GPU_API_cuMemAlloc_v2, tid);
	assert_int_equal(ev->mem.addr, d);
	assert_int_equal(ev->mem.size, 5000);
	assert_int_equal(ev->device, 2);

	/* Frees carry their allocation's size and device. */
	ev = &seen.ev[find(from, GPU_EV_FREE, GPU_API_cudaFree, tid, NULL)];
	assert_int_equal(ev->mem.addr, (uint64_t)p);
	assert_int_equal(ev->mem.size, 1000);
	assert_int_equal(ev->device, 2);
	assert_false(ev->flags & GPU_RF_UNMATCHED);
	ev = &seen.ev[find(find(from, GPU_EV_FREE, GPU_API_cudaFree, tid, NULL) + 1, GPU_EV_FREE,
			   GPU_API_cudaFree, tid, NULL)];
	assert_int_equal(ev->mem.addr, 0xbad0000);
	assert_int_equal(ev->mem.size, 0);
	assert_true(ev->flags & GPU_RF_UNMATCHED);
	ev = only(from, GPU_EV_FREE, GPU_API_cuMemFree_v2, tid);
	assert_int_equal(ev->mem.size, 5000);

	gpu_probes__stats(gp, &after);
	assert_int_equal(after.counts[GPU_CNT_UNMATCHED] - before.counts[GPU_CNT_UNMATCHED],
			 1); /* not cudaFree(NULL) */
	/* cuMemAlloc_v2 in each cudaMalloc, cuMemFree_v2 in each cudaFree. */
	assert_int_equal(after.counts[GPU_CNT_DEDUP] - before.counts[GPU_CNT_DEDUP], 2 + 3);
	assert_int_equal(after.allocs_live - before.allocs_live, 1); /* q */
	assert_int_equal(cudaFree(q), 0);
	gpu_probes__stats(gp, &after);
	assert_int_equal(after.allocs_live, before.allocs_live);
}

static void *context_thread(void *arg)
{
	uint64_t *out = arg;
	void *ctx = NULL;

	out[0] = gettid_();
	cuDevicePrimaryCtxRetain(&ctx, 3);
	cuCtxSetCurrent(ctx);
	cuMemAlloc_v2(&out[1], 64);
	cuMemFree_v2(out[1]);
	return NULL;
}

static void *fresh_thread(void *arg)
{
	uint64_t *out = arg;

	out[0] = gettid_();
	cuMemAlloc_v2(&out[1], 128);
	cuMemFree_v2(out[1]);
	return NULL;
}

static void test_device_of_context(void **state)
{
	uint64_t a[2], b[2];
	const struct gpu_event *ev;
	pthread_t t;
	int from = seen.n;

	pthread_create(&t, NULL, context_thread, a);
	pthread_join(t, NULL);
	pthread_create(&t, NULL, fresh_thread, b);
	pthread_join(t, NULL);
	drain();
	ev = only(from, GPU_EV_DEVICE, GPU_API_cuDevicePrimaryCtxRetain, a[0]);
	assert_int_equal(ev->ctx.ctx, 0xc0c3);
	assert_int_equal(ev->device, 3);
	ev = only(from, GPU_EV_DEVICE, GPU_API_cuCtxSetCurrent, a[0]);
	assert_int_equal(ev->device, 3);
	ev = only(from, GPU_EV_ALLOC, GPU_API_cuMemAlloc_v2, a[0]);
	assert_int_equal(ev->device, 3);
	assert_false(ev->flags & GPU_RF_DEVICE_GUESSED);
	ev = only(from, GPU_EV_FREE, GPU_API_cuMemFree_v2, a[0]);
	assert_int_equal(ev->device, 3);
	assert_int_equal(ev->mem.size, 64);
	/* A thread that chose nothing is on device 0, and says it guessed. */
	ev = only(from, GPU_EV_ALLOC, GPU_API_cuMemAlloc_v2, b[0]);
	assert_int_equal(ev->device, 0);
	assert_true(ev->flags & GPU_RF_DEVICE_GUESSED);
}

static void test_launches(void **state)
{
	struct gpu_probes_stats before, after;
	uint32_t tid = gettid_();
	const struct gpu_event *ev;
	void *h = NULL, *f = NULL;
	const char *name;
	uint64_t stub;
	int from = seen.n;

	gpu_probes__stats(gp, &before);
	assert_int_equal(__cudaGetKernel(&h, (const void *)sonde_fake_kernel_stub), 0);
	assert_int_equal(__cudaLaunchKernel(h, (struct dim3){3, 5, 7}, (struct dim3){32, 2, 1},
					    NULL, 1024, (void *)0x33),
			 0);
	assert_int_equal(cuModuleGetFunction(&f, (void *)0x3d, "my_kernel"), 0);
	assert_int_equal(cuLaunchKernel(f, 1, 2, 3, 4, 5, 6, 7, (void *)0x44, NULL, NULL), 0);
	drain();
	gpu_probes__stats(gp, &after);

	ev = only(from, GPU_EV_KERNEL_STUB, GPU_API___cudaGetKernel, tid);
	assert_int_equal(ev->kernel.handle, 0x1234);
	assert_int_equal(ev->kernel.stub, (uint64_t)sonde_fake_kernel_stub);
	/* The tail call is one launch, reported by the outer function. */
	assert_int_equal(find(from, GPU_EV_LAUNCH, GPU_API_cudaLaunchKernel, tid, NULL), -1);
	ev = only(from, GPU_EV_LAUNCH, GPU_API___cudaLaunchKernel, tid);
	assert_int_equal(after.counts[GPU_CNT_NESTED] - before.counts[GPU_CNT_NESTED], 1);
	assert_int_equal(ev->launch.func, 0x1234);
	assert_int_equal(ev->launch.stub, (uint64_t)sonde_fake_kernel_stub);
	assert_int_equal(ev->launch.grid[0], 3);
	assert_int_equal(ev->launch.grid[1], 5);
	assert_int_equal(ev->launch.grid[2], 7);
	assert_int_equal(ev->launch.block[0], 32);
	assert_int_equal(ev->launch.block[1], 2);
	assert_int_equal(ev->launch.block[2], 1);
	assert_int_equal(ev->launch.shmem, 1024);
	assert_int_equal(ev->launch.stream, 0x33);
	assert_true(ev->dur_ns > 0);
	assert_true(ev->nips > 1);
	/* The leaf is in this function, where the call returned. */
	assert_true(seen.ip0[ev - seen.ev] > (uint64_t)test_launches &&
		    seen.ip0[ev - seen.ev] < (uint64_t)test_launches + 4096);

	ev = only(from, GPU_EV_KERNEL_NAME, GPU_API_cuModuleGetFunction, tid);
	assert_int_equal(ev->kernel.handle, 0xf00d);
	assert_string_equal(ev->kernel.name, "my_kernel");
	ev = only(from, GPU_EV_LAUNCH, GPU_API_cuLaunchKernel, tid);
	assert_string_equal(ev->launch.name, "my_kernel");
	assert_int_equal(ev->launch.grid[2], 3);
	assert_int_equal(ev->launch.block[0], 4);
	assert_int_equal(ev->launch.block[1], 5);
	assert_int_equal(ev->launch.block[2], 6);
	assert_int_equal(ev->launch.shmem, 7);
	assert_int_equal(ev->launch.stream, 0x44);
	assert_int_equal(gpu_probes__kernel(gp, getpid(), 0xf00d, &stub, &name), 0);
	assert_string_equal(name, "my_kernel");
	assert_int_equal(gpu_probes__kernel(gp, getpid(), 0x1234, &stub, &name), 0);
	assert_int_equal(stub, (uint64_t)sonde_fake_kernel_stub);
	assert_int_equal(gpu_probes__kernel(gp, getpid(), 0x999, &stub, &name), -ENOENT);
}

struct blocked_view {
	uint32_t tid;
	int found;
	struct gpu_blocked b;
};

static void on_blocked(void *ctx, const struct gpu_blocked *b)
{
	struct blocked_view *v = ctx;

	if (b->tid == v->tid) {
		v->found++;
		v->b = *b;
	}
}

static void *sync_thread(void *arg)
{
	uint64_t *tid = arg;

	*tid = gettid_();
	cudaStreamSynchronize((void *)0x99);
	return NULL;
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void test_blocked_after_collective(void **state)
{
	struct nccl_unique_id id = {{1}};
	struct blocked_view v = {0};
	const struct gpu_event *ev;
	void *comm = NULL;
	volatile uint64_t tid = 0;
	pthread_t t;
	double t0;
	int from = seen.n;

	assert_int_equal(ncclCommInitRank(&comm, 8, id, 3), 0);
	assert_int_equal(ncclAllReduce((void *)0x10, (void *)0x20, 1000, 9, 0, comm, (void *)0x5),
			 0);
	drain();
	ev = only(from, GPU_EV_NCCL_COMM, GPU_API_ncclCommInitRank, gettid_());
	assert_int_equal(ev->comm.comm, 0xcccc);
	assert_int_equal(ev->comm.rank, 3);
	assert_int_equal(ev->comm.nranks, 8);
	ev = only(from, GPU_EV_NCCL_END, GPU_API_ncclAllReduce, gettid_());
	assert_int_equal(ev->nccl.bytes, 2000);
	assert_int_equal(ev->nccl.rank, 3);
	assert_int_equal(ev->nccl.nranks, 8);

	/* A thread now waits: it is seen blocked while it waits. */
	sync_ms = 400;
	pthread_create(&t, NULL, sync_thread, (void *)&tid);
	t0 = now_s();
	while (!v.found && now_s() - t0 < 0.3) {
		usleep(10 * 1000);
		drain();
		v.tid = tid;
		gpu_probes__each_blocked(gp, on_blocked, &v);
	}
	assert_int_equal(v.found, 1);
	assert_int_equal(v.b.pid, getpid());
	assert_int_equal(v.b.api, GPU_API_cudaStreamSynchronize);
	assert_int_equal(v.b.handle, 0x99);
	assert_true(v.b.has_coll);
	assert_int_equal(v.b.coll, GPU_COLL_ALLREDUCE);
	assert_int_equal(v.b.comm, 0xcccc);
	assert_int_equal(v.b.rank, 3);
	assert_int_equal(v.b.nranks, 8);
	pthread_join(t, NULL);
	sync_ms = 0;
	drain();
	ev = only(from, GPU_EV_SYNC_END, GPU_API_cudaStreamSynchronize, tid);
	assert_true(ev->dur_ns >= 400 * 1000000ull);
	v.found = 0;
	gpu_probes__each_blocked(gp, on_blocked, &v);
	assert_int_equal(v.found, 0);
}

static int filtered_events;

static int find_exe_text(void *ctx, const struct libscan_map *m)
{
	char exe[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);

	if (n <= 0 || m->perms[2] != 'x')
		return 0;
	exe[n] = 0;
	if (strcmp(m->path, exe))
		return 0;
	snprintf(ctx, PATH_MAX, "/proc/self/map_files/%" PRIx64 "-%" PRIx64, m->start, m->end);
	return 1;
}

/* /proc/self/map_files/START-END of this executable's text. */
static const char *exe_map_files(void)
{
	static char path[PATH_MAX];

	assert_int_equal(libscan_each_map(getpid(), find_exe_text, path), 1);
	return path;
}

static void count_event(void *ctx, const struct gpu_event *ev)
{
	filtered_events++;
}

static void test_pid_filter(void **state)
{
	struct pid_filter *pf = pid_filter__new();
	struct gpu_probes_opts opts = {.pid_filter = pf};
	struct gpu_probes_stats st;
	struct gpu_probes *other;
	void *p;

	assert_non_null(pf);
	other = gpu_probes__open(&opts, count_event, NULL);
	assert_non_null(other);
	assert_int_equal(gpu_probes__scan(other), 0); /* no pid in the filter: nothing */
	/* Through map_files, as the scan names a file of another mount
	 * namespace or a deleted one. */
	assert_int_equal(gpu_probes__attach_path(other, exe_map_files()), 1);
	cudaMalloc(&p, 10);
	cudaFree(p);
	assert_true(gpu_probes__poll(other, 0) >= 0);
	assert_int_equal(filtered_events, 0);
	gpu_probes__stats(other, &st);
	assert_true(st.counts[GPU_CNT_FILTERED] >= 2);
	assert_int_equal(pid_filter__add(pf, getpid()), 0);
	cudaMalloc(&p, 10);
	cudaFree(p);
	assert_true(gpu_probes__poll(other, 0) >= 0);
	assert_int_equal(filtered_events, 2);
	gpu_probes__free(other);
	pid_filter__free(pf);
	drain();
}

static void test_process_exit(void **state)
{
	struct gpu_probes_stats before, after;
	const struct gpu_event *ev;
	int status, from;
	pid_t pid;

	drain();
	from = seen.n;
	gpu_probes__stats(gp, &before);
	pid = fork();
	if (pid == 0) {
		void *p;

		cudaSetDevice(1);
		cudaMalloc(&p, 12345);
		_exit(0); /* without freeing: the driver frees at exit */
	}
	waitpid(pid, &status, 0);
	drain();
	ev = only(from, GPU_EV_ALLOC, GPU_API_cudaMalloc, pid);
	assert_int_equal(ev->pid, pid);
	assert_int_equal(ev->device, 1);
	gpu_probes__stats(gp, &after);
	assert_int_equal(after.allocs_live - before.allocs_live, 1);
	assert_true(gpu_probes__scan_pid(gp, getpid()) >= 0);
	assert_true(gpu_probes__scan(gp) >= 0);
	ev = only(from, GPU_EV_PROCESS_EXIT, GPU_API_NONE, 0);
	assert_int_equal(ev->pid, pid);
	gpu_probes__stats(gp, &after);
	assert_int_equal(after.allocs_live, before.allocs_live);
}

static void test_health(void **state)
{
	struct gpu_probes_stats st;

	drain();
	gpu_probes__stats(gp, &st);
	assert_int_equal(st.drops_total, 0);
	assert_int_equal(st.bad_records, 0);
	assert_int_equal(st.counts[GPU_CNT_EVENTS], st.received);
	assert_int_equal(st.counts[GPU_CNT_NO_ENTRY], 0);
	assert_int_equal(st.counts[GPU_CNT_OVERWRITE], 0);
	assert_int_equal(st.inflight_live, 0);
	assert_true(st.map_fill < 0.01);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_attached),
		cmocka_unit_test(test_memory),
		cmocka_unit_test(test_device_of_context),
		cmocka_unit_test(test_launches),
		cmocka_unit_test(test_blocked_after_collective),
		cmocka_unit_test(test_pid_filter),
		cmocka_unit_test(test_process_exit),
		cmocka_unit_test(test_health),
	};

	log_init();
	if (geteuid() != 0) {
		printf("SKIP: the GPU probes test loads BPF programs: needs root\n");
		return 77;
	}
	if (access("/sys/kernel/btf/vmlinux", R_OK)) {
		printf("SKIP: the kernel has no BTF (/sys/kernel/btf/vmlinux)\n");
		return 77;
	}
	return cmocka_run_group_tests(tests, setup, teardown);
}
