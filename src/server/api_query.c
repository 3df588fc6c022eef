/* api_query.c: the query routes of docs/api.md -- label names and values,
 * flame graphs (ours and Pyroscope's /pyroscope/render), diffs, top
 * functions, time series, metric points, pprof and speedscope downloads.
 * Each parses its selection (selector, type, from, until: parse.h), reads
 * from the store, and builds its answer with flame.h or the profile
 * writers. A bad argument is a 400 naming it; a store failure a 5xx. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "profile/profile.h"
#include "common/duration.h"
#include "common/clock.h"
#include "common/htable.h"
#include "common/json.h"
#include "common/sat.h"
#include "common/utf8.h"
#include "common/xalloc.h"
#include "server/flame.h"
#include "server/parse.h"
#include "server/server_internal.h"

#define DEFAULT_RANGE_MS (3600LL * MS_PER_SEC)
#define TIMELINE_MAX_POINTS 1000
#define TIMELINE_MIN_STEP_S 10
#define TOP_DEFAULT_LIMIT 100
#define TOP_MAX_LIMIT 100000

/* One selection: what a query argument set picks, for whom. */
struct qsel {
	struct selector sel;
	struct store_query q;
	const char *text; /* the selector as given ("" if none) */
	int64_t from, until;
	const struct server_call *call; /* the request's (its deadline in q) */
	enum flame_frames frames;	/* frames=: what a flame graph keeps of a stack */
};

/* Where a selection's arguments are and what they default to. */
struct qsel_args {
	const char *query, *from, *until; /* argument names */
	enum time_unit unit;
	const struct qsel *fallback; /* the left side, for a diff's right */
};

static void qsel__free(struct qsel *qs)
{
	selector__free(&qs->sel);
}

/* Parses a selection, of call's project alone: 0 when it is good, else
 * HTTP_ANSWERED with the 400 in rep, or a negative errno. */
static int qsel__parse(struct server *s, const struct server_call *call,
		       const struct http_request *req, struct http_reply *rep,
		       const struct qsel_args *a, struct qsel *qs)
{
	const char *text = http_request__query(req, a->query),
		   *f = http_request__query(req, a->from);
	const char *u = http_request__query(req, a->until),
		   *type = http_request__query(req, "type"),
		   *frames = http_request__query(req, "frames");
	int64_t now = (int64_t)wall_ms(), oldest = now - s->retention_ms;
	char err[512];
	int rc;

	memset(qs, 0, sizeof(*qs));
	qs->call = call;
	if (!text && a->fallback)
		text = a->fallback->text;
	if (frames && *frames && strcmp(frames, "all") && strcmp(frames, "python"))
		return reply_error(rep, 400,
				   "frames must be all (every frame) or python (Python's "
				   "frames and the native code they call)");
	qs->frames = frames && !strcmp(frames, "python") ? FLAME_PYTHON : FLAME_ALL;
	qs->text = text ? text : "";
	rc = selector__parse(&qs->sel, text, err, sizeof(err));
	if (rc)
		return rc == -ENOMEM ? rc : reply_error(rep, 400, "bad %s: %s", a->query, err);
	if (type && *type && !selector__eq(&qs->sel, "type")) {
		if (qs->sel.n >= SELECTOR_MAX_MATCHERS || strlen(type) > STORE_MAX_LABEL_VALUE ||
		    !utf8_valid(type, strlen(type)))
			return reply_error(
				rep, 400,
				"bad type: a UTF-8 name of at most %d bytes, with at most "
				"%d matchers in all",
				STORE_MAX_LABEL_VALUE, SELECTOR_MAX_MATCHERS);
		rc = selector__add(&qs->sel, "type", STORE_EQ, type);
		if (rc)
			return rc;
	}
	/* --auth: the token's project alone, whatever the selector says. */
	if (call->project) {
		rc = selector__add(&qs->sel, SERVER_PROJECT_LABEL, STORE_EQ, call->project);
		if (rc)
			return rc;
	}
	if (f) {
		if (parse_time_ms(f, a->unit, now, &qs->from, err, sizeof(err)))
			return reply_error(rep, 400, "bad %s: %s", a->from, err);
	} else {
		qs->from = a->fallback ? a->fallback->from : now - DEFAULT_RANGE_MS;
	}
	if (u) {
		if (parse_time_ms(u, a->unit, now, &qs->until, err, sizeof(err)))
			return reply_error(rep, 400, "bad %s: %s", a->until, err);
	} else {
		qs->until = a->fallback ? a->fallback->until : now;
	}
	if (qs->from >= qs->until)
		return reply_error(rep, 400,
				   "%s (%" PRId64 " ms) must be before %s (%" PRId64 " ms)",
				   a->from, qs->from, a->until, qs->until);
	/* Nothing older than the retention is kept: don't look for it. */
	if (qs->from < oldest)
		qs->from = oldest < qs->until ? oldest : qs->until - 1;
	qs->q.matchers = qs->sel.m;
	qs->q.nmatchers = qs->sel.n;
	qs->q.from_ms = qs->from;
	qs->q.until_ms = qs->until;
	qs->q.deadline_ns = call->deadline_ns;
	return 0;
}

static const struct qsel_args api_args = {"query", "from", "until", TIME_MS, NULL};
static const struct qsel_args pyro_args = {"query", "from", "until", TIME_PYROSCOPE_S, NULL};

/* Reads the selection into a new profile (*out, profile__free() it): 0,
 * or HTTP_ANSWERED with the store's error in rep, or -ENOMEM. */
static int select_profile(struct server *s, struct http_reply *rep, const struct qsel *qs,
			  struct profile **out, char *unit, size_t unitlen)
{
	const char *type = selector__eq(&qs->sel, "type");
	struct profile *p = profile__new(type ? type : "", "", 0);
	int err;

	unit[0] = '\0';
	err = store__select(s->store, &qs->q, p, unit, unitlen);
	if (err) {
		profile__free(p);
		return reply_store_error(rep, qs->call, "read the profiles", err);
	}
	*out = p;
	return 0;
}

/* Where a select's tree goes: a side of a flame tree, below a group frame
 * or the root; the tree's period and what adding it returned are kept. */
struct flame_dest {
	struct flame *f;
	int side;
	const char *group;
	int64_t period;
	int err;
};

static int flame_dest__add(void *ctx, const struct store_tree *t)
{
	struct flame_dest *d = ctx;

	d->period = t->period;
	d->err = flame__add_tree(d->f, d->side, d->group, t);
	return d->err;
}

/* Reads the selection q straight into d's flame tree (store__select_tree:
 * no profile made and sorted first), its unit into unit: 0, HTTP_ANSWERED
 * with the store's error in rep, or the tree's error (-ENOMEM, -E2BIG). */
