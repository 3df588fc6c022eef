/* watch.c: `sonde watch [ws://HOST:PORT]` -- a live terminal dashboard of an
 * agent's WebSocket stream (GPU memory per pid:gpu with current/peak bars,
 * launch latency, NCCL allreduce, dataloader wait, stuck collectives),
 * refreshed in place; `q` quits. -b prints each snapshot as plain text, -j
 * as its JSON line. The client side of the protocol is ours: a TCP connect,
 * the HTTP upgrade with a checked Sec-WebSocket-Accept, then wslay frames. */
#include "cli/cli.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/xalloc.h"
#include "metrics/ws.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <math.h>
#include <netdb.h>
#include <openssl/evp.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/ioctl.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>
#include <jansson.h>
#include <wslay/wslay.h>

#define WATCH_DEFAULT_URL "ws://127.0.0.1:9092"
#define WATCH_DEFAULT_PORT "9092"
#define WATCH_TIMEOUT_MS 5000
#define WATCH_MAX_HEADER 16384
#define WATCH_MAX_MSG (16 * 1024 * 1024)
#define WATCH_WIDTH 100

static const char watch_help[] =
	"Usage: sonde watch [ws://HOST:PORT[/PATH]] [-n COUNT] [-b] [-j]\n"
	"\n"
	"Live dashboard of an agent's WebSocket stream (default " WATCH_DEFAULT_URL "):\n"
	"GPU memory per pid:gpu (current and peak), CUDA launch latency, NCCL\n"
	"allreduce duration, dataloader wait, stuck collectives. Start an agent with\n"
	"`sonde agent` (or `sonde agent --simulate` for synthetic data). Without a\n"
	"port, " WATCH_DEFAULT_PORT " is used.\n"
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
	int fd;
	char *pending; /* bytes read past the handshake, fed to wslay first */
	size_t npending, pending_off;
	bool batch, json, eof;
	long count, seen;
	int close_code; /* from the agent's close frame; 0 while open */
	bool closing;	/* we sent our close */
	json_t *last;
	uint64_t last_at; /* mono_ms() of the last snapshot */
};

/* ---- URL, connect, handshake ---- */

struct ws_url {
	char host[256], port[8], path[512];
};

static int parse_url(const char *url, struct ws_url *u)
{
	const char *p = url, *host_end, *slash;
	size_t n;

	if (!strncmp(p, "wss://", 6)) {
		pr_err("can't watch %s: TLS (wss://) is not supported -- use ws://", url);
		return -1;
	}
	if (!strncmp(p, "ws://", 5))
		p += 5;
	else if (strstr(p, "://")) {
		pr_err("can't watch %s: expected a ws://HOST:PORT URL", url);
		return -1;
	}
	slash = strchr(p, '/');
	snprintf(u->path, sizeof(u->path), "%s", slash ? slash : "/");
	if (!slash)
		slash = p + strlen(p);
	if (*p == '[') {
		host_end = memchr(p, ']', (size_t)(slash - p));
		if (!host_end)
			goto bad;
		n = (size_t)(host_end - p - 1);
		if (n >= sizeof(u->host))
			goto bad;
		memcpy(u->host, p + 1, n);
		u->host[n] = '\0';
		p = host_end + 1;
	} else {
		const char *colon = memchr(p, ':', (size_t)(slash - p));

		host_end = colon ? colon : slash;
		n = (size_t)(host_end - p);
		if (n >= sizeof(u->host))
			goto bad;
		memcpy(u->host, p, n);
		u->host[n] = '\0';
		p = host_end;
	}
	if (!u->host[0])
		goto bad;
	if (*p == ':') {
		n = (size_t)(slash - p - 1);
		if (!n || n >= sizeof(u->port) || strspn(p + 1, "0123456789") < n)
			goto bad;
		memcpy(u->port, p + 1, n);
		u->port[n] = '\0';
	} else if (p == slash) {
		snprintf(u->port, sizeof(u->port), "%s", WATCH_DEFAULT_PORT);
	} else {
		goto bad;
	}
	return 0;
bad:
	pr_err("can't watch '%s': expected ws://HOST:PORT[/PATH]", url);
	return -1;
}

