"""The live kernel timeline (issue 24): `sonde agent --server` ships the
kernels Sonde's CUPTI library tells of, window by window, to POST
/api/v1/ingest/spans, and GET /api/v1/gpu/timeline answers them by process,
device and stream -- what the GPU page draws.

- gpu_train (the stand-in CUDA and CUPTI, kernels 37 us each on the GPU), one
  device, its kernels on the stream it made (CUPTI's id 13; the legacy one
  is 7): every kernel it ran (its launches less those captured into its
  graph, and the graph's three at each of its launches) is in the answer,
  named as the job names them, on device 0 stream 13, each exactly 37 000 ns
  long, one after the other on its stream, each with its launching stack
  (the job's gpu_thread below the host stub; no CUDA frame), in the job's
  process (pid, name, node labels); its copies too, named by direction
  ([memcpy HtoD], ...), their bytes, each as long as its bytes at 1 GB/s;
  the agent counts them shipped, none dropped.
- a Python job (gpu_ctypes.py): each kernel's launching stack begins with
  the Python function that launched it (launch_step), then its caller.
- limit= cuts the answer and says so (truncated); a bad limit, a malformed
  body, a span that ends before it starts and a request past 100 000 spans
  are refused (400, 400, 400, 413) with a message naming the fault."""
import collections
import json
import os
import subprocess
import time
import urllib.parse

from agent_test import Agent, GPU_SI, GPU_WL, Workload, need_standins, poll_until, value
from server_test import Server, error_of
from sonde_test import *

need_bpf()
need_standins()
if not os.path.exists(os.path.join(B, "libsonde_cupti.so")):
    skip("no %s/libsonde_cupti.so: built only where the CUDA toolkit's CUPTI headers are" % B)
d = tmpdir()
KERNEL_NS = 37000

srv = Server(os.path.join(d, "data"))
a = Agent(["--no-cpu", "--window", "1", "--server", "http://127.0.0.1:%d" % srv.port],
          env=dict(os.environ))