static int select_flame(struct server *s, struct http_reply *rep, const struct server_call *call,
			const struct store_query *q, struct flame_dest *d, char *unit,
			size_t unitlen)
{
	int err;

	unit[0] = '\0';
	d->err = 0;
	err = store__select_tree(s->store, q, flame_dest__add, d, unit, unitlen);
	if (err && d->err)
		return d->err;
	if (err)
		return reply_store_error(rep, call, "read the profiles", err);
	return 0;
}

/* max_nodes (or maxNodes) into *out: 0, or HTTP_ANSWERED with the 400. */
static int parse_max_nodes(const struct http_request *req, struct http_reply *rep, size_t *out)
{
	const char *s = http_request__query(req, "max_nodes");
	char *end;
	long long v;

	if (!s)
		s = http_request__query(req, "maxNodes");
	*out = FLAME_DEFAULT_MAX_NODES;
	if (!s || !*s)
		return 0;
	errno = 0;
	v = strtoll(s, &end, 10);
	if (errno || *end || v < 1 || v > FLAME_LIMIT_MAX_NODES)
		return reply_error(rep, 400, "max_nodes '%.40s' must be an integer from 1 to %d", s,
				   FLAME_LIMIT_MAX_NODES);
	*out = (size_t)v;
	return 0;
}

/* Samples per second of a selection whose unit is samples, from its
 * period in ns; 100 (Pyroscope's default) when unknown. */
static int64_t sample_rate(int64_t period, const char *unit)
{
	if (period > 0 && !strcmp(unit, "samples") && period <= NS_PER_SEC)
		return llround(NS_PER_SEC / (double)period);
	return 100;
}

/* {"startTime", "samples", "durationDelta"}: the selection's values per
 * step of at least 10 s, at most 1000 steps. */
static json_t *timeline_json(struct server *s, const struct qsel *qs, int *err)
{
	int64_t range = qs->until - qs->from, step_s, step, start;
	struct store_query q = qs->q;
	json_t *j = NULL, *arr;
	double *values = NULL;
	size_t n, i;

	step_s = (range + (int64_t)MS_PER_SEC * (TIMELINE_MAX_POINTS - 1) - 1) /
		 ((int64_t)MS_PER_SEC * (TIMELINE_MAX_POINTS - 1));
	if (step_s < TIMELINE_MIN_STEP_S)
		step_s = TIMELINE_MIN_STEP_S;
	step = step_s * MS_PER_SEC;
	start = qs->from / step * step;
	n = (size_t)((qs->until - start + step - 1) / step);
	values = calloc(n ? n : 1, sizeof(*values));
	if (!values) {
		*err = -ENOMEM;
		return NULL;
	}
	q.from_ms = start;
	q.until_ms = start + (int64_t)n * step;
	*err = store__timeline(s->store, &q, step, values, n);
	if (*err)
		goto cleanup;
	arr = json_array();
	j = json_pack("{sIsosI}", "startTime", (json_int_t)(start / MS_PER_SEC), "samples", arr,
		      "durationDelta", (json_int_t)step_s);
	if (!j) {
		*err = -ENOMEM;
		goto cleanup;
	}
	for (i = 0; i < n; i++)
		json_array_append_new(arr, json_integer((json_int_t)llround(values[i])));
cleanup:
	free(values);
	return j;
}

/* The flamebearer answer of one selection, or of two (a diff). */
static int flame_answer(struct server *s, struct http_reply *rep, const struct qsel *l,
			const struct qsel *r, size_t max_nodes)
{
	struct flame_dest d = {0};
	struct flame *f = NULL;
	struct sbuf b = {0};
	char unit[64], runit[64];
	json_t *meta = NULL, *tl = NULL, *rtl = NULL;
	const char *type = selector__eq(&l->sel, "type"),
		   *app = selector__eq(&l->sel, "service_name");
	int64_t rate;
	int err;

	/* One selection at a time, straight into the tree: a diff holds one
	 * selection's stacks and the tree, not both selections. */
	f = flame__new(r ? 2 : 1);
	if (f)
		flame__set_frames(f, l->frames);
	if (!f) {
		err = -ENOMEM;
		goto cleanup;
	}
	d.f = f;
	err = select_flame(s, rep, l->call, &l->q, &d, unit, sizeof(unit));
	if (err)
		goto cleanup;
	rate = sample_rate(d.period, unit);
	if (r) {
		d.side = 1;
		err = select_flame(s, rep, r->call, &r->q, &d, runit, sizeof(runit));
		if (err)
			goto cleanup;
		if (!unit[0])
			snprintf(unit, sizeof(unit), "%s", runit);
	}
	tl = timeline_json(s, l, &err);
	if (!tl)
		goto store_err;
	if (r) {
		rtl = timeline_json(s, r, &err);
		if (!rtl)
			goto store_err;
	}
	meta = json_pack("{sssssssIsssIsIsssI}", "format", r ? "double" : "single", "name",
			 type ? type : "", "units", unit[0] ? unit : "samples", "sampleRate",
			 (json_int_t)rate, "spyName", "sonde", "startTime",
			 (json_int_t)(l->from / MS_PER_SEC), "endTime",
			 (json_int_t)(l->until / MS_PER_SEC), "appName", app ? app : "", "maxNodes",
			 (json_int_t)max_nodes);
	if (!meta) {
		err = -ENOMEM;
		goto cleanup;
	}
	/* What frames=python left out: the UI offers the other view when some. */
	if (json_object_set_new(meta, "frames",
				json_string(l->frames == FLAME_PYTHON ? "python" : "all")) ||
	    json_object_set_new(meta, "framesFolded", json_integer((json_int_t)flame__folded(f)))) {
		err = -ENOMEM;
		goto cleanup;
	}
	if (json_object_set_new(meta, "query", json_string_lossy(l->text))) {
		err = -ENOMEM;
		goto cleanup;
	}
	err |= sbuf__puts(&b, "{\"version\":1,\"flamebearer\":");
	err |= flame__write(f, max_nodes, &b);
	err |= sbuf__puts(&b, ",\"metadata\":");
	err |= sbuf__json(&b, meta);
	if (r) {
		err |= sbuf__printf(&b, ",\"leftTicks\":%" PRId64 ",\"rightTicks\":%" PRId64,
				    flame__ticks(f, 0), flame__ticks(f, 1));
		err |= sbuf__puts(&b, ",\"leftTimeline\":");
		err |= sbuf__json(&b, tl);
		err |= sbuf__puts(&b, ",\"rightTimeline\":");
		err |= sbuf__json(&b, rtl);
	}
	err |= sbuf__puts(&b, ",\"timeline\":");
	err |= sbuf__json(&b, tl);
	err |= sbuf__puts(&b, "}");
	if (err) {
		err = -ENOMEM;
		goto cleanup;
	}
	err = reply_sbuf(rep, NULL, &b);
	goto cleanup;
store_err:
	if (err != -ENOMEM)
		err = reply_store_error(rep, l->call, "read the timeline", err);
cleanup:
	sbuf__free(&b);
	json_decref(meta);
	json_decref(tl);
	json_decref(rtl);
	flame__free(f);
	return err;
}

