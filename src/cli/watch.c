/* watch.c: `sonde watch [ws://HOST:PORT]` -- a live terminal dashboard of an
 * agent's WebSocket stream (GPU memory per pid:gpu with current/peak bars,
 * launch latency, NCCL allreduce, dataloader wait, stuck collectives),
 * refreshed in place; `q` quits. -b prints each snapshot as plain text, -j
 * as its JSON line. The connection is net/ws_client.h's; this file draws. */
#include "cli/cli.h"
#include "common/clock.h"
#include "common/count.h"
#include "common/log.h"
#include "common/xalloc.h"
#include "metrics/verdict.h"
#include "net/ws_client.h"

#include <errno.h>
#include <getopt.h>
#include <langinfo.h>
#include <locale.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>
#include <jansson.h>

#define WATCH_DEFAULT_URL "ws://127.0.0.1:9092"
#define WATCH_DEFAULT_PORT "9092"
#define WATCH_TIMEOUT_MS 5000
#define WATCH_MAX_MSG (16 * 1024 * 1024)
#define WATCH_WIDTH 100

static const char watch_help[] =
	"Usage: sonde watch [ws://HOST:PORT[/PATH]] [-n COUNT] [-b] [-j]\n"
	"\n"
	"Live dashboard of an agent's WebSocket stream (default " WATCH_DEFAULT_URL ";\n"
	"without a port, " WATCH_DEFAULT_PORT "), redrawn at each snapshot the agent pushes\n"
	"(every second unless its --interval says otherwise). Start an agent with\n"
	"`sonde agent`, or `sonde agent --simulate` for synthetic data.\n"
	"\n"
	"What it shows, all from the agent's JSON snapshot (docs/metrics.md):\n"
	"  header         the address, the agent's node, the time, the snapshot's number\n"
	"                 since watch started; a banner when the data is simulated\n"
	"  GPU memory     a row per process and GPU its CUDA calls allocated on:\n"
	"                 PID:GPU and PROCESS (the process's name), a bar of the memory\n"
	"                 it holds now (filled; a partial block for less than a cell,\n"
	"                 never empty above zero) and its peak ('|'), of the GPU's\n"
	"                 capacity, or of the largest peak when no capacity is known;\n"
	"                 CURRENT, PEAK and CAPACITY in bytes (KiB = 1024 B), USED =\n"
	"                 CURRENT / CAPACITY ('-': capacity unknown)\n"
	"  GPU N (all pids)  what every process holds on device N (a bar when its\n"
	"                 capacity is known); a device shows once a process uses it or\n"
	"                 NVML reports it\n"
	"  CUDA launch latency  time spent in the kernel-launch call (not the kernel's\n"
	"                 run), median (p50) and 99th percentile over all processes;\n"
	"                 launches: how many the agent has counted since it started\n"
	"  NCCL allreduce duration of ncclAllReduce calls, p50 and p99; calls: how many\n"
	"  Dataloader wait  time a PyTorch training loop waited for its next batch (a\n"
	"                 DataLoader iterator's __next__, from the probes on\n"
	"                 libtorch_cpu), p50 and p99; batches: how many\n"
	"  What bounds each process  for each GPU process, in the agent's last window\n"
	"                 (its --window): gpu (waiting in CUDA synchronisations),\n"
	"                 communication (in collectives), input (in DataLoader waits),\n"
	"                 cpu, lock, io (blocked off-CPU; with --offcpu) or idle, and the\n"
	"                 evidence: the shares of the window its leading thread (the one\n"
	"                 most on a CPU or in those waits) spent in each state\n"
	"  Stuck collectives  threads blocked after an NCCL collective: pid and process,\n"
	"                 operation, rank/ranks, communicator, seconds blocked\n"
	"  Waiting for a batch  threads waiting more than a second for a DataLoader's\n"
	"                 next batch (shown only then): pid and process, the loop's\n"
	"                 Python line (file:line in function), seconds waited\n"
	"  Stuck in a synchronisation  threads blocked more than a second in a CUDA\n"
	"                 synchronisation waiting for kernels or copies (shown only\n"
	"                 then): pid and process, the call, its Python line, seconds\n"
	"  last update    how long ago the agent saw its last GPU event\n"
	"Percentiles are over every call seen since the agent started; '-' means no\n"
	"data yet. Counts are grouped by thousands (1,434,660).\n"
	"\n"
	"Options:\n"
	"  -n, --count N   exit after N snapshots\n"
	"  -b, --batch     print each snapshot as plain text (default when stdout is\n"
	"                  not a terminal)\n"
	"  -j, --json      print each snapshot as received, one JSON object per line\n"
	"  -h, --help      this text\n"
	"\n"
	"Keys: q quits.\n";

