/* template.c: the templates of alert summaries, descriptions and label
 * values -- Prometheus' {{ $labels.pid }}, {{ $value }}, pipelines through
 * humanize, humanize1024, humanizeDuration, humanizePercentage, printf,
 * toUpper, toLower and title, and the short form {{pid}} / {{value}}. Parsed
 * when the rule file loads (rules.c), so that a typo is a load error with its
 * line, and rendered for each alert on every evaluation (eval.c); numbers are
 * written by format.c. */
#include "alerts/alerts_internal.h"

#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/xalloc.h"

enum targ_kind { ARG_VALUE, ARG_LABEL, ARG_STRING };

struct targ {
	enum targ_kind kind;
	char *s; /* the label name or the string */
};

enum tfn {
	FN_NONE, /* an operand alone */
	FN_HUMANIZE,
	FN_HUMANIZE1024,
	FN_HUMANIZE_DURATION,
	FN_HUMANIZE_PERCENTAGE,
	FN_PRINTF,
	FN_TO_UPPER,
	FN_TO_LOWER,
	FN_TITLE,
};

static const char *const fn_names[] = {
	[FN_HUMANIZE] = "humanize",
	[FN_HUMANIZE1024] = "humanize1024",
	[FN_HUMANIZE_DURATION] = "humanizeDuration",
	[FN_HUMANIZE_PERCENTAGE] = "humanizePercentage",
	[FN_PRINTF] = "printf",
	[FN_TO_UPPER] = "toUpper",
	[FN_TO_LOWER] = "toLower",
	[FN_TITLE] = "title",
};

#define TMPL_MAX_ARGS 8

struct tcmd {
	enum tfn fn;
	struct targ args[TMPL_MAX_ARGS];
	size_t nargs;
};

struct tpart {
	char *text; /* literal text, or NULL for an action */
	struct tcmd *cmds;
	size_t ncmds;
};

struct alert_tmpl {
	struct tpart *parts;
	size_t n;
};

void alert_tmpl__free(struct alert_tmpl *t)
{
	if (!t)
		return;
	for (size_t i = 0; i < t->n; i++) {
		free(t->parts[i].text);
		for (size_t c = 0; c < t->parts[i].ncmds; c++)
			for (size_t a = 0; a < t->parts[i].cmds[c].nargs; a++)
				free(t->parts[i].cmds[c].args[a].s);
		free(t->parts[i].cmds);
	}
	free(t->parts);
	free(t);
}

