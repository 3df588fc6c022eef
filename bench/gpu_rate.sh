#!/usr/bin/env bash
# gpu_rate.sh: whether the GPU probes lose events at a real PyTorch job's launch
# rate with real PyTorch stacks. tests/gpu/workloads/gpu_deep.py launches RATE
# kernels a second for DURATION seconds through the stand-in runtime from a
# ~80-frame stack (40 Python frames on Debian's python3, ctypes, 20 frames of a
# C library built -O2 without frame pointers, as libtorch); once plain, once
# loading a big library halfway (LOAD, libLLVM: ~1 M unwind rows, as PyTorch
# loads cuDNN or cuBLAS at their first use), under `sonde record --gpu` and
# under `sonde agent` (its defaults: CPU profiling and GPU stacks). For each:
# the launches the job made, those Sonde counted, the events it says it lost,
# its CPU (share of one core; record's is its whole CPU minus the job's own),
# the most records that waited in memory, and the load average beside it.
# SONDE=path runs another build (e.g. the one before a change). Needs root.
# Prints a Markdown table; `make bench-gpu-rate` runs it.
set -euo pipefail
cd "$(dirname "$0")/.."
B=${B:-build}
SONDE=${SONDE:-$B/sonde}
RATE=${RATE:-20000}
DURATION=${DURATION:-60}
LOAD=${LOAD:-/usr/lib/x86_64-linux-gnu/libLLVM-15.so.1}
PY=/usr/bin/python3
JOB=tests/gpu/workloads/gpu_deep.py
TMP=$(mktemp -d /tmp/sonde-bench-rate.XXXXXX)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$TMP"' EXIT
export SONDE_STANDIN_KERNEL_US=0

make -s -f tests/gpu/standin/standin.mk B="$B" gpu-standin >/dev/null
load1() { cut -d' ' -f1 /proc/loadavg; }
cpu_ns() { cat /proc/"$1"/task/*/schedstat 2>/dev/null | awk '{s += $1} END {printf "%d", s}'; }
field() { python3 -c 'import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])' "$1" "$2"; }

# record: the job as record's command.
run_record() {
	local extra=$1 l0 truth counted lost cpu peak
	l0=$(load1)
	/usr/bin/time -f '%U %S' -o "$TMP/time" env SONDE_LOG=debug "$SONDE" record --gpu -q \
		-o "$TMP/r.folded" -- "$PY" "$JOB" "$B/gpu" --rate "$RATE" --duration "$DURATION" \
		$extra >"$TMP/r.out" 2>"$TMP/r.err" || true
	truth=$(grep '^{' "$TMP/r.out" | tail -1)
	counted=$(awk '{s += $NF} END {print s + 0}' "$TMP/r.gpu_launch.folded" 2>/dev/null || echo 0)
	lost=$(grep -o '[0-9]* GPU events lost' "$TMP/r.err" | head -1 | cut -d' ' -f1 || true)
	peak=$(grep -o 'at most [0-9.]* MB of them' "$TMP/r.err" | cut -d' ' -f3 || true)
	cpu=$(awk -v j="$(field "$truth" cpu_s)" -v d="$(field "$truth" seconds)" \
		'{printf "%.1f", 100 * ($1 + $2 - j) / d}' "$TMP/time")
	echo "| record | $2 | $(field "$truth" launches) | $counted | ${lost:-0} | $cpu % | ${peak:--} | $l0 / $(load1) |"
}

# agent: started first, the job after it (no terminal: held as jobs are);
# counted from its sonde_cuda_launches_total{pid} while the job holds.
run_agent() {
	local extra=$1 l0 url truth pid t0 t1 counted lost i
	"$SONDE" agent --metrics 127.0.0.1:0 --ws 127.0.0.1:0 --no-library-search \
		>"$TMP/a.out" 2>&1 &
	local agent=$!
	for i in $(seq 300); do
		url=$(grep -o 'http://127.0.0.1:[0-9]*/metrics' "$TMP/a.out" | head -1) && break
		sleep 0.1
	done
	l0=$(load1)
	t0=$(cpu_ns "$agent")
	exec 3< <(sleep $((DURATION + 600)))
	"$PY" "$JOB" "$B/gpu" --rate "$RATE" --duration "$DURATION" $extra --hold <&3 >"$TMP/j.out" &
	local job=$!
	for i in $(seq $((DURATION * 10 + 600))); do
		grep -q '^{' "$TMP/j.out" 2>/dev/null && break
		sleep 0.1
	done
	t1=$(cpu_ns "$agent")
	truth=$(head -1 "$TMP/j.out")
	pid=$(field "$truth" pid)
	for i in $(seq 100); do
		counted=$(curl -s "$url" | awk -v p="pid=\"$pid\"" 'index($0, "sonde_cuda_launches_total{") == 1 && index($0, p) {print $NF}')
		[ "${counted:-0}" -ge "$(field "$truth" launches)" ] && break
		sleep 0.1
	done
	lost=$(curl -s "$url" | awk '/^sonde_agent_gpu_drops_total/ {print $NF}')
	kill "$job" 2>/dev/null || true
	exec 3<&-
	kill -INT "$agent"
	wait "$agent" 2>/dev/null || true
	echo "| agent | $2 | $(field "$truth" launches) | ${counted:-0} | ${lost:-?} | $(awk -v a="$t0" -v b="$t1" -v d="$(field "$truth" seconds)" 'BEGIN{printf "%.1f", 100 * (b - a) / 1e9 / d}') % | - | $l0 / $(load1) |"
}

echo "## GPU probes: events lost at 20,000 launches/s with deep stacks"
echo
echo "$(uname -r), $(nproc) CPUs ($(awk -F: '/model name/{print $2; exit}' /proc/cpuinfo | sed 's/^ *//')), $(date -u +%Y-%m-%d)."
echo "\`bash bench/gpu_rate.sh\` (RATE=$RATE, DURATION=$DURATION s), $($SONDE --version 2>/dev/null | head -1)."
echo
echo "| tracer | job | launches made | counted | lost | tracer CPU | most queued | load 1 min (start / end) |"
echo "| --- | --- | ---: | ---: | ---: | ---: | ---: | --- |"
run_record "" "plain"
run_record "--load $LOAD" "+ lazy load of $(basename "$LOAD")"
run_agent "" "plain"
run_agent "--load $LOAD" "+ lazy load of $(basename "$LOAD")"
