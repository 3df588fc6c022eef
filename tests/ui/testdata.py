#!/usr/bin/env python3
"""testdata.py: the known data the UI tests load into a server through its
ingest API (docs/api.md), and the truth they check the UI against.

- service "shares" (comm shares, pid 4242), type cpu, 10 s windows over the
  last 10 minutes: in the older half hot_a/hot_b/hot_c take 60/30/10 % of the
  samples, in the newer half 40/50/10 %, so over the whole range hot_a is the
  hottest function (50 %), hot_b 40 %, hot_c 10 %; the diff of the halves has
  hot_a faster (green) and hot_b slower (red);
- service "trainer" (comm python3, pid 777), cpu, a different tree, so that
  picking a service changes what is shown; its samples are rank 0 of the job
  JOB_ID (the labels job and rank, as the agent gives a torchrun rank's);
- off-CPU: an offcpu profile of "trainer" (OFFCPU, nanoseconds a window:
  next_batch 75 %, cudaDeviceSynchronize 25 %);
- GPU: gpu_launch and gpu_wait profiles of "trainer", and the agent's
  per-second points of GPU_PROCS -- 16 process names on three devices (two
  GPUs of node gpu-7, one of gpu-8): python3 (pids 4242 and 4243 holding
  memory, 777 and 778 launching), train_job restarted twice (pids 5001,
  5002, 5003, 30 s apart), preproc exiting early, eval starting late, and
  twelve workers -- with gpu_memory_capacity_bytes per device, nccl_calls
  and nccl_seconds, and the shares of each window's wall time some of them
  spent in each state (process_time_share, SHARES), whose verdicts over
  the range are in the truth (verdicts_by_name, verdicts_by_pid);
- service "wide", type cpu, one window of 1200 functions (main;fn_NNNN 1):
  more than the top table lists;
- service "trainer-lines", type cpu, a pprof whose functions say where
  they are in the source (LINES: name -> file and first line);
- service "trainer-py", type cpu, a Python job as the agent names it: native
  frames in their modules (PY_MODULES), Python frames "QUALNAME (FILE)" with
  their file and first line (PY_LINES) and no module.

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
JOB_ID = "10.0.0.7:29500"  # trainer's cpu samples are rank 0 of this job
# Where trainer's threads blocked, nanoseconds a window (the agent's
# --offcpu): 4 s, 3 of them waiting for the next batch.
OFFCPU = {"_start;main;train;next_batch;__poll;do_sys_poll_[k]": 3 * 10**9,
          "_start;main;train;cudaDeviceSynchronize;ioctl;__x64_sys_ioctl_[k]": 10**9}
WIDE_FUNCTIONS = 1200
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
GIB = 2**30
# The GPU processes, as the agent's per-second points show them: comm, pid,
# node, GPU, memory held (bytes; pid 4242's grows from half to all of it),
# alive from START to END seconds into the range, launches and seconds
# waiting on the GPU per second. pid 777 matches its gpu_launch/gpu_wait
# profiles (500 launches and 2 s of waits per window).
GPU_PROCS = [
    # comm,      pid,    node,    gpu,  memory,        start, end, launches, wait
    ("python3", "4242", "gpu-7", "0", 6 * GIB, 0, 600, 0, 0.0),
    ("python3", "4243", "gpu-7", "1", 3 * GIB, 0, 600, 0, 0.0),
    ("python3", "777", "gpu-7", None, 0, 0, 600, 500 // WINDOW_S, 2.0 / WINDOW_S),
    ("python3", "778", "gpu-7", None, 0, 0, 600, 20, 0.125),
    ("train_job", "5001", "gpu-7", "0", 4 * GIB, 0, 170, 30, 0.3),
    ("train_job", "5002", "gpu-7", "0", 4 * GIB, 200, 370, 30, 0.3),
    ("train_job", "5003", "gpu-7", "1", 4 * GIB, 400, 600, 30, 0.3),
    ("preproc", "5101", "gpu-7", "1", 1 * GIB, 0, 120, 5, 0.05),
    ("eval", "5201", "gpu-8", "0", 2 * GIB, 450, 600, 12, 0.1),
] + [("worker-%02d" % i, str(6000 + i), ("gpu-7", "gpu-7", "gpu-8")[i % 3], ("0", "1", "0")[i % 3],
      i * 256 * 2**20, 0, 600, i, 0.01 * i) for i in range(1, 13)]
# What bounded some of them, as the agent's process_time_share points say
# each second (the last window's share of each state, those under 0.005
# left out), from START to END seconds into the range (within the
# process's life). Over the range: python3's 4242 gpu-bound, 4243
# input-bound, the name python3 gpu-bound (the mean of its pids' seconds:
# gpu_wait 0.4, dataloader_wait 0.3, on_cpu 0.15); train_job idle (asleep);
# preproc idle (no state reaches 0.2); eval cpu-bound on the mean of its two
# halves (io 0.25, on_cpu 0.35); worker-01 communication-bound on a tie of
# collective and lock (the order of the states breaks it).
SHARES = [
    # pid,   start, end, shares
    ("4242", 0, 600, {"gpu_wait": 0.8, "on_cpu": 0.1}),
    ("4243", 0, 600, {"dataloader_wait": 0.6, "on_cpu": 0.2}),
    ("5001", 0, 600, {"sleep": 0.9}),
    ("5002", 0, 600, {"sleep": 0.9}),
    ("5003", 0, 600, {"sleep": 0.9}),
    ("5101", 0, 600, {"on_cpu": 0.15, "io": 0.1}),
    ("5201", 0, 525, {"io": 0.5}),
    ("5201", 525, 600, {"on_cpu": 0.7}),
    ("6001", 0, 600, {"collective": 0.3, "lock": 0.3}),
]
STATES = ["gpu_wait", "collective", "dataloader_wait", "on_cpu", "lock", "io", "sleep"]
VERDICT_OF = {"gpu_wait": "gpu", "collective": "communication", "dataloader_wait": "input",
              "on_cpu": "cpu", "lock": "lock", "io": "io", "sleep": "idle"}
CAPACITY = {("gpu-7", "0"): 80 * GIB, ("gpu-7", "1"): 80 * GIB, ("gpu-8", "0"): 40 * GIB}


def verdict_of(samples):
    """The mean share of each state over samples (dicts state -> share, one
    per process-second) and the verdict: the largest if at least 0.2 (the
    first in STATES on a tie), else idle."""
    means = {st: sum(x.get(st, 0) for x in samples) / len(samples) for st in STATES}
    best = max(STATES, key=lambda st: (means[st], -STATES.index(st)))
    return {"means": means,
            "verdict": VERDICT_OF[best] if means[best] >= 0.2 - 1e-9 else "idle"}


# The timeline's kernel and the stack that launched it.
TIMELINE_KERNEL = "void gemm_kernel<float>(float*, int)"
TIMELINE_FROM = "step (train.py:41) < main (train.py:80)"


def gpu_points(start, now_s):
    """The GPU points of the range, and their truth."""
    points = []
    span = now_s - start
    by_pid, by_name, devices = {}, {}, {}
    samples_by_pid = {}
    for comm, pid, node, gpu, mem, a, b, launches, wait in GPU_PROCS:
        first, last = (start + a) * 1000, (start + min(b, span) - 1) * 1000
        by_pid[pid] = {"comm": comm, "node": node, "gpu_id": gpu, "first_ms": first,
                       "last_ms": last, "launches": 0, "wait_s": 0.0, "memory_peak": 0}
        n = by_name.setdefault(comm, {"pids": [], "intervals_ms": [], "launches": 0})
        n["pids"].append(pid)
        n["intervals_ms"].append([first, last])
    for sec in range(start, now_s):
        ts = sec * 1000
        off = sec - start
        for comm, pid, node, gpu, mem, a, b, launches, wait in GPU_PROCS:
            if not a <= off < b:
                continue
            lab = {"node": node, "pid": pid, "comm": comm}
            t = by_pid[pid]
            if mem:
                v = mem * (0.5 + 0.5 * off / span) if pid == "4242" else mem
                points.append({"name": "gpu_memory_used_bytes", "ts_ms": ts, "value": v,
                               "labels": dict(lab, gpu_id=gpu)})
                t["memory_peak"] = max(t["memory_peak"], v)
                d = devices.setdefault("%s/%s" % (node, gpu), {"node": node, "gpu_id": gpu,
                                                               "names": set(), "total": {}})
                d["names"].add(comm)
                d["total"][ts] = d["total"].get(ts, 0) + v
            if launches:
                points.append({"name": "cuda_launches", "ts_ms": ts, "value": launches,
                               "labels": lab})
                points.append({"name": "cuda_sync_wait_seconds", "ts_ms": ts, "value": wait,
                               "labels": lab})
                t["launches"] += launches
                t["wait_s"] += wait
                by_name[comm]["launches"] += launches
        for (node, gpu), cap in CAPACITY.items():
            points.append({"name": "gpu_memory_capacity_bytes", "ts_ms": ts, "value": cap,
                           "labels": {"node": node, "gpu_id": gpu}})
        points.append({"name": "nccl_calls", "ts_ms": ts, "value": 10,
                       "labels": {"node": "gpu-7", "op": "allreduce"}})
        points.append({"name": "nccl_seconds", "ts_ms": ts, "value": 0.05,
                       "labels": {"node": "gpu-7", "op": "allreduce"}})
        for pid, a, b, shares in SHARES:
            p = by_pid[pid]
            if not a <= off < b or not p["first_ms"] <= ts <= p["last_ms"]:
                continue
            lab = {"node": p["node"], "pid": pid, "comm": p["comm"]}
            for st, v in shares.items():
                points.append({"name": "process_time_share", "ts_ms": ts, "value": v,
                               "labels": dict(lab, state=st)})
            samples_by_pid.setdefault(pid, []).append(shares)
    for k, d in devices.items():
        d["names"] = sorted(d["names"])
        d["total"] = sorted(d["total"].items())
        d["peak"] = max(v for _, v in d["total"])
        d["capacity"] = CAPACITY[(d["node"], d["gpu_id"])]
    samples_by_name = {}
    for pid, samples in samples_by_pid.items():
        samples_by_name.setdefault(by_pid[pid]["comm"], []).extend(samples)
    truth = {
        "verdicts_by_pid": {p: verdict_of(x) for p, x in samples_by_pid.items()},
        "verdicts_by_name": {n: verdict_of(x) for n, x in samples_by_name.items()},
        "memory_peak_bytes": by_pid["4242"]["memory_peak"],
        "launches_by_pid": {p: by_pid[p]["launches"] for p in ("777", "778")},
        "wait_s_by_pid": {p: by_pid[p]["wait_s"] for p in ("777", "778")},
        "gpu_pids": by_pid, "gpu_names": by_name, "gpu_devices": devices,
        "gpu_restarted": "train_job",
    }
    return points, truth


# A pprof whose functions name their source file and first line.
LINES = {"main": ("/src/main.c", 12), "work": ("/src/work.c", 40)}


# A Python job: native frames in python3.12 and libpython, Python frames in
# train.py, model.py and data.py (70 and 30 samples per window).
PY_STACKS = [("_start;main;Py_RunMain;<module> (train.py);train (train.py);step (model.py)", 70),
             ("_start;main;Py_RunMain;<module> (train.py);train (train.py);load (data.py)", 30)]
PY_MODULES = {"_start": "/usr/bin/python3.12", "main": "/usr/bin/python3.12",
              "Py_RunMain": "/usr/lib/x86_64-linux-gnu/libpython3.12.so.1.0"}
PY_LINES = {"<module> (train.py)": ("/app/train.py", 1), "train (train.py)": ("/app/train.py", 10),
            "step (model.py)": ("/app/model.py", 42), "load (data.py)": ("/app/data.py", 7)}


def py_pprof():
    return pprof_wire.encode([("samples", "count")],
                             [(s.split(";"), [c]) for s, c in PY_STACKS], PY_LINES, PY_MODULES)


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
        # A rank of a job, as the agent labels a torchrun job's samples.
        post(base, "/ingest", {"name": "trainer.cpu{comm=python3,pid=777,job=%s,rank=0}" % JOB_ID,
                               "from": f,
                               "until": f + WINDOW_S, "format": "folded"},
             folded(TRAINER), "text/plain")
        post(base, "/ingest", {"name": "trainer-lines.cpu{comm=python3,pid=779}", "from": f,
                               "until": f + WINDOW_S, "format": "pprof"},
             lines_pprof(50), "application/octet-stream")
        post(base, "/ingest", {"name": "trainer-py.cpu{comm=python3,pid=780}", "from": f,
                               "until": f + WINDOW_S, "format": "pprof"},
             py_pprof(), "application/octet-stream")
        post(base, "/ingest", {"name": "trainer.gpu_launch{comm=python3,pid=777}", "from": f,
                               "until": f + WINDOW_S, "units": "launches"},
             folded({"_start;main;train;cudaLaunchKernel": 500}), "text/plain")
        post(base, "/ingest", {"name": "trainer.gpu_wait{comm=python3,pid=777}", "from": f,
                               "until": f + WINDOW_S, "units": "nanoseconds"},
             folded({"_start;main;train;cudaDeviceSynchronize": 2 * 10**9}), "text/plain")
        post(base, "/ingest", {"name": "trainer.offcpu{comm=python3,pid=777}", "from": f,
                               "until": f + WINDOW_S, "units": "nanoseconds"},
             folded(OFFCPU), "text/plain")
    # "wide": more functions than the top table lists (one window).
    post(base, "/ingest", {"name": "wide.cpu{comm=wide,pid=31}", "from": start,
                           "until": start + WINDOW_S, "format": "folded"},
         folded({"main;fn_%04d" % i: 1 for i in range(WIDE_FUNCTIONS)}), "text/plain")
    points, gpu_truth = gpu_points(start, now_s)
    for i in range(0, len(points), 50000):
        post(base, "/api/v1/ingest/points", {},
             json.dumps({"points": points[i:i + 50000]}).encode(), "application/json")
    for a in ALERTS:
        post(base, "/api/v1/alerts", {}, json.dumps(a).encode(), "application/json")
    # The kernel timeline: three kernels, a copy and a wait of python3's pid 4242
    # (labelled process="python3", as the agent ships them), near the range's
    # end, each 2 ms long (under a pixel at the default range: drawn a pixel
    # wide). The other processes with launches have no spans: the timeline
    # tells them how to have their kernels timed.
    t0 = (now_s - 60) * 10**9
    spans = [{"start_ns": t0 + i * 5 * 10**6, "end_ns": t0 + i * 5 * 10**6 + 2 * 10**6,
              "device": 0, "stream": 13 if i < 3 else 7, "correlation": i + 1, "tid": 4243,
              "kind": "kernel" if i < 3 else "memcpy HtoD", "bytes": 0 if i < 3 else 4096,
              "name": TIMELINE_KERNEL if i < 3 else "[memcpy HtoD]",
              "from": TIMELINE_FROM} for i in range(4)]
    # ... and the host's wait for stream 13, from CUPTI's synchronisation
    # records: device -1, no launch of its own.
    spans.append({"start_ns": t0 + 21 * 10**6, "end_ns": t0 + 23 * 10**6, "device": -1,
                  "stream": 13, "correlation": 9, "kind": "sync",
                  "name": "[stream synchronize]"})
    post(base, "/api/v1/ingest/spans", {}, json.dumps({"series": [{"labels": {
        "node": "gpu-7", "pid": "4242", "process": "python3"}, "spans": spans}]}).encode(),
         "application/json")
    n = WINDOWS // 2
    tot = {k: (OLD[k] + NEW[k]) * n for k in OLD}
    return {
        "start_ms": start * 1000, "half_ms": half * 1000, "end_ms": now_s * 1000,
        "service": "shares", "other_service": "trainer", "job": JOB_ID,
        "other_total": WINDOWS * sum(TRAINER.values()),
        "total": sum(tot.values()), "functions": tot, "hottest": "hot_a",
        "chain": ["total", "__libc_start_call_main", "main", "run"],
        "old": OLD, "new": NEW, "nccl_mean_s": 0.005,
        "launches": WINDOWS * 500, "wait_ns": WINDOWS * 2 * 10**9,
        **gpu_truth,
        "alerts": [a["alert"] for a in ALERTS],
        "lines_service": "trainer-lines",
        "lines": {k: "%s:%d" % v for k, v in LINES.items()},
        "py_service": "trainer-py",
        "py_lines": {k: "%s:%d" % v for k, v in PY_LINES.items()},
        # The module each frame is coloured by: a native frame's, a Python
        # frame's file.
        "py_modules": dict({k: os.path.basename(v) for k, v in PY_MODULES.items()},
                           **{k: os.path.basename(v[0]) for k, v in PY_LINES.items()}),
        "py_total": WINDOWS * sum(c for _, c in PY_STACKS),
        # Samples of type cpu per service: what the landing page picks from.
        "cpu_totals": {"shares": sum(tot.values()), "trainer": WINDOWS * sum(TRAINER.values()),
                       "trainer-lines": WINDOWS * 50, "wide": WIDE_FUNCTIONS,
                       "trainer-py": WINDOWS * sum(c for _, c in PY_STACKS)},
        "wide_service": "wide", "wide_functions": WIDE_FUNCTIONS + 1,
        "timeline_kernel": TIMELINE_KERNEL, "timeline_from": TIMELINE_FROM,
        "timeline_process": "python3", "timeline_t0_ns": str(t0),
    }


if __name__ == "__main__":
    truth = ingest(sys.argv[1])
    out = json.dumps(truth, indent=1)
    if len(sys.argv) > 2:
        open(sys.argv[2], "w").write(out)
    print(out)