w = None
try:
    t0 = int(time.time() * 1000) - 1000
    w = Workload("gpu_train", ["--gpus", "1", "--steps", "3", "--no-nccl"],
                 dict(LD_LIBRARY_PATH=GPU_SI, SONDE_STANDIN_KERNEL_US="37",
                      SONDE_STANDIN_COPY_GBPS="1",
                      CUDA_INJECTION64_PATH=os.path.join(B, "libsonde_cupti.so")))
    truth = w.truth
    launches = truth["launches"]
    graphs = launches["by_api"]["cudaGraphLaunch"]
    in_graph = {"matmul_tile(float*, float*, float*, int)": 2, "softmax_fwd(float*, int)": 1}
    check(sum(in_graph.values()) == launches["captured"],
          "the graph's kernels as gpu_train captures")
    runs = {k: n - in_graph.get(k, 0) + graphs * in_graph.get(k, 0)
            for k, n in launches["by_kernel"].items()}
    ran = sum(runs.values())
    query = '{pid="%d"}' % truth["pid"]

    def timeline(**params):
        p = dict(query=query, **{"from": t0, "until": int(time.time() * 1000) + 60000})
        p.update(params)
        return srv.get_json("/api/v1/gpu/timeline", **p)

    def kernels(tl):
        return [(proc, lane, s) for proc in tl["processes"] for lane in proc["lanes"]
                for s in lane["spans"] if s["kind"] == "kernel"]

    def copies(tl):
        return [s for proc in tl["processes"] for lane in proc["lanes"] for s in lane["spans"]
                if s["kind"].startswith("memcpy")]

    ncopies = truth["memcpy"]["count"]
    tl = poll_until(timeline, lambda t: len(kernels(t)) >= ran and len(copies(t)) >= ncopies,
                    30)
    ks = kernels(tl)
    check(len(ks) == ran and not tl["truncated"],
          "the timeline holds the job's %d kernels (%d%s)"
          % (ran, len(ks), ", truncated" if tl["truncated"] else ""))
    names = collections.Counter(s["name"] for _, _, s in ks)
    check(dict(names) == runs, "each kernel named as the job names it, as many as ran %s%s"
          % (runs, "" if dict(names) == runs else " -- got %s" % dict(names)))
    check(len(tl["processes"]) == 1, "one process: %s" % [p["labels"] for p in tl["processes"]])
    labels = tl["processes"][0]["labels"]
    check(labels.get("pid") == str(truth["pid"]) and labels.get("process") == "gpu_train" and
          labels.get("node"), "the process's labels: pid, name, node: %s" % labels)
    lanes = {(lane["device"], lane["stream"]) for _, lane, _ in ks}
    check(lanes == {(0, 13)}, "every kernel on device 0, stream 13 (the job's stream): %s"
          % sorted(lanes))
    durs = collections.Counter(s["dur_ns"] for _, _, s in ks)
    check(set(durs) == {KERNEL_NS} and all(s["end_ns"] - s["start_ns"] == KERNEL_NS
                                          for _, _, s in ks),
          "each kernel exactly 37 000 ns on the GPU: %s" % dict(durs))
    check(all(s["offset_ns"] == s["start_ns"] - tl["base_ns"] for _, _, s in ks),
          "offset_ns is start_ns from base_ns")
    starts = [s["start_ns"] for _, _, s in ks]
    check(starts == sorted(starts) and
          all(b["start_ns"] >= a_["end_ns"] for (_, _, a_), (_, _, b) in zip(ks, ks[1:])),
          "in order of start, one after the other on their stream")
    now_ns = time.time_ns()
    check(all(t0 * 1000000 <= s["start_ns"] <= now_ns for _, _, s in ks),
          "on the wall clock: within the job's run")
    froms = collections.Counter(s.get("from", "") for _, _, s in ks)
    check(all("gpu_thread" in f and "cuda" not in f.lower() for f in froms),
          "each kernel's launching stack: the job's gpu_thread, no CUDA frame: %s"
          % list(froms)[:4])
    direct = [s for _, _, s in ks if s.get("from", "").split(" < ")[0].startswith(s["name"] + " (")]
    check(len(direct) == ran - graphs * launches["captured"],
          "a launch's innermost frame is its host stub, named as the kernel (%d of %d): %s"
          % (len(direct), ran - graphs * launches["captured"], list(froms)[:3]))
    # Copies: on the timeline too, a bar each, named by direction, as long
    # as their bytes at the stand-in's 1 GB/s.
    cs = copies(tl)
    label = {"HostToDevice": "[memcpy HtoD]", "DeviceToHost": "[memcpy DtoH]",
             "DeviceToDevice": "[memcpy DtoD]"}
    by = collections.Counter()
    for c in cs:
        by[c["name"]] += c.get("bytes", 0)
    want = {label[k]: n for k, n in truth["memcpy"]["bytes"].items()}
    check(len(cs) == ncopies and dict(by) == want and
          all(c["dur_ns"] == c.get("bytes") for c in cs),
          "the job's %d copies, bytes per direction %s, each its bytes' ns long%s"
          % (ncopies, want, "" if dict(by) == want and len(cs) == ncopies
             else " -- got %d: %s" % (len(cs), dict(by))))
    m = poll_until(a.metrics, lambda m: (value(m, "sonde_agent_gpu_timeline_spans_total") or 0)
                   >= ran + ncopies, 15)
    check(value(m, "sonde_agent_gpu_timeline_spans_total") >= ran + ncopies and
          value(m, "sonde_agent_gpu_timeline_dropped_total") == 0,
          "the agent counts them shipped (%s), none dropped (%s)"
          % (value(m, "sonde_agent_gpu_timeline_spans_total"),
             value(m, "sonde_agent_gpu_timeline_dropped_total")))

    # A Python job (ctypes, as a framework without compiled bindings): each
    # kernel's launching stack names the Python function that launched it
    # first, then its caller.
    PYTHON = "/usr/bin/python3"
    if os.path.exists(PYTHON):
        job = subprocess.Popen(
            [PYTHON, os.path.join(ROOT, "tests", "workloads", "gpu_ctypes.py"), GPU_SI, "3",
             "5", "0", "--hold"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
            env=dict(os.environ, LD_LIBRARY_PATH=GPU_SI, SONDE_STANDIN_KERNEL_US="37",
                     CUDA_INJECTION64_PATH=os.path.join(B, "libsonde_cupti.so")))
        try:
            pt = json.loads(job.stdout.readline())
            pq = '{pid="%d"}' % pt["pid"]
            ptl = poll_until(lambda: timeline(query=pq),
                             lambda t: len(kernels(t)) >= pt["launches"], 30)
            pks = kernels(ptl)
            firsts = collections.Counter(s.get("from", "").split(" < ")[0].split(" (")[0]
                                         for _, _, s in pks)
            check(len(pks) == pt["launches"] and
                  all(s.get("from", "").startswith("launch_step (gpu_ctypes.py") and
                      "train (gpu_ctypes.py" in s["from"] for _, _, s in pks),
                  "a Python job's %d kernels, each launched from launch_step < train "
                  "(Python frames first): %s" % (pt["launches"], dict(firsts)))
        finally:
            job.stdin.close()
            job.wait(30)
    else:
        print("note: no %s: the Python case is not run" % PYTHON)

    # limit= cuts the answer, in order of start, and says so.
    cut = timeline(limit=2)
    every = sorted(s["start_ns"] for proc in tl["processes"] for lane in proc["lanes"]
                   for s in lane["spans"])
    check(cut["spans"] == 2 and cut["truncated"] and
          sorted(s["start_ns"] for proc in cut["processes"] for lane in proc["lanes"]
                 for s in lane["spans"]) == every[:2],
          "limit=2: the first two by start, truncated")

    # Refusals.
    st, _, body = srv.request("GET", "/api/v1/gpu/timeline?limit=0")
    check(st == 400 and "limit" in error_of(body), "limit=0: 400 %s" % body[:200])
    st, _, body = srv.request("GET", "/api/v1/gpu/timeline?limit=50001")
    check(st == 400, "limit past 50 000: 400")
    post = lambda b: (lambda r: (r[0], r[2]))(
        srv.request("POST", "/api/v1/ingest/spans", b, {"Content-Type": "application/json"}))
    st, body = post(b"{not json")
    check(st == 400 and "not JSON" in error_of(body), "a malformed body: 400 %s" % body[:200])
    span = {"start_ns": now_ns, "end_ns": now_ns - 1, "name": "k"}
    st, body = post(json.dumps({"series": [{"labels": {"pid": "1"}, "spans": [span]}]}).encode())
    check(st == 400 and "span 0" in error_of(body),
          "a span that ends before it starts: 400 naming it %s" % body[:200])
    span["end_ns"] = now_ns + 1
    many = json.dumps({"series": [{"labels": {"pid": "1"}, "spans": [span] * 100001}]})
    st, body = post(many.encode())
    check(st == 413 and "100000" in error_of(body).replace(" ", ""),
          "100 001 spans in one request: 413 %s" % body[:200])
    st, body = post(json.dumps({"series": [{"labels": {"pid": "1"},
                                            "spans": [span]}]}).encode())
    check(st == 200 and json.loads(body) == {"spans": 1}, "one good span: 200 %s" % body[:200])
finally:
    if w:
        w.release()
    a.stop()
    srv.stop()
print("ok")
