"""The GPU probes against programs that call CUDA the ways real CUDA, cuBLAS
and PyTorch do (issue 23), on the stand-ins (tests/gpu/README.md):

- the stand-in runtime finds the driver through cuGetProcAddress_v2, asking
  for each function by the name, CUDA version and per-thread flag that the
  REAL libcudart.so.13 of the toolkit asks with (the real runtime is loaded
  over the stand-in driver, which logs every request): each of its requests
  is one the real runtime makes, cudaLaunchKernel_ptsz enters
  cuLaunchKernel_ptsz and cudaDeviceSynchronize cuCtxSynchronize_v2;
- gpu_blas -- a BLAS-like library launching library kernels as cuBLAS does
  (cuLibraryGetKernel, then cuKernelGetFunction + cuLaunchKernel, or the
  CUkernel with cuLaunchKernelEx), from 4 threads on 2 GPUs, a graph
  captured from those launches (one on a side stream that joins the capture
  through an event), a graph built node by node (its own kernel
  through cudaGraphAddKernelNode, the library's CUkernel through
  cuGraphAddKernelNode_v2), cudaMallocAsync, and an expandable segment
  (cuMemAddressReserve, cuMemCreate + cuMemMap, cuMemUnmap + cuMemRelease,
  found through cudaGetDriverEntryPointByVersion) -- under `sonde record
  --gpu`: every launch counted once and named after its kernel (the mangled
  one demangled), a graph launch by its kernels, none "[unknown kernel]";
- the same job under `sonde agent`: launches, memory now and at peak,
  allocations and frees per device equal the job's own account, the calls
  each driver probe saw (sonde_agent_gpu_probe_calls_total, a function never
  called at 0) equal the job's, and the launches stored by a server are
  named per kernel exactly.
Each check fails on the code before issue 23 (the launches through the
function handle were "[unknown kernel]", the driver name not demangled)."""
import collections
import json
import os
import re
import subprocess
import time

from agent_test import (Agent, GPU_SI, GPU_WL, Workload, need_standins, poll_until, standin_env,
                        value, wait_for)
from server_test import Server
from sonde_test import *

need_bpf()
need_standins()
d = tmpdir()
env = dict(os.environ, LD_LIBRARY_PATH=GPU_SI, SONDE_STANDIN_KERNEL_US="5")

# --- the runtime asks the driver as the real one does ---------------------
REQ = re.compile(r"libcuda: cuGetProcAddress\(([A-Za-z0-9_]+), (\d+), (\d+)\)")


def requests(cmd, extra_env, stdin=None):
    p = subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=60,
                       env=dict(env, SONDE_STANDIN_TRACE="1", **extra_env))
    return set(REQ.findall(p.stderr)), p.stderr


real_calls = os.path.join(B, "gpu-real", "cuda_calls")
ours, err = set(), ""
for prog in ("gpu_train", "gpu_train_ptsz"):
    got, err = requests([os.path.join(GPU_WL, prog), "--gpus", "1", "--steps", "1",
                         "--launches", "1", "--no-nccl"], {})
    ours |= got
check(("cuLaunchKernel", "7000", "2") in ours and ("cuCtxSynchronize", "13000", "0") in ours,
      "the stand-in runtime asks cuGetProcAddress for %d driver functions, the per-thread "
      "cuLaunchKernel and CUDA 13's cuCtxSynchronize among them" % len(ours))
if os.path.exists(real_calls):
    drv = os.path.join(d, "driver")
    os.makedirs(drv)
    os.symlink(os.path.join(GPU_SI, "libcuda.so.1"), os.path.join(drv, "libcuda.so.1"))
    real = set()
    for prog in ("cuda_calls", "cuda_calls_ptsz"):
        got, _ = requests([os.path.join(B, "gpu-real", prog), os.path.join(d, "cc.json")],
                          {"LD_LIBRARY_PATH": drv}, stdin="go\n")
        real |= got
    check(len(real) > 300, "the real libcudart.so.13 asked the stand-in driver for %d "
          "functions through cuGetProcAddress_v2" % len(real))
    check(ours <= real, "each request of the stand-in runtime is one the real runtime makes%s"
          % ("" if ours <= real else ": not %s" % sorted(ours - real)))
else:
    print("note: nvcc is not installed: the real runtime's requests are not compared")

trace = subprocess.run([os.path.join(GPU_WL, "gpu_train_ptsz"), "--gpus", "1", "--steps", "1",
                        "--launches", "1", "--no-nccl"], capture_output=True, text=True,
                       env=dict(env, SONDE_STANDIN_TRACE="1"), timeout=60).stderr
check(re.search(r"libcuda: cuLaunchKernel_ptsz\(.*\) = 0", trace) and
      not re.search(r"libcuda: cuLaunchKernel\(", trace),
      "cudaLaunchKernel_ptsz enters the driver's cuLaunchKernel_ptsz, not cuLaunchKernel")
check("libcuda: cuCtxSynchronize_v2(" in trace,
      "cudaDeviceSynchronize enters cuCtxSynchronize_v2")

