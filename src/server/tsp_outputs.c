/* tsp_outputs.c: the outputs of a Trace Server Protocol experiment (tsp.h),
 * each built from the query API's answers for the experiment's traces:
 *
 *   sonde.top.TYPE    DATA_TREE     top functions of a profile type per
 *                                   trace, self and total (/api/v1/top)
 *   sonde.rate.TYPE   TREE_TIME_XY  the type's value per second, per trace
 *                                   and per process (/api/v1/timeseries)
 *   sonde.gpu_memory  TREE_TIME_XY  GPU memory per process and GPU
 *                                   (/api/v1/points gpu_memory_used_bytes)
 *   sonde.states      TIME_GRAPH    each process's state over time: the
 *                                   largest of its process_time_share
 *                                   points, else of its on-CPU, off-CPU
 *                                   and GPU-wait time (cpu, offcpu and
 *                                   gpu_wait profiles)
 *
 * A trace's processes are the (node, pid) of its profile series, the
 * busiest TSP_MAX_PROCS; metric points carry no service, so a trace's
 * points are those of its processes. Entry ids are hashes of what the
 * entry is, so a tree and the series asked of it later agree without
 * state. */
#include "server/tsp_internal.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/json.h"
#include "common/sat.h"
#include "common/xalloc.h"

#define OUT_TOP "sonde.top."
#define OUT_RATE "sonde.rate."
#define OUT_GPU "sonde.gpu_memory"
#define OUT_STATES "sonde.states"
#define GPU_MEMORY_POINT "gpu_memory_used_bytes"
#define SHARE_POINT "process_time_share"
/* Steps of a series when the client names no count. */
#define DEFAULT_STEPS 500
/* A GPU memory point holds until the next, for at most this long (or a
 * step) -- agents send one a second. */
#define GPU_HOLD_MS 2000
/* Probes for points look at the end of the range first. */
#define PROBE_MS (3600LL * MS_PER_SEC)

enum out_kind { OUT_KIND_TOP, OUT_KIND_RATE, OUT_KIND_GPU, OUT_KIND_STATES };

/* The states of the time graph, in the order ties go (the agent's, then
 * the profiles' off_cpu), with their colours. */
static const struct {
	const char *name, *color;
} states[] = {
	{"gpu_wait", "#d62728"}, {"collective", "#9467bd"}, {"dataloader_wait", "#ff7f0e"},
	{"on_cpu", "#2ca02c"},	 {"lock", "#8c564b"},	    {"io", "#1f77b4"},
	{"sleep", "#bcbd22"},	 {"off_cpu", "#7f7f7f"},
};
#define NSTATES (sizeof(states) / sizeof(states[0]))
#define STATE_ON_CPU 3
#define STATE_OFF_CPU 7
#define STATE_GPU_WAIT 0

/* A process of a trace. */
struct proc {
	char *node, *pid, *comm;
	int64_t total, from_ms, until_ms;
};

struct procs {
	struct proc *p;
	size_t n;
	bool multi_node;
	int64_t total; /* of the whole trace */
};

static void procs_free(struct procs *ps)
{
	for (size_t i = 0; i < ps->n; i++) {
		free(ps->p[i].node);
		free(ps->p[i].pid);
		free(ps->p[i].comm);
	}
	free(ps->p);
	memset(ps, 0, sizeof(*ps));
}

static int proc_cmp(const void *a, const void *b)
{
	const struct proc *x = a, *y = b;

	if (x->total != y->total)
		return x->total > y->total ? -1 : 1;
	return strcmp(x->pid, y->pid);
}

/* The query string of a selection: query, the type (when given), range. */
static void qs_sel(struct tsp_call *c, struct sbuf *q, const char *sel, const char *type,
		   const struct tsp_range *r)
{
	tsp_qs(c, q, "query", sel);
	if (type)
		tsp_qs(c, q, "type", type);
	tsp_qs_int(c, q, "from", r->from_ms);
	tsp_qs_int(c, q, "until", r->until_ms);
}

static json_t *get_totals(struct tsp_call *c, const char *by, const char *sel, const char *type,
			  const struct tsp_range *r)
{
	struct sbuf q = {0};
	json_t *a;

	tsp_qs(c, &q, "by", by);
	qs_sel(c, &q, sel, type, r);
	a = tsp_call__get(c, "/api/v1/totals", q.buf);
	sbuf__free(&q);
	return a;
}

/* The selector of a process of a trace (sel NULL: of its points). */
static char *proc_selector(const char *sel, const struct proc *p)
{
	char *s = tsp_selector_with(sel ? sel : "", "node", p->node, "pid", p->pid, NULL);

	return s ? s : xstrdup("{}");
}

/* The processes of trace tr (of a type, or all) in r, the busiest first,
 * named by their comm when names; -1 with the call's error set. */
