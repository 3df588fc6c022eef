/* top.c: `sonde top` -- a live terminal view of the hottest functions
 * (self and total share of the samples in the last interval), refreshed in
 * place; `q` quits. With -b it prints one table per interval instead, for
 * scripts and logs. */
#include "agent/cpu_sampler.h"
#include "common/clock.h"
#include "agent/host.h"
#include "agent/stack_agg.h"
#include "cli/cli.h"
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

static const char top_help[] =
	"Usage: sonde top [-F HZ] [-p PID[,PID...]] [-d SECONDS] [-n COUNT] [-b] [-j]\n"
	"\n"
	"Live view of the functions using the most CPU: SELF%% is the share of\n"
	"samples where the function was running, TOTAL%% where it was on the stack.\n"
	"\n"
	"Options:\n"
	"  -F, --freq HZ       samples per second per CPU (default 99)\n"
	"  -p, --pid PIDS      only these processes\n"
	"  -d, --delay SECS    refresh interval (default 1)\n"
	"  -n, --iterations N  exit after N refreshes\n"
	"  -b, --batch         print each refresh as plain text (default when stdout\n"
	"                      is not a terminal)\n"
	"  -j, --json          with -b: one JSON object per refresh, one per line\n"
	"  -h, --help          this text\n"
	"\n"
	"Keys: q quits.\n";

struct func_stat {
	UT_hash_handle hh;
	uint64_t self, total;
	uint64_t last_sample; /* dedups recursion in total */
	char *module;
	char name[];
};

struct top {
	struct symbolizer *sym;
	struct func_stat *funcs;
	size_t nfuncs;
	uint64_t samples, seq, overflow;
	struct prof_frame frames[2 * CPU_MAX_FRAMES];
	char names[2 * CPU_MAX_FRAMES][256];
};

static volatile sig_atomic_t stop_signal;

static void on_signal(int sig)
{
	stop_signal = sig;
}

static const char *base_name(const char *path)
{
	const char *slash = path ? strrchr(path, '/') : NULL;

	return slash ? slash + 1 : path ? path : "";
}

static void on_sample(void *ctx, const struct cpu_sample *s)
{
	struct top *t = ctx;
	size_t n = symbolize_sample(t->sym, s, 0, t->frames, t->names, ARRAY_SIZE(t->frames));

	t->samples++;
	t->seq++;
	for (size_t i = 0; i < n; i++) {
		const char *name = t->frames[i].func;
		struct func_stat *f;

		HASH_FIND_STR(t->funcs, name, f);
		if (!f) {
			size_t len = strlen(name);

			if (t->nfuncs >= MAX_FUNCS) {
				t->overflow++;
				continue;
			}
			f = xcalloc(1, sizeof(*f) + len + 1);
			memcpy(f->name, name, len + 1);
			f->module = xstrdup(base_name(t->frames[i].module));
			HASH_ADD_STR(t->funcs, name, f);
			t->nfuncs++;
		}
		if (i == 0)
			f->self++;
		if (f->last_sample != t->seq) {
			f->total++;
			f->last_sample = t->seq;
		}
	}
}

static int by_self(const void *a, const void *b)
{
	const struct func_stat *x = *(const struct func_stat *const *)a;
	const struct func_stat *y = *(const struct func_stat *const *)b;

	if (x->self != y->self)
		return x->self > y->self ? -1 : 1;
	if (x->total != y->total)
		return x->total > y->total ? -1 : 1;
	return strcmp(x->name, y->name);
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
	t->overflow = 0;
}

/* One line of JSON per refresh: {"time_ms", "interval_s", "samples", "lost",
 * "functions": [{"name", "module", "self", "total", "self_pct", "total_pct"}]}. */
