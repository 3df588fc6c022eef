#!/usr/bin/env bash
# ui_flame.sh: how smoothly the web UI's flame graph draws a generated
# 100 000-node profile in Debian's Chromium (headless, software rendering):
# the draw time per frame (mean, p50, p95, max) and the frames per second
# while the pointer moves and the view zooms every 20 frames. Runs the
# browser tests' smoothness case alone (tests/ui/run.mjs through
# tests/integration/test_ui.py, against a real `sonde server`) and prints
# its numbers with the machine and the date. Usage: B=build bash bench/ui_flame.sh
set -euo pipefail
cd "$(dirname "$0")/.."
B=${B:-build}
export B SONDE_UI_ONLY='100 000-node'
python3 tests/integration/test_ui.py >"$B/ui_flame_bench.log" 2>&1 || {
	rc=$?
	tail -n 20 "$B/ui_flame_bench.log"
	exit "$rc"
}
echo "machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)," \
	"$(chromium --version 2>/dev/null | head -1)"
echo "date: $(date -u +%Y-%m-%dT%H:%MZ)"
echo "command: B=$B bash bench/ui_flame.sh"
cat "$B/test-artifacts/ui/smoothness.json"
echo
