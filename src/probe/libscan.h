/* libscan.h: finds CUDA and NCCL code in processes for the GPU probes
 * (src/probe/gpu_probes.c): which mapped files are CUDA runtime, driver or
 * NCCL libraries (or PyTorch's libtorch_cpu), which executables link the
 * runtime statically, and at which file offsets their functions start
 * (what a uprobe is attached to).
 * Symbols and segments are read by src/symbolize/elf.h's elf_find_syms()
 * from .dynsym and, for executables, .symtab; the mappings by
 * src/symbolize/maps.h's parser. */
#ifndef SONDE_PROBE_LIBSCAN_H
#define SONDE_PROBE_LIBSCAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Families of GPU APIs a file can hold (a bitmask). */
#define LIBSCAN_RT 0x1	   /* CUDA runtime: libcudart.so*, or linked statically */
#define LIBSCAN_DRV 0x2	   /* CUDA driver: libcuda.so* */
#define LIBSCAN_NCCL 0x4   /* NCCL: libnccl.so* */
#define LIBSCAN_TORCH 0x8  /* PyTorch's RecordFunction: libtorch_cpu.so* */
#define LIBSCAN_CUPTI 0x10 /* Sonde's CUPTI library: libsonde_cupti.so */

/* The family a shared library's file name says it holds: "libcudart.so.13"
 * is LIBSCAN_RT, "libcuda.so.1" LIBSCAN_DRV, "libnccl.so.2" LIBSCAN_NCCL,
 * "libtorch_cpu.so" LIBSCAN_TORCH;
 * anything else (libcudadevrt.a, libcudnn.so, libcudart_static.a) is 0.
 * Only the last component of path is looked at. */
unsigned libscan_classify(const char *path);

/* The files the program exe maps when it starts, as its dynamic loader
 * resolves them with this process's environment (the loader run in list
 * mode: it maps the libraries and runs none of their code): fn is called
 * with the program (a script's interpreter), its loader and each library.
 * Returns the number of files, or a negative errno (gpu_discover.c). */
typedef void (*libscan_path_fn)(void *ctx, const char *path);
int libscan_needed(const char *exe, libscan_path_fn fn, void *ctx);

/* Where to time PyTorch's record_function scopes in a libtorch_cpu file
 * (libscan_torch.c): the file offsets of the calls of
 * at::RecordFunction::RecordFunction(at::RecordScope) that pass USER_SCOPE
 * (begin), and of the explicit calls of at::RecordFunction::end() outside
 * its destructors (end) -- not the functions themselves, which every
 * operator scope and destructor runs through. A probe there sees the
 * call's arguments in their registers (this in rdi, the scope in esi).
 * Returns 0, -ENODATA when either kind is missing (not a libtorch, or one
 * built so differently that its calls were not recognised), or another
 * negative errno. */
#define LIBSCAN_TORCH_SITES 16
struct libscan_torch_sites {
	uint64_t begin[LIBSCAN_TORCH_SITES], end[LIBSCAN_TORCH_SITES];
	size_t nbegin, nend;
};
int libscan_torch_sites(const char *path, struct libscan_torch_sites *out);

/* A file mapping of a process (symbolize/maps.h's struct maps_line, as the
 * GPU probes read it): path has any " (deleted)" suffix removed, with
 * deleted set, and lives for the callback only. */
struct libscan_map {
	uint64_t start, end, pgoff;
	uint32_t dev_major, dev_minor;
	uint64_t inode;
	char perms[5];
	bool deleted;
	const char *path;
};

/* Calls fn for every file-backed mapping of pid (anonymous and special
 * mappings such as [heap] are skipped) until fn returns non-zero, which is
 * then returned: maps__each_file() (symbolize/maps.h). Returns 0 at the
 * end, or a negative errno when the maps can't be read (-ENOENT: the
 * process is gone). */
typedef int (*libscan_map_fn)(void *ctx, const struct libscan_map *m);
int libscan_each_map(uint32_t pid, libscan_map_fn fn, void *ctx);

#endif
