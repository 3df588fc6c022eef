/* text.h: two small readings of text that several rooms share -- a path's
 * last component, and label lines ("NAME=VALUE", one per line: how the
 * agent's service namer hands a job's labels to its profiles and metrics,
 * agent/service.h). */
#ifndef SONDE_COMMON_TEXT_H
#define SONDE_COMMON_TEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <string.h>

/* What follows the last '/' of path (path itself when it has none; "" when
 * it ends with one). */
static inline const char *path_base(const char *path)
{
	const char *slash = strrchr(path, '/');

	return slash ? slash + 1 : path;
}

/* One label line: its name and value, not NUL-terminated. */
struct label_line {
	const char *name, *value;
	size_t name_len, value_len;
};

/* The next label line at *s (NULL or "" at the end), *s stepped past it;
 * lines without a name before their '=' are skipped. false at the end. */
static inline bool label_line__next(const char **s, struct label_line *out)
{
	while (*s && **s) {
		const char *l = *s;
		size_t len = strcspn(l, "\n"), eq = strcspn(l, "=");

		*s = l + len + (l[len] == '\n');
		if (eq < len && eq) {
			*out = (struct label_line){l, l + eq + 1, eq, len - eq - 1};
			return true;
		}
	}
	return false;
}

#endif
