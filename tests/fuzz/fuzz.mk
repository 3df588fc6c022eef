# fuzz.mk: libFuzzer targets for the parsers of outside data (tests/fuzz/),
# included by the Makefile. The library sources they need are compiled again
# with clang, ASan, UBSan and coverage instrumentation into their own archive,
# build/fuzz/libsonde-fuzz.a (the gcc-built build/libsonde.a is not reused).
#
#   make fuzzers          build/fuzz/fuzz_{pprof,folded,maps,kallsyms,perfmap,elf,cpu_sample,
#                         selector,timeparse,pyroname,ingest,store,sideband,unwind_table,
#                         pyline,service,clickhouse,auth,late,ingest_json,sass}
#   make fuzz-seeds       build/fuzz/seeds/TARGET/: the text seeds of tests/fuzz/seeds/,
#                         pprof and cpu_sample seeds from gen_seeds (the pprof one also
#                         raw, as two gzip members and next to a 5 MB gzip bomb), the
#                         ELF fixtures (for unwind_table also with their CFI in
#                         .debug_frame, plain and compressed)
#   make fuzz             runs each target FUZZ_SECONDS (60) on build/fuzz/corpus/TARGET
#                         (FUZZ_CORPUS), which keeps what it finds, plus its seeds;
#                         FUZZ_TARGETS="elf maps" picks targets, -jN runs N at once and
#                         -k keeps going after a failure
#   make fuzz-regress     replays the inputs saved in tests/fuzz/crashes/TARGET-*, the
#                         reproducers of bugs found, once each
#
# A crash, hang (FUZZ_TIMEOUT s per input), leak, allocation over
# FUZZ_MALLOC_MB or broken invariant fails the run; the input is saved as
# build/fuzz/crashes/TARGET-crash-* and the log is build/fuzz/logs/TARGET.log.
# Reproduce with `build/fuzz/fuzz_TARGET FILE`.

FUZZ_CC        ?= $(CLANG)
FUZZ_B         := $(B)/fuzz
FUZZ_SAN       := -fsanitize=address,undefined -fno-sanitize-recover=undefined
FUZZ_CFLAGS    := -O1 -g -fno-omit-frame-pointer -std=gnu11 -Wall -Wextra \
                  -Wno-unused-parameter -MMD -MP -D_GNU_SOURCE -Isrc -I$(B)/include -Ibpf
FUZZ_LDLIBS    := -lbpf -lelf -ldw -lz -lprotobuf-c -ljansson -lcurl -lcrypto -lstdc++ -lm -lpthread

FUZZ_ALL       := pprof folded maps kallsyms perfmap elf cpu_sample \
                  selector timeparse pyroname ingest store sideband unwind_table pyline service \
                  clickhouse auth late ingest_json sass
FUZZ_TARGETS   ?= $(FUZZ_ALL)
FUZZ_SECONDS   ?= 60
FUZZ_TIMEOUT   ?= 10
FUZZ_MALLOC_MB ?= 256
FUZZ_CORPUS    ?= $(FUZZ_B)/corpus
FUZZ_FLAGS     ?=

# Largest input per target: a few KiB of text, a seed ELF file (about 20 KiB),
# four cpu_sample records and the header byte.
FUZZ_MAXLEN_pprof      := 65536
FUZZ_MAXLEN_folded     := 8192
FUZZ_MAXLEN_maps       := 8192
FUZZ_MAXLEN_kallsyms   := 8192
FUZZ_MAXLEN_perfmap    := 8192
FUZZ_MAXLEN_elf        := 32768
FUZZ_MAXLEN_cpu_sample := 8385
# The server's parsers: query strings, and ingest bodies (pprof or folded).
FUZZ_MAXLEN_selector   := 4096
FUZZ_MAXLEN_timeparse  := 256
FUZZ_MAXLEN_pyroname   := 4096
FUZZ_MAXLEN_ingest     := 65536
# JSON bodies of metric points and GPU timeline spans.
FUZZ_MAXLEN_ingest_json := 16384
# The store's: label sets and matchers from requests, window rows from its file.
FUZZ_MAXLEN_store      := 4096
# The kernel's process records: a few of them, each at most a page.
FUZZ_MAXLEN_sideband   := 4096
# An ELF file whose CFI becomes an unwind table: the seed ELF files.
FUZZ_MAXLEN_unwind_table := 32768
# A Python line table from a live process (py_line_of): 9 bytes of version,
# instruction and first line, then the table.
FUZZ_MAXLEN_pyline     := 4096
# A process's environment or cgroup file as the agent reads them (a few
# entries and lines), or a --service-by list; a byte picks which.
FUZZ_MAXLEN_service    := 4096
# The answers of a ClickHouse server to one operation's queries (a few
# hundred bytes each in the seeds).
FUZZ_MAXLEN_clickhouse := 16384
# An Authorization header's value.
FUZZ_MAXLEN_auth       := 1024
# A deferred CPU sample: a header byte, 15 unwind rows, the record with
# all its stack (bpf/cpu.h: 36 KiB).
FUZZ_MAXLEN_late       := 40960
# nvdisasm's listing of a cubin: a few functions' lines.
FUZZ_MAXLEN_sass       := 8192

