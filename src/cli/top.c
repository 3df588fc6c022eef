/* top.c: `sonde top` -- a live terminal view of the hottest functions
 * (self and total share of the samples in the last interval), refreshed in
 * place; `q` quits. With -b it prints one table per interval instead, for
 * scripts and logs. With --offcpu the functions threads block in, by the
 * time they were off the CPU. */
#include "probe/cpu_sampler.h"
#include "common/text.h"
#include "common/clock.h"
#include "probe/host.h"
#include "probe/pid_filter.h"
#include "probe/sideband.h"
#include "agent/stack_agg.h"
#include "cli/cli.h"
#include "common/count.h"
#include "common/log.h"
#include "common/xalloc.h"
#include "profile/profile.h"
#include "symbolize/symbolize.h"

#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>
#include <jansson.h>
#include <uthash.h>

#define MAX_FUNCS 200000 /* distinct functions tracked per interval */
/* SELF%, TOTAL% and PROCESS with their gaps, before FUNCTION. */
#define TOP_FIXED_COLS (7 + 1 + 7 + 2 + 15 + 2)

static const char top_help[] =
	"Usage: sonde top [-F HZ] [-p PID[,PID...]] [-d SECONDS] [-n COUNT] [-b] [-j]\n"
	"                 [--offcpu [--offcpu-min TIME]]\n"
	"\n"
	"Live view of the functions using the most CPU on this machine (or in the -p\n"
	"processes): every CPU's stack is sampled -F times a second while it runs\n"
	"something (idle CPUs give no samples), and each refresh (-d) counts the\n"
	"samples of the interval just ended, afresh.\n"
	"\n"
	"The first line: the time, the CPUs sampled, the perf event and its rate, the\n"
	"samples taken in the interval (grouped by thousands) and those lost (the\n"
	"ring buffer was full). Then a row per function and process, by SELF%:\n"
	"  SELF%     share of the interval's samples in which the function itself was\n"
	"            running (the top of the stack): its own CPU time; over all the\n"
	"            functions, SELF% adds up to 100\n"
	"  TOTAL%    share in which it was anywhere on the stack: its own time and that\n"
	"            of the functions it called (once a sample, however deep it recurs)\n"
	"  PROCESS   the name of the process it ran in (its main thread's, as ps shows\n"
	"            it): a function run by two programs has a row for each\n"
	"  FUNCTION  its name; MODULE+0xOFFSET where the file has no symbol for it\n"
	"  MODULE    the file it is in: the executable, a shared library, or\n"
	"            [kernel.kallsyms] for the kernel's functions\n"
	"\n"
	"With --offcpu, where threads block instead: each wait of at least\n"
	"--offcpu-min, weighted by the time it kept its thread off the CPU. The first\n"
	"line says the waits of the interval, their time and those lost; SELF% is the\n"
	"share of that time the function was the one that called into the scheduler\n"
	"(a kernel function), TOTAL% of the time it was on the waiting stack.\n"
	"\n"
	"Options:\n"
	"  -F, --freq HZ       samples per second per CPU (default 99)\n"
	"  -p, --pid PIDS      only these processes\n"
	"  -d, --delay SECS    refresh interval (default 1)\n"
	"  -n, --iterations N  exit after N refreshes\n"
	"  -b, --batch         print each refresh as plain text (default when stdout\n"
	"                      is not a terminal)\n"
	"  -j, --json          with -b: one JSON object per refresh, one per line\n"
	"      --offcpu        where threads block, not where they run\n"
	"      --offcpu-min TIME  the shortest wait counted (default 1ms; e.g. 200us)\n"
	"  -h, --help          this text\n"
	"\n"
	"Keys: q quits.\n";

/* A function in a process (by its name, as perf top's comm,sym). */
struct func_stat {
	UT_hash_handle hh;
	uint64_t self, total;
	uint64_t last_sample; /* dedups recursion in total */
	char *module;
	const char *name; /* in key, after the process's name and a \1 */
	char key[];
};

