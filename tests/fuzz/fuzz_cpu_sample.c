/* fuzz_cpu_sample.c: libFuzzer target for what userspace does with the
 * struct cpu_sample records (bpf/cpu.h) the BPF program hands it: aggregate
 * them with stack_agg__add() and name them with symbolize_stack() -- each
 * made a struct stack (src/probe/stack.h) as the CPU sampler does -- through
 * a real symbolizer (this process's mappings and ELF files, /proc/kallsyms).
 * The input is a header byte and then records taken as raw bytes -- frame
 * counts may be negative or past CPU_MAX_FRAMES -- except that the pid is
 * one of this process, 0 or one that can't exist, so no other process is
 * read. Header bits 0 and 1 rebase user and kernel addresses into this
 * process's code and the kernel's text so that lookups hit symbols; bits
 * 2-7 give the table size (1-64 stacks), so full tables are fuzzed too.
 * Checked: frame counts, names, kernel flags, the profile the aggregate
 * becomes (its total is the samples kept), its pprof and folded round trips
 * and speedscope output. Seeds are made by gen_seeds.c. */
#include <errno.h>
#include <link.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent/stack_agg.h"
#include "common/utf8.h"
#include "common/xalloc.h"
#include "fuzz_common.h"
#include "fuzz_profile.h"
#include "symbolize/symbolize.h"

#define FUZZ_MAX_RECORDS 8
#define NO_SUCH_PID 4194305u		    /* above PID_MAX_LIMIT (2^22) */
#define KERNEL_SPAN (64ull << 20)	    /* rebased kernel addresses: _stext + 64 MiB */
#define DEFAULT_KBASE 0xffffffff81000000ull /* x86-64 _stext without KASLR */
#define HDR_REBASE_USER 0x1
#define HDR_REBASE_KERNEL 0x2

struct code_range {
	uint64_t start, len;
};

static struct symbolizer *sym;
static struct code_range ranges[64];
static size_t nranges;
static uint64_t kbase = DEFAULT_KBASE;
static uint32_t self_pid;

static struct prof_frame frames[2 * CPU_MAX_FRAMES];
static char names[2 * CPU_MAX_FRAMES][256];

/* Collects the executable PT_LOAD segments of every loaded object. */
static int collect_ranges(struct dl_phdr_info *info, size_t size, void *ctx)
{
	for (int i = 0; i < info->dlpi_phnum && nranges < ARRAY_SIZE(ranges); i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];

		if (ph->p_type == PT_LOAD && (ph->p_flags & PF_X) && ph->p_memsz)
			ranges[nranges++] =
				(struct code_range){info->dlpi_addr + ph->p_vaddr, ph->p_memsz};
	}
	return 0;
}

/* _stext from /proc/kallsyms, or the usual address when it is hidden. */
static void find_kbase(void)
{
	FILE *f = fopen("/proc/kallsyms", "re");
	unsigned long long addr;
	char type, name[256];

	if (!f)
		return;
	while (fscanf(f, "%llx %c %255s%*[^\n]", &addr, &type, name) == 3)
		if (!strcmp(name, "_stext")) {
			if (addr)
				kbase = addr;
			break;
		}
	fclose(f);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	fuzz_setup();
	sym = symbolizer__new();
	FUZZ_CHECK(sym, "symbolizer__new: %s", strerror(errno));
	self_pid = (uint32_t)getpid();
	dl_iterate_phdr(collect_ranges, NULL);
	FUZZ_CHECK(nranges, "no code mapped");
	find_kbase();
	return 0;
}

static int clamp_frames(int32_t n)
{
	return n < 0 ? 0 : n > CPU_MAX_FRAMES ? CPU_MAX_FRAMES : n;
}

/* Record i of the input (zero-padded past its end), with a safe pid and the
 * addresses rebased as the header asks. */
static void get_record(const uint8_t *data, size_t size, size_t i, uint8_t hdr,
		       struct cpu_sample *s)
{
	size_t off = i * sizeof(*s), n = size - off < sizeof(*s) ? size - off : sizeof(*s);
	int nk, nu, j;

