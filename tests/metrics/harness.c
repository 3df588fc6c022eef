/* harness.c: the metrics test harness -- the agent's metrics endpoint
 * (src/metrics/http.h) and WebSocket stream (src/net/ws_server.h) over one
 * gpu_metrics, fed by the simulator (--simulate) or by
 * events scripted on stdin, so that the integration tests can check the
 * exposition, the snapshot and the stream without BPF or root. Until
 * `sonde agent --simulate` takes over, it is also how those tests run
 * `sonde watch` (harness watch ARGS...).
 *
 * Prints "http PORT" and "ws PORT" once listening. Stdin commands, one per
 * line (pids, devices and sizes are integers, durations in ns):
 *   launch PID NS [N]          alloc PID DEV BYTES      free PID DEV BYTES
 *   wait PID API NS            copy PID KIND BYTES      nccl PID OP BYTES NS
 *   dataloader PID NS          capacity DEV BYTES SOURCE
 *   stuck PID OP RANK NRANKS COMM SECONDS               exit PID
 *   expire GRACE_MS (the series of processes that exited that long ago go)
 *   health CPU_SAMPLES CPU_DROPS GPU_EVENTS GPU_DROPS ATTACHED FAILURES FILL
 *   sync (answers "ok")        quit
 * Runs until quit, SIGINT or SIGTERM (stdin EOF leaves it serving). */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "common/clock.h"
#include "common/log.h"
#include "metrics/gpu_metrics.h"
#include "metrics/http.h"
#include "metrics/simulate.h"
#include "net/ws_server.h"

static volatile sig_atomic_t stop_signal;

static void on_signal(int sig)
{
	stop_signal = sig;
}

/* The option helper of src/cli/main.c, which the harness doesn't link
 * (it has its own main), for cmd_watch. */
int parse_int_opt(const char *opt, const char *arg, long min, long max, long *out)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(arg, &end, 10);
	if (errno || end == arg || *end || v < min || v > max) {
		pr_err("invalid value '%s' for %s: expected an integer from %ld to %ld", arg, opt,
		       min, max);
		return -1;
	}
	*out = v;
	return 0;
}

static int parse_op(const char *s)
{
	for (int i = 0; i < NCCL_OP_MAX; i++)
		if (!strcmp(s, nccl_op_name(i)))
			return i;
	return -1;
}

static int parse_kind(const char *s)
{
	static const char *const kinds[] = {"h2h", "h2d", "d2h", "d2d", "default"};

	for (int i = 0; i < 5; i++)
		if (!strcmp(s, kinds[i]))
			return i;
	return -1;
}

