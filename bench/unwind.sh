#!/usr/bin/env bash
# unwind.sh: issue 9's benchmark -- stacks unwound from the files' own
# unwind tables, with Python frames, beside perf -- in one run:
#   1. the BPF program's cost per sample (kernel.bpf_stats_enabled:
#      run_time_ns / run_cnt of sample_cpu, as bench/cpu_overhead.sh takes
#      it) on gcc -O2 code 10, 30 and 60 frames deep (build/workloads/deep-O2)
#      and on Debian's python3.11 running bench/pydeep.py 3, 20 and 40
#      Python frames deep; one copy of the load per CPU, `sonde record
#      -F 999 -p` their pids. On a shared machine many runs are other
#      processes' samples, filtered out: the run time is also given per
#      sample of the load (the program's own count of what it kept), less
#      the other runs at what a run costs when all are others' (an idle
#      target);
#   2. the unwind tables of a PyTorch CPU training process
#      (tests/workloads/train_torch.py on Debian's python3-torch) under
#      `sonde agent` (default settings), once with -p on the process and
#      once on the whole machine: rows and bytes per file (python3.11, libc,
#      libtorch_cpu.so), from the agent's SONDE_LOG=debug lines "unwind
#      table of FILE: N rows"; in all for the files the process maps, and
#      the agent's sonde_agent_unwind_* metrics;
#   3. the agent's resident memory (VmRSS, VmHWM) while that process trains,
#      in both runs;
#   4. the whole-machine slowdown at 99 Hz of a fixed-work Python load (one
#      pydeep.py 20 per CPU): no profiler, `sonde record -F 99`, `perf
#      record -F 99 -a --call-graph dwarf` and `--call-graph fp`; median of
#      REPS runs, interleaved, each after a warm-up (see warm());
#   5. the share error of each tool on known shares (build/workloads/shares-O2,
#      gcc -O2: alpha 50 %, beta 30 %, gamma 20 %; tests/workloads/shares.py
#      on python3.11, the same split), each at 499 Hz, perf's stacks folded
#      from `perf script` (see perf_fix() for why perf records with -B),
#      and the share of samples whose stack is whole from _start.
# Every process it starts is bounded in time and stopped at exit. Prints a
# Markdown report on stdout, progress on stderr; `make bench-unwind` runs it.
# Needs root, perf, bpftool, Debian's python3.11 and python3-torch.
set -euo pipefail
cd "$(dirname "$0")/.."
B=${B:-build}
REPS=${REPS:-3}
PY=${PY:-/usr/bin/python3.11}  # the interpreter profiled (Debian's)
HPY=/usr/bin/python3            # the one running this script's helpers, and torch
PY_UNITS=${PY_UNITS:-4000}      # units of pydeep.py per copy in the slowdown load
SHARE_SECS=${SHARE_SECS:-6}     # seconds of each known-share run
TORCH_SECS=${TORCH_SECS:-20}    # seconds of PyTorch training beside the agent
NCPU=$(nproc)
TMP=$(mktemp -d /tmp/sonde-bench-unwind.XXXXXX)
STATS0=$(sysctl -n kernel.bpf_stats_enabled)

