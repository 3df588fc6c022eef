/* folded.c: the folded-stack text format of flamegraph.pl and friends, one
 * "comm;root;...;leaf COUNT" line per distinct stack. The writer backs
 * `sonde record -o x.folded`; the reader lets `sonde` load such files (and
 * the tests round-trip through them). */
#include "profile/profile.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "common/sat.h"
#include "common/xalloc.h"

/* Longest line the reader accepts; a longer one is malformed, not a reason
 * to allocate without end. */
#define FOLDED_MAX_LINE (1024 * 1024)
#define KERNEL_SUFFIX "_[k]"

struct strbuf {
	char *buf;
	size_t len, cap;
};

/* Room for more bytes: 0 or -ENOMEM (the buffer is sized by the input). */
static int strbuf__reserve(struct strbuf *sb, size_t more)
{
	if (more > SIZE_MAX - sb->len)
		return -ENOMEM;
	return array_grow((void **)&sb->buf, &sb->cap, sb->len + more, 1);
}

static bool is_blank(char c)
{
	return c == ' ' || c == '\t' || c == '\r';
}

/* A name the format would lose: empty, or only blanks and line breaks
 * (the reader takes blanks at the end of a line for the count's). */
static bool name_is_blank(const char *s)
{
	for (; *s; s++)
		if (!is_blank(*s) && *s != '\n')
			return false;
	return true;
}

/* Appends s with the characters the format can't carry replaced: it has no
 * escaping, so a ';' inside a name becomes ':' and a line break a space,
 * and a blank name is written "[unknown]", keeping every line parseable. */
static int strbuf__add_name(struct strbuf *sb, const char *s)
{
	size_t n, i;
	char *out;
	int err;

	if (name_is_blank(s))
		s = "[unknown]";
	n = strlen(s);
	err = strbuf__reserve(sb, n);
	if (err)
		return err;
	out = sb->buf + sb->len;
	for (i = 0; i < n; i++) {
		char c = s[i];

		if (c == ';')
			c = ':';
		else if (c == '\n' || c == '\r')
			c = ' ';
		out[i] = c;
	}
	sb->len += n;
	return 0;
}

static int strbuf__add(struct strbuf *sb, const char *s, size_t n)
{
	int err = strbuf__reserve(sb, n);

	if (err)
		return err;
	memcpy(sb->buf + sb->len, s, n);
	sb->len += n;
	return 0;
}

struct folded_line {
	union {
		size_t off; /* while the buffer still grows */
		const char *text;
	};
	int64_t count;
};

static int folded_line__cmp(const void *a, const void *b)
{
	const struct folded_line *x = a, *y = b;

	return strcmp(x->text, y->text);
}

/* Appends the NUL-terminated line text of sample s (without the count). */
static int append_stack(struct strbuf *sb, const struct profile *p, const struct prof_sample *s)
{
	const char *comm = profile__str(p, s->comm);
	bool first = true;
	uint32_t i;
	int err = 0;

	if (!name_is_blank(comm)) {
		err = strbuf__add_name(sb, comm);
		first = false;
	}
	for (i = s->nlocs; i-- > 0 && !err;) {
		const struct prof_location *loc = &p->locs[s->locs[i]];

		if (!first)
			err = strbuf__add(sb, ";", 1);
		if (!err)
			err = strbuf__add_name(sb, profile__str(p, loc->func));
		if (!err && loc->kernel)
			err = strbuf__add(sb, KERNEL_SUFFIX, strlen(KERNEL_SUFFIX));
		first = false;
	}
	if (!err && first)
		err = strbuf__add(sb, "[unknown]", strlen("[unknown]"));
	if (!err)
		err = strbuf__add(sb, "", 1);
	return err;
}

