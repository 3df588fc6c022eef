#!/usr/bin/env bash
# demo.sh: the README's first command (`make run`). Installs what is
# missing, builds Sonde, records a demo workload whose functions burn known
# CPU shares (hot_a 60 %, hot_b 30 %, hot_c 10 %), prints its hottest stacks
# and writes the profile in all three formats, then opens a live `sonde top`
# on the same workload (q quits). Needs root, as every BPF tool does.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
make -j"$(nproc)" build/sonde workloads >/dev/null

out=${DEMO_OUT:-sonde-demo}
mkdir -p "$out"
echo "== sonde record -F 99 -- build/workloads/shares 3"
build/sonde record -F 99 -o "$out/shares.folded" -- build/workloads/shares 3
build/sonde record -F 99 -q -o "$out/shares.pb.gz" -- build/workloads/shares 1
build/sonde record -F 99 -q -o "$out/shares.speedscope.json" -- build/workloads/shares 1
echo
echo "== hottest stacks (folded: comm;root;...;leaf samples)"
sort -t' ' -k2 -nr "$out/shares.folded" | head -n 5 | cut -c1-100
echo
echo "profiles: $out/shares.folded (flamegraph.pl), $out/shares.pb.gz (go tool pprof),"
echo "          $out/shares.speedscope.json (speedscope)"
echo
echo "== sonde top -p <shares> (q quits)"
build/workloads/shares 30 &
wl=$!
trap 'kill $wl 2>/dev/null || true' EXIT
if [ -t 0 ] && [ -t 1 ]; then
	build/sonde top -p "$wl"
else
	build/sonde top -b -n 3 -p "$wl"
fi
