/* agent.c: `sonde agent` -- the options of the node daemon
 * (src/agent/agent.c). `sonde run` parses the same options with
 * agent_parse_opt(), but for the TLS files of an https:// --server (--ca,
 * --cert, --key), which are the agent's alone: its server is in its own
 * process. */
#include "agent/agent.h"
#include "agent/service.h"
#include "agent/shipper.h"
#include "cli/cli.h"
#include "common/bytes.h"
#include "common/clock.h"
#include "common/log.h"
#include "alerts/alerts.h"
#include "net/tls.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char agent_help[] =
	"Usage: sonde agent [--simulate] [-F HZ] [--metrics ADDR] [--ws ADDR] [--interval SECS]\n"
	"                   [--rules FILE] [--webhook URL]... [--alertmanager URL]...\n"
	"                   [--alert-resend SECS] [--dataloader-stuck SECS]\n"
	"                   [--cuda-sync-stuck SECS] [--exited-grace SECS]\n"
	"                   [--gpu-memory BYTES] [--nccl-stuck SECS] [--window SECS]\n"
	"                   [-p PID[,PID...]] [--no-cpu] [--no-gpu] [--no-stacks]\n"
	"                   [--offcpu [--offcpu-min TIME] [--offcpu-rate N]]\n"
	"                   [--node NAME] [--server URL [--buffer BYTES] [--buffer-age SECS]\n"
	"                   [--ca FILE] [--cert FILE --key FILE] [--token TOKEN] [--state FILE]]\n"
	"                   [--service-by LIST] [-d SECONDS]\n"
	"\n"
	"The node daemon: samples CPU stacks, probes CUDA and NCCL in every process\n"
	"that uses them, serves Prometheus metrics and a JSON snapshot, pushes the\n"
	"snapshot to WebSocket clients, evaluates alert rules and keeps the last\n"
	"window of profiles. Runs until Ctrl-C or SIGTERM.\n"
	"\n"
	"Options:\n"
	"      --simulate         synthetic GPU telemetry: no BPF, no root, no GPU\n"
	"                         (every output says so)\n"
	"  -F, --freq HZ          CPU samples per second per CPU (default 49)\n"
	"      --metrics ADDR     HTTP address of /metrics, /json, /alerts, /profile/TYPE\n"
	"                         (default 127.0.0.1:9091; HOST:PORT, :PORT, [V6]:PORT)\n"
	"      --ws ADDR          WebSocket stream address (default 127.0.0.1:9092)\n"
	"      --interval SECS    WebSocket push interval (default 1; e.g. 0.5)\n"
	"      --rules FILE       alert rules (YAML; default: the built-in rules)\n"
	"      --print-rules      print the built-in rules as a rule file and exit\n"
	"      --webhook URL      POST each alert firing and resolution (repeatable)\n"
	"      --alertmanager URL send alerts to Alertmanager's v2 API (repeatable)\n"
	"      --alert-resend SECS send the firing alerts again this often to\n"
	"                         Alertmanager and the server (default 30)\n"
	"      --gpu-memory BYTES device memory when neither NVML nor the application\n"
	"                         tells it: 80G, or per device 0=80G,1=40G\n"
	"      --memory-ratio R   GpuOOMWarning threshold (default 0.95)\n"
	"      --nccl-stuck SECS  NcclCollectiveStuck threshold (default 60)\n"
	"      --dataloader-stuck SECS  DataLoaderWaitStuck threshold: a PyTorch loop\n"
	"                         waiting this long for a batch (default 60)\n"
	"      --cuda-sync-stuck SECS  CudaSyncStuck threshold: a thread blocked this\n"
	"                         long in a CUDA synchronisation (default 60)\n"
	"      --launch-p99 SECS  CudaLaunchLatencyHigh threshold (default 0.001)\n"
	"      --window SECS      profile window length (default 10)\n"
	"      --exited-grace SECS  how long an exited process's series stay in\n"
	"                         /metrics and /json, marked exited (default 120)\n"
	"  -p, --pid PIDS         only these processes and their children\n"
	"      --no-cpu           no CPU sampling\n"
	"      --no-gpu           no CUDA/NCCL probes\n"
	"      --no-stacks        no stacks for GPU calls (metrics only)\n"
	"      --offcpu           also the offcpu profile: where threads block, each\n"
	"                         stack weighted by the nanoseconds it was off the CPU\n"
	"      --offcpu-min TIME  its shortest block recorded (default 1ms; e.g. 200us);\n"
	"                         shorter ones are only counted\n"
	"      --offcpu-rate N    its waits a second at most, the whole machine (default\n"
	"                         5000); more are dropped, counted with their time\n"
	"      --unwind-memory SIZE  memory for the unwind tables (default 64M)\n"
	"      --no-library-search  don't search the local filesystems for CUDA and NCCL\n"
	"                         libraries at start (those the loader finds, and those\n"
	"                         processes map, are still attached)\n"
	"      --node NAME        node name in alerts and the snapshot (default: hostname)\n"
	"      --server URL       send each window of profiles and metric points, and the\n"
	"                         alerts, to a sonde server (http://HOST:7470, or\n"
	"                         https://HOST:PORT for one serving TLS)\n"
	"      --ca FILE          trust the CA certificates of FILE (PEM), instead of the\n"
	"                         system's, to verify an https:// server\n"
	"      --cert FILE        present this client certificate (PEM) to the server,\n"
	"                         for its mutual TLS (sonde server --tls-client-ca)\n"
	"      --key FILE         the client certificate's private key (PEM, unencrypted)\n"
	"      --token TOKEN      the token of a server run with --auth (an ingest token of\n"
	"                         `sonde token create`); default: $SONDE_TOKEN, which\n"
	"                         keeps it out of the process list\n"
	"      --state FILE       a file of this agent's own (e.g. /var/lib/sonde/agent.state):\n"
	"                         how far the server has its windows; after a crash or\n"
	"                         kill -9 the next agent logs and counts what was lost\n"
	"                         (sonde_agent_ship_lost_seconds)\n"
	"      --buffer BYTES     what is kept while the server is unreachable (default 64M)\n"
	"      --buffer-age SECS  ... and for how long (default 900)\n"
	"      --service-by LIST  what names a process's service (the service_name of its\n"
	"                         samples): a comma list of rules, the first that yields\n"
	"                         a value wins -- env:NAME (its environment variable),\n"
	"                         unit (its systemd unit), cgroup (its cgroup v2 path's\n"
	"                         last part), process (its name). Default:\n"
	"                         env:SONDE_SERVICE,process\n"
	"  -d, --duration TIME    stop after TIME (seconds, or 30s, 5m, 1h)\n"
	"  -h, --help             this text\n";