static long ms_since(uint64_t t0_ms)
{
	return (long)(mono_ms() - t0_ms);
}

/* A connected non-blocking socket, or -1 after saying why. */
static int dial(const char *url, const struct ws_url *u)
{
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res, *ai;
	int rc, fd = -1, err = 0;

	rc = getaddrinfo(u->host, u->port, &hints, &res);
	if (rc) {
		pr_err("can't connect to %s: %s -- check the host name", url, gai_strerror(rc));
		return -1;
	}
	for (ai = res; ai; ai = ai->ai_next) {
		struct pollfd pfd;
		socklen_t len = sizeof(err);

		fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		if (fd < 0) {
			err = errno;
			continue;
		}
		if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0)
			break;
		err = errno;
		if (err == EINPROGRESS) {
			pfd = (struct pollfd){.fd = fd, .events = POLLOUT};
			rc = poll(&pfd, 1, WATCH_TIMEOUT_MS);
			if (rc == 0)
				err = ETIMEDOUT;
			else if (rc > 0 && !getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) &&
				 !err)
				break;
		}
		close(fd);
		fd = -1;
	}
	freeaddrinfo(res);
	if (fd < 0)
		pr_err("can't connect to %s: %s -- is `sonde agent` running there? (try `sonde "
		       "agent --simulate`)",
		       url, strerror(err));
	return fd;
}

static const char *find_header(const char *headers, const char *name)
{
	size_t n = strlen(name);

	for (const char *l = strstr(headers, "\r\n"); l; l = strstr(l, "\r\n")) {
		l += 2;
		if (!strncasecmp(l, name, n) && l[n] == ':') {
			l += n + 1;
			while (*l == ' ' || *l == '\t')
				l++;
			return l;
		}
	}
	return NULL;
}

/* Sends the upgrade request and checks the 101 answer; 0 or -1 after saying
 * why. */
