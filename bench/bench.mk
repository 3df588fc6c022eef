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
