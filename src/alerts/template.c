/* template.c: the templates of alert summaries, descriptions and label
 * values -- Prometheus' {{ $labels.pid }}, {{ $value }}, pipelines through
 * humanize, humanize1024, humanizeDuration, humanizePercentage, printf,
 * toUpper, toLower and title, and the short form {{pid}} / {{value}}. Parsed
 * at rule load (so that a typo is a load error with its line) and rendered
 * for each alert on every evaluation. Also the number formats they share with
 * the sinks. Used by rules.c and engine.c. */
#include "alerts/alerts_internal.h"

#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/xalloc.h"

/* ---- number formats ---- */

static bool special(char *buf, size_t len, double v)
{
	if (isnan(v))
		snprintf(buf, len, "NaN");
	else if (isinf(v))
		snprintf(buf, len, v > 0 ? "+Inf" : "-Inf");
	else
		return false;
	return true;
}

void alert_format_value(char *buf, size_t len, double v)
{
	char tmp[40];
	int digits, exp;

	if (special(buf, len, v))
		return;
	if (v == 0) {
		snprintf(buf, len, "0");
		return;
	}
	/* The shortest decimal that reads back as v, as Go's strconv does. */
	for (digits = 1; digits < 17; digits++) {
		snprintf(tmp, sizeof(tmp), "%.*e", digits - 1, v);
		if (strtod(tmp, NULL) == v)
			break;
	}
	snprintf(tmp, sizeof(tmp), "%.*e", digits - 1, v);
	exp = atoi(strchr(tmp, 'e') + 1);
	if (exp < -4 || exp >= 6)
		snprintf(buf, len, "%s", tmp);
	else
		snprintf(buf, len, "%.*f", digits - 1 - exp > 0 ? digits - 1 - exp : 0, v);
}

/* Go's %.4g: C's, but NaN and Inf spelled the Go way. */
static void g4(char *buf, size_t len, double v, const char *suffix)
{
	char tmp[40];

	if (!special(tmp, sizeof(tmp), v))
		snprintf(tmp, sizeof(tmp), "%.4g", v);
	snprintf(buf, len, "%s%s", tmp, suffix);
}

void alert_format_humanize(char *buf, size_t len, double v)
{
	static const char *const big[] = {"k", "M", "G", "T", "P", "E", "Z", "Y"};
	static const char *const small[] = {"m", "u", "n", "p", "f", "a", "z", "y"};
	const char *prefix = "";

	if (v == 0 || !isfinite(v)) {
		g4(buf, len, v, "");
		return;
	}
	if (fabs(v) >= 1) {
		for (size_t i = 0; i < ARRAY_SIZE(big) && fabs(v) >= 1000; i++) {
			prefix = big[i];
			v /= 1000;
		}
	} else {
		for (size_t i = 0; i < ARRAY_SIZE(small) && fabs(v) < 1; i++) {
			prefix = small[i];
			v *= 1000;
		}
	}
	g4(buf, len, v, prefix);
}

void alert_format_humanize1024(char *buf, size_t len, double v)
{
	static const char *const big[] = {"ki", "Mi", "Gi", "Ti", "Pi", "Ei", "Zi", "Yi"};
	const char *prefix = "";

	if (fabs(v) <= 1 || !isfinite(v)) {
		g4(buf, len, v, "");
		return;
	}
	for (size_t i = 0; i < ARRAY_SIZE(big) && fabs(v) >= 1024; i++) {
		prefix = big[i];
		v /= 1024;
	}
	g4(buf, len, v, prefix);
}