static int flame_grouped(struct server *s, const struct http_request *req, struct http_reply *rep,
			 const struct qsel *qs, size_t max_nodes);

int api_flamegraph(struct server *s, const struct server_call *call, const struct http_request *req,
		   struct http_reply *rep)
{
	struct qsel qs;
	size_t max_nodes;
	int err;

	err = qsel__parse(s, call, req, rep, &api_args, &qs);
	if (!err)
		err = parse_max_nodes(req, rep, &max_nodes);
	if (!err)
		err = flame_grouped(s, req, rep, &qs, max_nodes);
	if (!err)
		err = flame_answer(s, rep, &qs, NULL, max_nodes);
	qsel__free(&qs);
	return err;
}

static int profile_download(struct server *s, struct http_reply *rep, const struct qsel *qs,
			    enum prof_format fmt);

static int folded_download(struct server *s, struct http_reply *rep, const struct qsel *qs);

int api_pyroscope_render(struct server *s, const struct server_call *call,
			 const struct http_request *req, struct http_reply *rep)
{
	const char *format = http_request__query(req, "format");
	struct qsel qs;
	size_t max_nodes;
	int err;

	err = qsel__parse(s, call, req, rep, &pyro_args, &qs);
	if (err)
		goto cleanup;
	if (!format || !strcmp(format, "json")) {
		err = parse_max_nodes(req, rep, &max_nodes);
		if (!err)
			err = flame_grouped(s, req, rep, &qs, max_nodes);
		if (!err)
			err = flame_answer(s, rep, &qs, NULL, max_nodes);
	} else if (!strcmp(format, "pprof")) {
		err = profile_download(s, rep, &qs, PROF_FMT_PPROF);
	} else if (!strcmp(format, "collapsed")) {
		err = folded_download(s, rep, &qs);
	} else {
		err = reply_error(rep, 400,
				  "format '%.40s' is not supported: use json, pprof or "
				  "collapsed",
				  format);
	}
cleanup:
	qsel__free(&qs);
	return err;
}

static int diff_answer(struct server *s, const struct server_call *call,
		       const struct http_request *req, struct http_reply *rep,
		       const struct qsel_args *la, const struct qsel_args *ra_in)
{
	struct qsel l, r;
	struct qsel_args ra = *ra_in;
	size_t max_nodes;
	int err;

	memset(&r, 0, sizeof(r));
	err = qsel__parse(s, call, req, rep, la, &l);
	if (err)
		goto cleanup;
	ra.fallback = &l;
	err = qsel__parse(s, call, req, rep, &ra, &r);
	if (!err)
		err = parse_max_nodes(req, rep, &max_nodes);
	if (!err)
		err = flame_answer(s, rep, &l, &r, max_nodes);
cleanup:
	qsel__free(&l);
	qsel__free(&r);
	return err;
}

int api_diff(struct server *s, const struct server_call *call, const struct http_request *req,
	     struct http_reply *rep)
{
	static const struct qsel_args right = {"right_query", "right_from", "right_until", TIME_MS,
					       NULL};

	return diff_answer(s, call, req, rep, &api_args, &right);
}

int api_pyroscope_render_diff(struct server *s, const struct server_call *call,
			      const struct http_request *req, struct http_reply *rep)
{
	static const struct qsel_args left = {"leftQuery", "leftFrom", "leftUntil",
					      TIME_PYROSCOPE_S, NULL};
	static const struct qsel_args right = {"rightQuery", "rightFrom", "rightUntil",
					       TIME_PYROSCOPE_S, NULL};

	return diff_answer(s, call, req, rep, &left, &right);
}

static json_t *fn_name(const struct top_fn *t)
{
	char *s;
	json_t *j;

	if (!t->kernel)
		return json_string_lossy(t->func);
	if (asprintf(&s, "%s_[k]", t->func) < 0)
		return NULL;
	j = json_string_lossy(s);
	free(s);
	return j;
}

/* A limit= argument: an integer from 1 to max into *out; 0 or -EINVAL. */
static int parse_limit(const char *arg, long long max, long long *out)
{
	char *end;
	long long v;

	errno = 0;
	v = strtoll(arg, &end, 10);
	if (errno || *end || !*arg || v < 1 || v > max)
		return -EINVAL;
	*out = v;
	return 0;
}

int api_top(struct server *s, const struct server_call *call, const struct http_request *req,
	    struct http_reply *rep)
{
	const char *sort = http_request__query(req, "sort"),
		   *lim = http_request__query(req, "limit");
	enum top_sort by = TOP_BY_SELF;
	struct profile *p = NULL;
	struct top_fn *fns = NULL;
	long long limit = TOP_DEFAULT_LIMIT;
	json_t *j = NULL, *arr;
	char unit[64];
	struct qsel qs;
	size_t n = 0, i, text = 0;
	int err;

	err = qsel__parse(s, call, req, rep, &api_args, &qs);
	if (err)
		goto cleanup;
	if (sort && !strcmp(sort, "total")) {
		by = TOP_BY_TOTAL;
	} else if (sort && strcmp(sort, "self")) {
		err = reply_error(rep, 400, "sort '%.40s' must be self or total", sort);
		goto cleanup;
	}
	if (lim && parse_limit(lim, TOP_MAX_LIMIT, &limit)) {
		err = reply_error(rep, 400, "limit '%.40s' must be an integer from 1 to %d", lim,
				  TOP_MAX_LIMIT);
		goto cleanup;
	}
	err = select_profile(s, rep, &qs, &p, unit, sizeof(unit));
	if (err)
		goto cleanup;
	err = top__build(p, by, qs.frames, (size_t)limit, &fns, &n);
	if (err)
		goto cleanup;
	arr = json_array();
	j = json_pack("{sssIso}", "unit", unit[0] ? unit : "samples", "total", (json_int_t)p->total,
		      "functions", arr);
	if (!j) {
		err = -ENOMEM;
		goto cleanup;
	}
	for (i = 0; i < n; i++) {
		json_t *o;

		/* Long names: the answer holds FLAME_MAX_TEXT bytes of them at
		 * most, the rest left out and said so. */
		text += strlen(fns[i].func) + strlen(fns[i].module) + strlen(fns[i].file);
		if (text > FLAME_MAX_TEXT) {
			if (json_object_set_new(j, "truncated", json_true())) {
				err = -ENOMEM;
				goto cleanup;
			}
			break;
		}
		o = json_pack("{sososIsI}", "name", fn_name(&fns[i]), "module",
			      json_string_lossy(fns[i].module), "self", (json_int_t)fns[i].self,
			      "total", (json_int_t)fns[i].total);

		/* Where the function is, when known: a Python function's file
		 * and first line, a native one's from DWARF. */
		if (o && *fns[i].file &&
		    (json_object_set_new(o, "file", json_string_lossy(fns[i].file)) ||
		     (fns[i].line &&
		      json_object_set_new(o, "line", json_integer((json_int_t)fns[i].line))))) {
			json_decref(o);
			o = NULL;
		}
		if (!o || json_array_append_new(arr, o)) {
			err = -ENOMEM;
			goto cleanup;
		}
	}
	err = reply_json(rep, j);
	j = NULL;
cleanup:
	json_decref(j);
	free(fns);
	profile__free(p);
	qsel__free(&qs);
	return err;
}

