/*
 * truth.h: the ground truth a GPU workload keeps about its own CUDA and NCCL calls and
 * prints as one JSON line on stdout when it ends, for tests to compare with what Sonde
 * measured from outside. Only calls that returned success count, except in the `failed`
 * maps. Thread-safe. tests/gpu/README.md documents the JSON.
 */
#ifndef SONDE_GPU_TRUTH_H
#define SONDE_GPU_TRUTH_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

void truth_init(const char *workload);
/* A top-level field with a raw JSON value, e.g. truth_note("steps", "%d", 20). */
void truth_note(const char *key, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* `n` successful launches through `api`; `kernel` is the demangled name (NULL for graph
 * launches) and `symbol` the mangled one it comes from. */
void truth_launch(const char *api, const char *kernel, const char *symbol, uint64_t n);
/* `n` of the launches above were made while their stream was being captured. */
void truth_captured(uint64_t n);
void truth_failed(const char *api);

/* An allocation of `size` bytes at device address `ptr` on device `dev`. */
void truth_alloc(const char *api, int dev, uint64_t ptr, size_t size);
/* The free of an address truth_alloc() saw; its size and device come from there. */
void truth_free(const char *api, uint64_t ptr);
/* Around an allocation or free and its truth_alloc()/truth_free() in a job of many threads:
 * the call and its record happen as one, so that the peak truth sees is the order the calls
 * took (else one thread's free can land in truth after another's later allocation). */
void truth_mem_begin(void);
void truth_mem_end(void);

void truth_wait(const char *api, uint64_t ns);
/* `kind` is HostToDevice, DeviceToHost, DeviceToDevice, HostToHost or Default. */
void truth_copy(const char *api, const char *kind, size_t bytes);
/* A collective or point-to-point call moving count x datatype size = `bytes`. */
void truth_nccl(const char *op, size_t bytes);
void truth_nccl_group(void);
void truth_comm(int rank, int nranks, int dev);

void truth_print(void);

uint64_t truth_now_ns(void);

#ifdef __cplusplus
}
#endif

#endif /* SONDE_GPU_TRUTH_H */
