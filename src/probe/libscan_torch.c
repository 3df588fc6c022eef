/* libscan_torch.c: where PyTorch's libtorch_cpu opens and closes the scopes
 * of torch.autograd.profiler.record_function -- the hook of the DataLoader
 * waits (src/agent/dataloader.h). See libscan_torch_sites() in libscan.h.
 *
 * Why call sites and not functions: at::RecordFunction's constructor and
 * end() are exported, but every operator scope (FUNCTION) and every
 * autograd node makes one too, and every destructor calls end() -- a
 * hundred or more per training step of a small model. A uprobe costs a
 * trap (several microseconds in a VM), so probing the functions slowed a
 * CPU training step by a third. record_function's own scopes are made
 * and ended at two or three places: the call of the constructor with the
 * constant USER_SCOPE, and the explicit end() calls outside the
 * destructor. Those instructions are found by scanning the code for calls
 * (e8, and e9 tail calls) whose target is the function or its PLT stub,
 * and kept only when the instructions before them look like what a
 * compiler emits there -- the scope loaded into esi, the object into rdi
 * -- so that a byte run that merely looks like such a call (the scan does
 * not decode instructions) is never probed: a uprobe in the middle of an
 * instruction would corrupt it. The BPF programs check the scope again at
 * run time. */
#include "probe/libscan.h"
#include "common/xalloc.h"
#include "gpu.h" /* GPU_TORCH_USER_SCOPE */
#include "symbolize/elf.h"

#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CTOR_C1 "_ZN2at14RecordFunctionC1ENS_11RecordScopeE"
#define CTOR_C2 "_ZN2at14RecordFunctionC2ENS_11RecordScopeE"
#define END "_ZN2at14RecordFunction3endEv"
#define DTORS 3 /* D0 (deleting), D1, D2 */
static const char *const dtors[DTORS] = {
	"_ZN2at14RecordFunctionD0Ev",
	"_ZN2at14RecordFunctionD1Ev",
	"_ZN2at14RecordFunctionD2Ev",
};

#define MAX_TARGETS 8
#define SCOPE_WINDOW 24	 /* bytes before a constructor call where the scope is loaded */
#define CHUNK (4u << 20) /* code read at a time */

/* What the scan looks for, as ELF addresses. */
struct targets {
	uint64_t ctor[MAX_TARGETS], end[MAX_TARGETS];
	size_t nctor, nend;
	uint64_t dtor_lo[DTORS], dtor_hi[DTORS];
	/* dynsym indices of the constructor and end(), for the relocations
	 * of their GOT slots; and the slots */
	size_t ctor_sym[2], end_sym;
	uint64_t ctor_got[MAX_TARGETS], end_got[MAX_TARGETS];
	size_t nctor_got, nend_got;
};

static void add(uint64_t *v, size_t *n, uint64_t x)
{
	for (size_t i = 0; i < *n; i++)
		if (v[i] == x)
			return;
	if (*n < MAX_TARGETS)
		v[(*n)++] = x;
}

static bool has(const uint64_t *v, size_t n, uint64_t x)
{
	for (size_t i = 0; i < n; i++)
		if (v[i] == x)
			return true;
	return false;
}

/* The functions, from .dynsym (walked by symbolize/elf.h's elf_each_sym). */
static int find_function(void *ctx, Elf *elf, const GElf_Shdr *sh, size_t i, const GElf_Sym *sym,
			 GElf_Versym ver)
{
	struct targets *t = ctx;
	const char *name;

	if (sym->st_name == 0)
		return 0;
	name = elf_strptr(elf, sh->sh_link, sym->st_name);
	if (!name)
		return 0;
	/* Undefined or not: the relocations name them by index. */
	if (!strcmp(name, CTOR_C1))
		t->ctor_sym[0] = i;
	else if (!strcmp(name, CTOR_C2))
		t->ctor_sym[1] = i;
	else if (!strcmp(name, END))
		t->end_sym = i;
	if (sym->st_shndx == SHN_UNDEF || !sym->st_value || GELF_ST_TYPE(sym->st_info) != STT_FUNC)
		return 0;
	if (!strcmp(name, CTOR_C1) || !strcmp(name, CTOR_C2))
		add(t->ctor, &t->nctor, sym->st_value);
	else if (!strcmp(name, END))
		add(t->end, &t->nend, sym->st_value);
	for (int d = 0; d < DTORS; d++)
		if (!strcmp(name, dtors[d])) {
			t->dtor_lo[d] = sym->st_value;
			t->dtor_hi[d] = sym->st_value + sym->st_size;
		}
	return 0;
}

