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
BASE=${STORE_DIR:-/var/tmp}
BIN=$B/bench/store_bench
CH=$(command -v clickhouse-server || echo /usr/sbin/clickhouse-server)
[ -x "$BIN" ] || { echo "clickhouse.sh: $BIN is missing -- run make B=$B bench-clickhouse" >&2; exit 1; }
[ -x "$CH" ] || { echo "clickhouse.sh: clickhouse-server is not installed (scripts/setup.sh)" >&2; exit 1; }
DIR=$(mktemp -d "$BASE/sonde-ch-bench.XXXXXX")
port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
HTTP=$(port)
TCP=$(port)
cat >"$DIR/config.xml" <<XML
<?xml version="1.0"?>
<yandex>
  <logger><level>warning</level><log>$DIR/server.log</log><errorlog>$DIR/error.log</errorlog></logger>
  <http_port>$HTTP</http_port><tcp_port>$TCP</tcp_port><listen_host>127.0.0.1</listen_host>
  <path>$DIR/data/</path><tmp_path>$DIR/tmp/</tmp_path><users_config>$DIR/users.xml</users_config>
  <default_profile>default</default_profile><default_database>default</default_database>
  <mark_cache_size>5368709120</mark_cache_size>
  <compression><case><method>zstd</method></case></compression>
</yandex>
XML
cat >"$DIR/users.xml" <<XML
<?xml version="1.0"?>
<yandex><profiles><default></default></profiles>
  <users><default><password></password><networks><ip>127.0.0.1</ip></networks>
    <profile>default</profile><quota>default</quota></default></users>
  <quotas><default></default></quotas></yandex>
XML
"$CH" --config-file="$DIR/config.xml" >"$DIR/stdout.log" 2>&1 &
CHPID=$!
trap 'kill -9 $CHPID 2>/dev/null; wait $CHPID 2>/dev/null || true; rm -rf "$DIR"' EXIT
for _ in $(seq 600); do
	curl -sf "http://127.0.0.1:$HTTP/ping" >/dev/null && break
	sleep 0.1
done
curl -sf "http://127.0.0.1:$HTTP/ping" >/dev/null || { echo "clickhouse.sh: ClickHouse did not start" >&2; exit 1; }
ticks() { awk '{print $14 + $15}' "/proc/$CHPID/stat"; }
HZ=$(getconf CLK_TCK)

echo "## ClickHouse store benchmark"
echo
echo "- machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'),"\
     "$(awk '/MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo) RAM, kernel $(uname -r)"
echo "- ClickHouse $(curl -s "http://127.0.0.1:$HTTP/?query=SELECT%20version()") (Debian's), zstd,"\
     "on $(df -T "$BASE" | awk 'NR == 2 {print $2 " on " $1}'), one server on the same 2 CPUs"
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
