#!/usr/bin/env bash
# run.sh: Sonde's checks on a real GPU (issues 23 and 24): one command, from the repository root
# of a copy carried to a machine with an NVIDIA GPU, its driver and PyTorch, as root:
#
#   bash tests/gpu/device/run.sh
#
# sonde is built on a build machine (make), packed with tests/gpu/device/pack.sh (the
# shared libraries it needs that such a machine may lack, into build/device-libs), and
# build/sonde, build/libsonde_cupti.so and build/device-libs travel with the tree. No network. About 3-6 minutes.
# Writes device-report.md and the raw files to $OUT (or /tmp/sonde-device) and prints
# the report. Exit 0: every check passed; 1: one failed; 77: this machine can't run
# them (no GPU, no driver, no PyTorch with CUDA, no BPF), saying why.
set -u
cd "$(dirname "$0")/../../.."
B=${B:-build}
export B OUTDIR=${OUT:-/tmp/sonde-device}
skip() {
	echo "SKIP: $*"
	exit 77
}
command -v nvidia-smi >/dev/null || skip "no nvidia-smi: no NVIDIA driver on this machine"
nvidia-smi -L 2>/dev/null | grep -q '^GPU' || skip "nvidia-smi lists no GPU"
PYTHON=${PYTHON:-python3}
export PYTHON
"$PYTHON" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null ||
	skip "$PYTHON has no PyTorch that sees a GPU"
[ "$(id -u)" = 0 ] || skip "BPF needs root"
[ -x "$B/sonde" ] || {
	echo "$B/sonde is missing: build it (make) and carry $B/sonde and $B/device-libs" >&2
	exit 1
}
[ -d "$B/device-libs" ] && export LD_LIBRARY_PATH="$PWD/$B/device-libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
if ! "$B/sonde" --version >/dev/null 2>&1; then
	ldd "$B/sonde" | grep 'not found' >&2
	echo "$B/sonde does not run here: pack its libraries (tests/gpu/device/pack.sh)" >&2
	exit 1
fi
mkdir -p "$OUTDIR"
nvidia-smi >"$OUTDIR/nvidia-smi.txt" 2>&1
uname -a >"$OUTDIR/uname.txt"
exec "$PYTHON" tests/gpu/device/check.py
