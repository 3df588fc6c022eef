/* record.c: `sonde record` -- samples the whole machine, some pids, or a
 * command it starts (and that command's children), then writes a folded,
 * pprof or speedscope profile. The contract of its options and exit codes is
 * relied on by scripts outside this repo: see docs/cli.md. */
#include "agent/cpu_sampler.h"
#include "common/clock.h"
#include "agent/gpu_feed.h"
#include "agent/gpu_probes.h"
#include "agent/preflight.h"
#include "agent/stack_agg.h"
#include "cli/cli.h"
#include "common/log.h"
#include "profile/profile.h"
#include "symbolize/symbolize.h"

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
#define POLL_NS (10 * 1000 * 1000) /* ring buffer drain interval */
#define GPU_SCAN_NS 1000000000ull  /* periodic scan for CUDA/NCCL libraries */

static const char record_help[] =
	"Usage: sonde record [-F HZ] [-d SECONDS] [-p PID[,PID...]] [-o FILE]\n"
	"                    [-f folded|pprof|speedscope] [--gpu] [-- COMMAND [ARGS...]]\n"
	"\n"
	"Samples on-CPU stacks (kernel and user) and writes a profile.\n"
	"  with neither -p nor COMMAND: the whole machine, until -d ends or Ctrl-C;\n"
	"  -p: those processes, until they all exit, -d ends, or Ctrl-C;\n"
	"  COMMAND: starts it, profiles it and its children until it exits, and\n"
	"           exits with its exit code.\n"
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
	"      --no-kernel       user stacks only\n"
	"      --idle            keep samples of idle CPUs (whole machine only)\n"
	"  -q, --quiet           no summary line\n"
	"  -h, --help            this text\n"
	"\n"
	"Ctrl-C writes what was collected and exits 0.\n";

static volatile sig_atomic_t stop_signal;

static void on_signal(int sig)
{
	stop_signal = sig;
}

static void on_sample(void *ctx, const struct cpu_sample *s)
{
	stack_agg__add(ctx, s);
}

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

/* Forks COMMAND held at a pipe until the sampler watches it; returns the pid
 * and the write end of the go pipe, or -1. */
