# clickhouse_server.sh: sourced by the ClickHouse benchmarks (clickhouse.sh,
# clickhouse_fleet.sh) -- starts Debian's clickhouse-server on 127.0.0.1
# with a config of its own (zstd compression, data in a new directory under
# STORE_DIR, default /var/tmp) and stops it and removes its data on exit.
# After ch_start: CH_HTTP (its HTTP port), CH_PID, CH_DIR; ch_sql runs SQL;
# ch_ticks is its CPU time in clock ticks.
CH=$(command -v clickhouse-server || echo /usr/sbin/clickhouse-server)

ch_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

ch_start() {
	[ -x "$CH" ] || { echo "clickhouse-server is not installed (scripts/setup.sh)" >&2; exit 1; }
	CH_DIR=$(mktemp -d "${STORE_DIR:-/var/tmp}/sonde-ch-bench.XXXXXX")
	CH_HTTP=$(ch_port)
	local tcp
	tcp=$(ch_port)
	cat >"$CH_DIR/config.xml" <<XML
<?xml version="1.0"?>
<yandex>
  <logger><level>warning</level><log>$CH_DIR/server.log</log><errorlog>$CH_DIR/error.log</errorlog></logger>
  <http_port>$CH_HTTP</http_port><tcp_port>$tcp</tcp_port><listen_host>127.0.0.1</listen_host>
  <path>$CH_DIR/data/</path><tmp_path>$CH_DIR/tmp/</tmp_path><users_config>$CH_DIR/users.xml</users_config>
  <default_profile>default</default_profile><default_database>default</default_database>
  <mark_cache_size>5368709120</mark_cache_size>
  <compression><case><method>zstd</method></case></compression>
</yandex>
XML
	cat >"$CH_DIR/users.xml" <<XML
<?xml version="1.0"?>
<yandex><profiles><default></default></profiles>
  <users><default><password></password><networks><ip>127.0.0.1</ip></networks>
    <profile>default</profile><quota>default</quota></default></users>
  <quotas><default></default></quotas></yandex>
XML
	"$CH" --config-file="$CH_DIR/config.xml" >"$CH_DIR/stdout.log" 2>&1 &
	CH_PID=$!
	trap 'kill -9 $CH_PID 2>/dev/null; wait $CH_PID 2>/dev/null || true; rm -rf "$CH_DIR"' EXIT
	for _ in $(seq 600); do
		curl -sf "http://127.0.0.1:$CH_HTTP/ping" >/dev/null && return 0
		kill -0 "$CH_PID" 2>/dev/null || break
		sleep 0.1
	done
	echo "ClickHouse did not start: $(tail -3 "$CH_DIR/error.log" 2>/dev/null)" >&2
	exit 1
}

# ch_sql SQL [URL parameters]: runs SQL, its answer on stdout; fails with
# ClickHouse's message on an error.
ch_sql() {
	local out code
	out=$(curl -sS --data-binary "$1" -w '\n%{http_code}' "http://127.0.0.1:$CH_HTTP/?${2:-}")
	code=${out##*$'\n'}
	out=${out%$'\n'*}
	if [ "$code" != 200 ]; then
		echo "ClickHouse answered $code: $out" >&2
		return 1
	fi
	printf '%s\n' "$out"
}

ch_ticks() { awk '{print $14 + $15}' "/proc/$CH_PID/stat"; }