void alert_format_humanize_duration(char *buf, size_t len, double v)
{
	static const char *const small[] = {"m", "u", "n", "p", "f", "a", "z", "y"};
	char suffix[4];
	const char *prefix = "";

	if (!isfinite(v)) {
		g4(buf, len, v, "");
		return;
	}
	if (v == 0) {
		snprintf(buf, len, "0s");
		return;
	}
	if (fabs(v) >= 1) {
		const char *sign = v < 0 ? "-" : "";
		long long s = (long long)fabs(v);
		long long days = s / 86400, hours = s / 3600 % 24, minutes = s / 60 % 60;

		s %= 60;
		if (days)
			snprintf(buf, len, "%s%lldd %lldh %lldm %llds", sign, days, hours, minutes,
				 s);
		else if (hours)
			snprintf(buf, len, "%s%lldh %lldm %llds", sign, hours, minutes, s);
		else if (minutes)
			snprintf(buf, len, "%s%lldm %llds", sign, minutes, s);
		else
			snprintf(buf, len, "%s%.4gs", sign, fabs(v));
		return;
	}
	for (size_t i = 0; i < ARRAY_SIZE(small) && fabs(v) < 1; i++) {
		prefix = small[i];
		v *= 1000;
	}
	snprintf(suffix, sizeof(suffix), "%ss", prefix);
	g4(buf, len, v, suffix);
}

void alert_format_humanize_percentage(char *buf, size_t len, double v)
{
	g4(buf, len, v * 100, "%");
}

void alert_format_rfc3339(char *buf, size_t len, int64_t ms)
{
	time_t s = (time_t)(ms / 1000);
	int frac = (int)(ms % 1000);
	struct tm tm;

	if (frac < 0) {
		frac += 1000;
		s--;
	}
	gmtime_r(&s, &tm);
	snprintf(buf, len, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1,
		 tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, frac);
}

/* ---- templates ---- */

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

static bool is_label_name(const char *s)
{
	if (!isalpha((unsigned char)*s) && *s != '_')
		return false;
	for (s++; *s; s++)
		if (!isalnum((unsigned char)*s) && *s != '_')
			return false;
	return true;
}

