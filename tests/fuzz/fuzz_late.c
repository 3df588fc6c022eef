/* fuzz_late.c: libFuzzer target for the deferred CPU sample records
 * (struct cpu_sample_late, bpf/cpu.h) and their walk in userspace
 * (src/unwind/late.c): unw_late__add() must refuse a record that is not one
 * and take any other; a forced poll must hand every taken one on, walked
 * over the stack bytes it kept with whatever unwind rows, Python frames and
 * registers it carries, within the frame bound and without reading past
 * what it kept.
 *
 * The BPF maps the unwinder keeps its tables in can't be had here: the
 * unwinder's four calls late.c makes are this harness's, answering every
 * file with the same table of rows taken from the input (sorted by file
 * offset), as a CPython interpreter or not. The mappings are real: the
 * symbolizer's, of this process, so that a pc in its code reaches those
 * rows.
 *
 * Input: a header byte (bits 0-3: rows, bit 4: the table is an
 * interpreter's, bit 5: the size handed over is the record's own (its head
 * plus nstack, nstack rounded to pages) rather than the input's), the rows
 * (8 bytes each), then the record's bytes, zero-padded: its pid is this
 * process's, 0 or one that can't exist; with bit 6 its pc, sp and bp are
 * rebased into this process's code and the record's kept stack. */
#include <errno.h>
#include <link.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuzz_common.h"
#include "symbolize/symbolize.h"
#include "unwind/late.h"
#include "unwind/unwinder.h"

#define NO_SUCH_PID 4194305u /* above PID_MAX_LIMIT (2^22) */
#define HDR_ROWS 0x0f
#define HDR_PYTHON 0x10
#define HDR_OWN_SIZE 0x20
#define HDR_REBASE 0x40

static struct symbolizer *sym;
static uint32_t self_pid;
static uint64_t code_start, code_len;

static struct unw_row rows[HDR_ROWS];
static uint32_t nrows;
static bool python;

/* ---- the unwinder, as late.c sees it -------------------------------------- */

int unwinder__table(struct unwinder *u, const struct unw_file_key *key, struct unwinder_table *out)
{
	memset(out, 0, sizeof(*out));
	out->rows = nrows ? rows : NULL;
	out->n = nrows;
	if (python) {
		out->python = true;
		out->py.neval = 1;
		out->py.eval_start[0] = 0;
		out->py.eval_end[0] = 1 << 20;
	}
	return 0;
}

int unwinder__request(struct unwinder *u, const struct unw_file_key *key, const char *path,
		      const char *name)
{
	return 0;
}

uint64_t unwinder__generation(const struct unwinder *u)
{
	return 0;
}

/* ---- the harness ----------------------------------------------------------- */

static int first_code(struct dl_phdr_info *info, size_t size, void *ctx)
{
	for (int i = 0; i < info->dlpi_phnum && !code_len; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];

		if (ph->p_type == PT_LOAD && (ph->p_flags & PF_X) && ph->p_memsz) {
			code_start = info->dlpi_addr + ph->p_vaddr;
			code_len = ph->p_memsz;
		}
	}
	return code_len != 0;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	fuzz_setup();
	sym = symbolizer__new();
	FUZZ_CHECK(sym, "symbolizer__new: %s", strerror(errno));
	self_pid = (uint32_t)getpid();
	dl_iterate_phdr(first_code, NULL);
	FUZZ_CHECK(code_len, "no code mapped");
	return 0;
}

static int cmp_row(const void *a, const void *b)
{
	uint32_t x = ((const struct unw_row *)a)->off, y = ((const struct unw_row *)b)->off;

	return x < y ? -1 : x > y;
}

struct got {
	int n;
	struct cpu_sample want; /* the record as taken */
};

static void on_done(void *ctx, const struct cpu_sample *s)
{
	struct got *g = ctx;
	uint32_t nk = g->want.nkern > 0 ? (uint32_t)g->want.nkern : 0;

	g->n++;
	FUZZ_CHECK(s->pid == g->want.pid && s->nkern == g->want.nkern, "the sample's head changed");
	FUZZ_CHECK(!(s->flags & CPU_SF_LATE), "a finished sample still says it is late");
	FUZZ_CHECK(s->nuser >= g->want.nuser && s->nuser <= CPU_MAX_FRAMES,
		   "%d user frames finished from %d", s->nuser, g->want.nuser);
	FUZZ_CHECK(!memcmp(s->ips, g->want.ips, (nk + g->want.nuser) * sizeof(s->ips[0])),
		   "the frames the BPF side walked changed");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct cpu_sample_late r;
	const size_t head = offsetof(struct cpu_sample_late, l.stack);
	struct unw_late_stats st;
	struct unw_late *l;
	struct got g = {0};
	size_t n, hand;
	uint8_t hdr;
	int err;

	if (!size)
		return 0;
	hdr = data[0];
	data++;
	size--;
	nrows = hdr & HDR_ROWS;
	if (size < nrows * sizeof(rows[0]))
		nrows = size / sizeof(rows[0]);
	memcpy(rows, data, nrows * sizeof(rows[0]));
	qsort(rows, nrows, sizeof(rows[0]), cmp_row);
	data += nrows * sizeof(rows[0]);
	size -= nrows * sizeof(rows[0]);
	python = hdr & HDR_PYTHON;

	memset(&r, 0, sizeof(r));
	n = size < sizeof(r) ? size : sizeof(r);
	memcpy(&r, data, n);
	r.s.pid = r.s.pid % 3 == 0 ? self_pid : r.s.pid % 3 == 1 ? 0 : NO_SUCH_PID;
	hand = size;
	if (hdr & HDR_OWN_SIZE) {
		r.l.nstack = r.l.nstack % (LATE_STACK_BYTES + 1) / LATE_PAGE * LATE_PAGE;
		hand = head + r.l.nstack;
	}
	if (hdr & HDR_REBASE) {
		r.l.pc = code_start + r.l.pc % code_len;
		r.l.stack_base = (uintptr_t)r.l.stack & ~(uint64_t)(LATE_PAGE - 1);
		r.l.sp = r.l.stack_base + r.l.sp % ((uint64_t)r.l.nstack + 1);
		r.l.bp = r.l.stack_base + r.l.bp % (LATE_STACK_BYTES + 1);
	}

	l = unw_late__new(NULL, sym, &(struct unw_late_opts){.max_bytes = 1 << 20});
	g.want = r.s;
	err = unw_late__add(l, &r, hand);
	FUZZ_CHECK(err == 0 || err == -EINVAL, "unw_late__add: %d", err);
	FUZZ_CHECK(err || hand == head + r.l.nstack, "a record of %zu bytes taken for %u kept",
		   hand, r.l.nstack);
	unw_late__poll(l, true, on_done, &g);
	unw_late__stats(l, &st);
	FUZZ_CHECK(g.n == !err, "%d samples handed on for %s record", g.n,
		   err ? "a refused" : "a taken");
	FUZZ_CHECK(!st.waiting && !st.waiting_bytes, "a forced poll left %lu waiting",
		   (unsigned long)st.waiting);
	unw_late__free(l);
	return 0;
}
