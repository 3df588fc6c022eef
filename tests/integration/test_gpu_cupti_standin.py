"""The CUPTI stand-in (tests/gpu/standin/cupti.c, libcupti.so.13) that the CUPTI
library's tests stand on (issue 24), checked from a client: an injection library
(tests/gpu/workloads/cupti_dump.c) loaded by the stand-in driver through
CUDA_INJECTION64_PATH, as the real driver loads one, which subscribes, enables
the launch callbacks and kernel activity records, and writes what it was told.

- gpu_train (runtime launches: cudaLaunchKernel, CUDA 13's <<<>>>,
  cudaLaunchKernelExC; a graph of three captured kernels launched each step):
  one kernel record per kernel the job ran on the GPU (its launches less
  those captured into its graph, and the graph's at each of its launches,
  with the correlation id of that cudaGraphLaunch, as CUPTI gives them),
  named as the job's own
  account names it (mangled), each 37 us long (SONDE_STANDIN_KERNEL_US=37),
  on the host's wall clock (CUPTI's timestamps are the GPU's global timer, not
  the monotonic clock), in order on each stream; each record's correlation id
  is that of the runtime launch callback of the same kernel (not of the driver
  call the runtime made inside it); a second subscriber is refused
  (CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED), as the real CUPTI refuses
  one beside PyTorch's profiler.
- gpu_driver (driver launches: cuLaunchKernel, cuLaunchKernelEx, a module's
  and a library's kernels): each record's correlation id is a driver
  callback's.
- Buffers run out (the client hands out one of 4 KiB, then none): what did not
  fit is counted as dropped, records + dropped = the kernels run.
- Without CUDA_INJECTION64_PATH the library is not loaded: no dump.
- PC sampling (tests/gpu/workloads/pc_client.c, which checks itself): the
  resource domain's context callbacks at the primary context's first retain
  and last release, cuCtxCreate, cuCtxDestroy and the runtime's first call
  on a thread; PC sampling enabled and configured in CONTEXT_CREATED as
  NVIDIA's sample does; every sample, PC record and count per stall reason
  that cuptiPCSamplingGetData returns is the stand-in's rule's (cupti.c),
  recomputed sample by sample; a full PC table drops samples and fails the
  next read with CUPTI_ERROR_OUT_OF_MEMORY; Disable writes into the
  configured buffer; the header's errors (sizes, unknown contexts, calls
  before Enable, periods outside 5..31, unknown stall reasons, serialized
  mode and start/stop control refused); CUPTI_CBID_RESOURCE_MODULE_LOADED
  once per module, inside its first launch, its cubin naming the module's
  kernels, and every PC record's cubinCrc cuptiGetCubinCrc of that cubin.
- Memory records (tests/gpu/workloads/mem_client.c, which checks itself), on
  two devices: after cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMORY2), one
  CUpti_ActivityMemory4 record per successful allocation and release --
  cudaMalloc and cuMemAlloc (DEVICE), cudaMallocManaged and cuMemAllocManaged
  (MANAGED), cudaMallocAsync and cuMemAllocAsync (DEVICE from the device's pool:
  isAsync, the stream, the pool's fields), their frees by cudaFree, cuMemFree,
  cudaFreeAsync and cuMemFreeAsync (RELEASE, the kind and bytes released),
  cuMemCreate and cuMemRelease (the handle for an address; mappings make none)
  -- with its device, context (none on a thread without one), stream, pid and
  wall-clock time; none for a failed call; bytes allocated less released equal
  to what cudaMemGetInfo says is still in use; threads reusing each other's
  addresses see each address's records alternate allocation and release;
  nothing while the kind is disabled, and again once re-enabled.
- Graph, synchronization and memory pool records
  (tests/gpu/workloads/graph_sync_client.c, which checks itself):
  CUPTI_ACTIVITY_KIND_GRAPH_TRACE -- one CUpti_ActivityGraphTrace2 per graph
  launch (cudaGraphLaunch, cuGraphLaunch) with the launch's correlation id,
  its nodes' interval, graph id (cuptiGetGraphId), and no kernel record of its
  nodes, plain kernels recorded as before; while it is disabled, the nodes'
  kernel records carry graphId and graphNodeId (cuptiGetGraphNodeId);
  CUPTI_ACTIVITY_KIND_SYNCHRONIZATION -- one CUpti_ActivitySynchronization2
  per successful stream, context and event synchronize and stream wait event,
  runtime or driver, with its type, context, stream, event ids, an interval
  holding the end of the work it waited for, the call's correlation id, none
  for a failed call; a device's default pool under a release threshold
  (cudaMemPoolSetAttribute): MEMORY2 records' pool size (what it holds) and
  utilizedSize, cudaMemGetInfo counting what it holds, memory going back at
  a synchronization, and a CUpti_ActivityMemoryPool3 TRIMMED record per
  successful cudaMemPoolTrimTo / cuMemPoolTrimTo.
- gpu_train --pool-keep: its truth says the pool kept what its frees gave
  back below the threshold until the trim, and held nothing after it.
- The fake nvdisasm (tests/gpu/standin/nvdisasm, built into
  build/gpu/standin/bin) on the cubins pc_client was given: each kernel's
  code section, LDC, S2R, LDG.E.128 (predicated) and FFMA at 0x0, 0x10,
  0x20 and 0x30, where the stand-in's samples land; its refusals (an
  unknown option, no file, a file that is not a stand-in cubin) exit 1 with
  a "nvdisasm fatal" line."""
