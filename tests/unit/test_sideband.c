/* test_sideband.c: the parser of the kernel's process records
 * (sideband_parse in src/probe/sideband.c), fed records built here the way
 * the kernel lays them out (PERF_RECORD_MMAP2 with a build-id or a device
 * and inode, COMM with and without the exec flag, FORK, EXIT, LOST, all with
 * the sample id of TID | TIME) -- and malformed ones, each refused:
 * truncated, a size that is not the record's, an unterminated string, a
 * build-id longer than 20 bytes -- and the poll's order: records stamped
 * after a poll began wait for the next, so that one CPU's late record
 * (an exec) still comes before another's (the executable's mapping). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <sched.h>
#include <linux/perf_event.h>
#include <stdint.h>
#include <string.h>

#include "common/clock.h"
#include "probe/sideband.h"
#include "symbolize/symbolize.h"

struct builder {
	uint8_t buf[512];
	size_t len;
};

static void put(struct builder *b, const void *p, size_t n)
{
	assert_true(b->len + n <= sizeof(b->buf));
	memcpy(b->buf + b->len, p, n);
	b->len += n;
}

static void put32(struct builder *b, uint32_t v)
{
	put(b, &v, 4);
}

static void put64(struct builder *b, uint64_t v)
{
	put(b, &v, 8);
}

/* A NUL-terminated string padded to 8 bytes, as the kernel writes it. */
static void put_str(struct builder *b, const char *s)
{
	size_t n = strlen(s) + 1, pad = (8 - n % 8) % 8;
	uint8_t zero[8] = {0};

	put(b, s, n);
	put(b, zero, pad);
}

static void begin(struct builder *b, uint32_t type, uint16_t misc)
{
	struct perf_event_header h = {.type = type, .misc = misc};

	b->len = 0;
	put(b, &h, sizeof(h));
}

/* Appends the sample id (pid, tid, time) and sets the header's size. */
static size_t end(struct builder *b, uint32_t pid, uint64_t time)
{
	put32(b, pid);
	put32(b, pid);
	put64(b, time);
	((struct perf_event_header *)b->buf)->size = (uint16_t)b->len;
	return b->len;
}

static size_t mmap2_of(struct builder *b, bool build_id, uint8_t id_size, const char *path,
		       uint32_t pid, uint64_t time)
{
	begin(b, PERF_RECORD_MMAP2, build_id ? PERF_RECORD_MISC_MMAP_BUILD_ID : 0);
	put32(b, pid);
	put32(b, pid + 1);
	put64(b, 0x7f0000001000);
	put64(b, 0x3000);
	put64(b, 0x1000);
	if (build_id) {
		uint8_t hdr[4] = {id_size, 0, 0, 0}, id[20];

		for (int i = 0; i < 20; i++)
			id[i] = (uint8_t)(0xa0 + i);
		put(b, hdr, 4);
		put(b, id, 20);
	} else {
		put32(b, 254);
		put32(b, 1);
		put64(b, 777);
		put64(b, 5);
	}
	put32(b, 5); /* PROT_READ | PROT_EXEC */
	put32(b, 2);
	put_str(b, path);
	return end(b, pid, time);
}

static size_t mmap2(struct builder *b, bool build_id, uint8_t id_size, const char *path)
{
	return mmap2_of(b, build_id, id_size, path, 42, 1000);
}

static void test_mmap2(void **state)
{
	struct builder b;
	struct sideband_rec r;
	size_t n = mmap2(&b, true, 20, "/usr/lib/libx.so.1");

	assert_int_equal(sideband_parse(b.buf, n, &r), 0);
	assert_int_equal(r.kind, SIDEBAND_MMAP);
	assert_int_equal(r.pid, 42);
	assert_int_equal(r.tid, 43);
	assert_int_equal(r.addr, 0x7f0000001000);
	assert_int_equal(r.len, 0x3000);
	assert_int_equal(r.pgoff, 0x1000);
	assert_true(r.has_build_id);
	assert_int_equal(r.build_id_size, 20);
	assert_int_equal(r.build_id[0], 0xa0);
	assert_int_equal(r.build_id[19], 0xb3);
	assert_int_equal(r.prot, 5);
	assert_string_equal(r.path, "/usr/lib/libx.so.1");
	assert_int_equal(r.time_ns, 1000);

	n = mmap2(&b, false, 0, "/bin/x");
	assert_int_equal(sideband_parse(b.buf, n, &r), 0);
	assert_false(r.has_build_id);
	assert_int_equal(r.maj, 254);
	assert_int_equal(r.min, 1);
	assert_int_equal(r.ino, 777);
	assert_string_equal(r.path, "/bin/x");
}