static int parse_ratio_opt(const char *opt, const char *arg, double *out)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(arg, &end);
	if (errno || end == arg || *end || !(v > 0 && v <= 1)) {
		pr_err("invalid value '%s' for %s: expected a ratio in (0, 1], e.g. 0.95", arg,
		       opt);
		return -1;
	}
	*out = v;
	return 0;
}

/* --gpu-memory: "80G" for every device (stored as device -1), or
 * "0=80G,1=40G". Returns the number of entries or -1. */
static int parse_gpu_memory(const char *arg, int *devs, uint64_t *bytes, int max)
{
	const char *p = arg;
	int n = 0;

	while (*p) {
		const char *end;
		char *dend;
		long dev = -1;

		if (n == max)
			goto bad;
		if (strchr(p, '=')) {
			errno = 0;
			dev = strtol(p, &dend, 10);
			if (errno || dend == p || *dend != '=' || dev < 0 || dev > 1023)
				goto bad;
			p = dend + 1;
		}
		bytes[n] = parse_bytes(p, &end);
		if (!bytes[n] || (*end && *end != ','))
			goto bad;
		devs[n++] = (int)dev;
		p = *end ? end + 1 : end;
	}
	if (n)
		return n;
bad:
	pr_err("invalid value '%s' for --gpu-memory: expected a size such as 80G for every "
	       "device, or DEVICE=SIZE[,DEVICE=SIZE...] such as 0=80G,1=40G",
	       arg);
	return -1;
}

