/* gpu_probe_dump.c: test harness of the GPU probes (not a product command).
 * Opens src/agent/gpu_probes with a pid filter that follows children,
 * starts CMD with its stdin and stdout on pipes, waits for CMD to print
 * "ready" (its libraries are loaded), scans it -- the same discovery the
 * agent runs -- and writes "go" to it, then drains events until it exits.
 * Its execs and mappings reach the symbolizer from the kernel's records
 * (src/probe/sideband.h), as in the agent, so that the stubs of a job that
 * exits before its events are read are still named.
 * Prints one JSON object per event on stdout (stacks and kernel stubs
 * symbolized), then {"type": "probes", ...} per attached symbol and a final
 * {"type": "stats", ...}. Used by tests/integration/test_gpu_real_*.py.
 *
 *   gpu-probe-dump [-a PATH]... [-n] [-t SECONDS] -- CMD [ARG]...
 *
 * -a attaches PATH before CMD starts (as `sonde record` may do);
 * -n: CMD does not say "ready" -- run it at once (with -a, or for a static
 * executable scanned after its start); -t bounds the run (default 60 s). */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "probe/gpu_probes.h"
#include "probe/pid_filter.h"
#include "probe/sideband.h"
#include "common/log.h"
#include "symbolize/symbolize.h"

struct dump {
	struct symbolizer *sym;
	uint32_t child;
	uint64_t events;
	uint32_t tracked[64]; /* pids whose mappings were read at their first event */
	int ntracked;
};

static const char *const type_names[GPU_EV_MAX] = {
	[GPU_EV_LAUNCH] = "launch",
	[GPU_EV_ALLOC] = "alloc",
	[GPU_EV_FREE] = "free",
	[GPU_EV_SYNC_BEGIN] = "sync_begin",
	[GPU_EV_SYNC_END] = "sync_end",
	[GPU_EV_MEMCPY] = "memcpy",
	[GPU_EV_NCCL_BEGIN] = "nccl_begin",
	[GPU_EV_NCCL_END] = "nccl_end",
	[GPU_EV_NCCL_GROUP] = "nccl_group",
	[GPU_EV_NCCL_COMM] = "nccl_comm",
	[GPU_EV_KERNEL_STUB] = "kernel_stub",
	[GPU_EV_KERNEL_NAME] = "kernel_name",
	[GPU_EV_DEVICE] = "device",
	[GPU_EV_CAPACITY] = "capacity",
	[GPU_EV_GRAPH] = "graph",
	[GPU_EV_PROCESS_EXIT] = "process_exit",
};

static void set_u64(json_t *o, const char *k, uint64_t v)
{
	/* JSON integers are signed 64-bit here; addresses fit. */
	json_object_set_new(o, k, json_integer((json_int_t)v));
}

static json_t *u32_array(const uint32_t *v, int n)
{
	json_t *a = json_array();

	for (int i = 0; i < n; i++)
		json_array_append_new(a, json_integer(v[i]));
	return a;
}

static json_t *symbolize(struct dump *d, uint32_t pid, uint64_t addr)
{
	struct sym_info info;
	char buf[512];

	symbolizer__resolve_user(d->sym, pid, addr, &info);
	return json_string(sym_info__name(&info, buf, sizeof(buf)));
}

