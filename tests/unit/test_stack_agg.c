/* test_stack_agg.c: the stack aggregator (src/agent/stack_agg.c) on
 * samples built here, symbolized through images fed to the symbolizer by
 * hand as the kernel's records would (a made-up pid that no process has,
 * mapping the fixture program tests/fixtures/pie): identical stacks of a
 * thread collapse into one count, threads and leaves stay apart, a stack
 * keeps naming the code of the image it was sampled in after its process
 * execs another program, a table past its bound counts what it drops, and
 * the profile written holds every frame, root first; each sample keeps
 * its process's and thread's names and the service named for it; NVTX
 * ranges sit between a GPU stack and its leaf, the innermost kept. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdbool.h>
#include <stdint.h>

#include "agent/stack_agg.h"
#include "common/xalloc.h"
#include "profile/profile.h"
#include "symbolize/symbolize.h"
#include "unwind_abi.h"
#include "fixture_child.h"

#define PID 0x7fff0100u /* no process has it: everything comes from the records */
#define BASE 0x555500000000ull

struct world {
	struct symbolizer *sym;
	struct stack *st; /* sample()'s */
	uint64_t alpha, beta, main_;
	char bid[64];
	uint8_t bid_bin[20];
};

static void feed_exec(struct world *w, uint64_t ts, const char *fixture_name, uint64_t base)
{
	struct sym_mmap m = {
		.pid = PID,
		.ts_ns = ts + 1,
		.start = base,
		.len = 0x4000,
		.pgoff = 0,
		.path = fixture(fixture_name),
	};

	symbolizer__exec(w->sym, PID, ts, fixture_name);
	symbolizer__mmap(w->sym, &m);
}

static int setup(void **state)
{
	struct world *w = xcalloc(1, sizeof(*w));

	find_fixtures();
	w->sym = symbolizer__new();
	w->st = stack__new();
	symbolizer__set_debug_dir(w->sym, NULL);
	w->alpha = nm_value(fixture("pie"), false, "fix_alpha");
	w->beta = nm_value(fixture("pie"), false, "fix_beta");
	w->main_ = nm_value(fixture("pie"), false, "main");
	feed_exec(w, 100, "pie", BASE);
	*state = w;
	return 0;
}

static int teardown(void **state)
{
	struct world *w = *state;

	symbolizer__free(w->sym);
	free(w->st);
	free(w);
	return 0;
}

/* A sample at ts of thread tid: leaf fix_alpha called from fix_beta from
 * main (return addresses point past the call), as the CPU sampler's record
 * has it, made a stack (w->st, until the next call). */
static struct stack *sample(const struct world *w, uint64_t ts, uint32_t tid)
{
	struct cpu_sample s;

	memset(&s, 0, sizeof(s));
	s.ts_ns = ts;
	s.pid = PID;
	s.tid = tid;
	s.nuser = 3;
	memcpy(s.comm, "pie", 4);
	s.ips[0] = BASE + w->alpha + 2;
	s.ips[1] = BASE + w->beta + 9;
	s.ips[2] = BASE + w->main_ + 9;
	stack__from_sample(w->st, &s);
	return w->st;
}

/* The folded text of the aggregator's profile. */
static char *folded(struct stack_agg *a)
{
	struct profile *p = profile__new("cpu", "nanoseconds", 1);
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	assert_int_equal(stack_agg__to_profile(a, p), 0);
	assert_int_equal(profile__write(p, PROF_FMT_FOLDED, f), 0);
	fclose(f);
	profile__free(p);
	return buf;
}

static void test_collapse_and_name(void **state)
{
	struct world *w = *state;
	struct stack_agg *a = stack_agg__new(w->sym, 100);
	struct stack_agg_stats st;
	char *text;

	stack_agg__add(a, sample(w, 200, 1));
	stack_agg__add(a, sample(w, 210, 1));
	stack_agg__add(a, sample(w, 220, 1));
	stack_agg__add(a, sample(w, 230, 2)); /* another thread */
	stack_agg__stats(a, &st);
	assert_int_equal(st.samples, 4);
	assert_int_equal(st.stacks, 2);
	assert_int_equal(st.pids, 1);
	assert_int_equal(st.dropped, 0);
	text = folded(a);
	assert_non_null(strstr(text, "pie;main;fix_beta;fix_alpha 4\n"));
	free(text);
	stack_agg__free(a);
}

