/* alerts_internal.h: what the files of the alert engine (src/alerts/) share,
 * one section per file, and what tests/unit/test_alerts.c reaches into:
 *
 *   snapshot.c   the series of one evaluation: arena, label sets, vectors
 *   expr.c       the PromQL subset: lexer and parser
 *   expr_eval.c  ... its evaluation over a snapshot
 *   template.c   {{ }} templates of labels and annotations
 *   format.c     the number and time formats of templates and notifications
 *   rules.c      the YAML rule file loader
 *   sinks.c      HTTP delivery, one worker thread per sink
 *   engine.c     the engine object: loading, settings, sinks, stats
 *   eval.c       one tick: rules evaluated, alerts moved, notifications sent
 *   json.c       what the engine says in JSON (notifications, /alerts, /rules)
 *   defaults.c   the default rules
 */
#ifndef SONDE_ALERTS_ALERTS_INTERNAL_H
#define SONDE_ALERTS_ALERTS_INTERNAL_H

#include <pthread.h>
#include <regex.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>
#include <uthash.h>

#include "alerts/alerts.h"

/* ---- snapshot.c: arena, evaluation scratch reset after every eval ---- */

struct alert_arena_block;
struct alert_arena {
	struct alert_arena_block *head;
};
void *alert_arena__alloc(struct alert_arena *a, size_t n);
char *alert_arena__strdup(struct alert_arena *a, const char *s);
void alert_arena__reset(struct alert_arena *a);

/* ---- snapshot.c: label sets ---- */

/* n pairs, kv[2i] the key and kv[2i+1] the value, sorted by key. */
struct alert_labels {
	const char **kv;
	size_t n;
};
/* The value of key, "" when absent (PromQL: a missing label equals ""). */
const char *alert_labels__get(const struct alert_labels *l, const char *key);
/* Sorts the pairs by key (stable). */
void alert_labels__sort(struct alert_labels *l);

/* Whether s is a label name ([A-Za-z_][A-Za-z0-9_]*), or with metric a
 * metric or alert name (':' allowed too). */
bool alert_name_valid(const char *s, bool metric);
/* Whether s is one of the n names. */
bool alert_name_in(const char *s, char *const *names, size_t n);
/* l reduced to (keep) or stripped of (!keep) the labels named in names; in a. */
struct alert_labels alert_labels__reduce(struct alert_arena *a, const struct alert_labels *l,
					 char *const *names, size_t n, bool keep);

/* A label set as one string, "name\0value\0name\0value\0": the key of an
 * alert instance and of a match group. Reused from call to call. */
struct alert_key {
	char *b;
	size_t n, cap;
};
/* The key of l's labels named in names (include), or of all the others
 * (!include; with n 0, of all of l). */
void alert_key__set(struct alert_key *k, const struct alert_labels *l, char *const *names, size_t n,
		    bool include);
/* The key as text for messages: {name="value", ...}. Returns buf. */
const char *alert_key__text(const struct alert_key *k, char *buf, size_t len);
void alert_key__free(struct alert_key *k);

/* One element of an instant vector. */
struct alert_sample {
	struct alert_labels l;
	double v;
};
struct alert_vector {
	struct alert_sample *s;
	size_t n, cap;
};
void alert_vector__push(struct alert_vector *v, struct alert_labels l, double value);
void alert_vector__free(struct alert_vector *v);

/* ---- snapshot.c: the series of one eval, by metric name ---- */

struct alert_snap_metric {
	char *name;
	struct alert_vector v;
	UT_hash_handle hh;
};
struct alert_snapshot {
	struct alert_snap_metric *metrics; /* only the names some rule selects */
	struct alert_arena arena;
};
void alert_snapshot__want(struct alert_snapshot *s, const char *name);
void alert_snapshot__collect(struct alert_snapshot *s, series_source src, void *src_ctx);
void alert_snapshot__clear(struct alert_snapshot *s); /* between evals */
void alert_snapshot__free(struct alert_snapshot *s);

/* ---- expr.c, expr_eval.c: expressions (docs/alerts.md, "Expressions") ---- */

enum expr_kind { EXPR_NUM, EXPR_SEL, EXPR_AGG, EXPR_BIN, EXPR_NEG };
enum match_op { MATCH_EQ, MATCH_NE, MATCH_RE, MATCH_NRE };
enum bin_op { OP_ADD, OP_SUB, OP_MUL, OP_DIV, OP_EQ, OP_NE, OP_GT, OP_GE, OP_LT, OP_LE };
enum agg_op { AGG_SUM, AGG_MIN, AGG_MAX, AGG_AVG, AGG_COUNT };
enum card { CARD_ONE_TO_ONE, CARD_MANY_TO_ONE, CARD_ONE_TO_MANY };