/* The GOT slots the PLT stubs of the functions jump through. */
static void find_slots(Elf_Scn *scn, const GElf_Shdr *sh, struct targets *t)
{
	Elf_Data *data = elf_getdata(scn, NULL);
	size_t n;

	if (!data || !sh->sh_entsize)
		return;
	n = sh->sh_size / sh->sh_entsize;
	for (size_t i = 0; i < n; i++) {
		GElf_Rela r;
		size_t sym;
		unsigned type;

		if (!gelf_getrela(data, (int)i, &r))
			break;
		sym = GELF_R_SYM(r.r_info);
		type = GELF_R_TYPE(r.r_info);
		if (!sym || (type != R_X86_64_JUMP_SLOT && type != R_X86_64_GLOB_DAT))
			continue;
		if (sym == t->ctor_sym[0] || sym == t->ctor_sym[1])
			add(t->ctor_got, &t->nctor_got, r.r_offset);
		else if (sym == t->end_sym)
			add(t->end_got, &t->nend_got, r.r_offset);
	}
}

static int32_t rel32(const uint8_t *p)
{
	int32_t v;

	memcpy(&v, p, sizeof(v));
	return v;
}

/* The stubs of a PLT section (.plt, .plt.sec, .plt.got) that jump through
 * one of the slots: `jmp *disp32(%rip)` (ff 25), maybe after endbr64 (f3
 * 0f 1e fa) and a bnd prefix (f2); the stub starts there. */
static void find_stubs(Elf_Scn *scn, const GElf_Shdr *sh, struct targets *t)
{
	Elf_Data *data = elf_getdata(scn, NULL);
	const uint8_t *b;

	if (!data || !data->d_buf || data->d_size < 6)
		return;
	b = data->d_buf;
	for (size_t j = 0; j + 6 <= data->d_size; j++) {
		uint64_t slot, start = j;

		if (b[j] != 0xff || b[j + 1] != 0x25)
			continue;
		slot = sh->sh_addr + j + 6 + (int64_t)rel32(b + j + 2);
		if (start >= 1 && b[start - 1] == 0xf2)
			start--;
		if (start >= 4 && !memcmp(b + start - 4, "\xf3\x0f\x1e\xfa", 4))
			start -= 4;
		if (has(t->ctor_got, t->nctor_got, slot))
			add(t->ctor, &t->nctor, sh->sh_addr + start);
		else if (has(t->end_got, t->nend_got, slot))
			add(t->end, &t->nend, sh->sh_addr + start);
	}
}

/* Whether the bytes before a constructor call load the user scope into
 * esi: mov $7,%esi (be 07 00 00 00) or mov $7,%sil (40 b6 07). */
static bool loads_scope(const uint8_t *b, size_t at)
{
	size_t from = at > SCOPE_WINDOW ? at - SCOPE_WINDOW : 0;

	for (size_t i = from; i < at; i++) {
		if (i + 5 <= at && b[i] == 0xbe && b[i + 1] == GPU_TORCH_USER_SCOPE && !b[i + 2] &&
		    !b[i + 3] && !b[i + 4])
			return true;
		if (i + 3 <= at && b[i] == 0x40 && b[i + 1] == 0xb6 &&
		    b[i + 2] == GPU_TORCH_USER_SCOPE)
			return true;
	}
	return false;
}

/* Whether the instruction that ends right before `at` sets rdi: the forms
 * a compiler loads a call's first (pointer) argument with. The REX prefix
 * has W set, and the bit that would make the rdi field r15 clear. */
static bool sets_rdi(const uint8_t *b, size_t at)
{
	uint8_t m;

	if (at >= 3) {
		m = b[at - 1];
		/* mov %reg,%rdi (89 /r, rm = rdi, mod 11) */
		if ((b[at - 3] & 0xfb) == 0x48 && b[at - 2] == 0x89 && (m & 0xc7) == 0xc7)
			return true;
		/* mov %reg,%rdi (8b, reg = rdi, mod 11); mov (%reg),%rdi
		 * (mod 00, neither SIB nor RIP-relative) */
		if ((b[at - 3] & 0xfe) == 0x48 && b[at - 2] == 0x8b && (m & 0x38) == 0x38 &&
		    ((m & 0xc0) == 0xc0 || ((m & 0xc0) == 0 && (m & 7) != 4 && (m & 7) != 5)))
			return true;
	}
	if (at >= 4) {
		m = b[at - 2];
		/* mov disp8(%reg),%rdi, lea disp8(%reg),%rdi (mod 01, no SIB) */
		if ((b[at - 4] & 0xfe) == 0x48 && (b[at - 3] == 0x8b || b[at - 3] == 0x8d) &&
		    (m & 0xf8) == 0x78 && (m & 7) != 4)
			return true;
		/* add $imm8,%rdi */
		if (b[at - 4] == 0x48 && b[at - 3] == 0x83 && m == 0xc7)
			return true;
	}
	if (at >= 7) {
		m = b[at - 5];
		/* lea disp32(%reg),%rdi (mod 10, no SIB), lea disp32(%rip),%rdi */
		if ((b[at - 7] & 0xfe) == 0x48 && b[at - 6] == 0x8d &&
		    (((m & 0xf8) == 0xb8 && (m & 7) != 4) || (b[at - 7] == 0x48 && m == 0x3d)))
			return true;
		/* add $imm32,%rdi */
		if (b[at - 7] == 0x48 && b[at - 6] == 0x81 && m == 0xc7)
			return true;
	}
	return false;
}

