#!/usr/bin/env bash
# gpu_cupti.sh: what Sonde's CUPTI library (libsonde_cupti.so, issue 24)
# costs a program that launches kernels, in one run on the stand-ins
# (tests/gpu/standin: the runtime, the driver that loads
# CUDA_INJECTION64_PATH at cuInit, and a CUPTI whose callbacks and kernel
# records cost what a function call and a copy cost -- NVIDIA's own CUPTI
# adds its cost on a real GPU, not seen here):
#   1. ns per cudaLaunchKernel over LAUNCHES launches (median of REPS runs,
#      interleaved): nothing; the library loaded, no agent; the library and
#      `sonde agent` (the launch call's stack, the kernel records joined to
#      it); the agent alone (its uprobes on the runtime); the library
#      sampling PCs (SONDE_CUPTI_PC_SAMPLING=1: the stand-in's samples, about
#      one a kernel, taken every 250 ms), without and with the agent -- the
#      host's side of PC sampling; what it costs the GPU (kernels slowed) is
#      the real GPU's, measured by tests/gpu/device;
#   2. the library's memory in the process (peak RSS with it, without it);
#   3. the agent's CPU (share of one core) at 10 000 kernels per second
#      with the library, for DURATION seconds, and at FAST kernels per
#      second: kernels joined to their launch, and any lost.
# Prints a Markdown report; `make bench-cupti` runs it. Needs root.
set -euo pipefail
cd "$(dirname "$0")/.."
B=${B:-build}
SONDE=$B/sonde
SI=$B/gpu/standin
BENCH=$B/gpu/workloads/gpu_launch_bench
CUPTI=$(readlink -f "$B/libsonde_cupti.so")
LAUNCHES=${LAUNCHES:-200000}
REPS=${REPS:-5}
DURATION=${DURATION:-10}
FAST=${FAST:-100000}
TMP=$(mktemp -d /tmp/sonde-bench-cupti.XXXXXX)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$TMP"' EXIT

make -s -f tests/gpu/standin/standin.mk B="$B" gpu-standin >/dev/null
make -s "$B/libsonde_cupti.so" >/dev/null
export LD_LIBRARY_PATH=$SI
export SONDE_STANDIN_KERNEL_US=${SONDE_STANDIN_KERNEL_US:-1}
. bench/gpu_common.sh

# ns per launch of one run of the benchmark; with $1 = lib, the library
# loaded, with $1 = pc, the library sampling PCs (SONDE_CUPTI_PC_SAMPLING=1).
launch_ns() {
	local inj=()
	[ "${1:-}" = lib ] && inj=(env CUDA_INJECTION64_PATH="$CUPTI")
	[ "${1:-}" = pc ] && inj=(env CUDA_INJECTION64_PATH="$CUPTI" SONDE_CUPTI_PC_SAMPLING=1)
	"${inj[@]}" "$BENCH" -n "$LAUNCHES" |
		python3 -c 'import json,sys; print([json.loads(l) for l in sys.stdin if l.startswith("{")][-1]["bench"]["ns_per_launch"])'
}

run_config() {
	case $1 in
	none) launch_ns ;;
	lib) launch_ns lib ;;
	lib_agent)
		start_sonde
		launch_ns lib
		stop_tracer
		;;
	pc) launch_ns pc ;;
	pc_agent)
		start_sonde
		launch_ns pc
		stop_tracer
		;;
	agent)
		start_sonde
		launch_ns
		stop_tracer
		;;
	esac
}

# Peak RSS (kB) of the benchmark held once done; with $1 = lib, the library loaded.
peak_kb() {
	local inj=()
	[ "${1:-}" = lib ] && inj=(CUDA_INJECTION64_PATH="$CUPTI")
	env "${inj[@]}" python3 - "$BENCH" <<'PY'
import subprocess, sys
p = subprocess.Popen([sys.argv[1], "-n", "100000", "--hold"], stdin=subprocess.PIPE,
                     stdout=subprocess.PIPE, text=True)
for line in p.stdout:
    if line.startswith("{"):
        break
hwm = [l.split()[1] for l in open("/proc/%d/status" % p.pid) if l.startswith("VmHWM")][0]
p.stdin.close()
p.wait()
print(hwm)
PY
}

