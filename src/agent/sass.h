/* sass.h: GPU instructions named from their cubins. Sonde's CUPTI library
 * saves each module's cubin under the CRC its PC samples carry and tells
 * where (sass__cubin); a sample's instruction (its function and offset) is
 * then named by the toolkit's disassembler, nvdisasm (SONDE_NVDISASM, else
 * the PATH, $CUDA_HOME/bin, /usr/local/cuda/bin): "LDG.E.128", its
 * mnemonic with modifiers, predicate left out. Sonde does not decode SASS
 * itself: NVIDIA documents no encoding.
 *
 * Disassembly runs on a thread of its own, one cubin at a time, keeping
 * only the functions asked for (a cubin of PyTorch's holds hundreds), so a
 * lookup never waits: it says the name is pending, and the caller asks
 * again later. Bounded: SASS_MAX_CUBINS cubins known, SASS_MAX_INSNS
 * instructions kept, nvdisasm's output read up to SASS_MAX_OUTPUT bytes
 * and SASS_TIMEOUT_MS; a cubin it fails on is not tried again. Thread-safe. */
#ifndef SONDE_AGENT_SASS_H
#define SONDE_AGENT_SASS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SASS_MAX_CUBINS 4096
#define SASS_MAX_INSNS (4u << 20)
#define SASS_MAX_OUTPUT (512u << 20)
#define SASS_TIMEOUT_MS 60000

struct sass;

/* nvdisasm at path (NULL: found as above); NULL when there is none (said
 * once in the debug log): instructions then go by their offsets alone. */
struct sass *sass__new(const char *path);
void sass__free(struct sass *s);

/* pid's cubin of that CRC is at path in its mount namespace (read through
 * /proc/PID/root while it lives, else at path). */
void sass__cubin(struct sass *s, uint32_t pid, uint64_t crc, const char *path);

enum sass_state {
	SASS_NONE,    /* no name: no cubin told, no such instruction, or nvdisasm failed */
	SASS_PENDING, /* being disassembled: ask again */
	SASS_READY,   /* *mnemonic set (valid for s's life) */
};
/* The instruction at offset in function (mangled) of cubin crc. */
enum sass_state sass__lookup(struct sass *s, uint64_t crc, const char *function, uint64_t offset,
			     const char **mnemonic);
/* Waits up to ms for the disassemblies asked for so far; whether none is
 * left. */
bool sass__wait(struct sass *s, int ms);

/* Parses nvdisasm's output (len bytes) into fn's calls, for each
 * instruction: its function (mangled), offset and mnemonic. Exposed for
 * the fuzzer and tests. Returns the instructions seen. */
typedef void (*sass_insn_fn)(void *ctx, const char *function, uint64_t offset,
			     const char *mnemonic);
size_t sass_parse(const char *text, size_t len, sass_insn_fn fn, void *ctx);

struct sass_stats {
	uint64_t runs;	   /* nvdisasm runs */
	uint64_t failures; /* ... that failed (exit, timeout, output bound) */
	uint64_t insns;	   /* instructions kept */
};
void sass__stats(struct sass *s, struct sass_stats *out);

#endif