static void test_images_across_exec(void **state)
{
	struct world *w = *state;
	struct stack_agg *a = stack_agg__new(w->sym, 100);
	char *text;

	stack_agg__add(a, sample(w, 200, 1));
	/* The process execs another program, mapped where pie was. */
	feed_exec(w, 300, "nopie", BASE);
	stack_agg__add(a, sample(w, 400, 1));
	text = folded(a);
	/* The first stack still names pie's functions; the same addresses
	 * after the exec are not pie's any more. */
	assert_non_null(strstr(text, "pie;main;fix_beta;fix_alpha 1\n"));
	assert_int_equal(strstr(strstr(text, "fix_alpha") + 1, "fix_alpha") == NULL, 1);
	free(text);
	stack_agg__free(a);
}

static void test_leaves_and_bounds(void **state)
{
	struct world *w = *state;
	struct stack_agg *a = stack_agg__new(w->sym, 2);
	struct stack_agg_stats st;
	char *text;

	stack_agg__set_leaf_module(a, "[cuda]");
	stack_agg__add_leaf(a, sample(w, 200, 1), "kernel_x", 5);
	stack_agg__add_leaf(a, sample(w, 201, 1), "kernel_x", 2);
	stack_agg__add_leaf(a, sample(w, 202, 1), "kernel_y", 1);
	/* A third distinct stack: past the bound of 2, counted as dropped. */
	stack_agg__add_leaf(a, sample(w, 203, 1), "kernel_z", 3);
	stack_agg__stats(a, &st);
	assert_int_equal(st.stacks, 2);
	assert_int_equal(st.dropped, 3);
	text = folded(a);
	assert_non_null(strstr(text, "pie;main;fix_beta;fix_alpha;kernel_x 7\n"));
	assert_non_null(strstr(text, "pie;main;fix_beta;fix_alpha;kernel_y 1\n"));
	assert_null(strstr(text, "kernel_z"));
	free(text);

	/* A window later, the table is empty again and takes new stacks. */
	stack_agg__reset(a);
	stack_agg__add_leaf(a, sample(w, 300, 1), "kernel_z", 3);
	text = folded(a);
	assert_string_equal(text, "pie;main;fix_beta;fix_alpha;kernel_z 3\n");
	free(text);
	stack_agg__free(a);
}

/* The service namer of test_who: the pid's name, prefixed; "" for the
 * thread named "none". */
static const char *svc_of(void *ctx, uint32_t pid, const char *comm, const char **labels)
{
	static char buf[64];
	int *calls = ctx;

	(*calls)++;
	snprintf(buf, sizeof(buf), "svc-%s", comm);
	*labels = pid == PID ? "job=4821\nrank=3\nnot a label\nworld_size=8\n" : NULL;
	return pid == PID ? buf : NULL;
}

static const struct prof_sample *by_thread(const struct profile *p, const char *thread)
{
	for (size_t i = 0; i < p->nsamples; i++)
		if (!strcmp(profile__str(p, p->samples[i].thread), thread))
			return &p->samples[i];
	return NULL;
}

/* comm is the process, thread the thread, the service the namer's; a name
 * the kernel cut inside a character is made UTF-8; what follows a name's
 * NUL in the record does not make another stack. */
static void test_who(void **state)
{
	struct world *w = *state;
	struct stack_agg *a = stack_agg__new(w->sym, 100);
	struct profile *p = profile__new("cpu", "nanoseconds", 1);
	const struct prof_sample *ps;
	struct stack *s;
	int calls = 0;

	stack_agg__set_service(a, svc_of, &calls);
	s = sample(w, 200, 1);
	memcpy(s->thread, "worker-a\0garbage", 16);
	stack_agg__add(a, s);
	s = sample(w, 210, 1);
	memcpy(s->thread, "worker-a\0GARBAGE", 16);
	stack_agg__add(a, s);
	s = sample(w, 220, 2);
	memcpy(s->thread, "abcdefghijklm\xe6\x97", 16); /* cut at 15 bytes */
	stack_agg__add(a, s);
	assert_int_equal(calls, 3);

	assert_int_equal(stack_agg__to_profile(a, p), 0);
	assert_int_equal(p->nsamples, 2);
	ps = by_thread(p, "worker-a");
	assert_non_null(ps);
	assert_int_equal(ps->count, 2);
	assert_string_equal(profile__str(p, ps->comm), "pie");
	assert_string_equal(profile__str(p, ps->service), "svc-pie");
	/* Its job's labels, each a name and a value; a line that is not one
	 * left out. */
	assert_true(ps->labels > 0 && ps->labels <= p->nlabelsets);
	{
		const struct prof_labels *ls = &p->labelsets[ps->labels - 1];

		assert_int_equal(ls->n, 3);
		assert_string_equal(profile__str(p, ls->kv[0]), "job");
		assert_string_equal(profile__str(p, ls->kv[1]), "4821");
		assert_string_equal(profile__str(p, ls->kv[2]), "rank");
		assert_string_equal(profile__str(p, ls->kv[3]), "3");
		assert_string_equal(profile__str(p, ls->kv[5]), "8");
	}
	ps = by_thread(p, "abcdefghijklm");
	assert_non_null(ps);
	assert_int_equal(ps->tid, 2);
	profile__free(p);
	stack_agg__free(a);
}

