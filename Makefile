# Sonde build. `make` builds build/sonde; `make test` installs what the
# tests need (scripts/setup.sh: silent when everything is there), builds and
# runs every test; `make setup` installs everything the build, the tests and
# the benchmarks need.
#
# Layout of build/: obj/ (userspace objects, mirrored from src/), bpf/ (BPF
# objects), include/ (vmlinux.h, skeletons, generated protobuf-c), tests/
# (unit test binaries), fixtures/ and workloads/ (programs the tests profile).

CC        ?= gcc
CLANG     ?= clang
BPFTOOL   ?= $(shell command -v bpftool 2>/dev/null || echo /usr/sbin/bpftool)
PROTOC_C  ?= protoc-c
B         := build

ARCH      := $(shell uname -m | sed 's/x86_64/x86/;s/aarch64/arm64/')
CFLAGS    ?= -O2 -g
CFLAGS    += -std=gnu11 -Wall -Wextra -Wno-unused-parameter -fno-omit-frame-pointer \
             -MMD -MP -D_GNU_SOURCE -Isrc -I$(B)/include -Ibpf
LDLIBS    := -lbpf -lelf -ldw -lz -lprotobuf-c -ljansson -lmicrohttpd -lgnutls -lwslay -lcrypto -lyaml -lcurl \
             -lsqlite3 -lstdc++ -lm -lpthread
BPFCFLAGS := -O2 -g -target bpf -D__TARGET_ARCH_$(ARCH) -I$(B)/include -Ibpf -Isrc -Wall

BPF_SRC   := $(wildcard bpf/*.bpf.c)
BPF_OBJ   := $(patsubst bpf/%.bpf.c,$(B)/bpf/%.bpf.o,$(BPF_SRC))
SKELS     := $(patsubst bpf/%.bpf.c,$(B)/include/%.skel.h,$(BPF_SRC))
PROTO     := $(wildcard src/*/*.proto)
PROTO_C   := $(patsubst src/%.proto,$(B)/include/%.pb-c.c,$(PROTO))
PROTO_H   := $(PROTO_C:.c=.h)
PROTO_O   := $(patsubst $(B)/include/%.c,$(B)/obj/gen/%.o,$(PROTO_C))