/* A value as JSON: an integer when it is one, NaN and infinities as the
 * strings Prometheus writes. */
static json_t *value_json(double v)
{
	if (isnan(v))
		return json_string("NaN");
	if (isinf(v))
		return json_string(v > 0 ? "+Inf" : "-Inf");
	if (v == floor(v) && fabs(v) < 9e15)
		return json_integer((json_int_t)v);
	return json_real(v);
}

/* The step of a time series over range: the step argument (ms or a
 * duration), else range / 300 and at least a second; answers 400 as
 * qsel__parse() does for a bad one or one that makes too many steps. */
static int parse_step(const struct http_request *req, struct http_reply *rep, int64_t range,
		      int64_t *step)
{
	const char *st = http_request__query(req, "step");

	if (st && *st) {
		char *end;
		long long v;

		errno = 0;
		v = strtoll(st, &end, 10);
		if (errno || *end || v < 1) {
			uint64_t d;

			if (duration_parse(st, &d) || d < 1)
				return reply_error(rep, 400,
						   "step '%.40s' must be milliseconds or a "
						   "duration (10s, 1m)",
						   st);
			v = d;
		}
		*step = v;
	} else {
		*step = range / 300;
		if (*step < 1000)
			*step = 1000;
	}
	if ((range + *step - 1) / *step > SERVER_MAX_STEPS)
		return reply_error(rep, 400,
				   "%" PRId64 " steps of %" PRId64
				   " ms: at most %d -- use a larger step",
				   (range + *step - 1) / *step, *step, SERVER_MAX_STEPS);
	return 0;
}

static int ignore_tree(void *ctx, const struct store_tree *t)
{
	return 0;
}

/* The unit of the selection's windows, read from the last step (small),
 * else from the whole range (a select whose stacks are not looked at):
 * 0, or HTTP_ANSWERED with the store's error in rep. */
static int timeline_unit(struct server *s, struct http_reply *rep, const struct qsel *qs,
			 int64_t step, char *unit, size_t unitlen)
{
	struct store_query last = qs->q;
	int err;

	last.from_ms = qs->until - step > qs->from ? qs->until - step : qs->from;
	unit[0] = '\0';
	err = store__select_tree(s->store, &last, ignore_tree, NULL, unit, unitlen);
	if (!err && !unit[0])
		err = store__select_tree(s->store, &qs->q, ignore_tree, NULL, unit, unitlen);
	return err ? reply_store_error(rep, qs->call, "read the profiles", err) : 0;
}

int api_timeseries(struct server *s, const struct server_call *call, const struct http_request *req,
		   struct http_reply *rep)
{
	double *values = NULL;
	json_t *j = NULL, *arr;
	int64_t step = 0;
	struct qsel qs;
	char unit[64];
	size_t n, i;
	int err;

	err = qsel__parse(s, call, req, rep, &api_args, &qs);
	if (!err)
		err = parse_step(req, rep, qs.until - qs.from, &step);
	if (err)
		goto cleanup;
	n = (size_t)((qs.until - qs.from + step - 1) / step);
	values = calloc(n ? n : 1, sizeof(*values));
	if (!values) {
		err = -ENOMEM;
		goto cleanup;
	}
	err = store__timeline(s->store, &qs.q, step, values, n);
	if (err) {
		err = reply_store_error(rep, call, "read the time series", err);
		goto cleanup;
	}
	err = timeline_unit(s, rep, &qs, step, unit, sizeof(unit));
	if (err)
		goto cleanup;
	arr = json_array();
	j = json_pack("{sssIsIso}", "unit", unit[0] ? unit : "samples", "start_ms",
		      (json_int_t)qs.from, "step_ms", (json_int_t)step, "values", arr);
	if (!j) {
		err = -ENOMEM;
		goto cleanup;
	}
	for (i = 0; i < n; i++) {
		if (json_array_append_new(arr, value_json(values[i]))) {
			err = -ENOMEM;
			goto cleanup;
		}
	}
	err = reply_json(rep, j);
	j = NULL;
cleanup:
	json_decref(j);
	free(values);
	qsel__free(&qs);
	return err;
}

struct points_ctx {
	json_t *series;
	size_t npoints;
	bool too_many;
	int err;
};

static void points_cb(void *ctx, const char *name, const struct store_label *labels, size_t nlabels,
		      const int64_t *ts_ms, const double *values, size_t n)
{
	struct points_ctx *pc = ctx;
	json_t *o, *jl, *jp;
	size_t i;

	if (pc->err || pc->too_many)
		return;
	if (pc->npoints + n > SERVER_MAX_POINTS_OUT) {
		pc->too_many = true;
		return;
	}
	pc->npoints += n;
	jl = json_object();
	jp = json_array();
	o = json_pack("{soso}", "labels", jl, "points", jp);
	if (!o || json_array_append_new(pc->series, o)) {
		pc->err = -ENOMEM;
		return;
	}
	for (i = 0; i < nlabels; i++)
		if (json_object_set_new(jl, labels[i].name, json_string_lossy(labels[i].value)))
			pc->err = -ENOMEM;
	for (i = 0; i < n; i++)
		if (json_array_append_new(
			    jp, json_pack("[Io]", (json_int_t)ts_ms[i], value_json(values[i]))))
			pc->err = -ENOMEM;
}

int api_points(struct server *s, const struct server_call *call, const struct http_request *req,
	       struct http_reply *rep)
{
	const char *name = http_request__query(req, "name");
	struct points_ctx pc = {0};
	json_t *j = NULL;
	struct qsel qs;
	int err;

	err = qsel__parse(s, call, req, rep, &api_args, &qs);
	if (err)
		goto cleanup;
	if (!name || !*name) {
		err = reply_error(rep, 400,
				  "name is missing: which metric? (gpu_memory_used_bytes, "
				  "nccl_calls, ...)");
		goto cleanup;
	}
	pc.series = json_array();
	j = json_pack("{ssso}", "name", "", "series", pc.series);
	if (!j || json_object_set_new(j, "name", json_string_lossy(name))) {
		err = -ENOMEM;
		goto cleanup;
	}
	err = store__points(s->store, name, &qs.q, points_cb, &pc);
	if (err) {
		err = reply_store_error(rep, call, "read the points", err);
		goto cleanup;
	}
	if (pc.err) {
		err = pc.err;
		goto cleanup;
	}
	if (pc.too_many) {
		err = reply_error(rep, 400,
				  "more than %d points selected: narrow the range or the "
				  "query",
				  SERVER_MAX_POINTS_OUT);
		goto cleanup;
	}
	err = reply_json(rep, j);
	j = NULL;
cleanup:
	json_decref(j);
	qsel__free(&qs);
	return err;
}