# Only what the parsers and their checks link: the rest of src/ (CLI,
# metrics, BPF loading) stays out of the way.
FUZZ_LIB_SRC   := $(filter src/common/% src/profile/% src/symbolize/% src/unwind/table.c \
                  src/unwind/late.c \
                  src/agent/stack_agg.c src/probe/stack.c src/probe/sideband.c src/probe/host.c \
                  src/probe/libscan.c \
                  src/agent/service.c src/agent/cuda_visible.c src/agent/sass.c \
                  src/server/parse.c src/server/lset.c src/server/ingest.c \
                  src/store/labels.c src/store/dict.c src/store/codec.c src/store/store.c \
                  src/store/clickhouse.c src/store/clickhouse_query.c src/store/clickhouse_put.c \
                  src/store/clickhouse_rowbinary.c src/auth/tokens.c src/net/libcurl.c \
                  src/python/%,$(LIB_SRC))
FUZZ_LIB_OBJ   := $(patsubst src/%.c,$(FUZZ_B)/obj/%.o,$(FUZZ_LIB_SRC)) \
                  $(patsubst $(B)/include/%.c,$(FUZZ_B)/gen/%.o,$(PROTO_C))
FUZZ_LIB       := $(FUZZ_B)/libsonde-fuzz.a
FUZZ_BIN       := $(patsubst %,$(FUZZ_B)/fuzz_%,$(FUZZ_ALL))
FUZZ_HDRS      := tests/fuzz/fuzz_common.h tests/fuzz/fuzz_profile.h
FUZZ_STAMP     := $(FUZZ_B)/seeds/.stamp
FUZZ_RUNS      := $(addprefix fuzz-run-,$(FUZZ_TARGETS))
FUZZ_REGRESS   := $(addprefix fuzz-regress-,$(FUZZ_TARGETS))

.PHONY: fuzzers fuzz fuzz-seeds fuzz-regress $(FUZZ_RUNS) $(FUZZ_REGRESS)

fuzzers: $(FUZZ_BIN)

$(FUZZ_B)/obj/%.o: src/%.c | $(PROTO_H)
	@mkdir -p $(@D)
	$(FUZZ_CC) $(FUZZ_CFLAGS) $(FUZZ_SAN) -fsanitize=fuzzer-no-link -c $< -o $@

$(FUZZ_B)/gen/%.o: $(B)/include/%.c
	@mkdir -p $(@D)
	$(FUZZ_CC) $(FUZZ_CFLAGS) $(FUZZ_SAN) -fsanitize=fuzzer-no-link -c $< -o $@

$(FUZZ_LIB): $(FUZZ_LIB_OBJ)
	@rm -f $@
	$(AR) rcs $@ $^

$(FUZZ_B)/fuzz_%: tests/fuzz/fuzz_%.c $(FUZZ_LIB) $(FUZZ_HDRS) | $(PROTO_H)
	$(FUZZ_CC) $(FUZZ_CFLAGS) $(FUZZ_SAN) -fsanitize=fuzzer -o $@ $< $(FUZZ_LIB) $(FUZZ_LDLIBS)

# The seed generator is an ordinary program (its own main), sanitized too.
$(FUZZ_B)/gen_seeds: tests/fuzz/gen_seeds.c $(FUZZ_LIB) | $(PROTO_H)
	$(FUZZ_CC) $(FUZZ_CFLAGS) $(FUZZ_SAN) -o $@ $< $(FUZZ_LIB) $(FUZZ_LDLIBS)

fuzz-seeds: $(FUZZ_STAMP)

# The fixture program with its CFI in .debug_frame only (every other debug
# section removed), for unwind_table; and compressed.
$(FUZZ_B)/seed-debug-frame: tests/fixtures/prog.c $(FIX)/libfix.so
	@mkdir -p $(@D)
	$(CC) -O1 -g -fno-asynchronous-unwind-tables -fno-unwind-tables -o $@ $< -L$(FIX) -lfix
	objcopy --wildcard -R '.debug_[!f]*' $@

