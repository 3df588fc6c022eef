#!/usr/bin/env bash
# offcpu.sh: what off-CPU profiling costs a context-switch-heavy load, beside
# the tools a user would pick instead, in one run (issue 11's benchmark):
#   - the load: bench/pingpong.c, two processes passing a byte through two
#     pipes ROUNDS times (each round trip two blocks and two wake-ups), pinned
#     to one CPU: the most switches a second the machine does, each switch
#     the next one's wake-up. MODES="pin free" adds the two free to use both
#     CPUs -- cross-CPU wake-ups, whose rate swings from 30 000 to 170 000
#     switches a second between runs with nothing else changed (idle
#     states, placement), too much to measure a profiler by;
#   - the configurations: no profiler; `sonde record -F 99` (CPU samples
#     only); `sonde record --offcpu` (the default minimum, 1 ms: no wait of
#     the load is long enough to be recorded, every switch pays the timing);
#     the same with SONDE_OFFCPU_SYS_EXIT=1 (the way kernels before 6.18 take
#     user stacks: a program at every system call's exit); `--offcpu-min 1us`
#     (every block of the load is a wait: the rate bound decides); bpftrace's
#     off-CPU one-liner (kernel and user stack of every blocking switch,
#     summed by stack at the wake-up, as offcputime does); `perf sched record
#     -a` (every scheduler event to a file);
#   - per configuration, the median of REPS runs, interleaved: the load's CPU
#     time (both processes, user and system: what a profiler's programs add
#     in the kernel is in it, other load on the machine much less than in the
#     wall time) and wall time, the slowdown of each against no profiler, the
#     cost per context switch in ns, and the profiler's own CPU (share of one
#     core, from the scheduler's per-thread run time);
#   - the BPF program's run time per run (kernel.bpf_stats_enabled, in a pass
#     of its own: the statistics cost time too), and Sonde's counters: waits,
#     blocks under the minimum, drops.
# Prints a Markdown report; `make bench-offcpu` runs it. Needs root.
set -euo pipefail
cd "$(dirname "$0")/.."
B=${B:-build}
SONDE=$B/sonde
PP=$B/bench/pingpong
ROUNDS=${ROUNDS:-200000}
MODES=${MODES:-pin}
REPS=${REPS:-5}
PIN_CPU=${PIN_CPU:-1}
TMP=$(mktemp -d /tmp/sonde-bench-offcpu.XXXXXX)
PIDS=()
cleanup() {
	for p in "${PIDS[@]}"; do kill -INT "$p" 2>/dev/null || true; done
	sysctl -qw kernel.bpf_stats_enabled=0 2>/dev/null || true
	rm -rf "$TMP"
}
trap cleanup EXIT

[ "$(id -u)" = 0 ] || { echo "bench/offcpu.sh needs root" >&2; exit 1; }
[ -x "$PP" ] || { echo "build $PP first (make bench-offcpu)" >&2; exit 1; }

# The classic off-CPU one-liner, with the scheduler tracepoint only (no
# kprobes on this kernel): the blocking thread's stacks at its switch-out,
# its time summed under them at its switch-in.
cat >"$TMP/offcpu.bt" <<'EOF'
tracepoint:sched:sched_switch
{
	if (args->prev_state != 0) {
		@start[args->prev_pid] = nsecs;
		@ks[args->prev_pid] = kstack;
		@us[args->prev_pid] = ustack;
	}
	$s = @start[args->next_pid];
	if ($s) {
		@off[args->next_comm, @ks[args->next_pid], @us[args->next_pid]] = sum(nsecs - $s);
		delete(@start[args->next_pid]);
		delete(@ks[args->next_pid]);
		delete(@us[args->next_pid]);
	}
}
END { clear(@start); clear(@ks); clear(@us); }
EOF

