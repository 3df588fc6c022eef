/* rules.c: loads alert rules from YAML (libyaml's document API) into
 * struct alert_rule -- a top-level `rules:` list, or Prometheus' `groups:`
 * of `rules:` so that an existing rule file loads as it is -- and rejects a
 * bad file with "FILE:LINE: reason" (FILE:LINE:COL for a bad expression),
 * the line taken from libyaml's marks. Each rule's expression (expr.c) and
 * templates (template.c) are parsed here, once. Used by engine.c when an
 * engine is made; the format is in docs/alerts.md. */
#include "alerts/alerts_internal.h"
#include "common/duration.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <yaml.h>

#include "common/xalloc.h"

struct loader {
	yaml_document_t *doc;
	const char *name; /* the file, for messages */
	const char *text;
	size_t len;
	char *err;
	size_t errlen;
	struct alert_rule *rules;
	size_t n, cap;
};

static int lfail(struct loader *L, size_t line0, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* "NAME:LINE: reason"; line0 is libyaml's 0-based line. */
static int lfail(struct loader *L, size_t line0, const char *fmt, ...)
{
	va_list ap;
	int o = snprintf(L->err, L->errlen, "%s:%zu: ", L->name, line0 + 1);

	if (o < 0 || (size_t)o >= L->errlen)
		return -EINVAL;
	va_start(ap, fmt);
	vsnprintf(L->err + o, L->errlen - o, fmt, ap);
	va_end(ap);
	return -EINVAL;
}

static size_t line_of(const yaml_node_t *n)
{
	return n->start_mark.line;
}

static const char *node_kind(const yaml_node_t *n)
{
	switch (n->type) {
	case YAML_SCALAR_NODE:
		return "a scalar";
	case YAML_SEQUENCE_NODE:
		return "a list";
	case YAML_MAPPING_NODE:
		return "a mapping";
	default:
		return "nothing";
	}
}

static const char *sval(const yaml_node_t *n)
{
	return (const char *)n->data.scalar.value;
}

static bool is_null(const yaml_node_t *n)
{
	static const char *const nulls[] = {"", "~", "null", "Null", "NULL"};

	if (n->type != YAML_SCALAR_NODE || n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
		return false;
	for (size_t i = 0; i < ARRAY_SIZE(nulls); i++)
		if (!strcmp(sval(n), nulls[i]))
			return true;
	return false;
}

/* The scalar text of n, or an error naming what `what` should have been. */
static int scalar(struct loader *L, const yaml_node_t *n, const char *what, const char **out)
{
	if (n->type != YAML_SCALAR_NODE)
		return lfail(L, line_of(n), "`%s` must be a string, not %s", what, node_kind(n));
	if (strlen(sval(n)) != n->data.scalar.length)
		return lfail(L, line_of(n), "`%s` contains a NUL byte", what);
	*out = sval(n);
	return 0;
}

static size_t edit_distance(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b), prev[32], cur[32];

	if (la >= 31 || lb >= 31)
		return 99;
	for (size_t j = 0; j <= lb; j++)
		prev[j] = j;
	for (size_t i = 1; i <= la; i++) {
		cur[0] = i;
		for (size_t j = 1; j <= lb; j++) {
			size_t sub = prev[j - 1] + (tolower((unsigned char)a[i - 1]) !=
						    tolower((unsigned char)b[j - 1]));
			size_t del = prev[j] + 1, ins = cur[j - 1] + 1;

			cur[j] = sub < del ? (sub < ins ? sub : ins) : (del < ins ? del : ins);
		}
		memcpy(prev, cur, (lb + 1) * sizeof(*prev));
	}
	return prev[lb];
}

static int unknown_key(struct loader *L, const yaml_node_t *key, const char *where,
		       const char *const *known, size_t nknown)
{
	char list[256] = "";
	size_t o = 0;
	const char *best = NULL;
	size_t bestd = 3;

	for (size_t i = 0; i < nknown; i++) {
		size_t d = edit_distance(sval(key), known[i]);

		if (d < bestd) {
			bestd = d;
			best = known[i];
		}
		o += snprintf(list + o, o < sizeof(list) ? sizeof(list) - o : 0, "%s%s",
			      i ? ", " : "", known[i]);
	}
	if (best)
		return lfail(L, line_of(key), "unknown key `%s` in %s -- did you mean `%s`?",
			     sval(key), where, best);
	return lfail(L, line_of(key), "unknown key `%s` in %s (known: %s)", sval(key), where, list);
}

/* Walks a mapping: calls fn(L, index of the key in known, key, value, ctx)
 * for each pair, rejecting unknown and repeated keys. */
typedef int (*pair_fn)(struct loader *L, size_t k, const yaml_node_t *key, const yaml_node_t *value,
		       void *ctx);

static int each_pair(struct loader *L, const yaml_node_t *map, const char *where,
		     const char *const *known, size_t nknown, pair_fn fn, void *ctx)
{
	bool seen[16] = {0};
	int err;

	for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top;
	     p++) {
		yaml_node_t *key = yaml_document_get_node(L->doc, p->key);
		yaml_node_t *value = yaml_document_get_node(L->doc, p->value);
		size_t k;

		if (key->type != YAML_SCALAR_NODE)
			return lfail(L, line_of(key), "a key in %s must be a string, not %s", where,
				     node_kind(key));
		for (k = 0; k < nknown; k++)
			if (!strcmp(sval(key), known[k]))
				break;
		if (k == nknown)
			return unknown_key(L, key, where, known, nknown);
		if (seen[k])
			return lfail(L, line_of(key), "`%s` appears twice in %s", known[k], where);
		seen[k] = true;
		err = fn(L, k, key, value, ctx);
		if (err)
			return err;
	}
	return 0;
}