	memset(s, 0, sizeof(*s));
	memcpy(s, data + off, n);
	s->pid = s->pid % 3 == 0 ? self_pid : s->pid % 3 == 1 ? 0 : NO_SUCH_PID;
	nk = clamp_frames(s->nkern);
	nu = clamp_frames(s->nuser);
	for (j = 0; j < nk && (hdr & HDR_REBASE_KERNEL); j++)
		s->ips[j] = kbase + s->ips[j] % KERNEL_SPAN;
	for (j = nk; j < nk + nu && (hdr & HDR_REBASE_USER); j++) {
		const struct code_range *r = &ranges[(s->ips[j] >> 32) % nranges];

		s->ips[j] = r->start + (s->ips[j] & 0xffffffff) % r->len;
	}
}

/* The address frame k of s is named with. */
static uint64_t want_addr(const struct cpu_sample *s, size_t k)
{
	uint64_t ip = s->ips[k];

	return k >= (size_t)clamp_frames(s->nkern) && (ip >> 63) ? ip & ~(1ULL << 63) : ip;
}

/* symbolize_stack() of s made a stack (st) into max frames: how many,
 * named how. */
static void check_symbolize(const struct cpu_sample *s, const struct stack *st, size_t max,
			    struct profile *p)
{
	size_t nk = clamp_frames(s->nkern), nu = clamp_frames(s->nuser), want, n, i, k;
	int err;

	want = nk + nu < max ? nk + nu : max;
	/* A cut stack gets a [truncated] frame at its root, room permitting;
	 * no stack at all, a [no stack] one. */
	if ((s->flags & CPU_SF_TRUNCATED) && want > 0 && want < max)
		want++;
	if (!want && max > 0)
		want = 1;
	n = symbolize_stack(sym, st, 0, frames, names, max);
	/* A user address may give more frames than one: the functions DWARF
	 * says were inlined there, each with the address. */
	FUZZ_CHECK(n >= want && n <= (max > 0 ? max : 0),
		   "%zu frames for nkern %d, nuser %d, max %zu", n, s->nkern, s->nuser, max);
	for (i = 0, k = 0; i < n; i++) {
		FUZZ_CHECK(frames[i].func && frames[i].func == names[i], "frame %zu: no name", i);
		FUZZ_CHECK(strnlen(names[i], sizeof(names[i])) < sizeof(names[i]),
			   "frame %zu: name not terminated", i);
		FUZZ_CHECK(*names[i], "frame %zu: empty name", i);
		FUZZ_CHECK(frames[i].kernel == (i < nk), "frame %zu of %zu kernel ones: kernel %d",
			   i, nk, frames[i].kernel);
		/* Each address in order, a Python frame's without its top bit;
		 * the frames inlined at one follow it with the same address. */
		if (k < nk + nu && frames[i].addr == want_addr(s, k)) {
			k++;
			continue;
		}
		FUZZ_CHECK((i > 0 && frames[i].addr == frames[i - 1].addr) ||
				   (i + 1 == n && (!strcmp(names[i], "[truncated]") ||
						   !strcmp(names[i], "[no stack]"))),
			   "frame %zu: address %#llx is not address %zu's (%#llx) nor an inlined "
			   "frame's",
			   i, (unsigned long long)frames[i].addr, k,
			   (unsigned long long)(k < nk + nu ? want_addr(s, k) : 0));
	}
	FUZZ_CHECK(k == nk + nu || n == max, "%zu of %zu addresses in %zu frames of %zu", k,
		   nk + nu, n, max);
	if (p) {
		err = profile__add(p, s->pid, s->tid, "fuzz", frames, n, 1);
		FUZZ_CHECK(!err, "profile__add: %s", strerror(-err));
	}
}

/* A namer as the agent's: the process's name, for this process only. */
static const char *fuzz_service(void *ctx, uint32_t pid, const char *comm, const char **labels)
{
	*labels = pid == self_pid ? "job=fuzz\nrank=0\n" : NULL;
	return pid == self_pid ? comm : NULL;
}

