#!/usr/bin/env bash
# fuzz.sh: the campaign's fuzzing -- every libFuzzer target of tests/fuzz/
# (tests/fuzz/fuzz.mk) run for RUNS executions (10 000 000) or CAP seconds
# each, whichever comes first, on a corpus of its own (kept between runs:
# $B/fuzz/campaign-corpus/TARGET), JOBS targets at once. A bench job, not
# CI. Prints a Markdown table of the executions each target reached, its
# rate, its corpus and its coverage, and appends one JSON line per target to
# $CAMPAIGN_OUT when set; exits 1 if a target failed (crash, leak, timeout,
# broken invariant: the input is in $B/fuzz/crashes/).
#
#   B=build RUNS=10000000 CAP=3600 JOBS=1 TARGETS="pprof folded" bash bench/campaign/fuzz.sh
set -u
cd "$(dirname "$0")/../.."
B=${B:-build}
RUNS=${RUNS:-10000000}
CAP=${CAP:-3600}
JOBS=${JOBS:-1}
ALL=$(ls tests/fuzz/fuzz_*.c | sed 's|.*/fuzz_||; s|\.c$||')
TARGETS=${TARGETS:-$ALL}
CORPUS=$B/fuzz/campaign-corpus

echo "fuzz campaign: $(echo $TARGETS | wc -w) targets, $RUNS executions or $CAP s each," \
	"$JOBS at once; $(nproc) CPUs, $(date -u '+%Y-%m-%d %H:%M UTC'), commit" \
	"$(git rev-parse --short HEAD)"
make -s B="$B" fuzzers fuzz-seeds >/dev/null || { echo "building the fuzzers failed" >&2; exit 1; }
start=$(date +%s)
# One make per target so that each keeps its own log; -k: a failure doesn't
# stop the others.
make -k -j"$JOBS" B="$B" FUZZ_SECONDS="$CAP" FUZZ_FLAGS="-runs=$RUNS" FUZZ_CORPUS="$CORPUS" \
	$(for t in $TARGETS; do echo "fuzz-run-$t"; done) 2>&1 | grep -E '^fuzz_' | sed 's/^/  /'
rc=${PIPESTATUS[0]}

echo
echo "| target | executions | of $RUNS | seconds | executions/s | corpus files | coverage (cov:) | result |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- |"
for t in $TARGETS; do
	log=$B/fuzz/logs/$t.log
	n=$(sed -n 's/^stat::number_of_executed_units: //p' "$log" | tail -1)
	secs=$(sed -n 's/^Done [0-9]* runs in \([0-9]*\) second.*/\1/p' "$log" | tail -1)
	cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
	files=$(ls "$CORPUS/$t" 2>/dev/null | wc -l)
	if grep -qE '^==[0-9]+==ERROR|^SUMMARY: |fuzz check|deadly signal|Timeout|out-of-memory' "$log"; then
		result="FAILED (see $log)"
	elif [ -n "$n" ] && [ "$n" -ge "$RUNS" ]; then
		result="done"
	else
		result="stopped at $CAP s"
	fi
	[ -z "$secs" ] && secs="?"
	rate=$(grep -o 'exec/s: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
	printf '| %s | %s | %s %% | %s | %s | %s | %s | %s |\n' "$t" "${n:-?}" \
		"$(awk -v n="${n:-0}" -v r="$RUNS" 'BEGIN{printf "%.1f", 100*n/r}')" "$secs" \
		"${rate:-?}" "$files" "${cov:-?}" "$result"
	if [ -n "${CAMPAIGN_OUT:-}" ]; then
		printf '{"case": "fuzz", "target": "%s", "executions": %s, "runs": %s, "seconds": "%s", "exec_per_s": "%s", "cov": "%s", "corpus": %s, "result": "%s", "date": "%s"}\n' \
			"$t" "${n:-0}" "$RUNS" "$secs" "${rate:-}" "${cov:-}" "$files" "$result" \
			"$(date -u '+%Y-%m-%d %H:%M UTC')" >>"$CAMPAIGN_OUT"
	fi
done
echo
echo "wall: $(( $(date +%s) - start )) s"
exit $(( rc != 0 ))