cpu_ns() { cat /proc/"$1"/task/*/schedstat 2>/dev/null | awk '{s += $1} END {printf "%d", s}'; }
median() { sort -g | awk '{a[NR]=$1} END{print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
now() { date +%s.%N; }

# load pin|free -> "wall cpu switches_per_s"
load() {
	local out
	if [ "$1" = pin ]; then
		out=$(taskset -c "$PIN_CPU" "$PP" "$ROUNDS")
	else
		out=$("$PP" "$ROUNDS")
	fi
	echo "$out" | sed 's/.*secs=\([0-9.]*\) cpu_s=\([0-9.]*\) switches_per_s=\([0-9]*\).*/\1 \2 \3/'
}

# settle PID: waits (at most 20 s) until the profiler PID has done its
# start-up work -- the unwind tables and symbols of the machine's processes
# -- and uses less than 2 % of a core over half a second.
settle() {
	local a b i
	for i in $(seq 40); do
		a=$(cpu_ns "$1")
		sleep 0.5
		b=$(cpu_ns "$1")
		[ $(((b - a) / 10000000)) -lt 1 ] && return 0
	done
}

# start CONFIG: starts the profiler of CONFIG in the background, ready when
# it returns; sets PROF (its pid, or empty).
start() {
	PROF=""
	rm -f "$TMP/prof.err"
	case $1 in
	none) return ;;
	cpu) "$SONDE" record -F 99 -o "$TMP/s.folded" 2>"$TMP/prof.err" & ;;
	offcpu) "$SONDE" record -F 99 --offcpu -o "$TMP/s.folded" 2>"$TMP/prof.err" & ;;
	offcpu_sx) SONDE_OFFCPU_SYS_EXIT=1 "$SONDE" record -F 99 --offcpu -o "$TMP/s.folded" \
		2>"$TMP/prof.err" & ;;
	offcpu_1us) "$SONDE" record -F 99 --offcpu-min 1us -o "$TMP/s.folded" 2>"$TMP/prof.err" & ;;
	bpftrace) bpftrace "$TMP/offcpu.bt" >"$TMP/prof.err" 2>&1 & ;;
	perf) perf sched record -a -o "$TMP/perf.data" >/dev/null 2>"$TMP/prof.err" & ;;
	esac
	PROF=$!
	PIDS+=("$PROF")
	# Attached when it says so (perf says nothing: a second).
	case $1 in
	bpftrace) until grep -qs Attaching "$TMP/prof.err"; do sleep 0.05; done ;;
	perf) sleep 1 ;;
	*) until grep -qs sampling "$TMP/prof.err"; do sleep 0.05; done ;;
	esac
	settle "$PROF"
}

stop() {
	[ -n "$PROF" ] || return 0
	kill -INT "$PROF"
	wait "$PROF" || true
	PIDS=()
}

CONFIGS="none cpu offcpu offcpu_sx offcpu_1us"
command -v bpftrace >/dev/null && CONFIGS+=" bpftrace"
command -v perf >/dev/null && CONFIGS+=" perf"

declare -A cpu wall sps prof waits
for r in $(seq "$REPS"); do
	for c in $CONFIGS; do
		for mode in $MODES; do
			start "$c"
			ns0=0
			[ -n "$PROF" ] && ns0=$(cpu_ns "$PROF")
			t0=$(now)
			read -r w u s < <(load $mode)
			t1=$(now)
			p=0
			[ -n "$PROF" ] && p=$(awk -v a="$ns0" -v b="$(cpu_ns "$PROF")" -v t0="$t0" \
				-v t1="$t1" 'BEGIN{printf "%.2f", 100*(b-a)/1e9/(t1-t0)}')
			stop
			if [ "$c" != none ] && [ "${c#offcpu}" != "$c" ]; then
				waits[$c,$mode]=$(grep -o '[0-9]* waits of at least' "$TMP/prof.err" | cut -d' ' -f1 || true)
			fi
			cpu[$c,$mode]+="$u "
			wall[$c,$mode]+="$w "
			sps[$c,$mode]+="$s "
			prof[$c,$mode]+="$p "
		done
	done
	echo "rep $r of $REPS done" >&2
done

med() { echo "$1" | tr ' ' '\n' | grep . | median; }

