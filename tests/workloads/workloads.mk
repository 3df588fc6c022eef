# Programs the integration tests and benchmarks profile. Most are built
# with frame pointers so that user stacks unwind exactly whatever the
# unwinder; shares-O2 and deep-O2 are built as distributions build (gcc
# -O2, no frame pointers): only the unwind tables walk them.
WL := $(B)/workloads
WL_CFLAGS := -O1 -g -fno-omit-frame-pointer -fno-inline -Wall
workloads: $(WL)/shares $(WL)/shares-lib $(WL)/libhot.so $(WL)/shares-stripped \
           $(WL)/syscalls $(WL)/spawner $(WL)/deep $(WL)/shares-O2 $(WL)/deep-O2 \
           $(WL)/unwind-cases $(WL)/cxx-throw $(WL)/shares-inline $(WL)/labelproc \
           $(WL)/offcpu $(WL)/quick $(WL)/counters

# A 25 ms process, built as distributions build: its first stacks.
$(WL)/quick: tests/workloads/quick.c
	@mkdir -p $(@D)
	$(CC) -O2 -g -Wall -o $@ $<

# Stacks and waits that move the BPF counters a plain job leaves at 0
# (test_bpf_counters.py).
$(WL)/counters: tests/workloads/counters.c
	@mkdir -p $(@D)
	$(CC) -O2 -g -Wall -o $@ $< -lpthread -ldl

# Blocks 30 ms in one function and 10 ms in another (the off-CPU tests),
# built as distributions build.
$(WL)/offcpu: tests/workloads/offcpu.c
	@mkdir -p $(@D)
	$(CC) -O2 -g -fomit-frame-pointer -Wall -o $@ $<

# A process and two threads it names (the service and thread labels).
$(WL)/labelproc: tests/workloads/labelproc.c tests/workloads/burn.h
	@mkdir -p $(@D)
	$(CC) -O2 -g -Wall -o $@ $< -lpthread

$(WL)/unwind-cases: tests/workloads/unwind_cases.c tests/workloads/burn.h
	@mkdir -p $(@D)
	$(CC) -O2 -g -Wall -o $@ $<

$(WL)/cxx-throw: tests/workloads/cxx_throw.cc
	@mkdir -p $(@D)
	$(CXX) -O2 -g -Wall -o $@ $<

$(WL)/deep-O2: tests/workloads/deep.c
	@mkdir -p $(@D)
	$(CC) -O2 -g -Wall -o $@ $<

$(WL)/shares-O2: tests/workloads/shares_o2.c tests/workloads/burn.h
	@mkdir -p $(@D)
	$(CC) -O2 -g -Wall -fno-builtin-gamma -o $@ $<

# -O3 and DWARF: the share functions inlined, named from their DWARF alone.
$(WL)/shares-inline: tests/workloads/shares_inline.c tests/workloads/burn.h
	@mkdir -p $(@D)
	$(CC) -O3 -g -Wall -fno-builtin-gamma -o $@ $<

$(WL)/libhot.so: tests/workloads/libhot.c tests/workloads/burn.h
	@mkdir -p $(@D)
	$(CC) $(WL_CFLAGS) -fPIC -shared -o $@ $<

$(WL)/shares: tests/workloads/shares.c tests/workloads/burn.h
	@mkdir -p $(@D)
	$(CC) $(WL_CFLAGS) -o $@ $<

$(WL)/shares-lib: tests/workloads/shares_lib.c tests/workloads/burn.h $(WL)/libhot.so
	$(CC) $(WL_CFLAGS) -o $@ $< -L$(WL) -lhot -Wl,-rpath,'$$ORIGIN'

$(WL)/shares-stripped: tests/workloads/shares.c tests/workloads/burn.h
	@mkdir -p $(@D)
	$(CC) $(WL_CFLAGS) -fPIE -pie -rdynamic -o $@ $<
	strip --strip-all $@

$(WL)/syscalls: tests/workloads/syscalls.c
	@mkdir -p $(@D)
	$(CC) $(WL_CFLAGS) -o $@ $<

$(WL)/spawner: tests/workloads/spawner.c tests/workloads/burn.h
	@mkdir -p $(@D)
	$(CC) $(WL_CFLAGS) -o $@ $<

$(WL)/deep: tests/workloads/deep.c
	@mkdir -p $(@D)
	$(CC) $(WL_CFLAGS) -o $@ $<