static inline bool bin_op_is_comparison(enum bin_op op)
{
	return op >= OP_EQ;
}

struct alert_matcher {
	char *label, *value;
	enum match_op op;
	regex_t re;
};

struct alert_expr {
	enum expr_kind kind;
	bool scalar; /* yields a number rather than series */
	int pos;     /* byte offset in the source text */
	double num;
	/* EXPR_SEL */
	char *name;
	struct alert_matcher *m;
	size_t nm;
	/* EXPR_AGG (agg, labels, without, arg) and EXPR_BIN (op, l, r, matching) */
	enum agg_op agg;
	enum bin_op op;
	bool without;	/* agg: `without` rather than `by` */
	bool on;	/* bin: on(...) rather than ignoring(...) */
	bool matching;	/* bin: an on/ignoring clause was given */
	enum card card; /* bin: group_left / group_right */
	char **labels;	/* agg: by/without labels; bin: on/ignoring labels */
	size_t nlabels;
	char **include; /* group_left/group_right extra labels */
	size_t ninclude;
	struct alert_expr *l, *r, *arg; /* bin: l and r; agg and neg: arg */
};

/* Parses src; on error returns NULL, writes the reason into err and the
 * byte offset of the offending token into *errpos. */
struct alert_expr *alert_expr__parse(const char *src, char *err, size_t errlen, int *errpos);
void alert_expr__free(struct alert_expr *x);
/* Calls fn for every metric name the expression selects. */
void alert_expr__names(const struct alert_expr *x, void (*fn)(void *ctx, const char *name),
		       void *ctx);
/* Evaluates a vector expression over snap into out (labels point into
 * snap->arena). Returns 0, or -EINVAL with the reason in err (many-to-many
 * matching, duplicate output series). */
int alert_expr__eval(const struct alert_expr *x, struct alert_snapshot *snap,
		     struct alert_vector *out, char *err, size_t errlen);

/* ---- template.c: templates (docs/alerts.md, "Templates") ---- */

struct alert_tmpl;
struct alert_tmpl *alert_tmpl__parse(const char *src, char *err, size_t errlen);
void alert_tmpl__free(struct alert_tmpl *t);
/* Renders with the alert's labels and value; caller frees. */
char *alert_tmpl__render(const struct alert_tmpl *t, const struct alert_labels *l, double value);

/* ---- format.c: number and time formats ---- */

/* Go's %v of a float64 (Prometheus' {{ $value }}): 0.97, 1e+06, NaN, +Inf. */
void alert_format_value(char *buf, size_t len, double v);
/* NaN, +Inf or -Inf, Go's spelling, when v is one of them: then true. */
bool alert_format_nonfinite(char *buf, size_t len, double v);
/* Prometheus' humanize functions. */
void alert_format_humanize(char *buf, size_t len, double v);
void alert_format_humanize1024(char *buf, size_t len, double v);
void alert_format_humanize_duration(char *buf, size_t len, double v);
void alert_format_humanize_percentage(char *buf, size_t len, double v);
/* RFC 3339 UTC with milliseconds: 2024-05-01T12:00:00.000Z. */
void alert_format_rfc3339(char *buf, size_t len, int64_t ms);

/* ---- rules.c: rules ---- */

struct alert_rule_kv {
	char *key;
	char *text; /* the template as written */
	struct alert_tmpl *t;
};

enum alert_state { ALERT_INACTIVE, ALERT_PENDING, ALERT_FIRING };

/* One (rule, label set): pending, firing, or resolved and kept a while so
 * that Alertmanager hears of the resolution again on the next re-sends.
 * Made and freed by eval.c. */
struct alert_instance {
	char *key; /* the label set as an alert_key; the hash key */
	size_t klen;
	struct alert_labels l; /* final labels (alertname, rule labels, external); owned */
	char **annotations;    /* rendered, parallel to the rule's annotations */
	enum alert_state state;
	double value;
	int64_t active_ms, fired_ms, resolved_ms, last_seen_ms;
	int64_t am_sent_ms;    /* last sent to Alertmanager; 0: never */
	bool am_sent_resolved; /* the resolution went out at least once */
	UT_hash_handle hh;
};

