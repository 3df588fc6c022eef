/* fuzz_common.h: what the libFuzzer targets of tests/fuzz/ share -- a check
 * that reports a broken invariant and aborts (so libFuzzer saves the input),
 * the one-time set-up of logging, a measure of the heap a parser takes for
 * one input (to hold it to a bound proportional to the input), and FILE and
 * buffer helpers over the input (and a memfd holding it, for parsers that
 * read a file). Each fuzz_*.c includes it once; everything
 * here is static. Logging is turned up to debug so that every message a
 * parser can print is formatted from the malformed input (run with
 * -close_fd_mask=2 to keep it off the terminal); a failed check is written to
 * a copy of stderr taken before libFuzzer closes it. SONDE_LOG=... overrides
 * the level. */
#ifndef SONDE_TESTS_FUZZ_COMMON_H
#define SONDE_TESTS_FUZZ_COMMON_H

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sanitizer/allocator_interface.h>

#include "common/log.h"

static int fuzz_report_fd = 2;

static inline void fuzz_fail(const char *file, int line, const char *cond, const char *fmt, ...)
	__attribute__((format(printf, 4, 5), noreturn));

static inline void fuzz_fail(const char *file, int line, const char *cond, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;
	int n;

	snprintf(msg, sizeof(msg), "fuzz check failed at %s:%d: (%s) ", file, line, cond);
	n = strlen(msg);
	va_start(ap, fmt);
	vsnprintf(msg + n, sizeof(msg) - n, fmt, ap);
	va_end(ap);
	n = strlen(msg);
	if (n < (int)sizeof(msg) - 1)
		msg[n++] = '\n';
	/* Nothing to do if it fails: the abort is the report that matters. */
	(void)!write(fuzz_report_fd, msg, n);
	abort();
}

/* FUZZ_CHECK(cond, "printf format", ...): the invariant must hold. */
#define FUZZ_CHECK(cond, ...)                                                                      \
	do {                                                                                       \
		if (!(cond))                                                                       \
			fuzz_fail(__FILE__, __LINE__, #cond, __VA_ARGS__);                         \
	} while (0)

/* Peak heap use between fuzz_heap_begin() and fuzz_heap_end(), above what
 * was live at the start, seen by ASan's malloc hook: how much a parser
 * allocated at most for one input. */
static size_t fuzz_heap_base, fuzz_heap_peak;
static bool fuzz_heap_on;

/* What a parser may take whatever the input: line buffers, a profile's index
 * and first arena block, libelf's descriptors. */
#define FUZZ_HEAP_FIXED (8u << 20)

static inline void fuzz_heap_malloc_hook(const volatile void *ptr, size_t size)
{
	size_t now;

	if (!fuzz_heap_on)
		return;
	now = __sanitizer_get_current_allocated_bytes();
	if (now > fuzz_heap_peak)
		fuzz_heap_peak = now;
}

static inline void fuzz_heap_free_hook(const volatile void *ptr)
{
}

static inline void fuzz_heap_begin(void)
{
	fuzz_heap_base = fuzz_heap_peak = __sanitizer_get_current_allocated_bytes();
	fuzz_heap_on = true;
}

static inline size_t fuzz_heap_end(void)
{
	fuzz_heap_on = false;
	return fuzz_heap_peak - fuzz_heap_base;
}

/* Called from LLVMFuzzerInitialize(), which libFuzzer runs before it acts on
 * -close_fd_mask. */
static inline void fuzz_setup(void)
{
	int fd = dup(2);

	if (fd >= 0)
		fuzz_report_fd = fd;
	FUZZ_CHECK(__sanitizer_install_malloc_and_free_hooks(fuzz_heap_malloc_hook,
							     fuzz_heap_free_hook),
		   "can't install malloc hooks -- not built with ASan?");
	log_set_level(LOG_DEBUG);
	log_init();
}

/* A read-only FILE over data[0..size); never NULL (an empty input is an
 * empty stream, which fmemopen() can't make). */
static inline FILE *fuzz_fopen(const uint8_t *data, size_t size)
{
	FILE *f = size ? fmemopen((void *)data, size, "r") : fopen("/dev/null", "r");

	FUZZ_CHECK(f, "can't open a stream over %zu bytes", size);
	return f;
}

/* A malloc()ed copy of data with a NUL after it, exactly size + 1 bytes so
 * that ASan catches a read past the terminator. */
static inline char *fuzz_strdup(const uint8_t *data, size_t size)
{
	char *s = malloc(size + 1);

	FUZZ_CHECK(s, "out of memory");
	memcpy(s, data, size);
	s[size] = '\0';
	return s;
}

/* An in-memory FILE to write to; fuzz_mem_close() hands back its bytes. */
struct fuzz_mem {
	FILE *f;
	char *buf;
	size_t len;
};

static inline void fuzz_mem_open(struct fuzz_mem *m)
{
	m->buf = NULL;
	m->len = 0;
	m->f = open_memstream(&m->buf, &m->len);
	FUZZ_CHECK(m->f, "can't open a memory stream");
}

/* Closes the stream; m->buf (free() it) holds m->len bytes. */
static inline void fuzz_mem_close(struct fuzz_mem *m)
{
	FUZZ_CHECK(!fclose(m->f), "can't close a memory stream");
	m->f = NULL;
}

/* Makes the memfd fd hold exactly the input (for parsers of files). */
static inline void fuzz_memfd_write(int fd, const uint8_t *data, size_t size)
{
	size_t off = 0;

	FUZZ_CHECK(!ftruncate(fd, 0), "ftruncate: %s", strerror(errno));
	while (off < size) {
		ssize_t n = pwrite(fd, data + off, size - off, (off_t)off);

		FUZZ_CHECK(n > 0, "pwrite: %s", strerror(errno));
		off += (size_t)n;
	}
}

#endif
