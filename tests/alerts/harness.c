/* harness.c: drives the alert engine in real time for the integration tests
 * (tests/integration/test_alerts*.py), the way `sonde agent` does: it feeds
 * the series of a script, evaluates every --tick ms with the wall clock, and
 * prints what happens as JSON lines on stdout. Only the public API of
 * src/alerts/alerts.h is used.
 *
 *   harness [options] SCRIPT|-
 *
 * Script lines (times in ms from the start, in order):
 *   T set NAME VALUE [k=v ...]   the series NAME{k="v",...} is VALUE from T on
 *   T ramp NAME [k=v ...]        ... is the seconds elapsed since T (a stuck clock)
 *   T del NAME [k=v ...]         ... is gone from T on
 *   T end                        stop
 * Output lines: {"event":"start","epoch_ms":N}, {"event":"alerts","t":N,
 * "alerts":[...]} when the alerts (name, labels, state) change,
 * {"event":"notification","t":N,"notification":{...}} for each firing and
 * resolution, and {"event":"end","t":N,"stats":{...},"max_tick_late_ms":N}. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "common/log.h"
#include "alerts/alerts.h"

#define MAX_LABELS 16

struct series {
	char *name;
	char *labels[2 * MAX_LABELS + 1];
	double value;
	long ramp_from; /* >= 0: value is the seconds since then */
	bool live;
};

struct step {
	long t;
	char op[8];
	struct series s;
};

struct state {
	struct step *steps;
	size_t nsteps;
	struct series *series;
	size_t nseries;
	long elapsed;
	struct timespec start;
};

static struct state st;

static long since_start(void)
{
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	return (now.tv_sec - st.start.tv_sec) * 1000 + (now.tv_nsec - st.start.tv_nsec) / 1000000;
}

static uint64_t epoch_ms(void)
{
	struct timespec now;

	clock_gettime(CLOCK_REALTIME, &now);
	return (uint64_t)now.tv_sec * 1000 + now.tv_nsec / 1000000;
}

static void emit(json_t *o)
{
	char *s = json_dumps(o, JSON_COMPACT);

	printf("%s\n", s);
	fflush(stdout);
	free(s);
	json_decref(o);
}

static bool same_series(const struct series *a, const struct series *b)
{
	size_t i;

	if (strcmp(a->name, b->name))
		return false;
	for (i = 0; a->labels[i] && b->labels[i]; i++)
		if (strcmp(a->labels[i], b->labels[i]))
			return false;
	return !a->labels[i] && !b->labels[i];
}

static void source(void *src, series_fn fn, void *ctx)
{
	for (size_t i = 0; i < st.nseries; i++) {
		struct series *s = &st.series[i];
		double v = s->value;

		if (!s->live)
			continue;
		if (s->ramp_from >= 0)
			v = (st.elapsed - s->ramp_from) / 1000.0;
		fn(ctx, s->name, (const char *const *)s->labels, v);
	}
}

static void apply(const struct step *p)
{
	size_t i;

	for (i = 0; i < st.nseries && !same_series(&st.series[i], &p->s); i++)
		;
	if (i == st.nseries) {
		st.series = realloc(st.series, (st.nseries + 1) * sizeof(*st.series));
		if (!st.series)
			abort();
		st.series[st.nseries++] = p->s;
	}
	st.series[i].live = strcmp(p->op, "del") != 0;
	st.series[i].value = p->s.value;
	st.series[i].ramp_from = !strcmp(p->op, "ramp") ? p->t : -1;
}