import collections
import json
import os
import re
import subprocess
import time

from agent_test import GPU_SI, GPU_WL, need_standins
from sonde_test import *

need_standins()
DUMP = os.path.join(GPU_WL, "libcupti_dump.so")
d = tmpdir()
KERNEL_NS = 37000


def run_job(name, args, extra=None):
    out = os.path.join(d, "%s-%d.jsonl" % (name, len(os.listdir(d))))
    env = dict(os.environ, SONDE_STANDIN_KERNEL_US="37", CUPTI_DUMP_OUT=out,
               CUDA_INJECTION64_PATH=DUMP, **(extra or {}))
    env.pop("LD_LIBRARY_PATH", None)
    p = subprocess.run([os.path.join(GPU_WL, name)] + args, capture_output=True, text=True,
                       env=env, timeout=120)
    check(p.returncode == 0, "%s exits 0 with the injection library (%d): %s"
          % (name, p.returncode, p.stderr[-1000:]))
    truth = json.loads([l for l in p.stdout.splitlines() if l.startswith("{")][-1])
    check(os.path.exists(out), "the injection library wrote %s" % out)
    rows = [json.loads(l) for l in open(out)]
    return truth, rows


def of(rows, t):
    return [r for r in rows if r["type"] == t]


# --- runtime launches --------------------------------------------------------------
t0 = time.time()
truth, rows = run_job("gpu_train", ["--gpus", "1", "--steps", "3", "--no-nccl"])
init = of(rows, "init")[0]
check(init["subscribe"] == 0 and init["enable"] == 0,
      "cuptiSubscribe and cuptiActivityEnable(CONCURRENT_KERNEL) succeed: %s" % init)
check(init["second_subscribe"] == 39,
      "a second subscriber is refused: CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED (39), "
      "got %d" % init["second_subscribe"])
kernels = of(rows, "kernel")
launches = truth["launches"]
graphs = launches["by_api"]["cudaGraphLaunch"]
ran = sum(launches["by_kernel"].values()) + (graphs - 1) * launches["captured"]
check(len(kernels) == ran, "one kernel record per kernel run: %d records, the job ran %d "
      "(%d launched, %d of them captured into its graph, launched %d times)"
      % (len(kernels), ran, sum(launches["by_kernel"].values()), launches["captured"], graphs))
names = collections.Counter(k["name"] for k in kernels)
symbols = set(launches["symbols"].values())
check(set(names) == symbols, "records named by the job's kernels' symbols: %s" % dict(names))
check(all(k["end"] - k["start"] == KERNEL_NS for k in kernels),
      "each record lasts the stand-in's 37 us on the GPU: %s"
      % sorted({k["end"] - k["start"] for k in kernels}))
check(all(abs(k["start"] / 1e9 - t0) < 300 for k in kernels),
      "timestamps are the wall clock's nanoseconds (first %d, the test started at %.0f s)"
      % (kernels[0]["start"], t0))
by_stream = collections.defaultdict(list)
for k in kernels:
    by_stream[(k["device"], k["stream"])].append((k["start"], k["end"]))
check(all(b[0] >= a[1] for runs in by_stream.values() for a, b in zip(sorted(runs), sorted(runs)[1:])),
      "the kernels of each stream run one after the other (%d streams)" % len(by_stream))
enters = {a["correlation"]: a for a in of(rows, "api") if a["site"] == "enter"}
graph_kernels = [k for k in kernels if k["correlation"] in enters and
                 enters[k["correlation"]]["name"] == "cudaGraphLaunch"]
