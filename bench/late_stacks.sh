#!/usr/bin/env bash
# late_stacks.sh: issue 22's benchmark -- the stacks of code whose unwind
# table is not built yet, finished in userspace (src/unwind/late.c), against
# the same Sonde with that off (SONDE_LATE_STACKS=0: such frames walked by
# frame pointers, as before) and perf --call-graph dwarf (which copies 8 KB
# of stack with every sample and unwinds them all afterwards), in one run:
#   1. a 25 ms gcc -O2 process (build/workloads/quick) started 40 times in a
#      row, each tool recording the loop at 999 Hz: the share of the samples
#      in quick_burn whole from the program's start through main (_start;
#      perf's stacks of Debian's libc end at __libc_start_call_main, taken as
#      whole for it); the recorder's CPU time
#      (and perf script's, which perf needs to unwind); Sonde's BPF program's
#      mean run time (kernel.bpf_stats_enabled; as record reports it, the
#      runs on the other processes' samples it filters out included), and
#      how many samples were finished late;
#   2. the first second after `import torch` (Debian's python3-torch: matrix
#      products and tanh under a Python function) at 499 Hz, Sonde on and
#      off: the share of those samples whole from _start through the Python
#      frames.
# REPS runs of each (default 3), interleaved; medians. Prints a Markdown
# report on stdout, progress on stderr; `make bench-late` runs it. Needs
# root, perf and bpftool; part 2 needs python3-torch.
set -euo pipefail
cd "$(dirname "$0")/.."
B=${B:-build}
REPS=${REPS:-3}
SONDE=$B/sonde
QUICK=$B/workloads/quick
HPY=/usr/bin/python3
TMP=$(mktemp -d /tmp/sonde-bench-late.XXXXXX)
. bench/perf_fold.sh
STATS0=$(sysctl -n kernel.bpf_stats_enabled)
cleanup() {
	sysctl -q -w kernel.bpf_stats_enabled="$STATS0" || true
	[ -n "${KEEP_TMP:-}" ] && echo "late_stacks.sh: kept $TMP" >&2 || rm -rf "$TMP"
}
trap cleanup EXIT
log() { echo "late_stacks.sh: $*" >&2; }
sysctl -q -w kernel.bpf_stats_enabled=1
LOOP="i=0; while [ \$i -lt 40 ]; do $QUICK 0.025; i=\$((i+1)); done"

# cpu_of CMD...: runs CMD, prints "user+sys seconds of it and its children"
# on fd 3, its output as is.
cpu_of() {
	"$HPY" -c '
import os, resource, subprocess, sys
p = subprocess.run(sys.argv[1:])
r = resource.getrusage(resource.RUSAGE_CHILDREN)
os.write(3, ("%.3f\n" % (r.ru_utime + r.ru_stime)).encode())
sys.exit(p.returncode)' "$@"
}

# sonde_quick ON|OFF: "whole_pct quick_burn_samples bpf_ns_per_run late peak_mb" -- the
# sampling program's mean run time, the other processes' samples it filtered
# out included (record's debug line)
sonde_quick() {
	local env=() out=$TMP/sonde-$1.folded
	[ "$1" = off ] && env=(SONDE_LATE_STACKS=0)
	env "${env[@]}" SONDE_LOG=debug "$SONDE" record -F 999 -o "$out" -- sh -c "$LOOP" \
		>/dev/null 2>"$TMP/err"
	read -r pct burn < <(quick_whole "$out" _start)
	"$HPY" - "$TMP/err" "$pct" "$burn" <<'EOF'
import re, sys
err = open(sys.argv[1]).read()
runs = re.search(r"the sampling program ran (\d+) times, (\d+) ns each", err)
print("%s %s %s" % (sys.argv[2], sys.argv[3], runs.group(2) if runs else "NA"), end=" ")
EOF
	late_of "$TMP/err"
}

# late_of ERR: "late peak_mb" from record's debug lines in the file ERR: the
# stacks finished late, and the most that waited at once (0 0 when none).
late_of() {
	"$HPY" - "$1" <<'EOF'
import re, sys
err = open(sys.argv[1]).read()
late = re.search(r"(\d+) stacks finished once", err)
peak = re.search(r"at most ([0-9.]+) MB waited at once", err)
print("%s %s" % (late.group(1) if late else 0, peak.group(1) if peak else 0))
EOF
}

# quick_whole FOLDED ROOTS: "whole_pct quick_burn_samples" -- the samples
# in quick_burn whose stack starts at one of ROOTS (comma-separated) with
# main calling quick_burn.
quick_whole() {
	"$HPY" - "$1" "$2" <<'EOF'
import sys
roots = sys.argv[2].split(",")
burn = whole = 0
for line in open(sys.argv[1]):
    stack, n = line.rsplit(" ", 1)
    f = [x for x in stack.split(";")[1:] if not x.endswith("_[k]")]
    if stack.split(";")[0] != "quick" or "quick_burn" not in f:
        continue
    burn += int(n)
    i = f.index("quick_burn")
    whole += int(n) if f[0] in roots and i and f[i - 1] == "main" else 0
print("%.1f %d" % (100.0 * whole / max(burn, 1), burn))
EOF
}