/* Letters, digits, '-' and '_' of a type, for a file name. */
static void file_safe(const char *s, char *out, size_t outlen)
{
	size_t o = 0;

	for (; s && *s && o + 1 < outlen; s++) {
		char c = *s;

		out[o++] = ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
			    (c >= '0' && c <= '9') || c == '-' || c == '_')
				   ? c
				   : '_';
	}
	if (!o)
		snprintf(out, outlen, "profile");
	else
		out[o] = '\0';
}

/* The selection written by a profile writer into a reply. */
static int write_profile(struct http_reply *rep, struct profile *p, enum prof_format fmt)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	int err;

	if (!f)
		return -ENOMEM;
	err = profile__write(p, fmt, f);
	if (fclose(f) && !err)
		err = -EIO;
	if (err) {
		free(buf);
		return err;
	}
	free(rep->body);
	rep->body = buf;
	rep->len = len;
	return 0;
}

static int profile_download(struct server *s, struct http_reply *rep, const struct qsel *qs,
			    enum prof_format fmt)
{
	const char *type = selector__eq(&qs->sel, "type");
	struct profile *p = NULL;
	char unit[64], fname[80], disposition[160];
	int err;

	err = select_profile(s, rep, qs, &p, unit, sizeof(unit));
	if (err)
		goto cleanup;
	/* cpu samples go out as pprof's cpu/nanoseconds (count * period),
	 * as `go tool pprof` expects of a CPU profile; other types keep their
	 * unit, one per sample. */
	free(p->unit);
	if (!strcmp(unit, "samples") && p->period > 0) {
		p->unit = strdup("nanoseconds");
	} else {
		p->unit = strdup(unit[0] ? unit : "count");
		p->period = 1;
	}
	free(p->type);
	p->type = strdup(type ? type : "cpu");
	if (!p->unit || !p->type) {
		err = -ENOMEM;
		goto cleanup;
	}
	/* speedscope names its profile after the samples' process: a
	 * selection's merged samples have none, so they take the service's
	 * name (the writer falls back on the type). */
	if (fmt == PROF_FMT_SPEEDSCOPE && selector__eq(&qs->sel, "service_name")) {
		uint32_t svc = profile__intern(p, selector__eq(&qs->sel, "service_name"));

		for (size_t i = 0; i < p->nsamples; i++)
			if (!p->samples[i].pid && !*profile__str(p, p->samples[i].comm))
				p->samples[i].comm = svc;
	}
	err = write_profile(rep, p, fmt);
	if (err)
		goto cleanup;
	file_safe(type, fname, sizeof(fname));
	snprintf(disposition, sizeof(disposition), "attachment; filename=\"sonde-%s.%s\"", fname,
		 fmt == PROF_FMT_PPROF ? "pb.gz" : "speedscope.json");
	rep->content_type = fmt == PROF_FMT_PPROF ? "application/octet-stream" : HTTP_CONTENT_JSON;
	err = http_reply__header(rep, "Content-Disposition", disposition);
cleanup:
	profile__free(p);
	return err;
}

static int folded_download(struct server *s, struct http_reply *rep, const struct qsel *qs)
{
	struct profile *p = NULL;
	char unit[64];
	int err;

	err = select_profile(s, rep, qs, &p, unit, sizeof(unit));
	if (!err)
		err = write_profile(rep, p, PROF_FMT_FOLDED);
	if (!err)
		rep->content_type = "text/plain; charset=utf-8";
	profile__free(p);
	return err;
}

/* A download of the selection of the query arguments. */
static int selection_download(struct server *s, const struct server_call *call,
			      const struct http_request *req, struct http_reply *rep,
			      enum prof_format fmt)
{
	struct qsel qs;
	int err;

	err = qsel__parse(s, call, req, rep, &api_args, &qs);
	if (!err)
		err = profile_download(s, rep, &qs, fmt);
	qsel__free(&qs);
	return err;
}

int api_pprof(struct server *s, const struct server_call *call, const struct http_request *req,
	      struct http_reply *rep)
{
	return selection_download(s, call, req, rep, PROF_FMT_PPROF);
}

int api_speedscope(struct server *s, const struct server_call *call, const struct http_request *req,
		   struct http_reply *rep)
{
	return selection_download(s, call, req, rep, PROF_FMT_SPEEDSCOPE);
}

struct strings_ctx {
	json_t *arr;
	int err;
	bool names; /* label names, not values */
};

static void strings_cb(void *ctx, const char *s)
{
	struct strings_ctx *sc = ctx;

	/* The project label is the server's, not a label of the data. */
	if (sc->names && !strcmp(s, SERVER_PROJECT_LABEL))
		return;
	if (json_array_append_new(sc->arr, json_string_lossy(s)))
		sc->err = -ENOMEM;
}

/* Answers j (taken) with the strings the store reads into j's array at
 * key: the selection's label names, or the values of label name. */
static int strings_answer(struct server *s, struct http_reply *rep, const struct qsel *qs,
			  const char *name, json_t *j, const char *key)
{
	struct strings_ctx sc = {json_object_get(j, key), 0, !name};
	int err;

	if (!j)
		return -ENOMEM;
	if (name)
		err = store__label_values(s->store, &qs->q, name, strings_cb, &sc);
	else
		err = store__label_names(s->store, &qs->q, strings_cb, &sc);
	if (!err && !sc.err)
		return reply_json(rep, j);
	json_decref(j);
	if (err)
		return reply_store_error(rep, qs->call,
					 name ? "read the label values" : "read the label names",
					 err);
	return sc.err;
}

int api_labels(struct server *s, const struct server_call *call, const struct http_request *req,
	       struct http_reply *rep)
{
	struct qsel qs;
	int err;

	err = qsel__parse(s, call, req, rep, &api_args, &qs);
	if (!err)
		err = strings_answer(s, rep, &qs, NULL, json_pack("{s[]}", "names"), "names");
	qsel__free(&qs);
	return err;
}

/* The label name a query parameter gives (name), dots taken as '_' as at
 * ingest (label_name_sanitize), in buf; NULL if it is none. */
static const char *query_label_name(const char *given, char buf[STORE_MAX_LABEL_NAME + 1])
{
	if (!given || strlen(given) > STORE_MAX_LABEL_NAME)
		return NULL;
	strcpy(buf, given);
	return label_name_sanitize(buf) ? buf : NULL;
}