# The BPF program's run time per run, with statistics on (a pass of its own).
bpf_cost() {
	local c=$1 id
	sysctl -qw kernel.bpf_stats_enabled=1
	start "$c"
	load pin >/dev/null
	for id in $(bpftool prog show | awk -F: '/name offcpu_/{print $1}'); do
		bpftool prog show id "$id" | awk '/name/{n=$4} /run_time_ns/{
			for (i = 1; i <= NF; i++) { if ($i == "run_time_ns") t=$(i+1); if ($i == "run_cnt") k=$(i+1) }
			if (k > 0) printf "%s: %.0f ns a run (%d runs)\n", n, t/k, k }'
	done
	stop
	sysctl -qw kernel.bpf_stats_enabled=0
}

echo "## Off-CPU profiler: a pipe ping-pong, beside bpftrace and perf sched"
echo
echo "- machine: $(nproc) CPUs, $(awk -F': ' '/model name/{print $2; exit}' /proc/cpuinfo), kernel $(uname -r),"
echo "  $(bpftrace --version 2>/dev/null || true), $(perf --version 2>/dev/null || true)"
echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
echo "- command: \`REPS=$REPS ROUNDS=$ROUNDS MODES=\"$MODES\" make bench-offcpu\` (bench/offcpu.sh); pin: the load on CPU $PIN_CPU"
echo "- load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
for mode in $MODES; do
	base_cpu=$(med "${cpu[none,$mode]}")
	base_wall=$(med "${wall[none,$mode]}")
	base_sps=$(med "${sps[none,$mode]}")
	echo "| ping-pong, $mode ($base_sps switches/s unprofiled), median of $REPS | load CPU s | slowdown (CPU) | wall s | slowdown (wall) | ns a switch | at 100k switches/s | profiler CPU | waits recorded |"
	echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"
	for c in $CONFIGS; do
		u=$(med "${cpu[$c,$mode]}")
		w=$(med "${wall[$c,$mode]}")
		p=$(med "${prof[$c,$mode]}")
		awk -v c="$c" -v u="$u" -v w="$w" -v bu="$base_cpu" -v bw="$base_wall" -v p="$p" \
			-v n="$ROUNDS" -v waits="${waits[$c,$mode]:--}" 'BEGIN{
			sw = 2 * n;             # blocking switches of the load
			ns = (u - bu) * 1e9 / sw;
			printf "| %s | %.3f | %+.1f %% | %.3f | %+.1f %% | %.0f | %.1f %% of a CPU | %s %% | %s |\n",
				c, u, 100 * (u / bu - 1), w, 100 * (w / bw - 1), ns, ns * 1e5 / 1e9 * 100, p, waits }'
	done
	echo
done
echo "BPF run time (kernel.bpf_stats_enabled; its own clock reads are in it), ping-pong pinned:"
echo
for c in offcpu offcpu_sx offcpu_1us; do
	echo "- $c:"
	bpf_cost "$c" | sed 's/^/  - /'
done

# Where the minimum falls on this machine as it is: 10 s of every thread's
# blocks, those under 1 ms only counted (SONDE_LOG=debug says how many).
SONDE_LOG=debug "$SONDE" record --offcpu -d 10 -o "$TMP/m.folded" 2>"$TMP/m.err" || true
echo
echo "The machine's own blocks over 10 s (\`sonde record --offcpu -d 10\`, whole machine, load average"
echo "$(cut -d' ' -f1-3 /proc/loadavg) after):"
echo
awk '/waits of at least/ { waits = $2; wait_s = $(NF-5) }
	/off-CPU: .* blocks timed/ { blocks = $4; short = $7; gsub(/[(]/, "", $11); short_s = $11 }
	END { if (blocks) printf "- %d blocks; %d (%.0f %%) under 1 ms, holding %.3f s (%.1f %% of the blocked time); %d waits of at least 1 ms, %.3f s\n",
		blocks, short, 100 * short / blocks, short_s, 100 * short_s / (short_s + wait_s), waits, wait_s }' "$TMP/m.err"