static int handshake(struct watch *w, const struct ws_url *u)
{
	unsigned char nonce[16];
	char key[32], expect[32], req[1024], *buf;
	const char *accept, *end;
	size_t got = 0, sent = 0, reqlen;
	uint64_t t0;
	int status = 0;

	if (getrandom(nonce, sizeof(nonce), 0) != sizeof(nonce)) {
		pr_err("can't draw a WebSocket key: %s", strerror(errno));
		return -1;
	}
	EVP_EncodeBlock((unsigned char *)key, nonce, sizeof(nonce));
	ws_accept_key(key, expect, sizeof(expect));
	reqlen = (size_t)snprintf(req, sizeof(req),
				  "GET %s HTTP/1.1\r\n"
				  "Host: %s:%s\r\n"
				  "Upgrade: websocket\r\n"
				  "Connection: Upgrade\r\n"
				  "Sec-WebSocket-Key: %s\r\n"
				  "Sec-WebSocket-Version: 13\r\n"
				  "User-Agent: sonde-watch/" SONDE_VERSION "\r\n\r\n",
				  u->path, u->host, u->port, key);
	if (reqlen >= sizeof(req)) {
		pr_err("can't watch %s: URL too long", w->url);
		return -1;
	}
	buf = xmalloc(WATCH_MAX_HEADER + 1);
	t0 = mono_ms();
	for (;;) {
		struct pollfd pfd = {.fd = w->fd, .events = sent < reqlen ? POLLOUT : POLLIN};
		long left = WATCH_TIMEOUT_MS - ms_since(t0);
		ssize_t n;

		if (left <= 0 || poll(&pfd, 1, (int)left) <= 0) {
			if (errno == EINTR && !stop_signal)
				continue;
			pr_err("can't watch %s: no answer to the WebSocket handshake in %d s -- is "
			       "it an agent's WebSocket port?",
			       w->url, WATCH_TIMEOUT_MS / 1000);
			goto fail;
		}
		if (sent < reqlen) {
			n = send(w->fd, req + sent, reqlen - sent, MSG_NOSIGNAL);
			if (n < 0 && errno != EAGAIN && errno != EINTR) {
				pr_err("can't watch %s: %s", w->url, strerror(errno));
				goto fail;
			}
			sent += n > 0 ? (size_t)n : 0;
			continue;
		}
		n = recv(w->fd, buf + got, WATCH_MAX_HEADER - got, 0);
		if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
			pr_err("can't watch %s: the connection closed during the handshake%s%s",
			       w->url, n ? ": " : "", n ? strerror(errno) : "");
			goto fail;
		}
		if (n < 0)
			continue;
		got += (size_t)n;
		buf[got] = '\0';
		end = strstr(buf, "\r\n\r\n");
		if (end)
			break;
		if (got == WATCH_MAX_HEADER) {
			pr_err("can't watch %s: the handshake answer is too long", w->url);
			goto fail;
		}
	}
	if (sscanf(buf, "HTTP/1.%*d %d", &status) != 1 || status != 101) {
		char line[128];

		snprintf(line, sizeof(line), "%.*s", (int)strcspn(buf, "\r\n"), buf);
		pr_err("can't watch %s: the server answered '%s', not a WebSocket upgrade -- is it "
		       "the agent's WebSocket port (default 9092)?",
		       w->url, line);
		goto fail;
	}
	accept = find_header(buf, "Sec-WebSocket-Accept");
	if (!accept || strncmp(accept, expect, 28) || (accept[28] != '\r' && accept[28] != ' ')) {
		pr_err("can't watch %s: the server's Sec-WebSocket-Accept is %s", w->url,
		       accept ? "wrong" : "missing");
		goto fail;
	}
	end += 4;
	w->npending = got - (size_t)(end - buf);
	if (w->npending) {
		w->pending = xmalloc(w->npending);
		memcpy(w->pending, end, w->npending);
	}
	free(buf);
	return 0;
fail:
	free(buf);
	return -1;
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
		snprintf(buf, len, "%.1f us", ms * 1000);
	else if (ms < 1000)
		snprintf(buf, len, "%.1f ms", ms);
	else
		snprintf(buf, len, "%.2f s", ms / 1000);
}

static double num(const json_t *o, const char *key)
{
	return json_number_value(json_object_get(o, key));
}

static void bar(FILE *f, double cur, double peak, double scale, int width)
{
	int fill = 0, mark = -1;

	if (scale > 0) {
		fill = (int)lround(cur / scale * width);
		mark = (int)lround(peak / scale * width) - 1;
	}
	if (fill > width)
		fill = width;
	if (mark >= width)
		mark = width - 1;
	fputc('[', f);
	for (int i = 0; i < width; i++)
		fputc(i < fill ? '#' : i == mark ? '|' : '.', f);
	fputc(']', f);
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

static void render_memory(FILE *f, const json_t *snap, int width)
{
	const json_t *gpu = json_object_get(snap, "gpu_utilization"), *e;
	double maxpeak = 0;
	int barw = width - 64;
	size_t i;

	if (barw < 10)
		barw = 10;
	fprintf(f, "GPU memory (pid:gpu)  %-*s %10s %10s %10s\n", barw + 2, "current # / peak |",
		"current", "peak", "capacity");
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
		char c[16], p[16], k[16] = "?";

		if (key && strchr(key, ':'))
			id = strtoll(strchr(key, ':') + 1, NULL, 10);
		cap = capacity(snap, id);
		fmt_bytes(c, sizeof(c), cur);
		fmt_bytes(p, sizeof(p), peak);
		if (cap > 0)
			fmt_bytes(k, sizeof(k), cap);
		fprintf(f, "  %-19.19s ", key ? key : "?");
		bar(f, cur, peak, cap > 0 ? cap : maxpeak, barw);
		fprintf(f, " %10s %10s %10s\n", c, p, k);
	}
}

