/* test_late.c: the userspace end of deferred stacks (src/unwind/late.c),
 * with the real unwind tables in the real BPF maps (the CPU sampler's,
 * loaded without sampling): a record made as the BPF side makes one -- the
 * registers at a frame of this very thread, the pages of its stack above --
 * waits until the tables of this program and its libc are built (on the
 * builder's thread, asked for by the walk itself), then is walked to
 * _start exactly as the stack is; the same with its pages kept out of order;
 * a word across two pages kept apart; a record that is not one refused; a
 * full waiting room finishing a sample at once. Needs root (skips without). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "probe/cpu_sampler.h"
#include "common/clock.h"
#include "common/log.h"
#include "symbolize/symbolize.h"
#include "unwind/late.h"
#include "unwind/unwinder.h"

#include "own_tables.h"

#define PAGE 4096
/* A record's size as the BPF side hands it over: up to its stack pages. */
#define REC_SIZE(r) (offsetof(struct cpu_sample_late, l.stack) + (r).l.nstack)

struct got {
	struct cpu_sample s;
	int n;
};

static void on_done(void *ctx, const struct cpu_sample *s)
{
	struct got *g = ctx;

	g->s = *s;
	g->n++;
}

static struct cpu_sample_late rec;

/* A record of this thread at the frame of its caller: pc a return address
 * into it, sp and bp its registers after the return. The pages from sp's
 * up, as many as can be read. */
static __attribute__((noinline)) void capture(struct cpu_sample_late *r)
{
	uint64_t *fp = __builtin_frame_address(0);
	uint32_t kept = 0;

	memset(r, 0, sizeof(*r));
	r->s.pid = r->s.tid = getpid();
	r->s.ts_ns = mono_ns();
	r->s.flags = CPU_SF_LATE;
	/* capture's frame: saved rbp at fp[0], the return address at fp[1];
	 * the caller's sp is past them. */
	r->l.pc = fp[1];
	r->l.sp = (uint64_t)(uintptr_t)(fp + 2);
	r->l.bp = fp[0];
	r->l.leaf = 0;
	r->l.stack_base = r->l.sp & ~(uint64_t)(PAGE - 1);
	for (uint32_t i = 0; i < LATE_SPAN && kept < LATE_PAGES; i++)
		if (!read_own(&r->l.stack[kept * PAGE], r->l.stack_base + (uint64_t)i * PAGE, PAGE))
			r->l.page[kept++] = i;
	r->l.nstack = kept * PAGE;
}

/* Polls until the sample is handed on (tables built) or 30 s pass. */
static void finish(struct unw_late *l, struct got *g)
{
	uint64_t deadline = mono_ns() + 30ull * 1000000000;

	while (!g->n && mono_ns() < deadline) {
		unwinder__poll(cpu_sampler__unwinder(cs));
		unw_late__poll(l, false, on_done, g);
		if (!g->n)
			usleep(2000);
	}
}

/* The user frames of a finished sample, named. */
static bool has_frame(const struct cpu_sample *s, uint32_t image, const char *name)
{
	for (int i = 0; i < s->nuser; i++) {
		struct sym_info si;
		char buf[256];

		symbolizer__resolve_image(sym, image, s->ips[s->nkern + i] - (i ? 1 : 0), &si);
		if (!strcmp(sym_info__name(&si, buf, sizeof(buf)), name))
			return true;
	}
	return false;
}

static __attribute__((noinline)) void walked_to_start(struct unw_late *l, struct got *g)
{
	capture(&rec);
	assert_int_equal(unw_late__add(l, &rec, REC_SIZE(rec)), 0);
	finish(l, g);
}

static void test_whole(void **state)
{
	struct unw_late *l;
	struct unw_late_stats st;
	struct got g = {0}, g2 = {0};
	uint32_t image;

	if (!cs)
		skip();
	l = unw_late__new(cpu_sampler__unwinder(cs), sym, NULL);
	walked_to_start(l, &g);
	assert_int_equal(g.n, 1);
	assert_false(g.s.flags & CPU_SF_LATE);
	image = symbolizer__image(sym, getpid(), g.s.ts_ns);
	/* From the caller of capture to the program's entry: the test, the
	 * runner's frames, main, libc's start and _start. */
	assert_true(has_frame(&g.s, image, "walked_to_start"));
	assert_true(has_frame(&g.s, image, "test_whole"));
	assert_true(has_frame(&g.s, image, "main"));
	assert_true(has_frame(&g.s, image, "__libc_start_main"));
	assert_true(has_frame(&g.s, image, "_start"));
	unw_late__stats(l, &st);
	assert_int_equal(st.taken, 1);
	assert_int_equal(st.finished, 1);
	assert_int_equal(st.ended, 1);
	assert_int_equal(st.waiting, 0);

	/* The same pages kept in another order: the same walk. */
	if (rec.l.nstack >= 2 * PAGE) {
		uint8_t tmp[PAGE], p = rec.l.page[0];

		memcpy(tmp, rec.l.stack, PAGE);
		memmove(rec.l.stack, rec.l.stack + PAGE, PAGE);
		memcpy(rec.l.stack + PAGE, tmp, PAGE);
		rec.l.page[0] = rec.l.page[1];
		rec.l.page[1] = p;
		assert_int_equal(unw_late__add(l, &rec, REC_SIZE(rec)), 0);
		finish(l, &g2);
		assert_int_equal(g2.n, 1);
		assert_int_equal(g2.s.nuser, g.s.nuser);
		assert_memory_equal(g2.s.ips, g.s.ips, g.s.nuser * sizeof(g.s.ips[0]));
	}
	unw_late__free(l);
}

