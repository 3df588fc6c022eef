#!/usr/bin/env bash
# clickhouse.sh: benchmarks the ClickHouse store (src/store/clickhouse*.c)
# with $B/bench/store_bench -- the same generated node and the same reads as
# bench/store.sh measures the SQLite store with -- against Debian's
# clickhouse-server started here on 127.0.0.1 with a config of its own
# (zstd compression) and data on the disk of STORE_DIR (default /var/tmp).
# Prints a Markdown report with the machine, the date and the command; the
# ClickHouse server's own CPU time is reported beside the sonde side's.
# `make bench-clickhouse` runs it.
set -euo pipefail
cd "$(dirname "$0")/.."
B=${B:-build}
HOURS=${STORE_HOURS:-24}
POOL=${STORE_POOL:-32}
BIN=$B/bench/store_bench
[ -x "$BIN" ] || { echo "clickhouse.sh: $BIN is missing -- run make B=$B bench-clickhouse" >&2; exit 1; }
. bench/clickhouse_server.sh
ch_start
HTTP=$CH_HTTP
ticks() { ch_ticks; }
HZ=$(getconf CLK_TCK)

echo "## ClickHouse store benchmark"
echo
echo "- machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'),"\
     "$(awk '/MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo) RAM, kernel $(uname -r)"
echo "- ClickHouse $(curl -s "http://127.0.0.1:$HTTP/?query=SELECT%20version()") (Debian's), zstd,"\
     "on $(df -T "$CH_DIR" | awk 'NR == 2 {print $2 " on " $1}'), one server on the same 2 CPUs"
echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
echo "- command: \`make B=$B bench-clickhouse\` (STORE_HOURS=$HOURS STORE_POOL=$POOL)"
echo "- load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
t0=$(ticks)
"$BIN" "clickhouse://127.0.0.1:$HTTP/bench" "$HOURS" "$POOL"
t1=$(ticks)
echo
echo "ClickHouse's own CPU time over the whole run (ingest and every read above): $(awk -v a="$t0" -v b="$t1" -v hz="$HZ" 'BEGIN {printf "%.1f s", (b - a) / hz}')."
echo "Load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
# The puts' instructions, which unlike their CPU time don't vary with the
# machine's load: the first hour (8 node windows in the pool) under callgrind.
if command -v valgrind >/dev/null; then
	out=$(valgrind --tool=callgrind --callgrind-out-file="$CH_DIR/callgrind.out" \
		--toggle-collect=ch_store__put_windows "$BIN" "clickhouse://127.0.0.1:$HTTP/bench_cg" 1 8 ingest 2>/dev/null)
	ir=$(callgrind_annotate "$CH_DIR/callgrind.out" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}')
	rows=$(printf '%s\n' "$out" | awk -F'|' '/stored samples \(/ {gsub(" ", "", $3); print $3}')
	echo "Instructions of the puts (callgrind, the first hour with 8 node windows in the pool):"\
	     "$ir for $rows stored samples, $(awk -v a="$ir" -v b="$rows" 'BEGIN {printf "%.0f", a / b}') per stored sample."
fi