static int trace_procs(struct tsp_call *c, const struct tsp_trace *tr, const char *type,
		       const struct tsp_range *r, bool names, struct procs *ps)
{
	json_t *nodes = get_totals(c, "node", tr->selector, type, r), *g;
	size_t i, cap = 0, nnodes;

	memset(ps, 0, sizeof(*ps));
	if (!nodes)
		return -1;
	nnodes = json_array_size(json_object_get(nodes, "groups"));
	ps->multi_node = nnodes > 1;
	json_array_foreach(json_object_get(nodes, "groups"), i, g)
	{
		const char *node = json_string_value(json_object_get(g, "value"));
		char *sel;
		json_t *pids, *h;
		size_t k;

		ps->total = sat_add_i64(ps->total, json_integer_value(json_object_get(g, "total")));
		if (!node || i >= TSP_MAX_NODES)
			continue;
		sel = nnodes > 1 ? tsp_selector_with(tr->selector, "node", node, NULL)
				 : xstrdup(tr->selector);
		pids = sel ? get_totals(c, "pid", sel, type, r) : NULL;
		free(sel);
		if (!pids)
			break;
		json_array_foreach(json_object_get(pids, "groups"), k, h)
		{
			const char *pid = json_string_value(json_object_get(h, "value"));
			struct proc *p;

			if (!pid || !*pid)
				continue;
			xgrow((void **)&ps->p, &cap, ps->n + 1, sizeof(*ps->p));
			p = &ps->p[ps->n++];
			memset(p, 0, sizeof(*p));
			p->node = xstrdup(node);
			p->pid = xstrdup(pid);
			p->total = json_integer_value(json_object_get(h, "total"));
			p->from_ms = json_integer_value(json_object_get(h, "from_ms"));
			p->until_ms = json_integer_value(json_object_get(h, "until_ms"));
		}
		json_decref(pids);
	}
	json_decref(nodes);
	if (c->status)
		return -1;
	if (ps->n)
		qsort(ps->p, ps->n, sizeof(*ps->p), proc_cmp);
	if (ps->n > TSP_MAX_PROCS) {
		for (i = TSP_MAX_PROCS; i < ps->n; i++) {
			free(ps->p[i].node);
			free(ps->p[i].pid);
		}
		ps->n = TSP_MAX_PROCS;
	}
	for (i = 0; names && i < ps->n && !c->status; i++) {
		char *sel = proc_selector(tr->selector, &ps->p[i]);
		struct sbuf q = {0};
		json_t *a;

		tsp_qs(c, &q, "name", "comm");
		qs_sel(c, &q, sel, type, r);
		a = tsp_call__get(c, "/api/v1/label/values", q.buf);
		sbuf__free(&q);
		free(sel);
		ps->p[i].comm = xstrdup(
			a ? json_string_value(json_array_get(json_object_get(a, "values"), 0)) ?: ""
			  : "");
		json_decref(a);
	}
	return c->status ? -1 : 0;
}

static char *proc_name(const struct procs *ps, const struct proc *p)
{
	char *s;

	if (asprintf(&s, "%s%spid %s%s%s%s", p->comm && *p->comm ? p->comm : "",
		     p->comm && *p->comm ? " (" : "(", p->pid, ")", ps->multi_node ? " on " : "",
		     ps->multi_node ? p->node : "") < 0)
		return xstrdup(p->pid);
	return s;
}

static int64_t proc_id(const struct tsp_trace *tr, const char *out, const struct proc *p,
		       const char *more)
{
	char key[512];

	snprintf(key, sizeof(key), "%s\n%s\n%s", p->node, p->pid, more ? more : "");
	return tsp_id(tr->uuid, out, key);
}

/* Whether id is among the items asked for (all when none were named and
 * dflt). */
static bool requested(const json_t *items, int64_t id, bool dflt)
{
	size_t i;
	json_t *v;

	if (!items)
		return dflt;
	json_array_foreach(items, i, v)
	{
		if ((json_is_integer(v) && json_integer_value(v) == id) ||
		    (json_is_real(v) && json_real_value(v) == (double)id) ||
		    (json_is_string(v) && strtoll(json_string_value(v), NULL, 10) == id))
			return true;
	}
	return false;
}

static json_t *entry(int64_t id, int64_t parent, json_t *labels, bool has_data)
{
	return json_pack("{s:I,s:I,s:o,s:b}", "id", (json_int_t)id, "parentId", (json_int_t)parent,
			 "labels", labels, "hasData", has_data);
}

static json_t *header(const char *name, const char *tooltip, const char *type)
{
	json_t *h = json_pack("{s:s,s:s}", "name", name, "tooltip", tooltip);

	if (type)
		json_object_set_new(h, "dataType", json_string(type));
	return h;
}

static json_t *tree_model(json_t *headers, json_t *entries)
{
	return json_pack("{s:o,s:o,s:i}", "headers", headers, "entries", entries, "autoExpandLevel",
			 -1);
}

