# metrics.mk: the metrics test harness (tests/metrics/harness.c), which the
# integration tests tests/integration/test_metrics_* run: the HTTP and
# WebSocket servers over a simulated or scripted gpu_metrics.

METRICS_HARNESS := $(B)/metrics/harness

$(METRICS_HARNESS): tests/metrics/harness.c $(LIB) | $(SKELS) $(PROTO_H)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -o $@ $< $(LIB) $(LDLIBS)

.PHONY: metrics-harness
metrics-harness: $(METRICS_HARNESS)

test-build: $(METRICS_HARNESS)
