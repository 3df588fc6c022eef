"""Each kernel's time on the GPU under the CPU stack that launched it (issue
24): `sonde record --gpu -- JOB` starts the job with Sonde's CUPTI library
(build/libsonde_cupti.so, through CUDA_INJECTION64_PATH; CUPTI here is the
stand-in, tests/gpu/standin/cupti.c), whose launch callbacks and kernel
records meet by correlation id, and writes x.gpu_time.folded: the launching
stack topped by the kernel's name, weighted by its nanoseconds on the GPU.

- gpu_train (C, runtime launches through host stubs, CUDA 13's <<<>>> and
  cudaLaunchKernelExC; a captured graph launched each step): per kernel, the
  GPU time is its kernels run (launches less those captured, and the
  graph's at each of its launches) x 37 us, the stand-in's kernel time, the
  graph's under the caller of cudaGraphLaunch; each stack is the launch profile's -- the launching thread's
  gpu_thread, the host stub, the kernel -- with no frame of CUDA's or
  CUPTI's above the host stub (and no uretprobe trampoline for the return
  address of the probed cudaLaunchKernel: the frame a walk from inside the
  runtime met as "[unknown]+0x7fffffffdfff").
- gpu_ctypes.py (Python through ctypes): the kernel's time is under the
  Python function that launched it and its caller, train -> launch_step.
- A job started with CUDA_INJECTION64_PATH pointing elsewhere keeps it:
  record does not override the user's, and then writes no gpu_time.
- The kernel timeline (train.gpu_trace.json, a Chrome trace): each kernel
  that ran a 37 us slice on its device and stream's track, on the host's
  clock after the launch that queued it, an arrow from launch to kernel.
- `sonde agent`, shipping to a server: a job started after it with
  CUDA_INJECTION64_PATH set to the library has its kernels' GPU time stored
  as the gpu_time type, per kernel exactly; its kernels counted and timed
  in sonde_gpu_kernels_total and sonde_gpu_kernel_seconds_total (one
  stream: their sum), a busy ratio once a window closed, and
  sonde_agent_gpu_process_kernel_timing 1 for it, 0 for a job without the
  library; a job whose CUPTI another tool took first is reported
  (sonde_agent_gpu_process_cupti{state="held"}) and runs unchanged; the
  memory it holds, from CUPTI's memory records
  (sonde_gpu_process_memory_bytes{source="cupti"}), is the job's own count."""
import collections
import json
import os
import re
import subprocess
import time

from agent_test import (Agent, GPU_SI, GPU_WL, Workload, need_standins, poll_until, value,
                        wait_for)
from server_test import Server
from sonde_test import *

need_bpf()
need_standins()
if not os.path.exists(os.path.join(B, "libsonde_cupti.so")):
    skip("no %s/libsonde_cupti.so: built only where the CUDA toolkit's CUPTI headers are" % B)
d = tmpdir()
# Copies at 1 GB/s: a copy of N bytes is N ns on the GPU.
env = dict(os.environ, LD_LIBRARY_PATH=GPU_SI, SONDE_STANDIN_KERNEL_US="37",
           SONDE_STANDIN_COPY_GBPS="1")
env.pop("CUDA_INJECTION64_PATH", None)
KERNEL_NS = 37000


def record(name, job, extra=None):
    out = os.path.join(d, name + ".folded")
    p = run([SONDE, "record", "--gpu", "-o", out, "--"] + job, env=dict(env, **(extra or {})),
            timeout=180)
    check(p.returncode == 0, "record --gpu of %s exits 0 (%d): %s"
          % (name, p.returncode, p.stderr[-1500:]))
    truth = json.loads([l for l in p.stdout.splitlines() if l.startswith("{")][-1])
    path = os.path.join(d, name + ".gpu_time.folded")
    return truth, (parse_folded(path) if os.path.exists(path) else None), p.stderr


# The copies' labels, by the names the jobs' truth gives their directions.
LABEL = {"HostToDevice": "[memcpy HtoD]", "DeviceToHost": "[memcpy DtoH]",
         "DeviceToDevice": "[memcpy DtoD]", "HostToHost": "[memcpy HtoH]"}


def is_copy(leaf):
    return leaf.startswith("[memcpy") or leaf == "[memset]"