static json_t *int_label(int64_t v)
{
	char buf[32];

	snprintf(buf, sizeof(buf), "%" PRId64, v);
	return json_string(buf);
}

/* ---- steps of a range ---- */

struct steps {
	int64_t from_ms, step_ms;
	size_t n;
};

static void steps_of(const struct tsp_query *q, int64_t min_step, struct steps *s)
{
	int64_t range = q->range.until_ms - q->range.from_ms,
		nb = q->range.nb_times > 0 ? q->range.nb_times : DEFAULT_STEPS;

	if (nb > TSP_MAX_STEPS)
		nb = TSP_MAX_STEPS;
	s->from_ms = q->range.from_ms;
	s->step_ms = (range + nb - 1) / nb;
	if (s->step_ms < min_step)
		s->step_ms = min_step;
	s->n = (size_t)((range + s->step_ms - 1) / s->step_ms);
}

static json_t *x_values(const struct steps *s)
{
	json_t *x = json_array();

	for (size_t i = 0; i < s->n; i++)
		json_array_append_new(
			x, json_integer((s->from_ms + (int64_t)i * s->step_ms) * NS_PER_MS));
	return x;
}

static json_t *series_json(int64_t id, const char *name, const struct steps *s, json_t *y,
			   const char *ylabel, const char *yunit)
{
	return json_pack("{s:I,s:s,s:o,s:o,s:{s:s,s:s,s:s},s:{s:s,s:s,s:s},s:{s:s,s:{s:s}}}",
			 "seriesId", (json_int_t)id, "seriesName", name, "xValues", x_values(s),
			 "yValues", y, "xValuesDescription", "label", "time", "unit", "ns",
			 "dataType", "TIMESTAMP", "yValuesDescription", "label", ylabel, "unit",
			 yunit, "dataType", "NUMBER", "style", "parentKey", "", "values",
			 "series-type", "line");
}

/* ---- which outputs ---- */

static bool has_type(const struct tsp_exp_view *e, const char *type)
{
	size_t i, k;
	json_t *types, *t;

	json_array_foreach(e->types, i, types)
	{
		json_array_foreach(types, k, t)
		{
			if (!strcmp(json_string_value(t), type))
				return true;
		}
	}
	return false;
}

/* Type names that are safe in a URL path (an output id is one). */
static bool type_ok(const char *t)
{
	if (!*t || strlen(t) > 64)
		return false;
	for (; *t; t++)
		if (!((*t >= 'a' && *t <= 'z') || (*t >= 'A' && *t <= 'Z') ||
		      (*t >= '0' && *t <= '9') || *t == '_' || *t == '-' || *t == '.'))
			return false;
	return true;
}

/* Whether any process of the experiment has points of name in
 * [from_ms, until_ms); -1 with the call's error set (a 400 of a range of
 * too many points is a yes). */
static int has_points(struct tsp_call *c, const struct tsp_exp_view *e, const char *name,
		      int64_t from_ms, int64_t until_ms)
{
	struct tsp_range r = {.from_ms = from_ms, .until_ms = until_ms};
	int found = 0;

	for (size_t i = 0; i < e->ntraces && !found && !c->status; i++) {
		struct procs ps;

		if (trace_procs(c, &e->traces[i], NULL, &r, false, &ps))
			break;
		for (size_t k = 0; k < ps.n && !found; k++) {
			struct sbuf q = {0};
			char *sel = proc_selector(NULL, &ps.p[k]);
			json_t *a;

			tsp_qs(c, &q, "name", name);
			qs_sel(c, &q, sel, NULL, &r);
			a = tsp_call__get(c, "/api/v1/points", q.buf);
			if (!a && c->status == 400) {
				c->status = 0;
				found = 1;
			}
			found = found || json_array_size(json_object_get(a, "series")) > 0;
			json_decref(a);
			sbuf__free(&q);
			free(sel);
		}
		procs_free(&ps);
	}
	return c->status ? -1 : found;
}

static int has_points_probed(struct tsp_call *c, const struct tsp_exp_view *e, const char *name)
{
	int64_t from = e->start_ns / NS_PER_MS, until = e->end_ns / NS_PER_MS + 1;
	int rc;

	if (!e->end_ns)
		return 0;
	rc = has_points(c, e, name, until - PROBE_MS > from ? until - PROBE_MS : from, until);
	if (rc == 0 && until - PROBE_MS > from)
		rc = has_points(c, e, name, from, until);
	return rc;
}

static json_t *descriptor(const char *id, const char *name, const char *desc, const char *type)
{
	return json_pack("{s:s,s:s,s:s,s:s,s:b}", "id", id, "name", name, "description", desc,
			 "type", type, "final", 1);
}

