#!/usr/bin/env bash
# run.sh: runs every test of `make test` and closes with "N passed, N failed, N skipped".
#
# A test is a unit test binary (build/tests/test_*, cmocka), a test that
# loads the BPF programs (build/tests/bpf/test_*), or an integration script
# (tests/integration/test_*.{sh,py}). Exit 0 is a pass, 77 a skip (the
# test prints why), anything else a failure. TESTS=pattern limits the run.
# STRESS=N runs N CPU hogs (busy loops at normal priority) for the run's
# length, as a slower or busy machine would: the suite must pass that way.
set -u
cd "$(dirname "$0")/.."
B=${B:-build}
hogs=()
stop_hogs() {
	[ ${#hogs[@]} -gt 0 ] && kill "${hogs[@]}" 2>/dev/null
	wait "${hogs[@]}" 2>/dev/null
	hogs=()
}
trap stop_hogs EXIT
for _ in $(seq "${STRESS:-0}"); do
	(trap - EXIT; while :; do :; done) &
	hogs+=($!)
done
[ ${#hogs[@]} -gt 0 ] && echo "STRESS: ${#hogs[@]} CPU hogs run beside the tests (pids ${hogs[*]})"
pass=0 fail=0 skip=0
failed=()
mkdir -p "$B/test-logs"

run_one() {
	local name=$1; shift
	local log="$B/test-logs/$name.log"
	mkdir -p "$(dirname "$log")"
	local start=$(date +%s.%N)
	timeout "${TEST_TIMEOUT:-300}" "$@" >"$log" 2>&1
	local rc=$?
	local secs=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}')
	case $rc in
	0) pass=$((pass + 1)); printf 'PASS  %-40s %6ss\n' "$name" "$secs" ;;
	77) skip=$((skip + 1)); printf 'SKIP  %-40s %s\n' "$name" "$(grep -m1 -i 'skip' "$log" | cut -c1-60)" ;;
	*) fail=$((fail + 1)); failed+=("$name"); printf 'FAIL  %-40s (exit %d) log: %s\n' "$name" "$rc" "$log"
	   # The checks that failed (they may be far from the log's end), then its end.
	   grep -m 5 -E '^(FAIL|not ok|\[  FAILED|\[  ERROR)' "$log" | sed 's/^/    > /'
	   tail -n 20 "$log" | sed 's/^/      /' ;;
	esac
}

for t in "$B"/tests/test_* "$B"/tests/bpf/test_*; do
	[ -x "$t" ] && [[ "$t" != *.d ]] || continue
	case $t in
	*/bpf/*) name=bpf/$(basename "$t") ;;
	*) name=unit/$(basename "$t") ;;
	esac
	[[ -n "${TESTS:-}" && "$name" != *$TESTS* ]] && continue
	run_one "$name" "$t"
done
for t in tests/integration/test_*.sh tests/integration/test_*.py; do
	[ -f "$t" ] || continue
	name=integration/$(basename "$t")
	[[ -n "${TESTS:-}" && "$name" != *$TESTS* ]] && continue
	case $t in
	*.sh) run_one "$name" bash "$t" ;;
	*.py) run_one "$name" python3 "$t" ;;
	esac
done

echo
[ ${#failed[@]} -gt 0 ] && echo "failed: ${failed[*]}"
echo "$pass passed, $fail failed, $skip skipped"
[ "$fail" -eq 0 ]