static volatile sig_atomic_t stop_signal;

static void on_signal(int sig)
{
	stop_signal = sig;
}

struct watch {
	const char *url;
	struct ws_client *ws;
	bool batch, json;
	long count, seen;
	json_t *last;
	uint64_t last_at; /* mono_ms() of the last snapshot */
};

static long ms_since(uint64_t t0_ms)
{
	return (long)(mono_ms() - t0_ms);
}

/* ---- rendering ---- */

static void fmt_bytes(char *buf, size_t len, double b)
{
	static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
	size_t u = 0;

	while (b >= 1024 && u + 1 < ARRAY_SIZE(units)) {
		b /= 1024;
		u++;
	}
	snprintf(buf, len, u ? "%.1f %s" : "%.0f %s", b, units[u]);
}

/* A duration given in ms, in the unit that reads best. */
static void fmt_ms(char *buf, size_t len, double ms)
{
	if (!(ms > 0))
		snprintf(buf, len, "-"); /* no data yet */
	else if (ms < 1)
		snprintf(buf, len, "%.1f us", ms * US_PER_MS);
	else if (ms < MS_PER_SEC)
		snprintf(buf, len, "%.1f ms", ms);
	else
		snprintf(buf, len, "%.2f s", ms / MS_PER_SEC);
}

static double num(const json_t *o, const char *key)
{
	return json_number_value(json_object_get(o, key));
}

/* Bars in eighths of a cell (U+2588 and the partial blocks U+258F..U+2589)
 * where the terminal takes UTF-8, else in whole '#' cells. */
static bool utf8_bars;

static const char *const eighths[] = {"", "▏", "▎", "▍", "▌", "▋", "▊", "▉"};

/* [bar] of width cells: cur filled, the cell of peak marked '|' when past
 * it, both of scale. A value above 0 always shows (at least an eighth, or a
 * '#' in ASCII): 80 MiB of an 80 GiB GPU is not nothing. */
static void bar(FILE *f, double cur, double peak, double scale, int width)
{
	long units = 0, per = utf8_bars ? 8 : 1, full, part, mark = -1;

	if (scale > 0 && cur > 0) {
		double u = cur / scale * (double)(width * per);

		units = u >= (double)(width * per) ? width * per : lround(u);
		if (units < 1)
			units = 1;
	}
	if (scale > 0 && peak > cur)
		mark = lround(ceil(peak / scale * width)) - 1;
	full = units / per;
	part = units % per;
	if (mark >= width)
		mark = width - 1;
	fputc('[', f);
	for (long i = 0; i < width; i++) {
		if (i < full)
			fputs(utf8_bars ? "█" : "#", f);
		else if (i == full && part)
			fputs(eighths[part], f);
		else
			fputc(i == mark ? '|' : utf8_bars ? ' ' : '.', f);
	}
	fputc(']', f);
}

/* " 12.5%" of cap, or "     -" when the capacity is unknown. */
static void fmt_share(char *buf, size_t len, double used, double cap)
{
	if (cap > 0)
		snprintf(buf, len, "%5.1f%%", 100 * used / cap);
	else
		snprintf(buf, len, "%6s", "-");
}

/* Capacity of gpu_id from the snapshot's devices[] (0 when unknown). */
static double capacity(const json_t *snap, json_int_t gpu)
{
	const json_t *d;
	size_t i;

	json_array_foreach(json_object_get(snap, "devices"), i, d)
	{
		if (json_integer_value(json_object_get(d, "gpu_id")) == gpu)
			return num(d, "capacity_bytes");
	}
	return 0;
}

