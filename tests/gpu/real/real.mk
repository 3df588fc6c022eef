# Programs that call the REAL CUDA 13 runtime, the driver stub and NCCL
# from /usr/local/cuda (no GPU: the calls fail after the probes have seen
# their arguments), the harness that dumps what the GPU probes decode, and
# the layout check against the real headers. tests/integration/
# test_gpu_real*.py runs them and skips when CUDA is not installed.
# Included by the top Makefile; `make gpu-real` builds them, `make test`
# too.
CUDA_HOME ?= /usr/local/cuda
NVCC      ?= $(CUDA_HOME)/bin/nvcc
GR        := $(B)/gpu-real
GR_CFLAGS := -O1 -g -fno-omit-frame-pointer -fno-inline -Wall -Wextra
GR_NVFLAGS := -O1 -g -Xcompiler -fno-omit-frame-pointer,-fno-inline -Wno-deprecated-gpu-targets

GPU_REAL := $(GR)/gpu-probe-dump
ifneq ($(wildcard $(NVCC)),)
GPU_REAL += $(GR)/cuda_calls $(GR)/cuda_calls_ptsz $(GR)/cuda_calls_static
endif
ifneq ($(wildcard $(CUDA_HOME)/lib64/stubs/libcuda.so),)
GPU_REAL += $(GR)/driver_calls $(GR)/driver_calls_ptsz
endif
ifneq ($(wildcard $(CUDA_HOME)/include/nccl.h),)
GPU_REAL += $(GR)/nccl_calls $(GR)/layout
endif

.PHONY: gpu-real
gpu-real: $(GPU_REAL)
test-build: gpu-real

$(GR)/gpu-probe-dump: tests/gpu/real/gpu_probe_dump.c $(LIB) | $(SKELS)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -o $@ $< $(LIB) $(LDLIBS)

# The shared runtime, as most programs (PyTorch among them) use it.
$(GR)/cuda_calls: tests/gpu/real/cuda_calls.cu
	@mkdir -p $(@D)
	$(NVCC) $(GR_NVFLAGS) -cudart shared -o $@ $<

# Per-thread default stream: the _ptsz / _ptds entry points.
$(GR)/cuda_calls_ptsz: tests/gpu/real/cuda_calls.cu
	@mkdir -p $(@D)
	$(NVCC) $(GR_NVFLAGS) -cudart shared -default-stream per-thread -o $@ $<

# cudart linked in: its functions are found in the executable's .symtab.
$(GR)/cuda_calls_static: tests/gpu/real/cuda_calls.cu
	@mkdir -p $(@D)
	$(NVCC) $(GR_NVFLAGS) -cudart static -o $@ $<

# The driver stub is named libcuda.so with soname libcuda.so.1: a link
# named libcuda.so.1 beside the program lets the loader find it (the
# process then maps the stub itself).
$(GR)/stubs/libcuda.so.1:
	@mkdir -p $(@D)
	ln -sf $(CUDA_HOME)/lib64/stubs/libcuda.so $@

$(GR)/driver_calls: tests/gpu/real/driver_calls.c $(GR)/stubs/libcuda.so.1
	$(CC) $(GR_CFLAGS) -I$(CUDA_HOME)/include -o $@ $< -L$(CUDA_HOME)/lib64/stubs -lcuda \
		-Wl,-rpath,'$$ORIGIN/stubs'

$(GR)/driver_calls_ptsz: tests/gpu/real/driver_calls.c $(GR)/stubs/libcuda.so.1
	$(CC) $(GR_CFLAGS) -DCUDA_API_PER_THREAD_DEFAULT_STREAM -I$(CUDA_HOME)/include -o $@ $< \
		-L$(CUDA_HOME)/lib64/stubs -lcuda -Wl,-rpath,'$$ORIGIN/stubs'

$(GR)/nccl_calls: tests/gpu/real/nccl_calls.c
	@mkdir -p $(@D)
	$(CC) $(GR_CFLAGS) -I$(CUDA_HOME)/include -o $@ $< -L$(CUDA_HOME)/lib64 -lnccl \
		-Wl,-rpath,$(CUDA_HOME)/lib64

# Compile-time checks of bpf/gpu.h against the real headers, and a run-time
# check of the NCCL type sizes against the library's names for them.
$(GR)/layout: tests/gpu/real/layout.c bpf/gpu.h $(LIB)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -I$(CUDA_HOME)/include -o $@ $< $(LIB) $(LDLIBS)