/* ---- rules ---- */

void alert_rule__free(struct alert_rule *r)
{
	free(r->name);
	free(r->expr_text);
	alert_expr__free(r->expr);
	for (size_t i = 0; i < r->nlabels; i++) {
		free(r->labels[i].key);
		free(r->labels[i].text);
		alert_tmpl__free(r->labels[i].t);
	}
	free(r->labels);
	for (size_t i = 0; i < r->nannotations; i++) {
		free(r->annotations[i].key);
		free(r->annotations[i].text);
		alert_tmpl__free(r->annotations[i].t);
	}
	free(r->annotations);
}

/* Line and column of byte off of the scalar n's value in the file. Follows
 * quotes, escapes, folded lines and block indentation closely enough for a
 * message; multi-byte characters count as their bytes. */
static void locate(struct loader *L, const yaml_node_t *n, int off, size_t *line, size_t *col)
{
	const char *t = L->text;
	size_t r = n->start_mark.index, indent = 0, nl = 0;
	yaml_scalar_style_t style = n->data.scalar.style;
	bool block = style == YAML_LITERAL_SCALAR_STYLE || style == YAML_FOLDED_SCALAR_STYLE;

	if (block) {
		while (r < L->len && t[r] != '\n')
			r++;
		if (r < L->len)
			r++;
		indent = strspn(t + r, " ");
		r += indent;
	} else if (style != YAML_PLAIN_SCALAR_STYLE) {
		r++;
	}
	for (int k = 0; k < off && r < L->len; k++) {
		char c = t[r];

		if (c == '\n') {
			r++;
			if (block)
				for (size_t s = 0; s < indent && r < L->len && t[r] == ' '; s++)
					r++;
			else
				while (r < L->len && isspace((unsigned char)t[r]))
					r++;
		} else if (style == YAML_SINGLE_QUOTED_SCALAR_STYLE && c == '\'') {
			r += 2;
		} else if (style == YAML_DOUBLE_QUOTED_SCALAR_STYLE && c == '\\') {
			char e = r + 1 < L->len ? t[r + 1] : 0;

			r += e == 'x' ? 4 : e == 'u' ? 6 : e == 'U' ? 10 : 2;
		} else {
			r++;
		}
	}
	if (r > L->len)
		r = L->len;
	*col = r + 1;
	for (size_t i = 0; i < r; i++)
		if (t[i] == '\n') {
			nl++;
			*col = r - i;
		}
	*line = nl;
}

static int set_expr(struct loader *L, struct alert_rule *r, const yaml_node_t *v)
{
	char msg[256];
	const char *s;
	int pos = 0, err = scalar(L, v, "expr", &s);
	size_t line, col;

	if (err)
		return err;
	if (is_null(v))
		return lfail(L, line_of(v), "`expr:` is empty");
	r->expr = alert_expr__parse(s, msg, sizeof(msg), &pos);
	if (r->expr) {
		r->expr_text = xstrdup(s);
		return 0;
	}
	locate(L, v, pos, &line, &col);
	snprintf(L->err, L->errlen, "%s:%zu:%zu: bad expression: %s", L->name, line + 1, col, msg);
	return -EINVAL;
}