# src/cupti/ is libsonde_cupti.so, loaded into GPU jobs: nothing of the rest.
LIB_SRC   := $(filter-out src/cli/main.c src/cupti/%,$(wildcard src/*/*.c))
LIB_OBJ   := $(patsubst src/%.c,$(B)/obj/%.o,$(LIB_SRC)) $(PROTO_O)
MAIN_OBJ  := $(B)/obj/cli/main.o
LIB       := $(B)/libsonde.a

UNIT_SRC  := $(wildcard tests/unit/test_*.c)
UNIT_BIN  := $(patsubst tests/unit/%.c,$(B)/tests/%,$(UNIT_SRC))
# Tests that load the real BPF programs into the kernel (root; they skip
# without it).
BPF_TEST_SRC := $(wildcard tests/bpf/test_*.c)
BPF_TEST_BIN := $(patsubst tests/bpf/%.c,$(B)/tests/bpf/%,$(BPF_TEST_SRC))

# Keep the BPF objects the skeletons are made from.
.SECONDARY:

.PHONY: all run test test-build unit setup clean format check-format fixtures workloads bench bench-cpu \
	bench-unwind bench-late bench-gpu bench-cupti bench-ui
CUDA_HOME  ?= /usr/local/cuda
CUPTI_LIB  := $(if $(wildcard $(CUDA_HOME)/include/cupti.h),$(B)/libsonde_cupti.so)
all: $(B)/sonde $(CUPTI_LIB)

setup:
	bash scripts/setup.sh

# The README's first command: install what the build needs, build, and run
# `sonde run` with two demo workloads (scripts/demo.sh). Silent but for what
# the README shows. RUN_ARGS go to `sonde run` (RUN_ARGS="--listen :8080").
run:
	@bash scripts/demo.sh $(RUN_ARGS)

$(B)/include/vmlinux.h:
	@mkdir -p $(@D)
	@if [ -r /sys/kernel/btf/vmlinux ]; then \
		$(BPFTOOL) btf dump file /sys/kernel/btf/vmlinux format c > $@.tmp && mv $@.tmp $@; \
	else \
		echo "error: /sys/kernel/btf/vmlinux is missing -- Sonde needs a kernel built with CONFIG_DEBUG_INFO_BTF=y" >&2; \
		exit 1; \
	fi

$(B)/bpf/%.bpf.o: bpf/%.bpf.c $(B)/include/vmlinux.h
	@mkdir -p $(@D)
	$(CLANG) $(BPFCFLAGS) -MMD -MP -c $< -o $@

$(B)/include/%.skel.h: $(B)/bpf/%.bpf.o
	$(BPFTOOL) gen skeleton $< name $(subst -,_,$*)_bpf > $@.tmp && mv $@.tmp $@

$(B)/include/%.pb-c.c $(B)/include/%.pb-c.h: src/%.proto
	@mkdir -p $(@D)
	$(PROTOC_C) --proto_path=src --c_out=$(B)/include $<

$(B)/obj/gen/%.o: $(B)/include/%.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -c $< -o $@

# Every userspace object may include a skeleton or generated header.
$(B)/obj/%.o: src/%.c | $(SKELS) $(PROTO_H)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -c $< -o $@

$(LIB): $(LIB_OBJ)
	@rm -f $@
	$(AR) rcs $@ $^

$(B)/sonde: $(MAIN_OBJ) $(LIB)
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

# The CUPTI injection library (CUDA_INJECTION64_PATH), built where the CUDA
# toolkit's CUPTI headers are (CUPTI_LIB, set above `all`); it loads libcupti
# itself, at run time. Of the rest of src/ it uses only header-only
# common/hash.h: it links no object of libsonde.a.
$(B)/libsonde_cupti.so: $(wildcard src/cupti/*.c src/cupti/*.h) src/common/hash.h
	@mkdir -p $(@D)
	$(CC) -std=gnu11 -O2 -g -fPIC -fvisibility=hidden -fno-omit-frame-pointer -Wall -Wextra \
		-Wno-unused-parameter -D_GNU_SOURCE -Isrc -isystem $(CUDA_HOME)/include -shared \
		-Wl,-soname,libsonde_cupti.so -Wl,-z,defs -o $@ $(filter %.c,$^) -ldl -lpthread

# Unit tests (cmocka) may #include the .c under test; they link the library.
$(B)/tests/%: tests/unit/%.c $(LIB) | $(SKELS) $(PROTO_H)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -Itests/unit -o $@ $< $(LIB) $(LDLIBS) -lcmocka

$(B)/tests/bpf/%: tests/bpf/%.c $(LIB) | $(SKELS) $(PROTO_H)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -Itests/unit -o $@ $< $(LIB) $(LDLIBS) -lcmocka

unit: $(UNIT_BIN) $(BPF_TEST_BIN)

include tests/fixtures/fixtures.mk
include tests/workloads/workloads.mk
-include tests/fuzz/fuzz.mk
-include tests/alerts/alerts.mk
-include tests/gpu/real/real.mk
-include tests/metrics/metrics.mk
-include ui/ui.mk
-include bench/bench.mk
-include bench/campaign.mk

# The README's test command: first what the tests need (Debian and npm
# packages: scripts/setup.sh installs what is missing and says nothing when
# all is there), then the build -- on every CPU unless -j was given -- then
# every test.
test:
	@bash scripts/setup.sh
	@case " $$MAKEFLAGS " in *" -j"*) jobs= ;; *) jobs=-j$$(nproc) ;; esac; \
		$(MAKE) --no-print-directory $$jobs test-build
	@bash tests/run.sh

test-build: $(B)/sonde $(CUPTI_LIB) $(UNIT_BIN) $(BPF_TEST_BIN) fixtures workloads

# Every benchmark, one after the other (docs/perf.md holds their numbers);
# each has its own target too.
bench: bench-cpu bench-unwind bench-late bench-gpu bench-cupti bench-store bench-server bench-ui bench-offcpu

bench-cpu: $(B)/sonde workloads
	B=$(B) bash bench/cpu_overhead.sh

# Issue 9's benchmark: table unwinding and Python stacks beside perf
# --call-graph dwarf / fp, the tables' memory, the agent with PyTorch (REPS=3).
bench-unwind: $(B)/sonde workloads
	B=$(B) bash bench/unwind.sh

# Issue 22's: the first stacks of new code, finished in userspace, against
# that off and perf --call-graph dwarf.
bench-late: $(B)/sonde workloads
	B=$(B) bash bench/late_stacks.sh

bench-gpu: $(B)/sonde
	B=$(B) bash bench/gpu_launch.sh

# Issue 24's: what the CUPTI library costs a launch, with and without the agent.
bench-cupti: $(B)/sonde $(CUPTI_LIB)
	B=$(B) bash bench/gpu_cupti.sh

bench-ui: $(B)/sonde
	B=$(B) bash bench/ui_flame.sh

format:
	clang-format -i $$(git ls-files '*.c' '*.h' | grep -v '^build/')

check-format:
	clang-format --dry-run -Werror $$(git ls-files '*.c' '*.h')

clean:
	rm -rf $(B)

-include $(shell find $(B) -name '*.d' 2>/dev/null)
