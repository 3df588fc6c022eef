#!/usr/bin/env bash
# gpu_launch.sh: what the GPU probes cost a program that launches kernels,
# measured in one run on the stand-in runtime (tests/gpu/standin, the real
# libcudart's symbols and signatures; a launch that does no GPU work, so the
# probe's cost is all there is to see):
#   1. ns per cudaLaunchKernel over LAUNCHES launches (median of REPS runs,
#      interleaved): no probe; the floor -- an empty uprobe + uretprobe on
#      cudaLaunchKernel (bpftrace); bpftrace counting launches by user stack
#      (what a user would write by hand); `sonde agent` with stacks (the
#      default) and with --no-stacks;
#   2. the agent's CPU (share of one core) and RSS while a program launches
#      10 000 kernels per second for DURATION seconds.
# The agent is measured once its search for libraries at start is over.
# Prints a Markdown report; `make bench` runs it. Needs root.
set -euo pipefail
cd "$(dirname "$0")/.."
B=${B:-build}
SONDE=$B/sonde
SI=$B/gpu/standin
BENCH=$B/gpu/workloads/gpu_launch_bench
LAUNCHES=${LAUNCHES:-1000000}
REPS=${REPS:-5}
DURATION=${DURATION:-10}
LIB=$(readlink -f "$SI/libcudart.so.13")
TMP=$(mktemp -d /tmp/sonde-bench-gpu.XXXXXX)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$TMP"' EXIT

make -s -f tests/gpu/standin/standin.mk B="$B" gpu-standin >/dev/null
export LD_LIBRARY_PATH=$SI

# ns per launch of one run of the benchmark (nothing else running).
launch_ns() {
	"$BENCH" -n "$LAUNCHES" | python3 -c 'import json,sys; print(json.load(sys.stdin)["bench"]["ns_per_launch"])'
}

# Starts a tracer in the background and waits until it says it is attached
# (the line matching $1 on its output); its pid in $tracer.
start_tracer() {
	local ready=$1 i
	shift
	"$@" >"$TMP/tracer.out" 2>&1 &
	tracer=$!
	for i in $(seq 300); do
		grep -q "$ready" "$TMP/tracer.out" 2>/dev/null && return 0
		sleep 0.1
	done
	echo "tracer not ready: $*" >&2
	cat "$TMP/tracer.out" >&2
	exit 1
}

# Starts `sonde agent --no-cpu ARGS...` as the tracer and waits, past its
# start, for its search of the filesystems for CUDA and NCCL libraries to be
# over: a one-off at start whose CPU would otherwise count against the
# launches. The search's own line goes to $TMP/search.
start_sonde() {
	local url i
	start_tracer "metrics on" "$SONDE" agent --no-cpu --metrics 127.0.0.1:0 --ws 127.0.0.1:0 "$@"
	url=$(grep -o 'http://127.0.0.1:[0-9]*/metrics' "$TMP/tracer.out" | head -1)
	for i in $(seq 3000); do
		curl -s "$url" | grep -q '^sonde_agent_gpu_library_search_done 1' && break
		sleep 0.1
	done
	grep -o 'searched .*' "$TMP/tracer.out" >"$TMP/search" || true
}

stop_tracer() {
	kill -INT "$tracer" 2>/dev/null || true
	wait "$tracer" 2>/dev/null || true
}

run_config() {
	case $1 in
	none) launch_ns ;;
	floor)
		start_tracer "^ready" bpftrace -e "BEGIN { printf(\"ready\\n\"); } uprobe:$LIB:cudaLaunchKernel {} uretprobe:$LIB:cudaLaunchKernel {}"
		launch_ns
		stop_tracer
		;;
	bpftrace_stack)
		start_tracer "^ready" bpftrace -e "BEGIN { printf(\"ready\\n\"); } uprobe:$LIB:cudaLaunchKernel { @[ustack] = count(); }"
		launch_ns
		stop_tracer
		;;
	sonde)
		start_sonde
		launch_ns
		stop_tracer
		;;
	sonde_nostack)
		start_sonde --no-stacks
		launch_ns
		stop_tracer
		;;
	esac
}

median() { sort -g | awk '{a[NR]=$1} END{print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

CONFIGS="none floor bpftrace_stack sonde sonde_nostack"
for r in $(seq "$REPS"); do
	for c in $CONFIGS; do
		echo "$(run_config "$c")" >>"$TMP/$c"
	done
done

# The agent's CPU at 10 000 launches per second, from the scheduler's own
# clock for every thread (/proc/PID/task/*/schedstat, ns).
cpu_ns() { cat /proc/"$1"/task/*/schedstat 2>/dev/null | awk '{s += $1} END {printf "%d", s}'; }
start_sonde
t0=$(cpu_ns "$tracer")
s0=$(date +%s.%N)
paced=$("$BENCH" --rate 10000 --duration "$DURATION" | python3 -c 'import json,sys; b=json.load(sys.stdin)["bench"]; print("%d launches at %.0f/s" % (b["launches"], b["rate"]))')
s1=$(date +%s.%N)
t1=$(cpu_ns "$tracer")
rss=$(awk '/VmHWM/{print $2}' "/proc/$tracer/status")
stop_tracer
agent_cpu=$(awk -v a="$t0" -v b="$t1" -v s0="$s0" -v s1="$s1" 'BEGIN{printf "%.2f", 100*(b-a)/1e9/(s1-s0)}')

none=$(median <"$TMP/none")
floor=$(median <"$TMP/floor")
echo "## GPU probes: cost per kernel launch"
echo
echo "$(uname -r), $(nproc) CPUs ($(awk -F: '/model name/{print $2; exit}' /proc/cpuinfo | sed 's/^ *//')), $(date -u +%Y-%m-%d)."
echo "\`bash bench/gpu_launch.sh\` (LAUNCHES=$LAUNCHES, REPS=$REPS, median), stand-in \`cudaLaunchKernel\`."
echo
echo "| configuration | ns per launch | added vs none | above the empty-uprobe floor |"
echo "| --- | ---: | ---: | ---: |"
for c in $CONFIGS; do
	m=$(median <"$TMP/$c")
	case $c in
	none) name="no probe" ;;
	floor) name="floor: empty uprobe + uretprobe (bpftrace)" ;;
	bpftrace_stack) name="bpftrace \`@[ustack] = count()\` (entry only)" ;;
	sonde) name="\`sonde agent\` (entry + return, user stack)" ;;
	sonde_nostack) name="\`sonde agent --no-stacks\`" ;;
	esac
	awk -v n="$name" -v m="$m" -v z="$none" -v f="$floor" -v c="$c" 'BEGIN{
		above = (c == "none" || c == "floor") ? "" : sprintf("%+.0f", m - f);
		printf "| %s | %.0f | %+.0f | %s |\n", n, m, m - z, above }'
done
echo
echo "Agent at 10 000 launches/s for ${DURATION} s ($paced): $agent_cpu % of one core, peak RSS $((rss / 1024)) MiB."
echo "Its search for CUDA and NCCL libraries at start, before any of the above: $(cat "$TMP/search")."