struct top {
	struct symbolizer *sym;
	struct func_stat *funcs;
	size_t nfuncs;
	/* samples: their weight (a count, or --offcpu's nanoseconds);
	 * records: how many there were. */
	uint64_t samples, records, seq, overflow;
	bool offcpu;
	uint64_t lost0; /* the sampler's lost count at the interval's start */
	struct prof_frame frames[2 * CPU_MAX_FRAMES + 1];
	char names[2 * CPU_MAX_FRAMES + 1][256];
};

static volatile sig_atomic_t stop_signal;

static void on_signal(int sig)
{
	stop_signal = sig;
}

static const char *base_name(const char *path)
{
	return path ? path_base(path) : "";
}

static void add_stack(struct top *t, const struct stack *s, uint64_t weight)
{
	size_t n = symbolize_stack(t->sym, s, 0, t->frames, t->names, ARRAY_SIZE(t->frames));

	/* The process's name (its main thread's), else the thread's. */
	const char *proc = s->pid ? symbolizer__comm(t->sym, s->pid) : "";
	char key[CPU_COMM_LEN + 1 + 256 + 1];
	size_t plen;

	if (!*proc)
		proc = s->pid ? s->comm : "[idle]";
	plen = strnlen(proc, CPU_COMM_LEN);
	t->samples += weight;
	t->records++;
	t->seq++;
	for (size_t i = 0; i < n; i++) {
		const char *name = t->frames[i].func;
		struct func_stat *f;
		size_t klen;

		klen = (size_t)snprintf(key, sizeof(key), "%.*s\1%s", (int)plen, proc, name);
		if (klen >= sizeof(key))
			klen = sizeof(key) - 1;
		HASH_FIND(hh, t->funcs, key, klen, f);
		if (!f) {
			if (t->nfuncs >= MAX_FUNCS) {
				t->overflow++;
				continue;
			}
			f = xcalloc(1, sizeof(*f) + klen + 1);
			memcpy(f->key, key, klen + 1);
			f->name = f->key + plen + 1;
			f->module = xstrdup(base_name(t->frames[i].module));
			HASH_ADD(hh, t->funcs, key, klen, f);
			t->nfuncs++;
		}
		if (i == 0)
			f->self += weight;
		if (f->last_sample != t->seq) {
			f->total += weight;
			f->last_sample = t->seq;
		}
	}
}

static void on_sample(void *ctx, const struct stack *s)
{
	add_stack(ctx, s, 1);
}

static void on_offcpu(void *ctx, const struct offcpu_wait *w)
{
	add_stack(ctx, w->stack, w->blocked_ns);
}

/* What the sampler lost so far: samples, or --offcpu's waits. */
static uint64_t lost_so_far(const struct top *t, struct cpu_sampler *cs)
{
	struct cpu_sampler_stats st;

	cpu_sampler__stats(cs, &st);
	if (t->offcpu)
		return st.drops[CPU_DROP_OFFCPU_RATE] + st.drops[CPU_DROP_OFFCPU_RINGBUF] +
		       st.drops[CPU_DROP_OFFCPU_STORAGE];
	return st.drops[CPU_DROP_RINGBUF];
}

static int by_self(const void *a, const void *b)
{
	const struct func_stat *x = *(const struct func_stat *const *)a;
	const struct func_stat *y = *(const struct func_stat *const *)b;

	if (x->self != y->self)
		return x->self > y->self ? -1 : 1;
	if (x->total != y->total)
		return x->total > y->total ? -1 : 1;
	return strcmp(x->key, y->key);
}

/* The process a row is of: its key up to the \1, into buf. */
static const char *row_proc(const struct func_stat *f, char *buf, size_t len)
{
	snprintf(buf, len, "%.*s", (int)(f->name - 1 - f->key), f->key);
	return buf;
}

static void reset(struct top *t)
{
	struct func_stat *f, *tmp;

	HASH_ITER(hh, t->funcs, f, tmp)
	{
		HASH_DEL(t->funcs, f);
		free(f->module);
		free(f);
	}
	t->nfuncs = 0;
	t->samples = 0;
	t->records = 0;
	t->overflow = 0;
}

