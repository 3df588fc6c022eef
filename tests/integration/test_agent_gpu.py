"""sonde agent against the GPU stand-ins (tests/gpu/): a training workload
started after the agent is traced from its first call, and every counter and memory figure of /metrics equals what
the workload says it did -- launches, allocations and frees per device,
current and peak memory, copies by direction, waits by API, collectives and
their bytes -- and /json's gpu_utilization agrees. Its failed calls count
nowhere. When it exits, its series stay for --exited-grace (its memory 0,
sonde_process_exit_time_seconds and /json saying when), then go. A library loaded late with dlopen()
(as frameworks load CUDA) from a file the agent had never seen is traced
100 ms after the load (the loader hook attaches within a few ms; the
periodic scan alone, every 2 s, would miss the calls 19 times in 20). No
drops. Device capacity comes from NVML (the stand-in libnvidia-ml.so.1:
8 devices of 80 GiB) and gives the memory ratio the default alert reads;
without NVML, from --gpu-memory."""
import gzip
import json
import os
import shutil
import time

from agent_test import *

need_bpf()
need_standins()
KIND = {"HostToHost": "h2h", "HostToDevice": "h2d", "DeviceToHost": "d2h",
        "DeviceToDevice": "d2d", "Default": "default"}
OPS = {"ncclAllReduce": "allreduce", "ncclAllGather": "allgather", "ncclBroadcast": "broadcast",
       "ncclReduceScatter": "reducescatter", "ncclReduce": "reduce", "ncclSend": "send",
       "ncclRecv": "recv"}

