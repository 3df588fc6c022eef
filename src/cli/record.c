/* record.c: `sonde record` -- samples the whole machine, some pids, or a
 * command it starts (and that command's children), then writes a folded,
 * pprof or speedscope profile; with --gpu also the gpu_launch and gpu_wait
 * profiles beside it, with --offcpu the offcpu profile. The contract of its
 * options and exit codes is relied on by scripts outside this repo: see
 * docs/cli.md.
 *
 * The order of the start matters and is what makes a job of a few
 * milliseconds fully seen: the sideband first (every exec and mapping from
 * then on), then the samplers and the GPU probes, attached to the CUDA and
 * NCCL libraries the command will load before it runs; the command is held
 * at a pipe until all of it watches, then released. */
#include "probe/cpu_sampler.h"
#include "agent/gpu_feed.h"
#include "agent/gpu_time.h"
#include "agent/gpu_trace.h"
#include "probe/gpu_probes.h"
#include "probe/host.h"
#include "probe/pid_filter.h"
#include "probe/libscan.h"
#include "probe/sideband.h"
#include "agent/stack_agg.h"
#include "cli/cli.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/xalloc.h"
#include "profile/profile.h"
#include "symbolize/symbolize.h"
#include "unwind/late.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_PIDS 1024
#define MAX_STACKS (1u << 20)
#define POLL_NS (10 * NS_PER_MS)	   /* ring buffer drain interval */
#define GPU_SCAN_NS ((uint64_t)NS_PER_SEC) /* periodic scan for CUDA/NCCL libraries */

/* Exit codes of sonde's own failures: with a command, those of env(1) and
 * timeout(1), so that they can't be taken for the command's. */
#define EXIT_FAIL 1
#define EXIT_USAGE 2
#define EXIT_CMD_FAIL 125
#define EXIT_CMD_NOEXEC 126
#define EXIT_CMD_NOTFOUND 127

static const char record_help[] =
	"Usage: sonde record [-F HZ] [-d TIME] [-p PID[,PID...]] [-o FILE]\n"
	"                    [-f folded|pprof|speedscope]\n"
	"                    [--gpu [--gpu-stalls] [--gpu-graphs=MODE]]\n"
	"                    [--offcpu [--offcpu-min TIME] [--offcpu-rate N]]\n"
	"                    [-- COMMAND [ARGS...]]\n"
	"\n"
	"Samples on-CPU stacks (kernel and user) and writes a profile.\n"
	"  with neither -p nor COMMAND: the whole machine, until -d ends or Ctrl-C;\n"
	"  -p: those processes, until they all exit, -d ends, or Ctrl-C;\n"
	"  COMMAND: starts it, profiles it and its children until it exits (or -d\n"
	"           ends), and exits with its exit code.\n"
	"\n"
	"Options:\n"
	"  -F, --freq HZ         samples per second per CPU (default 99)\n"
	"  -d, --duration TIME   stop after TIME (seconds, or 30s, 5m, 1h)\n"
	"  -p, --pid PIDS        comma-separated process ids\n"
	"  -o, --output FILE     output file, '-' for stdout (default sonde.folded,\n"
	"                        sonde.pb.gz or sonde.speedscope.json by format)\n"
	"  -f, --format FMT      folded | pprof | speedscope (default: from the\n"
	"                        output's extension, else folded)\n"
	"      --gpu             also probe CUDA and NCCL: write FILE's gpu_launch and\n"
	"                        gpu_wait profiles beside it (x.folded: x.gpu_launch.folded,\n"
	"                        x.gpu_wait.folded)\n"
	"      --gpu-stalls      with --gpu and a COMMAND: also sample its kernels' PCs\n"
	"                        (CUPTI's PC sampling; slows kernels): write FILE's\n"
	"                        gpu_stall profile, each kernel's instructions and why\n"
	"                        they stalled, under the launching stack\n"
	"      --gpu-graphs=MODE with --gpu and a COMMAND: node (default) times each\n"
	"                        kernel of a CUDA graph; graph times each graph launch\n"
	"                        as one \"[CUDA graph N]\" (CUPTI's graph-level tracing:\n"
	"                        cheaper for graphs of many small kernels)\n"
	"      --offcpu          also record where threads block: write FILE's offcpu\n"
	"                        profile beside it (x.folded: x.offcpu.folded), each\n"
	"                        stack weighted by the nanoseconds it was off the CPU\n"
	"      --offcpu-min TIME the shortest block recorded (default 1ms; e.g. 200us);\n"
	"                        shorter ones are only counted\n"
	"      --offcpu-rate N   waits a second at most, all CPUs (default 5000); more\n"
	"                        are dropped, counted with their time\n"
	"      --no-kernel       user stacks only\n"
	"      --unwind-memory SIZE  memory for the unwind tables of the files the\n"
	"                        stacks go through (default 64M); a file whose table\n"
	"                        does not fit is walked by frame pointers\n"
	"      --idle            keep samples of idle CPUs (whole machine only)\n"
	"  -q, --quiet           no summary line\n"
	"  -h, --help            this text\n"
	"\n"
	"Exit codes: 0, or the command's; 1 an error (2 a usage error) without a\n"
	"command; 125 sonde failed, 126 the command can't run, 127 not found.\n"
	"Ctrl-C writes what was collected and exits 0.\n";

static volatile sig_atomic_t stop_signal;

static void on_signal(int sig)
{
	stop_signal = sig;
}

struct record {
	/* Options. */
	long freq;
	uint64_t duration_ms;
	int pids[MAX_PIDS], npids;
	const char *output;
	enum prof_format fmt;
	bool gpu, quiet, offcpu;
	bool gpu_stalls;	/* --gpu-stalls: the command's PCs sampled */
	const char *gpu_graphs; /* --gpu-graphs: "node", "graph", NULL: not given */
	struct cpu_sampler_opts so;
	char **argv; /* the command, or NULL */
	char cmdpath[PATH_MAX];