static int load_script(const char *path)
{
	FILE *f = strcmp(path, "-") ? fopen(path, "r") : stdin;
	char line[1024];
	int n = 0;

	if (!f) {
		fprintf(stderr, "harness: can't open %s: %s\n", path, strerror(errno));
		return -1;
	}
	while (fgets(line, sizeof(line), f)) {
		struct step p = {.s.ramp_from = -1};
		char *save, *tok;
		size_t nl = 0;

		n++;
		tok = strtok_r(line, " \t\n", &save);
		if (!tok || *tok == '#')
			continue;
		p.t = strtol(tok, NULL, 10);
		tok = strtok_r(NULL, " \t\n", &save);
		if (!tok || strlen(tok) >= sizeof(p.op))
			goto bad;
		strcpy(p.op, tok);
		if (strcmp(p.op, "end")) {
			tok = strtok_r(NULL, " \t\n", &save);
			if (!tok)
				goto bad;
			p.s.name = strdup(tok);
			if (!strcmp(p.op, "set")) {
				tok = strtok_r(NULL, " \t\n", &save);
				if (!tok)
					goto bad;
				p.s.value = strtod(tok, NULL);
			} else if (strcmp(p.op, "ramp") && strcmp(p.op, "del")) {
				goto bad;
			}
			while ((tok = strtok_r(NULL, " \t\n", &save)) && nl < 2 * MAX_LABELS) {
				char *eq = strchr(tok, '=');

				if (!eq)
					goto bad;
				*eq = '\0';
				p.s.labels[nl++] = strdup(tok);
				p.s.labels[nl++] = strdup(eq + 1);
			}
		}
		st.steps = realloc(st.steps, (st.nsteps + 1) * sizeof(*st.steps));
		if (!st.steps)
			abort();
		st.steps[st.nsteps++] = p;
	}
	if (f != stdin)
		fclose(f);
	return 0;
bad:
	fprintf(stderr, "harness: %s:%d: bad script line\n", path, n);
	return -1;
}

static void on_notification(void *ctx, json_t *n)
{
	emit(json_pack("{s:s, s:I, s:O}", "event", "notification", "t", (json_int_t)st.elapsed,
		       "notification", n));
}

/* The alerts without what changes every tick (value, rendered annotations). */
static char *alerts_key(json_t *list)
{
	json_t *k = json_array(), *a;
	size_t i;
	char *s;

	json_array_foreach(list, i, a)
	{
		json_array_append_new(k, json_pack("[O, O, O]", json_object_get(a, "name"),
						   json_object_get(a, "labels"),
						   json_object_get(a, "state")));
	}
	s = json_dumps(k, JSON_COMPACT | JSON_SORT_KEYS);
	json_decref(k);
	return s;
}