static int add_kv(struct loader *L, struct alert_rule_kv **v, size_t *n, const yaml_node_t *key,
		  const yaml_node_t *value, const char *what)
{
	char msg[256];
	const char *text;
	struct alert_tmpl *t;
	int err;

	if (!alert_name_valid(sval(key), false))
		return lfail(L, line_of(key), "`%s` is not a valid %s name (letters, digits, _)",
			     sval(key), what);
	for (size_t i = 0; i < *n; i++)
		if (!strcmp((*v)[i].key, sval(key)))
			return lfail(L, line_of(key), "%s `%s` given twice", what, sval(key));
	if (is_null(value))
		text = "";
	else if ((err = scalar(L, value, sval(key), &text)))
		return err;
	t = alert_tmpl__parse(text, msg, sizeof(msg));
	if (!t)
		return lfail(L, line_of(value), "bad template in %s `%s`: %s", what, sval(key),
			     msg);
	*v = xrealloc(*v, (*n + 1) * sizeof(**v));
	(*v)[*n] = (struct alert_rule_kv){.key = xstrdup(sval(key)), .text = xstrdup(text), .t = t};
	(*n)++;
	return 0;
}

static int add_map(struct loader *L, struct alert_rule_kv **v, size_t *n, const yaml_node_t *map,
		   const char *field, const char *what)
{
	int err;

	if (is_null(map))
		return 0;
	if (map->type != YAML_MAPPING_NODE)
		return lfail(L, line_of(map),
			     "`%s` must be a mapping of %s names to values, not %s", field, what,
			     node_kind(map));
	for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top;
	     p++) {
		yaml_node_t *key = yaml_document_get_node(L->doc, p->key);
		yaml_node_t *value = yaml_document_get_node(L->doc, p->value);

		if (key->type != YAML_SCALAR_NODE)
			return lfail(L, line_of(key), "a key in `%s` must be a string, not %s",
				     field, node_kind(key));
		if (!strcmp(field, "labels") && !strcmp(sval(key), "alertname"))
			return lfail(L, line_of(key),
				     "label `alertname` comes from `alert:` and can't be set");
		err = add_kv(L, v, n, key, value, what);
		if (err)
			return err;
	}
	return 0;
}

enum rule_key {
	RK_ALERT,
	RK_EXPR,
	RK_FOR,
	RK_KEEP_FIRING_FOR,
	RK_LABELS,
	RK_ANNOTATIONS,
	RK_SUMMARY,
	RK_DESCRIPTION,
	RK_SEVERITY,
	RK_RECORD,
};
static const char *const rule_keys[] = {
	[RK_ALERT] = "alert",	    [RK_EXPR] = "expr",
	[RK_FOR] = "for",	    [RK_KEEP_FIRING_FOR] = "keep_firing_for",
	[RK_LABELS] = "labels",	    [RK_ANNOTATIONS] = "annotations",
	[RK_SUMMARY] = "summary",   [RK_DESCRIPTION] = "description",
	[RK_SEVERITY] = "severity", [RK_RECORD] = "record",
};

struct rule_nodes {
	const yaml_node_t *node[ARRAY_SIZE(rule_keys)];
	const yaml_node_t *key[ARRAY_SIZE(rule_keys)];
};

static int collect_rule_key(struct loader *L, size_t k, const yaml_node_t *key,
			    const yaml_node_t *value, void *ctx)
{
	struct rule_nodes *rn = ctx;

	if (k == RK_RECORD)
		return lfail(L, line_of(key),
			     "recording rules (`record:`) are not supported: only alerting rules");
	rn->node[k] = value;
	rn->key[k] = key;
	return 0;
}

static int set_duration(struct loader *L, const yaml_node_t *v, const char *what, uint64_t *ms)
{
	const char *s;
	int err;

	if (is_null(v)) {
		*ms = 0;
		return 0;
	}
	err = scalar(L, v, what, &s);
	if (err)
		return err;
	if (duration_parse(s, ms))
		return lfail(L, line_of(v),
			     "bad duration `%s` in `%s`: use seconds or a number and a unit, e.g. "
			     "30s, 5m, 1h30m (units ms, s, m, h, d, w, y)",
			     s, what);
	return 0;
}

/* A shortcut (summary:, description:, severity:) into a map, unless the map
 * has the key already. */
static int shortcut(struct loader *L, struct rule_nodes *rn, enum rule_key k,
		    struct alert_rule_kv **v, size_t *n, const char *what)
{
	for (size_t i = 0; i < *n; i++)
		if (!strcmp((*v)[i].key, rule_keys[k]))
			return lfail(L, line_of(rn->key[k]),
				     "`%s` is given twice: as `%s:` and in `%s`", rule_keys[k],
				     rule_keys[k], what);
	return add_kv(L, v, n, rn->key[k], rn->node[k],
		      !strcmp(what, "labels") ? "label" : "annotation");
}

