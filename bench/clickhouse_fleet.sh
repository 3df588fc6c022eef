#!/usr/bin/env bash
# clickhouse_fleet.sh: the ClickHouse store's reads over a fleet -- NODES
# nodes (default 100) of STORE_HOURS (default 24) each. One node is put
# through the store as bench/clickhouse.sh puts it (store_bench ... ingest);
# the other NODES - 1 are copies of it made inside ClickHouse, each with its
# own series (the node label node-2 ... node-N and series ids of their own)
# and the same windows, which the rollup's materialized view sums as it
# sums any insert. Putting 100 nodes through the store would take hours of
# this machine's 2 CPUs; the reads don't tell a copy from a put. Then
# store_bench ... reads NODES times the reads, each whole one checked
# against NODES times what was put. Prints a Markdown report.
# `make bench-clickhouse-fleet` runs it.
set -euo pipefail
cd "$(dirname "$0")/.."
B=${B:-build}
HOURS=${STORE_HOURS:-24}
POOL=${STORE_POOL:-32}
NODES=${NODES:-100}
BIN=$B/bench/store_bench
[ -x "$BIN" ] || { echo "clickhouse_fleet.sh: $BIN is missing -- run make B=$B bench-clickhouse-fleet" >&2; exit 1; }
. bench/clickhouse_server.sh
ch_start
URL="clickhouse://127.0.0.1:$CH_HTTP/fleet"

echo "## ClickHouse store over $NODES nodes"
echo
echo "- machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'),"\
     "$(awk '/MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo) RAM, kernel $(uname -r)"
echo "- ClickHouse $(ch_sql 'SELECT version()') (Debian's), zstd,"\
     "on $(df -T "$CH_DIR" | awk 'NR == 2 {print $2 " on " $1}'), one server on the same 2 CPUs"
echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
echo "- command: \`make B=$B bench-clickhouse-fleet\` (NODES=$NODES STORE_HOURS=$HOURS STORE_POOL=$POOL)"
echo "- load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
"$BIN" "$URL" "$HOURS" "$POOL" ingest >"$CH_DIR/ingest.md"
windows=$(ch_sql "SELECT count() FROM fleet.windows")

# The copies, in one statement a table: node k + 1 gets the series ids
# xor k times a 64-bit odd constant. Blocks are kept small, as the ARRAY
# JOIN makes NODES - 1 rows of each.
t0=$(date +%s.%N)
ch_sql "INSERT INTO fleet.series SELECT day, bitXor(id, toUInt64(k) * 11400714819323198485), metric,
	names, arrayMap((n, v) -> if(n = 'node', concat('node-', toString(k + 1)), v), names, vals)
	FROM fleet.series ARRAY JOIN arrayMap(x -> x + 1, range($((NODES - 1)))) AS k WHERE metric = ''"
ch_sql "INSERT INTO fleet.windows SELECT bitXor(series, toUInt64(k) * 11400714819323198485),
	start_ms, end_ms, unit, period, total, '', stacks, vals
	FROM fleet.windows ARRAY JOIN arrayMap(x -> x + 1, range($((NODES - 1)))) AS k" "max_block_size=2048"
t1=$(date +%s.%N)
ch_sql "OPTIMIZE TABLE fleet.hour_stacks FINAL" >/dev/null || true
t2=$(date +%s.%N)
bytes=$(ch_sql "SELECT sum(bytes_on_disk) FROM system.parts WHERE database = 'fleet' AND active")
echo "### The fleet"
echo
echo "| | value |"
echo "| --- | --- |"
echo "| nodes x hours | $NODES x $HOURS |"
echo "| windows | $(ch_sql "SELECT count() FROM fleet.windows") ($windows a node) |"
echo "| rows of the hourly rollup | $(ch_sql "SELECT count() FROM fleet.hour_stacks") |"
echo "| bytes on disk | $bytes ($(awk -v b="$bytes" 'BEGIN {printf "%.0f MiB", b / 1048576}')) |"
echo "| copying in ClickHouse / merging the rollup | $(awk -v a="$t0" -v b="$t1" -v c="$t2" 'BEGIN {printf "%.0f s / %.0f s", b - a, c - b}') |"
echo
"$BIN" "$URL" "$HOURS" "$POOL" reads "$NODES"
echo
echo "Load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