/* The names stack_agg hands the profile -- the records' raw bytes made
 * UTF-8 -- are label values: valid UTF-8. */
static void check_names(const struct profile *p)
{
	for (size_t i = 0; i < p->nsamples; i++) {
		const struct prof_sample *ps = &p->samples[i];
		const uint32_t idx[] = {ps->comm, ps->thread, ps->service};

		for (size_t k = 0; k < ARRAY_SIZE(idx); k++) {
			const char *str = profile__str(p, idx[k]);

			FUZZ_CHECK(strlen(str) < CPU_COMM_LEN && utf8_valid(str, strlen(str)),
				   "sample %zu: name %zu '%.16s' is not a short UTF-8 name", i, k,
				   str);
		}
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct cpu_sample s;
	static struct stack *stk;
	struct profile *direct, *agg_prof, *q;
	struct stack_agg_stats st;
	struct stack_agg *agg;
	size_t nrec, max_stacks, i, len;
	uint8_t hdr;
	char *text;
	int err;

	if (!size)
		return 0;
	hdr = data[0];
	data++;
	size--;
	nrec = (size + sizeof(s) - 1) / sizeof(s);
	if (nrec > FUZZ_MAX_RECORDS)
		nrec = FUZZ_MAX_RECORDS;
	max_stacks = (hdr >> 2) + 1;

	direct = profile__new("cpu", "nanoseconds", 10101010);
	agg_prof = profile__new("cpu", "nanoseconds", 10101010);
	agg = stack_agg__new(sym, max_stacks);
	stack_agg__set_service(agg, fuzz_service, NULL);
	if (!stk)
		stk = stack__new();
	for (i = 0; i < nrec; i++) {
		get_record(data, size, i, hdr, &s);
		stack__from_sample(stk, &s);
		check_symbolize(&s, stk, ARRAY_SIZE(frames), direct);
		check_symbolize(&s, stk, s.cpu % 4, NULL);
		stack_agg__add(agg, stk);
	}

	stack_agg__stats(agg, &st);
	FUZZ_CHECK(st.samples == nrec, "%llu samples of %zu", (unsigned long long)st.samples, nrec);
	FUZZ_CHECK(st.stacks <= max_stacks && st.stacks + st.dropped <= st.samples,
		   "%llu stacks, %llu dropped of %llu", (unsigned long long)st.stacks,
		   (unsigned long long)st.dropped, (unsigned long long)st.samples);
	err = stack_agg__to_profile(agg, agg_prof);
	FUZZ_CHECK(!err, "stack_agg__to_profile: %s", strerror(-err));
	fuzz_check_profile(agg_prof);
	check_names(agg_prof);
	FUZZ_CHECK((uint64_t)agg_prof->total == st.samples - st.dropped,
		   "profile total %lld, %llu samples kept", (long long)agg_prof->total,
		   (unsigned long long)(st.samples - st.dropped));
	FUZZ_CHECK(agg_prof->nsamples <= st.stacks, "%zu samples from %llu stacks",
		   agg_prof->nsamples, (unsigned long long)st.stacks);

	fuzz_check_profile(direct);
	FUZZ_CHECK((size_t)direct->total == nrec, "direct total %lld", (long long)direct->total);
	/* The names come from the records' raw bytes: any reaches the writers. */
	q = fuzz_pprof_roundtrip(agg_prof);
	profile__free(q);
	q = fuzz_folded_roundtrip(agg_prof, &text, &len);
	free(text);
	profile__free(q);
	fuzz_check_speedscope(agg_prof);
	q = fuzz_folded_roundtrip(direct, &text, &len);
	free(text);
	profile__free(q);

	stack_agg__reset(agg);
	stack_agg__stats(agg, &st);
	FUZZ_CHECK(!st.stacks, "%llu stacks after a reset", (unsigned long long)st.stacks);

	stack_agg__free(agg);
	profile__free(agg_prof);
	profile__free(direct);
	return 0;
}