static void on_event(void *ctx, const struct gpu_event *ev)
{
	struct dump *d = ctx;
	json_t *o = json_object(), *a;
	char *s;
	int i;

	d->events++;
	/* Read a process's mappings at its first event: by then it has
	 * exec'ed and loaded its libraries. */
	for (i = 0; i < d->ntracked && d->tracked[i] != ev->pid; i++)
		;
	if (i == d->ntracked && i < 64) {
		d->tracked[d->ntracked++] = ev->pid;
		symbolizer__track_pid(d->sym, ev->pid, true);
	}
	json_object_set_new(o, "type",
			    json_string(type_names[ev->type] ? type_names[ev->type] : "?"));
	json_object_set_new(o, "api", json_string(ev->api_name));
	json_object_set_new(o, "pid", json_integer(ev->pid));
	json_object_set_new(o, "tid", json_integer(ev->tid));
	set_u64(o, "ts", ev->ts_ns);
	set_u64(o, "dur", ev->dur_ns);
	json_object_set_new(o, "ret", json_integer(ev->ret));
	json_object_set_new(o, "device", json_integer(ev->device));
	json_object_set_new(o, "flags", json_integer(ev->flags));
	switch (ev->type) {
	case GPU_EV_LAUNCH:
		set_u64(o, "func", ev->launch.func);
		set_u64(o, "stub", ev->launch.stub);
		if (ev->launch.stub)
			json_object_set_new(o, "kernel", symbolize(d, ev->pid, ev->launch.stub));
		if (ev->launch.name)
			json_object_set_new(o, "name", json_string(ev->launch.name));
		json_object_set_new(o, "grid", u32_array(ev->launch.grid, 3));
		json_object_set_new(o, "block", u32_array(ev->launch.block, 3));
		set_u64(o, "shmem", ev->launch.shmem);
		set_u64(o, "stream", ev->launch.stream);
		json_object_set_new(o, "graph", json_boolean(ev->launch.graph));
		break;
	case GPU_EV_ALLOC:
	case GPU_EV_FREE:
		set_u64(o, "addr", ev->mem.addr);
		set_u64(o, "size", ev->mem.size);
		set_u64(o, "stream", ev->mem.stream);
		set_u64(o, "out", ev->mem.out);
		json_object_set_new(o, "managed", json_boolean(ev->mem.managed));
		json_object_set_new(o, "is_async", json_boolean(ev->mem.async));
		json_object_set_new(o, "handle", json_boolean(ev->mem.handle));
		break;
	case GPU_EV_SYNC_BEGIN:
	case GPU_EV_SYNC_END:
		set_u64(o, "handle", ev->sync.handle);
		break;
	case GPU_EV_MEMCPY:
		set_u64(o, "dst", ev->copy.dst);
		set_u64(o, "src", ev->copy.src);
		set_u64(o, "bytes", ev->copy.bytes);
		set_u64(o, "stream", ev->copy.stream);
		json_object_set_new(o, "kind", json_integer(ev->copy.kind));
		json_object_set_new(o, "is_async", json_boolean(ev->copy.async));
		break;
	case GPU_EV_NCCL_BEGIN:
	case GPU_EV_NCCL_END:
	case GPU_EV_NCCL_GROUP:
		json_object_set_new(o, "coll", json_string(gpu_coll_name(ev->nccl.coll)));
		set_u64(o, "count", ev->nccl.count);
		set_u64(o, "bytes", ev->nccl.bytes);
		json_object_set_new(o, "datatype", json_integer(ev->nccl.datatype));
		json_object_set_new(o, "type_size", json_integer(ev->nccl.type_size));
		json_object_set_new(o, "redop", json_integer(ev->nccl.redop));
		json_object_set_new(o, "peer", json_integer(ev->nccl.peer));
		set_u64(o, "comm", ev->nccl.comm);
		set_u64(o, "stream", ev->nccl.stream);
		set_u64(o, "sendbuff", ev->nccl.sendbuff);
		set_u64(o, "recvbuff", ev->nccl.recvbuff);
		json_object_set_new(o, "rank", json_integer(ev->nccl.rank));
		json_object_set_new(o, "nranks", json_integer(ev->nccl.nranks));
		break;
	case GPU_EV_NCCL_COMM:
		set_u64(o, "comm", ev->comm.comm);
		json_object_set_new(o, "rank", json_integer(ev->comm.rank));
		json_object_set_new(o, "nranks", json_integer(ev->comm.nranks));
		break;
	case GPU_EV_KERNEL_STUB:
	case GPU_EV_KERNEL_NAME:
		set_u64(o, "handle", ev->kernel.handle);
		set_u64(o, "stub", ev->kernel.stub);
		if (ev->kernel.name)
			json_object_set_new(o, "name", json_string(ev->kernel.name));
		break;
	case GPU_EV_DEVICE:
		set_u64(o, "ctx", ev->ctx.ctx);
		break;
	case GPU_EV_CAPACITY:
		set_u64(o, "total", ev->capacity.total);
		set_u64(o, "free", ev->capacity.free);
		break;
	case GPU_EV_GRAPH:
		json_object_set_new(
			o, "op",
			json_string(ev->graph.op == GPU_GRAPH_CAPTURE_BEGIN ? "capture_begin"
				    : ev->graph.op == GPU_GRAPH_CAPTURE_END ? "capture_end"
				    : ev->graph.op == GPU_GRAPH_ADD_KERNEL  ? "add_kernel"
									    : "instantiate"));
		set_u64(o, "stream", ev->graph.stream);
		set_u64(o, "graph", ev->graph.graph);
		set_u64(o, "exec", ev->graph.exec);
		if (ev->graph.op == GPU_GRAPH_ADD_KERNEL) {
			set_u64(o, "func", ev->graph.func);
			set_u64(o, "stub", ev->graph.stub);
			if (ev->graph.name)
				json_object_set_new(o, "name", json_string(ev->graph.name));
		}
		break;
	default:
		break;
	}
	if (ev->nips || ev->stack_err) {
		a = json_array();
		for (int i = 0; i < ev->nips; i++)
			json_array_append_new(a, symbolize(d, ev->pid, ev->ips[i]));
		json_object_set_new(o, "stack", a);
		json_object_set_new(o, "stack_err", json_integer(ev->stack_err));
	}
	s = json_dumps(o, JSON_COMPACT);
	if (s)
		printf("%s\n", s);
	free(s);
	json_decref(o);
}