static pid_t spawn_held(char **argv, const char *path, int *go_fd)
{
	int go[2];
	pid_t pid;

	if (pipe2(go, O_CLOEXEC))
		return -1;
	pid = fork();
	if (pid < 0) {
		close(go[0]);
		close(go[1]);
		return -1;
	}
	if (pid == 0) {
		char c;

		close(go[1]);
		if (read(go[0], &c, 1) != 1)
			_exit(127);
		signal(SIGPIPE, SIG_DFL);
		execv(path, argv);
		fprintf(stderr, "sonde: can't run '%s': %s\n", argv[0], strerror(errno));
		_exit(127);
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

/* FILE with ".TYPE" before its format's extension: "x.pb.gz" ->
 * "x.gpu_launch.pb.gz", "x" -> "x.gpu_launch". Caller frees. */
static char *sibling_path(const char *path, const char *type)
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
	out = malloc(n + strlen(type) + 2);
	if (out)
		sprintf(out, "%.*s.%s%s", (int)base, path, type, path + base);
	return out;
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

int cmd_record(int argc, char **argv)
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
		{"quiet", no_argument, NULL, 'q'},
		{"help", no_argument, NULL, 'h'},
		{},
	};
	struct cpu_sampler_opts so = {.freq = 99, .kernel_stacks = true, .user_stacks = true};
	enum prof_format fmt = PROF_FMT_NONE;
	const char *output = NULL;
	long freq = 99;
	uint64_t duration_ms = 0;
	int pids[MAX_PIDS], npids = 0, opt, go_fd = -1, ret = 1, child_status = 0;
	bool quiet = false, child_done = false, gpu = false;
	char *gpu_paths[2] = {NULL, NULL};
	struct gpu_probes *gp = NULL;
	struct gpu_feed *feed = NULL;
	struct profile *gpu_prof[2] = {NULL, NULL};
	uint64_t next_scan = 0;
	char cmdpath[PATH_MAX];
	struct symbolizer *sym = NULL;
	struct stack_agg *agg = NULL;
	struct cpu_sampler *cs = NULL;
	struct profile *prof = NULL;
	struct cpu_sampler_stats st;
	struct stack_agg_stats ast;
	FILE *out = NULL;
	pid_t child = -1;
	uint64_t t0, wall0, deadline = 0;
	const char *event = "";

	optind = 1;
	while ((opt = getopt_long(argc, argv, "+F:d:p:o:f:qh", longopts, NULL)) != -1) {
		switch (opt) {
		case 'F':
			if (parse_int_opt("-F", optarg, 1, 100000, &freq))
				return 2;
			break;
		case 'd':
			if (parse_duration_opt("-d", optarg, 1, 365ull * 86400 * 1000,
					       &duration_ms))
				return 2;
			break;
		case 'p':
			npids = parse_pid_list(optarg, pids, MAX_PIDS);
			if (npids < 0)
				return 1;
			break;
		case 'o':
			output = optarg;
			break;
		case 'f':
			fmt = prof_format_from_name(optarg);
			if (fmt == PROF_FMT_NONE) {
				pr_err("unknown format '%s' -- use folded, pprof or speedscope",
				       optarg);
				return 2;
			}
			break;
		case 'K':
			so.kernel_stacks = false;
			break;
		case 'I':
			so.include_idle = true;
			break;
		case 'G':
			gpu = true;
			break;
		case 'q':
			quiet = true;
			break;
		case 'h':
			fputs(record_help, stdout);
			return 0;
		default:
			fputs(record_help, stderr);
			return 2;
		}
	}
	argc -= optind;
	argv += optind;
	if (argc > 0 && npids > 0) {
		pr_err("give either -p or a command, not both");
		return 2;
	}

	if (argc > 0) {
		int err = resolve_command(argv[0], cmdpath, sizeof(cmdpath));

		if (err) {
			pr_err("can't run '%s': %s", argv[0],
			       err == -ENOENT ? "command not found" : strerror(-err));
			return 127;
		}
	}
	if (fmt == PROF_FMT_NONE && output)
		fmt = prof_format_from_path(output);
	if (fmt == PROF_FMT_NONE)
		fmt = PROF_FMT_FOLDED;
	if (!output)
		output = default_output(fmt);
	if (gpu && !strcmp(output, "-")) {
		pr_err("--gpu writes three profiles: give -o FILE, not stdout");
		return 2;
	}
	if (check_privileges() || check_btf())
		return 1;

	/* Open the output first: an unwritable path fails before any work. */
	if (!strcmp(output, "-")) {
		out = stdout;
	} else {
		out = fopen(output, "w");
		if (!out) {
			pr_err("can't write the output file '%s': %s", output, strerror(errno));
			return 1;
		}
	}

	sym = symbolizer__new();
	agg = stack_agg__new(sym, MAX_STACKS);
	if (gpu) {
		/* The GPU profiles go beside the CPU one: check they can be
		 * written before any work, too. */
		for (int i = 0; i < 2; i++) {
			FILE *f;

			gpu_paths[i] = sibling_path(output, i ? "gpu_wait" : "gpu_launch");
			f = gpu_paths[i] ? fopen(gpu_paths[i], "w") : NULL;
			if (!f) {
				pr_err("can't write the output file '%s': %s", gpu_paths[i],
				       strerror(errno));
				goto cleanup;
			}
			fclose(f);
		}
	}
	so.freq = (int)freq;
	so.filter_pids = npids > 0 || argc > 0;
	so.follow_children = argc > 0;
	if (so.filter_pids)
		so.include_idle = false;
	cs = cpu_sampler__open(&so, on_sample, agg);
	if (!cs)
		goto cleanup;
	for (int i = 0; i < npids; i++)
		if (cpu_sampler__add_pid(cs, pids[i])) {
			pr_err("can't add pid %d to the sampler's filter: %s", pids[i],
			       strerror(errno));
			goto cleanup;
		}
	if (gpu) {
		struct gpu_probes_opts go = {
			.filter_pids = so.filter_pids,
			.follow_children = so.follow_children,
			.user_stacks = true,
		};
		struct gpu_feed_opts fo = {.sym = sym};

		feed = gpu_feed__new(&fo);
		gp = gpu_probes__open(&go, gpu_feed__event, feed);
		if (!gp)
			goto cleanup;
		for (int i = 0; i < npids; i++)
			gpu_probes__add_pid(gp, pids[i]);
		/* The libraries the loader would find, before the command maps
		 * them; the others as processes load them. */
		gpu_probes__attach_known(gp);
		gpu_probes__scan(gp);
	}

	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	if (argc > 0) {
		child = spawn_held(argv, cmdpath, &go_fd);
		if (child < 0) {
			pr_err("can't start '%s': %s", argv[0], strerror(errno));
			goto cleanup;
		}
		if (cpu_sampler__add_pid(cs, child) || (gp && gpu_probes__add_pid(gp, child))) {
			pr_err("can't add the command to the sampler's filter: %s",
			       strerror(errno));
			kill(child, SIGKILL);
			waitpid(child, NULL, 0);
			goto cleanup;
		}
		/* The child is watched: let it exec. */
		if (write(go_fd, "g", 1) != 1)
			pr_warn("can't release the command: %s", strerror(errno));
		close(go_fd);
	}

	t0 = mono_ns();
	wall0 = wall_ns();
	if (duration_ms)
		deadline = t0 + duration_ms * 1000000ull;
	if (!quiet && isatty(STDERR_FILENO) && argc == 0)
		fprintf(stderr, "sonde: sampling %s at %ld Hz... Ctrl-C to stop\n",
			npids ? "the given pids" : "every CPU", freq);

	while (!stop_signal) {
		struct timespec ts = {0, POLL_NS};

		nanosleep(&ts, NULL);
		cpu_sampler__poll(cs);
		if (gp) {
			gpu_probes__poll(gp, 0);
			if (mono_ns() >= next_scan) {
				gpu_probes__scan(gp);
				next_scan = mono_ns() + GPU_SCAN_NS;
			}
		}
		if (deadline && mono_ns() >= deadline)
			break;
		if (child > 0 && waitpid(child, &child_status, WNOHANG) == child) {
			child_done = true;
			break;
		}
		if (npids && !any_alive(pids, npids))
			break;
	}
	cpu_sampler__poll(cs);
	if (gp)
		gpu_probes__poll(gp, 0);
	cpu_sampler__stats(cs, &st);
	event = cpu_sampler__event(cs);
	cpu_sampler__free(cs);
	cs = NULL;

	prof = profile__new("cpu", "nanoseconds", 1000000000 / freq);
	prof->time_ns = (int64_t)wall0;
	prof->duration_ns = (int64_t)(mono_ns() - t0);
	if (stack_agg__to_profile(agg, prof)) {
		pr_err("can't build the profile: %s", strerror(errno));
		goto cleanup;
	}
	if (profile__write(prof, fmt, out) || fflush(out)) {
		pr_err("can't write the output file '%s': %s", output, strerror(errno));
		goto cleanup;
	}
	if (gp) {
		struct gpu_probes_stats gs;
		struct gpu_feed_stats fs;

		gpu_probes__stats(gp, &gs);
		gpu_feed__stats(feed, &fs);
		gpu_prof[0] = profile__new("gpu_launch", "launches", 1);
		gpu_prof[1] = profile__new("gpu_wait", "nanoseconds", 1);
		for (int i = 0; i < 2; i++) {
			gpu_prof[i]->time_ns = prof->time_ns;
			gpu_prof[i]->duration_ns = prof->duration_ns;
		}
		if (gpu_feed__profiles(feed, gpu_prof[0], gpu_prof[1])) {
			pr_err("can't build the GPU profiles: %s", strerror(errno));
			goto cleanup;
		}
		for (int i = 0; i < 2; i++)
			if (write_profile_file(gpu_prof[i], fmt, gpu_paths[i]))
				goto cleanup;
		if (!quiet)
			fprintf(stderr,
				"sonde: %llu kernel launches and %llu waits (%.3f s) written to %s "
				"and "
				"%s\n",
				(unsigned long long)fs.launches, (unsigned long long)fs.waits,
				(double)gpu_prof[1]->total / 1e9, gpu_paths[0], gpu_paths[1]);
		if (gs.drops_total || fs.launch_drops || fs.wait_drops)
			pr_warn("%llu GPU events lost (probes: %llu, stack tables full: %llu)",
				(unsigned long long)(gs.drops_total + fs.launch_drops +
						     fs.wait_drops),
				(unsigned long long)gs.drops_total,
				(unsigned long long)(fs.launch_drops + fs.wait_drops));
		else if (!fs.launches && !fs.waits && !quiet)
			pr_info("no CUDA kernel launch or wait seen (%u files with CUDA/NCCL "
				"functions attached)",
				gs.files);
	}
	stack_agg__stats(agg, &ast);
	if (!quiet)
		fprintf(stderr,
			"sonde: %llu samples of %llu processes (%s, %ld Hz) written to %s (%s)\n",
			(unsigned long long)st.received, (unsigned long long)ast.pids, event, freq,
			strcmp(output, "-") ? output : "stdout", prof_format_name(fmt));
	if (st.drop_ringbuf || ast.dropped)
		pr_warn("%llu samples lost (ring buffer full: %llu, stack table full: %llu)",
			(unsigned long long)(st.drop_ringbuf + ast.dropped),
			(unsigned long long)st.drop_ringbuf, (unsigned long long)ast.dropped);
	if (st.drop_ustack && !quiet)
		pr_debug("%llu samples without a user stack", (unsigned long long)st.drop_ustack);

	ret = 0;
	if (child > 0 && !stop_signal) {
		if (!child_done)
			waitpid(child, &child_status, 0);
		if (WIFEXITED(child_status))
			ret = WEXITSTATUS(child_status);
		else if (WIFSIGNALED(child_status))
			ret = 128 + WTERMSIG(child_status);
	} else if (child > 0) {
		/* Ctrl-C: what was collected is written; reap the command. */
		if (!child_done && waitpid(child, &child_status, WNOHANG) == 0) {
			kill(child, SIGTERM);
			waitpid(child, &child_status, 0);
		}
	}

cleanup:
	gpu_probes__free(gp);
	gpu_feed__free(feed);
	for (int i = 0; i < 2; i++) {
		profile__free(gpu_prof[i]);
		free(gpu_paths[i]);
	}
	cpu_sampler__free(cs);
	profile__free(prof);
	stack_agg__free(agg);
	symbolizer__free(sym);
	if (out && out != stdout && fclose(out) && ret == 0) {
		pr_err("can't write the output file '%s': %s", output, strerror(errno));
		ret = 1;
	}
	if (child > 0 && ret == 1 && !child_done) {
		kill(child, SIGKILL);
		waitpid(child, NULL, 0);
	}
	return ret;
}
