/* fuzz_unwind_table.c: libFuzzer target for the unwind-table builder
 * (src/unwind/table.c): the input is an ELF file, built into a table once as
 * a file -- written to a memfd, opened by path as the agent opens a mapped
 * binary -- with room for many rows, and once as an in-memory image
 * (elf_memory()) with room for few, so that the row bound is hit too. A
 * build must end (the work per file is bounded) in heap proportional to the
 * input, and give an error with a reason or a table whose rows are sorted
 * by strictly increasing offset, of known kinds, with fields that fit their
 * kind, no more than the bound, each found by unw_table__lookup() at its
 * own offset. Seeds: build/fixtures/pie, pie-stripped and libfix.so, and
 * the fixture program with its CFI in .debug_frame, plain and compressed
 * (fuzz.mk). */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fuzz_common.h"
#include "unwind/table.h"

#define MANY_ROWS (1u << 16)
#define FEW_ROWS 64

static int memfd = -1;
static char memfd_path[64];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	fuzz_setup();
	FUZZ_CHECK(elf_version(EV_CURRENT) != EV_NONE, "can't initialize libelf");
	memfd = memfd_create("fuzz_unwind_table", MFD_CLOEXEC);
	FUZZ_CHECK(memfd >= 0, "memfd_create: %s", strerror(errno));
	snprintf(memfd_path, sizeof(memfd_path), "/proc/self/fd/%d", memfd);
	return 0;
}

/* The fields a row of each kind may hold. */
static void check_row(const struct unw_row *r, size_t i)
{
	FUZZ_CHECK(r->kind <= UNW_CFA_DEREF_RBP, "row %zu of kind %u", i, r->kind);
	if (r->kind == UNW_CFA_RSP || r->kind == UNW_CFA_RBP || r->kind == UNW_CFA_DEREF_RBP)
		return;
	FUZZ_CHECK(!r->rbp, "row %zu of kind %u with rbp %d", i, r->kind, r->rbp);
	if (r->kind == UNW_PLT)
		FUZZ_CHECK(r->cfa >= 0 && r->cfa <= 15, "PLT row %zu with cfa %d", i, r->cfa);
	else
		FUZZ_CHECK(!r->cfa, "row %zu of kind %u with cfa %d", i, r->kind, r->cfa);
}

/* The result of a build with room for max_rows rows. */
static void check_table(int ret, const struct unw_table *t, size_t max_rows, const char *err)
{
	if (ret) {
		FUZZ_CHECK(ret == -ENOEXEC || ret == -ENODATA || ret == -E2BIG || ret == -EINVAL ||
				   ret == -ENOMEM,
			   "error %d", ret);
		FUZZ_CHECK(err[0], "error %d without a reason", ret);
		FUZZ_CHECK(!t->rows && !t->n, "rows left after error %d", ret);
		return;
	}
	FUZZ_CHECK(t->n <= max_rows, "%zu rows for a bound of %zu", t->n, max_rows);
	FUZZ_CHECK(t->n == t->st.rows, "%zu rows, stats say %zu", t->n, t->st.rows);
	FUZZ_CHECK(t->st.source == UNW_SRC_EH_FRAME || t->st.source == UNW_SRC_DEBUG_FRAME,
		   "source %d", t->st.source);
	for (size_t i = 0; i < t->n; i++) {
		check_row(&t->rows[i], i);
		FUZZ_CHECK(!i || t->rows[i - 1].off < t->rows[i].off, "row %zu at %#x after %#x", i,
			   t->rows[i].off, t->rows[i - 1].off);
		FUZZ_CHECK(unw_table__lookup(t, t->rows[i].off) == &t->rows[i],
			   "row %zu not found at its offset", i);
	}
	if (t->n)
		FUZZ_CHECK(!unw_table__lookup(t, t->rows[0].off - 1) || !t->rows[0].off,
			   "a row below the first");
}

/* Checks the heap a build took: the input's copies, an inflated
 * .debug_frame (64 times its size at most), libdw's state, and the ranges
 * and rows, bounded by max_rows. */
static void check_heap(size_t size, size_t max_rows)
{
	size_t heap = fuzz_heap_end();

	FUZZ_CHECK(heap <= 128 * size + 64 * max_rows + FUZZ_HEAP_FIXED,
		   "%zu bytes of heap for %zu bytes of input", heap, size);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct unw_table t;
	char err[512], *image;
	Elf *elf;
	int ret;

	fuzz_memfd_write(memfd, data, size);
	fuzz_heap_begin();
	ret = unw_table__build_file(memfd_path, MANY_ROWS, &t, err, sizeof(err));
	check_heap(size, MANY_ROWS);
	check_table(ret, &t, MANY_ROWS, err);
	unw_table__free(&t);

	/* Exactly size bytes, so that ASan sees a read past the end. */
	image = malloc(size ? size : 1);
	FUZZ_CHECK(image, "out of memory");
	memcpy(image, data, size);
	elf = elf_memory(image, size);
	if (elf) {
		fuzz_heap_begin();
		ret = unw_table__build_elf(elf, FEW_ROWS, &t, err, sizeof(err));
		check_heap(size, FEW_ROWS);
		check_table(ret, &t, FEW_ROWS, err);
		unw_table__free(&t);
		elf_end(elf);
	}
	free(image);
	return 0;
}