$(FUZZ_B)/seed-debug-frame-z: $(FUZZ_B)/seed-debug-frame
	objcopy --compress-debug-sections=zlib $< $@

$(FUZZ_STAMP): $(FUZZ_B)/gen_seeds $(wildcard tests/fuzz/seeds/*/*) \
               $(FIX)/pie $(FIX)/pie-stripped $(FIX)/libfix.so \
               $(FUZZ_B)/seed-debug-frame $(FUZZ_B)/seed-debug-frame-z
	@rm -rf $(FUZZ_B)/seeds
	@mkdir -p $(addprefix $(FUZZ_B)/seeds/,$(FUZZ_ALL))
	@for t in folded maps kallsyms perfmap selector timeparse pyroname ingest store sideband \
		service clickhouse auth ingest_json sass; do \
		cp tests/fuzz/seeds/$$t/* $(FUZZ_B)/seeds/$$t/; done
	$(FUZZ_B)/gen_seeds $(FUZZ_B)/seeds
	gzip -dc $(FUZZ_B)/seeds/pprof/profile.pb.gz > $(FUZZ_B)/seeds/pprof/profile.pb
	cat $(FUZZ_B)/seeds/pprof/profile.pb.gz $(FUZZ_B)/seeds/pprof/profile.pb.gz \
		> $(FUZZ_B)/seeds/pprof/two-members.pb.gz
	head -c 5000000 /dev/zero | gzip -9 > $(FUZZ_B)/seeds/pprof/bomb.pb.gz
	cp $(FUZZ_B)/seeds/pprof/* $(FUZZ_B)/seeds/ingest/
	cp $(FIX)/pie $(FIX)/pie-stripped $(FIX)/libfix.so $(FUZZ_B)/seeds/elf/
	cp $(FIX)/pie $(FIX)/pie-stripped $(FIX)/libfix.so $(FUZZ_B)/seed-debug-frame \
		$(FUZZ_B)/seed-debug-frame-z $(FUZZ_B)/seeds/unwind_table/
	@touch $@

fuzz: $(FUZZ_RUNS)

# stderr of the target (its debug log) is closed; libFuzzer and the
# sanitizers still report to the log.
$(FUZZ_RUNS): fuzz-run-%: $(FUZZ_B)/fuzz_% $(FUZZ_STAMP)
	@mkdir -p $(FUZZ_CORPUS)/$* $(FUZZ_B)/crashes $(FUZZ_B)/logs
	@echo "fuzz_$*: running for $(FUZZ_SECONDS) s, log in $(FUZZ_B)/logs/$*.log"
	@if $(FUZZ_B)/fuzz_$* -max_total_time=$(FUZZ_SECONDS) -max_len=$(FUZZ_MAXLEN_$*) \
		-timeout=$(FUZZ_TIMEOUT) -malloc_limit_mb=$(FUZZ_MALLOC_MB) -close_fd_mask=2 \
		-print_final_stats=1 -artifact_prefix=$(FUZZ_B)/crashes/$*- $(FUZZ_FLAGS) \
		$(FUZZ_CORPUS)/$* $(FUZZ_B)/seeds/$* >$(FUZZ_B)/logs/$*.log 2>&1; then \
		echo "fuzz_$*: ok, $$(sed -n 's/^stat::number_of_executed_units: //p' \
			$(FUZZ_B)/logs/$*.log) inputs run, corpus $$(ls $(FUZZ_CORPUS)/$* | wc -l) files"; \
	else \
		tail -n 40 $(FUZZ_B)/logs/$*.log; \
		echo "fuzz_$*: FAILED -- input saved as $(FUZZ_B)/crashes/$*-*, log $(FUZZ_B)/logs/$*.log"; \
		exit 1; \
	fi

fuzz-regress: $(FUZZ_REGRESS)

$(FUZZ_REGRESS): fuzz-regress-%: $(FUZZ_B)/fuzz_%
	@mkdir -p $(FUZZ_B)/logs
	@set -- $(wildcard tests/fuzz/crashes/$*-*); \
	[ $$# -eq 0 ] && exit 0; \
	if $(FUZZ_B)/fuzz_$* -close_fd_mask=2 "$$@" >$(FUZZ_B)/logs/$*-regress.log 2>&1; then \
		echo "fuzz_$*: the inputs saved as tests/fuzz/crashes/$*-* pass ($$#)"; \
	else \
		grep -E -m4 'Running:|fuzz check|ERROR|runtime error' $(FUZZ_B)/logs/$*-regress.log; \
		echo "fuzz_$*: FAILED on an input of tests/fuzz/crashes/, log $(FUZZ_B)/logs/$*-regress.log"; \
		exit 1; \
	fi