static int parse_rule(struct loader *L, const yaml_node_t *n)
{
	struct rule_nodes rn = {0};
	struct alert_rule r = {.line = line_of(n) + 1};
	const char *name;
	int err;

	if (n->type != YAML_MAPPING_NODE)
		return lfail(L, line_of(n),
			     "a rule must be a mapping with `alert:` and `expr:`, not %s",
			     node_kind(n));
	err = each_pair(L, n, "a rule", rule_keys, ARRAY_SIZE(rule_keys), collect_rule_key, &rn);
	if (err)
		return err;
	if (!rn.node[RK_ALERT])
		return lfail(L, line_of(n), "rule has no `alert:` (its name)");
	err = scalar(L, rn.node[RK_ALERT], "alert", &name);
	if (err)
		return err;
	if (!alert_name_valid(name, true))
		return lfail(L, line_of(rn.node[RK_ALERT]),
			     "bad alert name `%s`: letters, digits, _ and :, not starting with a "
			     "digit",
			     name);
	if (!rn.node[RK_EXPR])
		return lfail(L, line_of(n), "rule `%s` has no `expr:`", name);
	r.name = xstrdup(name);
	err = set_expr(L, &r, rn.node[RK_EXPR]);
	if (!err && rn.node[RK_FOR])
		err = set_duration(L, rn.node[RK_FOR], "for", &r.for_ms);
	if (!err && rn.node[RK_KEEP_FIRING_FOR])
		err = set_duration(L, rn.node[RK_KEEP_FIRING_FOR], "keep_firing_for",
				   &r.keep_firing_ms);
	if (!err && rn.node[RK_LABELS])
		err = add_map(L, &r.labels, &r.nlabels, rn.node[RK_LABELS], "labels", "label");
	if (!err && rn.node[RK_ANNOTATIONS])
		err = add_map(L, &r.annotations, &r.nannotations, rn.node[RK_ANNOTATIONS],
			      "annotations", "annotation");
	if (!err && rn.node[RK_SEVERITY])
		err = shortcut(L, &rn, RK_SEVERITY, &r.labels, &r.nlabels, "labels");
	if (!err && rn.node[RK_SUMMARY])
		err = shortcut(L, &rn, RK_SUMMARY, &r.annotations, &r.nannotations, "annotations");
	if (!err && rn.node[RK_DESCRIPTION])
		err = shortcut(L, &rn, RK_DESCRIPTION, &r.annotations, &r.nannotations,
			       "annotations");
	if (err) {
		alert_rule__free(&r);
		return err;
	}
	xgrow((void **)&L->rules, &L->cap, L->n + 1, sizeof(*L->rules));
	L->rules[L->n++] = r;
	return 0;
}

static int parse_rule_list(struct loader *L, const yaml_node_t *n)
{
	int err;

	if (is_null(n))
		return 0;
	if (n->type != YAML_SEQUENCE_NODE)
		return lfail(L, line_of(n), "`rules` must be a list of rules, not %s",
			     node_kind(n));
	for (yaml_node_item_t *i = n->data.sequence.items.start; i < n->data.sequence.items.top;
	     i++) {
		err = parse_rule(L, yaml_document_get_node(L->doc, *i));
		if (err)
			return err;
	}
	return 0;
}

static const char *const group_keys[] = {"name", "interval", "rules", "limit"};

struct group_nodes {
	const yaml_node_t *rules;
	bool named;
};

static int group_key(struct loader *L, size_t k, const yaml_node_t *key, const yaml_node_t *value,
		     void *ctx)
{
	struct group_nodes *g = ctx;
	uint64_t ms;
	const char *s;

	switch (k) {
	case 0:
		g->named = true;
		return scalar(L, value, "name", &s);
	case 1:
		/* The agent evaluates every rule on its own tick. */
		return set_duration(L, value, "interval", &ms);
	case 2:
		g->rules = value;
		return 0;
	default:
		return lfail(L, line_of(key), "`limit` is not supported");
	}
}