check(all(k["correlation"] in enters and enters[k["correlation"]]["domain"] == 2 and
          (enters[k["correlation"]]["symbol"] == k["name"] or k in graph_kernels)
          for k in kernels),
      "each record's correlation id is a runtime launch callback's of the same kernel, or "
      "of the graph launch that ran it")
per_graph = collections.Counter(k["correlation"] for k in graph_kernels)
check(len(per_graph) == graphs and set(per_graph.values()) == {launches["captured"]},
      "each of the %d graph launches ran its %d kernels under its id: %s"
      % (graphs, launches["captured"], dict(per_graph)))
apis = collections.Counter(a["name"] for a in of(rows, "api") if a["site"] == "exit" and
                           a["domain"] == 2 and a["ret"] == 0)
check(sum(apis.values()) == sum(launches["by_kernel"].values()) + graphs,
      "a runtime callback per launch, graph launches included: %s" % dict(apis))
check(of(rows, "end")[0]["dropped"] == 0, "no record dropped")

# --- driver launches ----------------------------------------------------------------
truth, rows = run_job("gpu_driver", [])
kernels = of(rows, "kernel")
enters = {a["correlation"]: a for a in of(rows, "api") if a["site"] == "enter"}
check(kernels and all(k["correlation"] in enters and enters[k["correlation"]]["domain"] == 1
                      for k in kernels),
      "gpu_driver: each of its %d records' correlation ids is a driver launch callback's"
      % len(kernels))
check(collections.Counter(enters[k["correlation"]]["name"] for k in kernels).keys() >=
      {"cuLaunchKernel", "cuLaunchKernelEx"},
      "launched by cuLaunchKernel and cuLaunchKernelEx")

# --- buffers run out ----------------------------------------------------------------
truth, rows = run_job("gpu_train", ["--gpus", "1", "--steps", "3", "--no-nccl"],
                      {"CUPTI_DUMP_BUFFERS": "1", "CUPTI_DUMP_BUF_BYTES": "4096"})
kernels, end = of(rows, "kernel"), of(rows, "end")[0]
check(0 < len(kernels) < ran and len(kernels) + end["dropped"] == ran,
      "one 4 KiB buffer: %d records + %d dropped = the %d kernels run"
      % (len(kernels), end["dropped"], ran))

# --- not injected -------------------------------------------------------------------
out = os.path.join(d, "none.jsonl")
env = dict(os.environ, CUPTI_DUMP_OUT=out)
env.pop("CUDA_INJECTION64_PATH", None)
p = subprocess.run([os.path.join(GPU_WL, "gpu_train"), "--gpus", "1", "--steps", "1",
                    "--no-nccl"], capture_output=True, text=True, env=env, timeout=60)
check(p.returncode == 0 and not os.path.exists(out),
      "without CUDA_INJECTION64_PATH nothing is injected")

# --- PC sampling ----------------------------------------------------------------------
env = dict(os.environ)
for k in ("LD_LIBRARY_PATH", "CUDA_INJECTION64_PATH", "SONDE_STANDIN_TRACE"):
    env.pop(k, None)
cubins = os.path.join(d, "cubins")
os.makedirs(cubins)
env["PC_CLIENT_CUBIN_DIR"] = cubins
p = subprocess.run([os.path.join(GPU_WL, "pc_client")], capture_output=True, text=True, env=env,
                   timeout=60)
print(p.stdout, end="", flush=True)
passed = p.returncode == 0 and "checks passed" in p.stdout
check(passed, "pc_client: PC sampling as the rule says, every check passed%s"
      % ("" if passed else " (exit %d): %s" % (p.returncode, p.stderr[-1000:])))

# --- memory records -------------------------------------------------------------------
env = dict(os.environ, SONDE_STANDIN_GPUS="2")
for k in ("LD_LIBRARY_PATH", "CUDA_INJECTION64_PATH", "SONDE_STANDIN_TRACE"):
    env.pop(k, None)
p = subprocess.run([os.path.join(GPU_WL, "mem_client")], capture_output=True, text=True,
                   env=env, timeout=60)
print(p.stdout, end="", flush=True)
passed = p.returncode == 0 and "checks passed" in p.stdout and "skip:" not in p.stdout
check(passed, "mem_client: a MEMORY2 record per allocation and release, every check passed%s"
      % ("" if passed else " (exit %d): %s" % (p.returncode, p.stderr[-1000:])))

