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
 * resolution, and {"event":"end","t":N,"stats":{...},"max_tick_late_ms":N}.
 * Built by tests/alerts/alerts.mk. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/xalloc.h"
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
	uint64_t start_ms; /* mono_ms() at the start */
};

static struct state st;

static long since_start(void)
{
	return (long)(mono_ms() - st.start_ms);
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
		st.series = xrealloc(st.series, (st.nseries + 1) * sizeof(*st.series));
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
		st.steps = xrealloc(st.steps, (st.nsteps + 1) * sizeof(*st.steps));
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

struct opts {
	const char *rules, *node, *hooks[8], *ams[8];
	size_t nhooks, nams;
	long tick, flush_ms;
	bool check;
	struct alert_defaults d;
	struct alert_delivery dl;
};

/* 0, or 2 after the usage. */
static int parse_opts(int argc, char **argv, struct opts *o)
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
	int c;

	*o = (struct opts){.tick = 100, .flush_ms = 15000};
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 'r':
			o->rules = optarg;
			break;
		case 'g':
			o->d.gpu_memory_ratio = atof(optarg);
			break;
		case 'n':
			o->d.nccl_stuck_seconds = atof(optarg);
			break;
		case 'l':
			o->d.launch_p99_seconds = atof(optarg);
			break;
		case 'w':
			if (o->nhooks < 8)
				o->hooks[o->nhooks++] = optarg;
			break;
		case 'a':
			if (o->nams < 8)
				o->ams[o->nams++] = optarg;
			break;
		case 't':
			o->tick = atol(optarg);
			break;
		case 'R':
			o->dl.resend_ms = atoi(optarg);
			break;
		case 'T':
			o->dl.timeout_ms = atoi(optarg);
			break;
		case 'N':
			o->dl.retries = atoi(optarg);
			break;
		case 'B':
			o->dl.backoff_ms = atoi(optarg);
			break;
		case 'o':
			o->node = optarg;
			break;
		case 'f':
			o->flush_ms = atol(optarg);
			break;
		case 'c':
			o->check = true;
			break;
		default:
			usage();
			return 2;
		}
	}
	if (optind != argc - 1 && !o->check) {
		usage();
		return 2;
	}
	return 0;
}

/* The engine's settings and sinks from the options. 0, or 2. */
static int set_up(struct alert_engine *e, const struct opts *o)
{
	if (o->node)
		alert_engine__set_external_label(e, "node", *o->node ? o->node : NULL);
	alert_engine__set_delivery(e, &o->dl);
	for (size_t i = 0; i < o->nhooks; i++)
		if (alert_engine__add_webhook(e, o->hooks[i])) {
			fprintf(stderr, "harness: bad webhook URL %s\n", o->hooks[i]);
			return 2;
		}
	for (size_t i = 0; i < o->nams; i++)
		if (alert_engine__add_alertmanager(e, o->ams[i])) {
			fprintf(stderr, "harness: bad Alertmanager URL %s\n", o->ams[i]);
			return 2;
		}
	alert_engine__add_callback(e, on_notification, NULL);
	return 0;
}

/* Sleeps until tick k (every tick ms from the start) is due. */
static void sleep_until_tick(long k, long tick)
{
	uint64_t due_ms = st.start_ms + (uint64_t)(k * tick);
	struct timespec due = {.tv_sec = due_ms / 1000, .tv_nsec = (due_ms % 1000) * 1000000};

	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &due, NULL) == EINTR)
		;
}

/* Ticks until the script ends: applies its steps, evaluates, prints the
 * alerts when they change. Returns how late the latest tick was (ms). */
static long run(struct alert_engine *e, long tick)
{
	size_t next = 0;
	long max_late = 0;
	char *last = NULL;

	for (long k = 0;; k++) {
		json_t *list;
		char *key;
		bool done = false;
		long late;

		sleep_until_tick(k, tick);
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
		alert_engine__eval(e, wall_ms(), source, NULL);
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
	return max_late;
}

static json_t *stats_json(struct alert_engine *e)
{
	struct alert_engine_stats s;

	alert_engine__stats(e, &s);
	return json_pack(
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
}

int main(int argc, char **argv)
{
	struct opts o;
	char err[1024];
	struct alert_engine *e;
	long max_late;
	int rc;

	log_init();
	rc = parse_opts(argc, argv, &o);
	if (rc)
		return rc;
	e = o.rules ? alert_engine__load(o.rules, err, sizeof(err))
		    : alert_engine__new_defaults(&o.d);
	if (!e) {
		fprintf(stderr, "%s\n", o.rules ? err : "can't load the default rules");
		return 1;
	}
	if (o.check) {
		json_t *r = alert_engine__rules(e);

		emit(json_pack("{s:s, s:o}", "event", "rules", "rules", r));
		alert_engine__free(e);
		return 0;
	}
	if (load_script(argv[optind]))
		return 2;
	rc = set_up(e, &o);
	if (rc)
		return rc;
	st.start_ms = mono_ms();
	emit(json_pack("{s:s, s:I}", "event", "start", "epoch_ms", (json_int_t)wall_ms()));
	max_late = run(e, o.tick);
	if (alert_engine__flush(e, o.flush_ms))
		fprintf(stderr, "harness: notifications still queued after %ld ms\n", o.flush_ms);
	emit(json_pack("{s:s, s:I, s:o, s:I}", "event", "end", "t", (json_int_t)since_start(),
		       "stats", stats_json(e), "max_tick_late_ms", (json_int_t)max_late));
	alert_engine__free(e);
	return 0;
}