/* The name of a process as the snapshot gives it ("process"), else "?". */
static const char *proc_name(const json_t *o)
{
	const char *name = json_string_value(json_object_get(o, "process"));

	return name && *name ? name : "?";
}

/* Columns of the memory rows: "  PID:GPU    PROCESS         [bar] current
 * peak capacity share" -- the bar takes what the others leave. */
#define MEM_LABEL_W 10
#define MEM_NAME_W 15
#define MEM_FIXED (2 + MEM_LABEL_W + 1 + MEM_NAME_W + 1 + 2 + 3 * 11 + 7)

/* The legends of the bars, longest first: ASCII, UTF-8. */
static const char *const bar_legends[][2] = {
	{"current # / peak |", "current █ / peak |"},
	{"now # / peak |", "now █ / peak |"},
	{"# now |peak", "█ now |peak"},
	{"", ""},
};

static int mem_bar_width(int width)
{
	return width - MEM_FIXED < 4 ? 4 : width - MEM_FIXED;
}

static void render_memory(FILE *f, const json_t *snap, int width)
{
	const json_t *gpu = json_object_get(snap, "gpu_utilization"), *e;
	double maxpeak = 0;
	int barw = mem_bar_width(width);
	size_t i, l = 0;

	/* The bar's legend, the longest that fits, padded by hand: a block is
	 * one column in three bytes. */
	while (l + 1 < ARRAY_SIZE(bar_legends) && (int)strlen(bar_legends[l][0]) > barw + 2)
		l++;
	fprintf(f, "GPU memory\n  %-*s %-*s %s%*s %10s %10s %10s %6s\n", MEM_LABEL_W, "PID:GPU",
		MEM_NAME_W, "PROCESS", bar_legends[l][utf8_bars],
		barw + 2 - (int)strlen(bar_legends[l][0]), "", "CURRENT", "PEAK", "CAPACITY",
		"USED");
	if (!json_array_size(gpu)) {
		fprintf(f, "  no process holds GPU memory\n");
		return;
	}
	json_array_foreach(gpu, i, e)
	{
		if (num(e, "peak_bytes") > maxpeak)
			maxpeak = num(e, "peak_bytes");
	}
	json_array_foreach(gpu, i, e)
	{
		const char *key = json_string_value(json_object_get(e, "key"));
		json_int_t id = -1;
		double cap, cur = num(e, "current_bytes"), peak = num(e, "peak_bytes");
		char c[16], p[16], k[16] = "-", pct[16];

		if (key && strchr(key, ':'))
			id = strtoll(strchr(key, ':') + 1, NULL, 10);
		cap = capacity(snap, id);
		fmt_bytes(c, sizeof(c), cur);
		fmt_bytes(p, sizeof(p), peak);
		if (cap > 0)
			fmt_bytes(k, sizeof(k), cap);
		fmt_share(pct, sizeof(pct), cur, cap);
		fprintf(f, "  %-*.*s %-*.*s ", MEM_LABEL_W, MEM_LABEL_W, key ? key : "?",
			MEM_NAME_W, MEM_NAME_W, proc_name(e));
		bar(f, cur, peak, cap > 0 ? cap : maxpeak, barw);
		fprintf(f, " %10s %10s %10s %s\n", c, p, k, pct);
	}
}

/* A line per device: what every tracked process holds on it. */
static void render_devices(FILE *f, const json_t *snap, int width)
{
	const json_t *devs = json_object_get(snap, "devices"), *d;
	int barw = mem_bar_width(width);
	size_t i;

	if (!json_array_size(devs))
		return;
	json_array_foreach(devs, i, d)
	{
		double used = num(d, "used_bytes"), cap = num(d, "capacity_bytes");
		char u[16], c[16] = "-", label[32], pct[16];

		fmt_bytes(u, sizeof(u), used);
		if (cap > 0)
			fmt_bytes(c, sizeof(c), cap);
		fmt_share(pct, sizeof(pct), used, cap);
		snprintf(label, sizeof(label), "GPU %lld (all pids)",
			 (long long)json_integer_value(json_object_get(d, "gpu_id")));
		fprintf(f, "  %-*.*s ", MEM_LABEL_W + 1 + MEM_NAME_W, MEM_LABEL_W + 1 + MEM_NAME_W,
			label);
		/* Of what? Without its capacity, a device has no bar. */
		if (cap > 0)
			bar(f, used, 0, cap, barw);
		else
			fprintf(f, "%*s", barw + 2, "");
		fprintf(f, " %10s %10s %10s %s\n", u, "", c, pct);
	}
}

