# Stand-ins for libcudart.so.13, libcuda.so.1 and libnccl.so.2, and the workloads that
# use them, for GPU tests on machines without a GPU (tests/gpu/README.md). Included from
# the top-level Makefile; `make gpu-standin` builds build/gpu/standin/ and
# build/gpu/workloads/. Needs only the CUDA headers (CUDA_HOME/include); nvcc, when
# present, also builds a workload compiled by it and checks nvcc_abi.h against NVIDIA's
# own declarations. Also works on its own: make -f tests/gpu/standin/standin.mk gpu-standin

B           ?= build
CUDA_HOME   ?= /usr/local/cuda
NVCC        ?= $(CUDA_HOME)/bin/nvcc
SI_NVCC     := $(shell command -v $(NVCC) 2>/dev/null)
SI_SRC      := tests/gpu/standin
SI          := $(B)/gpu/standin
GW_SRC      := tests/gpu/workloads
GW          := $(B)/gpu/workloads

# The stand-ins are compiled against the real headers the way NVIDIA compiles the real
# libraries (__CUDA_API_VERSION_INTERNAL), so every definition is checked against the
# declaration of its plain, _v2, _ptsz or _ptds name.
SI_CFLAGS   := -std=gnu11 -O2 -g -fPIC -fno-omit-frame-pointer -Wall -Wextra \
               -Wno-unused-parameter -D_GNU_SOURCE -D__CUDA_API_VERSION_INTERNAL \
               -isystem $(CUDA_HOME)/include -I$(SI_SRC)