static bool tfail(char *err, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static bool tfail(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
	return false;
}

/* The end of the flags, width and precision of the printf conversion whose
 * '%' is before f; *width and *prec: how many digits each has. */
static const char *printf_spec(const char *f, size_t *width, size_t *prec)
{
	f += strspn(f, "-+ #0");
	*width = strspn(f, "0123456789");
	f += *width;
	*prec = 0;
	if (*f == '.') {
		f++;
		*prec = strspn(f, "0123456789");
		f += *prec;
	}
	return f;
}

/* Counts the conversions of a printf format; false if one isn't allowed. */
static bool printf_conversions(const char *f, size_t *n, char *err, size_t errlen)
{
	size_t width, prec;

	*n = 0;
	for (; *f; f++) {
		if (*f != '%')
			continue;
		if (*++f == '%')
			continue;
		f = printf_spec(f, &width, &prec);
		if (width > 2)
			return tfail(err, errlen, "printf: width above 99");
		if (prec > 2)
			return tfail(err, errlen, "printf: precision above 99");
		if (!*f || !strchr("feEgGdsv", *f))
			return tfail(err, errlen,
				     "printf: unsupported conversion `%%%c` (use %%f %%e %%g %%d "
				     "%%s %%v)",
				     *f ? *f : ' ');
		(*n)++;
	}
	return true;
}

/* One word of an action: $value, .Value, $labels.X, .Labels.X, a function
 * name, or in the short form a bare label name or `value`. */
static bool parse_operand(const char *w, struct targ *a, char *err, size_t errlen)
{
	const char *label = NULL;

	if (!strcmp(w, "$value") || !strcmp(w, ".Value") || !strcmp(w, "value")) {
		a->kind = ARG_VALUE;
		return true;
	}
	if (!strncmp(w, "$labels.", 8))
		label = w + 8;
	else if (!strncmp(w, ".Labels.", 8))
		label = w + 8;
	else if (w[0] == '$' || w[0] == '.')
		return tfail(err, errlen,
			     "unknown `%s`: use $labels.NAME or $value (.Labels.NAME, .Value)", w);
	else
		label = w;
	if (!alert_name_valid(label, false))
		return tfail(err, errlen, "`%s` is not a label name", label);
	a->kind = ARG_LABEL;
	a->s = xstrdup(label);
	return true;
}

static const char *const go_keywords[] = {"if",	    "else",  "end",	 "range", "with",
					  "define", "block", "template", "len",	  "index",
					  "and",    "or",    "not",	 "eq",	  "ne"};

/* The first word w of a command: a function (*fn set), or an operand
 * (*fn FN_NONE, where one may stand: not after a `|`). */
static bool command_word(const char *w, bool piped, enum tfn *fn, char *err, size_t errlen)
{
	for (size_t f = 1; f < ARRAY_SIZE(fn_names); f++)
		if (!strcmp(w, fn_names[f])) {
			*fn = (enum tfn)f;
			return true;
		}
	for (size_t k = 0; k < ARRAY_SIZE(go_keywords); k++)
		if (!strcmp(w, go_keywords[k]))
			return tfail(err, errlen,
				     "`%s` is not supported: templates hold values, labels and the "
				     "functions humanize, humanize1024, humanizeDuration, "
				     "humanizePercentage, printf, toUpper, toLower, title",
				     w);
	if (piped && (w[0] == '$' || w[0] == '.'))
		return tfail(err, errlen, "only functions can follow `|`");
	if (piped)
		return tfail(err, errlen,
			     "unknown function `%s` (known: humanize, humanize1024, "
			     "humanizeDuration, humanizePercentage, printf, toUpper, "
			     "toLower, title)",
			     w);
	*fn = FN_NONE;
	return true;
}

/* The string literal of an action at s[*i] ("..." with \n \t and \X for X,
 * or `...` raw) as a new string, *i past it; NULL when it isn't closed. */
static char *action_string(const char *s, size_t len, size_t *i)
{
	char q = s[(*i)++];
	char *w = xmalloc(len - *i + 1);
	size_t n = 0;

	for (; *i < len && s[*i] != q; (*i)++) {
		char c = s[*i];

		if (c == '\\' && q == '"' && *i + 1 < len) {
			c = s[++(*i)];
			c = c == 'n' ? '\n' : c == 't' ? '\t' : c;
		}
		w[n++] = c;
	}
	w[n] = '\0';
	if ((*i)++ >= len) {
		free(w);
		return NULL;
	}
	return w;
}

/* Each command of a pipeline has the operands its function takes. */
static bool check_pipeline(const struct tpart *part, char *err, size_t errlen)
{
	for (size_t c = 0; c < part->ncmds; c++) {
		const struct tcmd *k = &part->cmds[c];
		size_t given = k->nargs + (c > 0), conv;

		if (k->fn == FN_NONE) {
			if (c > 0)
				return tfail(err, errlen, "only functions can follow `|`");
			if (k->nargs != 1)
				return tfail(
					err, errlen,
					"a value takes no arguments (a function name misspelt?)");
		} else if (k->fn == FN_PRINTF) {
			if (!k->nargs || k->args[0].kind != ARG_STRING)
				return tfail(err, errlen, "printf needs a format string first");
			if (!printf_conversions(k->args[0].s, &conv, err, errlen))
				return false;
			if (conv != given - 1)
				return tfail(err, errlen,
					     "printf: the format has %zu conversion(s) for %zu "
					     "value(s)",
					     conv, given - 1);
		} else if (given != 1) {
			return tfail(err, errlen, "%s takes one value, got %zu", fn_names[k->fn],
				     given);
		}
	}
	return true;
}

/* The inside of one {{ }} action: cmd ( | cmd )*, a cmd being a function
 * and its operands or one operand. */
static bool parse_action(const char *s, size_t len, struct tpart *part, char *err, size_t errlen)
{
	size_t i = 0, cap = 0;
	struct tcmd *cmd = NULL;
	bool want_cmd = true;

	while (i < len) {
		struct targ a = {0};
		size_t start;
		char *w;
		bool ok;

		if (isspace((unsigned char)s[i])) {
			i++;
			continue;
		}
		if (s[i] == '|') {
			if (want_cmd)
				return tfail(err, errlen, "`|` with nothing before it");
			want_cmd = true;
			i++;
			continue;
		}
		if (s[i] == '(' || s[i] == ')')
			return tfail(err, errlen, "parentheses are not supported in templates");
		if (want_cmd) {
			xgrow((void **)&part->cmds, &cap, part->ncmds + 1, sizeof(*part->cmds));
			cmd = &part->cmds[part->ncmds++];
			memset(cmd, 0, sizeof(*cmd)); /* FN_NONE */
		}
		if (cmd->nargs == TMPL_MAX_ARGS)
			return tfail(err, errlen, "too many arguments");
		if (s[i] == '"' || s[i] == '`') {
			a.kind = ARG_STRING;
			a.s = action_string(s, len, &i);
			if (!a.s)
				return tfail(err, errlen, "unterminated string");
			cmd->args[cmd->nargs++] = a;
			want_cmd = false;
			continue;
		}
		start = i;
		while (i < len && !isspace((unsigned char)s[i]) && s[i] != '|' && s[i] != '"' &&
		       s[i] != '(' && s[i] != ')')
			i++;
		w = xstrndup(s + start, i - start);
		ok = !want_cmd || command_word(w, part->ncmds > 1, &cmd->fn, err, errlen);
		if (ok && (!want_cmd || cmd->fn == FN_NONE)) {
			ok = parse_operand(w, &a, err, errlen);
			if (ok)
				cmd->args[cmd->nargs++] = a;
		}
		free(w);
		if (!ok)
			return false;
		want_cmd = false;
	}
	if (!part->ncmds)
		return tfail(err, errlen, "empty `{{ }}`");
	if (want_cmd)
		return tfail(err, errlen, "`|` with nothing after it");
	return check_pipeline(part, err, errlen);
}

/* A new part of t, zeroed. */
static struct tpart *add_part(struct alert_tmpl *t, size_t *cap)
{
	xgrow((void **)&t->parts, cap, t->n + 1, sizeof(*t->parts));
	memset(&t->parts[t->n], 0, sizeof(*t->parts));
	return &t->parts[t->n++];
}

static void add_text(struct alert_tmpl *t, size_t *cap, const char *s, size_t n)
{
	if (n)
		add_part(t, cap)->text = xstrndup(s, n);
}

struct alert_tmpl *alert_tmpl__parse(const char *src, char *err, size_t errlen)
{
	struct alert_tmpl *t = xcalloc(1, sizeof(*t));
	size_t cap = 0;
	const char *s = src;

	while (*s) {
		const char *open = strstr(s, "{{"), *body, *close, *end;
		size_t textlen;

		if (!open) {
			add_text(t, &cap, s, strlen(s));
			break;
		}
		textlen = open - s;
		body = open + 2;
		/* {{- trims the whitespace before, -}} the whitespace after. */
		if (body[0] == '-' && isspace((unsigned char)body[1])) {
			while (textlen && isspace((unsigned char)s[textlen - 1]))
				textlen--;
			body++;
		}
		add_text(t, &cap, s, textlen);
		close = strstr(body, "}}");
		if (!close) {
			tfail(err, errlen, "unclosed `{{`");
			goto fail;
		}
		end = close + 2;
		if (close > body && close[-1] == '-' && close - 1 > body &&
		    isspace((unsigned char)close[-2])) {
			close--;
			while (isspace((unsigned char)*end))
				end++;
		}
		while (body < close && isspace((unsigned char)*body))
			body++;
		s = end;
		if (!strncmp(body, "/*", 2))
			continue; /* a comment */
		if (!parse_action(body, close - body, add_part(t, &cap), err, errlen))
			goto fail;
	}
	return t;
fail:
	alert_tmpl__free(t);
	return NULL;
}

/* ---- rendering ---- */

struct tval {
	bool num;
	double v;
	char *s; /* owned */
};

static void tval_set_str(struct tval *x, char *s)
{
	free(x->s);
	x->s = s;
	x->num = false;
}

static double tval_num(const struct tval *x)
{
	char *end;
	double v;

	if (x->num)
		return x->v;
	v = strtod(x->s, &end);
	return end != x->s ? v : NAN;
}

static char *tval_str(const struct tval *x)
{
	char buf[64];

	if (!x->num)
		return xstrdup(x->s);
	alert_format_value(buf, sizeof(buf), x->v);
	return xstrdup(buf);
}

static struct tval arg_value(const struct targ *a, const struct alert_labels *l, double value)
{
	switch (a->kind) {
	case ARG_VALUE:
		return (struct tval){.num = true, .v = value};
	case ARG_LABEL:
		return (struct tval){.s = xstrdup(alert_labels__get(l, a->s))};
	case ARG_STRING:
		break;
	}
	return (struct tval){.s = xstrdup(a->s)};
}

static char *render_printf(const char *f, struct tval *args, size_t nargs)
{
	char *out = NULL;
	size_t outlen = 0, a = 0;
	FILE *m = open_memstream(&out, &outlen);

	for (; *f; f++) {
		char spec[32], buf[128];
		const char *start = f;
		size_t n, width, prec;

		if (*f != '%') {
			fputc(*f, m);
			continue;
		}
		if (f[1] == '%') {
			fputc('%', m);
			f++;
			continue;
		}
		f = printf_spec(f + 1, &width, &prec);
		n = f - start;
		if (n > sizeof(spec) - 4 || a >= nargs)
			continue;
		memcpy(spec, start, n);
		switch (*f) {
		case 'd':
			memcpy(spec + n, "lld", 4);
			fprintf(m, spec, (long long)tval_num(&args[a]));
			break;
		case 's':
		case 'v': {
			char *s = tval_str(&args[a]);

			memcpy(spec + n, "s", 2);
			fprintf(m, spec, s);
			free(s);
			break;
		}
		default: {
			double v = tval_num(&args[a]);

			if (alert_format_nonfinite(buf, sizeof(buf), v)) {
				fputs(buf, m);
			} else {
				spec[n] = *f;
				spec[n + 1] = '\0';
				fprintf(m, spec, v);
			}
		}
		}
		a++;
	}
	fclose(m);
	return out;
}

/* s in upper case, lower case or title case, by fn; s itself. */
static char *change_case(enum tfn fn, char *s)
{
	bool start = true;

	for (char *p = s; *p; p++) {
		if (fn == FN_TO_UPPER || (fn == FN_TITLE && start))
			*p = toupper((unsigned char)*p);
		else if (fn == FN_TO_LOWER)
			*p = tolower((unsigned char)*p);
		start = !isalnum((unsigned char)*p);
	}
	return s;
}

static void (*const humanizers[])(char *buf, size_t len, double v) = {
	[FN_HUMANIZE] = alert_format_humanize,
	[FN_HUMANIZE1024] = alert_format_humanize1024,
	[FN_HUMANIZE_DURATION] = alert_format_humanize_duration,
	[FN_HUMANIZE_PERCENTAGE] = alert_format_humanize_percentage,
};

/* One command of a pipeline: in becomes its result (in, piped, is its last
 * operand). */
static void run_cmd(const struct tcmd *k, struct tval *in, bool piped, const struct alert_labels *l,
		    double value)
{
	struct tval args[TMPL_MAX_ARGS + 1];
	size_t n = 0;
	char buf[64];
	double v;

	for (size_t i = 0; i < k->nargs; i++)
		args[n++] = arg_value(&k->args[i], l, value);
	if (piped) {
		args[n++] = *in;
		*in = (struct tval){0};
	}
	switch (k->fn) {
	case FN_NONE:
		free(in->s);
		*in = args[0];
		return;
	case FN_PRINTF:
		tval_set_str(in, render_printf(args[0].s, args + 1, n - 1));
		break;
	case FN_TO_UPPER:
	case FN_TO_LOWER:
	case FN_TITLE:
		tval_set_str(in, change_case(k->fn, tval_str(&args[0])));
		break;
	default:
		v = tval_num(&args[0]);
		if (!args[0].num && isnan(v)) {
			/* Not a number: Prometheus would fail the expansion;
			 * the text itself says more than an error would. */
			tval_set_str(in, tval_str(&args[0]));
			break;
		}
		humanizers[k->fn](buf, sizeof(buf), v);
		tval_set_str(in, xstrdup(buf));
	}
	for (size_t i = 0; i < n; i++)
		free(args[i].s);
}

char *alert_tmpl__render(const struct alert_tmpl *t, const struct alert_labels *l, double value)
{
	char *out = NULL;
	size_t outlen = 0;
	FILE *m = open_memstream(&out, &outlen);

	for (size_t i = 0; t && i < t->n; i++) {
		const struct tpart *p = &t->parts[i];
		struct tval v = {0};
		char *s;

		if (p->text) {
			fputs(p->text, m);
			continue;
		}
		for (size_t c = 0; c < p->ncmds; c++)
			run_cmd(&p->cmds[c], &v, c > 0, l, value);
		s = tval_str(&v);
		fputs(s, m);
		free(s);
		free(v.s);
	}
	fclose(m);
	return out;
}