/* The long waits at a Python line (dataloader_stuck[], or sync_stuck[]
 * with their call), under a title, when there are any. */
static void render_waits(FILE *f, const json_t *waits, const char *title, bool sync)
{
	const json_t *o;
	size_t i;

	if (!json_array_size(waits))
		return;
	fprintf(f, "\n%s\n", title);
	json_array_foreach(waits, i, o)
	{
		const char *file = json_string_value(json_object_get(o, "file"));
		const char *base = file ? strrchr(file, '/') : NULL;

		fprintf(f, "  pid %lld %s  ",
			(long long)json_integer_value(json_object_get(o, "pid")), proc_name(o));
		if (sync)
			fprintf(f, "%s  ", json_string_value(json_object_get(o, "api")));
		fprintf(f, "%s:%lld in %s  %s %.1f s\n",
			base		? base + 1
			: file && *file ? file
					: "?",
			(long long)json_integer_value(json_object_get(o, "line")),
			json_string_value(json_object_get(o, "function")),
			sync ? "blocked" : "waiting", num(o, "seconds"));
	}
}

/* A line per judged process: its verdict and the evidence. */
static void render_verdicts(FILE *f, const json_t *snap)
{
	const json_t *p;
	bool head = false;
	size_t i;

	json_array_foreach(json_object_get(snap, "processes"), i, p)
	{
		const json_t *v = json_object_get(p, "verdict"), *sh = json_object_get(v, "shares");
		const char *bound = json_string_value(json_object_get(v, "bound")), *gid;
		double share[PS_NR];
		char ev[256], what[32];
		json_t *busy;

		if (!bound)
			continue;
		if (!head) {
			fprintf(f, "\nWhat bounds each process (last window of %.1f s)\n",
				num(v, "window_s"));
			fprintf(f, "  %-8s %-15s %-20s %s\n", "PID", "PROCESS", "BOUND",
				"EVIDENCE (shares of the window, leading thread)");
			head = true;
		}
		for (int s = 0; s < PS_NR; s++)
			share[s] = num(sh, proc_state__name(s));
		verdict__evidence(share, ev, sizeof(ev));
		/* Its GPUs' side, where its kernels are timed. */
		json_object_foreach((json_t *)json_object_get(v, "gpu_busy"), gid, busy)
		{
			size_t n = strlen(ev);

			snprintf(ev + n, sizeof(ev) - n, "; GPU %s busy %.0f %%", gid,
				 100 * json_number_value(busy));
		}
		/* A process that exited is listed for the agent's grace, said so. */
		snprintf(what, sizeof(what), "%s%s%s", bound, strcmp(bound, "idle") ? "-bound" : "",
			 json_object_get(p, "exited_ms") ? " (exited)" : "");
		fprintf(f, "  %-8lld %-15s %-20s %s\n",
			(long long)json_integer_value(json_object_get(p, "pid")), proc_name(p),
			what, ev);
	}
}