static void render_json(struct top *t, struct cpu_sampler *cs, struct func_stat **rows, size_t n,
			double secs)
{
	json_t *o = json_object(), *funcs = json_array();
	struct cpu_sampler_stats st;

	cpu_sampler__stats(cs, &st);
	json_object_set_new(o, "time_ms", json_integer((json_int_t)wall_ms()));
	json_object_set_new(o, "interval_s", json_real(secs));
	json_object_set_new(o, "samples", json_integer((json_int_t)t->samples));
	json_object_set_new(o, "lost", json_integer((json_int_t)st.drop_ringbuf));
	for (size_t i = 0; i < n && i < 50; i++) {
		json_t *f = json_object();

		json_object_set_new(f, "name", json_string(rows[i]->name));
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
	struct cpu_sampler_stats st;
	struct func_stat *f, *tmp;
	struct winsize ws = {.ws_row = 24, .ws_col = 100};
	size_t n = 0, max_rows;
	char clock[32];
	time_t now = time(NULL);

	HASH_ITER(hh, t->funcs, f, tmp)
	rows[n++] = f;
	qsort(rows, n, sizeof(*rows), by_self);
	if (json) {
		render_json(t, cs, rows, n, secs);
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
	printf("sonde top  %s  %d CPUs  %s %ld Hz  %llu samples in %.1fs  %llu lost%s\n", clock,
	       st.ncpus, cpu_sampler__event(cs), freq, (unsigned long long)t->samples, secs,
	       (unsigned long long)st.drop_ringbuf, batch ? "" : "   q: quit");
	printf("%7s %7s  %-58s %s\n", "SELF%", "TOTAL%", "FUNCTION", "MODULE");
	for (size_t i = 0; i < n && i < max_rows; i++) {
		double self = t->samples ? 100.0 * rows[i]->self / t->samples : 0;
		double total = t->samples ? 100.0 * rows[i]->total / t->samples : 0;

		if (!rows[i]->self && i > 0)
			break;
		printf("%7.2f %7.2f  %-58.58s %.24s\n", self, total, rows[i]->name,
		       rows[i]->module);
	}
	if (batch)
		putchar('\n');
	fflush(stdout);
	free(rows);
}

int cmd_top(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"freq", required_argument, NULL, 'F'},
		{"pid", required_argument, NULL, 'p'},
		{"delay", required_argument, NULL, 'd'},
		{"iterations", required_argument, NULL, 'n'},
		{"batch", no_argument, NULL, 'b'},
		{"json", no_argument, NULL, 'j'},
		{"help", no_argument, NULL, 'h'},
		{},
	};
	struct cpu_sampler_opts so = {.freq = 99, .kernel_stacks = true, .user_stacks = true};
	long freq = 99, delay = 1, iterations = 0, done = 0;
	int pids[1024], npids = 0, opt, ret = 1;
	bool batch = !isatty(STDOUT_FILENO), raw = false, json = false;
	struct termios saved;
	struct cpu_sampler *cs = NULL;
	struct top *t = xcalloc(1, sizeof(*t));
	uint64_t last, now;

	optind = 1;
	while ((opt = getopt_long(argc, argv, "F:p:d:n:bjh", longopts, NULL)) != -1) {
		switch (opt) {
		case 'F':
			if (parse_int_opt("-F", optarg, 1, 100000, &freq))
				goto out;
			break;
		case 'p':
			npids = parse_pid_list(optarg, pids, 1024);
			if (npids < 0)
				goto out;
			break;
		case 'd':
			if (parse_int_opt("-d", optarg, 1, 3600, &delay))
				goto out;
			break;
		case 'n':
			if (parse_int_opt("-n", optarg, 1, 1000000, &iterations))
				goto out;
			break;
		case 'b':
			batch = true;
			break;
		case 'j':
			json = true;
			batch = true;
			break;
		case 'h':
			fputs(top_help, stdout);
			ret = 0;
			goto out;
		default:
			fputs(top_help, stderr);
			ret = 2;
			goto out;
		}
	}
	if (optind < argc) {
		pr_err("unexpected argument '%s' -- see `sonde top --help`", argv[optind]);
		ret = 2;
		goto out;
	}
	if (check_privileges() || check_btf())
		goto out;

	t->sym = symbolizer__new();
	so.freq = (int)freq;
	so.filter_pids = npids > 0;
	cs = cpu_sampler__open(&so, on_sample, t);
	if (!cs)
		goto out;
	for (int i = 0; i < npids; i++)
		cpu_sampler__add_pid(cs, pids[i]);

	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	if (!batch && isatty(STDIN_FILENO) && tcgetattr(STDIN_FILENO, &saved) == 0) {
		struct termios r = saved;

		r.c_lflag &= ~(ICANON | ECHO);
		r.c_cc[VMIN] = 0;
		r.c_cc[VTIME] = 0;
		raw = tcsetattr(STDIN_FILENO, TCSANOW, &r) == 0;
		fputs("\033[?25l", stdout); /* hide the cursor */
	}

	last = mono_ns();
	while (!stop_signal) {
		struct pollfd pfd = {.fd = STDIN_FILENO, .events = POLLIN};
		double secs;

		if (raw && poll(&pfd, 1, 10) > 0) {
			char c;

			if (read(STDIN_FILENO, &c, 1) == 1 && (c == 'q' || c == 'Q'))
				break;
		} else if (!raw) {
			struct timespec ts = {0, 10 * 1000 * 1000};

			nanosleep(&ts, NULL);
		}
		cpu_sampler__poll(cs);
		now = mono_ns();
		secs = (double)(now - last) / 1e9;
		if (secs < delay)
			continue;
		render(t, cs, freq, secs, batch, json);
		reset(t);
		last = now;
		if (iterations && ++done >= iterations)
			break;
	}
	ret = 0;

out:
	if (raw) {
		tcsetattr(STDIN_FILENO, TCSANOW, &saved);
		fputs("\033[?25h\n", stdout);
	}
	cpu_sampler__free(cs);
	reset(t);
	symbolizer__free(t->sym);
	free(t);
	return ret;
}