json_t *tsp_outputs__list(struct tsp_call *c, const struct tsp_exp_view *e)
{
	json_t *out = json_array(), *seen = json_object(), *types, *t;
	size_t i, k;
	int gpu, shares;

	json_array_foreach(e->types, i, types)
	{
		json_array_foreach(types, k, t)
		{
			const char *type = json_string_value(t);
			char id[128], name[160], desc[256];

			if (!type_ok(type) || json_object_get(seen, type))
				continue;
			json_object_set_new(seen, type, json_true());
			snprintf(id, sizeof(id), OUT_TOP "%s", type);
			snprintf(name, sizeof(name), "Top functions (%s)", type);
			snprintf(desc, sizeof(desc),
				 "The functions of the %s profiles, by self and total, per trace "
				 "(/api/v1/top)",
				 type);
			json_array_append_new(out, descriptor(id, name, desc, "DATA_TREE"));
			snprintf(id, sizeof(id), OUT_RATE "%s", type);
			snprintf(name, sizeof(name), "%s per second", type);
			snprintf(desc, sizeof(desc),
				 "The %s profiles' value per second, per trace and process "
				 "(/api/v1/timeseries)",
				 type);
			json_array_append_new(out, descriptor(id, name, desc, "TREE_TIME_XY"));
		}
	}
	json_decref(seen);
	gpu = has_points_probed(c, e, GPU_MEMORY_POINT);
	if (gpu > 0)
		json_array_append_new(out, descriptor(OUT_GPU, "GPU memory",
						      "GPU memory used per process and GPU "
						      "(gpu_memory_used_bytes points)",
						      "TREE_TIME_XY"));
	shares = gpu < 0 ? -1 : has_points_probed(c, e, SHARE_POINT);
	if (shares > 0 || (!shares && (has_type(e, "offcpu") || has_type(e, "gpu_wait"))))
		json_array_append_new(
			out, descriptor(OUT_STATES, "Process states",
					"Each process's state over time -- on-CPU, off-CPU, GPU "
					"wait, ... (process_time_share points, else the cpu, "
					"offcpu and gpu_wait profiles)",
					"TIME_GRAPH"));
	if (c->status) {
		json_decref(out);
		return NULL;
	}
	return out;
}

json_t *tsp_outputs__get(struct tsp_call *c, const struct tsp_exp_view *e, const char *id)
{
	json_t *all = tsp_outputs__list(c, e), *d, *found = NULL;
	size_t i;

	if (!all)
		return NULL;
	json_array_foreach(all, i, d)
	{
		if (!strcmp(json_string_value(json_object_get(d, "id")), id))
			found = json_incref(d);
	}
	json_decref(all);
	if (!found)
		tsp_call__fail(c, 404, "no output '%.80s' in experiment %s", id, e->uuid);
	return found;
}

json_t *tsp_outputs__styles(void)
{
	json_t *styles = json_object();

	for (size_t i = 0; i < NSTATES; i++)
		json_object_set_new(styles, states[i].name,
				    json_pack("{s:s,s:{s:s,s:s,s:f}}", "parentKey", "", "values",
					      "style-name", states[i].name, "background-color",
					      states[i].color, "height", 1.0));
	return json_pack("{s:o}", "styles", styles);
}

/* ---- the data tree: top functions ---- */

static json_t *top_tree(struct tsp_call *c, const struct tsp_exp_view *e, const char *id,
			const char *type, const struct tsp_query *q)
{
	json_t *entries = json_array(), *ids = json_object(), *headers;
	char unit[64] = "";

	for (size_t i = 0; i < e->ntraces && !c->status; i++) {
		const struct tsp_trace *tr = &e->traces[i];
		int64_t root = tsp_id(tr->uuid, id, "");
		struct sbuf qs = {0};
		json_t *a, *f;
		size_t k;

		qs_sel(c, &qs, tr->selector, type, &q->range);
		tsp_qs_int(c, &qs, "limit", TSP_TOP_LIMIT);
		a = tsp_call__get(c, "/api/v1/top", qs.buf);
		sbuf__free(&qs);
		if (!a)
			break;
		if (!unit[0])
			snprintf(unit, sizeof(unit), "%s",
				 json_string_value(json_object_get(a, "unit")) ?: "");
		json_array_append_new(
			entries,
			entry(root, -1,
			      json_pack("[s,s,o,s,s]", tr->name, "",
					int_label(json_integer_value(json_object_get(a, "total"))),
					"", ""),
			      true));
		json_array_foreach(json_object_get(a, "functions"), k, f)
		{
			const char *name = json_string_value(json_object_get(f, "name")) ?: "",
				   *module = json_string_value(json_object_get(f, "module")) ?: "",
				   *file = json_string_value(json_object_get(f, "file"));
			const json_t *line = json_object_get(f, "line");
			char key[64], src[1100];
			int64_t fid;
			int salt = 0;

			/* An id per function, the same in every answer: a hash
			 * of its name and module (salted past a collision). */
			do {
				char more[16];

				snprintf(more, sizeof(more), "%d", salt++);
				fid = tsp_id(tr->uuid, id, name) ^
				      (tsp_id(module, more, "") & 0xffffffffULL);
				snprintf(key, sizeof(key), "%" PRId64, fid);
			} while (json_object_get(ids, key));
			json_object_set_new(ids, key, json_true());
			if (file && json_is_integer(line))
				snprintf(src, sizeof(src), "%.1000s:%" JSON_INTEGER_FORMAT, file,
					 json_integer_value(line));
			else
				snprintf(src, sizeof(src), "%.1000s", file ? file : "");
			json_array_append_new(
				entries, entry(fid, root,
					       json_pack("[o,o,o,o,s]", json_string_lossy(name),
							 int_label(json_integer_value(
								 json_object_get(f, "self"))),
							 int_label(json_integer_value(
								 json_object_get(f, "total"))),
							 json_string_lossy(module), src),
					       true));
		}
		json_decref(a);
	}
	json_decref(ids);
	if (c->status) {
		json_decref(entries);
		return NULL;
	}
	headers = json_pack("[o,o,o,o,o]", header("Function", "Function, or the trace", NULL),
			    header("Self", unit[0] ? unit : "samples", "NUMBER"),
			    header("Total", unit[0] ? unit : "samples", "NUMBER"),
			    header("Module", "Where the function is", NULL),
			    header("Source", "File and line of the function", NULL));
	return tree_model(headers, entries);
}

