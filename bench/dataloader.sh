#!/usr/bin/env bash
# dataloader.sh: what the DataLoader-wait probes cost a PyTorch training loop
# (docs/perf.md). The load: bench/torch_step.py, a small CPU model whose
# step makes about 160 at::RecordFunction objects of operator and autograd
# scopes and three of record_function's user scope (Debian's python3-torch).
# The configurations, interleaved, REPS runs each (median step time):
#   - no profiler;
#   - `sonde agent --no-cpu` (the GPU probes alone: on libtorch_cpu, the
#     calls that open a record_function scope and that end it explicitly,
#     each opening with a stack walk);
#   - bpftrace with a uprobe on each of the two functions themselves,
#     at::RecordFunction::RecordFunction(at::RecordScope) and
#     at::RecordFunction::end(), doing nothing but count -- what probing the
#     functions rather than their call sites costs;
#   - `sonde agent` as run by default (CPU sampling too).
# Prints a Markdown report. Needs root; bpftrace is skipped when absent.
set -euo pipefail
cd "$(dirname "$0")/.."
B=${B:-build}
SONDE=$B/sonde
PY=/usr/bin/python3
REPS=${REPS:-5}
STEPS=${STEPS:-300}
LIB=/usr/lib/python3/dist-packages/torch/lib/libtorch_cpu.so
TMP=$(mktemp -d /tmp/sonde-bench-dataloader.XXXXXX)
PIDS=()
cleanup() {
	for p in "${PIDS[@]}"; do kill -INT "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$TMP"
}
trap cleanup EXIT

[ "$(id -u)" = 0 ] || { echo "bench/dataloader.sh needs root" >&2; exit 1; }
[ -x "$SONDE" ] || { echo "build $SONDE first (make)" >&2; exit 1; }
$PY -c 'import torch' 2>/dev/null || { echo "needs Debian's python3-torch" >&2; exit 1; }

step() { $PY bench/torch_step.py "$STEPS" </dev/null; }

# Starts a profiler in the background and waits until it is ready.
start_agent() {
	"$SONDE" agent --metrics 127.0.0.1:0 --ws 127.0.0.1:0 --no-library-search "$@" \
		2>"$TMP/agent.log" &
	PIDS+=($!)
	for _ in $(seq 300); do
		grep -q "metrics on" "$TMP/agent.log" && return 0
		sleep 0.1
	done
	echo "sonde agent did not start: $(tail -3 "$TMP/agent.log")" >&2
	exit 1
}
stop_last() {
	local p=${PIDS[-1]}
	kill -INT "$p" 2>/dev/null || true
	wait "$p" 2>/dev/null || true
	unset 'PIDS[-1]'
}
start_bpftrace() {
	bpftrace -e "uprobe:$LIB:_ZN2at14RecordFunctionC1ENS_11RecordScopeE { @c = count(); }
		uprobe:$LIB:_ZN2at14RecordFunction3endEv { @e = count(); }" >"$TMP/bt.log" 2>&1 &
	PIDS+=($!)
	for _ in $(seq 300); do
		grep -q "Attaching" "$TMP/bt.log" && sleep 1 && return 0
		sleep 0.1
	done
	echo "bpftrace did not start: $(tail -3 "$TMP/bt.log")" >&2
	exit 1
}

configs=(none probes functions agent)
command -v bpftrace >/dev/null || configs=(none probes agent)
declare -A times
# A first run with the agent: it attaches to libtorch_cpu and builds the
# unwind tables of the process's files (held in its loader meanwhile), which
# later runs find done -- as they would on a node where the agent has run a while.
start_agent --no-cpu
step >/dev/null
stop_last
for r in $(seq "$REPS"); do
	for c in "${configs[@]}"; do
		case $c in
		none) t=$(step) ;;
		probes) start_agent --no-cpu; t=$(step); stop_last ;;
		functions) start_bpftrace; t=$(step); stop_last ;;
		agent) start_agent; t=$(step); stop_last ;;
		esac
		times[$c]+="$t "
	done
done

median() { tr ' ' '\n' | grep . | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
base=$(echo "${times[none]}" | median)
echo "## DataLoader-wait probes: a PyTorch training step (median of $REPS runs, $STEPS steps)"
echo
echo "| configuration | ms a step | slowdown | runs |"
echo "| --- | --- | --- | --- |"
for c in "${configs[@]}"; do
	m=$(echo "${times[$c]}" | median)
	case $c in
	none) name="no profiler" ;;
	probes) name="sonde agent --no-cpu (call-site probes)" ;;
	functions) name="bpftrace: uprobes on the two functions (count only)" ;;
	agent) name="sonde agent (default, CPU sampling too)" ;;
	esac
	awk -v n="$name" -v m="$m" -v b="$base" -v r="${times[$c]}" \
		'BEGIN { printf "| %s | %.2f | %+.1f %% | %s|\n", n, m, (m / b - 1) * 100, r }'
done