static bool in_dtor(const struct targets *t, uint64_t addr)
{
	for (int d = 0; d < DTORS; d++)
		if (addr >= t->dtor_lo[d] && addr < t->dtor_hi[d])
			return true;
	return false;
}

/* Scans an executable section, read a chunk at a time (each chunk starts
 * SCOPE_WINDOW bytes before the last one ended, so a call's lead-in is
 * whole, and runs 4 bytes past it for a call's operand). */
static int scan_code(int fd, const GElf_Shdr *sh, const struct targets *t,
		     struct libscan_torch_sites *out)
{
	uint8_t *buf = xmalloc(CHUNK + SCOPE_WINDOW + 4);
	uint64_t pos = 0;
	int err = 0;

	while (pos < sh->sh_size) {
		uint64_t lead = pos >= SCOPE_WINDOW ? SCOPE_WINDOW : pos;
		uint64_t want = sh->sh_size - pos + lead, len;
		ssize_t n;

		if (want > CHUNK + SCOPE_WINDOW + 4)
			want = CHUNK + SCOPE_WINDOW + 4;
		n = pread(fd, buf, want, (off_t)(sh->sh_offset + pos - lead));
		if (n < 0) {
			err = -errno;
			break;
		}
		if ((uint64_t)n < want) {
			err = -EIO; /* a truncated file */
			break;
		}
		/* Calls whose opcode lies in [pos, pos + len). */
		len = want - lead >= 5 ? want - lead - 4 : 0;
		if (pos + len > sh->sh_size)
			len = sh->sh_size - pos;
		for (uint64_t i = lead; i < lead + len; i++) {
			uint64_t addr, target;

			if ((buf[i] != 0xe8 && buf[i] != 0xe9) || i + 5 > (uint64_t)n)
				continue;
			addr = sh->sh_addr + pos + (i - lead);
			target = addr + 5 + (int64_t)rel32(buf + i + 1);
			if (buf[i] == 0xe8 && has(t->ctor, t->nctor, target) &&
			    loads_scope(buf, i)) {
				if (out->nbegin < LIBSCAN_TORCH_SITES)
					out->begin[out->nbegin++] =
						sh->sh_offset + pos + (i - lead);
			} else if (has(t->end, t->nend, target) && !in_dtor(t, addr) &&
				   sets_rdi(buf, i)) {
				if (out->nend < LIBSCAN_TORCH_SITES)
					out->end[out->nend++] = sh->sh_offset + pos + (i - lead);
			}
		}
		pos += len ? len : sh->sh_size - pos;
	}
	free(buf);
	return err;
}

/* Whether scn is code, its header in sh: 1 for the PLT's (.plt, .plt.sec:
 * the stubs), 0 for other code, -1 for no code. */
static int code_section(Elf *elf, Elf_Scn *scn, GElf_Shdr *sh)
{
	size_t shstrndx;
	const char *name;

	if (!gelf_getshdr(scn, sh) || sh->sh_type != SHT_PROGBITS ||
	    !(sh->sh_flags & SHF_EXECINSTR) || elf_getshdrstrndx(elf, &shstrndx))
		return -1;
	name = elf_strptr(elf, shstrndx, sh->sh_name);
	return name && !strncmp(name, ".plt", 4);
}

int libscan_torch_sites(const char *path, struct libscan_torch_sites *out)
{
	struct targets t = {0};
	Elf_Scn *scn = NULL;
	GElf_Ehdr eh;
	Elf *elf = NULL;
	int fd, err = 0;

	memset(out, 0, sizeof(*out));
	elf = elf_open_path(path, &fd);
	if (!elf)
		return -errno;
	if (!gelf_getehdr(elf, &eh) || eh.e_machine != EM_X86_64) {
		err = -ENOEXEC;
		goto cleanup;
	}
	/* The functions, then the slots their stubs use, then the stubs. */
	elf_each_sym(elf, NULL, SHT_DYNSYM, find_function, &t, NULL);
	if (!t.ctor_sym[0] && !t.ctor_sym[1] && !t.nctor) {
		err = -ENODATA;
		goto cleanup;
	}
	while ((scn = elf_nextscn(elf, scn))) {
		GElf_Shdr sh;

		if (gelf_getshdr(scn, &sh) && sh.sh_type == SHT_RELA)
			find_slots(scn, &sh, &t);
	}
	while ((scn = elf_nextscn(elf, scn))) {
		GElf_Shdr sh;

		if (code_section(elf, scn, &sh) == 1)
			find_stubs(scn, &sh, &t);
	}
	while ((scn = elf_nextscn(elf, scn))) {
		GElf_Shdr sh;

		if (code_section(elf, scn, &sh) != 0)
			continue;
		err = scan_code(fd, &sh, &t, out);
		if (err)
			goto cleanup;
	}
	err = out->nbegin && out->nend ? 0 : -ENODATA;

cleanup:
	elf_end(elf);
	close(fd);
	return err;
}
