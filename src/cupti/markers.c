/* markers.c: the CUPTI library's marker functions (declared in
 * sonde_cupti_internal.h), which do nothing: the GPU probes put uprobes on
 * them and read their arguments from the registers. On x86-64 each begins
 * with a 5-byte NOP, the instruction a kernel can probe without a trap of
 * its own (a newer kernel turns a uprobe there into a call into its
 * uprobe trampoline) or single-stepping out of line: a compiler's empty
 * function is a lone `ret`, which the kernel steps out of line -- a second
 * exception at every call (7.7 of the 14.1 us a launch cost with the agent,
 * docs/perf.md). Elsewhere, plain empty functions. */
#include "cupti/sonde_cupti_internal.h"

#if defined(__x86_64__)
#define MARKER(name)                                                                               \
	__asm__(".text\n"                                                                          \
		".globl " #name "\n"                                                               \
		".type " #name ", @function\n"                                                     \
		".p2align 4\n" #name ":\n"                                                         \
		"\t.byte 0x0f, 0x1f, 0x44, 0x00, 0x00\n" /* nopl 0x0(%rax,%rax,1) */               \
		"\tret\n"                                                                          \
		".size " #name ", .-" #name "\n")
MARKER(sonde_cupti_launch);
MARKER(sonde_cupti_records);
MARKER(sonde_cupti_clock);
MARKER(sonde_cupti_nvtx);
#else
#define NOINLINE __attribute__((noinline, used))
NOINLINE void sonde_cupti_launch(uint32_t correlation, uint32_t nvtx)
{
	__asm__ volatile("" : : "r"(correlation), "r"(nvtx) : "memory");
}

NOINLINE void sonde_cupti_records(const struct sonde_cupti_record *r, uint32_t n)
{
	__asm__ volatile("" : : "r"(r), "r"(n) : "memory");
}

NOINLINE void sonde_cupti_clock(uint64_t gpu_ns, uint64_t host_ns, uint64_t dropped,
				uint64_t stall_dropped)
{
	__asm__ volatile(""
			 :
			 : "r"(gpu_ns), "r"(host_ns), "r"(dropped), "r"(stall_dropped)
			 : "memory");
}

NOINLINE void sonde_cupti_nvtx(uint32_t id, const char *path)
{
	__asm__ volatile("" : : "r"(id), "r"(path) : "memory");
}
#endif
