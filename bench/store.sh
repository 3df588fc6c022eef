#!/usr/bin/env bash
# store.sh: benchmarks the embedded SQLite store (src/store/) with
# $B/bench/store_bench on STORE_HOURS (24) hours of one node's generated
# data in a fresh directory on the disk of STORE_DIR (default /var/tmp, not
# a tmpfs: fsync must cost what it costs), and prints a Markdown report
# with the machine, the date and the command. `make bench-store` runs it.
set -euo pipefail
cd "$(dirname "$0")/.."
B=${B:-build}
HOURS=${STORE_HOURS:-24}
POOL=${STORE_POOL:-32}
BASE=${STORE_DIR:-/var/tmp}
BIN=$B/bench/store_bench
[ -x "$BIN" ] || { echo "store.sh: $BIN is missing -- run make B=$B bench-store" >&2; exit 1; }
DIR=$(mktemp -d "$BASE/sonde-store-bench.XXXXXX")
trap 'rm -rf "$DIR"' EXIT

echo "## Store benchmark"
echo
echo "- machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'),"\
     "$(awk '/MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo) RAM, kernel $(uname -r)"
echo "- disk: $(df -T "$BASE" | awk 'NR == 2 {print $2 " on " $1}'), SQLite $(sqlite3 --version 2>/dev/null | cut -d' ' -f1)"
echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
echo "- command: \`make B=$B bench-store\` (STORE_HOURS=$HOURS STORE_POOL=$POOL)"
echo "- load average before: $(cut -d' ' -f1-3 /proc/loadavg) (the CPUs are shared: CPU times"\
     "grow with others' load)"
echo
"$BIN" "$DIR" "$HOURS" "$POOL"
echo
echo "Load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
