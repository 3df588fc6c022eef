#!/usr/bin/env bash
# The parsers of outside data survive a short fuzzing run: builds the libFuzzer
# targets of tests/fuzz/ (`make fuzzers`, see tests/fuzz/fuzz.mk), replays the
# reproducers of past bugs (tests/fuzz/crashes/) and runs each target for
# FUZZ_SMOKE_SECONDS (10) from its seeds in a fresh corpus, as many at once as
# there are CPUs, inputs bounded per target (-max_len). A crash, hang, leak,
# heap out of proportion to the input or broken invariant fails the test; a new
# input is kept as build/fuzz/crashes/TARGET-crash-* (replay:
# build/fuzz/fuzz_TARGET FILE). Skips when clang can't link -fsanitize=fuzzer.
set -u
cd "$(dirname "$0")/../.."
B=${B:-build}
CLANG=${CLANG:-clang}
secs=${FUZZ_SMOKE_SECONDS:-10}
jobs=$(nproc 2>/dev/null || echo 2)

# Run from `make test`: don't inherit its flags or jobserver.
unset MAKEFLAGS MFLAGS MAKELEVEL

command -v "$CLANG" >/dev/null || { echo "SKIP: $CLANG is not installed"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

printf 'int LLVMFuzzerTestOneInput(const char *d, unsigned long n) { return 0; }\n' >"$tmp/probe.c"
if ! "$CLANG" -fsanitize=fuzzer,address,undefined -o "$tmp/probe" "$tmp/probe.c" \
	2>"$tmp/probe.err"; then
	echo "SKIP: $CLANG can't link -fsanitize=fuzzer,address,undefined" \
		"(libFuzzer missing? apt-get install libclang-rt-14-dev): $(head -n1 "$tmp/probe.err")"
	exit 77
fi

start=$(date +%s)
if ! make -s -j"$jobs" B="$B" fuzzers fuzz-seeds; then
	echo "FAIL: can't build the fuzzers"
	exit 1
fi
echo "built in $(($(date +%s) - start)) s"

# The reproducers of bugs found before, then $secs s of fuzzing per target.
failed=0
make -s -k -j"$jobs" B="$B" fuzz-regress || failed=1
echo "fuzzing each target for $secs s, $jobs at once"
make -s -k -j"$jobs" B="$B" fuzz FUZZ_SECONDS="$secs" FUZZ_CORPUS="$tmp/corpus" || failed=1
if [ "$failed" -ne 0 ]; then
	echo "FAIL: a fuzz target failed -- see above; new inputs are in $B/fuzz/crashes/"
	exit 1
fi
echo "ok: every fuzz target ran $secs s without a failure ($(($(date +%s) - start)) s in all)"