static void render_text(struct watch *w, const json_t *snap, FILE *f, int width)
{
	const json_t *o, *stuck = json_object_get(snap, "stuck");
	char a[24], b[24], clock[16], cnt[32];
	double allreduce_calls = -1;
	time_t now = time(NULL);
	size_t i;

	strftime(clock, sizeof(clock), "%H:%M:%S", localtime(&now));
	fprintf(f, "sonde watch  %s  %s%s  %s  #%ld%s\n", w->url,
		json_is_string(json_object_get(snap, "node")) ? "node " : "",
		json_is_string(json_object_get(snap, "node"))
			? json_string_value(json_object_get(snap, "node"))
			: "",
		clock, w->seen, w->batch ? "" : "   q: quit");
	if (json_is_true(json_object_get(snap, "simulated")))
		fprintf(f,
			"*** SIMULATED telemetry (sonde agent --simulate): not a real GPU ***\n");
	fputc('\n', f);
	render_memory(f, snap, width);
	render_devices(f, snap, width);
	fputc('\n', f);

	fmt_ms(a, sizeof(a), num(snap, "cuda_latency_p50_us") / US_PER_MS);
	fmt_ms(b, sizeof(b), num(snap, "cuda_latency_p99_us") / US_PER_MS);
	fprintf(f, "CUDA launch latency   p50 %-10s p99 %-10s", a, b);
	if (json_is_integer(json_object_get(snap, "cuda_launches_total"))) {
		json_int_t n = json_integer_value(json_object_get(snap, "cuda_launches_total"));

		fprintf(f, " launches %s", fmt_count(cnt, sizeof(cnt), n > 0 ? (uint64_t)n : 0));
	}
	fputc('\n', f);

	json_array_foreach(json_object_get(snap, "nccl"), i, o)
	{
		const char *op = json_string_value(json_object_get(o, "op"));

		if (op && !strcmp(op, "allreduce"))
			allreduce_calls = num(o, "count");
	}
	fmt_ms(a, sizeof(a), num(snap, "nccl_allreduce_p50_ms"));
	fmt_ms(b, sizeof(b), num(snap, "nccl_allreduce_p99_ms"));
	fprintf(f, "NCCL allreduce        p50 %-10s p99 %-10s", a, b);
	if (allreduce_calls >= 0)
		fprintf(f, " calls %s",
			fmt_count(cnt, sizeof(cnt),
				  allreduce_calls < 1e19 ? (uint64_t)allreduce_calls : UINT64_MAX));
	fputc('\n', f);

	fmt_ms(a, sizeof(a), num(snap, "dataloader_wait_p50_ms"));
	fprintf(f, "Dataloader wait       p50 %-10s", a);
	if (json_is_number(json_object_get(snap, "dataloader_wait_p99_ms"))) {
		fmt_ms(b, sizeof(b), num(snap, "dataloader_wait_p99_ms"));
		fprintf(f, " p99 %-10s", b);
	}
	if (json_is_integer(json_object_get(snap, "dataloader_waits_total"))) {
		json_int_t n = json_integer_value(json_object_get(snap, "dataloader_waits_total"));

		fprintf(f, " batches %s", fmt_count(cnt, sizeof(cnt), n > 0 ? (uint64_t)n : 0));
	}
	fputc('\n', f);

	render_verdicts(f, snap);

	if (json_is_array(stuck)) {
		fprintf(f, "\nStuck collectives     %s\n", json_array_size(stuck) ? "" : "none");
		json_array_foreach(stuck, i, o)
		{
			fprintf(f, "  pid %lld %s  %s  rank %lld/%lld  comm %s  blocked %.1f s\n",
				(long long)json_integer_value(json_object_get(o, "pid")),
				proc_name(o), json_string_value(json_object_get(o, "op")),
				(long long)json_integer_value(json_object_get(o, "rank")),
				(long long)json_integer_value(json_object_get(o, "nranks")),
				json_string_value(json_object_get(o, "comm")), num(o, "seconds"));
		}
	}
	render_waits(f, json_object_get(snap, "dataloader_stuck"), "Waiting for a batch", false);
	render_waits(f, json_object_get(snap, "sync_stuck"), "Stuck in a synchronisation", true);
	if (json_is_integer(json_object_get(snap, "last_update_ms"))) {
		double age = (double)time(NULL) * MS_PER_SEC -
			     (double)json_integer_value(json_object_get(snap, "last_update_ms"));

		fprintf(f, "\nlast update %.1f s ago", age > 0 ? age / MS_PER_SEC : 0);
		if (!w->batch && ms_since(w->last_at) > 3000)
			fprintf(f, "   (no snapshot for %ld s)", ms_since(w->last_at) / MS_PER_SEC);
		fputc('\n', f);
	}
}

