/* fuzz_sideband.c: libFuzzer target for the kernel's process records as
 * the sideband reads them (sideband_parse, src/probe/sideband.c) and for
 * what the symbolizer makes of them (symbolizer__mmap, __exec, __fork,
 * __exit: the images of src/symbolize/procs.c, their overlapping mappings
 * cut and split). The input is a run of records, each with its own header;
 * a record's decoded strings must lie inside it and end there, a build-id
 * be at most 20 bytes; the symbolizer must hold what it is given without a
 * crash, a leak or a heap out of proportion. Seeds:
 * gen_seeds writes records of every kind to build/fuzz/seeds/sideband/. */
#include <errno.h>
#include <linux/perf_event.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "probe/sideband.h"
#include "fuzz_common.h"
#include "symbolize/symbolize.h"

/* Pids no process has (pid_max is at most 2^22): nothing is read from
 * /proc for them, and no file is opened -- the input names only the
 * symbolizer's own state. */
#define FAKE_PID 0x7fff0000u

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	fuzz_setup();
	return 0;
}

static void check_rec(const struct sideband_rec *r, const uint8_t *rec, size_t size)
{
	FUZZ_CHECK(r->kind <= SIDEBAND_OTHER, "kind %d", r->kind);
	FUZZ_CHECK(r->build_id_size <= SIDEBAND_BUILD_ID_MAX, "build-id of %u bytes",
		   r->build_id_size);
	if (r->kind == SIDEBAND_MMAP || r->kind == SIDEBAND_COMM) {
		const char *p = r->path;

		FUZZ_CHECK(p && (const uint8_t *)p >= rec && (const uint8_t *)p < rec + size,
			   "string outside the record");
		FUZZ_CHECK(memchr(p, 0, (size_t)(rec + size - (const uint8_t *)p)),
			   "string not ended inside the record");
	}
}

static void apply(struct symbolizer *s, const struct sideband_rec *r)
{
	struct sym_mmap m = {
		.pid = r->pid % 8 + FAKE_PID,
		.ts_ns = r->time_ns,
		.start = r->addr,
		.len = r->len,
		.pgoff = r->pgoff,
		.path = r->path,
		.build_id = r->build_id_size ? r->build_id : NULL,
		.build_id_len = r->build_id_size,
	};

	switch (r->kind) {
	case SIDEBAND_MMAP:
		symbolizer__mmap(s, &m);
		break;
	case SIDEBAND_COMM:
		if (r->exec)
			symbolizer__exec(s, r->pid % 8 + FAKE_PID, r->time_ns, r->path);
		else
			symbolizer__rename(s, r->pid % 8 + FAKE_PID, r->path);
		break;
	case SIDEBAND_FORK:
		symbolizer__fork(s, r->ppid % 8 + FAKE_PID, r->pid % 8 + FAKE_PID, r->time_ns);
		break;
	case SIDEBAND_EXIT:
		symbolizer__exit(s, r->pid % 8 + FAKE_PID, r->time_ns);
		break;
	default:
		break;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct symbolizer *s = symbolizer__new();
	uint8_t *copy = malloc(size ? size : 1);
	size_t off = 0, heap;

	FUZZ_CHECK(s, "symbolizer__new");
	/* No reads of /proc for the fuzzer's made-up pids 0..7 that exist
	 * on the machine: their mappings come from the input only. */
	symbolizer__set_debug_dir(s, NULL);
	memcpy(copy, data, size);
	fuzz_heap_begin();
	while (off + sizeof(struct perf_event_header) <= size) {
		struct perf_event_header h;
		struct sideband_rec r;
		size_t n;

		memcpy(&h, copy + off, sizeof(h));
		n = h.size < sizeof(h) ? sizeof(h) : h.size;
		if (n > size - off)
			n = size - off;
		if (!sideband_parse(copy + off, n, &r)) {
			check_rec(&r, copy + off, n);
			apply(s, &r);
			symbolizer__image(s, r.pid % 8 + FAKE_PID, r.time_ns);
		}
		off += n;
	}
	heap = fuzz_heap_end();
	FUZZ_CHECK(heap <= FUZZ_HEAP_FIXED + 64 * size,
		   "%zu bytes of heap for %zu bytes of records", heap, size);
	symbolizer__free(s);
	free(copy);
	return 0;
}