/* ---- XY: a type per second ---- */

/* The timeseries of sel (and type) in steps s, per second; its unit. */
static json_t *rate_values(struct tsp_call *c, const char *sel, const char *type,
			   const struct tsp_query *q, const struct steps *s, char *unit,
			   size_t unitlen)
{
	struct sbuf qs = {0};
	json_t *a, *y, *v;
	size_t i;

	qs_sel(c, &qs, sel, type, &q->range);
	tsp_qs_int(c, &qs, "step", s->step_ms);
	a = tsp_call__get(c, "/api/v1/timeseries", qs.buf);
	sbuf__free(&qs);
	if (!a)
		return NULL;
	snprintf(unit, unitlen, "%s/s", json_string_value(json_object_get(a, "unit")) ?: "");
	y = json_array();
	json_array_foreach(json_object_get(a, "values"), i, v)
	{
		if (i >= s->n)
			break;
		json_array_append_new(
			y, tsp_number(json_number_value(v) * MS_PER_SEC / (double)s->step_ms));
	}
	while (json_array_size(y) < s->n)
		json_array_append_new(y, json_integer(0));
	json_decref(a);
	return y;
}

static json_t *rate_output(struct tsp_call *c, const struct tsp_exp_view *e, const char *id,
			   const char *type, const char *what, const struct tsp_query *q)
{
	bool tree = !strcmp(what, "tree");
	json_t *entries = json_array(), *series = json_array();
	char title[128];
	struct steps s;

	steps_of(q, 1, &s);
	for (size_t i = 0; i < e->ntraces && !c->status; i++) {
		const struct tsp_trace *tr = &e->traces[i];
		int64_t root = tsp_id(tr->uuid, id, "");
		struct procs ps;
		char unit[80];

		if (trace_procs(c, tr, type, &q->range, true, &ps))
			break;
		if (tree) {
			json_t *en = entry(root, -1,
					   json_pack("[s,o]", tr->name, int_label(ps.total)), true);

			json_object_set_new(en, "isDefault", json_true());
			json_array_append_new(entries, en);
		} else if (requested(q->items, root, true)) {
			json_t *y = rate_values(c, tr->selector, type, q, &s, unit, sizeof(unit));

			if (y)
				json_array_append_new(
					series, series_json(root, tr->name, &s, y, type, unit));
		}
		for (size_t k = 0; k < ps.n && !c->status; k++) {
			int64_t pid = proc_id(tr, id, &ps.p[k], NULL);
			char *name = proc_name(&ps, &ps.p[k]);

			if (tree) {
				json_array_append_new(
					entries,
					entry(pid, root,
					      json_pack("[s,o]", name, int_label(ps.p[k].total)),
					      true));
			} else if (requested(q->items, pid, false)) {
				char *sel = proc_selector(tr->selector, &ps.p[k]);
				json_t *y = rate_values(c, sel, type, q, &s, unit, sizeof(unit));

				if (y)
					json_array_append_new(
						series, series_json(pid, name, &s, y, type, unit));
				free(sel);
			}
			free(name);
		}
		procs_free(&ps);
	}
	if (c->status) {
		json_decref(entries);
		json_decref(series);
		return NULL;
	}
	if (tree) {
		json_decref(series);
		return tree_model(json_pack("[o,o]", header("Name", "A trace, or a process", NULL),
					    header("Total", "Over the range", "NUMBER")),
				  entries);
	}
	json_decref(entries);
	snprintf(title, sizeof(title), "%s per second", type);
	return json_pack("{s:s,s:o}", "title", title, "series", series);
}

/* ---- XY: GPU memory ---- */