static void render_devices(FILE *f, const json_t *snap, int width)
{
	const json_t *devs = json_object_get(snap, "devices"), *d;
	int barw = width - 64;
	size_t i;

	if (!json_array_size(devs))
		return;
	if (barw < 10)
		barw = 10;
	fputc('\n', f);
	json_array_foreach(devs, i, d)
	{
		double used = num(d, "used_bytes"), cap = num(d, "capacity_bytes");
		char u[16], c[16] = "?", label[24];

		fmt_bytes(u, sizeof(u), used);
		if (cap > 0)
			fmt_bytes(c, sizeof(c), cap);
		snprintf(label, sizeof(label), "GPU %lld (all pids)",
			 (long long)json_integer_value(json_object_get(d, "gpu_id")));
		fprintf(f, "  %-19.19s ", label);
		bar(f, used, 0, cap, barw);
		fprintf(f, " %10s %10s %10s", u, "", c);
		if (cap > 0)
			fprintf(f, "  %3.0f%%", 100 * used / cap);
		fputc('\n', f);
	}
}

static void render_text(struct watch *w, const json_t *snap, FILE *f, int width)
{
	const json_t *o, *stuck = json_object_get(snap, "stuck");
	char a[24], b[24], clock[16];
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

	fmt_ms(a, sizeof(a), num(snap, "cuda_latency_p50_us") / 1000);
	fmt_ms(b, sizeof(b), num(snap, "cuda_latency_p99_us") / 1000);
	fprintf(f, "CUDA launch latency   p50 %-10s p99 %-10s", a, b);
	if (json_is_integer(json_object_get(snap, "cuda_launches_total")))
		fprintf(f, " launches %lld",
			(long long)json_integer_value(
				json_object_get(snap, "cuda_launches_total")));
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
		fprintf(f, " calls %.0f", allreduce_calls);
	fputc('\n', f);

	fmt_ms(a, sizeof(a), num(snap, "dataloader_wait_p50_ms"));
	fprintf(f, "Dataloader wait       p50 %-10s", a);
	if (json_is_number(json_object_get(snap, "dataloader_wait_p99_ms"))) {
		fmt_ms(b, sizeof(b), num(snap, "dataloader_wait_p99_ms"));
		fprintf(f, " p99 %-10s", b);
	}
	fputc('\n', f);

	if (json_is_array(stuck)) {
		fprintf(f, "\nStuck collectives     %s\n", json_array_size(stuck) ? "" : "none");
		json_array_foreach(stuck, i, o)
		{
			fprintf(f, "  pid %lld  %s  rank %lld/%lld  comm %s  blocked %.1f s\n",
				(long long)json_integer_value(json_object_get(o, "pid")),
				json_string_value(json_object_get(o, "op")),
				(long long)json_integer_value(json_object_get(o, "rank")),
				(long long)json_integer_value(json_object_get(o, "nranks")),
				json_string_value(json_object_get(o, "comm")), num(o, "seconds"));
		}
	}
	if (json_is_integer(json_object_get(snap, "last_update_ms"))) {
		double age = (double)time(NULL) * 1000 -
			     (double)json_integer_value(json_object_get(snap, "last_update_ms"));

		fprintf(f, "\nlast update %.1f s ago", age > 0 ? age / 1000 : 0);
		if (!w->batch && ms_since(w->last_at) > 3000)
			fprintf(f, "   (no snapshot for %ld s)", ms_since(w->last_at) / 1000);
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

/* ---- wslay ---- */

static ssize_t on_recv(wslay_event_context_ptr ctx, uint8_t *buf, size_t len, int flags, void *user)
{
	struct watch *w = user;
	ssize_t n;

	if (w->pending_off < w->npending) {
		size_t k = w->npending - w->pending_off;

		if (k > len)
			k = len;
		memcpy(buf, w->pending + w->pending_off, k);
		w->pending_off += k;
		return (ssize_t)k;
	}
	n = recv(w->fd, buf, len, 0);
	if (n > 0)
		return n;
	if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
		wslay_event_set_error(ctx, WSLAY_ERR_WOULDBLOCK);
		return -1;
	}
	w->eof = true;
	wslay_event_set_error(ctx, WSLAY_ERR_CALLBACK_FAILURE);
	return -1;
}

static ssize_t on_send(wslay_event_context_ptr ctx, const uint8_t *data, size_t len, int flags,
		       void *user)
{
	struct watch *w = user;
	ssize_t n = send(w->fd, data, len, MSG_NOSIGNAL);

	if (n >= 0)
		return n;
	wslay_event_set_error(ctx, errno == EAGAIN || errno == EINTR ? WSLAY_ERR_WOULDBLOCK
								     : WSLAY_ERR_CALLBACK_FAILURE);
	return -1;
}

static int on_genmask(wslay_event_context_ptr ctx, uint8_t *buf, size_t len, void *user)
{
	if (getrandom(buf, len, 0) != (ssize_t)len) {
		wslay_event_set_error(ctx, WSLAY_ERR_CALLBACK_FAILURE);
		return -1;
	}
	return 0;
}

static void on_msg(wslay_event_context_ptr ctx, const struct wslay_event_on_msg_recv_arg *arg,
		   void *user)
{
	struct watch *w = user;
	json_error_t jerr;
	json_t *snap;

	if (arg->opcode == WSLAY_CONNECTION_CLOSE) {
		w->close_code = arg->status_code ? arg->status_code : WSLAY_CODE_NO_STATUS_RCVD;
		return;
	}
	if (arg->opcode != WSLAY_TEXT_FRAME || w->closing)
		return;
	w->seen++;
	if (w->json) {
		printf("%.*s\n", (int)arg->msg_length, (const char *)arg->msg);
		fflush(stdout);
	} else {
		snap = json_loadb((const char *)arg->msg, arg->msg_length, 0, &jerr);
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
	if (w->count && w->seen >= w->count && !w->closing) {
		wslay_event_queue_close(ctx, WSLAY_CODE_NORMAL_CLOSURE, NULL, 0);
		w->closing = true;
	}
}

static const struct wslay_event_callbacks callbacks = {
	.recv_callback = on_recv,
	.send_callback = on_send,
	.genmask_callback = on_genmask,
	.on_msg_recv_callback = on_msg,
};

/* Streams until -n is reached, q, a signal or the end of the connection.
 * Returns the exit code. */
static int stream(struct watch *w, bool keys)
{
	wslay_event_context_ptr ctx;
	uint64_t closed_at = 0;
	int ret = 1;

	if (wslay_event_context_client_init(&ctx, &callbacks, w)) {
		pr_err("watch: out of memory");
		return 1;
	}
	wslay_event_config_set_max_recv_msg_length(ctx, WATCH_MAX_MSG);
	w->last_at = mono_ms();
	if (w->npending)
		wslay_event_recv(ctx);
	while (!w->eof && (wslay_event_want_read(ctx) || wslay_event_want_write(ctx))) {
		struct pollfd pfd[2] = {{.fd = w->fd}, {.fd = STDIN_FILENO, .events = POLLIN}};
		int n;

		if (stop_signal && !w->closing) {
			wslay_event_queue_close(ctx, WSLAY_CODE_NORMAL_CLOSURE, NULL, 0);
			w->closing = true;
		}
		if (w->closing) {
			if (!closed_at)
				closed_at = mono_ms();
			else if (ms_since(closed_at) > 1000)
				break; /* the agent didn't answer our close: done anyway */
		}
		pfd[0].events = (short)((wslay_event_want_read(ctx) ? POLLIN : 0) |
					(wslay_event_want_write(ctx) ? POLLOUT : 0));
		n = poll(pfd, keys ? 2 : 1, 1000);
		if (n < 0 && errno != EINTR) {
			pr_err("watch: poll failed: %s", strerror(errno));
			break;
		}
		if (n == 0 && !w->batch && !w->closing)
			render(w); /* shows the snapshot's age ticking */
		if (n <= 0)
			continue;
		if (keys && pfd[1].revents & POLLIN) {
			char c;

			if (read(STDIN_FILENO, &c, 1) == 1 && (c == 'q' || c == 'Q') &&
			    !w->closing) {
				wslay_event_queue_close(ctx, WSLAY_CODE_NORMAL_CLOSURE, NULL, 0);
				w->closing = true;
				stop_signal = SIGINT;
			}
		}
		if (pfd[0].revents & (POLLIN | POLLHUP | POLLERR))
			if (wslay_event_recv(ctx))
				w->eof = true;
		if (pfd[0].revents & POLLOUT)
			if (wslay_event_send(ctx))
				w->eof = true;
		if (w->closing && !wslay_event_want_write(ctx) &&
		    wslay_event_get_close_received(ctx))
			break;
	}
	if (w->closing && (stop_signal || (w->count && w->seen >= w->count)))
		ret = 0;
	else if (w->close_code == WSLAY_CODE_GOING_AWAY ||
		 w->close_code == WSLAY_CODE_NORMAL_CLOSURE) {
		pr_info("the agent at %s closed the stream (it is shutting down)", w->url);
		ret = w->count ? 1 : 0;
	} else if (w->close_code) {
		pr_err("the agent at %s closed the stream with code %d", w->url, w->close_code);
	} else {
		pr_err("lost the connection to %s after %ld snapshot%s -- did the agent stop?",
		       w->url, w->seen, w->seen == 1 ? "" : "s");
	}
	wslay_event_context_free(ctx);
	return ret;
}

int cmd_watch(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"count", required_argument, NULL, 'n'},
		{"batch", no_argument, NULL, 'b'},
		{"json", no_argument, NULL, 'j'},
		{"help", no_argument, NULL, 'h'},
		{},
	};
	struct watch w = {.url = WATCH_DEFAULT_URL, .fd = -1};
	struct ws_url u;
	struct termios saved;
	bool raw = false;
	int opt, ret = 2;

	w.batch = !isatty(STDOUT_FILENO);
	optind = 1;
	while ((opt = getopt_long(argc, argv, "n:bjh", longopts, NULL)) != -1) {
		switch (opt) {
		case 'n':
			if (parse_int_opt("-n", optarg, 1, 100000000, &w.count))
				return 2;
			break;
		case 'b':
			w.batch = true;
			break;
		case 'j':
			w.json = w.batch = true;
			break;
		case 'h':
			fputs(watch_help, stdout);
			return 0;
		default:
			fputs(watch_help, stderr);
			return 2;
		}
	}
	if (optind < argc)
		w.url = argv[optind++];
	if (optind < argc) {
		pr_err("unexpected argument '%s' -- see `sonde watch --help`", argv[optind]);
		return 2;
	}
	if (parse_url(w.url, &u))
		return 2;

	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	ret = 1;
	w.fd = dial(w.url, &u);
	if (w.fd < 0 || handshake(&w, &u))
		goto out;
	if (!w.batch && isatty(STDIN_FILENO) && tcgetattr(STDIN_FILENO, &saved) == 0) {
		struct termios r = saved;

		r.c_lflag &= ~(ICANON | ECHO);
		r.c_cc[VMIN] = 0;
		r.c_cc[VTIME] = 0;
		raw = tcsetattr(STDIN_FILENO, TCSANOW, &r) == 0;
	}
	if (!w.batch)
		fputs("\033[?1049h\033[?25l\033[H\033[2J", stdout); /* own screen, no cursor */
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
out:
	if (w.fd >= 0)
		close(w.fd);
	free(w.pending);
	json_decref(w.last);
	return ret;
}