# The node's CUDA libraries are where the loader looks (LD_LIBRARY_PATH):
# attached at start, before the job runs.
GRACE = 8  # --exited-grace: an exited process's series stay this long
a = Agent(["--no-cpu", "--window", "2", "--exited-grace", str(GRACE)], env=standin_env())
try:
    # --- a training job: two GPUs, NCCL, graphs, waits, copies ---------------
    # Started as torchrun starts a rank: its job on every GPU series.
    w = Workload("gpu_train", ["--gpus", "2", "--steps", "10"],
                 env_extra={"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
                            "MASTER_PORT": "29501"})
    t, pid = w.truth, w.pid
    total = t["launches"]["total"]
    m = wait_for(lambda: (lambda m: m if value(m, "sonde_cuda_launches_total", pid=pid) == total
                          else None)(a.metrics()), 10,
                 "sonde_cuda_launches_total{pid=%d} to reach %d" % (pid, total))
    check(True, "sonde_cuda_launches_total{pid=%d} = %d, the workload's successful launches"
          % (pid, total))
    check(value(m, "zernel_cuda_launch_latency_seconds_count", pid=pid) == total,
          "zernel_cuda_launch_latency_seconds_count = %d" % total)
    check(value(m, "sonde_cuda_launch_duration_seconds_count", pid=pid) == total,
          "sonde_cuda_launch_duration_seconds_count = %d" % total)
    p50 = value(m, "zernel_cuda_launch_latency_seconds", pid=pid, quantile="0.5")
    p99 = value(m, "zernel_cuda_launch_latency_seconds", pid=pid, quantile="0.99")
    check(p50 is not None and 0 < p50 <= p99 < 0.1,
          "launch latency p50 %.2g s <= p99 %.2g s" % (p50 or 0, p99 or 0))

    for d in t["memory"]["devices"]:
        dev = d["device"]
        got = dict(current_bytes=value(m, "zernel_gpu_memory_used_bytes", pid=pid, gpu_id=dev),
                   peak_bytes=value(m, "zernel_gpu_memory_peak_bytes", pid=pid, gpu_id=dev),
                   allocs=value(m, "sonde_cuda_memory_allocations_total", pid=pid, gpu_id=dev),
                   frees=value(m, "sonde_cuda_memory_frees_total", pid=pid, gpu_id=dev))
        want = {k: d[k] for k in got}
        check(got == want, "device %d memory %s%s" % (dev, want,
                                                     "" if got == want else " -- agent %s" % got))
        check(value(m, "sonde_gpu_memory_used_bytes", pid=pid, gpu_id=dev) == d["current_bytes"],
              "sonde_gpu_memory_used_bytes{gpu_id=%d} = zernel's" % dev)

    for kind, nbytes in t["memcpy"]["bytes"].items():
        got = value(m, "sonde_cuda_memcpy_bytes_total", pid=pid, kind=KIND[kind])
        check(got == nbytes, "%s copies: %s bytes (agent %s)" % (kind, nbytes, got))
    calls = sum(v["calls"] for v in t["memcpy"]["by_api"].values())
    got = sum(v for l, v in series(m, "sonde_cuda_memcpy_calls_total") if l["pid"] == str(pid))
    check(got == calls, "copy calls %d (agent %d)" % (calls, got))

    for api, wt in t["waits"]["by_api"].items():
        n = value(m, "sonde_cuda_sync_wait_seconds_count", pid=pid, api=api)
        s = value(m, "sonde_cuda_sync_wait_seconds_sum", pid=pid, api=api)
        check(n == wt["count"], "%s: %d waits (agent %s)" % (api, wt["count"], n))
        # The workload times the call from outside; the probes from its
        # entry to its return, inside that.
        truth_s = wt["total_ns"] / 1e9
        check(s is not None and truth_s - wt["count"] * 200e-6 <= s <= truth_s * 1.001 + 1e-6,
              "%s: %.6f s waited (workload's own clock: %.6f s)" % (api, s or -1, truth_s))

    for api, c in t["nccl"]["by_op"].items():
        op = OPS[api]
        check(value(m, "sonde_nccl_calls_total", op=op) == c["calls"] and
              value(m, "sonde_nccl_bytes_total", op=op) == c["bytes"],
              "%s: %d calls, %d bytes" % (op, c["calls"], c["bytes"]))
        check(value(m, "zernel_nccl_collective_duration_seconds_count", op=op) == c["calls"],
              "zernel_nccl_collective_duration_seconds_count{op=%s} = %d" % (op, c["calls"]))

    cap = 80 << 30
    check(value(m, "sonde_gpu_memory_capacity_bytes", gpu_id=0, source="nvml") == cap and
          value(m, "sonde_gpu_memory_capacity_bytes", gpu_id=7, source="nvml") == cap,
          "capacity of GPUs 0..7 from NVML: 80 GiB")
    d0 = t["memory"]["devices"][0]
    ratio = value(m, "sonde_gpu_memory_used_ratio", pid=pid, gpu_id=0)
    check(ratio is not None and abs(ratio - d0["current_bytes"] / cap) < 1e-9,
          "sonde_gpu_memory_used_ratio{gpu_id=0} = %s / 80 GiB" % d0["current_bytes"])

    snap = json.loads(a.get("/json"))
    util = {u["key"]: u for u in snap["gpu_utilization"]}
    for d in t["memory"]["devices"]:
        u = util.get("%d:%d" % (pid, d["device"]))
        check(u and u["current_bytes"] == d["current_bytes"] and u["peak_bytes"] == d["peak_bytes"],
              "/json gpu_utilization %d:%d = %s" % (pid, d["device"], u))
    check(snap["simulated"] is False, "/json says the data is not simulated")
    check(value(m, "sonde_agent_gpu_drops_total") == 0, "no GPU event dropped")
    check(value(m, "sonde_agent_simulated") == 0, "sonde_agent_simulated 0")
    info = [l for l, v in series(m, "sonde_process_info") if l.get("pid") == str(pid)]
    check(info == [{"pid": str(pid), "service_name": "gpu_train", "job": "127.0.0.1:29501",
                    "rank": "1", "world_size": "2"}],
          "sonde_process_info names its service and its job: %s" % info)

    # --- the process exits: its series stay for the grace, then go -----------
    check(w.release() == 0, "the workload exits 0")
    exited = wait_for(lambda: value(a.metrics(), "sonde_process_exit_time_seconds", pid=pid),
                      10, "sonde_process_exit_time_seconds{pid=%d} after its exit" % pid)
    # 5 s after the exit (a clock to reach, not a sleep for something to happen).
    while time.time() < exited + 5:
        time.sleep(0.2)
    m = a.metrics()
    check(value(m, "sonde_cuda_launches_total", pid=pid) == total and
          value(m, "zernel_gpu_memory_used_bytes", pid=pid, gpu_id=0) == 0,
          "5 s after its exit pid %d's counters are still in /metrics (%s launches), its "
          "memory 0" % (pid, value(m, "sonde_cuda_launches_total", pid=pid)))
    procs = {p["pid"]: p for p in json.loads(a.get("/json"))["processes"]}
    check(pid in procs and procs[pid].get("exited_ms", 0) // 1000 == int(exited),
          "/json marks it exited at the same time: %s" % procs.get(pid, {}).get("exited_ms"))
    wait_for(lambda: value(a.metrics(), "sonde_cuda_launches_total", pid=pid) is None,
             GRACE + 10, "pid %d's series to go after the grace" % pid)
    check(time.time() >= exited + GRACE - 1,
          "pid %d's series are gone after the grace of %d s, not before" % (pid, GRACE))

    # --- a runtime loaded late, from a file never seen before ----------------
    d = tmpdir()
    lib = os.path.join(d, "libcudart.so.13")
    shutil.copy(os.path.join(GPU_SI, "libcudart.so.13"), lib)
    # The runtime finds its driver beside it.
    os.symlink(os.path.join(GPU_SI, "libcuda.so.1"), os.path.join(d, "libcuda.so.1"))
    w = Workload("gpu_dlopen", [lib, "--delay-ms", "300", "--after-ms", "100",
                                "--allocs", "16"])
    t, pid = w.truth, w.pid
    dv = t["memory"]["devices"][0]
    want_dl = (dv["allocs"], dv["frees"], dv["current_bytes"], dv["peak_bytes"])

    def dl_seen():
        m = a.metrics()
        return tuple(value(m, n, pid=pid, gpu_id=0) for n in (
            "sonde_cuda_memory_allocations_total", "sonde_cuda_memory_frees_total",
            "zernel_gpu_memory_used_bytes", "zernel_gpu_memory_peak_bytes"))
    # The agent applies the events in order, but a read of /metrics may fall
    # between the last allocation and the frees after it: wait for them all.
    got = poll_until(dl_seen, lambda g: g == want_dl, 5)
    check(got == want_dl, "dlopen()ed runtime: %d allocations, %d frees, %d bytes held, %d at "
          "peak%s" % (want_dl + ("" if got == want_dl else " -- agent %s" % (got,),)))
    w.release()
    check(any(lib in l for l in a.log), "the agent attached to the new file %s" % lib)