struct alert_rule {
	char *name;
	char *expr_text;
	struct alert_expr *expr;
	uint64_t for_ms, keep_firing_ms;
	struct alert_rule_kv *labels;
	size_t nlabels;
	struct alert_rule_kv *annotations;
	size_t nannotations;
	unsigned line;
	struct alert_instance *active; /* by key; eval.c's */
	char last_error[256];	       /* empty when the last eval succeeded */
	bool dup_warned;	       /* two series gave one label set */
};

/* Parses a rule file's text (name stands for the file in messages). Returns
 * 0 with *rules and *n set, or -EINVAL with "NAME:LINE: reason" in err. */
int alert_rules_parse(const char *text, size_t len, const char *name, struct alert_rule **rules,
		      size_t *n, char *err, size_t errlen);
/* Frees what the rule file made (not r itself); its instances must be gone
 * (alert_rule__drop_instances). */
void alert_rule__free(struct alert_rule *r);

/* ---- sinks.c: HTTP sinks ---- */

struct alert_sink;
/* Starts the worker of a sink POSTing JSON bodies to url. NULL with errno
 * set when the thread can't start. */
struct alert_sink *alert_sink__new(enum alert_sink_kind kind, const char *url,
				   const struct alert_delivery *d);
/* The TLS files (copied; NULL: the system's CAs) and the bearer token
 * (copied; NULL: none) of a sink's POSTs; before any is pushed. */
struct tls_client_opts;
void alert_sink__set_auth(struct alert_sink *s, const struct tls_client_opts *tls,
			  const char *token);
/* Queues body (taken over) for delivery; when the queue is full drops it and
 * counts it failed. */
void alert_sink__push(struct alert_sink *s, char *body);
/* Adds the sink's counters to the four given. */
void alert_sink__stats(struct alert_sink *s, uint64_t *sent, uint64_t *failed, uint64_t *dropped,
		       uint64_t *queued);
/* Waits until the queue is empty and no POST is under way, or until
 * deadline_ms (CLOCK_MONOTONIC). Returns 0 or -ETIMEDOUT. */
int alert_sink__flush(struct alert_sink *s, uint64_t deadline_ms);
/* Stops the worker after a drain of at most drain_ms; frees. NULL: no-op. */
void alert_sink__free(struct alert_sink *s, unsigned drain_ms);

/* ---- engine.c: the engine object ---- */

/* Test hook: when set, sink bodies go to fn on the evaluating thread
 * instead of over HTTP. */
typedef void (*alert_post_hook)(void *ctx, enum alert_sink_kind kind, const char *url,
				const char *body);
void alert_engine__set_post_hook(struct alert_engine *e, alert_post_hook fn, void *ctx);

struct alert_engine_sink {
	enum alert_sink_kind kind;
	bool resend; /* a webhook that also gets the firing alerts again */
	char *url;
	struct alert_sink *s; /* NULL under the test hook */
	bool auth;	      /* the server's TLS or token are set on s */
};

struct alert_callback {
	alert_notify_fn fn;
	void *ctx;
};

struct alert_engine {
	pthread_mutex_t lock; /* everything below */
	struct alert_rule *rules;
	size_t nrules;
	struct alert_snapshot snap;
	struct alert_key key; /* scratch of eval.c */
	struct alert_engine_sink *sinks;
	size_t nsinks;
	struct alert_callback *callbacks;
	size_t ncallbacks;
	struct alert_delivery delivery;
	char *generator_url;
	char **ext; /* external labels: key, value, key, value... */
	size_t next;
	alert_post_hook hook;
	void *hook_ctx;
	uint64_t evals, eval_errors;
	int64_t last_eval_ms;
	int64_t interval_ms; /* between the last two evals */
	int64_t resent_ms;   /* firing alerts last sent again to resending sinks */
};

/* ---- eval.c: alert instances ---- */

/* Frees every instance of r. */
void alert_rule__drop_instances(struct alert_rule *r);

/* ---- json.c: the engine's JSON ---- */

/* The rendered annotation key of a, or NULL. */
const char *alert_instance__annotation(const struct alert_rule *r, const struct alert_instance *a,
				       const char *key);
/* The webhook's body and the callbacks' argument. */
json_t *alert_notification_json(const struct alert_rule *r, const struct alert_instance *a);
/* Alertmanager's postableAlert of a at now. */
json_t *alert_am_json(const struct alert_engine *e, const struct alert_rule *r,
		      const struct alert_instance *a, int64_t now);
/* A JSON value as the sinks send it; caller frees. */
char *alert_json_dump(const json_t *j);

#endif