static void test_comm_fork_exit_lost(void **state)
{
	struct builder b;
	struct sideband_rec r;
	size_t n;

	begin(&b, PERF_RECORD_COMM, PERF_RECORD_MISC_COMM_EXEC);
	put32(&b, 7);
	put32(&b, 7);
	put_str(&b, "python3");
	n = end(&b, 7, 5);
	assert_int_equal(sideband_parse(b.buf, n, &r), 0);
	assert_int_equal(r.kind, SIDEBAND_COMM);
	assert_true(r.exec);
	assert_string_equal(r.path, "python3");
	((struct perf_event_header *)b.buf)->misc = 0;
	assert_int_equal(sideband_parse(b.buf, n, &r), 0);
	assert_false(r.exec);

	for (int t = 0; t < 2; t++) {
		begin(&b, t ? PERF_RECORD_EXIT : PERF_RECORD_FORK, 0);
		put32(&b, 10);
		put32(&b, 9);
		put32(&b, 11);
		put32(&b, 9);
		put64(&b, 77);
		n = end(&b, 10, 77);
		assert_int_equal(sideband_parse(b.buf, n, &r), 0);
		assert_int_equal(r.kind, t ? SIDEBAND_EXIT : SIDEBAND_FORK);
		assert_int_equal(r.pid, 10);
		assert_int_equal(r.ppid, 9);
		assert_int_equal(r.tid, 11);
		assert_int_equal(r.time_ns, 77);
	}

	begin(&b, PERF_RECORD_LOST, 0);
	put64(&b, 1);
	put64(&b, 123);
	n = end(&b, 0, 0);
	assert_int_equal(sideband_parse(b.buf, n, &r), 0);
	assert_int_equal(r.kind, SIDEBAND_LOST);
	assert_int_equal(r.lost, 123);

	begin(&b, PERF_RECORD_SAMPLE, 0);
	n = end(&b, 0, 0);
	assert_int_equal(sideband_parse(b.buf, n, &r), 0);
	assert_int_equal(r.kind, SIDEBAND_OTHER);
}

/* A process that execs on one CPU and maps its executable on another: a
 * poll may drain the first CPU's ring before the exec is written there and
 * the second's after the mapping is. The records stamped since the poll
 * began wait for the next one, so the mapping lands in the exec's image,
 * not in the one before it. */
static void test_poll_order(void **state)
{
	const uint32_t pid = 0x3fffff0; /* past any pid_max: no /proc to fall back on */
	struct symbolizer *sym = symbolizer__new();
	struct sideband_opts o = {0};
	struct sideband *sb = sideband__new(&o, sym);
	uint64_t t0 = mono_ns(), t_exec = t0 + 20 * NS_PER_MS, t_map = t_exec + 1000;
	struct sym_map_info mi;
	struct builder b;
	size_t n;

	begin(&b, PERF_RECORD_FORK, 0);
	put32(&b, pid);
	put32(&b, 1);
	put32(&b, pid);
	put32(&b, 1);
	put64(&b, t0 - 1000);
	n = end(&b, pid, t0 - 1000);
	sideband__queue(sb, b.buf, n);
	assert_int_equal(sideband__poll(sb), 1);

	/* The mapping first, stamped after this poll began: held. */
	n = mmap2_of(&b, false, 0, "/bin/x", pid, t_map);
	sideband__queue(sb, b.buf, n);
	assert_int_equal(sideband__poll(sb), 0);
	/* Then the exec that came before it, and a poll past both. */
	begin(&b, PERF_RECORD_COMM, PERF_RECORD_MISC_COMM_EXEC);
	put32(&b, pid);
	put32(&b, pid);
	put_str(&b, "x");
	n = end(&b, pid, t_exec);
	sideband__queue(sb, b.buf, n);
	while (mono_ns() <= t_map)
		sched_yield();
	assert_int_equal(sideband__poll(sb), 2);
	assert_int_equal(symbolizer__mapping(sym, symbolizer__image(sym, pid, t_map + 1),
					     0x7f0000001800, &mi),
			 0);
	assert_string_equal(mi.path, "/bin/x");
	assert_string_equal(symbolizer__comm(sym, pid), "x");
	/* Malformed: counted, not queued. */
	sideband__queue(sb, b.buf, 3);
	assert_int_equal(sideband__poll(sb), 0);
	sideband__free(sb);
	symbolizer__free(sym);
}

static void test_malformed(void **state)
{
	struct builder b;
	struct sideband_rec r;
	size_t n = mmap2(&b, true, 20, "/usr/lib/libx.so.1"), nul;

	/* Shorter than said, or than a header and a sample id. */
	assert_int_equal(sideband_parse(b.buf, n - 8, &r), -EINVAL);
	assert_int_equal(sideband_parse(b.buf, 8, &r), -EINVAL);
	assert_int_equal(sideband_parse(b.buf, 0, &r), -EINVAL);
	/* A size that is not a multiple of 8. */
	((struct perf_event_header *)b.buf)->size = (uint16_t)(n - 4);
	assert_int_equal(sideband_parse(b.buf, n - 4, &r), -EINVAL);
	((struct perf_event_header *)b.buf)->size = (uint16_t)n;
	/* A build-id longer than the field. */
	b.buf[40] = 21;
	assert_int_equal(sideband_parse(b.buf, n, &r), -EINVAL);
	b.buf[40] = 20;
	assert_int_equal(sideband_parse(b.buf, n, &r), 0);
	/* The path without its NUL: the string runs into the sample id. */
	nul = (size_t)(strchr((char *)b.buf + 80, 0) - (char *)b.buf);
	memset(b.buf + nul, 'x', n - 16 - nul);
	assert_int_equal(sideband_parse(b.buf, n, &r), -EINVAL);
	/* A record cut inside its fixed fields. */
	begin(&b, PERF_RECORD_FORK, 0);
	put32(&b, 1);
	n = end(&b, 1, 1);
	assert_int_equal(sideband_parse(b.buf, n, &r), -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_mmap2),
		cmocka_unit_test(test_comm_fork_exit_lost),
		cmocka_unit_test(test_poll_order),
		cmocka_unit_test(test_malformed),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
