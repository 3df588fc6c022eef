# The alert engine's integration-test harness: drives src/alerts/alerts.h
# in real time from a script (tests/integration/test_alerts*.py run it).
ALERTS_HARNESS := $(B)/alerts/harness

$(ALERTS_HARNESS): tests/alerts/harness.c $(LIB)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -o $@ $< $(LIB) $(LDLIBS)

.PHONY: alerts-harness
alerts-harness: $(ALERTS_HARNESS)
test-build: $(ALERTS_HARNESS)