SI_LDFLAGS  := -shared -Wl,-z,defs -Wl,-z,noexecstack
SI_COMMON   := $(SI_SRC)/common.c $(SI_SRC)/ptrmap.c
SI_HEADERS  := $(wildcard $(SI_SRC)/*.h)
SI_LIBS     := $(SI)/libcuda.so.1 $(SI)/libcudart.so.13 $(SI)/libnccl.so.2 \
               $(SI)/libcudart_static.a $(SI)/libnvidia-ml.so.1 $(SI)/libstandin_blas.so.1 \
               $(SI)/libcupti.so.13
# The fake nvdisasm (a script, test-only), where CUDA_HOME=$(SI) or PATH=$(SI)/bin finds it.
SI_TOOLS    := $(SI)/bin/nvdisasm

# Workloads: frame pointers and no inlining so stacks unwind to the stubs that launch.
GW_CFLAGS   := -std=gnu11 -O1 -g -fno-omit-frame-pointer -fno-inline -Wall -Wextra \
               -Wno-unused-parameter -D_GNU_SOURCE -isystem $(CUDA_HOME)/include \
               -I$(SI_SRC) -I$(GW_SRC)
GW_RPATH    := -Wl,-rpath,'$$ORIGIN/../standin'
GW_BINS     := $(GW)/gpu_train $(GW)/gpu_train_ptsz $(GW)/gpu_train_static $(GW)/gpu_driver \
               $(GW)/nccl_hang $(GW)/gpu_launch_bench $(GW)/gpu_dlopen $(GW)/gpu_launch_o2 \
               $(GW)/gpu_blas $(GW)/libtorchlike.so $(GW)/libcupti_dump.so \
               $(GW)/libcupti_holder.so $(GW)/libnvtx_shim.so $(GW)/pc_client \
               $(GW)/mem_client $(GW)/graph_sync_client $(GW)/gpu_counters
ifneq ($(SI_NVCC),)
GW_BINS     += $(GW)/gpu_nvcc $(SI)/nvcc_abi.ok
endif

.PHONY: gpu-standin
gpu-standin: $(SI_LIBS) $(SI_TOOLS) $(GW_BINS)

$(SI)/bin/nvdisasm: $(SI_SRC)/nvdisasm
	@mkdir -p $(@D)
	install -m 755 $< $@

$(SI)/libcuda.so.1: $(SI_SRC)/gpu.c $(SI_SRC)/driver.c $(SI_SRC)/procaddr.c $(SI_SRC)/account.c \
                    $(SI_COMMON) \
                    $(SI_HEADERS) $(SI_SRC)/libcuda.map
	@mkdir -p $(@D)
	$(CC) $(SI_CFLAGS) $(SI_LDFLAGS) -Wl,-soname,libcuda.so.1 \
		-Wl,--version-script=$(SI_SRC)/libcuda.map -o $@ \
		$(SI_SRC)/gpu.c $(SI_SRC)/driver.c $(SI_SRC)/procaddr.c $(SI_SRC)/account.c \
		$(SI_COMMON) -ldl -lpthread

# -Bsymbolic as the real runtime (DT_SYMBOLIC); __cudaLaunchKernel still enters the
# exported cudaLaunchKernel, at its address.
$(SI)/libcudart.so.13: $(SI_SRC)/runtime.c $(SI_COMMON) $(SI_HEADERS) $(SI_SRC)/libcudart.map
	@mkdir -p $(@D)
	$(CC) $(SI_CFLAGS) $(SI_LDFLAGS) -Wl,-soname,libcudart.so.13 -Wl,-Bsymbolic \
		-Wl,--version-script=$(SI_SRC)/libcudart.map -o $@ \
		$(SI_SRC)/runtime.c $(SI_COMMON) -ldl -lpthread

$(SI)/libnccl.so.2: $(SI_SRC)/nccl.c $(SI_COMMON) $(SI_HEADERS) $(SI_SRC)/libnccl.map
	@mkdir -p $(@D)
	$(CC) $(SI_CFLAGS) $(SI_LDFLAGS) -Wl,-soname,libnccl.so.2 \
		-Wl,--version-script=$(SI_SRC)/libnccl.map -o $@ \
		$(SI_SRC)/nccl.c $(SI_COMMON) -ldl -lpthread

# A BLAS-like library that reaches the driver as cuBLAS does (cuGetProcAddress, library
# kernels); not an NVIDIA name, so no probe is on it.
$(SI)/libstandin_blas.so.1: $(SI_SRC)/blas.c $(SI_SRC)/blas.h $(SI_SRC)/common.c $(SI_HEADERS)
	@mkdir -p $(@D)
	$(CC) $(SI_CFLAGS) $(SI_LDFLAGS) -Wl,-soname,libstandin_blas.so.1 -o $@ \
		$(SI_SRC)/blas.c $(SI_SRC)/common.c -ldl -lpthread

# NVML: what the agent asks of it (device memory sizes, each process's use), over the
# same fake devices; the processes' use comes from the accounts libcuda.so.1 publishes.
$(SI)/libnvidia-ml.so.1: $(SI_SRC)/nvml.c $(SI_SRC)/account.c $(SI_SRC)/common.c \
                         $(SI_HEADERS) $(SI_SRC)/libnvidia-ml.map
	@mkdir -p $(@D)
	$(CC) $(SI_CFLAGS) $(SI_LDFLAGS) -Wl,-soname,libnvidia-ml.so.1 \
		-Wl,--version-script=$(SI_SRC)/libnvidia-ml.map -o $@ \
		$(SI_SRC)/nvml.c $(SI_SRC)/account.c $(SI_SRC)/common.c -ldl -lpthread

# CUPTI's callback and activity APIs over the fake GPU, for profilers' injection
# libraries (cupti.c); NVIDIA's name, as a client links it.
$(SI)/libcupti.so.13: $(SI_SRC)/cupti.c $(SI_SRC)/common.c $(SI_HEADERS) $(SI_SRC)/libcupti.map
	@mkdir -p $(@D)
	$(CC) $(SI_CFLAGS) $(SI_LDFLAGS) -Wl,-soname,libcupti.so.13 \
		-Wl,--version-script=$(SI_SRC)/libcupti.map -o $@ \
		$(SI_SRC)/cupti.c $(SI_SRC)/common.c -ldl -lpthread

# The runtime for static linking, as libcudart_static.a: its functions end up in the
# executable's .symtab, unversioned.
$(SI)/static/%.o: $(SI_SRC)/%.c $(SI_HEADERS)
	@mkdir -p $(@D)
	$(CC) $(SI_CFLAGS) -c -o $@ $<

$(SI)/libcudart_static.a: $(SI)/static/runtime.o $(SI)/static/common.o $(SI)/static/ptrmap.o
	@rm -f $@
	$(AR) rcs $@ $^

$(SI)/nvcc_abi.ok: $(SI_SRC)/nvcc_abi.h
	@mkdir -p $(@D)
	printf '#include "nvcc_abi.h"\n' > $(SI)/nvcc_abi_check.cu
	$(SI_NVCC) -I$(SI_SRC) -c -o $(SI)/nvcc_abi_check.o $(SI)/nvcc_abi_check.cu
	touch $@

$(GW)/truth.o: $(GW_SRC)/truth.c $(GW_SRC)/truth.h
	@mkdir -p $(@D)
	$(CC) $(GW_CFLAGS) -c -o $@ $<

GW_RT := $(SI)/libcudart.so.13 $(SI)/libnccl.so.2

$(GW)/gpu_train: $(GW_SRC)/gpu_train.c $(GW)/truth.o $(GW_RT) $(SI_SRC)/nvcc_abi.h | $(SI)/libcuda.so.1
	$(CC) $(GW_CFLAGS) -o $@ $< $(GW)/truth.o $(GW_RT) $(GW_RPATH) -lpthread

$(GW)/gpu_train_ptsz: $(GW_SRC)/gpu_train.c $(GW)/truth.o $(GW_RT) $(SI_SRC)/nvcc_abi.h | $(SI)/libcuda.so.1
	$(CC) $(GW_CFLAGS) -DCUDA_API_PER_THREAD_DEFAULT_STREAM -o $@ $< $(GW)/truth.o $(GW_RT) \
		$(GW_RPATH) -lpthread

$(GW)/gpu_train_static: $(GW_SRC)/gpu_train.c $(GW)/truth.o $(SI)/libcudart_static.a \
                        $(SI)/libnccl.so.2 $(SI_SRC)/nvcc_abi.h | $(SI)/libcuda.so.1
	$(CC) $(GW_CFLAGS) -o $@ $< $(GW)/truth.o $(SI)/libcudart_static.a $(SI)/libnccl.so.2 \
		$(GW_RPATH) -ldl -lpthread

$(GW)/gpu_driver: $(GW_SRC)/gpu_driver.c $(GW)/truth.o $(SI)/libcuda.so.1
	$(CC) $(GW_CFLAGS) -o $@ $< $(GW)/truth.o $(SI)/libcuda.so.1 $(GW_RPATH) -lpthread

# Calls shaped to move the GPU probes' counters (test_bpf_counters.py).
$(GW)/gpu_counters: $(GW_SRC)/gpu_counters.c $(SI)/libcuda.so.1
	$(CC) $(GW_CFLAGS) -o $@ $< $(SI)/libcuda.so.1 $(GW_RPATH) -lpthread

$(GW)/gpu_blas: $(GW_SRC)/gpu_blas.c $(GW)/truth.o $(SI)/libcudart.so.13 \
                $(SI)/libstandin_blas.so.1 | $(SI)/libcuda.so.1
	$(CC) $(GW_CFLAGS) -o $@ $< $(GW)/truth.o $(SI)/libcudart.so.13 $(SI)/libstandin_blas.so.1 \
		$(GW_RPATH) -lpthread

# Links neither the runtime nor the driver: it dlopen()s the runtime it is given.
$(GW)/gpu_dlopen: $(GW_SRC)/gpu_dlopen.c $(GW)/truth.o
	$(CC) $(GW_CFLAGS) -o $@ $< $(GW)/truth.o -ldl -lpthread

$(GW)/nccl_hang: $(GW_SRC)/nccl_hang.c $(GW)/truth.o $(GW_RT) | $(SI)/libcuda.so.1
	$(CC) $(GW_CFLAGS) -o $@ $< $(GW)/truth.o $(GW_RT) $(GW_RPATH) -lpthread

$(GW)/gpu_launch_bench: $(GW_SRC)/gpu_launch_bench.c $(GW)/truth.o $(SI)/libcudart.so.13 \
                        $(SI)/libcuda.so.1 $(SI_SRC)/nvcc_abi.h
	$(CC) $(GW_CFLAGS) -O2 -o $@ $< $(GW)/truth.o $(SI)/libcudart.so.13 $(SI)/libcuda.so.1 \
		$(GW_RPATH) -lpthread

# The same built as distributions build (gcc -O2, no frame pointers, inlining
# allowed): only the unwind tables walk its launching stacks.
$(GW)/gpu_launch_o2: $(GW_SRC)/gpu_launch_bench.c $(GW)/truth.o $(SI)/libcudart.so.13 \
                     $(SI)/libcuda.so.1 $(SI_SRC)/nvcc_abi.h
	$(CC) -std=gnu11 -O2 -g -Wall -D_GNU_SOURCE -isystem $(CUDA_HOME)/include -I$(SI_SRC) \
		-I$(GW_SRC) -o $@ $< $(GW)/truth.o $(SI)/libcudart.so.13 $(SI)/libcuda.so.1 \
		$(GW_RPATH) -lpthread

# The native half of a PyTorch launch stack for gpu_deep.py: built as libtorch is (gcc -O2,
# no frame pointers), so only the unwind tables walk its twenty-odd frames.
$(GW)/libtorchlike.so: $(GW_SRC)/torchlike.c $(SI)/libcudart.so.13 | $(SI)/libcuda.so.1
	$(CC) -std=gnu11 -O2 -g -fPIC -fomit-frame-pointer -Wall -D_GNU_SOURCE \
		-isystem $(CUDA_HOME)/include -shared -Wl,-soname,libtorchlike.so -o $@ $< \
		$(SI)/libcudart.so.13 $(GW_RPATH)

# An injection library (CUDA_INJECTION64_PATH) that writes what CUPTI told it: the tests'
# window on the CUPTI stand-in.
$(GW)/libcupti_dump.so: $(GW_SRC)/cupti_dump.c src/cupti/sonde_cupti.h $(SI)/libcupti.so.13
	$(CC) $(GW_CFLAGS) -Isrc -fPIC -shared -Wl,-soname,libcupti_dump.so -o $@ $< \
		$(SI)/libcupti.so.13 $(GW_RPATH) -lpthread

$(GW)/libcupti_holder.so: $(GW_SRC)/cupti_holder.c $(SI)/libcupti.so.13
	$(CC) $(GW_CFLAGS) -fPIC -shared -Wl,-soname,libcupti_holder.so -o $@ $< \
		$(SI)/libcupti.so.13 $(GW_RPATH)

# A PC sampling client of the CUPTI stand-in that checks its samples against their rule.
$(GW)/pc_client: $(GW_SRC)/pc_client.c $(GW_SRC)/cupti_client.h $(SI_SRC)/nvcc_abi.h \
                 $(SI)/libcupti.so.13 \
                 $(SI)/libcudart.so.13 $(SI)/libcuda.so.1
	$(CC) $(GW_CFLAGS) -o $@ $< $(SI)/libcupti.so.13 $(SI)/libcudart.so.13 $(SI)/libcuda.so.1 \
		$(GW_RPATH) -lpthread

# A memory-activity client of the CUPTI stand-in that checks its records against the calls.
$(GW)/mem_client: $(GW_SRC)/mem_client.c $(GW_SRC)/cupti_client.h $(SI)/libcupti.so.13 \
                  $(SI)/libcudart.so.13 \
                  $(SI)/libcuda.so.1
	$(CC) $(GW_CFLAGS) -o $@ $< $(SI)/libcupti.so.13 $(SI)/libcudart.so.13 $(SI)/libcuda.so.1 \
		$(GW_RPATH) -lpthread

# A client of the CUPTI stand-in's graph, synchronization and memory pool records that checks
# them against the calls that made them.
$(GW)/graph_sync_client: $(GW_SRC)/graph_sync_client.c $(GW_SRC)/cupti_client.h \
                         $(SI)/libcupti.so.13 \
                         $(SI)/libcudart.so.13 $(SI)/libcuda.so.1
	$(CC) $(GW_CFLAGS) -o $@ $< $(SI)/libcupti.so.13 $(SI)/libcudart.so.13 $(SI)/libcuda.so.1 \
		$(GW_RPATH) -lpthread

$(GW)/libnvtx_shim.so: $(GW_SRC)/nvtx_shim.c
	$(CC) $(GW_CFLAGS) -fPIC -shared -Wl,-soname,libnvtx_shim.so -o $@ $< -ldl -lpthread

# Real nvcc output (fat binary registration, <<<>>> stubs, __cudaLaunchKernel) linked
# against the stand-in runtime instead of NVIDIA's.
$(GW)/gpu_nvcc: $(GW_SRC)/gpu_nvcc.cu $(GW)/truth.o $(SI)/libcudart.so.13 | $(SI)/libcuda.so.1
	@mkdir -p $(@D)
	$(SI_NVCC) -g -Xcompiler -fno-omit-frame-pointer -I$(GW_SRC) -c -o $(GW)/gpu_nvcc.o $<
	$(CXX) -g -o $@ $(GW)/gpu_nvcc.o $(GW)/truth.o $(SI)/libcudart.so.13 $(GW_RPATH) -lpthread
