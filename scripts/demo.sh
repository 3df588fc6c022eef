#!/usr/bin/env bash
# demo.sh: the README's first command (`make run`). Installs what is missing,
# builds Sonde, starts two demo workloads -- `shares`, whose functions burn
# 60 %, 30 % and 10 % of its CPU, and `gpu_train`, a data-parallel training
# job on two GPUs run on the test stand-ins of CUDA and NCCL (tests/gpu/:
# this machine needs no GPU) -- and then `sonde run`: the agent, the server
# and the web UI in one process, on http://127.0.0.1:7470/. Ctrl-C stops it
# all. Needs root, as every BPF tool does.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
make -j"$(nproc)" build/sonde workloads >/dev/null
make -s -f tests/gpu/standin/standin.mk B=build gpu-standin >/dev/null

data=${DEMO_DATA:-sonde-data}
pids=()
cleanup() {
	for p in "${pids[@]}"; do
		# A loop, stopped first so that it starts no new workload.
		kill -STOP "$p" 2>/dev/null || true
		pkill -P "$p" 2>/dev/null || true
		kill "$p" 2>/dev/null || true
		kill -CONT "$p" 2>/dev/null || true
	done
}
trap cleanup EXIT

echo "== sonde run --data $data   (Ctrl-C stops)"
# The stand-in libraries are where the loader looks, as a CUDA install would be.
LD_LIBRARY_PATH=$PWD/build/gpu/standin build/sonde run --data "$data" "$@" &
sonde=$!
pids+=("$sonde")
# The workloads start once the probes are attached, so their first calls
# are seen (the agent's metrics say so within a second of it).
for _ in $(seq 150); do
	curl -s http://127.0.0.1:9091/metrics 2>/dev/null |
		grep -q '^sonde_agent_probes_attached [1-9]' && break
	kill -0 "$sonde" 2>/dev/null || exit 1
	sleep 0.2
done
echo "== demo workloads: shares (CPU 60/30/10 %) and gpu_train (CUDA/NCCL stand-ins, 2 GPUs)"
(while true; do build/workloads/shares 30; done) >/dev/null 2>&1 &
pids+=($!)
(while true; do
	SONDE_STANDIN_KERNEL_US=200 build/gpu/workloads/gpu_train --gpus 2 --steps 3000 \
		--cpu-us 3000
	sleep 1
done) >/dev/null 2>&1 &
pids+=($!)
wait "$sonde"