# --- record ------------------------------------------------------------------
JOB = [os.path.join(GPU_WL, "gpu_blas"), "--threads", "4", "--gpus", "2", "--iters", "30"]
out = os.path.join(d, "blas.folded")
p = run([SONDE, "record", "--gpu", "-o", out, "--"] + JOB, env=env)
check(p.returncode == 0, "record --gpu of gpu_blas exits 0")
truth = json.loads(p.stdout.strip().splitlines()[-1])
leaves = collections.Counter()
for frames, n in parse_folded(os.path.join(d, "blas.gpu_launch.folded")):
    leaves[frames[-1]] += n
want = dict(truth["launches"]["by_kernel"])
# Its graphs: one built node by node (named by the job: a kernel of its own and the
# library's gemm), and one captured from the library's launches: two gemms, and a gemv
# on a side stream that joined the capture through an event.
built = sum(n for k, n in want.items() if k.startswith("[CUDA graph: "))
check(built > 0, "gpu_blas launched its built graph (%d times)" % built)
gemm = next(k for k in want if k.startswith("sm90_xmma_gemm"))
gemv = next(k for k in want if k.startswith("void gemv2T_kernel"))
want["[CUDA graph: %s \u00d72, %s]" % (gemm, gemv)] = (
    truth["launches"]["by_api"]["cudaGraphLaunch"] - built)
check(dict(leaves) == want, "record: launches per kernel %s%s" % (
    want, "" if dict(leaves) == want else " -- profile: %s" % dict(leaves)))
check("[unknown kernel]" not in leaves, "record: no launch is [unknown kernel]")
for frames, _ in parse_folded(os.path.join(d, "blas.gpu_launch.folded")):
    if frames[-1].startswith("sm90_xmma_gemm"):
        check("sbSgemm" in frames and "blas_thread" in frames,
              "record: a library launch is reached from sbSgemm, from the job's blas_thread")
        break

# --- agent, shipping to a server ---------------------------------------------
srv = Server(os.path.join(d, "data"))
a = Agent(["--no-cpu", "--window", "1", "--server", "http://127.0.0.1:%d" % srv.port],
          env=standin_env())
try:
    t0 = int(time.time() * 1000) - 1000
    w = Workload("gpu_blas", JOB[1:])
    t, pid = w.truth, w.pid
    total = t["launches"]["total"]
    m = wait_for(lambda: (lambda m: m if value(m, "sonde_cuda_launches_total", pid=pid) == total
                          else None)(a.metrics()), 15,
                 "sonde_cuda_launches_total{pid=%d} to reach %d" % (pid, total))
    check(True, "agent: sonde_cuda_launches_total = %d, the job's launches" % total)
    # The job's last frees may come after its last launch: each device's
    # numbers are polled until they match or time runs out.
    for dev in t["memory"]["devices"]:
        g = dev["device"]

        def memory(g=g):
            m = a.metrics()
            return dict(current_bytes=value(m, "sonde_gpu_memory_used_bytes", pid=pid, gpu_id=g),
                        peak_bytes=value(m, "sonde_gpu_memory_peak_bytes", pid=pid, gpu_id=g),
                        allocs=value(m, "sonde_cuda_memory_allocations_total", pid=pid,
                                     gpu_id=g),
                        frees=value(m, "sonde_cuda_memory_frees_total", pid=pid, gpu_id=g))
        want_m = {k: dev[k] for k in ("current_bytes", "peak_bytes", "allocs", "frees")}
        got = poll_until(memory, lambda v: v == want_m, 10)
        check(got == want_m, "agent: device %d memory (VMM, library workspace, pool) %s%s"
              % (g, want_m, "" if got == want_m else " -- agent %s" % got))
    drv = os.path.join(GPU_SI, "libcuda.so.1")
    want_c = {"cuLaunchKernel": t["launches"]["by_api"]["cuLaunchKernel"],
              "cuLaunchKernelEx": t["launches"]["by_api"]["cuLaunchKernelEx"],
              "cuGraphLaunch": t["launches"]["by_api"]["cudaGraphLaunch"],
              "cuKernelGetFunction": t["threads"], "cuCtxSynchronize": 0}

    def probe_calls():
        m = a.metrics()
        return {f: value(m, "sonde_agent_gpu_probe_calls_total", file=drv, function=f)
                for f in want_c}
    # Read by the agent's loop about once a second.
    calls = poll_until(probe_calls, lambda c: c == want_c, 10)
    check(calls == want_c, "agent: sonde_agent_gpu_probe_calls_total of the driver's functions "
          "%s%s" % (want_c, "" if calls == want_c else " -- agent %s" % calls))
    pq = '{type="gpu_launch",pid="%d"}' % pid

    def stored():
        st, _, body = srv.get("/api/v1/top", query=pq, limit=50, **{"from": t0, "until": "now"})
        top = json.loads(body) if st == 200 else None
        return top if top and top["total"] >= total else None
    top = wait_for(stored, 30, "the job's %d launches at the server" % total)
    by = {f["name"]: f["self"] for f in top["functions"] if f["module"] == "[cuda]"}
    for kernel, count in t["launches"]["by_kernel"].items():
        check(by.get(kernel) == count, "agent: %s launched %d times (server: %s)"
              % (kernel[:40], count, by.get(kernel)))
    check("[unknown kernel]" not in by, "agent: no launch is [unknown kernel]")
    check(w.release() == 0, "gpu_blas exits 0")
finally:
    a.stop()
    srv.stop()
print("ok")