/* The points of name of the processes ps of a trace in r: an array of the
 * points API's series, only those of the processes. */
static json_t *procs_points(struct tsp_call *c, const struct procs *ps, const char *name,
			    const struct tsp_range *r, const char *pid_only)
{
	json_t *all = json_array();

	for (size_t k = 0; k < ps->n && !c->status; k++) {
		const struct proc *p = &ps->p[k];
		struct sbuf q = {0};
		char *sel;
		json_t *a, *se;
		size_t i;

		if (pid_only && strcmp(pid_only, p->pid))
			continue;
		sel = proc_selector(NULL, p);
		tsp_qs(c, &q, "name", name);
		qs_sel(c, &q, sel, NULL, r);
		a = tsp_call__get(c, "/api/v1/points", q.buf);
		sbuf__free(&q);
		free(sel);
		json_array_foreach(json_object_get(a, "series"), i, se)
		{
			json_object_set_new(se, "proc", json_integer((json_int_t)k));
			json_array_append(all, se);
		}
		json_decref(a);
	}
	if (c->status) {
		json_decref(all);
		return NULL;
	}
	return all;
}

/* The value of a gauge's points in each step: the last at or before the
 * step's end, held for a step or GPU_HOLD_MS at most; 0 without one. */
static void resample(const json_t *points, const struct steps *s, double *out)
{
	int64_t hold = s->step_ms > GPU_HOLD_MS ? s->step_ms : GPU_HOLD_MS;
	size_t np = json_array_size(points), j = 0;
	double last = 0;
	int64_t last_ts = INT64_MIN;

	for (size_t i = 0; i < s->n; i++) {
		int64_t end = s->from_ms + (int64_t)(i + 1) * s->step_ms;

		for (; j < np; j++) {
			const json_t *pt = json_array_get(points, j);
			int64_t ts = json_integer_value(json_array_get(pt, 0));

			if (ts >= end)
				break;
			last = json_number_value(json_array_get(pt, 1));
			last_ts = ts;
		}
		out[i] += last_ts != INT64_MIN && end - last_ts <= hold ? last : 0;
	}
}

static json_t *gpu_output(struct tsp_call *c, const struct tsp_exp_view *e, const char *id,
			  const char *what, const struct tsp_query *q)
{
	bool tree = !strcmp(what, "tree");
	json_t *entries = json_array(), *series = json_array();
	struct steps s;

	steps_of(q, 1, &s);
	for (size_t i = 0; i < e->ntraces && !c->status; i++) {
		const struct tsp_trace *tr = &e->traces[i];
		int64_t root = tsp_id(tr->uuid, id, "");
		double *sum = xcalloc(s.n ? s.n : 1, sizeof(*sum));
		json_t *pts = NULL, *se;
		struct procs ps;
		size_t k;

		if (trace_procs(c, tr, NULL, &q->range, true, &ps) ||
		    !(pts = procs_points(c, &ps, GPU_MEMORY_POINT, &q->range, NULL))) {
			free(sum);
			procs_free(&ps);
			break;
		}
		if (tree)
			json_array_append_new(
				entries, entry(root, -1, json_pack("[s,s]", tr->name, ""), true));
		json_array_foreach(pts, k, se)
		{
			const struct proc *p =
				&ps.p[json_integer_value(json_object_get(se, "proc"))];
			const char *gpu = json_string_value(
				json_object_get(json_object_get(se, "labels"), "gpu_id"));
			const json_t *points = json_object_get(se, "points");
			int64_t sid = proc_id(tr, id, p, gpu ? gpu : "");
			char *pname = proc_name(&ps, p), *name;
			double *v = xcalloc(s.n ? s.n : 1, sizeof(*v)), max = 0;
			size_t m;
			json_t *pt;

			if (asprintf(&name, "%s GPU %s", pname, gpu ? gpu : "?") < 0)
				name = xstrdup(pname);
			resample(points, &s, v);
			for (m = 0; m < s.n; m++)
				sum[m] += v[m];
			json_array_foreach(points, m, pt)
			{
				double x = json_number_value(json_array_get(pt, 1));

				max = x > max ? x : max;
			}
			if (tree) {
				char label[64];

				snprintf(label, sizeof(label), "%.0f", max);
				json_array_append_new(
					entries,
					entry(sid, root, json_pack("[s,s]", name, label), true));
			} else if (requested(q->items, sid, true)) {
				json_t *y = json_array();

				for (m = 0; m < s.n; m++)
					json_array_append_new(y, tsp_number(v[m]));
				json_array_append_new(series, series_json(sid, name, &s, y,
									  "GPU memory", "bytes"));
			}
			free(v);
			free(name);
			free(pname);
		}
		if (!tree && requested(q->items, root, false)) {
			json_t *y = json_array();

			for (size_t m = 0; m < s.n; m++)
				json_array_append_new(y, tsp_number(sum[m]));
			json_array_append_new(
				series, series_json(root, tr->name, &s, y, "GPU memory", "bytes"));
		}
		free(sum);
		json_decref(pts);
		procs_free(&ps);
	}
	if (c->status) {
		json_decref(entries);
		json_decref(series);
		return NULL;
	}
	if (tree) {
		json_decref(series);
		return tree_model(
			json_pack("[o,o]", header("Name", "A process and GPU", NULL),
				  header("Max bytes", "The most it held in the range", "NUMBER")),
			entries);
	}
	json_decref(entries);
	return json_pack("{s:s,s:o}", "title", "GPU memory", "series", series);
}