	/* What runs. */
	struct symbolizer *sym;
	struct sideband *sb;
	struct pid_filter *pf; /* the pids and command the BPF programs watch, or NULL */
	bool filter_pids;      /* -p or a command: pf is made */
	struct stack_agg *agg;
	struct stack_agg *offcpu_agg; /* --offcpu: weighted by nanoseconds */
	char *offcpu_path;
	struct cpu_sampler *cs;
	struct gpu_probes *gp;
	struct gpu_feed *feed;
	FILE *out;
	char *gpu_paths[2];
	pid_t child;
	bool child_done; /* reaped: its pid may be another process's now */
	int child_status;
	uint64_t t0, wall0, end;
	struct cpu_sampler_stats cpu_st;
	const char *event;
};

/* A sample goes to the profile, and with --gpu is the time on a CPU of
 * its thread for the verdict of its process. */
static void on_sample(void *ctx, const struct stack *s)
{
	struct record *r = ctx;

	stack_agg__add(r->agg, s);
	if (r->feed)
		gpu_feed__on_cpu(r->feed, s->pid, s->tid, NS_PER_SEC / (uint64_t)r->freq);
}

static void on_offcpu(void *ctx, const struct offcpu_wait *w)
{
	struct record *r = ctx;

	stack_agg__add_leaf(r->offcpu_agg, w->stack, NULL, w->blocked_ns);
	if (r->feed)
		gpu_feed__off_cpu(r->feed, w->stack->pid, w->stack->tid, w->syscall, w->blocked_ns);
}

/* ---- the command ---- */

/* Finds COMMAND the way execvp would, so that "not found" is reported before
 * anything starts. Returns 0, or -ENOENT / -EACCES. */
static int resolve_command(const char *cmd, char *out, size_t size)
{
	const char *path = getenv("PATH");
	int err = -ENOENT;

	if (strchr(cmd, '/')) {
		if (access(cmd, X_OK))
			return -errno;
		snprintf(out, size, "%s", cmd);
		return 0;
	}
	if (!path)
		path = "/usr/local/bin:/usr/bin:/bin";
	while (*path) {
		const char *colon = strchrnul(path, ':');
		struct stat st;

		snprintf(out, size, "%.*s/%s", (int)(colon - path), path, cmd);
		if (colon == path)
			snprintf(out, size, "./%s", cmd);
		if (stat(out, &st) == 0 && S_ISREG(st.st_mode)) {
			if (access(out, X_OK) == 0)
				return 0;
			err = -EACCES;
		}
		path = *colon ? colon + 1 : colon;
	}
	return err;
}

/* Forks COMMAND held at a pipe until the probes watch it; returns the pid
 * and the write end of the go pipe, or -1. */
static pid_t spawn_held(char **argv, const char *path, int *go_fd)
{
	int go[2];
	pid_t pid;

	if (pipe2(go, O_CLOEXEC))
		return -1;
	pid = fork();
	if (pid < 0) {
		int e = errno; /* fork's, not close's */

		close(go[0]);
		close(go[1]);
		errno = e;
		return -1;
	}
	if (pid == 0) {
		char c;

		close(go[1]);
		if (read(go[0], &c, 1) != 1)
			_exit(EXIT_CMD_FAIL);
		signal(SIGPIPE, SIG_DFL);
		execv(path, argv);
		fprintf(stderr, "sonde: can't run '%s': %s\n", argv[0], strerror(errno));
		_exit(errno == ENOENT ? EXIT_CMD_NOTFOUND : EXIT_CMD_NOEXEC);
	}
	close(go[0]);
	*go_fd = go[1];
	return pid;
}

/* A process counts as gone once it is a zombie: its parent may take its
 * time to reap it, but it will never run again. */
static bool alive(int pid)
{
	char path[64], buf[512], *paren;
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return false;
	buf[n] = 0;
	paren = strrchr(buf, ')');
	return !paren || (paren[1] && paren[2] != 'Z' && paren[2] != 'X');
}

static bool any_alive(const int *pids, int n)
{
	for (int i = 0; i < n; i++)
		if (alive(pids[i]))
			return true;
	return false;
}

/* Reaps the command if it has exited (wait: block until it has). */
static void reap_child(struct record *r, bool wait)
{
	if (r->child <= 0 || r->child_done)
		return;
	if (waitpid(r->child, &r->child_status, wait ? 0 : WNOHANG) == r->child)
		r->child_done = true;
}

/* ---- outputs ---- */

/* FILE with ".TYPE" before its format's extension: "x.pb.gz" ->
 * "x.gpu_launch.pb.gz", "x" -> "x.gpu_launch"; with ext, that extension in
 * place of FILE's ("x.pb.gz", "gpu_trace", ".json" -> "x.gpu_trace.json").
 * Caller frees. */
static char *sibling_path_ext(const char *path, const char *type, const char *ext)
{
	static const char *const exts[] = {".speedscope.json", ".pb.gz", ".folded", ".collapsed",
					   ".pprof",	       ".json",	 ".txt",    ".pb"};
	size_t n = strlen(path), base = n;
	char *out;

	for (size_t i = 0; i < sizeof(exts) / sizeof(exts[0]); i++) {
		size_t e = strlen(exts[i]);

		if (n > e && !strcmp(path + n - e, exts[i])) {
			base = n - e;
			break;
		}
	}
	if (!ext)
		ext = path + base;
	out = malloc(base + strlen(type) + strlen(ext) + 2);
	if (out)
		sprintf(out, "%.*s.%s%s", (int)base, path, type, ext);
	return out;
}

static char *sibling_path(const char *path, const char *type)
{
	return sibling_path_ext(path, type, NULL);
}