int api_label_values(struct server *s, const struct server_call *call,
		     const struct http_request *req, struct http_reply *rep)
{
	const char *name = http_request__query(req, "name");
	char buf[STORE_MAX_LABEL_NAME + 1];
	struct qsel qs;
	int err;

	if (!name)
		name = http_request__query(req, "label");
	name = query_label_name(name, buf);
	err = qsel__parse(s, call, req, rep, &api_args, &qs);
	if (err)
		goto cleanup;
	if (!name)
		err = reply_error(
			rep, 400,
			"name must be a label name ([A-Za-z_.][A-Za-z0-9_.]*, a dot taken as '_')");
	else
		err = strings_answer(s, rep, &qs, name,
				     json_pack("{sss[]}", "name", name, "values"), "values");
cleanup:
	qsel__free(&qs);
	return err;
}

/* ---- totals: what the store holds, grouped by a label ---- */

/* The series of one value of a label (api_totals, and group_by's frames). */
struct group {
	char *value;
	int64_t total, first, last;
	UT_hash_handle hh;
};

struct group_ctx {
	const char *by;
	struct group *groups; /* uthash, by value */
	size_t n;
	int64_t first, last;
	int err;
};

static void group_cb(void *ctx, const struct store_label *labels, size_t nlabels, int64_t total,
		     int64_t first_ms, int64_t last_ms)
{
	struct group_ctx *g = ctx;
	const char *v = "";
	struct group *gr;

	if (g->err)
		return;
	for (size_t i = 0; i < nlabels; i++)
		if (!strcmp(labels[i].name, g->by))
			v = labels[i].value;
	if (first_ms < g->first)
		g->first = first_ms;
	if (last_ms > g->last)
		g->last = last_ms;
	HASH_FIND_STR(g->groups, v, gr);
	if (!gr) {
		gr = calloc(1, sizeof(*gr));
		if (!gr || !(gr->value = strdup(v))) {
			free(gr);
			g->err = -ENOMEM;
			return;
		}
		gr->first = INT64_MAX;
		gr->last = INT64_MIN;
		HASH_ADD_KEYPTR(hh, g->groups, gr->value, strlen(gr->value), gr);
		g->n++;
	}
	gr->total = sat_add_i64(gr->total, total);
	if (first_ms < gr->first)
		gr->first = first_ms;
	if (last_ms > gr->last)
		gr->last = last_ms;
}

/* Busiest first, then by value. */
static int group_cmp(struct group *x, struct group *y)
{
	if (x->total != y->total)
		return x->total > y->total ? -1 : 1;
	return strcmp(x->value, y->value);
}

/* GET /api/v1/totals?by=LABEL&query=&from=&until=: the selection's series
 * grouped by the value of LABEL ("" where a series has none), busiest
 * first, with each group's total and the extent of its windows, and the
 * extent of them all -- what the UI opens on. */
int api_totals(struct server *s, const struct server_call *call, const struct http_request *req,
	       struct http_reply *rep)
{
	struct group_ctx g = {.first = INT64_MAX, .last = INT64_MIN};
	char buf[STORE_MAX_LABEL_NAME + 1];
	struct group *gr;
	json_t *j = NULL, *arr;
	struct qsel qs;
	int err;

	g.by = query_label_name(http_request__query(req, "by"), buf);
	err = qsel__parse(s, call, req, rep, &api_args, &qs);
	if (err)
		goto cleanup;
	if (!g.by) {
		err = reply_error(
			rep, 400,
			"by must be a label name ([A-Za-z_.][A-Za-z0-9_.]*, a dot taken as '_')");
		goto cleanup;
	}
	err = store__series_totals(s->store, &qs.q, group_cb, &g);
	if (err) {
		err = reply_store_error(rep, call, "read the series' totals", err);
		goto cleanup;
	}
	if (g.err) {
		err = g.err;
		goto cleanup;
	}
	HASH_SORT(g.groups, group_cmp);
	arr = json_array();
	j = json_pack("{sssoso}", "by", g.by, "from_ms",
		      g.n ? json_integer((json_int_t)g.first) : json_null(), "until_ms",
		      g.n ? json_integer((json_int_t)g.last) : json_null());
	if (!j || !arr || json_object_set_new(j, "groups", arr)) {
		err = -ENOMEM;
		goto cleanup;
	}
	for (gr = g.groups; gr; gr = gr->hh.next) {
		if (json_array_append_new(arr, json_pack("{s:o,s:I,s:I,s:I}", "value",
							 json_string_lossy(gr->value), "total",
							 (json_int_t)gr->total, "from_ms",
							 (json_int_t)gr->first, "until_ms",
							 (json_int_t)gr->last))) {
			err = -ENOMEM;
			goto cleanup;
		}
	}
	err = reply_json(rep, j);
	j = NULL;
cleanup:
	json_decref(j);
	HTABLE_CLEAR(hh, g.groups, e, free(e->value), free(e));
	qsel__free(&qs);
	return err;
}

/* ---- group_by: a flame graph with a frame per value of a label ---- */

/* The values of the group_by label that get a frame of their own (fewer
 * when the selector leaves no room for their matchers); the others share
 * one. docs/api.md gives the cap. */
#define GROUP_BY_MAX_VALUES 50

/* What the frames' reads share: the selection, the matchers after its own,
 * the tree, and what the first read that knows says of unit and period. */
struct gb_read {
	struct server *s;
	const struct qsel *qs;
	struct store_matcher *m; /* the selection's matchers, then room for the extra */
	struct flame *f;
	char unit[64];
	int64_t period;
};

/* Reads the selection with extra[0..n) added to its matchers and adds it
 * under a frame named "BY=what". 0, a negative errno, or HTTP_ANSWERED
 * with the store's error in rep. */
static int gb_read__add(struct gb_read *r, struct http_reply *rep,
			const struct store_matcher *extra, size_t n, const char *what)
{
	struct store_query q = r->qs->q;
	struct flame_dest d = {.f = r->f};
	char unit[64] = "", *frame = NULL;
	int err;

	memcpy(r->m + q.nmatchers, extra, n * sizeof(*extra));
	q.matchers = r->m;
	q.nmatchers += n;
	if (asprintf(&frame, "%s=%s", extra[0].name, what) < 0)
		return -ENOMEM;
	d.group = frame;
	err = select_flame(r->s, rep, r->qs->call, &q, &d, unit, sizeof(unit));
	if (!err && !r->unit[0])
		snprintf(r->unit, sizeof(r->unit), "%s", unit);
	if (!err && !r->period)
		r->period = d.period;
	free(frame);
	return err;
}

