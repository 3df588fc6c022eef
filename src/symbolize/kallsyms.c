/* kallsyms.c: kernel symbols for the symbolizer, read once from
 * /proc/kallsyms ("ADDR TYPE NAME[\t[MODULE]]"). Only text symbols are kept,
 * sorted by address, one per address (a global name wins over a local
 * alias); an address resolves to the greatest symbol at or below it. Zero
 * addresses -- what an unprivileged reader sees -- are dropped. */
#include "symbolize/symbolize_internal.h"
#include "common/xalloc.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/search.h"

#define KSYM_LINE 1024

struct ksym_cand {
	struct ksym sym;
	bool global;
};

static int ksym_cand_cmp(const void *pa, const void *pb)
{
	const struct ksym_cand *a = pa, *b = pb;

	if (a->sym.addr != b->sym.addr)
		return a->sym.addr < b->sym.addr ? -1 : 1;
	if (a->global != b->global)
		return a->global ? -1 : 1;
	return strcmp(a->sym.name, b->sym.name);
}

/* Parses one line; name and module point into line (module NULL for the
 * kernel proper). Returns 0, or -EINVAL for a line to skip. */
static int parse_ksym_line(char *line, uint64_t *addr, char *type, char **name, char **module)
{
	char *p, *end;

	if (!isxdigit((unsigned char)line[0]))
		return -EINVAL;
	errno = 0;
	*addr = strtoull(line, &p, 16);
	if (errno || p[0] != ' ' || !p[1] || p[2] != ' ')
		return -EINVAL;
	*type = p[1];
	*name = p + 3;
	end = *name + strcspn(*name, " \t\n");
	if (end == *name)
		return -EINVAL;
	*module = NULL;
	if (*end == '\t' && end[1] == '[') {
		char *close = strchr(end + 2, ']');

		if (!close)
			return -EINVAL;
		close[1] = '\0';
		*module = end + 1;
	}
	*end = '\0';
	return 0;
}

int ksyms__load(struct ksyms *k, FILE *f, struct strpool *pool)
{
	const char *kernel =
		strpool__intern(pool, "[kernel.kallsyms]", strlen("[kernel.kallsyms]"));
	struct ksym_cand *c = NULL;
	size_t n = 0, cap = 0, kept = 0;
	char line[KSYM_LINE];
	int err = 0;

	k->loaded = true;
	while (fgets(line, sizeof(line), f)) {
		size_t len = strlen(line);
		char *name, *module;
		uint64_t addr;
		char type;

		if (len == sizeof(line) - 1 && line[len - 1] != '\n') {
			int ch;

			while ((ch = fgetc(f)) != EOF && ch != '\n')
				;
			continue;
		}
		if (parse_ksym_line(line, &addr, &type, &name, &module) || !addr ||
		    !strchr("tTwW", type))
			continue;
		if (n >= SYMBOLIZE_MAX_KSYMS) {
			pr_warn("can't keep all kernel symbols: more than %u", SYMBOLIZE_MAX_KSYMS);
			break;
		}
		err = array_grow((void **)&c, &cap, n + 1, sizeof(*c));
		if (err)
			goto cleanup;
		c[n].sym.addr = addr;
		c[n].sym.name = strpool__add(pool, name, strlen(name));
		c[n].sym.module = module ? strpool__intern(pool, module, strlen(module)) : kernel;
		c[n].global = type == 'T' || type == 'W';
		n++;
	}
	if (n) /* qsort's array is declared nonnull */
		qsort(c, n, sizeof(*c), ksym_cand_cmp);
	ksyms__release(k);
	k->loaded = true;
	k->syms = calloc(n ? n : 1, sizeof(*k->syms));
	if (!k->syms) {
		err = -ENOMEM;
		goto cleanup;
	}
	for (size_t i = 0; i < n; i++)
		if (!kept || k->syms[kept - 1].addr != c[i].sym.addr)
			k->syms[kept++] = c[i].sym;
	k->n = kept;
cleanup:
	free(c);
	return err;
}

const struct ksym *ksyms__find(const struct ksyms *k, uint64_t addr)
{
	size_t lo = PARTITION_POINT(k->n, i, k->syms[i].addr <= addr);

	return lo ? &k->syms[lo - 1] : NULL;
}

void ksyms__release(struct ksyms *k)
{
	free(k->syms);
	k->syms = NULL;
	k->n = 0;
	k->loaded = false;
}
