# campaign.mk: the fault and load campaign of docs/reliability.md, included by
# the Makefile. Its short forms are tests of `make test`
# (tests/integration/test_faults_*.py); these targets run them at full size.
#
#   make bench-campaign       bench/campaign/run.sh: 200 simulated agents shipping
#                             10 s windows for 10 minutes to a server on SQLite, then
#                             on ClickHouse; the server, ClickHouse and agents killed
#                             with -9; the disk full; slowloris and 10 000 idle
#                             connections; 1 GB bodies (about 40 minutes; CASES="load
#                             disk_full" picks cases; figures in $(B)/campaign/)
#   make bench-campaign-fuzz  bench/campaign/fuzz.sh: every fuzz target for 10 million
#                             executions or FUZZ_CAP seconds (3600) each, FUZZ_JOBS (1)
#                             at once (hours on two CPUs; not CI)

FUZZ_CAP  ?= 3600
FUZZ_JOBS ?= 1

.PHONY: bench-campaign bench-campaign-fuzz
bench-campaign: $(B)/sonde workloads
	B=$(B) bash bench/campaign/run.sh

bench-campaign-fuzz:
	B=$(B) CAP=$(FUZZ_CAP) JOBS=$(FUZZ_JOBS) bash bench/campaign/fuzz.sh
