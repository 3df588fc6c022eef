# bench.mk: benchmarks built from C, included by the Makefile.
#
#   make bench-store    builds $(B)/bench/store_bench and runs bench/store.sh: ingest CPU,
#                       bytes on disk and read latency of the embedded store over 24 h of
#                       one node's data (STORE_HOURS=24, STORE_POOL=32; a Markdown report)

$(B)/bench/store_bench: bench/store_bench.c $(LIB) | $(SKELS) $(PROTO_H)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -o $@ $< $(LIB) $(LDLIBS)

.PHONY: bench-store
bench-store: $(B)/bench/store_bench
	B=$(B) bash bench/store.sh

# make bench-clickhouse: the same benchmark against the ClickHouse store, on a
# clickhouse-server it starts on loopback (bench/clickhouse.sh; a Markdown report).
.PHONY: bench-clickhouse
bench-clickhouse: $(B)/bench/store_bench
	B=$(B) bash bench/clickhouse.sh

# make bench-server: builds $(B)/bench/server_bench and runs bench/server.sh: flame graphs
# up to a million nodes, ingest splitting, and ingest and queries over HTTP with the SQLite
# store (a Markdown report).
$(B)/bench/server_bench: bench/server_bench.c $(LIB) | $(SKELS) $(PROTO_H)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -o $@ $< $(LIB) $(LDLIBS)

.PHONY: bench-server
bench-server: $(B)/bench/server_bench $(B)/sonde
	B=$(B) bash bench/server.sh

# make bench-offcpu: builds $(B)/bench/pingpong and runs bench/offcpu.sh: a pipe ping-pong
# without and with Sonde's off-CPU profiling, beside bpftrace's off-CPU one-liner and
# `perf sched record` (REPS=5, ROUNDS=200000; a Markdown report).
$(B)/bench/pingpong: bench/pingpong.c
	@mkdir -p $(@D)
	$(CC) -O2 -Wall -o $@ $<

.PHONY: bench-offcpu
bench-offcpu: $(B)/bench/pingpong $(B)/sonde
	B=$(B) bash bench/offcpu.sh

# make bench-coordinator: runs bench/coordinator.py: sonde coordinator over 100 sonde servers
# on loopback ports, each holding 1 h of one service, merging the hour's flame graph and top
# (N=100, STACKS=200, REPS=7; RSS of the coordinator and the servers; a Markdown report).
.PHONY: bench-coordinator
bench-coordinator: $(B)/sonde
	B=$(B) python3 bench/coordinator.py

# make bench-clickhouse-fleet: the ClickHouse store's reads over NODES=100 nodes of
# STORE_HOURS=24 each (one put through the store, the others copied inside ClickHouse;
# bench/clickhouse_fleet.sh; a Markdown report).
.PHONY: bench-clickhouse-fleet
bench-clickhouse-fleet: $(B)/bench/store_bench
	B=$(B) bash bench/clickhouse_fleet.sh

# make bench-gpu-rate: bench/gpu_rate.sh: GPU events lost at RATE=20000 launches/s from
# ~80-frame PyTorch-like stacks for DURATION=60 s, plain and with a big library loaded
# halfway, under `sonde record --gpu` and `sonde agent` (launches made and counted, lost,
# the tracer's CPU, the load; a Markdown report). SONDE=path measures another build.
.PHONY: bench-gpu-rate
bench-gpu-rate: $(B)/sonde
	B=$(B) bash bench/gpu_rate.sh