static void test_no_stack(void **state)
{
	struct world *w = *state;
	struct stack_agg *a = stack_agg__new(w->sym, 10);
	struct stack *s = sample(w, 200, 1);
	char *text;

	s->nframes = 0; /* the user stack could not be read */
	stack_agg__add(a, s);
	stack_agg__add_leaf(a, s, "kernel_x", 1);
	text = folded(a);
	assert_non_null(strstr(text, "pie;[no stack] 1\n"));
	/* A GPU event without a stack: the leaf alone. */
	assert_non_null(strstr(text, "pie;kernel_x 1\n"));
	free(text);
	stack_agg__free(a);
}

/* NVTX ranges: frames between the stack and the leaf, outermost first; a
 * path of more than STACK_AGG_MAX_RANGES keeps the innermost; a range path
 * makes a stack of its own; and a stack without frames keeps its ranges. */
static void test_ranges(void **state)
{
	struct world *w = *state;
	struct stack_agg *a = stack_agg__new(w->sym, 10);
	struct stack *s;
	char deep[STACK_AGG_RANGES_LEN] = "";
	char *text;

	stack_agg__add_leaf_in(a, sample(w, 200, 1),
			       "step\x1f"
			       "forward",
			       "kernel_x", 5);
	stack_agg__add_leaf_in(a, sample(w, 201, 1), "step", "kernel_x", 2);
	stack_agg__add_leaf_in(a, sample(w, 202, 1), NULL, "kernel_x", 1);
	for (int i = 0; i < STACK_AGG_MAX_RANGES + 3; i++) {
		size_t n = strlen(deep);

		snprintf(deep + n, sizeof(deep) - n, "%sr%d", i ? "\x1f" : "", i);
	}
	stack_agg__add_leaf_in(a, sample(w, 203, 1), deep, "kernel_y", 3);
	s = sample(w, 204, 1);
	s->nframes = 0;
	stack_agg__add_leaf_in(a, s, "step", "kernel_z", 4);
	text = folded(a);
	assert_non_null(strstr(text, "pie;main;fix_beta;fix_alpha;step;forward;kernel_x 5\n"));
	assert_non_null(strstr(text, "pie;main;fix_beta;fix_alpha;step;kernel_x 2\n"));
	assert_non_null(strstr(text, "pie;main;fix_beta;fix_alpha;kernel_x 1\n"));
	/* r0..r18: the innermost 16, r3..r18. */
	assert_non_null(strstr(text, "fix_alpha;r3;r4;"));
	assert_non_null(strstr(text, ";r17;r18;kernel_y 3\n"));
	assert_null(strstr(text, ";r2;"));
	assert_non_null(strstr(text, "pie;step;kernel_z 4\n"));
	free(text);
	stack_agg__free(a);
}

/* A GPU instruction above its kernel: its stall reason, then "+0xOFF"
 * ([sass]), then the kernel; stacks apart by offset and by reason. */
static void test_instr(void **state)
{
	struct world *w = *state;
	struct stack_agg *a = stack_agg__new(w->sym, 10);
	struct stack_agg_instr i1 = {0x1a0, NULL, "long_scoreboard"}, i2 = {0x1a0, NULL, "barrier"},
			       i3 = {0x20, NULL, "long_scoreboard"}, i4 = {0x30, NULL, NULL},
			       i5 = {0x20, "LDG.E.128", "long_scoreboard"};
	struct stack *s;
	char *text;

	stack_agg__add_instr(a, sample(w, 300, 1), "step", "kernel_x", &i1, 5);
	stack_agg__add_instr(a, sample(w, 300, 1), "step", "kernel_x", &i1, 2);
	stack_agg__add_instr(a, sample(w, 300, 1), "step", "kernel_x", &i2, 3);
	stack_agg__add_instr(a, sample(w, 300, 1), "step", "kernel_x", &i3, 1);
	stack_agg__add_instr(a, sample(w, 300, 1), NULL, "kernel_x", &i4, 4);
	s = sample(w, 301, 1);
	s->nframes = 0;
	stack_agg__add_instr(a, s, NULL, "kernel_y", &i3, 6); /* no stack */
	stack_agg__add_instr(a, sample(w, 300, 1), "step", "kernel_x", &i5, 8);
	text = folded(a);
	assert_non_null(strstr(
		text, "pie;main;fix_beta;fix_alpha;step;kernel_x;+0x1a0;long_scoreboard 7\n"));
	assert_non_null(
		strstr(text, "pie;main;fix_beta;fix_alpha;step;kernel_x;+0x1a0;barrier 3\n"));
	assert_non_null(strstr(
		text, "pie;main;fix_beta;fix_alpha;step;kernel_x;+0x20;long_scoreboard 1\n"));
	assert_non_null(strstr(text, "pie;main;fix_beta;fix_alpha;kernel_x;+0x30;[no reason] 4\n"));
	assert_non_null(strstr(text, "kernel_y;+0x20;long_scoreboard 6\n"));
	/* Named, it is another instruction frame. */
	assert_non_null(strstr(
		text,
		"pie;main;fix_beta;fix_alpha;step;kernel_x;+0x20 LDG.E.128;long_scoreboard 8\n"));
	free(text);
	stack_agg__free(a);
}