/* Writes prof to path (format fmt); 0 or -1 after printing why. */
static int write_profile_file(const struct profile *prof, enum prof_format fmt, const char *path)
{
	FILE *f = fopen(path, "w");
	int err;

	if (!f) {
		pr_err("can't write the output file '%s': %s", path, strerror(errno));
		return -1;
	}
	err = profile__write(prof, fmt, f);
	if (fclose(f) || err) {
		pr_err("can't write the output file '%s': %s", path, strerror(err ? -err : errno));
		return -1;
	}
	return 0;
}

static const char *default_output(enum prof_format fmt)
{
	switch (fmt) {
	case PROF_FMT_PPROF:
		return "sonde.pb.gz";
	case PROF_FMT_SPEEDSCOPE:
		return "sonde.speedscope.json";
	default:
		return "sonde.folded";
	}
}

/* Opens every output before any work, so that an unwritable path fails
 * first. 0 or -1 after printing why. */
static int open_outputs(struct record *r)
{
	if (!strcmp(r->output, "-")) {
		r->out = stdout;
	} else {
		r->out = fopen(r->output, "w");
		if (!r->out) {
			pr_err("can't write the output file '%s': %s", r->output, strerror(errno));
			return -1;
		}
	}
	for (int i = 0; r->gpu && i < 2; i++) {
		FILE *f;

		r->gpu_paths[i] = sibling_path(r->output, i ? "gpu_wait" : "gpu_launch");
		f = r->gpu_paths[i] ? fopen(r->gpu_paths[i], "w") : NULL;
		if (!f) {
			pr_err("can't write the output file '%s': %s",
			       r->gpu_paths[i] ? r->gpu_paths[i] : r->output, strerror(errno));
			return -1;
		}
		fclose(f);
	}
	if (r->offcpu) {
		FILE *f;

		r->offcpu_path = sibling_path(r->output, "offcpu");
		f = r->offcpu_path ? fopen(r->offcpu_path, "w") : NULL;
		if (!f) {
			pr_err("can't write the output file '%s': %s",
			       r->offcpu_path ? r->offcpu_path : r->output, strerror(errno));
			return -1;
		}
		fclose(f);
	}
	return 0;
}

/* ---- options ---- */

/* Fills r from argv. 0, or the exit code of a usage error (-1: --help). */
static int parse_args(struct record *r, int argc, char **argv)
{
	static const struct option longopts[] = {
		{"freq", required_argument, NULL, 'F'},
		{"duration", required_argument, NULL, 'd'},
		{"pid", required_argument, NULL, 'p'},
		{"output", required_argument, NULL, 'o'},
		{"format", required_argument, NULL, 'f'},
		{"no-kernel", no_argument, NULL, 'K'},
		{"idle", no_argument, NULL, 'I'},
		{"gpu", no_argument, NULL, 'G'},
		{"gpu-stalls", no_argument, NULL, 'S'},
		{"gpu-graphs", required_argument, NULL, 'g'},
		{"offcpu", no_argument, NULL, 'O'},
		{"offcpu-min", required_argument, NULL, 'm'},
		{"offcpu-rate", required_argument, NULL, 'R'},
		{"unwind-memory", required_argument, NULL, 'U'},
		{"quiet", no_argument, NULL, 'q'},
		{"help", no_argument, NULL, 'h'},
		{},
	};
	/* A usage error is a failure of sonde's: 125 when a command was given. */
	bool has_cmd = false;
	int opt, usage;

	for (int i = 1; i < argc; i++)
		if (!strcmp(argv[i], "--") && i + 1 < argc)
			has_cmd = true;
	usage = has_cmd ? EXIT_CMD_FAIL : EXIT_USAGE;
	optind = 1;
	while ((opt = getopt_long(argc, argv, "+F:d:p:o:f:qh", longopts, NULL)) != -1) {
		switch (opt) {
		case 'F':
			if (parse_int_opt("-F", optarg, 1, 100000, &r->freq))
				return usage;
			break;
		case 'd':
			if (parse_duration_opt("-d", optarg, 1, 365ull * 86400 * MS_PER_SEC,
					       &r->duration_ms))
				return usage;
			break;
		case 'p':
			r->npids = parse_pid_list(optarg, r->pids, MAX_PIDS);
			if (r->npids < 0)
				return EXIT_FAIL;
			break;
		case 'o':
			r->output = optarg;
			break;
		case 'f':
			r->fmt = prof_format_from_name(optarg);
			if (r->fmt == PROF_FMT_NONE) {
				pr_err("unknown format '%s' -- use folded, pprof or speedscope",
				       optarg);
				return usage;
			}
			break;
		case 'K':
			r->so.kernel_stacks = false;
			break;
		case 'I':
			r->so.include_idle = true;
			break;
		case 'G':
			r->gpu = true;
			break;
		case 'S':
			r->gpu_stalls = true;
			break;
		case 'g':
			if (strcmp(optarg, "node") && strcmp(optarg, "graph")) {
				pr_err("--gpu-graphs: node or graph, not '%s'", optarg);
				return usage;
			}
			r->gpu_graphs = optarg;
			break;
		case 'O':
			r->offcpu = true;
			break;
		case 'm':
			if (parse_duration_ns_opt("--offcpu-min", optarg, 1000,
						  3600ull * NS_PER_SEC, &r->so.offcpu_min_ns))
				return usage;
			r->offcpu = true;
			break;
		case 'R': {
			long v;

			if (parse_int_opt("--offcpu-rate", optarg, 1, 10000000, &v))
				return usage;
			r->so.offcpu_rate = (uint32_t)v;
			r->offcpu = true;
			break;
		}
		case 'U':
			if (parse_bytes_opt("--unwind-memory", optarg, 64 << 10,
					    &r->so.unwind_memory))
				return usage;
			break;
		case 'q':
			r->quiet = true;
			break;
		case 'h':
			fputs(record_help, stdout);
			return -1;
		default:
			fputs(record_help, stderr);
			return usage;
		}
	}
	if (optind < argc)
		r->argv = argv + optind;
	if (r->argv && r->npids > 0) {
		pr_err("give either -p or a command, not both");
		return usage;
	}
	if (r->fmt == PROF_FMT_NONE && r->output)
		r->fmt = prof_format_from_path(r->output);
	if (r->fmt == PROF_FMT_NONE)
		r->fmt = PROF_FMT_FOLDED;
	if (!r->output)
		r->output = default_output(r->fmt);
	if (r->gpu_stalls && (!r->gpu || !has_cmd)) {
		pr_err("--gpu-stalls samples a command's kernels: give --gpu and -- COMMAND");
		return usage;
	}
	if (r->gpu_graphs && (!r->gpu || !has_cmd)) {
		pr_err("--gpu-graphs times a command's graphs: give --gpu and -- COMMAND");
		return usage;
	}
	if (r->gpu && !strcmp(r->output, "-")) {
		pr_err("--gpu writes three profiles: give -o FILE, not stdout");
		return usage;
	}
	if (r->offcpu && !strcmp(r->output, "-")) {
		pr_err("--offcpu writes two profiles: give -o FILE, not stdout");
		return usage;
	}
	r->so.freq = (int)r->freq;
	r->filter_pids = r->npids > 0 || r->argv;
	r->so.follow_children = r->argv != NULL;
	if (r->filter_pids)
		r->so.include_idle = false;
	return 0;
}