static void render(struct watch *w)
{
	struct winsize ws = {.ws_col = WATCH_WIDTH};
	char *buf = NULL, *line, *save = NULL;
	size_t len = 0;
	FILE *f;

	if (!w->last)
		return;
	if (!w->batch)
		ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws);
	f = open_memstream(&buf, &len);
	if (!f)
		return;
	render_text(w, w->last, f, ws.ws_col > WATCH_WIDTH || !ws.ws_col ? WATCH_WIDTH : ws.ws_col);
	fclose(f);
	/* Interactive: overwrite in place -- home, each line cleared to its
	 * end, the rest of the screen cleared; no flicker of a full clear. */
	if (!w->batch)
		fputs("\033[H", stdout);
	for (line = buf; line && *line; line = save) {
		size_t n = strcspn(line, "\n");

		save = line[n] ? line + n + 1 : NULL;
		while (n && line[n - 1] == ' ')
			n--;
		printf("%.*s%s\n", (int)n, line, w->batch ? "" : "\033[K");
	}
	fputs(w->batch ? "\n" : "\033[J", stdout);
	fflush(stdout);
	free(buf);
}

/* ---- the stream ---- */

static void on_text(void *ctx, const char *msg, size_t len)
{
	struct watch *w = ctx;
	json_error_t jerr;
	json_t *snap;

	w->seen++;
	if (w->json) {
		printf("%.*s\n", (int)len, msg);
		fflush(stdout);
	} else {
		snap = json_loadb(msg, len, 0, &jerr);
		if (!snap || !json_is_object(snap)) {
			pr_warn("watch: snapshot %ld is not a JSON object (%s): skipped", w->seen,
				snap ? "not an object" : jerr.text);
			json_decref(snap);
		} else {
			json_decref(w->last);
			w->last = snap;
			w->last_at = mono_ms();
			render(w);
		}
	}
	if (w->count && w->seen >= w->count)
		ws_client__close(w->ws);
}

/* Connects; 0, or 1 after saying why (with a hint for what it was). */
static int watch_connect(struct watch *w, const struct ws_url *u)
{
	const struct ws_client_opts o = {
		.timeout_ms = WATCH_TIMEOUT_MS,
		.max_message = WATCH_MAX_MSG,
		.user_agent = "sonde-watch/" SONDE_VERSION,
		.on_text = on_text,
		.ctx = w,
	};
	char err[512];

	w->ws = ws_client__connect(u, w->url, &o, err, sizeof(err));
	if (w->ws)
		return 0;
	if (errno == EPROTO)
		pr_err("%s -- is it the agent's WebSocket port (default " WATCH_DEFAULT_PORT ")?",
		       err);
	else if (errno == EADDRNOTAVAIL || errno == ENOMEM || errno == EINTR)
		pr_err("%s", err);
	else
		pr_err("%s -- is `sonde agent` running there? (try `sonde agent --simulate`)", err);
	return 1;
}

/* The exit code once the stream ended, after saying how it ended. */
static int stream_end(struct watch *w)
{
	int code = ws_client__close_code(w->ws);

	if (ws_client__closing(w->ws) && (stop_signal || (w->count && w->seen >= w->count)))
		return 0;
	if (code == WS_CLOSE_GOING_AWAY || code == WS_CLOSE_NORMAL) {
		pr_info("the agent at %s closed the stream (it is shutting down)", w->url);
		return w->count ? 1 : 0;
	}
	if (code)
		pr_err("the agent at %s closed the stream with code %d", w->url, code);
	else
		pr_err("lost the connection to %s after %ld snapshot%s -- did the agent stop?",
		       w->url, w->seen, w->seen == 1 ? "" : "s");
	return 1;
}

/* Whether q was pressed. */
static bool quit_key(void)
{
	char c;

	return read(STDIN_FILENO, &c, 1) == 1 && (c == 'q' || c == 'Q');
}

/* Streams until -n is reached, q, a signal or the end of the connection.
 * Returns the exit code. */