static void on_probe(void *ctx, const struct gpu_probe_info *p)
{
	json_t *o = json_object();
	char *s;

	json_object_set_new(o, "type", json_string("probe"));
	json_object_set_new(o, "path", json_string(p->path));
	json_object_set_new(o, "symbol", json_string(p->symbol));
	set_u64(o, "offset", p->offset);
	json_object_set_new(o, "err", json_integer(p->err));
	if (p->alias_of)
		json_object_set_new(o, "alias_of", json_string(p->alias_of));
	s = json_dumps(o, JSON_COMPACT);
	if (s)
		printf("%s\n", s);
	free(s);
	json_decref(o);
}

static void print_stats(struct gpu_probes *gp, const struct sideband *sb)
{
	struct sideband_stats sst;
	struct gpu_probes_stats st;
	json_t *o = json_object(), *drops = json_object();
	char *s;

	gpu_probes__stats(gp, &st);
	json_object_set_new(o, "type", json_string("stats"));
	set_u64(o, "events", st.counts[GPU_CNT_EVENTS]);
	set_u64(o, "received", st.received);
	set_u64(o, "bad_records", st.bad_records);
	for (int d = 0; d < GPU_DROP_MAX; d++)
		set_u64(drops, gpu_drop_name(d), st.drops[d]);
	json_object_set_new(o, "drops", drops);
	set_u64(o, "filtered", st.counts[GPU_CNT_FILTERED]);
	set_u64(o, "dedup", st.counts[GPU_CNT_DEDUP]);
	set_u64(o, "no_entry", st.counts[GPU_CNT_NO_ENTRY]);
	set_u64(o, "overwrite", st.counts[GPU_CNT_OVERWRITE]);
	set_u64(o, "nested", st.counts[GPU_CNT_NESTED]);
	set_u64(o, "unmatched", st.counts[GPU_CNT_UNMATCHED]);
	set_u64(o, "allocs_live", st.allocs_live);
	set_u64(o, "inflight_live", st.inflight_live);
	json_object_set_new(o, "map_fill", json_real(st.map_fill));
	json_object_set_new(o, "files", json_integer(st.files));
	json_object_set_new(o, "probes_attached", json_integer(st.probes_attached));
	json_object_set_new(o, "probes_failed", json_integer(st.probes_failed));
	/* The kernel's process records lost to a full ring: a workload's
	 * mappings then come from /proc (symbolize/procs.c). */
	sideband__stats(sb, &sst);
	set_u64(o, "process_records_lost", sst.lost);
	s = json_dumps(o, JSON_COMPACT);
	if (s)
		printf("%s\n", s);
	free(s);
	json_decref(o);
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void usage(void)
{
	fprintf(stderr, "usage: gpu-probe-dump [-a PATH]... [-n] [-t SECONDS] -- CMD [ARG]...\n");
	exit(2);
}

int main(int argc, char **argv)
{
	struct pid_filter *pf = pid_filter__new();
	struct gpu_probes_opts opts = {
		.pid_filter = pf,
		.follow_children = true,
		.user_stacks = true,
	};
	struct dump d = {0};
	struct sideband_opts sbo = {.filter_pids = true};
	struct sideband *sb;
	struct gpu_probes *gp;
	const char *attach[16];
	int nattach = 0, to_child[2], from_child[2], status = 0, opt, err;
	bool handshake = true;
	double timeout = 60, deadline;
	char buf[256];
	ssize_t n;
	pid_t pid;

	log_init();
	while ((opt = getopt(argc, argv, "+a:nt:")) != -1) {
		switch (opt) {
		case 'n':
			handshake = false;
			break;
		case 'a':
			if (nattach == 16)
				usage();
			attach[nattach++] = optarg;
			break;
		case 't':
			timeout = atof(optarg);
			break;
		default:
			usage();
		}
	}
	if (optind >= argc)
		usage();
	signal(SIGPIPE, SIG_IGN);
	d.sym = symbolizer__new();
	sb = sideband__open(&sbo, d.sym);
	gp = sb ? gpu_probes__open(&opts, on_event, &d) : NULL;
	if (!gp)
		return 1;
	for (int i = 0; i < nattach; i++) {
		err = gpu_probes__attach_path(gp, attach[i]);
		if (err < 0)
			fprintf(stderr, "gpu-probe-dump: can't attach %s: %s\n", attach[i],
				strerror(-err));
	}

	if (pipe(to_child) || pipe(from_child)) {
		perror("pipe");
		return 1;
	}
	pid = fork();
	if (pid < 0) {
		perror("fork");
		return 1;
	}
	if (pid == 0) {
		char c;

		dup2(to_child[0], 0);
		dup2(from_child[1], 1);
		close(to_child[1]);
		close(from_child[0]);
		/* Exec once the records of this pid are followed. */
		if (read(0, &c, 1) != 1)
			_exit(127);
		execvp(argv[optind], argv + optind);
		fprintf(stderr, "gpu-probe-dump: can't run %s: %s\n", argv[optind],
			strerror(errno));
		_exit(127);
	}
	close(to_child[0]);
	close(from_child[1]);
	d.child = pid;
	sideband__add_pid(sb, pid);
	pid_filter__add(pf, pid);
	if (write(to_child[1], "x", 1) != 1)
		perror("write");

	/* Wait for "ready": the child has mapped its libraries. */
	n = handshake ? read(from_child[0], buf, sizeof(buf) - 1) : 5;
	if (handshake && (n <= 0 || strncmp(buf, "ready", 5))) {
		fprintf(stderr, "gpu-probe-dump: %s did not say ready\n", argv[optind]);
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		return 1;
	}
	if (handshake) {
		/* Its libraries are loaded and it waits: read its mappings now,
		 * it may be gone by the time its events are decoded. */
		symbolizer__track_pid(d.sym, pid, true);
		d.tracked[d.ntracked++] = pid;
	}
	err = gpu_probes__scan(gp);
	if (err < 0)
		fprintf(stderr, "gpu-probe-dump: scan failed: %s\n", strerror(-err));
	if (write(to_child[1], "go\n", 3) != 3)
		perror("write");
	close(to_child[1]);

	deadline = now_s() + timeout;
	for (;;) {
		struct pollfd pfd = {.fd = from_child[0], .events = POLLIN};
		pid_t w;

		/* The mappings, then the events of the processes that made them. */
		sideband__poll(sb);
		gpu_probes__poll(gp, 0);
		/* Forward what the child prints, so that the test log has it. */
		if (poll(&pfd, 1, 10) > 0) {
			n = read(from_child[0], buf, sizeof(buf));
			if (n > 0 && write(2, buf, n) < 0)
				break;
		}
		w = waitpid(pid, &status, WNOHANG);
		if (w == pid)
			break;
		if (now_s() > deadline) {
			fprintf(stderr, "gpu-probe-dump: %s still running after %.0f s, killed\n",
				argv[optind], timeout);
			kill(pid, SIGKILL);
			waitpid(pid, &status, 0);
			break;
		}
	}
	/* The rest of what it printed (its pipe may outlive it in children,
	 * so don't wait for the end of file). */
	fcntl(from_child[0], F_SETFL, O_NONBLOCK);
	while ((n = read(from_child[0], buf, sizeof(buf))) > 0)
		if (write(2, buf, n) < 0)
			break;
	/* Children the test forks may still be exiting. */
	usleep(200 * 1000);
	sideband__poll(sb);
	gpu_probes__poll(gp, 0);
	/* The processes are gone: a scan reports their exit and sweeps what
	 * they left in the maps. */
	gpu_probes__scan(gp);
	gpu_probes__each_probe(gp, on_probe, NULL);
	print_stats(gp, sb);
	fflush(stdout);
	gpu_probes__free(gp);
	sideband__free(sb);
	symbolizer__free(d.sym);
	if (WIFEXITED(status))
		return WEXITSTATUS(status) ? 3 : 0;
	return 3;
}