/* Runs one stdin command; returns 1 on quit, -1 on a bad line. */
static int command(struct gpu_metrics *m, char *line)
{
	char cmd[32], a[256], b[64];
	unsigned long long x, y, z, n;
	unsigned pid;
	int dev, op, rank, nranks;
	double secs;
	struct agent_health h;

	line[strcspn(line, "\n")] = '\0';
	if (sscanf(line, "%31s", cmd) != 1)
		return 0;
	if (!strcmp(cmd, "quit"))
		return 1;
	if (!strcmp(cmd, "sync")) {
		printf("ok\n");
		fflush(stdout);
		return 0;
	}
	if (!strcmp(cmd, "launch") && sscanf(line, "%*s %u %llu %llu", &pid, &x, &n) >= 2) {
		if (sscanf(line, "%*s %*u %*u %llu", &n) != 1)
			n = 1;
		while (n--)
			gpu_metrics__launch(m, pid, x);
	} else if (!strcmp(cmd, "alloc") && sscanf(line, "%*s %u %d %llu", &pid, &dev, &x) == 3) {
		gpu_metrics__alloc(m, pid, dev, x);
	} else if (!strcmp(cmd, "free") && sscanf(line, "%*s %u %d %llu", &pid, &dev, &x) == 3) {
		gpu_metrics__release(m, pid, dev, x);
	} else if (!strcmp(cmd, "wait") && sscanf(line, "%*s %u %255s %llu", &pid, a, &x) == 3) {
		gpu_metrics__wait(m, pid, a, x);
	} else if (!strcmp(cmd, "copy") && sscanf(line, "%*s %u %63s %llu", &pid, b, &x) == 3 &&
		   parse_kind(b) >= 0) {
		gpu_metrics__copy(m, pid, parse_kind(b), x);
	} else if (!strcmp(cmd, "nccl") &&
		   sscanf(line, "%*s %u %63s %llu %llu", &pid, b, &x, &y) == 4 &&
		   (op = parse_op(b)) >= 0) {
		gpu_metrics__nccl(m, pid, op, x, y);
	} else if (!strcmp(cmd, "dataloader") && sscanf(line, "%*s %u %llu", &pid, &x) == 2) {
		gpu_metrics__dataloader_wait(m, pid, x);
	} else if (!strcmp(cmd, "capacity") && sscanf(line, "%*s %d %llu %63s", &dev, &x, b) == 3) {
		gpu_metrics__device_capacity(m, dev, x, b);
	} else if (!strcmp(cmd, "stuck") &&
		   sscanf(line, "%*s %u %63s %d %d %llx %lf", &pid, b, &rank, &nranks, &z, &secs) ==
			   6 &&
		   (op = parse_op(b)) >= 0) {
		gpu_metrics__set_stuck(m, pid, op, rank, nranks, z, secs);
	} else if (!strcmp(cmd, "exit") && sscanf(line, "%*s %u", &pid) == 1) {
		gpu_metrics__process_exit(m, pid);
	} else if (!strcmp(cmd, "expire") && sscanf(line, "%*s %llu", &x) == 1) {
		gpu_metrics__expire(m, x);
	} else if (!strcmp(cmd, "health") &&
		   sscanf(line,
			  "%*s %" SCNu64 " %" SCNu64 " %" SCNu64 " %" SCNu64 " %" SCNu64 " %" SCNu64
			  " %lf",
			  &h.cpu_samples, &h.cpu_drops, &h.gpu_events, &h.gpu_drops,
			  &h.probe_attached, &h.probe_attach_failures, &h.map_fill_ratio) == 7) {
		gpu_metrics__set_health(m, &h);
	} else {
		fprintf(stderr, "harness: bad command: %s\n", line);
		return -1;
	}
	return 0;
}

/* GET /ws-stats: the WebSocket server's counters, as JSON (a route added
 * the way the agent adds /alerts). */
static int route_ws_stats(void *ctx, const struct http_request *req, struct http_reply *rep)
{
	struct ws_stats st;
	json_t *o;

	ws_server__stats(ctx, &st);
	o = json_pack("{sI sI sI sI sI}", "clients", (json_int_t)st.clients, "accepted",
		      (json_int_t)st.accepted, "frames_queued", (json_int_t)st.frames_queued,
		      "frames_skipped", (json_int_t)st.frames_skipped, "clients_dropped",
		      (json_int_t)st.clients_dropped);
	if (!o)
		return -ENOMEM;
	rep->body = json_dumps(o, JSON_COMPACT);
	json_decref(o);
	if (!rep->body)
		return -ENOMEM;
	rep->len = strlen(rep->body);
	rep->content_type = HTTP_CONTENT_JSON;
	return 0;
}