CONFIGS="none lib lib_agent agent pc pc_agent"
for r in $(seq "$REPS"); do
	for c in $CONFIGS; do
		echo "$(run_config "$c")" >>"$TMP/$c"
	done
done
mem_none=$(peak_kb)
mem_lib=$(peak_kb lib)

# The agent at a paced rate with the library: its CPU, and the kernels it
# joined to their launch (its own counters, before and after).
metric() { curl -s "$url" | awk -v n="$1" '$1 == n {print $2}'; }
paced() {
	local rate=$1 t0 t1 s0 s1 j0 j1 l0 l1 k0 k1 out
	start_sonde
	url=$(grep -o 'http://127.0.0.1:[0-9]*/metrics' "$TMP/tracer.out" | head -1)
	j0=$(metric sonde_agent_gpu_time_kernels_total)
	t0=$(cpu_ns "$tracer")
	s0=$(date +%s.%N)
	out=$(CUDA_INJECTION64_PATH="$CUPTI" "$BENCH" --rate "$rate" --duration "$DURATION" |
		python3 -c 'import json,sys; b=[json.loads(l) for l in sys.stdin if l.startswith("{")][-1]["bench"]; print("%d %.0f" % (b["launches"], b["rate"]))')
	s1=$(date +%s.%N)
	t1=$(cpu_ns "$tracer")
	# The last records come at the job's exit: read once the agent took them.
	for i in $(seq 100); do
		j1=$(metric sonde_agent_gpu_time_kernels_total)
		[ "$(awk -v a="$j1" -v b="$j0" -v n="${out%% *}" 'BEGIN{print (a - b >= n)}')" = 1 ] && break
		sleep 0.1
	done
	l1=$(metric sonde_agent_gpu_time_no_kernel_total)
	k1=$(metric sonde_agent_gpu_drops_total)
	stop_tracer
	awk -v a="$t0" -v b="$t1" -v s0="$s0" -v s1="$s1" -v out="$out" -v j0="$j0" -v j1="$j1" \
		-v l1="$l1" -v k1="$k1" 'BEGIN{split(out, o, " ");
		printf "| %d | %d | %.2f %% | %d | %d | %d |\n", o[2], o[1], 100*(b-a)/1e9/(s1-s0), j1-j0, l1, k1}'
}
slow=$(paced 10000)
fast=$(paced "$FAST")

none=$(median <"$TMP/none")
echo "## CUPTI library: cost per kernel launch"
echo
machine_line
echo "\`bash bench/gpu_cupti.sh\` (LAUNCHES=$LAUNCHES, REPS=$REPS, median), stand-in runtime, driver and CUPTI (kernels of ${SONDE_STANDIN_KERNEL_US} us)."
echo
echo "| configuration | ns per launch | added vs none |"
echo "| --- | ---: | ---: |"
for c in $CONFIGS; do
	m=$(median <"$TMP/$c")
	case $c in
	none) name="nothing" ;;
	lib) name="\`libsonde_cupti.so\` loaded, no agent" ;;
	lib_agent) name="\`libsonde_cupti.so\` and \`sonde agent\` (the launch's stack, kernels joined)" ;;
	agent) name="\`sonde agent\` alone (uprobes on the runtime, user stack)" ;;
	pc) name="\`libsonde_cupti.so\` sampling PCs (SONDE_CUPTI_PC_SAMPLING=1), no agent" ;;
	pc_agent) name="\`libsonde_cupti.so\` sampling PCs and \`sonde agent\` (gpu_stall too)" ;;
	esac
	awk -v n="$name" -v m="$m" -v z="$none" 'BEGIN{printf "| %s | %.0f | %+.0f |\n", n, m, m - z}'
done
echo
echo "Peak RSS of the benchmark (100 000 launches): $((mem_none / 1024)) MiB without the library, $((mem_lib / 1024)) MiB with it (+$(((mem_lib - mem_none) / 1024)) MiB)."
echo
echo "The agent with the library, ${DURATION} s at each rate:"
echo
echo "| kernels/s | launches | agent CPU (one core) | kernels joined to their launch | launches without kernel | records lost |"
echo "| ---: | ---: | ---: | ---: | ---: | ---: |"
echo "$slow"
echo "$fast"
