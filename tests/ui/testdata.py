#!/usr/bin/env python3
"""testdata.py: the known data the UI tests load into a server through its
ingest API (docs/api.md), and the truth they check the UI against.

- service "shares" (comm shares, pid 4242), type cpu, 10 s windows over the
  last 10 minutes: in the older half hot_a/hot_b/hot_c take 60/30/10 % of the
  samples, in the newer half 40/50/10 %, so over the whole range hot_a is the
  hottest function (50 %), hot_b 40 %, hot_c 10 %; the diff of the halves has
  hot_a faster (green) and hot_b slower (red);
- service "trainer" (comm python3, pid 777), cpu, a different tree, so that
  picking a service changes what is shown;
- GPU: gpu_launch and gpu_wait profiles of "trainer", and points
  gpu_memory_used_bytes (two processes), nccl_calls and nccl_seconds;
- service "trainer-lines", type cpu, a pprof whose functions say where
  they are in the source (LINES: name -> file and first line).

Usage as a script: testdata.py BASE_URL [TRUTH.json]."""
import json
import os
import sys
import time
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                "integration"))
import pprof_wire  # noqa: E402

WINDOW_S = 10
WINDOWS = 60
PREFIX = "__libc_start_call_main;main;run;"
OLD = {"hot_a": 60, "hot_b": 30, "hot_c": 10}
NEW = {"hot_a": 40, "hot_b": 50, "hot_c": 10}
TRAINER = {"_start;main;train;matmul": 140, "_start;main;train;load_batch": 60}
ALERTS = [
    {"status": "firing", "alert": "GpuMemoryHigh",
     "labels": {"alertname": "GpuMemoryHigh", "node": "gpu-7", "gpu_id": "0", "pid": "4242",
                "severity": "warning"},
     "annotations": {"summary": "pid 4242 holds 93% of GPU 0"},
     "startsAt": "2024-05-01T12:00:02.100Z", "endsAt": None, "value": 0.93},
    {"status": "resolved", "alert": "NcclCollectiveStuck",
     "labels": {"alertname": "NcclCollectiveStuck", "node": "gpu-7", "op": "allreduce",
                "rank": "3", "severity": "critical"},
     "annotations": {"summary": "NCCL allreduce stuck for 1m 2s on rank 3"},
     "startsAt": "2024-05-01T11:00:00.000Z", "endsAt": "2024-05-01T11:01:02.000Z",
     "value": "+Inf"},
]
MEM = {("4242", "python3", "0"): 6 * 2**30, ("4243", "python3", "1"): 3 * 2**30}
# Per second, as the agent's points: pid 777 as its gpu_launch/gpu_wait profiles
# (500 launches and 2 s of waits per window), pid 778 only in the points.
LAUNCHES_PER_S = {"777": 500 // WINDOW_S, "778": 20}
WAIT_PER_S = {"777": 2.0 / WINDOW_S, "778": 0.125}


# A pprof whose functions name their source file and first line.
LINES = {"main": ("/src/main.c", 12), "work": ("/src/work.c", 40)}


def lines_pprof(count):
    """main -> work, count samples, each function with its file and first line."""
    return pprof_wire.encode([("samples", "count")], [(["main", "work"], [count])], LINES)


def post(base, path, params, body, ctype):
    url = base.rstrip("/") + path + "?" + urllib.parse.urlencode(params)
    req = urllib.request.Request(url, data=body, method="POST", headers={"Content-Type": ctype})
    with urllib.request.urlopen(req, timeout=30) as r:
        r.read()
        if r.status != 200:
            raise RuntimeError("%s: HTTP %d" % (path, r.status))


def folded(stacks):
    return "".join("%s %d\n" % (s, c) for s, c in stacks.items()).encode()


def ingest(base, now_s=None):
    """Loads everything; returns the truth (counts and the time ranges)."""
    now_s = int(now_s or time.time()) // WINDOW_S * WINDOW_S
    start = now_s - WINDOWS * WINDOW_S
    half = start + WINDOWS // 2 * WINDOW_S
    for w in range(WINDOWS):
        f = start + w * WINDOW_S
        shares = OLD if f < half else NEW
        post(base, "/ingest", {"name": "shares.cpu{comm=shares,pid=4242}", "from": f,
                               "until": f + WINDOW_S, "format": "folded", "units": "samples",
                               "sampleRate": 99, "spyName": "sonde"},
             folded({PREFIX + k: v for k, v in shares.items()}), "text/plain")
        post(base, "/ingest", {"name": "trainer.cpu{comm=python3,pid=777}", "from": f,
                               "until": f + WINDOW_S, "format": "folded"},
             folded(TRAINER), "text/plain")
        post(base, "/ingest", {"name": "trainer-lines.cpu{comm=python3,pid=779}", "from": f,
                               "until": f + WINDOW_S, "format": "pprof"},
             lines_pprof(50), "application/octet-stream")
        post(base, "/ingest", {"name": "trainer.gpu_launch{comm=python3,pid=777}", "from": f,
                               "until": f + WINDOW_S, "units": "launches"},
             folded({"_start;main;train;cudaLaunchKernel": 500}), "text/plain")
        post(base, "/ingest", {"name": "trainer.gpu_wait{comm=python3,pid=777}", "from": f,
                               "until": f + WINDOW_S, "units": "nanoseconds"},
             folded({"_start;main;train;cudaDeviceSynchronize": 2 * 10**9}), "text/plain")
    points = []
    for sec in range(start, now_s):
        ts = sec * 1000
        k = (sec - start) / (now_s - start)
        for (pid, comm, gpu), peak in MEM.items():
            v = peak * (0.5 + 0.5 * k) if pid == "4242" else peak
            points.append({"name": "gpu_memory_used_bytes", "ts_ms": ts, "value": v,
                           "labels": {"node": "gpu-7", "pid": pid, "comm": comm, "gpu_id": gpu}})
        for pid, per_s in LAUNCHES_PER_S.items():
            lab = {"node": "gpu-7", "pid": pid, "comm": "python3"}
            points.append({"name": "cuda_launches", "ts_ms": ts, "value": per_s, "labels": lab})
            points.append({"name": "cuda_sync_wait_seconds", "ts_ms": ts,
                           "value": WAIT_PER_S[pid], "labels": lab})
        points.append({"name": "nccl_calls", "ts_ms": ts, "value": 10,
                       "labels": {"node": "gpu-7", "op": "allreduce"}})
        points.append({"name": "nccl_seconds", "ts_ms": ts, "value": 0.05,
                       "labels": {"node": "gpu-7", "op": "allreduce"}})
    post(base, "/api/v1/ingest/points", {}, json.dumps({"points": points}).encode(),
         "application/json")
    for a in ALERTS:
        post(base, "/api/v1/alerts", {}, json.dumps(a).encode(), "application/json")
    n = WINDOWS // 2
    tot = {k: (OLD[k] + NEW[k]) * n for k in OLD}
    return {
        "start_ms": start * 1000, "half_ms": half * 1000, "end_ms": now_s * 1000,
        "service": "shares", "other_service": "trainer",
        "other_total": WINDOWS * sum(TRAINER.values()),
        "total": sum(tot.values()), "functions": tot, "hottest": "hot_a",
        "chain": ["total", "__libc_start_call_main", "main", "run"],
        "old": OLD, "new": NEW, "nccl_mean_s": 0.005,
        "memory_peak_bytes": MEM[("4242", "python3", "0")],
        "launches": WINDOWS * 500, "wait_ns": WINDOWS * 2 * 10**9,
        "launches_by_pid": {p: v * WINDOWS * WINDOW_S for p, v in LAUNCHES_PER_S.items()},
        "wait_s_by_pid": {p: v * WINDOWS * WINDOW_S for p, v in WAIT_PER_S.items()},
        "alerts": [a["alert"] for a in ALERTS],
        "lines_service": "trainer-lines",
        "lines": {k: "%s:%d" % v for k, v in LINES.items()},
    }


if __name__ == "__main__":
    truth = ingest(sys.argv[1])
    out = json.dumps(truth, indent=1)
    if len(sys.argv) > 2:
        open(sys.argv[2], "w").write(out)
    print(out)
