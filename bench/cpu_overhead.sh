#!/usr/bin/env bash
# cpu_overhead.sh: what the CPU profiler costs, measured side by side with
# perf in one run on the same fixed-work, CPU-bound load (one copy of
# build/workloads/deep per CPU):
#   1. the load's wall time with no profiler, `sonde record -F 99` and -F 999
#      (whole machine), and `perf record -F 99 -g -a`; median of REPS runs,
#      interleaved so that drift hits every configuration alike;
#   2. the BPF program's cost per sample (kernel.bpf_stats_enabled:
#      run_time_ns / run_cnt) with the load's stacks ~10 and ~60 frames deep;
#   3. the profilers' own CPU (share of one core, from the scheduler's
#      per-thread run time, which can't read 0 for a process that runs) and
#      peak RSS.
# Prints a Markdown report; `make bench` runs it. Needs root.
set -euo pipefail
cd "$(dirname "$0")/.."
B=${B:-build}
SONDE=$B/sonde
DEEP=$B/workloads/deep
UNITS=${UNITS:-6000}
REPS=${REPS:-5}
NCPU=$(nproc)
TMP=$(mktemp -d /tmp/sonde-bench.XXXXXX)
trap 'rm -rf "$TMP"' EXIT

now() { date +%s.%N; }

# Runs the load (one deep per CPU) and prints its wall time in seconds.
load() {
	local depth=${1:-10} t0 t1
	t0=$(now)
	for _ in $(seq "$NCPU"); do "$DEEP" "$depth" "$UNITS" & done
	wait
	t1=$(now)
	awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.3f", b-a}'
}