static int parse_groups(struct loader *L, const yaml_node_t *n)
{
	int err;

	if (n->type != YAML_SEQUENCE_NODE)
		return lfail(L, line_of(n), "`groups` must be a list, not %s", node_kind(n));
	for (yaml_node_item_t *i = n->data.sequence.items.start; i < n->data.sequence.items.top;
	     i++) {
		yaml_node_t *g = yaml_document_get_node(L->doc, *i);
		struct group_nodes gn = {0};

		if (g->type != YAML_MAPPING_NODE)
			return lfail(L, line_of(g),
				     "a group must be a mapping with `name:` and "
				     "`rules:`, not %s",
				     node_kind(g));
		err = each_pair(L, g, "a group", group_keys, ARRAY_SIZE(group_keys), group_key,
				&gn);
		if (err)
			return err;
		if (!gn.named)
			return lfail(L, line_of(g), "group has no `name:`");
		if (!gn.rules)
			return lfail(L, line_of(g), "group has no `rules:`");
		err = parse_rule_list(L, gn.rules);
		if (err)
			return err;
	}
	return 0;
}

static const char *const top_keys[] = {"rules", "groups"};

static int top_key(struct loader *L, size_t k, const yaml_node_t *key, const yaml_node_t *value,
		   void *ctx)
{
	*(bool *)ctx = true;
	return k == 0 ? parse_rule_list(L, value) : parse_groups(L, value);
}

/* Why libyaml stopped: its problem, or a tab in the indentation near it. */
static int syntax_error(struct loader *L, yaml_parser_t *p)
{
	size_t line = p->problem_mark.line;

	if (p->error == YAML_READER_ERROR) {
		line = 0;
		for (size_t i = 0; i < p->problem_offset && i < L->len; i++)
			line += L->text[i] == '\n';
		return lfail(L, line, "%s (a rule file is UTF-8 text)", p->problem);
	}
	/* libyaml reports a tab as a character that can't start a token,
	 * sometimes a line late. */
	for (size_t l = line > 0 ? line - 1 : 0; l <= line; l++) {
		const char *s = L->text;
		size_t cur = 0;

		while (cur < l && (s = memchr(s, '\n', L->text + L->len - s)))
			s++, cur++;
		if (!s)
			break;
		while (*s == ' ')
			s++;
		if (*s == '\t')
			return lfail(L, l, "tab in the indentation: YAML indents with spaces");
	}
	if (p->context)
		return lfail(L, line, "YAML syntax error: %s (column %zu) %s (line %zu)",
			     p->problem ? p->problem : "unknown", p->problem_mark.column + 1,
			     p->context, p->context_mark.line + 1);
	return lfail(L, line, "YAML syntax error: %s (column %zu)",
		     p->problem ? p->problem : "unknown", p->problem_mark.column + 1);
}

/* The rules of the document root: a mapping with `rules:` or `groups:`. */
static int parse_root(struct loader *L, const yaml_node_t *root)
{
	bool any = false;
	int rc;

	if (!root)
		return lfail(L, 0, "the file is empty: expected a `rules:` list");
	if (root->type != YAML_MAPPING_NODE)
		return lfail(L, line_of(root),
			     "the top level must be a mapping with a `rules:` list, not %s",
			     node_kind(root));
	rc = each_pair(L, root, "the top level", top_keys, ARRAY_SIZE(top_keys), top_key, &any);
	if (!rc && !any)
		rc = lfail(L, line_of(root), "no `rules:` list at the top level");
	return rc;
}

/* What follows the first document: nothing, or a bad second document. */
static int parse_rest(struct loader *L, yaml_parser_t *parser)
{
	yaml_document_t next;
	int rc = 0;

	if (!yaml_parser_load(parser, &next))
		return syntax_error(L, parser);
	if (yaml_document_get_root_node(&next))
		rc = lfail(L, next.start_mark.line,
			   "a second YAML document (`---`): put every rule in the first");
	yaml_document_delete(&next);
	return rc;
}

int alert_rules_parse(const char *text, size_t len, const char *name, struct alert_rule **rules,
		      size_t *n, char *err, size_t errlen)
{
	struct loader L = {.name = name, .text = text, .len = len, .err = err, .errlen = errlen};
	yaml_parser_t parser;
	yaml_document_t doc;
	int rc;

	if (!yaml_parser_initialize(&parser))
		return lfail(&L, 0, "can't start the YAML parser: out of memory");
	yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
	if (!yaml_parser_load(&parser, &doc)) {
		rc = syntax_error(&L, &parser);
		yaml_parser_delete(&parser);
		return rc;
	}
	L.doc = &doc;
	rc = parse_root(&L, yaml_document_get_root_node(&doc));
	if (!rc)
		rc = parse_rest(&L, &parser);
	yaml_document_delete(&doc);
	yaml_parser_delete(&parser);
	if (rc) {
		for (size_t i = 0; i < L.n; i++)
			alert_rule__free(&L.rules[i]);
		free(L.rules);
		return rc;
	}
	*rules = L.rules;
	*n = L.n;
	return 0;
}