/* group_by=LABEL (or groupBy) on /api/v1/flamegraph and /pyroscope/render:
 * the selection's flame graph with a frame "LABEL=VALUE" under the root
 * per value of LABEL, holding that value's stacks -- the busiest
 * GROUP_BY_MAX_VALUES values, the others together under "LABEL=(other)",
 * the series without the label under "LABEL=(none)". One pass over the
 * series' totals ranks the values, then each frame is one read with a
 * matcher more ("(other)": a != per value shown), so a frame holds what its
 * matchers select even when windows arrive between the reads.
 * HTTP_ANSWERED when it answered (the graph, or an error), a negative
 * errno; without group_by, 0: the caller answers. */
static int flame_grouped(struct server *s, const struct http_request *req, struct http_reply *rep,
			 const struct qsel *qs, size_t max_nodes)
{
	const char *by = http_request__query(req, "group_by"),
		   *type = selector__eq(&qs->sel, "type"),
		   *app = selector__eq(&qs->sel, "service_name");
	struct group_ctx g = {.first = INT64_MAX, .last = INT64_MIN};
	struct gb_read r = {.s = s, .qs = qs};
	struct store_matcher *other = NULL;
	size_t nvalues = 0, room, shown = 0, nother = 0;
	struct group *e;
	struct sbuf b = {0};
	json_t *meta = NULL, *tl = NULL;
	char buf[STORE_MAX_LABEL_NAME + 1];
	int err = 0;

	if (!by)
		by = http_request__query(req, "groupBy");
	if (!by || !*by)
		return 0;
	if (!query_label_name(by, buf))
		return reply_error(
			rep, 400,
			"group_by '%.80s' is not a label name ([A-Za-z_.][A-Za-z0-9_.]*, "
			"a dot taken as '_', at most %d bytes)",
			by, STORE_MAX_LABEL_NAME);
	by = buf;
	if (qs->q.nmatchers >= STORE_MAX_MATCHERS)
		return reply_error(
			rep, 400,
			"group_by needs a matcher of its own: at most %d matchers in the "
			"selector",
			STORE_MAX_MATCHERS - 1);
	g.by = by;
	err = store__series_totals(s->store, &qs->q, group_cb, &g);
	if (err) {
		err = reply_store_error(rep, qs->call, "read the series' totals", err);
		goto cleanup;
	}
	err = g.err;
	if (err)
		goto cleanup;
	HASH_SORT(g.groups, group_cmp);
	/* "(other)" reads with a != per value shown and one for "". */
	room = STORE_MAX_MATCHERS - 1 - qs->q.nmatchers;
	if (room > GROUP_BY_MAX_VALUES)
		room = GROUP_BY_MAX_VALUES;
	r.m = malloc((qs->q.nmatchers + room + 1) * sizeof(*r.m));
	other = malloc((room + 1) * sizeof(*other));
	r.f = flame__new(1);
	if (r.f)
		flame__set_frames(r.f, qs->frames);
	if (!r.m || !other || !r.f) {
		err = -ENOMEM;
		goto cleanup;
	}
	memcpy(r.m, qs->q.matchers, qs->q.nmatchers * sizeof(*r.m));
	for (e = g.groups; e && !err; e = e->hh.next) {
		struct store_matcher eq = {by, e->value, STORE_EQ};

		if (!*e->value)
			continue;
		nvalues++;
		if (shown == room)
			continue;
		shown++;
		other[nother++] = (struct store_matcher){by, e->value, STORE_NE};
		err = gb_read__add(&r, rep, &eq, 1, e->value);
	}
	if (!err && nvalues > shown) {
		other[nother++] = (struct store_matcher){by, "", STORE_NE};
		err = gb_read__add(&r, rep, other, nother, "(other)");
	}
	HASH_FIND_STR(g.groups, "", e);
	if (!err && e) {
		struct store_matcher none = {by, "", STORE_EQ};

		err = gb_read__add(&r, rep, &none, 1, "(none)");
	}
	if (err)
		goto cleanup;
	tl = timeline_json(s, qs, &err);
	if (!tl) {
		if (err != -ENOMEM)
			err = reply_store_error(rep, qs->call, "read the timeline", err);
		goto cleanup;
	}
	meta = json_pack("{sssssssIsssIsIsssIsssI}", "format", "single", "name", type ? type : "",
			 "units", r.unit[0] ? r.unit : "samples", "sampleRate",
			 (json_int_t)sample_rate(r.period, r.unit), "spyName", "sonde", "startTime",
			 (json_int_t)(qs->from / MS_PER_SEC), "endTime",
			 (json_int_t)(qs->until / MS_PER_SEC), "appName", app ? app : "",
			 "maxNodes", (json_int_t)max_nodes, "groupBy", by, "groupValues",
			 (json_int_t)nvalues);
	if (!meta || json_object_set_new(meta, "query", json_string_lossy(qs->text))) {
		err = -ENOMEM;
		goto cleanup;
	}
	err |= sbuf__puts(&b, "{\"version\":1,\"flamebearer\":");
	err |= flame__write(r.f, max_nodes, &b);
	err |= sbuf__puts(&b, ",\"metadata\":");
	err |= sbuf__json(&b, meta);
	err |= sbuf__puts(&b, ",\"timeline\":");
	err |= sbuf__json(&b, tl);
	err |= sbuf__puts(&b, "}");
	if (err) {
		err = -ENOMEM;
		goto cleanup;
	}
	err = reply_sbuf(rep, NULL, &b);
	if (!err)
		err = HTTP_ANSWERED;
cleanup:
	sbuf__free(&b);
	json_decref(meta);
	json_decref(tl);
	flame__free(r.f);
	free(r.m);
	free(other);
	HTABLE_CLEAR(hh, g.groups, v, free(v->value), free(v));
	return err;
}

/* ---- the GPU timeline ---- */

/* A lane of the timeline: one device and stream of one process. */
struct tl_lane {
	int32_t device;
	uint32_t stream;
	json_t *spans; /* borrowed from the lane's json */
	json_t *json;
};

struct tl_proc {
	json_t *json; /* {"labels", "lanes"} */
	struct tl_lane *lanes;
	size_t nlanes, cap;
};

struct tl_ctx {
	json_t *index; /* a process's labels (key) -> its index in procs */
	struct tl_proc *procs;
	size_t nprocs, cap, nspans, text;
	int64_t base_ns;
	bool cut; /* past SERVER_TIMELINE_MAX_TEXT */
	int err;
};

/* The process of labels: found by their "name=value," key, or added. */
static struct tl_proc *tl_proc(struct tl_ctx *c, const struct store_label *labels, size_t n)
{
	struct sbuf key = {0};
	struct tl_proc *p = NULL;
	json_t *jl, *idx;
	size_t i;