# --- graph, synchronization and memory pool records -------------------------------------
env = dict(os.environ)
for k in ("LD_LIBRARY_PATH", "CUDA_INJECTION64_PATH", "SONDE_STANDIN_TRACE",
          "SONDE_STANDIN_KERNEL_US"):
    env.pop(k, None)
for via in ("all", "0"):
    p = subprocess.run([os.path.join(GPU_WL, "graph_sync_client")], capture_output=True,
                       text=True, env=dict(env, SONDE_STANDIN_CUDART_VIA_DRIVER=via),
                       timeout=60)
    if via == "all":
        print(p.stdout, end="", flush=True)
    passed = p.returncode == 0 and "checks passed" in p.stdout
    check(passed, "graph_sync_client (the runtime %s): graph, synchronization and memory "
          "pool records, every check passed%s"
          % ("through the driver" if via == "all" else "on the fake GPU's table alone",
             "" if passed else " (exit %d): %s" % (p.returncode, (p.stdout + p.stderr)[-1500:])))

# --- gpu_train --pool-keep -------------------------------------------------------------
p = subprocess.run([os.path.join(GPU_WL, "gpu_train"), "--gpus", "1", "--steps", "3",
                    "--no-nccl", "--pool-keep", str(32 << 20)], capture_output=True, text=True,
                   env=env, timeout=60)
truth = json.loads([l for l in p.stdout.splitlines() if l.startswith("{")][-1]) \
    if p.returncode == 0 else {}
keep = truth.get("pool_keep", {})
check(keep.get("set") and keep.get("trimmed") and keep.get("release_threshold") == 32 << 20
      and keep.get("reserved_before_trim") == 8 << 20 and keep.get("reserved_after_trim") == 0,
      "gpu_train --pool-keep 32 MiB: the pool kept its 8 MiB activation buffer after the steps "
      "and held nothing after cudaMemPoolTrimTo(0): %s (exit %d)" % (keep, p.returncode))

# --- the fake nvdisasm ----------------------------------------------------------------
NVDISASM = os.path.join(GPU_SI, "bin", "nvdisasm")
WANT = {0x0: "LDC", 0x10: "S2R", 0x20: "LDG.E.128", 0x30: "FFMA", 0x40: "EXIT", 0x50: "BRA"}
INSN = re.compile(r"^ {8}/\*([0-9a-f]{4})\*/ +(?:@!?U?P[0-7T] +)?([A-Z][A-Z0-9_.]*)[ ;]")
files = sorted(os.listdir(cubins))
check(len(files) == 5, "pc_client wrote the 5 cubins it was told of: %s" % files)
for name in files:
    path = os.path.join(cubins, name)
    kernels = open(path).read().split("\n")[1:-1]
    p = subprocess.run([NVDISASM, "-c", path], capture_output=True, text=True, timeout=30)
    check(p.returncode == 0 and not p.stderr, "nvdisasm -c %s exits 0 (%d): %s"
          % (name, p.returncode, p.stderr))
    code = collections.defaultdict(dict)
    fn = None
    for line in p.stdout.splitlines():
        m = re.match(r'^\t\.section\t\.text\.(\S+),"ax",@progbits$', line)
        if m:
            fn = m.group(1)
        m = INSN.match(line)
        if m and fn:
            code[fn][int(m.group(1), 16)] = m.group(2)
    check(list(code) == kernels and all(code[k] == WANT for k in kernels),
          "nvdisasm: %s's kernels %s, each LDC, S2R, LDG.E.128, FFMA at 0x0..0x30 (then EXIT, "
          "BRA): %s" % (name, kernels, dict(code)))
    p = subprocess.run([NVDISASM, "--print-code", path], capture_output=True, text=True,
                       timeout=30)
    check(p.returncode == 0 and "/*0020*/              @!P0 LDG.E.128 " in p.stdout,
          "nvdisasm --print-code: the same, the predicate before the opcode column")
bad = os.path.join(d, "not-a-cubin")
with open(bad, "wb") as f:
    f.write(b"\x7fELF not a stand-in cubin")
for args, why in ((["-x", path], "an unknown option"), ([], "no file"),
                  (["-c", os.path.join(d, "missing")], "a missing file"),
                  (["-c", bad], "a file that is not a stand-in cubin")):
    p = subprocess.run([NVDISASM] + args, capture_output=True, text=True, timeout=30)
    check(p.returncode == 1 and p.stderr.startswith("nvdisasm fatal") and not p.stdout,
          "nvdisasm with %s: exit 1 (%d), %s" % (why, p.returncode, p.stderr.strip()))
print("ok")