int agent_parse_opt(struct agent_opts *o, int opt, const char *arg)
{
	uint64_t ms;
	long v;

	switch (opt) {
	case 'S':
		o->simulate = true;
		break;
	case 'F':
		if (parse_int_opt("-F", arg, 1, 100000, &v))
			return -1;
		o->freq = (int)v;
		break;
	case 'M':
		o->metrics_addr = arg;
		break;
	case 'W':
		o->ws_addr = arg;
		break;
	case 'i':
		if (parse_duration_opt("--interval", arg, 50, 3600 * MS_PER_SEC, &ms))
			return -1;
		o->interval_ms = (unsigned)ms;
		break;
	case 'r':
		o->rules = arg;
		break;
	case 'k':
		if (o->nwebhooks == AGENT_MAX_SINKS) {
			pr_err("too many --webhook (at most %d)", AGENT_MAX_SINKS);
			return -1;
		}
		o->webhooks[o->nwebhooks++] = arg;
		break;
	case 'a':
		if (o->nalertmanagers == AGENT_MAX_SINKS) {
			pr_err("too many --alertmanager (at most %d)", AGENT_MAX_SINKS);
			return -1;
		}
		o->alertmanagers[o->nalertmanagers++] = arg;
		break;
	case 'g': {
		int n = parse_gpu_memory(arg, o->gpu_mem_dev, o->gpu_mem, AGENT_MAX_CONFIG_DEVICES);

		if (n < 0)
			return -1;
		o->ngpu_mem = n;
		break;
	}
	case 'R':
		if (parse_ratio_opt("--memory-ratio", arg, &o->memory_ratio))
			return -1;
		break;
	case 'N':
		if (parse_duration_opt("--nccl-stuck", arg, 1, 86400 * MS_PER_SEC, &ms))
			return -1;
		o->nccl_stuck_s = (double)ms / MS_PER_SEC;
		break;
	case 'K':
		if (parse_duration_opt("--dataloader-stuck", arg, 1, 86400 * MS_PER_SEC, &ms))
			return -1;
		o->dataloader_stuck_s = (double)ms / MS_PER_SEC;
		break;
	case AGENT_OPT_SYNC_STUCK:
		if (parse_duration_opt("--cuda-sync-stuck", arg, 1, 86400 * MS_PER_SEC, &ms))
			return -1;
		o->sync_stuck_s = (double)ms / MS_PER_SEC;
		break;
	case 'L':
		if (parse_duration_opt("--launch-p99", arg, 1, 60 * MS_PER_SEC, &ms))
			return -1;
		o->launch_p99_s = (double)ms / MS_PER_SEC;
		break;
	case 'w':
		if (parse_duration_opt("--window", arg, 1000, 3600 * MS_PER_SEC, &ms))
			return -1;
		o->window_ms = (unsigned)ms;
		break;
	case 'p':
		o->npids = parse_pid_list(arg, o->pids, AGENT_MAX_PIDS);
		if (o->npids < 0)
			return -1;
		break;
	case 'C':
		o->cpu = false;
		break;
	case 'G':
		o->gpu = false;
		break;
	case 'T':
		o->gpu_stacks = false;
		break;
	case 'X':
		o->no_library_search = true;
		break;
	case 'n':
		o->node = arg;
		break;
	case 'U':
		o->server = arg;
		break;
	case 'u':
		if (parse_bytes_opt("--unwind-memory", arg, 64 << 10, &o->unwind_memory))
			return -1;
		break;
	case 'B':
		if (parse_bytes_opt("--buffer", arg, 1 << 20, &o->buffer_bytes))
			return -1;
		break;
	case AGENT_OPT_EXITED_GRACE:
		if (parse_duration_opt("--exited-grace", arg, 0, 86400 * MS_PER_SEC, &ms))
			return -1;
		o->exited_grace_ms = ms ? ms : 1;
		break;
	case 'Y':
		if (parse_duration_opt("--alert-resend", arg, 100, 3600 * MS_PER_SEC, &ms))
			return -1;
		o->alert_resend_ms = (unsigned)ms;
		break;
	case 'A':
		if (parse_duration_opt("--buffer-age", arg, 1000, 7ull * 86400 * MS_PER_SEC,
				       &o->buffer_age_ms))
			return -1;
		break;
	case 'V': {
		char err[512];

		if (service_spec_check(arg, err, sizeof(err))) {
			pr_err("%s", err);
			return -1;
		}
		o->service_by = arg;
		break;
	}
	case 'd':
		if (parse_duration_opt("-d", arg, 1, 365ull * 86400 * MS_PER_SEC, &o->duration_ms))
			return -1;
		break;
	case AGENT_OPT_OFFCPU:
		o->offcpu = true;
		break;
	case AGENT_OPT_OFFCPU_RATE:
		if (parse_int_opt("--offcpu-rate", arg, 1, 10000000, &v))
			return -1;
		o->offcpu_rate = (uint32_t)v;
		o->offcpu = true;
		break;
	case AGENT_OPT_OFFCPU_MIN:
		if (parse_duration_ns_opt("--offcpu-min", arg, 1000, 3600ull * NS_PER_SEC,
					  &o->offcpu_min_ns))
			return -1;
		o->offcpu = true;
		break;
	}
	return 0;
}