# cpu_ns PID -> CPU time of every thread of PID so far, in nanoseconds, from
# the scheduler's own clock (/proc/PID/task/*/schedstat): utime and stime are
# sampled by the tick and read 0 for a process that runs between ticks.
cpu_ns() { cat /proc/"$1"/task/*/schedstat 2>/dev/null | awk '{s += $1} END {printf "%d", s}'; }

# Starts a profiler in the background, runs the load, stops the profiler.
# Prints "wall cpu_percent_of_one_core rss_kb".
profiled() {
	local wall ns0 ns1 t0 t1 rss pid
	"$@" >/dev/null 2>"$TMP/prof.err" &
	pid=$!
	# Attached: sonde says so; perf says nothing, so give it a second.
	if [ "$1" = "$SONDE" ]; then
		until grep -q sampling "$TMP/prof.err"; do sleep 0.05; done
	else
		sleep 1
	fi
	ns0=$(cpu_ns "$pid")
	t0=$(now)
	wall=$(load 10)
	t1=$(now)
	ns1=$(cpu_ns "$pid")
	rss=$(awk '/VmHWM/{print $2}' "/proc/$pid/status")
	kill -INT "$pid"
	wait "$pid" || true
	awk -v w="$wall" -v a="$ns0" -v b="$ns1" -v t0="$t0" -v t1="$t1" -v rss="$rss" \
		'BEGIN{printf "%s %.3f %s\n", w, 100*(b-a)/1e9/(t1-t0), rss}'
}

median() { sort -g | awk '{a[NR]=$1} END{print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

declare -A wall cpu rss
for r in $(seq "$REPS"); do
	wall[none]+="$(load 10) "
	read -r w c m < <(profiled "$SONDE" record -F 99 -o "$TMP/s99.folded")
	wall[s99]+="$w "; cpu[s99]+="$c "; rss[s99]+="$m "
	read -r w c m < <(profiled "$SONDE" record -F 999 -o "$TMP/s999.folded")
	wall[s999]+="$w "; cpu[s999]+="$c "; rss[s999]+="$m "
	if command -v perf >/dev/null; then
		read -r w c m < <(profiled perf record -F 99 -g -a -q -o "$TMP/perf.data")
		wall[perf]+="$w "; cpu[perf]+="$c "; rss[perf]+="$m "
	fi
	echo "rep $r done" >&2
done

med() { tr ' ' '\n' <<<"$1" | grep . | median; }
base=$(med "${wall[none]}")

# start_deep DEPTH: one copy of the load per CPU in the background, their
# pids comma-separated in DEEP_PIDS. The BPF costs below are taken with it,
# so that every sample is of the load: an idle CPU's samples cost little and
# would lower the mean, and whether the kernel takes them at all depends on
# the machine.
start_deep() {
	local pids=() bin=${2:-$DEEP}
	for _ in $(seq "$NCPU"); do
		"$bin" "$1" $((UNITS * 3)) &
		pids+=($!)
	done
	DEEP_PIDS=$(IFS=,; echo "${pids[*]}")
}
bpf_cost() {
	local out bin=${2:-$DEEP}
	sysctl -q -w kernel.bpf_stats_enabled=1
	start_deep "$1" "$bin"
	"$SONDE" record -F 999 -q -p "$DEEP_PIDS" -o "$TMP/cost.folded" 2>/dev/null &
	sleep 3
	out=$(bpftool prog show --json | python3 -c '
import json, sys
for p in json.load(sys.stdin):
    if p.get("name") == "sample_cpu" and p.get("run_cnt"):
        print("%.0f %d" % (p["run_time_ns"] / p["run_cnt"], p["run_cnt"]))
        break')
	wait || true
	sysctl -q -w kernel.bpf_stats_enabled=0
	# frames per sample actually seen, from the recorded stacks
	local frames
	frames=$(awk -v comm="$(basename "$bin")" 'index($1, comm ";") == 1 {n=split($1,a,";"); s+=n*$2; c+=$2} END{if(c) printf "%.0f", s/c-1}' "$TMP/cost.folded")
	echo "$out $frames"
}
read -r ns10 cnt10 fr10 < <(bpf_cost 10)
read -r ns60 cnt60 fr60 < <(bpf_cost 60)
# Code without frame pointers (gcc -O2): every frame from the unwind tables.
DEEP_O2=$B/workloads/deep-O2
read -r o2ns10 o2cnt10 o2fr10 < <(bpf_cost 10 "$DEEP_O2")
read -r o2ns30 o2cnt30 o2fr30 < <(bpf_cost 30 "$DEEP_O2")
read -r o2ns60 o2cnt60 o2fr60 < <(bpf_cost 60 "$DEEP_O2")

# The same for bpftrace counting user stacks at 999 Hz (what a user would
# write by hand), on the 60-frame load.
bpftrace_cost() {
	local out
	command -v bpftrace >/dev/null || return 0
	sysctl -q -w kernel.bpf_stats_enabled=1
	start_deep 60
	bpftrace -e 'profile:hz:999 /comm == "deep"/ { @[ustack] = count(); }' >/dev/null 2>&1 &
	local bt=$!
	sleep 3
	out=$(bpftool prog show --json | python3 -c '
import json, sys
for p in json.load(sys.stdin):
    if p.get("type") == "perf_event" and p.get("name") != "sample_cpu" and p.get("run_cnt"):
        print("%.0f %d" % (p["run_time_ns"] / p["run_cnt"], p["run_cnt"]))
        break')
	kill -INT "$bt" 2>/dev/null || true
	wait || true
	sysctl -q -w kernel.bpf_stats_enabled=0
	echo "$out"
}
read -r nsbt cntbt < <(bpftrace_cost) || true

echo "## CPU profiler overhead"
echo
echo "- machine: $(nproc) CPUs, $(awk -F': ' '/model name/{print $2; exit}' /proc/cpuinfo), kernel $(uname -r), sampling event: $("$SONDE" record -F 99 -d 1 -o "$TMP/e.folded" 2>&1 | grep -o 'cpu-clock\|cycles' | head -1)"
echo "- date: $(date -u +%Y-%m-%d)"
echo "- command: \`make bench\` (bench/cpu_overhead.sh, UNITS=$UNITS, REPS=$REPS)"
echo "- load: $NCPU copies of \`deep 10 $UNITS\` (fixed work, one per CPU); profilers record the whole machine"
echo
echo "| configuration | load wall time (median s) | slowdown | profiler CPU (% of one core) | profiler peak RSS (MB) |"
echo "| --- | --- | --- | --- | --- |"
echo "| no profiler | $base | - | - | - |"
for k in s99 s999 perf; do
	[ -n "${wall[$k]:-}" ] || continue
	w=$(med "${wall[$k]}"); c=$(med "${cpu[$k]}"); m=$(med "${rss[$k]}")
	name=$k
	case $k in s99) name="sonde record -F 99";; s999) name="sonde record -F 999";; perf) name="perf record -F 99 -g -a";; esac
	awk -v n="$name" -v w="$w" -v b="$base" -v c="$c" -v m="$m" 'BEGIN{printf "| %s | %.3f | %+.2f %% | %.3f | %.1f |\n", n, w, 100*(w-b)/b, c, m/1024}'
done
echo
echo "| BPF program cost per sample | frames per sample | ns per sample (run_time_ns / run_cnt) | samples |"
echo "| --- | --- | --- | --- |"
echo "| deep 10 | $fr10 | $ns10 | $cnt10 |"
echo "| deep 60 | $fr60 | $ns60 | $cnt60 |"
echo "| deep-O2 10 (gcc -O2, no frame pointers) | $o2fr10 | $o2ns10 | $o2cnt10 |"
echo "| deep-O2 30 | $o2fr30 | $o2ns30 | $o2cnt30 |"
echo "| deep-O2 60 | $o2fr60 | $o2ns60 | $o2cnt60 |"
if [ -n "${nsbt:-}" ]; then
	echo "| deep 60, bpftrace \`@[ustack] = count()\` at 999 Hz (user stack only) | 58 | $nsbt | $cntbt |"
fi