/* One line of JSON per refresh: {"time_ms", "type", "interval_s", "samples",
 * "lost", "functions": [{"name", "process", "module", "self", "total",
 * "self_pct", "total_pct"}]}; with --offcpu samples are the waits,
 * "blocked_s" their time, and self and total nanoseconds. */
static void render_json(struct top *t, uint64_t lost, struct func_stat **rows, size_t n,
			double secs)
{
	json_t *o = json_object(), *funcs = json_array();

	json_object_set_new(o, "time_ms", json_integer((json_int_t)wall_ms()));
	json_object_set_new(o, "type", json_string(t->offcpu ? "offcpu" : "cpu"));
	json_object_set_new(o, "interval_s", json_real(secs));
	json_object_set_new(o, "samples", json_integer((json_int_t)t->records));
	if (t->offcpu)
		json_object_set_new(o, "blocked_s", json_real((double)t->samples / NS_PER_SEC));
	json_object_set_new(o, "lost", json_integer((json_int_t)lost));
	for (size_t i = 0; i < n && i < 50; i++) {
		json_t *f = json_object();

		char proc[CPU_COMM_LEN + 1];

		json_object_set_new(f, "name", json_string(rows[i]->name));
		json_object_set_new(f, "process",
				    json_string(row_proc(rows[i], proc, sizeof(proc))));
		json_object_set_new(f, "module", json_string(rows[i]->module));
		json_object_set_new(f, "self", json_integer((json_int_t)rows[i]->self));
		json_object_set_new(f, "total", json_integer((json_int_t)rows[i]->total));
		json_object_set_new(f, "self_pct",
				    json_real(t->samples ? 100.0 * rows[i]->self / t->samples : 0));
		json_object_set_new(
			f, "total_pct",
			json_real(t->samples ? 100.0 * rows[i]->total / t->samples : 0));
		json_array_append_new(funcs, f);
	}
	json_object_set_new(o, "functions", funcs);
	json_dumpf(o, stdout, JSON_COMPACT | JSON_ENSURE_ASCII);
	putchar('\n');
	fflush(stdout);
	json_decref(o);
}

static void render(struct top *t, struct cpu_sampler *cs, long freq, double secs, bool batch,
		   bool json)
{
	struct func_stat **rows = xcalloc(t->nfuncs ? t->nfuncs : 1, sizeof(*rows));
	uint64_t lost = lost_so_far(t, cs) - t->lost0;
	struct cpu_sampler_stats st;
	struct func_stat *f, *tmp;
	struct winsize ws = {.ws_row = 24, .ws_col = 100};
	size_t n = 0, max_rows;
	int cols, modw, funcw;
	char clock[32], nsamples[32], nlost[32];
	time_t now = time(NULL);

	HASH_ITER(hh, t->funcs, f, tmp)
	rows[n++] = f;
	qsort(rows, n, sizeof(*rows), by_self);
	if (json) {
		render_json(t, lost, rows, n, secs);
		free(rows);
		return;
	}
	cpu_sampler__stats(cs, &st);
	strftime(clock, sizeof(clock), "%H:%M:%S", localtime(&now));

	if (!batch)
		ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws);
	max_rows = ws.ws_row > 4 ? ws.ws_row - 4 : 1;
	if (batch)
		max_rows = 20;
	if (!batch)
		fputs("\033[H\033[2J", stdout);
	if (t->offcpu)
		printf("sonde top  %s  %d CPUs  off-CPU waits >= %.3g ms  %s waits, %.2f s blocked "
		       "in "
		       "%.1f s  %s lost%s\n",
		       clock, st.ncpus, (double)st.offcpu_min_ns / NS_PER_MS,
		       fmt_count(nsamples, sizeof(nsamples), t->records),
		       (double)t->samples / NS_PER_SEC, secs, fmt_count(nlost, sizeof(nlost), lost),
		       batch ? "" : "   q: quit");
	else
		printf("sonde top  %s  %d CPUs  %s %ld Hz  %s samples in %.1f s  %s lost%s\n",
		       clock, st.ncpus, cpu_sampler__event(cs), freq,
		       fmt_count(nsamples, sizeof(nsamples), t->samples), secs,
		       fmt_count(nlost, sizeof(nlost), lost), batch ? "" : "   q: quit");
	/* The function's column takes what the terminal's width (100 in
	 * batch) leaves beside the others. */
	cols = batch || !ws.ws_col ? 100 : ws.ws_col;
	modw = cols >= 100 ? 24 : 16;
	funcw = cols - TOP_FIXED_COLS - 1 - modw;
	if (funcw < 16)
		funcw = 16;
	printf("%7s %7s  %-15s  %-*s %s\n", "SELF%", "TOTAL%", "PROCESS", funcw, "FUNCTION",
	       "MODULE");
	for (size_t i = 0; i < n && i < max_rows; i++) {
		double self = t->samples ? 100.0 * rows[i]->self / t->samples : 0;
		double total = t->samples ? 100.0 * rows[i]->total / t->samples : 0;
		char proc[CPU_COMM_LEN + 1];

		if (!rows[i]->self && i > 0)
			break;
		printf("%7.2f %7.2f  %-15.15s  %-*.*s %.*s\n", self, total,
		       row_proc(rows[i], proc, sizeof(proc)), funcw, funcw, rows[i]->name, modw,
		       rows[i]->module);
	}
	if (batch)
		putchar('\n');
	fflush(stdout);
	free(rows);
}