except SystemExit:
    a.dump_log()
    raise
finally:
    rc = a.stop()
check(rc == 0, "the agent exits 0 on SIGINT")

# No NVML (its driver not loaded): the capacity given on the command line.
env = dict(standin_env(), SONDE_STANDIN_NVML_FAIL="1")
a = Agent(["--no-cpu", "--gpu-memory", "0=40G,1=24GiB"], env=env)
try:
    m = a.metrics()
    check(value(m, "sonde_gpu_memory_capacity_bytes", gpu_id=0, source="config") == 40 << 30 and
          value(m, "sonde_gpu_memory_capacity_bytes", gpu_id=1, source="config") == 24 << 30,
          "--gpu-memory 0=40G,1=24GiB: capacities from the configuration")
    check(not series(m, "sonde_gpu_memory_capacity_bytes")[2:],
          "and no other device's")
    check(any("NVML can't start" in l for l in a.log), "NVML's failure is logged")
finally:
    a.stop()

# A bad rule file is refused at start, with its line and the reason.
d = tmpdir()
rules = os.path.join(d, "rules.yml")
with open(rules, "w") as f:
    f.write("rules:\n  - alert: X\n    expr: sonde_gpu_memory_used_ratio >\n")
p = run([SONDE, "agent", "--no-cpu", "--rules", rules, "--metrics", "127.0.0.1:0",
         "--ws", "127.0.0.1:0"], timeout=30)
check(p.returncode == 1 and rules + ":3" in p.stderr,
      "a bad rule file: exit 1 and %s:3: ... (%s)" % (rules, p.stderr.strip()[:200]))