/* ---- the time graph: processes' states ---- */

static int state_index(const char *name)
{
	for (size_t i = 0; name && i < NSTATES; i++)
		if (!strcmp(states[i].name, name))
			return (int)i;
	return -1;
}

/* acc[step * NSTATES + state] from a process's share points. */
static bool shares_acc(const json_t *pts, const struct steps *s, double *acc)
{
	bool any = false;
	size_t i, k;
	json_t *se, *pt;

	json_array_foreach(pts, i, se)
	{
		int st = state_index(
			json_string_value(json_object_get(json_object_get(se, "labels"), "state")));

		if (st < 0)
			continue;
		json_array_foreach(json_object_get(se, "points"), k, pt)
		{
			int64_t ts = json_integer_value(json_array_get(pt, 0));
			int64_t b = (ts - s->from_ms) / s->step_ms;

			if (ts < s->from_ms || b >= (int64_t)s->n)
				continue;
			acc[b * NSTATES + st] += json_number_value(json_array_get(pt, 1));
			any = true;
		}
	}
	return any;
}

/* acc from the process's cpu, offcpu and gpu_wait profiles: on-CPU time
 * (samples x period), GPU waits, and the off-CPU time the GPU waits do
 * not explain. */
static void profiles_acc(struct tsp_call *c, const char *sel, const struct tsp_exp_view *e,
			 const struct tsp_query *q, const struct steps *s, double ns_per_sample,
			 double *acc)
{
	static const char *const types[] = {"cpu", "offcpu", "gpu_wait"};
	double *v[3] = {NULL, NULL, NULL};

	for (size_t t = 0; t < 3 && !c->status; t++) {
		struct sbuf qs = {0};
		json_t *a, *x;
		size_t i;

		v[t] = xcalloc(s->n ? s->n : 1, sizeof(double));
		if (!has_type(e, types[t]))
			continue;
		qs_sel(c, &qs, sel, types[t], &q->range);
		tsp_qs_int(c, &qs, "step", s->step_ms);
		a = tsp_call__get(c, "/api/v1/timeseries", qs.buf);
		sbuf__free(&qs);
		json_array_foreach(json_object_get(a, "values"), i, x)
		{
			if (i < s->n)
				v[t][i] = json_number_value(x);
		}
		json_decref(a);
	}
	for (size_t i = 0; i < s->n && !c->status; i++) {
		double off = v[1][i] - v[2][i];

		acc[i * NSTATES + STATE_ON_CPU] = v[0][i] * ns_per_sample;
		acc[i * NSTATES + STATE_GPU_WAIT] = v[2][i];
		acc[i * NSTATES + STATE_OFF_CPU] = off > 0 ? off : 0;
	}
	for (size_t t = 0; t < 3; t++)
		free(v[t]);
}

/* Nanoseconds per cpu sample of a trace (its profiles' sample rate). */
static double ns_per_sample(struct tsp_call *c, const char *sel, const struct tsp_query *q)
{
	struct sbuf qs = {0};
	json_t *a;
	double rate;

	qs_sel(c, &qs, sel, "cpu", &q->range);
	tsp_qs(c, &qs, "max_nodes", "1");
	a = tsp_call__get(c, "/api/v1/flamegraph", qs.buf);
	sbuf__free(&qs);
	rate = json_number_value(json_object_get(json_object_get(a, "metadata"), "sampleRate"));
	json_decref(a);
	return rate > 0 ? NS_PER_SEC / rate : 1e7;
}

/* A row's states: the largest in each step, equal neighbours merged. */
static json_t *row_states(const double *acc, const struct steps *s)
{
	json_t *out = json_array(), *cur = NULL;
	int cur_state = -1;

	for (size_t i = 0; i < s->n; i++) {
		int best = -1;
		int64_t start = (s->from_ms + (int64_t)i * s->step_ms) * NS_PER_MS,
			end = start + s->step_ms * NS_PER_MS;

		for (size_t k = 0; k < NSTATES; k++)
			if (acc[i * NSTATES + k] > 0 &&
			    (best < 0 || acc[i * NSTATES + k] > acc[i * NSTATES + best]))
				best = (int)k;
		if (best >= 0 && best == cur_state && cur) {
			json_object_set_new(cur, "end", json_integer(end));
			continue;
		}
		cur_state = best;
		cur = NULL;
		if (best < 0)
			continue;
		cur = json_pack("{s:I,s:I,s:s,s:{s:s,s:{s:s}}}", "start", (json_int_t)start, "end",
				(json_int_t)end, "label", states[best].name, "style", "parentKey",
				states[best].name, "values", "background-color",
				states[best].color);
		json_array_append_new(out, cur);
	}
	return out;
}