static int stream(struct watch *w, bool keys)
{
	uint64_t closed_at = 0;

	w->last_at = mono_ms();
	/* What came along with the handshake. */
	ws_client__io(w->ws, POLLIN);
	while (!ws_client__done(w->ws)) {
		struct pollfd pfd[2] = {{.fd = ws_client__fd(w->ws)},
					{.fd = STDIN_FILENO, .events = POLLIN}};
		int n;

		if (stop_signal)
			ws_client__close(w->ws);
		if (ws_client__closing(w->ws)) {
			if (!closed_at)
				closed_at = mono_ms();
			else if (ms_since(closed_at) > 1000)
				break; /* the agent didn't answer our close: done anyway */
		}
		pfd[0].events = ws_client__events(w->ws);
		n = poll(pfd, keys ? 2 : 1, 1000);
		if (n < 0 && errno != EINTR) {
			pr_err("watch: poll failed: %s", strerror(errno));
			break;
		}
		if (n == 0 && !w->batch && !ws_client__closing(w->ws))
			render(w); /* shows the snapshot's age ticking */
		if (n <= 0)
			continue;
		if (keys && pfd[1].revents & POLLIN && quit_key() && !ws_client__closing(w->ws)) {
			ws_client__close(w->ws);
			stop_signal = SIGINT;
		}
		if (ws_client__io(w->ws, pfd[0].revents))
			break;
		if (ws_client__closing(w->ws) && !(ws_client__events(w->ws) & POLLOUT) &&
		    ws_client__close_received(w->ws))
			break;
	}
	return stream_end(w);
}

/* The options into w; 0 to go on, else the exit code plus one (help: 1,
 * a usage error: 3). */
static int parse_args(int argc, char **argv, struct watch *w)
{
	static const struct option longopts[] = {
		{"count", required_argument, NULL, 'n'},
		{"batch", no_argument, NULL, 'b'},
		{"json", no_argument, NULL, 'j'},
		{"help", no_argument, NULL, 'h'},
		{},
	};
	int opt;

	optind = 1;
	while ((opt = getopt_long(argc, argv, "n:bjh", longopts, NULL)) != -1) {
		switch (opt) {
		case 'n':
			if (parse_int_opt("-n", optarg, 1, 100000000, &w->count))
				return 3;
			break;
		case 'b':
			w->batch = true;
			break;
		case 'j':
			w->json = w->batch = true;
			break;
		case 'h':
			fputs(watch_help, stdout);
			return 1;
		default:
			fputs(watch_help, stderr);
			return 3;
		}
	}
	if (optind < argc)
		w->url = argv[optind++];
	if (optind < argc) {
		pr_err("unexpected argument '%s' -- see `sonde watch --help`", argv[optind]);
		return 3;
	}
	return 0;
}

/* Keys without Enter or echo; whether the terminal was switched (saved
 * holds what to restore). */
static bool keys_raw(struct termios *saved)
{
	struct termios r;

	if (!isatty(STDIN_FILENO) || tcgetattr(STDIN_FILENO, saved))
		return false;
	r = *saved;
	r.c_lflag &= ~(ICANON | ECHO);
	r.c_cc[VMIN] = 0;
	r.c_cc[VTIME] = 0;
	return tcsetattr(STDIN_FILENO, TCSANOW, &r) == 0;
}

int cmd_watch(int argc, char **argv)
{
	struct watch w = {.url = WATCH_DEFAULT_URL};
	struct ws_url u;
	struct termios saved;
	char err[256];
	bool raw = false;
	int ret;

	w.batch = !isatty(STDOUT_FILENO);
	/* Only the character set: numbers stay in the C locale. */
	setlocale(LC_CTYPE, "");
	utf8_bars = !strcmp(nl_langinfo(CODESET), "UTF-8");
	ret = parse_args(argc, argv, &w);
	if (ret)
		return ret - 1;
	if (ws_url__parse(&u, w.url, WATCH_DEFAULT_PORT, err, sizeof(err))) {
		pr_err("can't watch '%s': %s", w.url, err);
		return 2;
	}
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	if (watch_connect(&w, &u))
		return 1;
	if (!w.batch) {
		raw = keys_raw(&saved);
		fputs("\033[?1049h\033[?25l\033[H\033[2J", stdout); /* own screen, no cursor */
	}
	ret = stream(&w, raw);
	if (!w.batch) {
		fputs("\033[?25h\033[?1049l", stdout);
		fflush(stdout);
		/* The last frame stays visible after the alternate screen goes. */
		if (w.last) {
			w.batch = true;
			render(&w);
		}
	}
	if (raw)
		tcsetattr(STDIN_FILENO, TCSANOW, &saved);
	ws_client__free(w.ws);
	json_decref(w.last);
	return ret;
}
