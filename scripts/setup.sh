#!/usr/bin/env bash
# setup.sh: install every Debian package Sonde needs to build, test and
# benchmark itself, and the npm packages of the web UI's browser tests.
# Idempotent and silent when everything is there: packages already present
# are skipped, `apt-get update` runs at most once per invocation (and only
# when something is missing), and it prints only what it installs. Run as
# root (CI does) when something is missing; `make setup` and `make test`
# call it, `make run` calls it with --build.
#
#   setup.sh           everything: the build, the tests, the benchmarks, npm
#   setup.sh --build   only what building and running Sonde needs (`make run`):
#                      no test tools, no npm
set -euo pipefail

build_only=false
case "${1:-}" in
--build) build_only=true ;;
"") ;;
*)
	echo "usage: setup.sh [--build]" >&2
	exit 2
	;;
esac

PKGS=(
	# build (python3 embeds the web UI into the binary)
	make gcc g++ clang llvm libbpf-dev bpftool libelf-dev libdw-dev zlib1g-dev
	protobuf-c-compiler libprotobuf-c-dev pkg-config python3
	uthash-dev libjansson-dev libmicrohttpd-dev libwslay-dev libyaml-dev
	libcurl4-openssl-dev libssl-dev libsqlite3-dev libgnutls28-dev
)
if ! $build_only; then
	PKGS+=(
		# tests (clickhouse-server: the ClickHouse store's tests start their own on loopback;
		# libc6-dbg: libc's own function names in the stacks the tests check;
		# libclang-rt-14-dev: libFuzzer and the sanitizers of the fuzz targets)
		libcmocka-dev golang-go linux-perf binutils file clang-format util-linux
		prometheus prometheus-alertmanager node-ws sqlite3 chromium bpftrace curl
		python3-torch clickhouse-server libc6-dbg libclang-rt-14-dev
	)
fi

missing=()
for p in "${PKGS[@]}"; do
	if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed'; then
		missing+=("$p")
	fi
done

export DEBIAN_FRONTEND=noninteractive
if [ ${#missing[@]} -eq 0 ]; then
	: # all there: nothing to say
elif [ "$(id -u)" -ne 0 ]; then
	echo "setup: missing packages: ${missing[*]} -- run as root to install them" >&2
	exit 1
else
	echo "setup: installing ${missing[*]}"
	apt-get update -q
	apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

$build_only && exit 0

# npm: the web UI's browser tests (tests/ui) run on Node with playwright-core
# from npm, pinned by tests/ui/package-lock.json and installed with `npm ci`
# (never a browser download: they drive Debian's chromium). Debian's nodejs
# and npm are installed only when there is no node (or npm) on the PATH; the
# packages are installed again only when the lockfile changed.
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
	if [ "$(id -u)" -ne 0 ]; then
		echo "setup: node or npm is missing -- run as root to install Debian's nodejs and npm" >&2
		exit 1
	fi
	echo "setup: installing nodejs npm"
	apt-get update -q
	apt-get install -y -q --no-install-recommends nodejs npm
fi
# Debian's npm (9.2) can't read tests/tsp's lockfile (its override of a
# git dependency crashes its semver check): with an npm older than 10, the
# packages are installed by npm 10 itself, fetched from the registry.
npm=(npm)
if [ "$(npm --version | cut -d. -f1)" -lt 10 ]; then
	npm=(npx --yes npm@10)
fi
# npm_ci DIR PACKAGE: `npm ci` in tests/DIR (whose lockfile pins it) unless
# node_modules/PACKAGE is there from the same lockfile. tests/ui: the web UI's
# browser tests (playwright-core, axe-core); tests/tsp: the Trace Server
# Protocol's real npm client, tsp-typescript-client (test_tsp.py);
# tests/pyroscope: Grafana's Pyroscope SDK for Node.js, @pyroscope/nodejs
# (test_pyroscope_nodejs.py).
npm_ci() {
	local dir stamp want
	dir="$(cd "$(dirname "$0")/.." && pwd)/tests/$1"
	stamp="$dir/node_modules/.sonde-lock.sha256"
	want=$(sha256sum "$dir/package-lock.json" | cut -d' ' -f1)
	if [ ! -d "$dir/node_modules/$2" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
		echo "setup: npm ci in tests/$1"
		(cd "$dir" && PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 "${npm[@]}" ci --no-audit --no-fund)
		echo "$want" >"$stamp"
	fi
}
npm_ci ui playwright-core
npm_ci tsp tsp-typescript-client
npm_ci pyroscope @pyroscope/nodejs
