#!/usr/bin/env bash
# setup.sh: install every Debian package Sonde needs to build, test and
# benchmark itself. Idempotent: packages already present are skipped, and
# `apt-get update` runs at most once per invocation (and only when something
# is missing). Run as root (CI does); `make setup` calls it.
set -euo pipefail

PKGS=(
	# build
	make gcc clang llvm libbpf-dev bpftool libelf-dev zlib1g-dev
	protobuf-c-compiler libprotobuf-c-dev pkg-config
	uthash-dev libjansson-dev libmicrohttpd-dev libwslay-dev libyaml-dev
	libcurl4-openssl-dev libssl-dev libsqlite3-dev
	# tests
	libcmocka-dev golang-go linux-perf binutils file python3 clang-format util-linux
	prometheus prometheus-alertmanager node-ws sqlite3 chromium bpftrace
)

missing=()
for p in "${PKGS[@]}"; do
	if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed'; then
		missing+=("$p")
	fi
done

if [ ${#missing[@]} -eq 0 ]; then
	echo "setup: all ${#PKGS[@]} packages present"
	exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
	echo "setup: missing packages: ${missing[*]} -- run as root to install them" >&2
	exit 1
fi

echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends "${missing[@]}"
