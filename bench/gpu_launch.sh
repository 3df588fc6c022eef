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

. bench/gpu_common.sh

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

CONFIGS="none floor bpftrace_stack sonde sonde_nostack"
for r in $(seq "$REPS"); do
	for c in $CONFIGS; do
		echo "$(run_config "$c")" >>"$TMP/$c"
	done
done

# The agent's CPU at 10 000 launches per second.
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
machine_line
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