/* ---- starting ---- */

static void preload_unwind(void *ctx, const char *path)
{
	cpu_sampler__preload(ctx, path);
}

/* libcupti.so.13 in the directories the command's loader searches first
 * (LD_LIBRARY_PATH) and the toolkit's. */
static void preload_cupti(struct record *r)
{
	const char *env = getenv("LD_LIBRARY_PATH");
	char *dirs = xstrdup(env ? env : ""), *save = NULL;
	char path[PATH_MAX + 32];

	for (char *d = strtok_r(dirs, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
		snprintf(path, sizeof(path), "%s/libcupti.so.13", d);
		if (!access(path, R_OK)) {
			cpu_sampler__preload(r->cs, path);
			break;
		}
	}
	free(dirs);
	snprintf(path, sizeof(path), "/usr/local/cuda/lib64/libcupti.so.13");
	if (!access(path, R_OK))
		cpu_sampler__preload(r->cs, path);
}

/* Sonde's CUPTI library, beside the sonde binary where it was built: its
 * markers probed, and the command started with it (CUDA_INJECTION64_PATH,
 * and NVTX_INJECTION64_PATH for its NVTX ranges, unless the user set them),
 * so that kernels' GPU time is recorded (gpu_time). Without it, or without CUPTI in the job, there is none. */
static void use_cupti(struct record *r)
{
	char path[PATH_MAX + 32];
	int err = gpu_probes__attach_cupti(r->gp, path, sizeof(path));

	if (err) {
		pr_debug("no CUPTI library beside sonde (%s): no gpu_time profile", strerror(-err));
		return;
	}
	/* Its unwind table, and CUPTI's where the command's loader will find
	 * it, before the command loads them: the launch stacks start in them,
	 * and one walked late for want of a table may lack its Python frames
	 * (a process whose interpreter no walk has met yet). */
	cpu_sampler__preload(r->cs, path);
	preload_cupti(r);
	if (r->argv && !getenv("CUDA_INJECTION64_PATH"))
		setenv("CUDA_INJECTION64_PATH", path, 1);
	/* NVTX's injection too: its ranges around the launches. */
	if (r->argv && !getenv("NVTX_INJECTION64_PATH"))
		setenv("NVTX_INJECTION64_PATH", path, 1);
	if (r->argv && r->gpu_stalls)
		setenv("SONDE_CUPTI_PC_SAMPLING", "1", 1);
	if (r->argv && r->gpu_graphs)
		setenv("SONDE_CUPTI_GRAPHS", r->gpu_graphs, 1);
}

/* The samplers, the sideband and the GPU probes, watching the -p pids. 0,
 * or -1 after printing why. */
static int start_probes(struct record *r)
{
	struct sideband_opts sbo = {.filter_pids = r->filter_pids};

	r->sym = symbolizer__new();
	if (!r->sym)
		return -1;
	/* The pids (and the command) the BPF programs watch: one filter for
	 * the sampler and the GPU probes. */
	if (r->filter_pids && !(r->pf = pid_filter__new()))
		return -1;
	r->so.pid_filter = r->pf;
	/* First: every exec and mapping from now on is known. */
	r->sb = sideband__open(&sbo, r->sym);
	if (!r->sb)
		return -1;
	r->so.sym = r->sym;
	r->agg = stack_agg__new(r->sym, MAX_STACKS);
	if (r->offcpu) {
		r->offcpu_agg = stack_agg__new(r->sym, MAX_STACKS);
		r->so.offcpu_fn = on_offcpu;
		r->so.offcpu_ctx = r;
	}
	r->cs = cpu_sampler__open(&r->so, on_sample, r);
	if (!r->cs)
		return -1;
	if (r->gpu) {
		struct gpu_probes_opts go = {
			.pid_filter = r->pf,
			.follow_children = r->so.follow_children,
			.user_stacks = true,
			/* The processes are the user's own job: a process that
			 * maps a CUDA library no probe is on yet waits for
			 * the probes (milliseconds) before it runs on. */
			.hold = r->filter_pids ? GPU_HOLD_ALL : GPU_HOLD_NO_TTY,
			.unwinder = cpu_sampler__unwinder(r->cs),
			.sym = r->sym,
		};
		struct gpu_feed_opts fo = {.sym = r->sym, .profiles = true, .trace = true};

		r->feed = gpu_feed__new(&fo);
		r->gp = gpu_probes__open(&go, gpu_feed__event, r->feed);
		if (!r->gp)
			return -1;
		/* The libraries the loader would find, and those the command
		 * links, before it maps them; the others as processes load
		 * them. */
		gpu_probes__attach_known(r->gp);
		use_cupti(r);
		if (r->argv)
			gpu_probes__attach_needed(r->gp, r->cmdpath);
	}
	/* The unwind tables of the command and its libraries before it runs:
	 * a job that launches at once and exits has its stacks whole from its
	 * first call. */
	if (r->argv)
		libscan_needed(r->cmdpath, preload_unwind, r->cs);
	for (int i = 0; i < r->npids; i++) {
		int err = pid_filter__add(r->pf, r->pids[i]);

		if (err) {
			pr_err("can't add pid %d to the probes' filter: %s", r->pids[i],
			       strerror(-err));
			return -1;
		}
		sideband__add_pid(r->sb, r->pids[i]);
	}
	if (r->gp)
		gpu_probes__scan(r->gp);
	return 0;
}

/* Starts the command once everything watches it. 0 or -1 after printing why. */
static int start_command(struct record *r)
{
	int go_fd = -1, err;

	r->child = spawn_held(r->argv, r->cmdpath, &go_fd);
	if (r->child < 0) {
		pr_err("can't start '%s': %s", r->argv[0], strerror(errno));
		return -1;
	}
	sideband__add_pid(r->sb, r->child);
	err = pid_filter__add(r->pf, r->child);
	if (err) {
		pr_err("can't add the command to the probes' filter: %s", strerror(-err));
		close(go_fd);
		kill(r->child, SIGKILL);
		reap_child(r, true);
		return -1;
	}
	/* The child is watched: let it exec. */
	if (write(go_fd, "g", 1) != 1)
		pr_warn("can't release the command: %s", strerror(errno));
	close(go_fd);
	return 0;
}

/* ---- running ---- */

static void poll_all(struct record *r)
{
	/* The kernel's process records first: the samples drained next
	 * belong to processes it has just described. */
	sideband__poll(r->sb);
	cpu_sampler__poll(r->cs);
	if (r->gp)
		gpu_probes__poll(r->gp, 0);
}

/* Once per process, at the end: what it lost to a full ring buffer. */
static void warn_lost(void *ctx, uint32_t pid, uint64_t n)
{
	struct record *r = ctx;

	pr_warn("pid %u (%s): %llu GPU events lost, the probes' ring buffer was full -- "
		"a bigger one: SONDE_GPU_RINGBUF=64M",
		pid, gpu_feed__name(r->feed, pid), (unsigned long long)n);
}

/* What became of the stacks the BPF walk left to userspace. */
static void log_late(struct cpu_sampler *cs)
{
	struct unw_late_stats st;

	cpu_sampler__late_stats(cs, &st);
	if (!st.taken)
		return;
	pr_debug("%llu stacks finished once their unwind tables were built: %llu to their "
		 "end, %llu without a table in time, %llu crowded out, %llu past the stack kept; "
		 "at most %.1f MB waited at once",
		 (unsigned long long)st.taken, (unsigned long long)st.ended,
		 (unsigned long long)st.waited_out, (unsigned long long)st.crowded_out,
		 (unsigned long long)st.stack_cut, (double)st.peak_bytes / 1e6);
}

static void run_loop(struct record *r)
{
	uint64_t deadline = r->duration_ms ? r->t0 + r->duration_ms * NS_PER_MS : 0;
	uint64_t next_scan = r->t0 + GPU_SCAN_NS;

	while (!stop_signal) {
		struct timespec ts = {0, POLL_NS};
		uint64_t now;

		/* The GPU probes wake us at once for a process that waits for
		 * them; else a plain sleep between drains. */
		if (r->gp)
			gpu_probes__poll(r->gp, POLL_NS / NS_PER_MS);
		else
			nanosleep(&ts, NULL);
		poll_all(r);
		now = mono_ns();
		if (r->gp && now >= next_scan) {
			gpu_probes__scan(r->gp);
			next_scan = now + GPU_SCAN_NS;
		}
		if (deadline && now >= deadline)
			break;
		if (r->child > 0) {
			reap_child(r, false);
			if (r->child_done)
				break;
		}
		if (r->npids && !any_alive(r->pids, r->npids))
			break;
	}
	poll_all(r);
	/* The stacks still waiting for their tables, finished (the GPU
	 * probes' first: they walk with the CPU sampler's tables). */
	if (r->gp)
		gpu_probes__flush(r->gp);
	cpu_sampler__flush(r->cs);
	r->end = mono_ns();
	cpu_sampler__stats(r->cs, &r->cpu_st);
	log_late(r->cs);
	if (r->cpu_st.prog_runs)
		pr_debug("the sampling program ran %llu times, %.0f ns each on average",
			 (unsigned long long)r->cpu_st.prog_runs,
			 (double)r->cpu_st.prog_ns / (double)r->cpu_st.prog_runs);
	r->event = cpu_sampler__event(r->cs);
	/* No sample after this point: the profile is the window's. */
	cpu_sampler__free(r->cs);
	r->cs = NULL;
}

/* ---- writing ---- */

static struct profile *new_profile(const struct record *r, const char *type, const char *unit,
				   int64_t period)
{
	struct profile *p = profile__new(type, unit, period);

	p->time_ns = (int64_t)r->wall0;
	p->duration_ns = (int64_t)(r->end - r->t0);
	return p;
}

/* A line per GPU process: what bounded it over the recording, and why. */
struct verdicts {
	struct record *r;
	FILE *f;
};

static void print_verdict(void *ctx, const struct proc_window *w)
{
	struct verdicts *v = ctx;
	struct record *r = v->r;
	char ev[256];

	verdict__evidence(w->verdict.share, ev, sizeof(ev));
	fprintf(v->f, "sonde: pid %u (%s): %s-bound -- %s of %.1f s\n", w->pid,
		gpu_feed__comm(r->feed, w->pid), verdict__name(w->verdict.verdict), ev,
		(double)w->lead.wall_ns / NS_PER_SEC);
}

/* One of the CUPTI library's profiles (type, in unit) built by fill from
 * the feed and written to x.TYPE.EXT, its path into *path (the caller
 * frees it; NULL when out of memory). 0, or a negative errno after
 * printing why. */
static int write_cupti_profile(struct record *r, const char *type, const char *unit,
			       int (*fill)(struct gpu_feed *, struct profile *), char **path)
{
	struct profile *p = new_profile(r, type, unit, 1);
	int ret;

	*path = sibling_path(r->output, type);
	ret = *path ? fill(r->feed, p) : -ENOMEM;
	if (ret)
		pr_err("can't build the %s profile: %s", type, strerror(-ret));
	else
		ret = write_profile_file(p, r->fmt, *path);
	profile__free(p);
	return ret;
}

/* --gpu-stalls: the PC samples by launching stack, kernel, instruction and
 * stall reason, x.gpu_stall.EXT (after nvdisasm named the instructions, a
 * bounded wait). 0, or a negative errno after printing why. */
static int write_gpu_stall(struct record *r)
{
	struct profile *p = new_profile(r, "gpu_stall", "samples", 1);
	struct gpu_time_stats st;
	char *path = NULL;
	int ret;

	/* Built first: samples that waited for their kernel or for nvdisasm
	 * are counted as they go in. */
	ret = gpu_feed__gpu_stall(r->feed, p);
	gpu_feed__gpu_time_stats(r->feed, &st);
	if (ret) {
		pr_err("can't build the gpu_stall profile: %s", strerror(-ret));
	} else if (!st.stall_samples) {
		pr_warn("--gpu-stalls: no PC samples came (a GPU or CUPTI without PC sampling, "
			"or kernels too short for one): no gpu_stall profile");
	} else if (!(path = sibling_path(r->output, "gpu_stall"))) {
		ret = -ENOMEM;
	} else if (!(ret = write_profile_file(p, r->fmt, path)) && !r->quiet) {
		fprintf(stderr,
			"sonde: %llu GPU PC samples, by launching stack, kernel, instruction and "
			"stall reason, written to %s\n",
			(unsigned long long)st.stall_samples, path);
	}
	free(path);
	profile__free(p);
	if (st.stall_dropped)
		pr_warn("CUPTI dropped %llu PC samples (its buffer was full): not in the "
			"gpu_stall profile",
			(unsigned long long)st.stall_dropped);
	return ret;
}

/* The kernels' (and copies') GPU time by launching stack, when Sonde's
 * CUPTI library told of any: x.gpu_time.EXT, and the copies' bytes in
 * x.gpu_memcpy.EXT. 0 or -1 after printing why. */
static int write_gpu_time(struct record *r)
{
	struct gpu_time_stats st;
	char *path;
	int ret;

	gpu_feed__gpu_time_stats(r->feed, &st);
	if (!st.kernels && !st.graphs && !st.copies && !st.no_launch)
		return 0;
	ret = write_cupti_profile(r, "gpu_time", "nanoseconds", gpu_feed__gpu_time, &path);
	if (!ret && !r->quiet) {
		char graphs[64] = "";

		if (st.graphs)
			snprintf(graphs, sizeof(graphs), ", %llu CUDA graph runs (each as a whole)",
				 (unsigned long long)st.graphs);
		fprintf(stderr,
			"sonde: %llu kernels%s and %llu copies, %.3f s on the GPU, by launching "
			"stack, written to %s (and %llu memory records, %llu synchronisations)\n",
			(unsigned long long)st.kernels, graphs, (unsigned long long)st.copies,
			(double)st.ns / NS_PER_SEC, path, (unsigned long long)st.memory,
			(unsigned long long)st.syncs);
	}
	free(path);
	if (st.cupti_lost)
		pr_warn("CUPTI could not record %llu records -- kernels, copies, memory "
			"allocations -- (its buffers were full): not in the gpu_time profile",
			(unsigned long long)st.cupti_lost);
	if (st.no_launch || st.no_kernel)
		pr_warn("%llu kernels ran whose launch was not seen, %llu launches never told of "
			"their kernel: not in the gpu_time profile",
			(unsigned long long)st.no_launch, (unsigned long long)st.no_kernel);
	if (!ret && st.copies) {
		ret = write_cupti_profile(r, "gpu_memcpy", "bytes", gpu_feed__gpu_memcpy, &path);
		if (!ret && !r->quiet)
			fprintf(stderr,
				"sonde: %llu memory copies and sets, %.1f MB, by calling stack, "
				"written to %s\n",
				(unsigned long long)st.copies, (double)st.copy_bytes / 1e6, path);
		free(path);
	}
	if (!ret && r->gpu_stalls)
		ret = write_gpu_stall(r);
	return ret ? -1 : 0;
}

/* The kernel timeline, when Sonde's CUPTI library told of kernels:
 * x.gpu_trace.json, a Chrome trace. 0 or -1 after printing why. */
static int write_gpu_trace(struct record *r)
{
	struct gpu_trace *t = gpu_feed__trace(r->feed);
	struct gpu_trace_stats st;
	char *path;
	FILE *f;
	int err;

	if (!t)
		return 0;
	gpu_trace__stats(t, &st);
	if (!st.kernels)
		return 0;
	/* x.gpu_trace.json whatever the profiles' format. */
	path = sibling_path_ext(r->output, "gpu_trace", ".json");
	if (!path)
		return -1;
	f = fopen(path, "w");
	err = f ? gpu_trace__write(t, f) : -errno;
	if (f && fclose(f) && !err)
		err = -errno;
	if (err)
		pr_err("can't write the kernel timeline %s: %s", path, strerror(-err));
	else if (!r->quiet)
		fprintf(stderr,
			"sonde: the kernels' timeline (%llu kernels%s) written to %s (a Chrome "
			"trace: open it in Perfetto's UI or chrome://tracing)\n",
			(unsigned long long)st.kernels, st.dropped ? ", more were not kept" : "",
			path);
	free(path);
	return err ? -1 : 0;
}

/* The GPU profiles and their summary. 0 or -1 after printing why. */
static int write_gpu(struct record *r)
{
	struct profile *prof[2];
	struct gpu_probes_stats gs;
	struct gpu_feed_stats fs;
	struct verdicts v = {r, NULL};
	bool lost;
	char *lines = NULL;
	size_t len = 0;
	int err, ret = 0;

	gpu_probes__stats(r->gp, &gs);
	gpu_feed__stats(r->feed, &fs);
	prof[0] = new_profile(r, "gpu_launch", "launches", 1);
	prof[1] = new_profile(r, "gpu_wait", "nanoseconds", 1);
	/* Before the profiles: they forget the processes that exited. */
	v.f = r->quiet ? NULL : open_memstream(&lines, &len);
	gpu_feed__judge(r->feed, r->gp, r->end, r->end - r->t0, v.f ? print_verdict : NULL, &v);
	if (v.f)
		fclose(v.f);
	if ((err = gpu_feed__profiles(r->feed, prof[0], prof[1]))) {
		pr_err("can't build the GPU profiles: %s", strerror(-err));
		ret = -1;
	}
	for (int i = 0; !ret && i < 2; i++)
		ret = write_profile_file(prof[i], r->fmt, r->gpu_paths[i]);
	if (!ret && !r->quiet)
		fprintf(stderr,
			"sonde: %llu kernel launches and %llu waits (%.3f s) written to %s and "
			"%s\n",
			(unsigned long long)fs.launches, (unsigned long long)fs.waits,
			(double)prof[1]->total / NS_PER_SEC, r->gpu_paths[0], r->gpu_paths[1]);
	if (!ret && lines)
		fputs(lines, stderr);
	free(lines);
	if (!ret)
		ret = write_gpu_time(r);
	if (!ret)
		ret = write_gpu_trace(r);
	pr_debug("GPU probes: %llu records; at most %.1f MB of them waited to be decoded, the "
		 "longest time between two polls %.3f s",
		 (unsigned long long)gs.received, (double)gs.queue_peak_bytes / 1e6,
		 (double)gs.drain_gap_max_ns / NS_PER_SEC);
	if (gs.late_st.late)
		pr_debug("%llu GPU stacks finished once their unwind tables were built (%llu "
			 "without a table in time, %llu crowded out, %llu walked by frame pointers "
			 "for want of room); events waited up to %.3f s behind them",
			 (unsigned long long)gs.late_st.late,
			 (unsigned long long)gs.late_st.waited_out,
			 (unsigned long long)gs.late_st.crowded_out,
			 (unsigned long long)gs.drops[GPU_DROP_LATE],
			 (double)gs.late_st.max_wait_ns / NS_PER_SEC);
	gpu_probes__each_lost(r->gp, warn_lost, r);
	lost = gs.drops_total || fs.launch_drops || fs.wait_drops;
	if (lost)
		pr_warn("%llu GPU events lost (probes: %llu, stack tables full: %llu)",
			(unsigned long long)(gs.drops_total + fs.launch_drops + fs.wait_drops),
			(unsigned long long)gs.drops_total,
			(unsigned long long)(fs.launch_drops + fs.wait_drops));
	if (fs.unknown_kernels)
		pr_warn("%llu kernel launches could not be named (\"[unknown kernel]\"): their "
			"kernels were looked up before the probes were on, by no name Sonde can "
			"read",
			(unsigned long long)fs.unknown_kernels);
	if (!lost && !ret && !fs.launches && !fs.waits && !r->quiet)
		pr_info("no CUDA kernel launch or wait seen (%u files with CUDA/NCCL functions "
			"attached)",
			gs.files);
	profile__free(prof[0]);
	profile__free(prof[1]);
	return ret;
}

/* The offcpu profile and its summary. 0 or -1 after printing why. */
static int write_offcpu(struct record *r)
{
	struct profile *prof = new_profile(r, "offcpu", "nanoseconds", 1);
	const struct cpu_sampler_stats *st = &r->cpu_st;
	uint64_t lost = st->drops[CPU_DROP_OFFCPU_RATE] + st->drops[CPU_DROP_OFFCPU_RINGBUF] +
			st->drops[CPU_DROP_OFFCPU_STORAGE];
	struct stack_agg_stats ast;
	int err, ret = 0;

	if ((err = stack_agg__to_profile(r->offcpu_agg, prof))) {
		pr_err("can't build the off-CPU profile: %s", strerror(-err));
		ret = -1;
	}
	if (!ret)
		ret = write_profile_file(prof, r->fmt, r->offcpu_path);
	stack_agg__stats(r->offcpu_agg, &ast);
	if (!ret && !r->quiet)
		fprintf(stderr,
			"sonde: %llu waits of at least %.3g ms, %.3f s off-CPU, written to %s\n",
			(unsigned long long)st->offcpu_received,
			(double)st->offcpu_min_ns / NS_PER_MS, (double)prof->total / NS_PER_SEC,
			r->offcpu_path);
	if (lost || ast.dropped)
		pr_warn("%llu off-CPU waits lost, %.3f s (over the rate bound of %llu/s: %llu, "
			"ring buffer full: %llu, no memory: %llu, stack table full: %llu)",
			(unsigned long long)(lost + ast.dropped),
			(double)st->counts[CPU_CNT_OFFCPU_DROPPED_NS] / NS_PER_SEC,
			(unsigned long long)st->offcpu_rate,
			(unsigned long long)st->drops[CPU_DROP_OFFCPU_RATE],
			(unsigned long long)st->drops[CPU_DROP_OFFCPU_RINGBUF],
			(unsigned long long)st->drops[CPU_DROP_OFFCPU_STORAGE],
			(unsigned long long)ast.dropped);
	if (!r->quiet)
		pr_debug("off-CPU: %llu blocks timed, %llu under the minimum (%.3f s), %llu waits "
			 "with the user leaf only",
			 (unsigned long long)st->counts[CPU_CNT_OFFCPU_BLOCKS],
			 (unsigned long long)st->counts[CPU_CNT_OFFCPU_SHORT],
			 (double)st->counts[CPU_CNT_OFFCPU_SHORT_NS] / NS_PER_SEC,
			 (unsigned long long)st->counts[CPU_CNT_OFFCPU_LEAF_ONLY]);
	profile__free(prof);
	return ret;
}

/* Every profile and the summary lines. 0 or -1 after printing why. */
static int write_outputs(struct record *r)
{
	struct profile *prof = new_profile(r, "cpu", "nanoseconds", NS_PER_SEC / r->freq);
	struct stack_agg_stats ast;
	int err, ret = 0;

	if ((err = stack_agg__to_profile(r->agg, prof))) {
		pr_err("can't build the profile: %s", strerror(-err));
		ret = -1;
	} else if ((err = profile__write(prof, r->fmt, r->out)) ||
		   (fflush(r->out) && (err = -errno))) {
		pr_err("can't write the output file '%s': %s", r->output, strerror(-err));
		ret = -1;
	}
	profile__free(prof);
	if (!ret && r->gp)
		ret = write_gpu(r);
	if (!ret && r->offcpu_agg)
		ret = write_offcpu(r);
	if (ret)
		return ret;
	stack_agg__stats(r->agg, &ast);
	if (!r->quiet)
		fprintf(stderr,
			"sonde: %llu samples of %llu processes (%s, %ld Hz) written to %s (%s)\n",
			(unsigned long long)r->cpu_st.received, (unsigned long long)ast.pids,
			r->event, r->freq, strcmp(r->output, "-") ? r->output : "stdout",
			prof_format_name(r->fmt));
	if (r->cpu_st.drops[CPU_DROP_RINGBUF] || ast.dropped)
		pr_warn("%llu samples lost (ring buffer full: %llu, stack table full: %llu)",
			(unsigned long long)(r->cpu_st.drops[CPU_DROP_RINGBUF] + ast.dropped),
			(unsigned long long)r->cpu_st.drops[CPU_DROP_RINGBUF],
			(unsigned long long)ast.dropped);
	if (r->cpu_st.drops[CPU_DROP_USTACK])
		pr_warn("%llu samples walked by frame pointers past code whose unwind table was "
			"not built yet: the ring buffer had no room to keep the ends of their "
			"stacks -- a lower -F keeps more",
			(unsigned long long)r->cpu_st.drops[CPU_DROP_USTACK]);
	return 0;
}

/* The exit code once the profiles are written: the command's, when it ran
 * to its end; after Ctrl-C the command is stopped and the code is 0. */
static int finish_command(struct record *r)
{
	if (r->child <= 0)
		return 0;
	if (stop_signal) {
		reap_child(r, false);
		if (!r->child_done) {
			kill(r->child, SIGTERM);
			reap_child(r, true);
		}
		return 0;
	}
	reap_child(r, true);
	if (WIFEXITED(r->child_status))
		return WEXITSTATUS(r->child_status);
	if (WIFSIGNALED(r->child_status))
		return 128 + WTERMSIG(r->child_status);
	return 0;
}

static void record_free(struct record *r)
{
	gpu_probes__free(r->gp);
	gpu_feed__free(r->feed);
	for (int i = 0; i < 2; i++)
		free(r->gpu_paths[i]);
	cpu_sampler__free(r->cs);
	stack_agg__free(r->agg);
	stack_agg__free(r->offcpu_agg);
	free(r->offcpu_path);
	sideband__free(r->sb);
	pid_filter__free(r->pf);
	symbolizer__free(r->sym);
}

int cmd_record(int argc, char **argv)
{
	struct record r = {
		.freq = 99,
		.fmt = PROF_FMT_NONE,
		.so = {.kernel_stacks = true, .user_stacks = true},
	};
	int ret, fail;

	ret = parse_args(&r, argc, argv);
	if (ret)
		return ret < 0 ? 0 : ret;
	fail = r.argv ? EXIT_CMD_FAIL : EXIT_FAIL;
	if (r.argv) {
		int err = resolve_command(r.argv[0], r.cmdpath, sizeof(r.cmdpath));

		if (err) {
			pr_err("can't run '%s': %s", r.argv[0],
			       err == -ENOENT ? "command not found" : strerror(-err));
			return err == -ENOENT ? EXIT_CMD_NOTFOUND : EXIT_CMD_NOEXEC;
		}
	}
	if (check_privileges() || check_btf())
		return fail;
	ret = fail;
	if (open_outputs(&r) || start_probes(&r))
		goto out;
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	if (r.argv && start_command(&r))
		goto out;
	r.t0 = mono_ns();
	r.wall0 = wall_ns();
	/* Said once everything watches: a script may wait for this line. */
	if (!r.quiet && !r.argv)
		fprintf(stderr, "sonde: sampling %s at %ld Hz... Ctrl-C to stop\n",
			r.npids ? "the given pids" : "every CPU", r.freq);
	run_loop(&r);
	if (write_outputs(&r))
		goto out;
	ret = finish_command(&r);
out:
	if (r.out && r.out != stdout && fclose(r.out) && ret == 0) {
		pr_err("can't write the output file '%s': %s", r.output, strerror(errno));
		ret = fail;
	}
	/* Failed with the command still running: it must not outlive us
	 * unprofiled. Never signal a pid already reaped. */
	if (r.child > 0 && !r.child_done) {
		kill(r.child, SIGKILL);
		reap_child(&r, true);
	}
	record_free(&r);
	return ret;
}