static const char usage[] =
	"Usage: harness [--http ADDR] [--ws ADDR] [--interval MS] [--simulate] [--seed N]\n"
	"               [--stall-ms MS] [--max-queued N] [--pad-pids N] [--node NAME]\n"
	"       harness watch [sonde watch arguments]\n";

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"http", required_argument, NULL, 'H'},
		{"ws", required_argument, NULL, 'W'},
		{"interval", required_argument, NULL, 'i'},
		{"simulate", no_argument, NULL, 's'},
		{"seed", required_argument, NULL, 'S'},
		{"stall-ms", required_argument, NULL, 't'},
		{"max-queued", required_argument, NULL, 'q'},
		{"pad-pids", required_argument, NULL, 'p'},
		{"node", required_argument, NULL, 'N'},
		{"help", no_argument, NULL, 'h'},
		{},
	};
	const char *http_addr = "127.0.0.1:0", *ws_addr = "127.0.0.1:0", *node = NULL;
	struct ws_opts wo = {.interval_ms = 1000};
	struct gpu_metrics_opts mo = {0};
	struct gpu_metrics *m = NULL;
	struct metrics_http *hs = NULL;
	struct ws_server *ws = NULL;
	struct simulator *sim = NULL;
	long seed = 1, pad = 0;
	bool stdin_open = true;
	char in[4096];
	size_t nin = 0;
	int opt, ret = 1;

	log_init();
	signal(SIGPIPE, SIG_IGN);
	if (argc > 1 && !strcmp(argv[1], "watch"))
		return cmd_watch(argc - 1, argv + 1);
	while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		switch (opt) {
		case 'H':
			http_addr = optarg;
			break;
		case 'W':
			ws_addr = optarg;
			break;
		case 'i':
			wo.interval_ms = (unsigned)atoi(optarg);
			break;
		case 's':
			mo.simulated = true;
			break;
		case 'S':
			seed = atol(optarg);
			break;
		case 't':
			wo.stall_ms = (unsigned)atoi(optarg);
			break;
		case 'q':
			wo.max_queued = (unsigned)atoi(optarg);
			break;
		case 'p':
			pad = atol(optarg);
			break;
		case 'N':
			node = optarg;
			break;
		case 'h':
			fputs(usage, stdout);
			return 0;
		default:
			fputs(usage, stderr);
			return 2;
		}
	}
	mo.node = node;
	m = gpu_metrics__new(&mo);
	if (!m)
		goto out;
	/* Padding: many processes make big snapshots (slow-client tests). */
	for (long i = 0; i < pad; i++) {
		gpu_metrics__alloc(m, 50000 + (uint32_t)i, (int)(i % 8), 1 << 20);
		gpu_metrics__launch(m, 50000 + (uint32_t)i, 5000);
		gpu_metrics__wait(m, 50000 + (uint32_t)i, "cudaStreamSynchronize", 1000000);
	}
	if (mo.simulated) {
		sim = simulator__new(m, (uint64_t)seed);
		simulator__tick(sim, mono_ms());
	}
	hs = metrics_http__start(http_addr, m);
	if (!hs)
		goto out;
	ws = ws_server__start_opts(ws_addr, &wo, gpu_metrics__snapshot_text, m);
	if (!ws)
		goto out;
	metrics_http__add_route(hs, "/ws-stats", route_ws_stats, ws);
	metrics_http__add_exposition(hs, ws_server__collect, ws);
	printf("http %d\nws %d\n", metrics_http__port(hs), ws_server__port(ws));
	fflush(stdout);

	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	while (!stop_signal) {
		struct pollfd pfd = {.fd = STDIN_FILENO, .events = POLLIN};
		int n = poll(&pfd, stdin_open ? 1 : 0, 100);

		if (sim)
			simulator__tick(sim, mono_ms());
		if (n > 0 && stdin_open) {
			/* read(2), not stdio: poll() can't see what stdio
			 * buffered. Runs every complete line. */
			ssize_t k = read(STDIN_FILENO, in + nin, sizeof(in) - 1 - nin);
			char *line = in, *nl;
			bool quit = false;

			if (k <= 0) {
				stdin_open = false;
				continue;
			}
			nin += (size_t)k;
			in[nin] = '\0';
			while (!quit && (nl = strchr(line, '\n'))) {
				*nl = '\0';
				quit = command(m, line) == 1;
				line = nl + 1;
			}
			if (quit)
				break;
			nin -= (size_t)(line - in);
			memmove(in, line, nin);
			if (nin == sizeof(in) - 1)
				nin = 0; /* a line too long to be a command */
		}
	}
	ret = 0;
out:
	ws_server__stop(ws);
	metrics_http__stop(hs);
	simulator__free(sim);
	gpu_metrics__free(m);
	return ret;
}