# --- C, runtime launches --------------------------------------------------------
truth, prof, err = record("train", [os.path.join(GPU_WL, "gpu_train"), "--gpus", "1",
                                    "--steps", "4", "--no-nccl"])
check(prof is not None, "record wrote train.gpu_time.folded")
launches = truth["launches"]
ns, copy_ns = collections.Counter(), collections.Counter()
for frames, v in prof:
    (copy_ns if is_copy(frames[-1]) else ns)[frames[-1]] += v
# The graph (two matmul_tile and a softmax_fwd, captured: not run then) runs
# its three kernels at each of its launches, all with the launch's id.
graphs = launches["by_api"]["cudaGraphLaunch"]
in_graph = {"matmul_tile(float*, float*, float*, int)": 2, "softmax_fwd(float*, int)": 1}
check(sum(in_graph.values()) == launches["captured"], "the graph's kernels as gpu_train captures")
runs = {k: n - in_graph.get(k, 0) + graphs * in_graph.get(k, 0)
        for k, n in launches["by_kernel"].items()}
ran = sum(runs.values())
check({k: v // KERNEL_NS for k, v in ns.items()} == runs and
      all(v % KERNEL_NS == 0 for v in ns.values()),
      "GPU time per kernel, named as the job names them: its runs x 37 us, the graph's "
      "kernels included %s%s" % (runs, "" if {k: v // KERNEL_NS for k, v in ns.items()} == runs
                                 else " -- got %s" % {k: v / KERNEL_NS for k, v in ns.items()}))
direct = [(f, v) for f, v in prof if f[-2] != "gpu_thread" and not is_copy(f[-1])]
graph = [(f, v) for f, v in prof if f[-2] == "gpu_thread"]
check(all(f[0] == "gpu_train" and f[-3] == "gpu_thread" and f[-2] == f[-1] for f, _ in direct),
      "each stack: ... gpu_thread, the host stub, the kernel (no CUDA or CUPTI frame, no "
      "uretprobe trampoline): %s" % [";".join(f[-4:]) for f, _ in direct][:3])
check(sum(v for _, v in graph) == graphs * launches["captured"] * KERNEL_NS,
      "the graph's kernels under gpu_thread, the caller of cudaGraphLaunch: %d ns, its %d "
      "launches x 3 kernels x 37 us" % (sum(v for _, v in graph), graphs))
check("kernels" in err and "gpu_time" in err, "record says where the gpu_time profile went")

# Copies: their GPU time in gpu_time under the copy's label (1 GB/s: a byte
# a nanosecond), their bytes in gpu_memcpy, per direction as the job made
# them, each under gpu_thread -> copy, the job's function that calls
# cudaMemcpy(Async).
want_bytes = {LABEL[k]: n for k, n in truth["memcpy"]["bytes"].items()}
check(dict(copy_ns) == want_bytes,
      "gpu_time: each direction's copies, their bytes' worth of ns on the GPU %s%s"
      % (want_bytes, "" if dict(copy_ns) == want_bytes else " -- got %s" % dict(copy_ns)))
path = os.path.join(d, "train.gpu_memcpy.folded")
mprof = parse_folded(path) if os.path.exists(path) else []
mbytes = collections.Counter()
for frames, v in mprof:
    mbytes[frames[-1]] += v
check(dict(mbytes) == want_bytes, "gpu_memcpy: bytes per direction %s%s"
      % (want_bytes, "" if dict(mbytes) == want_bytes else " -- got %s" % dict(mbytes)))
check(mprof and all(f[-3:-1] == ["gpu_thread", "copy"] or f[-2] == "copy" for f, _ in mprof),
      "gpu_memcpy: each copy under the job's copy() that called it: %s"
      % [";".join(f[-4:]) for f, _ in mprof][:3])
check("copies" in err and "gpu_memcpy" in err, "record says where the gpu_memcpy profile went")

# The kernel timeline: x.gpu_trace.json, a Chrome trace. Each kernel a slice
# of 37 us on its device and stream's track, on the host's clock: it starts
# after the launch call that queued it began, the launch a slice on the
# launching thread with an arrow to its kernel.
with open(os.path.join(d, "train.gpu_trace.json")) as f:
    trace = json.load(f)["traceEvents"]
kern = [e for e in trace if e["ph"] == "X" and e["cat"] == "kernel"]
launch = {(e["pid"], e["args"]["correlation"]): e for e in trace
          if e["ph"] == "X" and e["cat"] == "launch"}
check(len(kern) == ran and {e["name"] for e in kern} == set(launches["by_kernel"]),
      "timeline: the %d kernels that ran, named as the job names them (%d: %s)"
      % (ran, len(kern), sorted({e["name"] for e in kern})))
check(all(abs(e["dur"] - KERNEL_NS / 1e3) < 0.01 for e in kern),
      "timeline: each kernel 37 us long: %s" % sorted({e["dur"] for e in kern})[:5])
lag = [e["ts"] - launch[(e["pid"], e["args"]["correlation"])]["ts"] for e in kern
       if (e["pid"], e["args"]["correlation"]) in launch]
check(len(lag) == ran and all(0 <= x < 10e6 for x in lag),
      "timeline: every kernel after its launch on the host's clock (%d launches found; lag "
      "%.0f..%.0f us)" % (len(lag), min(lag or [0]), max(lag or [0])))
copies = [e for e in trace if e["ph"] == "X" and e["cat"] == "copy"]
check(len(copies) == truth["memcpy"]["count"],
      "timeline: the job's %d copies, a slice each (%d)" % (truth["memcpy"]["count"],
                                                          len(copies)))
flows = [e for e in trace if e["ph"] in ("s", "f")]
check(len(flows) == 2 * (ran + len(copies)),
      "timeline: an arrow from each launch or copy call to its kernel or copy (%d ends)"
      % len(flows))
names = {e["args"]["name"] for e in trace if e["ph"] == "M" and e["name"] == "thread_name"}
check(any(n.startswith("GPU 0 stream ") for n in names),
      "timeline: tracks named by device and stream: %s" % sorted(names))
check("gpu_trace.json" in err, "record says where the timeline went")

# --- Python through ctypes ---------------------------------------------------------
SCRIPT = os.path.join(ROOT, "tests", "workloads", "gpu_ctypes.py")
PYTHON = "/usr/bin/python3"
if os.path.exists(PYTHON):
    # The job ends within ms of its last launch, before record has read the
    # launches' records: the interpreter is held as it finalizes until it
    # has (the code objects of train and launch_step go then).
    truth, prof, err = record("py", [PYTHON, SCRIPT, GPU_SI, "4", "10", "0"],
                              {"SONDE_LOG": "debug"})
    check("its records read before its interpreter finalizes" in err,
          "record holds the job at Py_FinalizeEx until it has read its records")
    # The launching function and its caller. (<module>'s code object is freed
    # as soon as the script's body has run: its name is the one an earlier
    # record of it read, and there may have been none.)
    chain = ["train (gpu_ctypes.py)", "launch_step (gpu_ctypes.py)"]
    total = sum(v for _, v in prof or [])
    total = sum(v for f, v in prof or [] if not is_copy(f[-1]))
    check(prof and total == truth["launches"] * KERNEL_NS,
          "gpu_ctypes.py: %d ns on the GPU, its %d launches x 37 us" % (total, truth["launches"]))
    under = sum(v for f, v in prof or [] if all(c in f for c in chain) and not is_copy(f[-1]))
    check(under == total, "all of it under the Python line that launched it (%s): %d of %d ns%s"
          % (" -> ".join(chain), under, total,
             "" if under == total else " -- %s" % [";".join(f) for f, _ in prof][:2]))
    # NVTX ranges (torch.cuda.nvtx's way: NVTX's C API, which loads the
    # injection record names in NVTX_INJECTION64_PATH): each kernel's time
    # under the ranges open at its launch, "step" then "forward", as frames
    # between the launching line and the kernel.
    truth, prof, err = record("nvtx", [PYTHON, SCRIPT, GPU_SI, "3", "5", "0", "--nvtx",
                                       os.path.join(GPU_WL, "libnvtx_shim.so")])
    kern = [(f, v) for f, v in prof or [] if not is_copy(f[-1])]
    total = sum(v for _, v in kern)
    ranged = sum(v for f, v in kern if f[-3:-1] == ["step", "forward"] and
                 "launch_step (gpu_ctypes.py)" in f[:-3])
    check(kern and total == truth["launches"] * KERNEL_NS and ranged == total,
          "NVTX: all %d ns of kernels under launch_step -> [nvtx] step -> [nvtx] forward -> "
          "the kernel (%d under them)%s" % (total, ranged, "" if ranged == total else
                                            " -- %s" % [";".join(f[-5:]) for f, _ in kern][:2]))
else:
    print("note: no %s: the Python case is not run" % PYTHON)

# --- full buffers: what CUPTI could not keep is counted ------------------------------
# One buffer of 4 KiB in flight, handed back 20 ms late by CUPTI's thread: the
# records that come meanwhile find no room. Each kernel or copy that ran is
# either in the profile or among those CUPTI says it lost, none guessed.
truth, prof, err = record("full", [os.path.join(GPU_WL, "gpu_train"), "--gpus", "1",
                                   "--steps", "4", "--no-nccl"],
                          {"SONDE_CUPTI_BUFFERS": "1", "SONDE_CUPTI_BUFFER_BYTES": "4096",
                           "SONDE_STANDIN_CUPTI_LAG_MS": "20"})
launches = truth["launches"]
ran = (sum(launches["by_kernel"].values()) - launches["captured"] +
       launches["by_api"]["cudaGraphLaunch"] * launches["captured"])
m = re.search(r"(\d+) kernels and (\d+) copies.*\(and (\d+) memory records, (\d+) "
              r"synchronisations\)", err)
lost = re.search(r"CUPTI could not record (\d+) records", err)
kept = sum(int(g) for g in m.groups()) if m else 0
lost = int(lost.group(1)) if lost else 0
# (The job's allocations and frees are CUPTI records too: all its
# successful ones are on device memory; and each of its waits, a
# synchronisation record.)
mem = sum(dv["allocs"] + dv["frees"] for dv in truth["memory"]["devices"])
syncs = truth["waits"]["count"]
check(lost > 0 and kept + lost == ran + truth["memcpy"]["count"] + mem + syncs,
      "full buffers: %d records kept + %d CUPTI lost = the %d kernels, %d copies, %d "
      "allocations and frees and %d synchronisations that ran"
      % (kept, lost, ran, truth["memcpy"]["count"], mem, syncs))

# --- CUDA graphs traced as a whole (--gpu-graphs=graph) -----------------------------
# CUPTI's graph-level tracing: each launch of gpu_train's graph one run,
# "[CUDA graph N]" under the caller of cudaGraphLaunch, from its first
# node's start to its last node's end (its three kernels back to back: 3 x
# 37 us); its kernels not one by one, the kernels launched on their own as
# before.
p = run([SONDE, "record", "--gpu", "--gpu-graphs=graph", "-o", os.path.join(d, "g2.folded"),
         "--", os.path.join(GPU_WL, "gpu_train"), "--gpus", "1", "--steps", "4", "--no-nccl"],
        env=env, timeout=180)
check(p.returncode == 0, "record --gpu-graphs=graph exits 0 (%d): %s"
      % (p.returncode, p.stderr[-800:]))
truth = json.loads([l for l in p.stdout.splitlines() if l.startswith("{")][-1])
gprof = parse_folded(os.path.join(d, "g2.gpu_time.folded"))
launches = truth["launches"]
graphs = launches["by_api"]["cudaGraphLaunch"]
runs = collections.Counter()
direct = collections.Counter()
for frames, v in gprof:
    if re.fullmatch(r"\[CUDA graph \d+\]", frames[-1]):
        runs[frames[-1]] += v
        check(frames[-2] == "gpu_thread", "a graph's run under gpu_thread, the caller of "
              "cudaGraphLaunch: %s" % ";".join(frames[-3:]))
    elif not is_copy(frames[-1]):
        direct[frames[-1]] += v
check(len(runs) == 1 and sum(runs.values()) == graphs * launches["captured"] * KERNEL_NS,
      "gpu_time: one graph, its %d runs x 3 kernels x 37 us as \"[CUDA graph N]\": %s"
      % (graphs, dict(runs)))
want = {k: (n - in_graph.get(k, 0)) * KERNEL_NS for k, n in launches["by_kernel"].items()}
want = {k: v for k, v in want.items() if v}
check(dict(direct) == want, "gpu_time: the kernels launched on their own, each as before, "
      "none of the graph's one by one %s%s" % (want, "" if dict(direct) == want
                                               else " -- got %s" % dict(direct)))
check(re.search(r"\b%d CUDA graph runs" % graphs, p.stderr) is not None,
      "record says how many graph runs it timed: %s"
      % [l for l in p.stderr.splitlines() if "graph" in l][:2])
tr = json.load(open(os.path.join(d, "g2.gpu_trace.json")))["traceEvents"]
gspans = [e for e in tr if e.get("ph") == "X" and e.get("cat") == "graph"]
check(len(gspans) == graphs and all(abs(e["dur"] - 3 * KERNEL_NS / 1e3) < 0.01 for e in gspans),
      "the timeline: each graph run one slice of 111 us (%d: %s)"
      % (len(gspans), [e["dur"] for e in gspans][:4]))
# The job's waits, from CUPTI's synchronisation records, on the host's track.
waits = [e for e in tr if e.get("ph") == "X" and e.get("cat") == "sync"]
check(len(waits) == truth["waits"]["count"] and
      all(e["name"].endswith("synchronize]") for e in waits),
      "the timeline: the job's %d waits as host-wait slices (%d: %s)"
      % (truth["waits"]["count"], len(waits), sorted({e["name"] for e in waits})))

# --- the user's own injection library stays ---------------------------------------
truth, prof, err = record("own", [os.path.join(GPU_WL, "gpu_train"), "--gpus", "1",
                                  "--steps", "1", "--no-nccl"],
                          {"CUDA_INJECTION64_PATH": os.path.join(d, "none.so")})
check(prof is None, "with CUDA_INJECTION64_PATH set by the user, record keeps it: no gpu_time")

# --- the agent ---------------------------------------------------------------------
srv = Server(os.path.join(d, "data"))
a = Agent(["--no-cpu", "--window", "1", "--server", "http://127.0.0.1:%d" % srv.port],
          env=dict(os.environ))
try:
    t0 = int(time.time() * 1000) - 1000
    # Held alive once done, so that its series are still there to read.
    w = Workload("gpu_train", ["--gpus", "1", "--steps", "3", "--no-nccl"],
                 dict(env, SONDE_STANDIN_KERNEL_US="37",
                      CUDA_INJECTION64_PATH=os.path.join(B, "libsonde_cupti.so")))
    truth = w.truth
    launches = truth["launches"]
    graphs = launches["by_api"]["cudaGraphLaunch"]
    ran = sum(launches["by_kernel"].values()) + (graphs - 1) * launches["captured"]
    want_ns = ran * KERNEL_NS
    # One stream, one device: the kernels one after the other, their time
    # on the GPU their sum.
    series = dict(pid=truth["pid"], gpu_id=0)

    def busy():
        m = a.metrics()
        return (value(m, "sonde_gpu_kernels_total", **series),
                value(m, "sonde_gpu_kernel_seconds_total", **series))
    got = poll_until(busy, lambda v: v[0] == ran, 15)
    check(got[0] == ran and got[1] is not None and abs(got[1] - want_ns / 1e9) < 1e-9,
          "agent: sonde_gpu_kernels_total %s and sonde_gpu_kernel_seconds_total %s: the job's "
          "%d kernels x 37 us" % (got[0], got[1], ran))
    # CUPTI's memory records: what the job holds, as the job itself counts it
    # (cudaMalloc, managed and pool allocations less their frees).
    held = sum(dv["current_bytes"] for dv in truth["memory"]["devices"])
    got = poll_until(lambda: value(a.metrics(), "sonde_gpu_process_memory_bytes",
                                   pid=truth["pid"], gpu_id=0, source="cupti"),
                     lambda v: v == held, 15)
    check(got == held, "agent: sonde_gpu_process_memory_bytes{source=cupti} %s: the %d bytes "
          "the job holds" % (got, held))
    # Every launch was one the probes followed: its record carried CUPTI's
    # id and its stack (no walk, no record at the library's marker).
    want_direct = ran - graphs * launches["captured"]
    from_launch, from_marker = poll_until(
        lambda: (lambda m: (
            value(m, "sonde_agent_gpu_time_launch_stacks_total", **{"from": "launch_probe"}),
            value(m, "sonde_agent_gpu_time_launch_stacks_total", **{"from": "marker"})))(
            a.metrics()),
        lambda v: v[0] is not None and v[0] >= want_direct, 15)
    # (A copy's stack is walked at the library's marker: one each.)
    check(from_launch is not None and from_launch >= want_direct and
          from_marker == truth["memcpy"]["count"],
          "agent: the launches' stacks came with the probed launch calls (%s), only the %d "
          "copies' from the library's marker (%s)"
          % (from_launch, truth["memcpy"]["count"], from_marker))
    # (The agent's own counters are read by its loop about once a second.)
    joined, no_launch = poll_until(
        lambda: (lambda m: (value(m, "sonde_agent_gpu_time_kernels_total"),
                            value(m, "sonde_agent_gpu_time_no_launch_total")))(a.metrics()),
        lambda v: v[0] is not None and v[0] >= ran, 15)
    check(joined is not None and joined >= ran and no_launch == 0,
          "agent: sonde_agent_gpu_time_kernels_total %s (the job's %d kernels each met its "
          "launch), no_launch %s" % (joined, ran, no_launch))
    ncopy, copy_bytes = truth["memcpy"]["count"], sum(truth["memcpy"]["bytes"].values())
    got = poll_until(
        lambda: (lambda m: (value(m, "sonde_agent_gpu_time_copies_total"),
                            value(m, "sonde_agent_gpu_time_copy_bytes_total")))(a.metrics()),
        lambda v: v[0] is not None and v[0] >= ncopy, 15)
    check(got == (ncopy, copy_bytes),
          "agent: sonde_agent_gpu_time_copies_total and _copy_bytes_total %s: the job's %d "
          "copies, %d bytes" % (got, ncopy, copy_bytes))
    ratio = poll_until(lambda: value(a.metrics(), "sonde_gpu_busy_ratio", **series),
                       lambda v: v is not None, 15)
    check(ratio is not None and 0 <= ratio <= 1,
          "agent: sonde_gpu_busy_ratio once a window closed: %s" % ratio)
    verdict = next((p.get("verdict") for p in json.loads(a.get("/json"))["processes"]
                    if p["pid"] == truth["pid"]), None) or {}
    check(0 <= verdict.get("gpu_busy", {}).get("0", -1) <= 1,
          "agent: /json's verdict has the job's GPU busy share as evidence: %s"
          % verdict.get("gpu_busy"))
    timing = lambda pid: value(a.metrics(), "sonde_agent_gpu_process_kernel_timing", pid=pid)
    got = poll_until(lambda: timing(truth["pid"]), lambda v: v == 1, 15)
    check(got == 1, "agent: sonde_agent_gpu_process_kernel_timing = 1 for the job that loaded "
          "the library (%s)" % got)
    bare = Workload("gpu_train", ["--gpus", "1", "--steps", "1", "--no-nccl"], env)
    got = poll_until(lambda: timing(bare.pid), lambda v: v == 0, 15)
    check(got == 0, "agent: ... and 0 for a CUDA job without it (%s)" % got)
    cupti = lambda pid, state: value(a.metrics(), "sonde_agent_gpu_process_cupti", pid=pid,
                                     state=state)
    got = poll_until(lambda: cupti(truth["pid"], "recording"), lambda v: v == 1, 15)
    check(got == 1, "agent: sonde_agent_gpu_process_cupti{state=recording} = 1 for it (%s)" % got)
    # A job whose CUPTI another tool took first (here a preloaded library that
    # subscribes as it loads, as PyTorch's profiler or Nsight would): the
    # library says so, the agent reports it, and the job runs as it would,
    # its launches still seen by the probes.
    held = Workload("gpu_train", ["--gpus", "1", "--steps", "1", "--no-nccl"],
                    dict(env, CUDA_INJECTION64_PATH=os.path.join(B, "libsonde_cupti.so"),
                         LD_PRELOAD=os.path.join(GPU_WL, "libcupti_holder.so")))
    got = poll_until(lambda: (cupti(held.pid, "held"), timing(held.pid)),
                     lambda v: v == (1, 0), 15)
    check(got == (1, 0), "agent: a job whose CUPTI another tool holds: "
          "sonde_agent_gpu_process_cupti{state=held} 1, kernel_timing 0 (%s)" % (got,))
    n = held.truth["launches"]["total"]
    got = poll_until(lambda: value(a.metrics(), "sonde_cuda_launches_total", pid=held.pid),
                     lambda v: v == n, 15)
    check(got == n, "agent: ... its %d launches still counted by the probes (%s)" % (n, got))
    check(held.release() == 0, "... and it runs unchanged: exits 0")
    check(bare.release() == 0 and w.release() == 0, "the jobs started after the agent exit 0")
    pq = '{type="gpu_time",pid="%d"}' % truth["pid"]

    copy_total = sum(truth["memcpy"]["bytes"].values())

    def stored():
        st, _, body = srv.get("/api/v1/top", query=pq, limit=50, **{"from": t0, "until": "now"})
        top = json.loads(body) if st == 200 else None
        return top if top and top["total"] >= want_ns + copy_total else None
    top = wait_for(stored, 30, "the job's %d ns of kernels at the server" % want_ns)
    by = {f["name"]: f["self"] for f in top["functions"] if f["module"] == "[cuda]"}
    kern = {k: v for k, v in by.items() if not is_copy(k)}
    copies = {k: v for k, v in by.items() if is_copy(k)}
    want_bytes = {LABEL[k]: n for k, n in truth["memcpy"]["bytes"].items()}
    check(sum(kern.values()) == want_ns and set(kern) == set(launches["by_kernel"]) and
          copies == want_bytes,
          "agent: the job's gpu_time stored, %d ns of kernels, per kernel %s, and its copies "
          "%s (want %s)" % (sum(kern.values()), kern, copies, want_bytes))
    mq = '{type="gpu_memcpy",pid="%d"}' % truth["pid"]

    def stored_copies():
        st, _, body = srv.get("/api/v1/top", query=mq, limit=50, **{"from": t0, "until": "now"})
        top = json.loads(body) if st == 200 else None
        return top if top and top["total"] >= sum(want_bytes.values()) else None
    top = wait_for(stored_copies, 30, "the job's copies' bytes at the server")
    got = {f["name"]: f["self"] for f in top["functions"] if f["module"] == "[cuda]"}
    check(got == want_bytes, "agent: the job's gpu_memcpy stored, bytes per direction %s" % got)
    # A pool that keeps what its allocations freed (release threshold 1 GiB,
    # not trimmed): the process holds the pool's reservation, which the pool
    # reports in each allocation's and release's record, not what its
    # allocations use; then one trimmed to nothing (a TRIMMED pool record).
    for trim in (False, True):
        pw = Workload("gpu_train", ["--gpus", "1", "--steps", "2", "--no-nccl", "--pool-keep",
                                    str(1 << 30)] + ([] if trim else ["--no-pool-trim"]),
                      dict(env, CUDA_INJECTION64_PATH=os.path.join(B, "libsonde_cupti.so")))
        pk = pw.truth["pool_keep"]
        kept = pk["reserved_after_trim"]
        plain = sum(dv["current_bytes"] for dv in pw.truth["memory"]["devices"])
        ps = dict(pid=pw.truth["pid"], gpu_id=0)
        got = poll_until(lambda: (lambda m: (
            value(m, "sonde_gpu_memory_pool_bytes", state="reserved", **ps),
            value(m, "sonde_gpu_memory_pool_bytes", state="used", **ps),
            value(m, "sonde_gpu_process_memory_bytes", source="cupti", **ps)))(a.metrics()),
            lambda v: v == (kept, 0, plain + kept), 15)
        check(pk["trimmed"] == trim and (kept > 0) != trim and got == (kept, 0, plain + kept),
              "agent: a pool %s: sonde_gpu_memory_pool_bytes reserved, used and the process's "
              "cupti memory %s: want (%d, 0, %d + %d) as the job's pool says"
              % ("trimmed to nothing" if trim else "keeping what was freed", got, kept,
                 plain, kept))
        pw.release()
finally:
    a.stop()
    srv.stop()
print("ok")