static json_t *states_output(struct tsp_call *c, const struct tsp_exp_view *e, const char *id,
			     const char *what, const struct tsp_query *q)
{
	bool tree = !strcmp(what, "tree");
	json_t *entries = json_array(), *rows = json_array();
	struct steps s;

	if (!strcmp(what, "arrows")) {
		json_decref(entries);
		json_decref(rows);
		return json_array();
	}
	steps_of(q, 1000, &s);
	for (size_t i = 0; i < e->ntraces && !c->status; i++) {
		const struct tsp_trace *tr = &e->traces[i];
		int64_t root = tsp_id(tr->uuid, id, "");
		double per_sample = 0;
		struct procs ps;

		if (trace_procs(c, tr, NULL, &q->range, tree, &ps))
			break;
		if (tree) {
			json_t *en = entry(root, -1, json_pack("[s]", tr->name), false);

			json_object_set_new(en, "start", json_integer(q->range.start_ns));
			json_object_set_new(en, "end", json_integer(q->range.end_ns));
			json_array_append_new(entries, en);
		}
		for (size_t k = 0; k < ps.n && !c->status; k++) {
			const struct proc *p = &ps.p[k];
			int64_t pid = proc_id(tr, id, p, NULL);

			if (tree) {
				char *name = proc_name(&ps, p);
				json_t *en = entry(pid, root, json_pack("[s]", name), true);

				json_object_set_new(
					en, "start",
					json_integer(sat_mul_i64(p->from_ms, NS_PER_MS)));
				json_object_set_new(
					en, "end",
					json_integer(sat_mul_i64(p->until_ms, NS_PER_MS)));
				json_object_set_new(
					en, "metadata",
					json_pack("{s:[s],s:[s]}", "pid", p->pid, "node", p->node));
				json_array_append_new(entries, en);
				free(name);
			} else if (requested(q->items, pid, true)) {
				double *acc = xcalloc(s.n ? s.n : 1, NSTATES * sizeof(double));
				struct procs one = {.p = (struct proc *)p, .n = 1};
				json_t *pts = procs_points(c, &one, SHARE_POINT, &q->range, NULL);

				if (pts && !shares_acc(pts, &s, acc) && !c->status) {
					char *sel = proc_selector(tr->selector, p);

					if (!per_sample)
						per_sample = ns_per_sample(c, tr->selector, q);
					profiles_acc(c, sel, e, q, &s, per_sample, acc);
					free(sel);
				}
				if (!c->status)
					json_array_append_new(rows,
							      json_pack("{s:I,s:o}", "entryId",
									(json_int_t)pid, "states",
									row_states(acc, &s)));
				json_decref(pts);
				free(acc);
			}
		}
		procs_free(&ps);
	}
	if (c->status) {
		json_decref(entries);
		json_decref(rows);
		return NULL;
	}
	if (tree) {
		json_decref(rows);
		return tree_model(
			json_pack("[o]", header("Process", "A trace, or a process", NULL)),
			entries);
	}
	json_decref(entries);
	return json_pack("{s:o}", "rows", rows);
}

json_t *tsp_outputs__fetch(struct tsp_call *c, const struct tsp_exp_view *e, const char *kind,
			   const char *id, const char *what, const struct tsp_query *q)
{
	size_t ntop = strlen(OUT_TOP), nrate = strlen(OUT_RATE);

	if (!strcmp(kind, "data") && !strncmp(id, OUT_TOP, ntop) && !strcmp(what, "tree")) {
		if (has_type(e, id + ntop))
			return top_tree(c, e, id, id + ntop, q);
	} else if (!strcmp(kind, "XY") && !strncmp(id, OUT_RATE, nrate) &&
		   (!strcmp(what, "tree") || !strcmp(what, "xy"))) {
		if (has_type(e, id + nrate))
			return rate_output(c, e, id, id + nrate, what, q);
	} else if (!strcmp(kind, "XY") && !strcmp(id, OUT_GPU) &&
		   (!strcmp(what, "tree") || !strcmp(what, "xy"))) {
		return gpu_output(c, e, id, what, q);
	} else if (!strcmp(kind, "timeGraph") && !strcmp(id, OUT_STATES) &&
		   (!strcmp(what, "tree") || !strcmp(what, "states") || !strcmp(what, "arrows"))) {
		return states_output(c, e, id, what, q);
	}
	tsp_call__fail(c, 404, "no output %.80s/%.80s/%.20s in experiment %s", kind, id, what,
		       e->uuid);
	return NULL;
}