struct top_opts {
	long freq, delay, iterations;
	int pids[1024], npids;
	bool batch, json, offcpu;
	uint64_t offcpu_min_ns;
};

/* Fills o from argv: 0, -1 for --help, or the exit code of a usage error. */
static int parse_args(struct top_opts *o, int argc, char **argv)
{
	static const struct option longopts[] = {
		{"freq", required_argument, NULL, 'F'},
		{"pid", required_argument, NULL, 'p'},
		{"delay", required_argument, NULL, 'd'},
		{"iterations", required_argument, NULL, 'n'},
		{"batch", no_argument, NULL, 'b'},
		{"json", no_argument, NULL, 'j'},
		{"offcpu", no_argument, NULL, 'O'},
		{"offcpu-min", required_argument, NULL, 'm'},
		{"help", no_argument, NULL, 'h'},
		{},
	};
	int opt;

	optind = 1;
	while ((opt = getopt_long(argc, argv, "F:p:d:n:bjh", longopts, NULL)) != -1) {
		switch (opt) {
		case 'F':
			if (parse_int_opt("-F", optarg, 1, 100000, &o->freq))
				return 2;
			break;
		case 'p':
			o->npids = parse_pid_list(optarg, o->pids, 1024);
			if (o->npids < 0)
				return 1;
			break;
		case 'd':
			if (parse_int_opt("-d", optarg, 1, 3600, &o->delay))
				return 2;
			break;
		case 'n':
			if (parse_int_opt("-n", optarg, 1, 1000000, &o->iterations))
				return 2;
			break;
		case 'b':
			o->batch = true;
			break;
		case 'j':
			o->json = true;
			o->batch = true;
			break;
		case 'O':
			o->offcpu = true;
			break;
		case 'm':
			if (parse_duration_ns_opt("--offcpu-min", optarg, 1000,
						  3600ull * NS_PER_SEC, &o->offcpu_min_ns))
				return 2;
			o->offcpu = true;
			break;
		case 'h':
			fputs(top_help, stdout);
			return -1;
		default:
			fputs(top_help, stderr);
			return 2;
		}
	}
	if (optind < argc) {
		pr_err("unexpected argument '%s' -- see `sonde top --help`", argv[optind]);
		return 2;
	}
	return 0;
}