/* The sampler's record made a stack: kernel frames then user frames, each
 * of its kind -- native, Python, a signal marker -- every frame but each
 * part's leaf a return address, and a truncated stack's marker at the
 * root; named as such. */
static void test_kinds(void **state)
{
	struct world *w = *state;
	struct stack_agg *a = stack_agg__new(w->sym, 10);
	struct cpu_sample s;
	struct stack *st = w->st;
	char *text;

	memset(&s, 0, sizeof(s));
	s.ts_ns = 200;
	s.pid = PID;
	s.tid = 1;
	s.nkern = 2;
	s.nuser = 5;
	s.flags = CPU_SF_TRUNCATED;
	memcpy(s.comm, "pie", 4);
	s.ips[0] = 0xffffffff81000010ull;
	s.ips[1] = 0xffffffff81000020ull;
	s.ips[2] = BASE + w->alpha + 2;
	s.ips[3] = UNW_SIGNAL_FRAME;
	s.ips[4] = BASE + w->beta + 9;
	s.ips[5] = 1ull << 63 | 42; /* a Python frame's token */
	s.ips[6] = BASE + w->main_ + 9;
	stack__from_sample(st, &s);
	assert_int_equal(st->nframes, 8);
	assert_int_equal(st->frames[0].kind, FRAME_KERNEL);
	assert_int_equal(st->frames[0].flags, 0);
	assert_int_equal(st->frames[1].kind, FRAME_KERNEL);
	assert_int_equal(st->frames[1].flags, FRAME_F_CALLER);
	assert_int_equal(st->frames[2].kind, FRAME_NATIVE);
	assert_int_equal(st->frames[2].flags, 0);
	assert_int_equal(st->frames[3].kind, FRAME_MARKER);
	assert_int_equal(st->frames[3].addr, STACK_MARK_SIGNAL);
	assert_int_equal(st->frames[4].kind, FRAME_NATIVE);
	assert_int_equal(st->frames[4].flags, FRAME_F_CALLER);
	assert_int_equal(st->frames[5].kind, FRAME_PYTHON);
	assert_int_equal(st->frames[6].kind, FRAME_NATIVE);
	assert_int_equal(st->frames[7].kind, FRAME_MARKER);
	assert_int_equal(st->frames[7].addr, STACK_MARK_TRUNCATED);
	assert_true(stack__has_user(st));
	assert_string_equal(st->comm, "pie");

	/* Only the kernel's: no user frames to name in an image. */
	s.nuser = 0;
	s.flags = 0;
	stack__from_sample(st, &s);
	assert_int_equal(st->nframes, 2);
	assert_false(stack__has_user(st));

	s.nkern = 0;
	s.nuser = 5;
	s.flags = CPU_SF_TRUNCATED;
	memmove(s.ips, s.ips + 2, 5 * sizeof(s.ips[0]));
	stack__from_sample(st, &s);
	stack_agg__add(a, st);
	text = folded(a);
	/* Root first: the marker, main, the Python frame, fix_beta, the
	 * signal, fix_alpha. */
	assert_non_null(
		strstr(text, "pie;[truncated];main;[python];fix_beta;[signal];fix_alpha 1\n"));
	free(text);
	stack_agg__free(a);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_collapse_and_name, setup, teardown),
		cmocka_unit_test_setup_teardown(test_images_across_exec, setup, teardown),
		cmocka_unit_test_setup_teardown(test_leaves_and_bounds, setup, teardown),
		cmocka_unit_test_setup_teardown(test_no_stack, setup, teardown),
		cmocka_unit_test_setup_teardown(test_ranges, setup, teardown),
		cmocka_unit_test_setup_teardown(test_who, setup, teardown),
		cmocka_unit_test_setup_teardown(test_instr, setup, teardown),
		cmocka_unit_test_setup_teardown(test_kinds, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