/* Counts the conversions of a printf format; false if one isn't allowed. */
static bool printf_conversions(const char *f, size_t *n, char *err, size_t errlen)
{
	*n = 0;
	for (; *f; f++) {
		if (*f != '%')
			continue;
		if (*++f == '%')
			continue;
		f += strspn(f, "-+ #0");
		if (strspn(f, "0123456789") > 2)
			return tfail(err, errlen, "printf: width above 99");
		f += strspn(f, "0123456789");
		if (*f == '.') {
			f++;
			if (strspn(f, "0123456789") > 2)
				return tfail(err, errlen, "printf: precision above 99");
			f += strspn(f, "0123456789");
		}
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
	if (!is_label_name(label))
		return tfail(err, errlen, "`%s` is not a label name", label);
	a->kind = ARG_LABEL;
	a->s = xstrdup(label);
	return true;
}

static const char *const go_keywords[] = {"if",	    "else",  "end",	 "range", "with",
					  "define", "block", "template", "len",	  "index",
					  "and",    "or",    "not",	 "eq",	  "ne"};

/* The inside of one {{ }} action: cmd ( | cmd )*. */
static bool parse_action(const char *s, size_t len, struct tpart *part, char *err, size_t errlen)
{
	size_t i = 0, cap = 0;
	struct tcmd *cmd = NULL;
	bool want_cmd = true;

	while (i < len) {
		struct targ a = {0};
		char *w;
		size_t start;

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
			memset(cmd, 0, sizeof(*cmd));
		}
		if (cmd->nargs == TMPL_MAX_ARGS)
			return tfail(err, errlen, "too many arguments");
		if (s[i] == '"' || s[i] == '`') {
			char q = s[i++];
			size_t n = 0;

			w = xmalloc(len - i + 1);
			for (; i < len && s[i] != q; i++) {
				char c = s[i];

				if (c == '\\' && q == '"' && i + 1 < len) {
					c = s[++i];
					c = c == 'n' ? '\n' : c == 't' ? '\t' : c;
				}
				w[n++] = c;
			}
			w[n] = '\0';
			if (i++ >= len) {
				free(w);
				return tfail(err, errlen, "unterminated string");
			}
			a.kind = ARG_STRING;
			a.s = w;
			if (want_cmd)
				cmd->fn = FN_NONE;
			cmd->args[cmd->nargs++] = a;
			want_cmd = false;
			continue;
		}
		start = i;
		while (i < len && !isspace((unsigned char)s[i]) && s[i] != '|' && s[i] != '"' &&
		       s[i] != '(' && s[i] != ')')
			i++;
		w = xstrndup(s + start, i - start);
		if (want_cmd) {
			size_t f;

			for (f = 1; f < ARRAY_SIZE(fn_names); f++)
				if (!strcmp(w, fn_names[f]))
					break;
			if (f < ARRAY_SIZE(fn_names)) {
				cmd->fn = (enum tfn)f;
				free(w);
				want_cmd = false;
				continue;
			}
			for (size_t k = 0; k < ARRAY_SIZE(go_keywords); k++)
				if (!strcmp(w, go_keywords[k])) {
					tfail(err, errlen,
					      "`%s` is not supported: templates hold values, "
					      "labels "
					      "and the functions humanize, humanize1024, "
					      "humanizeDuration, humanizePercentage, printf, "
					      "toUpper, "
					      "toLower, title",
					      w);
					free(w);
					return false;
				}
			if (part->ncmds > 1 && (w[0] == '$' || w[0] == '.')) {
				tfail(err, errlen, "only functions can follow `|`");
				free(w);
				return false;
			}
			if (part->ncmds > 1) {
				tfail(err, errlen,
				      "unknown function `%s` (known: humanize, humanize1024, "
				      "humanizeDuration, humanizePercentage, printf, toUpper, "
				      "toLower, title)",
				      w);
				free(w);
				return false;
			}
			cmd->fn = FN_NONE;
		}
		if (!parse_operand(w, &a, err, errlen)) {
			free(w);
			return false;
		}
		free(w);
		cmd->args[cmd->nargs++] = a;
		want_cmd = false;
	}
	if (!part->ncmds)
		return tfail(err, errlen, "empty `{{ }}`");
	if (want_cmd)
		return tfail(err, errlen, "`|` with nothing after it");
	for (size_t c = 0; c < part->ncmds; c++) {
		struct tcmd *k = &part->cmds[c];
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

static void add_text(struct alert_tmpl *t, size_t *cap, const char *s, size_t n)
{
	if (!n)
		return;
	xgrow((void **)&t->parts, cap, t->n + 1, sizeof(*t->parts));
	memset(&t->parts[t->n], 0, sizeof(*t->parts));
	t->parts[t->n++].text = xstrndup(s, n);
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
		if (!strncmp(body, "/*", 2)) {
			s = end; /* a comment */
			continue;
		}
		xgrow((void **)&t->parts, &cap, t->n + 1, sizeof(*t->parts));
		memset(&t->parts[t->n], 0, sizeof(*t->parts));
		t->n++;
		if (!parse_action(body, close - body, &t->parts[t->n - 1], err, errlen))
			goto fail;
		s = end;
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
		size_t n;

		if (*f != '%') {
			fputc(*f, m);
			continue;
		}
		if (f[1] == '%') {
			fputc('%', m);
			f++;
			continue;
		}
		f++;
		f += strspn(f, "-+ #0");
		f += strspn(f, "0123456789");
		if (*f == '.') {
			f++;
			f += strspn(f, "0123456789");
		}
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

			if (special(buf, sizeof(buf), v)) {
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
	case FN_TITLE: {
		char *s = tval_str(&args[0]);
		bool start = true;

		for (char *p = s; *p; p++) {
			if (k->fn == FN_TO_UPPER || (k->fn == FN_TITLE && start))
				*p = toupper((unsigned char)*p);
			else if (k->fn == FN_TO_LOWER)
				*p = tolower((unsigned char)*p);
			start = !isalnum((unsigned char)*p);
		}
		tval_set_str(in, s);
		break;
	}
	default:
		v = tval_num(&args[0]);
		if (!args[0].num && isnan(v)) {
			/* Not a number: Prometheus would fail the expansion;
			 * the text itself says more than an error would. */
			tval_set_str(in, tval_str(&args[0]));
			break;
		}
		if (k->fn == FN_HUMANIZE)
			alert_format_humanize(buf, sizeof(buf), v);
		else if (k->fn == FN_HUMANIZE1024)
			alert_format_humanize1024(buf, sizeof(buf), v);
		else if (k->fn == FN_HUMANIZE_DURATION)
			alert_format_humanize_duration(buf, sizeof(buf), v);
		else
			alert_format_humanize_percentage(buf, sizeof(buf), v);
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