/* Refreshes every o->delay seconds until q, Ctrl-C or o->iterations. */
static void run_loop(struct top *t, struct cpu_sampler *cs, struct sideband *sb,
		     const struct top_opts *o, bool raw)
{
	uint64_t last = mono_ns(), now;
	long done = 0;

	while (!stop_signal) {
		struct pollfd pfd = {.fd = STDIN_FILENO, .events = POLLIN};
		double secs;

		if (raw && poll(&pfd, 1, 10) > 0) {
			char c;

			if (read(STDIN_FILENO, &c, 1) == 1 && (c == 'q' || c == 'Q'))
				break;
		} else if (!raw) {
			struct timespec ts = {0, 10 * NS_PER_MS};

			nanosleep(&ts, NULL);
		}
		sideband__poll(sb);
		cpu_sampler__poll(cs);
		now = mono_ns();
		secs = (double)(now - last) / NS_PER_SEC;
		if (secs < o->delay)
			continue;
		render(t, cs, o->freq, secs, o->batch, o->json);
		reset(t);
		t->lost0 = lost_so_far(t, cs);
		last = now;
		if (o->iterations && ++done >= o->iterations)
			break;
	}
}

int cmd_top(int argc, char **argv)
{
	struct top_opts o = {.freq = 99, .delay = 1, .batch = !isatty(STDOUT_FILENO)};
	struct cpu_sampler_opts so = {.kernel_stacks = true, .user_stacks = true};
	struct sideband_opts sbo = {0};
	struct top *t = xcalloc(1, sizeof(*t));
	struct cpu_sampler *cs = NULL;
	struct sideband *sb = NULL;
	struct pid_filter *pf = NULL;
	struct termios saved;
	bool raw = false;
	int ret;

	ret = parse_args(&o, argc, argv);
	if (ret) {
		ret = ret < 0 ? 0 : ret;
		goto out;
	}
	ret = 1;
	/* A note on stderr would scroll the live view: only problems, unless
	 * SONDE_LOG asks for more. */
	if (!o.batch && !getenv("SONDE_LOG"))
		log_set_level(LOG_WARN);
	if (check_privileges() || check_btf())
		goto out;
	t->sym = symbolizer__new();
	if (!t->sym)
		goto out;
	so.freq = (int)o.freq;
	sbo.filter_pids = o.npids > 0;
	if (o.npids && !(pf = pid_filter__new()))
		goto out;
	so.pid_filter = pf;
	if (o.offcpu) {
		/* Waits only: no CPU samples. */
		t->offcpu = true;
		so.freq = 0;
		so.offcpu_fn = on_offcpu;
		so.offcpu_ctx = t;
		so.offcpu_min_ns = o.offcpu_min_ns;
	}
	/* Processes started from now on are named from the kernel's records. */
	sb = sideband__open(&sbo, t->sym);
	so.sym = t->sym;
	cs = sb ? cpu_sampler__open(&so, on_sample, t) : NULL;
	if (!cs)
		goto out;
	for (int i = 0; i < o.npids; i++) {
		int err = pid_filter__add(pf, o.pids[i]);

		if (err) {
			pr_err("can't add pid %d to the sampler's filter: %s", o.pids[i],
			       strerror(-err));
			goto out;
		}
		sideband__add_pid(sb, o.pids[i]);
	}

	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	if (!o.batch && isatty(STDIN_FILENO) && tcgetattr(STDIN_FILENO, &saved) == 0) {
		struct termios r = saved;

		r.c_lflag &= ~(ICANON | ECHO);
		r.c_cc[VMIN] = 0;
		r.c_cc[VTIME] = 0;
		raw = tcsetattr(STDIN_FILENO, TCSANOW, &r) == 0;
		fputs("\033[?25l", stdout); /* hide the cursor */
	}
	run_loop(t, cs, sb, &o, raw);
	ret = 0;

out:
	if (raw) {
		tcsetattr(STDIN_FILENO, TCSANOW, &saved);
		fputs("\033[?25h\n", stdout);
	}
	cpu_sampler__free(cs);
	sideband__free(sb);
	pid_filter__free(pf);
	reset(t);
	symbolizer__free(t->sym);
	free(t);
	return ret;
}
