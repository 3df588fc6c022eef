/* fuzz_maps.c: libFuzzer target for the /proc/PID/maps parser of the
 * symbolizer: maps__parse() over the input as a stream, maps__parse_line()
 * over each of its lines. A line handed back must be well formed -- start
 * below end, a path within the line, without a line break, whose length is
 * path_len, the kind matching the path -- and a non-zero return of the
 * callback must stop the parse and come back from it. Seeds:
 * tests/fuzz/seeds/maps/. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "symbolize/symbolize_internal.h"

/* The callback stops the parse at a mapping of this path. */
#define STOP_PATH "[stop]"
#define STOP_RET 4242

struct maps_state {
	size_t calls;
	bool stopped;
};

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	fuzz_setup();
	return 0;
}

static void check_line(const struct maps_line *l)
{
	FUZZ_CHECK(l->start < l->end, "mapping %#llx-%#llx", (unsigned long long)l->start,
		   (unsigned long long)l->end);
	FUZZ_CHECK(l->path, "no path");
	FUZZ_CHECK(strlen(l->path) == l->path_len, "path_len %zu for a path of %zu bytes",
		   l->path_len, strlen(l->path));
	FUZZ_CHECK(!strchr(l->path, '\n'), "line break in the path");
	FUZZ_CHECK((l->kind == MAPPING_FILE) == (l->path[0] == '/' && strcmp(l->path, "//anon")),
		   "kind %d for path %s", l->kind, l->path);
	FUZZ_CHECK(l->kind != MAPPING_VDSO || !strcmp(l->path, "[vdso]"), "vdso kind for %s",
		   l->path);
}

static int on_line(const struct maps_line *l, void *ctx)
{
	struct maps_state *st = ctx;

	FUZZ_CHECK(!st->stopped, "callback called after it stopped the parse");
	check_line(l);
	st->calls++;
	if (!strcmp(l->path, STOP_PATH)) {
		st->stopped = true;
		return STOP_RET;
	}
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct maps_state st = {0};
	struct maps_line ml;
	size_t off, len;
	FILE *f;
	int err;

	f = fuzz_fopen(data, size);
	err = maps__parse(f, on_line, &st);
	fclose(f);
	FUZZ_CHECK(st.stopped ? err == STOP_RET : !err, "maps__parse returned %d", err);
	FUZZ_CHECK(st.calls <= SYMBOLIZE_MAX_MAPPINGS, "%zu mappings", st.calls);

	/* Each line on its own, '\n' included, in a buffer of its exact size. */
	for (off = 0; off < size; off += len) {
		const uint8_t *nl = memchr(data + off, '\n', size - off);
		char *line;

		len = nl ? (size_t)(nl - (data + off)) + 1 : size - off;
		line = fuzz_strdup(data + off, len);
		err = maps__parse_line(line, &ml);
		FUZZ_CHECK(!err || err == -EINVAL, "maps__parse_line returned %d", err);
		if (!err) {
			check_line(&ml);
			FUZZ_CHECK(ml.path >= line && ml.path + ml.path_len <= line + len,
				   "path outside the line");
		}
		free(line);
	}
	return 0;
}
