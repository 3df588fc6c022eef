/* fuzz_elf.c: libFuzzer target for the ELF objects of the symbolizer (elf.c):
 * the input is opened as a file -- written to a memfd and handed to
 * elf_object__open_fd(), as a mapped binary would be -- and, when small
 * enough, as an in-memory image through elf_object__open_memory(), the vdso
 * path. Each object's symbols are loaded, in heap proportional to the input,
 * and checked: sorted, one per address, non-empty, each found by
 * elf_object__lookup() at its own first and last address, also after the file
 * is closed; a build-id is lowercase hex of a bounded length; file offsets
 * inside a PT_LOAD segment convert to addresses; the DWARF lines and inlined
 * functions (dwarf.c) at each symbol and at addresses of the input's choosing
 * are bounded and the same when asked again. Seeds: build/fixtures/pie,
 * pie-stripped and libfix.so, copied by fuzz.mk. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fuzz_common.h"
#include "symbolize/symbolize_internal.h"

/* Never exists: the debug-file search runs but finds nothing. */
#define FUZZ_DEBUG_DIR "/nonexistent/sonde-fuzz-debug"

static int memfd = -1;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	fuzz_setup();
	FUZZ_CHECK(elf_version(EV_CURRENT) != EV_NONE, "can't initialize libelf");
	memfd = memfd_create("fuzz_elf", MFD_CLOEXEC);
	FUZZ_CHECK(memfd >= 0, "memfd_create: %s", strerror(errno));
	return 0;
}

static void check_build_id(const struct elf_object *obj)
{
	size_t len;

	if (!obj->build_id)
		return;
	len = strlen(obj->build_id);
	FUZZ_CHECK(len && len % 2 == 0 && len <= 2 * SYMBOLIZE_MAX_BUILD_ID, "build-id of %zu",
		   len);
	FUZZ_CHECK(strspn(obj->build_id, "0123456789abcdef") == len, "build-id %s", obj->build_id);
}

static void check_segments(const struct elf_object *obj)
{
	size_t i;
	uint64_t vaddr;

	FUZZ_CHECK(obj->nsegs <= SYMBOLIZE_MAX_SEGMENTS, "%zu segments", obj->nsegs);
	for (i = 0; i < obj->nsegs; i++) {
		const struct elf_seg *seg = &obj->segs[i];

		/* Garbage near 2^64 may round past it: not checked. */
		if (!seg->filesz || seg->offset >= 1ull << 62 || seg->filesz >= 1ull << 62)
			continue;
		FUZZ_CHECK(elf_object__file_to_vaddr(obj, seg->offset, &vaddr),
			   "offset %#llx of segment %zu has no address",
			   (unsigned long long)seg->offset, i);
		FUZZ_CHECK(elf_object__file_to_vaddr(obj, seg->offset + seg->filesz - 1, &vaddr),
			   "end of segment %zu has no address", i);
	}
	elf_object__file_to_vaddr(obj, 0, &vaddr);
	elf_object__file_to_vaddr(obj, UINT64_MAX, &vaddr);
}

static void check_symbols(struct elf_object *obj)
{
	size_t i;

	FUZZ_CHECK(obj->nsyms <= SYMBOLIZE_MAX_SYMS, "%zu symbols", obj->nsyms);
	FUZZ_CHECK(obj->is_elf || !obj->nsyms, "symbols without an ELF file");
	for (i = 0; i < obj->nsyms; i++) {
		struct elf_sym *s = &obj->syms[i];
		const char *name;

		FUZZ_CHECK(!i || obj->syms[i - 1].start < s->start, "symbol %zu out of order", i);
		FUZZ_CHECK(s->name && *s->name, "symbol %zu has no name", i);
		/* A range past 2^64 is cut at UINT64_MAX, which leaves a symbol
		 * at UINT64_MAX itself empty: never found, and harmless. */
		FUZZ_CHECK(s->start < s->end || s->start == UINT64_MAX, "symbol %zu is empty", i);
		if (s->start == s->end)
			continue;
		name = elf_object__lookup(obj, s->start);
		FUZZ_CHECK(name && name == s->demangled, "symbol %zu not found at its start", i);
		/* Sized symbols may overlap the next ones, which then win. */
		if (i + 1 == obj->nsyms || s->end <= obj->syms[i + 1].start)
			FUZZ_CHECK(elf_object__lookup(obj, s->end - 1) == name,
				   "symbol %zu not found at its end", i);
	}
	elf_object__lookup(obj, 0);
	elf_object__lookup(obj, UINT64_MAX);
}

/* The lines of obj's DWARF (dwarf.c), read through libdw: looked up at
 * each symbol's start and a few addresses of the input's choosing, each
 * answer bounded, its lines and names sane. */
static void check_lines(struct elf_object *obj, int fd, const uint8_t *data, size_t size)
{
	struct symbolizer *s = symbolizer__new();
	struct sym_inline in[SYM_MAX_INLINE];
	uint64_t addrs[80];
	size_t naddrs = 0, i, j, n;

	symbolizer__set_debug_dir(s, FUZZ_DEBUG_DIR);
	sym_dwarf__attach(s, obj, fd);
	for (i = 0; i < obj->nsyms && naddrs < 64; i++)
		addrs[naddrs++] = obj->syms[i].start;
	for (i = 0; i + 8 <= size && naddrs < 80; i += size / 16 + 8)
		memcpy(&addrs[naddrs++], data + i, 8);
	for (i = 0; i < naddrs; i++) {
		n = sym_dwarf__lookup(s, obj, addrs[i], in, SYM_MAX_INLINE);
		FUZZ_CHECK(n <= SYM_MAX_INLINE, "%zu frames at %#llx", n,
			   (unsigned long long)addrs[i]);
		FUZZ_CHECK(!n || obj->dwarf, "lines without DWARF");
		for (j = 0; j < n; j++)
			FUZZ_CHECK((!in[j].func || strlen(in[j].func) < size + 4096) &&
					   (!in[j].file || strlen(in[j].file) < size + 8192),
				   "frame %zu at %#llx: a name longer than its input", j,
				   (unsigned long long)addrs[i]);
		/* Again, from the cache: the same answer. */
		FUZZ_CHECK(sym_dwarf__lookup(s, obj, addrs[i], in, SYM_MAX_INLINE) == n,
			   "a second lookup of %#llx differs", (unsigned long long)addrs[i]);
	}
	sym_dwarf__free(obj->dwarf);
	obj->dwarf = NULL;
	symbolizer__free(s);
}

/* obj was opened on an input (data, size bytes; fd when it is a file, else
 * -1): load its symbols and lines and check them. */
static void check_object(struct elf_object *obj, int fd, const uint8_t *data, size_t size)
{
	size_t heap;

	check_build_id(obj);
	check_segments(obj);
	elf_object__load_symbols(obj, FUZZ_DEBUG_DIR);
	heap = fuzz_heap_end();
	FUZZ_CHECK(heap <= 64 * size + FUZZ_HEAP_FIXED, "%zu bytes of heap for %zu bytes of input",
		   heap, size);
	check_symbols(obj);
	check_lines(obj, fd, data, size);
	elf_object__close_file(obj);
	check_symbols(obj);
	elf_object__free(obj);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	fuzz_memfd_write(memfd, data, size);
	fuzz_heap_begin();
	check_object(elf_object__open_fd(memfd, "fuzz-file"), memfd, data, size);
	if (size <= SYMBOLIZE_MAX_VDSO) {
		fuzz_heap_begin();
		check_object(elf_object__open_memory(data, size, "fuzz-image"), -1, data, size);
	}
	return 0;
}