/* Frame pointers through addresses no mapping holds, over a stack whose
 * second page is kept before its first: the saved rbp across the two. */
static void test_word_across_pages(void **state)
{
	const uint64_t base = 0x100000000000ull, x = 0x1234567, y = 0x7654321;
	struct unw_late *l;
	struct got g = {0};
	uint64_t v;

	if (!cs)
		skip();
	l = unw_late__new(cpu_sampler__unwinder(cs), sym, NULL);
	memset(&rec, 0, sizeof(rec));
	rec.s.pid = rec.s.tid = getpid();
	rec.s.ts_ns = mono_ns();
	rec.s.flags = CPU_SF_LATE;
	rec.l.pc = 0x4321;
	rec.l.sp = base + 16;
	rec.l.bp = base + PAGE - 4; /* the saved rbp across the pages */
	rec.l.leaf = 1;
	rec.l.stack_base = base;
	rec.l.page[0] = 1; /* stack[0...] is page 1, stack[4096...] page 0 */
	rec.l.page[1] = 0;
	rec.l.nstack = 2 * PAGE;
	v = base + PAGE + 64; /* the next frame, on page 1 */
	memcpy(rec.l.stack + PAGE + PAGE - 4, &v, 4);
	memcpy(rec.l.stack, (char *)&v + 4, 4);
	memcpy(rec.l.stack + 4, &x, 8);
	v = 0;
	memcpy(rec.l.stack + 64, &v, 8);
	memcpy(rec.l.stack + 72, &y, 8);
	assert_int_equal(unw_late__add(l, &rec, REC_SIZE(rec)), 0);
	finish(l, &g);
	assert_int_equal(g.n, 1);
	assert_int_equal(g.s.nuser, 3);
	assert_int_equal(g.s.ips[0], 0x4321);
	assert_int_equal(g.s.ips[1], x);
	assert_int_equal(g.s.ips[2], y);
	unw_late__free(l);
}

static void test_malformed(void **state)
{
	struct unw_late *l;
	struct unw_late_stats st;

	if (!cs)
		skip();
	l = unw_late__new(cpu_sampler__unwinder(cs), sym, NULL);
	log_set_level(LOG_ERROR);
	capture(&rec);
	assert_int_equal(unw_late__add(l, &rec, REC_SIZE(rec) - 1), -EINVAL);
	rec.l.nstack = 100;
	assert_int_equal(unw_late__add(l, &rec, REC_SIZE(rec)), -EINVAL);
	rec.l.nstack = LATE_STACK_BYTES + PAGE;
	assert_int_equal(unw_late__add(l, &rec, REC_SIZE(rec)), -EINVAL);
	rec.l.nstack = PAGE;
	rec.l.npy = LATE_PY + 1;
	assert_int_equal(unw_late__add(l, &rec, REC_SIZE(rec)), -EINVAL);
	rec.l.npy = 0;
	rec.s.nuser = CPU_MAX_FRAMES + 1;
	assert_int_equal(unw_late__add(l, &rec, REC_SIZE(rec)), -EINVAL);
	rec.s.nuser = 0;
	rec.s.flags = 0;
	assert_int_equal(unw_late__add(l, &rec, REC_SIZE(rec)), -EINVAL);
	log_set_level(LOG_WARN);
	unw_late__stats(l, &st);
	assert_int_equal(st.malformed, 6);
	assert_int_equal(st.taken, 0);
	unw_late__free(l);
}

/* Past the waiting room's bound a sample is finished at the next poll,
 * whatever tables are missing, and counted. */
static void test_crowded(void **state)
{
	struct unw_late_opts o = {.max_bytes = 1};
	struct unw_late *l;
	struct unw_late_stats st;
	struct got g = {0};

	if (!cs)
		skip();
	l = unw_late__new(cpu_sampler__unwinder(cs), sym, &o);
	capture(&rec);
	assert_int_equal(unw_late__add(l, &rec, REC_SIZE(rec)), 0);
	assert_int_equal(unw_late__poll(l, false, on_done, &g), 1);
	unw_late__stats(l, &st);
	assert_int_equal(st.crowded_out, 1);
	assert_int_equal(st.waiting, 0);
	assert_int_equal(st.waiting_bytes, 0);
	unw_late__free(l);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_whole),
		cmocka_unit_test(test_word_across_pages),
		cmocka_unit_test(test_malformed),
		cmocka_unit_test(test_crowded),
	};

	if (geteuid() != 0) {
		printf("SKIP: test_late needs root to load the BPF maps\n");
		return 77;
	}
	return cmocka_run_group_tests(tests, setup, teardown);
}
