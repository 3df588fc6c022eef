#!/usr/bin/env bash
# demo.sh: the README's first command (`make run`). Installs what the build
# is missing, builds Sonde, starts `sonde run` -- the agent, the server and
# the web UI in one process, on http://127.0.0.1:7470/ -- and, once it is
# up, two demo workloads: `shares`, whose functions burn 60 %, 30 % and 10 %
# of its CPU, and `gpu_train`, a data-parallel training job on two GPUs run
# on the test stand-ins of CUDA and NCCL (tests/gpu/: this machine needs no
# GPU). Ctrl-C stops it all. Needs root, as every BPF tool does.
#
# It prints what the README says it does: the lines of `sonde run` and one
# line naming the workloads. The set-up and the build say nothing unless
# they fail (then their output is shown); `sonde run` logs its warnings and
# errors only (SONDE_LOG=warn: not a line per library it attaches to).
# Arguments are passed to `sonde run`; DEMO_DATA is its --data (sonde-data).
set -euo pipefail
cd "$(dirname "$0")/.."

# Runs a step with its output kept aside; shows it if the step fails.
quiet() {
	local log
	log=$(mktemp)
	if ! "$@" >"$log" 2>&1; then
		cat "$log" >&2
		rm -f "$log"
		echo "make run: '$*' failed (its output is above)" >&2
		exit 1
	fi
	rm -f "$log"
}
# Only what the build and the demo need: the tests' tools and their npm
# packages are `make test`'s (scripts/setup.sh without --build).
quiet bash scripts/setup.sh --build
quiet make -j"$(nproc)" build/sonde workloads
quiet make -f tests/gpu/standin/standin.mk B=build gpu-standin

data=${DEMO_DATA:-sonde-data}
sonde=
loops=()
fifo=$(mktemp -u)
cleanup() {
	for p in "${loops[@]}"; do
		# A loop, stopped first so that it starts no new workload.
		kill -STOP "$p" 2>/dev/null || true
		pkill -P "$p" 2>/dev/null || true
		kill "$p" 2>/dev/null || true
		kill -CONT "$p" 2>/dev/null || true
	done
	# Ctrl-C reached sonde run too (same process group); else it is told
	# here. Either way it keeps what it collected before it exits.
	if [ -n "$sonde" ]; then
		kill "$sonde" 2>/dev/null || true
		wait "$sonde" 2>/dev/null || true
	fi
	rm -f "$fifo"
}
trap cleanup EXIT
# Stopped as asked: exit 0, so that make adds no "Error 130" line.
trap 'exit 0' INT TERM

# sonde run's own environment has no stand-in on its library path: its
# loader, NVML lookup included, sees this machine as it is (no GPU here, so
# no devices until a process uses one). gpu_train finds the stand-ins by its
# RUNPATH ($ORIGIN/../standin), and the agent attaches to them as to any
# CUDA library a process maps: a process without a terminal (setsid below)
# that maps one no probe is on waits in the loader for the attach, so that
# its first launch is seen.
mkfifo "$fifo"
SONDE_LOG=${SONDE_LOG:-warn} build/sonde run --data "$data" "$@" 2>"$fifo" &
sonde=$!
exec 3<"$fifo"
# Its lines as they come; the workloads start once it says where the UI is
# (its probes are set up by then).
up=false
while IFS= read -r line <&3; do
	printf '%s\n' "$line" >&2
	if [[ $line == "sonde run: open "* ]]; then
		up=true
		break
	fi
done
if ! $up; then
	rc=0
	wait "$sonde" || rc=$?
	sonde=
	exit $((rc ? rc : 1))
fi
cat <&3 >&2 &
exec 3<&-
rm -f "$fifo"

(while true; do setsid -w build/workloads/shares 30; done) </dev/null >/dev/null 2>&1 &
loops+=($!)
(while true; do
	SONDE_STANDIN_KERNEL_US=200 setsid -w build/gpu/workloads/gpu_train --gpus 2 \
		--steps 3000 --cpu-us 3000
	sleep 1
done) </dev/null >/dev/null 2>&1 &
loops+=($!)
rc=0
wait "$sonde" || rc=$?
sonde=
exit "$rc"