int agent_check_opts(const struct agent_opts *o)
{
	if (o->offcpu && !o->cpu && !o->simulate) {
		pr_err("--offcpu needs the CPU sampler: drop --no-cpu");
		return -1;
	}
	return 0;
}

/* The options of `sonde agent`, which `sonde run` takes too. */
const struct option agent_longopts[] = {
	{"simulate", no_argument, NULL, 'S'},
	{"freq", required_argument, NULL, 'F'},
	{"metrics", required_argument, NULL, 'M'},
	{"ws", required_argument, NULL, 'W'},
	{"interval", required_argument, NULL, 'i'},
	{"rules", required_argument, NULL, 'r'},
	{"print-rules", no_argument, NULL, 'P'},
	{"webhook", required_argument, NULL, 'k'},
	{"alertmanager", required_argument, NULL, 'a'},
	{"alert-resend", required_argument, NULL, 'Y'},
	{"gpu-memory", required_argument, NULL, 'g'},
	{"memory-ratio", required_argument, NULL, 'R'},
	{"nccl-stuck", required_argument, NULL, 'N'},
	{"dataloader-stuck", required_argument, NULL, 'K'},
	{"cuda-sync-stuck", required_argument, NULL, AGENT_OPT_SYNC_STUCK},
	{"exited-grace", required_argument, NULL, AGENT_OPT_EXITED_GRACE},
	{"launch-p99", required_argument, NULL, 'L'},
	{"window", required_argument, NULL, 'w'},
	{"pid", required_argument, NULL, 'p'},
	{"no-cpu", no_argument, NULL, 'C'},
	{"no-gpu", no_argument, NULL, 'G'},
	{"no-stacks", no_argument, NULL, 'T'},
	{"offcpu", no_argument, NULL, AGENT_OPT_OFFCPU},
	{"offcpu-min", required_argument, NULL, AGENT_OPT_OFFCPU_MIN},
	{"offcpu-rate", required_argument, NULL, AGENT_OPT_OFFCPU_RATE},
	{"no-library-search", no_argument, NULL, 'X'},
	{"node", required_argument, NULL, 'n'},
	{"server", required_argument, NULL, 'U'},
	{"buffer", required_argument, NULL, 'B'},
	{"unwind-memory", required_argument, NULL, 'u'},
	{"buffer-age", required_argument, NULL, 'A'},
	{"service-by", required_argument, NULL, 'V'},
	{"duration", required_argument, NULL, 'd'},
	{"help", no_argument, NULL, 'h'},
	{},
};

/* getopt values of `sonde agent`'s own options, which `sonde run` lacks. */
enum { OPT_CA = 0x2101, OPT_CERT, OPT_KEY, OPT_TOKEN, OPT_STATE };