# perf_quick: "whole_pct quick_burn_samples perf_script_s"; perf ends the
# stacks of Debian's libc at __libc_start_call_main, taken as whole for it.
perf_quick() {
	local t0 t1
	perf record -B -q -F 999 --call-graph dwarf -o "$TMP/p.data" -- sh -c "$LOOP" >/dev/null 2>&1
	t0=$(date +%s.%N)
	perf_fold "$TMP/p.data" "$TMP/p.folded"
	t1=$(date +%s.%N)
	echo "$(quick_whole "$TMP/p.folded" _start,__libc_start_call_main)" \
		"$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.2f", b-a}')"
}

declare -A res
for r in $(seq "$REPS"); do
	for tool in on off; do
		res[q.$tool]+="$(sonde_quick $tool 3>/dev/null) $( { cpu_of "$SONDE" record -q -F 999 \
			-o "$TMP/c.folded" -- sh -c "$LOOP" >/dev/null 2>&1; } 3>&1 ) ;"
	done
	res[q.perf]+="$(perf_quick) $( { cpu_of perf record -B -q -F 999 --call-graph dwarf \
		-o "$TMP/c.data" -- sh -c "$LOOP" >/dev/null 2>&1; } 3>&1 ) ;"
	log "short processes: rep $r of $REPS"
done

torch=false
if "$HPY" -c "import torch" 2>/dev/null; then
	torch=true
	cat >"$TMP/first_second.py" <<'EOF'
import time
import torch


def first_second():
    a = torch.randn(256, 256)
    end = time.time() + 1.0
    while time.time() < end:
        a = (a @ a).tanh()


first_second()
EOF
	for r in $(seq "$REPS"); do
		for tool in on off; do
			env=()
			[ $tool = off ] && env=(SONDE_LATE_STACKS=0)
			env "${env[@]}" SONDE_LOG=debug "$SONDE" record -F 499 -o "$TMP/t.folded" -- \
				"$HPY" "$TMP/first_second.py" >/dev/null 2>"$TMP/err"
			res[t.$tool]+="$("$HPY" - "$TMP/t.folded" <<'EOF'
import re, sys
n = whole = 0
for line in open(sys.argv[1]):
    stack, c = line.rsplit(" ", 1)
    f = [x for x in stack.split(";")[1:] if not x.endswith("_[k]")]
    py = any(re.search(r" \((.*\.py|<frozen .*)\)$", x) for x in f)
    if any(x.startswith("first_second (") for x in f):
        n += int(c)
        whole += int(c) if f[0] == "_start" else 0
    elif f and f[0] not in ("_start", "[truncated]") and not py and any(
            "libtorch_cpu" in x or "sgemm" in x or "Sleef" in x for x in f):
        n += int(c)
print("%.1f %d" % (100.0 * whole / max(n, 1), n))
EOF
) $(late_of "$TMP/err") ;"
		done
		log "import torch: rep $r of $REPS"
	done
fi

# median COL "a b c ; a b c ; ...": the median of column COL (1-based).
median() {
	echo "$2" | tr ';' '\n' | awk -v c="$1" 'NF {print $c}' | sort -g |
		awk '{v[NR]=$1} END {if (NR) print (NR%2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2); else print "NA"}'
}

echo "## CPU profiler: the first stacks of new code"
echo
echo "- machine: $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'))," \
	"kernel $(uname -r); $(date -u '+%Y-%m-%d %H:%M UTC'); load before/after" \
	"$(cut -d' ' -f1-3 /proc/loadavg)"
echo "- command: \`make bench-late\` (bench/late_stacks.sh, REPS=$REPS; medians)"
echo
echo "| 40 runs of a 25 ms gcc -O2 process, 999 Hz | quick_burn samples | whole from the start (%) | recorder CPU (s) | perf script (s) | BPF ns a run | finished late | waited at once (MB) |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- |"
for t in on off; do
	name="sonde record"
	[ $t = off ] && name="sonde record, SONDE_LATE_STACKS=0"
	echo "| $name | $(median 2 "${res[q.$t]}") | $(median 1 "${res[q.$t]}") | $(median 6 "${res[q.$t]}") | - | $(median 3 "${res[q.$t]}") | $(median 4 "${res[q.$t]}") | $(median 5 "${res[q.$t]}") |"
done
echo "| perf record --call-graph dwarf | $(median 2 "${res[q.perf]}") | $(median 1 "${res[q.perf]}") | $(median 4 "${res[q.perf]}") | $(median 3 "${res[q.perf]}") | - | - | - |"
if $torch; then
	echo
	echo "| the first second after import torch, 499 Hz | its samples | whole from _start (%) | finished late (whole job) | waited at once (MB) |"
	echo "| --- | --- | --- | --- | --- |"
	echo "| sonde record | $(median 2 "${res[t.on]}") | $(median 1 "${res[t.on]}") | $(median 3 "${res[t.on]}") | $(median 4 "${res[t.on]}") |"
	echo "| sonde record, SONDE_LATE_STACKS=0 | $(median 2 "${res[t.off]}") | $(median 1 "${res[t.off]}") | - | - |"
fi