# Processes we start, "pid starttime" a line: stopped at exit, and only if
# the pid is still the process we started.
track() { echo "$1 $(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f20)" >>"$TMP/pids"; }
ours() { [ "$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f20)" = "$2" ]; }
cleanup() {
	local pid st sig
	trap - EXIT INT TERM
	# TERM first: perf then ends the `sleep` it runs, sonde detaches.
	for sig in TERM KILL; do
		[ -f "$TMP/pids" ] || break
		while read -r pid st; do
			! ours "$pid" "$st" || kill -"$sig" "$pid" 2>/dev/null || true
		done <"$TMP/pids"
		[ $sig = KILL ] || sleep 1
	done
	sysctl -q -w kernel.bpf_stats_enabled="$STATS0" || true
	if [ -n "${KEEP_TMP:-}" ]; then
		echo "unwind.sh: kept $TMP" >&2 # KEEP_TMP=1: the logs, folded stacks and metrics
	else
		rm -rf "$TMP"
	fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

for need in perf bpftool "$PY" "$HPY"; do
	command -v "$need" >/dev/null || { echo "unwind.sh: $need is missing -- run make setup" >&2; exit 1; }
done
"$HPY" -c 'import torch' 2>/dev/null ||
	{ echo "unwind.sh: Debian's python3-torch is missing -- run make setup" >&2; exit 1; }
# A copy of the binary: another build may replace $B/sonde during the run.
cp "$B/sonde" "$TMP/sonde"
SONDE=$TMP/sonde

now() { date +%s.%N; }
log() { echo "unwind.sh: $*" >&2; }
median() { sort -g | awk '{a[NR]=$1} END{print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
med() { tr ' ' '\n' <<<"$1" | grep . | median; }

# until_true SECS CMD...: runs CMD until it succeeds, for at most SECS.
until_true() {
	local end=$((SECONDS + $1))
	shift
	until "$@"; do
		[ "$SECONDS" -lt "$end" ] || return 1
		sleep 0.05
	done
}

# stop PID [SIG]: sends SIG (INT) and waits up to 60 s for the process to
# exit, then kills it.
stop() {
	local pid=$1 sig=${2:-INT} i
	kill -"$sig" "$pid" 2>/dev/null || return 0
	for i in $(seq 1200); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.05
	done
	kill -KILL "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
}

# cpu_ns PID: CPU time of every thread of PID so far, in ns (scheduler clock).
cpu_ns() { cat /proc/"$1"/task/*/schedstat 2>/dev/null | awk '{s += $1} END {printf "%d", s}'; }

# ---- 1. BPF cost per sample ---------------------------------------------

# prog_stats PID: "run_time_ns run_cnt samples" of the perf_event program
# (sample_cpu) that process PID holds, found by its own fds, not by name:
# other sondes may run on the machine. samples: what its counters map says
# it handed to userspace, read before and after the stats and averaged.
prog_stats() {
	"$HPY" - "$1" <<'EOF'
import glob, json, subprocess, sys
pid = sys.argv[1]
def fdinfo():
    for f in glob.glob("/proc/%s/fdinfo/*" % pid):
        try:
            lines = open(f).read().splitlines()
        except OSError:
            continue
        yield {k.strip(): v.strip() for k, _, v in (l.partition(":") for l in lines)}
counters = [kv["map_id"] for kv in fdinfo() if "map_id" in kv and json.loads(
    subprocess.check_output(["bpftool", "map", "show", "id", kv["map_id"], "--json"]))
    .get("name") == "counters"][0]
def samples():  # CPU_CNT_SAMPLES, summed over the CPUs
    d = json.loads(subprocess.check_output(["bpftool", "map", "dump", "id", counters, "--json"]))
    return sum(v["value"] for v in d[0]["formatted"]["values"])
s0 = samples()
prog = [kv for kv in fdinfo() if kv.get("prog_type") == "7" and "run_cnt" in kv][0]
s1 = samples()
print(prog["run_time_ns"], prog["run_cnt"], (s0 + s1) / 2)
EOF
}

# bpf_cost COMM CMD...: one copy of CMD per CPU (none if CMD is "-": then
# the target is an idle `sleep`, and every run of the program is another
# process's sample, filtered out, or an idle CPU's), `sonde record -F 999
# -p` them; past a second of warm-up (the tables built: until then a stack
# stops at its first frame) the program's stats for 3 s. Prints
# "run_time_ns run_cnt samples median_frames median_py_frames" (frames of
# the recorded stacks of COMM, and of them Python frames).
bpf_cost() {
	local comm=$1 pids=() i rec a b
	shift
	if [ "$1" = - ]; then
		sleep 60 &
		pids+=($!)
		track $!
	else
		for i in $(seq "$NCPU"); do
			"$@" >/dev/null &
			pids+=($!)
			track $!
		done
	fi
	"$SONDE" record -F 999 -d 60 -p "$(IFS=,; echo "${pids[*]}")" -o "$TMP/cost.folded" \
		>/dev/null 2>"$TMP/cost.err" &
	rec=$!
	track $rec
	until_true 30 grep -q sampling "$TMP/cost.err" || { cat "$TMP/cost.err" >&2; exit 1; }
	sleep 1
	a=$(prog_stats "$rec")
	sysctl -q -w kernel.bpf_stats_enabled=1
	sleep 3
	b=$(prog_stats "$rec")
	sysctl -q -w kernel.bpf_stats_enabled="$STATS0"
	for i in "${pids[@]}"; do stop "$i" TERM; done
	stop "$rec" # it exits by itself once its pids have
	"$HPY" - "$comm" "$TMP/cost.folded" "$a" "$b" <<'EOF'
import statistics, sys
comm, path, a, b = sys.argv[1:5]
a, b = [list(map(float, x.split())) for x in (a, b)]
frames, py = [], []
for line in open(path):
    stack, _, n = line.rstrip("\n").rpartition(" ")
    f = stack.split(";")
    if f[0] == comm:
        frames += [len(f) - 1] * int(n)
        py += [sum(x.endswith(" (pydeep.py)") for x in f)] * int(n)
# what the 3 s between a and b ran: run time, runs, and samples of the load
print("%d %d %d %g %g" % (b[0] - a[0], b[1] - a[1], b[2] - a[2],
                         statistics.median(frames) if frames else 0,
                         statistics.median(py) if py else 0))
EOF
}

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
log "1/5: BPF cost per sample, REPS=$REPS"
DEEP_O2=$B/workloads/deep-O2
# One line per case and repetition: "KEY run_time_ns run_cnt samples frames py_frames".
for r in $(seq "$REPS"); do
	echo "idle $(bpf_cost sleep -)" >>"$TMP/cost.txt"
	for d in 10 30 60; do echo "c$d $(bpf_cost deep-O2 "$DEEP_O2" "$d" 20000)" >>"$TMP/cost.txt"; done
	for d in 3 20 40; do
		echo "py$d $(bpf_cost python3.11 "$PY" bench/pydeep.py "$d" 20000)" >>"$TMP/cost.txt"
	done
	log "rep $r of $REPS done"
done

# ---- 2 and 3. Tables and agent memory with PyTorch --------------------------

# agent_torch NAME [AGENT_ARGS...]: `sonde agent` (SONDE_LOG=debug, the
# arguments given) beside TORCH_SECS of PyTorch training, started once the
# agent is up and past its search for CUDA libraries. The training runs in
# a shell that waits for $TMP/go and then execs it, so that its pid can be
# given to the agent (-p LAUNCHER) before it starts. Leaves the agent's log
# in $TMP/NAME.err, its metrics in $TMP/NAME.metrics, the files the
# training maps in $TMP/NAME.maps, and "rss_before hwm_before rss_max
# rss_after hwm_after torch_rss rows_memlock" (kB, kB, ..., bytes) in
# $TMP/NAME.mem.
agent_torch() {
	local name=$1 agent torch url r maps rss_max=0 torch_rss=0 t_end before after memlock hb rb ha ra
	shift
	rm -f "$TMP/go"
	bash -c 'until [ -e "$0" ]; do sleep 0.05; done; exec "$@"' "$TMP/go" \
		"$HPY" tests/workloads/train_torch.py "$TORCH_SECS" &
	torch=$!
	track $torch
	SONDE_LOG=debug "$SONDE" agent --metrics 127.0.0.1:0 --ws 127.0.0.1:0 -d 600 "${@//LAUNCHER/$torch}" \
		>/dev/null 2>"$TMP/$name.err" &
	agent=$!
	track $agent
	until_true 60 grep -q "metrics on" "$TMP/$name.err" || { cat "$TMP/$name.err" >&2; exit 1; }
	url=$(grep -m1 -o 'http://127.0.0.1:[0-9]*/metrics' "$TMP/$name.err")
	sleep 5 # past the search for CUDA libraries at start
	before=$(awk '/VmRSS|VmHWM/{printf "%s ", $2}' "/proc/$agent/status") # HWM comes first
	touch "$TMP/go"
	t_end=$((SECONDS + TORCH_SECS + 120))
	while kill -0 "$torch" 2>/dev/null && [ "$SECONDS" -lt "$t_end" ]; do
		r=$(awk '/VmRSS/{print $2}' "/proc/$agent/status")
		[ "$r" -gt "$rss_max" ] && rss_max=$r
		# The files it maps, once torch is imported (it maps libtorch_cpu then).
		maps=$(cat "/proc/$torch/maps" 2>/dev/null || true)
		if grep -q libtorch_cpu <<<"$maps"; then
			awk '$6 ~ /^\// {print $6}' <<<"$maps" | sort -u >"$TMP/$name.maps"
		fi
		r=$(awk '/VmRSS/{print $2}' "/proc/$torch/status" 2>/dev/null || true)
		[ -n "$r" ] && [ "$r" -gt "$torch_rss" ] && torch_rss=$r
		sleep 0.5
	done
	stop "$torch" TERM
	sleep 2 # the last misses polled
	after=$(awk '/VmRSS|VmHWM/{printf "%s ", $2}' "/proc/$agent/status")
	curl -s --max-time 10 "$url" >"$TMP/$name.metrics"
	# The rows array's kernel memory: bytes_memlock of the agent's unw_rows map.
	memlock=$(for f in /proc/"$agent"/fdinfo/*; do
		awk '/^map_id/{print $2}' "$f" 2>/dev/null || true
	done | sort -u | while read -r m; do bpftool map show id "$m" --json; echo; done |
		"$HPY" -c 'import json, sys
got = [json.loads(l) for l in sys.stdin if l.strip()]
print(*[m["bytes_memlock"] for m in got if m.get("name") == "unw_rows"][:1])')
	stop "$agent"
	read -r hb rb <<<"$before"
	read -r ha ra <<<"$after"
	echo "$rb $hb $rss_max $ra $ha $torch_rss $memlock" >"$TMP/$name.mem"
}

log "2-3/5: the agent beside a PyTorch training process (${TORCH_SECS} s), whole machine and -p"
agent_torch whole
agent_torch pid -p LAUNCHER

# ---- 4. Whole-machine slowdown at 99 Hz with Python stacks ------------------

# load: one pydeep.py 20 PY_UNITS per CPU; prints its wall time and its
# CPU time (user + system of the copies), in s. The CPU time moves less
# with the machine's other work than the wall time: it counts what the
# load ran, not how long it waited for a CPU.
load() {
	local t0 t1 cpu TIMEFORMAT='%U %S'
	t0=$(now)
	cpu=$({ time (
		for _ in $(seq "$NCPU"); do timeout 600 "$PY" bench/pydeep.py 20 "$PY_UNITS" & done
		wait
	) >/dev/null; } 2>&1)
	t1=$(now)
	awk -v a="$t0" -v b="$t1" -v c="$cpu" 'BEGIN{split(c, u, " "); printf "%.3f %.3f\n", b-a, u[1]+u[2]}'
}

# warm: 2 s, then a short run of the load (0.1 s a copy). A profiler that
# was just started first builds the tables of the files the machine's
# stacks go through (sonde) and reads their symbols (both): a one-off that
# a running agent has behind it, not a cost of sampling.
warm() {
	local pids=() p
	sleep 2
	for _ in $(seq "$NCPU"); do
		timeout 60 "$PY" bench/pydeep.py 20 100 &
		pids+=($!)
	done
	for p in "${pids[@]}"; do wait "$p"; done
}

# profiled CMD...: starts a whole-machine profiler, warms up, runs the
# load, stops the profiler; prints "wall load_cpu profiler_cpu_percent_of_one_core
# peak_rss_kb" (the profiler's CPU during the load).
profiled() {
	local wall ns0 ns1 t0 t1 rss pid
	"$@" >/dev/null 2>"$TMP/prof.err" &
	pid=$!
	track $pid
	if [ "$1" = "$SONDE" ]; then
		until_true 60 grep -q sampling "$TMP/prof.err" || { cat "$TMP/prof.err" >&2; exit 1; }
	else
		sleep 1  # perf says nothing when it is attached
	fi
	warm
	ns0=$(cpu_ns "$pid")
	t0=$(now)
	wall=$(load)
	t1=$(now)
	ns1=$(cpu_ns "$pid")
	rss=$(awk '/VmHWM/{print $2}' "/proc/$pid/status")
	stop "$pid"
	awk -v w="$wall" -v a="$ns0" -v b="$ns1" -v t0="$t0" -v t1="$t1" -v rss="$rss" \
		'BEGIN{printf "%s %.3f %s\n", w, 100*(b-a)/1e9/(t1-t0), rss}'
}

log "4/5: slowdown, REPS=$REPS"
declare -A wall lcpu cpu rss
for r in $(seq "$REPS"); do
	warm
	read -r w l < <(load)
	wall[none]+="$w "; lcpu[none]+="$l "
	read -r w l c m < <(profiled "$SONDE" record -F 99 -d 300 -o "$TMP/s99.folded")
	wall[sonde]+="$w "; lcpu[sonde]+="$l "; cpu[sonde]+="$c "; rss[sonde]+="$m "
	read -r w l c m < <(profiled perf record -B -F 99 -a --call-graph dwarf -q \
		-o "$TMP/dwarf.data" -- sleep 300)
	wall[dwarf]+="$w "; lcpu[dwarf]+="$l "; cpu[dwarf]+="$c "; rss[dwarf]+="$m "
	dwarf_bytes=$(stat -c %s "$TMP/dwarf.data")
	read -r w l c m < <(profiled perf record -B -F 99 -a --call-graph fp -q \
		-o "$TMP/fp.data" -- sleep 300)
	wall[fp]+="$w "; lcpu[fp]+="$l "; cpu[fp]+="$c "; rss[fp]+="$m "
	fp_bytes=$(stat -c %s "$TMP/fp.data")
	rm -f "$TMP"/*.data "$TMP"/s99.folded
	log "rep $r of $REPS done"
done

# ---- 5. Share error on known shares -------------------------------------------

# perf_fix and perf_fold: bench/perf_fold.sh.
. bench/perf_fold.sh

# shares FOLDED COMM c|py: "samples alpha beta gamma max_error whole_pct
# chain_pct" -- each function's inclusive share (NA when it is on no stack),
# and the samples whose stack is whole from _start: for C, _start at the
# root then main, run and (in spin_unit) the share function above it, in
# order; for Python, _start at the root (whole_pct), and in chain_pct also
# the Python chain <module>, run, the share function, spin in order where
# spin is on the stack (NA where no Python frame is).
shares() {
	"$HPY" - "$@" <<'EOF'
import sys
path, comm, kind = sys.argv[1:4]
truth = {"alpha": 50.0, "beta": 30.0, "gamma": 20.0}
stacks = []
for line in open(path):
    stack, _, n = line.rstrip("\n").rpartition(" ")
    f = stack.split(";")
    if f[0] == comm and n.isdigit():
        stacks.append((f[1:], int(n)))
tot = sum(n for _, n in stacks)
def name(f):
    return f + " (shares.py)" if kind == "py" else f
def has(fr, f):
    return name(f) in fr
def in_order(fr, want):
    i = 0
    for x in fr:
        if i < len(want) and (x in want[i] if isinstance(want[i], set) else x == want[i]):
            i += 1
    return i == len(want)
share = {}
for f, t in truth.items():
    n = sum(c for fr, c in stacks if has(fr, f))
    share[f] = 100.0 * n / tot if n else None
err = max(abs(share[f] - t) for f, t in truth.items()) if None not in share.values() else None
fns = {name(f) for f in truth}
if kind == "c":
    def whole(fr):
        if fr[:1] != ["_start"] or not in_order(fr, ["main", "run"]):
            return False
        return "spin_unit" not in fr or in_order(fr, ["main", "run", fns, "spin_unit"])
    chain = None
else:
    whole = lambda fr: fr[:1] == ["_start"]
    pyseen = any(x.endswith(" (shares.py)") for fr, _ in stacks for x in fr)
    def chain_ok(fr):
        if not whole(fr):
            return False
        return name("spin") not in fr or in_order(
            fr, [name("<module>"), name("run"), fns, name("spin")])
    chain = 100.0 * sum(c for fr, c in stacks if chain_ok(fr)) / tot if pyseen else None
wh = 100.0 * sum(c for fr, c in stacks if whole(fr)) / tot
fmt = lambda v: "NA" if v is None else "%.1f" % v
print(tot, *[fmt(share[f]) for f in truth], fmt(err), fmt(wh), fmt(chain))
EOF
}

log "5/5: known shares"
declare -A sh
for wl in c py; do
	if [ $wl = c ]; then
		cmd=("$B/workloads/shares-O2" "$SHARE_SECS"); comm=shares-O2
	else
		cp tests/workloads/shares.py "$TMP/shares.py"
		cmd=("$PY" "$TMP/shares.py" "$SHARE_SECS"); comm=python3.11
	fi
	timeout 300 "$SONDE" record -q -F 499 -o "$TMP/sonde.folded" -- "${cmd[@]}" >/dev/null
	sh[$wl.sonde]=$(shares "$TMP/sonde.folded" "$comm" $wl)
	for cg in dwarf fp; do
		timeout 300 perf record -B -q -F 499 --call-graph $cg -o "$TMP/$cg.data" -- "${cmd[@]}" \
			>/dev/null 2>&1
		t0=$(now)
		perf_fold "$TMP/$cg.data" "$TMP/$cg.folded"
		t1=$(now)
		sh[$wl.$cg]="$(shares "$TMP/$cg.folded" "$comm" $wl) $(awk -v a="$t0" -v b="$t1" \
			'BEGIN{printf "%.1f", b-a}') $(stat -c %s "$TMP/$cg.data") $(cat "$TMP/fixed")"
	done
	rm -f "$TMP"/*.data
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

# ---- report -------------------------------------------------------------------

event=$("$SONDE" record -F 99 -d 1 -o "$TMP/e.folded" 2>&1 | grep -o 'cpu-clock\|cycles' | head -1 || true)
echo "## CPU profiler: table unwinding against perf, Python stacks, memory"
echo
echo "- machine: $NCPU CPUs, $(awk -F': ' '/model name/{print $2; exit}' /proc/cpuinfo), kernel $(uname -r), sampling event: $event, $(perf --version), $("$PY" --version) ($PY)"
echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet HEAD -- src bpf 2>/dev/null || echo ' + uncommitted changes in src/')"
echo "- command: \`REPS=$REPS make bench-unwind\` (bench/unwind.sh, PY_UNITS=$PY_UNITS, SHARE_SECS=$SHARE_SECS, TORCH_SECS=$TORCH_SECS)"
echo "- load average before: $load_before; after: $load_after (the CPUs are shared)"
echo
# The cost table: medians over the repetitions; "net" is the load's
# samples' share of the run time, the other runs counted at the idle
# target's median ns per run.
"$HPY" - "$TMP/cost.txt" <<'PY'
import collections, statistics as st, sys
runs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    k, *v = line.split()
    runs[k].append(list(map(float, v)))
med = lambda xs: st.median(xs) if xs else 0
idle = med([rt / rc for rt, rc, *_ in runs["idle"] if rc])
def net(r):
    rt, rc, s = r[:3]
    return (rt - (rc - s) * idle) / s if s else 0
names = [("c10", "deep-O2 10 (gcc -O2, no frame pointers)"), ("c30", "deep-O2 30"),
         ("c60", "deep-O2 60"), ("py3", "python3.11 bench/pydeep.py 3 (3 Python frames)"),
         ("py20", "python3.11 bench/pydeep.py 20"), ("py40", "python3.11 bench/pydeep.py 40")]
print("| BPF program cost per sample (one copy of the load per CPU, `sonde record -F 999 -p`, "
      "3 s; median of %d) | frames per sample, median (Python) | runs | of them the load's "
      "samples | ns per run (run_time_ns / run_cnt) | ns per sample of the load: all runs' time "
      "/ its samples | the same less the other runs at %.0f ns (range) |" % (len(runs["c10"]), idle))
print("| --- | --- | --- | --- | --- | --- | --- |")
m = {}
for k, name in names:
    rs = runs[k]
    nets = [net(r) for r in rs]
    m[k] = (med(nets), med([r[3] for r in rs]), med([r[4] for r in rs]))
    print("| %s | %g (%g) | %.0f | %.0f | %.0f | %.0f | %.0f (%.0f-%.0f) |" % (
        name, m[k][1], m[k][2], med([r[1] for r in rs]), med([r[2] for r in rs]),
        med([r[0] / r[1] for r in rs if r[1]]), med([r[0] / r[2] for r in rs if r[2]]),
        m[k][0], min(nets), max(nets)))
print("| an idle `sleep` (every run another process's sample, or an idle CPU's) | - | %.0f | 0 | "
      "%.0f | - | - |" % (med([r[1] for r in runs["idle"]]), idle))
def slope(a, b, i):
    d = m[b][i] - m[a][i]
    return (m[b][0] - m[a][0]) / d if d else 0
print()
print("Per frame, from the medians of the last column: %.0f ns a native frame (deep-O2 10 to 60), "
      "%.0f ns a Python frame (pydeep.py 3 to 40); a Python stack's fixed part (pydeep.py 3 "
      "against deep-O2 10, %g and %g frames): %+.0f ns." % (
          slope("c10", "c60", 1), slope("py3", "py40", 2), m["py3"][1], m["c10"][1],
          m["py3"][0] - m["c10"][0]))
print()
open(sys.argv[1] + ".py20", "w").write("%.0f\n" % m["py20"][0])
PY

# Tables (rows per file from the agent's debug lines) and the agent's memory.
"$HPY" - "$TMP" <<'PY'
import os, re, subprocess, sys
tmp = sys.argv[1]
def rows(name):
    out = {}
    for m in re.finditer(r"unwind table of (\S+): (\d+) rows", open(os.path.join(tmp, name + ".err")).read()):
        out[m.group(1)] = int(m.group(2))
    return out
def metric(name, key):
    for line in open(os.path.join(tmp, name + ".metrics")):
        if line.startswith(key + " ") or line.startswith(key + "{"):
            yield line.split()[0][len(key):], float(line.split()[1])
def one(name, key):
    return next((v for _, v in metric(name, key)), 0)
def ehframe(path):
    out = subprocess.run(["readelf", "-SW", path], capture_output=True, text=True).stdout
    for line in out.splitlines():
        f = line.replace("[ ", "[").split()
        if ".eh_frame" in f:
            return int(f[f.index(".eh_frame") + 4], 16)
    return 0
mem = {n: [int(x) for x in open(os.path.join(tmp, n + ".mem")).read().split()] for n in ("whole", "pid")}
r = rows("pid")
print("| unwind table of a PyTorch CPU training process (`sonde agent -p`) | .eh_frame bytes | rows | bytes | bytes per row |")
print("| --- | --- | --- | --- | --- |")
for pat in ("/usr/bin/python3.11", "/libc.so.6", "/libtorch_cpu.so"):
    hit = [p for p in r if pat in p]
    if not hit:
        print("| %s | | not built | | |" % pat)
        continue
    p = hit[-1]
    print("| %s | %d | %d | %d | 8 |" % (p, ehframe(p), r[p], 8 * r[p]))
maps = [l.strip() for l in open(os.path.join(tmp, "pid.maps"))] if os.path.exists(os.path.join(tmp, "pid.maps")) else []
mine = [p for p in maps if p in r]
n = sum(r[p] for p in mine)
print("| all %d files of the training process with a table (of %d files it maps), from the log | %d | %d | %d | 8 |" % (
    len(mine), len(maps), sum(ehframe(p) for p in mine), n, 8 * n))
for name, what in (("pid", "`-p` the training process"), ("whole", "whole machine, every process sampled")):
    b = one(name, "sonde_agent_unwind_table_bytes")
    print("| the agent's maps, %s (`sonde_agent_unwind_tables` %d) | | %d | %d | 8 |" % (
        what, one(name, "sonde_agent_unwind_tables"), b / 8, b))
print("| the rows array as the kernel accounts it (`unw_rows` bytes_memlock: the budget, `--unwind-memory` 64M) | | | %d | |" % mem["pid"][6])
print()
print("| `sonde agent` (defaults) beside it | whole machine: VmRSS (MB) | VmHWM (MB) | `-p` the training process: VmRSS (MB) | VmHWM (MB) |")
print("| --- | --- | --- | --- | --- |")
w, p = mem["whole"], mem["pid"]
mb = lambda kb: "%.1f" % (kb / 1024)
print("| before the training (its search for CUDA libraries over) | %s | %s | %s | %s |" % (mb(w[0]), mb(w[1]), mb(p[0]), mb(p[1])))
print("| while it trains (highest of the polls every 0.5 s) | %s | | %s | |" % (mb(w[2]), mb(p[2])))
print("| after it | %s | %s | %s | %s |" % (mb(w[3]), mb(w[4]), mb(p[3]), mb(p[4])))
print()
def frames(name):
    f = dict(metric(name, "sonde_agent_unwind_frames_total"))
    fb = dict(metric(name, "sonde_agent_unwind_fallback_files_total"))
    return ("frames stepped by table %d, by frame pointer %d, Python %d; files walked by frame "
            "pointers %s; tables evicted %d" % (
                f.get('{method="table"}', 0), f.get('{method="frame_pointer"}', 0),
                f.get('{method="python"}', 0),
                ", ".join("%s %d" % (k[k.index('"') + 1:-2], v) for k, v in fb.items()) or "none",
                one(name, "sonde_agent_unwind_tables_evicted_total")))
print("(The training process: %s MB resident at most. Agent metrics after it, `-p`: %s. Whole machine: %s; "
      "its largest tables: %s.)" % (mb(p[5]), frames("pid"), frames("whole"),
      ", ".join("%s %d" % (os.path.basename(k), v) for k, v in
                sorted(rows("whole").items(), key=lambda kv: -kv[1])[:6])))
print()
PY

base=$(med "${wall[none]}")
lbase=$(med "${lcpu[none]}")
echo "| whole machine at 99 Hz, load: $NCPU x \`python3.11 bench/pydeep.py 20 $PY_UNITS\` (median of $REPS) | load wall time (s) | slowdown | runs (s) | load CPU time (s) | slowdown by CPU time | runs (s) | profiler CPU (% of one core) | profiler peak RSS (MB) |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"
echo "| no profiler | $base | - | ${wall[none]% } | $lbase | - | ${lcpu[none]% } | - | - |"
for k in sonde dwarf fp; do
	w=$(med "${wall[$k]}"); l=$(med "${lcpu[$k]}"); c=$(med "${cpu[$k]}"); m=$(med "${rss[$k]}")
	case $k in
	sonde) name="sonde record -F 99" ;;
	dwarf) name="perf record -F 99 -a --call-graph dwarf" ;;
	fp) name="perf record -F 99 -a --call-graph fp" ;;
	esac
	awk -v n="$name" -v w="$w" -v b="$base" -v l="$l" -v lb="$lbase" -v c="$c" -v m="$m" \
		-v runs="${wall[$k]% }" -v lruns="${lcpu[$k]% }" \
		'BEGIN{printf "| %s | %.3f | %+.2f %% | %s | %.3f | %+.2f %% | %s | %.3f | %.1f |\n",
		       n, w, 100*(w-b)/b, runs, l, 100*(l-lb)/lb, lruns, c, m/1024}'
done
echo
awk -v ns="$(cat "$TMP/cost.txt.py20")" -v c="$(med "${cpu[sonde]}")" -v n="$NCPU" 'BEGIN{
	b = ns * 99 / 1e7; u = c / n
	printf "sonde'"'"'s cost to the load from its parts: the BPF program, %.0f ns a sample at 20 Python frames (the net median above) x 99 samples/s = %.3f %% of each CPU; the profiler, %.3f %% of one core over %d CPUs = %.3f %%; in all %.3f %%.\n", ns, b, c, n, u, b + u}'
echo
echo "(perf.data of the last run: dwarf $(awk -v b="$dwarf_bytes" 'BEGIN{printf "%.1f", b/1e6}') MB, fp $(awk -v b="$fp_bytes" 'BEGIN{printf "%.2f", b/1e6}') MB.)"
echo
echo "| known shares, ${SHARE_SECS} s at 499 Hz | tool | samples | alpha (50 %) | beta (30 %) | gamma (20 %) | max error (points) | whole from _start (%) | Python chain in order (%) | perf script (s) |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
for wl in c py; do
	[ $wl = c ] && wname="shares-O2 (gcc -O2)" || wname="shares.py (python3.11)"
	for t in sonde dwarf fp; do
		read -r n a b g e w ch ps _ fx <<<"${sh[$wl.$t]}"
		[ -n "${fx:-}" ] && perf_fixed_total=$((${perf_fixed_total:-0} + fx))
		case $t in
		sonde) tname="sonde record" ;;
		dwarf) tname="perf --call-graph dwarf" ;;
		fp) tname="perf --call-graph fp" ;;
		esac
		[ $wl = c ] && ch="-"
		echo "| $wname | $tname | $n | $a | $b | $g | $e | $w | $ch | ${ps:--} |"
	done
done
echo
echo "(MMAP2 records of the perf.data files above with the kernel's stray build-id flag, cleared before \`perf script\`: ${perf_fixed_total:-0}.)"
echo
echo "(NA: the function is on no stack. Whole from _start: for shares-O2, _start at the root, then main and run, and in spin_unit one of alpha, beta, gamma above them; for shares.py, _start at the root, and in the next column also <module>, run, the share function and spin in order where spin is on the stack.)"