/* agent_longopts and the agent's own: malloc()ed, NULL on ENOMEM. */
static struct option *agent_options(void)
{
	static const struct option own[] = {
		{"ca", required_argument, NULL, OPT_CA},
		{"cert", required_argument, NULL, OPT_CERT},
		{"key", required_argument, NULL, OPT_KEY},
		{"token", required_argument, NULL, OPT_TOKEN},
		{"state", required_argument, NULL, OPT_STATE},
	};
	size_t n = 0, k = sizeof(own) / sizeof(own[0]);
	struct option *all;

	while (agent_longopts[n].name)
		n++;
	all = calloc(n + k + 1, sizeof(*all));
	if (!all)
		return NULL;
	memcpy(all, agent_longopts, n * sizeof(*all));
	memcpy(all + n, own, sizeof(own));
	return all;
}

/* The TLS files go with an https:// --server and must be usable; 0, or the
 * exit code after printing why. */
static int check_tls(const struct agent_opts *o, const struct tls_client_opts *tls)
{
	char err[1024];

	if (!tls_client__on(tls))
		return 0;
	if (!o->server || strncmp(o->server, "https://", 8)) {
		pr_err("--ca, --cert and --key are for an https:// --server%s%s%s -- see `sonde "
		       "agent --help`",
		       o->server ? " (not '" : "", o->server ? o->server : "",
		       o->server ? "')" : "");
		return 2;
	}
	if (tls_client__check(tls, err, sizeof(err))) {
		pr_err("can't use TLS to the server: %s", err);
		return 1;
	}
	return 0;
}

int cmd_agent(int argc, char **argv)
{
	struct option *longopts = agent_options();
	struct tls_client_opts tls = {0};
	struct agent_opts o;
	int opt, ret = 2;

	if (!longopts)
		return 1;
	agent_opts__init(&o);
	optind = 1;
	while ((opt = getopt_long(argc, argv, "F:p:d:h", longopts, NULL)) != -1) {
		switch (opt) {
		case OPT_CA:
			tls.ca = optarg;
			continue;
		case OPT_CERT:
			tls.cert = optarg;
			continue;
		case OPT_KEY:
			tls.key = optarg;
			continue;
		case OPT_TOKEN:
			o.token = optarg;
			continue;
		case OPT_STATE:
			o.state_path = optarg;
			continue;
		}
		if (agent_parse_opt(&o, opt, optarg) < 0)
			goto out;
		if (opt == 'h') {
			fputs(agent_help, stdout);
			ret = 0;
			goto out;
		}
		if (opt == '?') {
			fputs(agent_help, stderr);
			goto out;
		}
		if (opt == 'P') {
			struct alert_defaults d = {
				.gpu_memory_ratio = o.memory_ratio,
				.nccl_stuck_seconds = o.nccl_stuck_s,
				.dataloader_stuck_seconds = o.dataloader_stuck_s,
				.sync_stuck_seconds = o.sync_stuck_s,
				.launch_p99_seconds = o.launch_p99_s,
			};
			char *y = alert_defaults__yaml(&d);

			fputs(y, stdout);
			free(y);
			ret = 0;
			goto out;
		}
	}
	if (optind < argc) {
		pr_err("unexpected argument '%s' -- see `sonde agent --help`", argv[optind]);
		goto out;
	}
	if (agent_check_opts(&o))
		goto out;
	ret = check_tls(&o, &tls);
	if (ret)
		goto out;
	ret = 2;
	if (!o.token && o.server && getenv("SONDE_TOKEN") && *getenv("SONDE_TOKEN"))
		o.token = getenv("SONDE_TOKEN");
	if (o.token && !o.server) {
		pr_err("--token (or SONDE_TOKEN) is for a --server -- see `sonde agent --help`");
		goto out;
	}
	if (o.state_path && !o.server) {
		pr_err("--state is for a --server -- see `sonde agent --help`");
		goto out;
	}
	if (o.token && (!*o.token || strpbrk(o.token, " \t\r\n"))) {
		pr_err("the token is empty or has spaces -- give the one `sonde token create` "
		       "printed");
		goto out;
	}
	if (tls_client__on(&tls))
		o.tls = &tls;
	ret = agent_run(&o);
out:
	free(longopts);
	return ret;
}