static void usage(void)
{
	fprintf(stderr,
		"usage: harness [--rules FILE | --gpu-memory R --nccl-stuck S --launch-p99 S]\n"
		"               [--webhook URL]... [--alertmanager URL]... [--tick MS]\n"
		"               [--resend MS] [--timeout MS] [--retries N] [--backoff MS]\n"
		"               [--node NAME] [--flush MS] [--check] SCRIPT|-\n");
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{"rules", required_argument, NULL, 'r'},
		{"gpu-memory", required_argument, NULL, 'g'},
		{"nccl-stuck", required_argument, NULL, 'n'},
		{"launch-p99", required_argument, NULL, 'l'},
		{"webhook", required_argument, NULL, 'w'},
		{"alertmanager", required_argument, NULL, 'a'},
		{"tick", required_argument, NULL, 't'},
		{"resend", required_argument, NULL, 'R'},
		{"timeout", required_argument, NULL, 'T'},
		{"retries", required_argument, NULL, 'N'},
		{"backoff", required_argument, NULL, 'B'},
		{"node", required_argument, NULL, 'o'},
		{"flush", required_argument, NULL, 'f'},
		{"check", no_argument, NULL, 'c'},
		{NULL, 0, NULL, 0},
	};
	struct alert_defaults d = {0};
	struct alert_delivery dl = {0};
	struct alert_engine_stats s;
	const char *rules = NULL, *node = NULL, *hooks[8], *ams[8];
	size_t nhooks = 0, nams = 0, next = 0;
	long tick = 100, max_late = 0, flush_ms = 15000;
	bool check = false;
	char err[1024], *last = NULL;
	struct alert_engine *e;
	json_t *stats;
	int c;

	log_init();
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 'r':
			rules = optarg;
			break;
		case 'g':
			d.gpu_memory_ratio = atof(optarg);
			break;
		case 'n':
			d.nccl_stuck_seconds = atof(optarg);
			break;
		case 'l':
			d.launch_p99_seconds = atof(optarg);
			break;
		case 'w':
			if (nhooks < 8)
				hooks[nhooks++] = optarg;
			break;
		case 'a':
			if (nams < 8)
				ams[nams++] = optarg;
			break;
		case 't':
			tick = atol(optarg);
			break;
		case 'R':
			dl.resend_ms = atoi(optarg);
			break;
		case 'T':
			dl.timeout_ms = atoi(optarg);
			break;
		case 'N':
			dl.retries = atoi(optarg);
			break;
		case 'B':
			dl.backoff_ms = atoi(optarg);
			break;
		case 'o':
			node = optarg;
			break;
		case 'f':
			flush_ms = atol(optarg);
			break;
		case 'c':
			check = true;
			break;
		default:
			usage();
			return 2;
		}
	}
	if (optind != argc - 1 && !check) {
		usage();
		return 2;
	}
	e = rules ? alert_engine__load(rules, err, sizeof(err)) : alert_engine__new_defaults(&d);
	if (!e) {
		fprintf(stderr, "%s\n", rules ? err : "can't load the default rules");
		return 1;
	}
	if (check) {
		json_t *r = alert_engine__rules(e);

		emit(json_pack("{s:s, s:o}", "event", "rules", "rules", r));
		alert_engine__free(e);
		return 0;
	}
	if (load_script(argv[optind]))
		return 2;
	if (node)
		alert_engine__set_external_label(e, "node", *node ? node : NULL);
	alert_engine__set_delivery(e, &dl);
	for (size_t i = 0; i < nhooks; i++)
		if (alert_engine__add_webhook(e, hooks[i])) {
			fprintf(stderr, "harness: bad webhook URL %s\n", hooks[i]);
			return 2;
		}
	for (size_t i = 0; i < nams; i++)
		if (alert_engine__add_alertmanager(e, ams[i])) {
			fprintf(stderr, "harness: bad Alertmanager URL %s\n", ams[i]);
			return 2;
		}
	alert_engine__add_callback(e, on_notification, NULL);

	clock_gettime(CLOCK_MONOTONIC, &st.start);
	emit(json_pack("{s:s, s:I}", "event", "start", "epoch_ms", (json_int_t)epoch_ms()));
	for (long k = 0;; k++) {
		struct timespec due = st.start;
		json_t *list;
		char *key;
		bool done = false;
		long late;

		due.tv_sec += (k * tick) / 1000;
		due.tv_nsec += ((k * tick) % 1000) * 1000000;
		if (due.tv_nsec >= 1000000000) {
			due.tv_sec++;
			due.tv_nsec -= 1000000000;
		}
		while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &due, NULL) == EINTR)
			;
		st.elapsed = since_start();
		late = st.elapsed - k * tick;
		if (late > max_late)
			max_late = late;
		for (; next < st.nsteps && st.steps[next].t <= st.elapsed; next++) {
			if (!strcmp(st.steps[next].op, "end"))
				done = true;
			else
				apply(&st.steps[next]);
		}
		if (done)
			break;
		alert_engine__eval(e, epoch_ms(), source, NULL);
		list = alert_engine__list(e);
		key = alerts_key(list);
		if (!last || strcmp(key, last)) {
			emit(json_pack("{s:s, s:I, s:O}", "event", "alerts", "t",
				       (json_int_t)st.elapsed, "alerts", list));
			free(last);
			last = key;
		} else {
			free(key);
		}
		json_decref(list);
	}
	free(last);
	if (alert_engine__flush(e, flush_ms))
		fprintf(stderr, "harness: notifications still queued after %ld ms\n", flush_ms);
	alert_engine__stats(e, &s);
	stats = json_pack(
		"{s:I, s:I, s:I, s:I, s:{s:I, s:I}, s:{s:I, s:I}, s:{s:I, s:I}, s:I}", "evals",
		(json_int_t)s.evals, "eval_errors", (json_int_t)s.eval_errors, "pending",
		(json_int_t)s.pending, "firing", (json_int_t)s.firing, "notifications", "webhook",
		(json_int_t)s.notifications[ALERT_SINK_WEBHOOK], "alertmanager",
		(json_int_t)s.notifications[ALERT_SINK_ALERTMANAGER], "notifications_failed",
		"webhook", (json_int_t)s.notifications_failed[ALERT_SINK_WEBHOOK], "alertmanager",
		(json_int_t)s.notifications_failed[ALERT_SINK_ALERTMANAGER],
		"notifications_dropped", "webhook",
		(json_int_t)s.notifications_dropped[ALERT_SINK_WEBHOOK], "alertmanager",
		(json_int_t)s.notifications_dropped[ALERT_SINK_ALERTMANAGER], "queued",
		(json_int_t)s.queued);
	emit(json_pack("{s:s, s:I, s:o, s:I}", "event", "end", "t", (json_int_t)since_start(),
		       "stats", stats, "max_tick_late_ms", (json_int_t)max_late));
	alert_engine__free(e);
	return 0;
}
