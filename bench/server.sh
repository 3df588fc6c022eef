#!/usr/bin/env bash
# server.sh: benchmarks the server's own work (src/server/) with
# $B/bench/server_bench -- flame graph building and writing up to a million
# nodes, splitting agent windows into series, and ingest and queries end to
# end over HTTP with the SQLite store in a fresh directory on the disk of
# SERVER_BENCH_DIR (default /var/tmp, not a tmpfs: fsync must cost what it
# costs) -- and prints a Markdown report with the machine, the date and the
# command. `make bench-server` runs it.
set -euo pipefail
cd "$(dirname "$0")/.."
B=${B:-build}
BASE=${SERVER_BENCH_DIR:-/var/tmp}
BIN=$B/bench/server_bench
[ -x "$BIN" ] || { echo "server.sh: $BIN is missing -- run make B=$B bench-server" >&2; exit 1; }
DIR=$(mktemp -d "$BASE/sonde-server-bench.XXXXXX")
trap 'rm -rf "$DIR"' EXIT

echo "## Server benchmark"
echo
echo "- machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'),"\
     "$(awk '/MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo) RAM, kernel $(uname -r)"
echo "- disk: $(df -T "$BASE" | awk 'NR == 2 {print $2 " on " $1}')"
echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
echo "- command: \`make B=$B bench-server\`"
echo "- load average before: $(cut -d' ' -f1-3 /proc/loadavg) (the CPUs are shared)"
echo
# A real window too, when this can record one (root, BPF): the whole machine
# for 3 s while a Python program (deep, varied native stacks) runs.
REAL=()
if [ "$(id -u)" = 0 ] && [ -x "$B/sonde" ] && command -v python3 >/dev/null; then
	timeout 10 python3 -c 'import json
while True: json.loads(json.dumps([{"a": i, "b": [i, str(i)]} for i in range(1000)]))' &
	PY=$!
	if "$B/sonde" record -F 99 -d 3 -o "$DIR/real.pb.gz" >/dev/null 2>&1; then
		REAL=("$DIR/real.pb.gz")
	fi
	kill "$PY" 2>/dev/null
	wait
fi
mkdir -p "$DIR/store"
"$BIN" "$DIR/store" "${REAL[@]}"
echo "Load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
