/* perfmap.c: JIT symbols for the symbolizer, from the perf map a runtime
 * (V8, the JVM with perf-map-agent, LuaJIT, ...) writes to
 * /tmp/perf-PID.map: one "START SIZE NAME" line per compiled function, START
 * and SIZE in hex with or without 0x. A runtime that re-uses code memory
 * lists a new function at the same start later in the file, so the last
 * listed wins. The symbolizer decides when to re-read. */
#include "symbolize/symbolize_internal.h"
#include "common/xalloc.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/search.h"

struct jit_cand {
	struct perfmap_entry e;
	size_t line;
};

static int jit_cand_cmp(const void *pa, const void *pb)
{
	const struct jit_cand *a = pa, *b = pb;

	if (a->e.start != b->e.start)
		return a->e.start < b->e.start ? -1 : 1;
	/* Later lines first, so that deduplication keeps them. */
	return a->line > b->line ? -1 : a->line < b->line;
}

static int parse_hex(char **p, uint64_t *out)
{
	char *end;

	if ((*p)[0] == '0' && ((*p)[1] == 'x' || (*p)[1] == 'X'))
		*p += 2;
	if (!isxdigit((unsigned char)**p))
		return -EINVAL;
	errno = 0;
	*out = strtoull(*p, &end, 16);
	if (errno || (*end != ' ' && *end != '\t'))
		return -EINVAL;
	*p = end + strspn(end, " \t");
	return 0;
}

int perfmap__load(struct perfmap *m, FILE *f, struct strpool *pool)
{
	char line[SYMBOLIZE_MAX_LINE];
	struct jit_cand *c = NULL;
	struct perfmap_entry *e = NULL;
	size_t n = 0, cap = 0, lineno = 0, kept = 0;
	int err = 0;

	while (fgets(line, sizeof(line), f)) {
		size_t len = strlen(line);
		uint64_t start, size;
		char *p = line;

		lineno++;
		if (len == sizeof(line) - 1 && line[len - 1] != '\n') {
			int ch;

			while ((ch = fgetc(f)) != EOF && ch != '\n')
				;
			continue;
		}
		while (len && (line[len - 1] == '\n' || line[len - 1] == '\r'))
			line[--len] = '\0';
		if (parse_hex(&p, &start) || parse_hex(&p, &size) || !size || !*p ||
		    start + size < start) {
			pr_debug("skipping malformed perf map line %zu: %.80s", lineno, line);
			continue;
		}
		if (n >= SYMBOLIZE_MAX_JIT_ENTRIES) {
			pr_warn("can't keep all JIT symbols: more than %u in a perf map",
				SYMBOLIZE_MAX_JIT_ENTRIES);
			break;
		}
		err = array_grow((void **)&c, &cap, n + 1, sizeof(*c));
		if (err)
			goto cleanup;
		c[n].e.start = start;
		c[n].e.end = start + size;
		c[n].e.name = strpool__intern(pool, p, strlen(p));
		c[n].line = lineno;
		n++;
	}
	if (n) /* qsort's array is declared nonnull */
		qsort(c, n, sizeof(*c), jit_cand_cmp);
	e = calloc(n ? n : 1, sizeof(*e));
	if (!e) {
		err = -ENOMEM;
		goto cleanup;
	}
	for (size_t i = 0; i < n; i++)
		if (!kept || e[kept - 1].start != c[i].e.start)
			e[kept++] = c[i].e;
	free(m->e);
	m->e = e;
	m->n = kept;
cleanup:
	free(c);
	return err;
}

const struct perfmap_entry *perfmap__find(const struct perfmap *m, uint64_t addr)
{
	size_t lo = PARTITION_POINT(m->n, i, m->e[i].start <= addr);

	if (!lo || addr >= m->e[lo - 1].end)
		return NULL;
	return &m->e[lo - 1];
}

void perfmap__release(struct perfmap *m)
{
	free(m->e);
	m->e = NULL;
	m->n = 0;
}