	for (i = 0; !c->err && i < n; i++)
		c->err = sbuf__printf(&key, "%s=%s,", labels[i].name, labels[i].value);
	if (c->err || sbuf__puts(&key, "")) {
		c->err = c->err ? c->err : -ENOMEM;
		goto out;
	}
	idx = json_object_get(c->index, key.buf);
	if (idx) {
		p = &c->procs[json_integer_value(idx)];
		goto out;
	}
	c->err = array_grow((void **)&c->procs, &c->cap, c->nprocs + 1, sizeof(*c->procs));
	if (c->err)
		goto out;
	jl = json_object();
	p = &c->procs[c->nprocs];
	memset(p, 0, sizeof(*p));
	p->json = json_pack("{so}", "labels", jl);
	for (i = 0; jl && i < n; i++)
		if (strcmp(labels[i].name, SERVER_PROJECT_LABEL) &&
		    json_object_set_new(jl, labels[i].name, json_string_lossy(labels[i].value)))
			c->err = -ENOMEM;
	if (!p->json || c->err ||
	    json_object_set_new(c->index, key.buf, json_integer((json_int_t)c->nprocs))) {
		json_decref(p->json);
		c->err = -ENOMEM;
		p = NULL;
		goto out;
	}
	c->nprocs++;
out:
	sbuf__free(&key);
	return p;
}

static struct tl_lane *tl_lane(struct tl_ctx *c, struct tl_proc *p, int32_t device, uint32_t stream)
{
	struct tl_lane *l;

	for (size_t i = 0; i < p->nlanes; i++)
		if (p->lanes[i].device == device && p->lanes[i].stream == stream)
			return &p->lanes[i];
	c->err = array_grow((void **)&p->lanes, &p->cap, p->nlanes + 1, sizeof(*p->lanes));
	if (c->err)
		return NULL;
	l = &p->lanes[p->nlanes];
	l->device = device;
	l->stream = stream;
	l->spans = json_array();
	l->json = json_pack("{sisIso}", "device", (int)device, "stream", (json_int_t)stream,
			    "spans", l->spans);
	if (!l->json) {
		c->err = -ENOMEM;
		return NULL;
	}
	p->nlanes++;
	return l;
}

static void timeline_cb(void *ctx, const struct store_label *labels, size_t nlabels,
			const struct store_span *sp)
{
	struct tl_ctx *c = ctx;
	size_t text = strlen(sp->name) + strlen(sp->from) + strlen(sp->kind);
	struct tl_proc *p;
	struct tl_lane *l;
	json_t *o;

	if (c->err || c->cut)
		return;
	if (c->text + text > SERVER_TIMELINE_MAX_TEXT) {
		c->cut = true;
		return;
	}
	c->text += text;
	p = tl_proc(c, labels, nlabels);
	l = p ? tl_lane(c, p, sp->device, sp->stream) : NULL;
	if (!l)
		return;
	o = json_pack("{sIsIsIsIsososIsI}", "start_ns", (json_int_t)sp->start_ns, "end_ns",
		      (json_int_t)sp->end_ns, "offset_ns", (json_int_t)(sp->start_ns - c->base_ns),
		      "dur_ns", (json_int_t)(sp->end_ns - sp->start_ns), "name",
		      json_string_lossy(sp->name), "kind", json_string_lossy(sp->kind), "tid",
		      (json_int_t)sp->tid, "correlation", (json_int_t)sp->correlation);
	if (o && *sp->from && json_object_set_new(o, "from", json_string_lossy(sp->from)))
		c->err = -ENOMEM;
	if (o && sp->bytes &&
	    json_object_set_new(o, "bytes", json_integer((json_int_t)(sp->bytes & INT64_MAX))))
		c->err = -ENOMEM;
	if (!o || json_array_append_new(l->spans, o))
		c->err = -ENOMEM;
	c->nspans++;
}

static int cmp_lane(const void *a, const void *b)
{
	const struct tl_lane *x = a, *y = b;

	/* The devices' lanes in order, then the host's waits (device -1). */
	if (x->device != y->device)
		return (uint32_t)x->device < (uint32_t)y->device ? -1 : 1;
	return x->stream < y->stream ? -1 : x->stream > y->stream;
}

static void tl_ctx__free(struct tl_ctx *c)
{
	for (size_t i = 0; i < c->nprocs; i++) {
		for (size_t k = 0; k < c->procs[i].nlanes; k++)
			json_decref(c->procs[i].lanes[k].json);
		free(c->procs[i].lanes);
		json_decref(c->procs[i].json);
	}
	free(c->procs);
	json_decref(c->index);
}

int api_gpu_timeline(struct server *s, const struct server_call *call,
		     const struct http_request *req, struct http_reply *rep)
{
	const char *lim = http_request__query(req, "limit");
	long long limit = SERVER_TIMELINE_DEFAULT_LIMIT;
	struct tl_ctx c = {0};
	json_t *j = NULL, *procs;
	bool truncated = false;
	struct qsel qs;
	int err;

	err = qsel__parse(s, call, req, rep, &api_args, &qs);
	if (err)
		goto cleanup;
	if (lim && parse_limit(lim, SERVER_TIMELINE_MAX_LIMIT, &limit)) {
		err = reply_error(rep, 400, "limit '%.40s' must be an integer from 1 to %d", lim,
				  SERVER_TIMELINE_MAX_LIMIT);
		goto cleanup;
	}
	c.index = json_object();
	c.base_ns = qs.from * NS_PER_MS;
	if (!c.index) {
		err = -ENOMEM;
		goto cleanup;
	}
	err = store__spans(s->store, &qs.q, (size_t)limit, timeline_cb, &c, &truncated);
	if (err) {
		err = reply_store_error(rep, call, "read the GPU timeline", err);
		goto cleanup;
	}
	if (c.err) {
		err = c.err;
		goto cleanup;
	}
	procs = json_array();
	j = json_pack("{sIsIsIsIsbsIso}", "from_ms", (json_int_t)qs.from, "until_ms",
		      (json_int_t)qs.until, "base_ns", (json_int_t)c.base_ns, "limit",
		      (json_int_t)limit, "truncated", truncated || c.cut, "spans",
		      (json_int_t)c.nspans, "processes", procs);
	for (size_t i = 0; j && i < c.nprocs; i++) {
		struct tl_proc *p = &c.procs[i];
		json_t *lanes = json_array();

		qsort(p->lanes, p->nlanes, sizeof(*p->lanes), cmp_lane);
		for (size_t k = 0; lanes && k < p->nlanes; k++)
			if (json_array_append(lanes, p->lanes[k].json))
				err = -ENOMEM;
		if (!lanes || json_object_set_new(p->json, "lanes", lanes) ||
		    json_array_append(procs, p->json))
			err = -ENOMEM;
	}
	if (!j || err) {
		err = -ENOMEM;
		goto cleanup;
	}
	err = reply_json(rep, j);
	j = NULL;
cleanup:
	json_decref(j);
	tl_ctx__free(&c);
	qsel__free(&qs);
	return err;
}