int profile__write_folded(const struct profile *p, FILE *f)
{
	struct strbuf sb = {0};
	struct folded_line *lines = NULL;
	size_t i, n = 0;
	int err = 0;

	if (p->nsamples) {
		lines = calloc(p->nsamples, sizeof(*lines));
		if (!lines) {
			err = -ENOMEM;
			goto cleanup;
		}
	}
	for (i = 0; i < p->nsamples; i++) {
		lines[i].off = sb.len;
		lines[i].count = p->samples[i].count;
		err = append_stack(&sb, p, &p->samples[i]);
		if (err)
			goto cleanup;
	}
	for (i = 0; i < p->nsamples; i++)
		lines[i].text = sb.buf + lines[i].off;

	/* Sorting brings together the lines of the same stack taken in
	 * different processes and threads, which folded can't tell apart. */
	if (p->nsamples)
		qsort(lines, p->nsamples, sizeof(*lines), folded_line__cmp);
	for (i = 0; i < p->nsamples; i++) {
		if (n && !strcmp(lines[n - 1].text, lines[i].text))
			lines[n - 1].count = sat_add_i64(lines[n - 1].count, lines[i].count);
		else
			lines[n++] = lines[i];
	}
	for (i = 0; i < n; i++) {
		fputs(lines[i].text, f);
		fprintf(f, " %" PRId64 "\n", lines[i].count);
	}
	if (fflush(f) || ferror(f))
		err = -EIO;

cleanup:
	free(lines);
	free(sb.buf);
	return err;
}

/* Reads one line without its '\n' into sb (NUL-terminated). Returns 1, 0 at
 * the end of the input, -EINVAL for a line over FOLDED_MAX_LINE or holding a
 * NUL byte, -EIO for a read error. */
static int read_line(FILE *f, struct strbuf *sb)
{
	int c, err;

	sb->len = 0;
	while ((c = getc_unlocked(f)) != EOF && c != '\n') {
		if (!c || sb->len >= FOLDED_MAX_LINE)
			return -EINVAL;
		if (sb->len + 1 >= sb->cap) {
			err = strbuf__reserve(sb, 2);
			if (err)
				return err;
		}
		sb->buf[sb->len++] = (char)c;
	}
	if (ferror(f))
		return -EIO;
	if (c == EOF && !sb->len)
		return 0;
	err = strbuf__reserve(sb, 1);
	if (err)
		return err;
	sb->buf[sb->len] = '\0';
	return 1;
}

/* Parses "comm;root;...;leaf COUNT" (modified in place) into p. */
static int parse_line(struct profile *p, char *s, size_t len, struct prof_frame *frames)
{
	char *count_str, *end, *sep;
	const char *comm;
	int64_t count = 0;
	size_t n = 0;

	while (len && is_blank(s[len - 1]))
		s[--len] = '\0';
	count_str = strrchr(s, ' ');
	if (!count_str || !count_str[1])
		return -EINVAL;
	for (end = count_str + 1; *end; end++) {
		if (*end < '0' || *end > '9')
			return -EINVAL;
		if (count > (INT64_MAX - (*end - '0')) / 10)
			return -EINVAL;
		count = count * 10 + (*end - '0');
	}
	end = count_str;
	while (end > s && is_blank(end[-1]))
		end--;
	*end = '\0';
	if (end == s)
		return -EINVAL;

	/* Frames from the leaf back, so a stack deeper than PROF_MAX_FRAMES
	 * keeps its leaf-most frames, as a kernel stack capture does. */
	while ((sep = strrchr(s, ';'))) {
		char *name = sep + 1;
		size_t nlen = strlen(name), klen = strlen(KERNEL_SUFFIX);

		*sep = '\0';
		if (!nlen)
			return -EINVAL;
		if (n == PROF_MAX_FRAMES)
			continue;
		memset(&frames[n], 0, sizeof(frames[n]));
		if (nlen > klen && !strcmp(name + nlen - klen, KERNEL_SUFFIX)) {
			name[nlen - klen] = '\0';
			frames[n].kernel = true;
		}
		frames[n++].func = name;
	}
	comm = s;
	/* Fails only when the counts add up past INT64_MAX: a bad file too. */
	return profile__add(p, 0, 0, comm, frames, n, count) ? -EINVAL : 0;
}

int profile__read_folded(struct profile *p, FILE *f, size_t *line)
{
	struct prof_frame *frames;
	struct strbuf sb = {0};
	size_t lineno = 0;
	int err = 0, r;

	frames = calloc(PROF_MAX_FRAMES, sizeof(*frames));
	if (!frames) {
		err = -ENOMEM;
		goto cleanup;
	}
	while ((r = read_line(f, &sb)) > 0) {
		size_t i;

		lineno++;
		for (i = 0; i < sb.len && is_blank(sb.buf[i]); i++)
			;
		if (i == sb.len)
			continue;
		err = parse_line(p, sb.buf, sb.len, frames);
		if (err)
			goto cleanup;
	}
	if (r < 0) {
		/* The line that failed is the one after the last complete one. */
		lineno++;
		err = r;
	}

cleanup:
	if (line)
		*line = lineno;
	free(frames);
	free(sb.buf);
	return err;
}
