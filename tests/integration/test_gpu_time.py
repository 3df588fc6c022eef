"""Each kernel's time on the GPU under the CPU stack that launched it (issue
24): `sonde record --gpu -- JOB` starts the job with Sonde's CUPTI library
(build/libsonde_cupti.so, through CUDA_INJECTION64_PATH; CUPTI here is the
stand-in, tests/gpu/standin/cupti.c), whose launch callbacks and kernel
records meet by correlation id, and writes x.gpu_time.folded: the launching
stack topped by the kernel's name, weighted by its nanoseconds on the GPU.

- gpu_train (C, runtime launches through host stubs, CUDA 13's <<<>>> and
  cudaLaunchKernelExC; a captured graph): per kernel, the GPU time is its
  kernels run (launches less those captured) x 37 us, the stand-in's kernel
  time; each stack is the launch profile's -- the launching thread's
  gpu_thread, the host stub, the kernel -- with no frame of CUDA's or
  CUPTI's above the host stub (and no uretprobe trampoline for the return
  address of the probed cudaLaunchKernel: the frame a walk from inside the
  runtime met as "[unknown]+0x7fffffffdfff").
- gpu_ctypes.py (Python through ctypes): the kernel's time is under the
  Python function that launched it and its caller, train -> launch_step.
- A job started with CUDA_INJECTION64_PATH pointing elsewhere keeps it:
  record does not override the user's, and then writes no gpu_time.
- `sonde agent`, shipping to a server: a job started after it with
  CUDA_INJECTION64_PATH set to the library has its kernels' GPU time stored
  as the gpu_time type, per kernel exactly."""
import collections
import json
import os
import subprocess
import time

from agent_test import Agent, GPU_SI, GPU_WL, need_standins, wait_for
from server_test import Server
from sonde_test import *

need_bpf()
need_standins()
if not os.path.exists(os.path.join(B, "libsonde_cupti.so")):
    skip("no %s/libsonde_cupti.so: built only where the CUDA toolkit's CUPTI headers are" % B)
d = tmpdir()
env = dict(os.environ, LD_LIBRARY_PATH=GPU_SI, SONDE_STANDIN_KERNEL_US="37")
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


# --- C, runtime launches --------------------------------------------------------
truth, prof, err = record("train", [os.path.join(GPU_WL, "gpu_train"), "--gpus", "1",
                                    "--steps", "4", "--no-nccl"])
check(prof is not None, "record wrote train.gpu_time.folded")
launches = truth["launches"]
ns = collections.Counter()
for frames, v in prof:
    ns[frames[-1]] += v
ran = sum(launches["by_kernel"].values()) - launches["captured"]
check(set(ns) == set(launches["by_kernel"]),
      "GPU time per kernel, named as the job names them: %s" % dict(ns))
check(sum(ns.values()) == ran * KERNEL_NS,
      "GPU time in all %d ns: the %d kernels run x 37 us" % (sum(ns.values()), ran))
check(all(v % KERNEL_NS == 0 and v // KERNEL_NS <= launches["by_kernel"][k]
          for k, v in ns.items()),
      "per kernel a whole number of 37 us runs, no more than its launches: %s"
      % {k: v // KERNEL_NS for k, v in ns.items()})
check(all(f[0] == "gpu_train" and f[-3] == "gpu_thread" and f[-2] == f[-1] for f, _ in prof),
      "each stack: ... gpu_thread, the host stub, the kernel (no CUDA or CUPTI frame, no "
      "uretprobe trampoline): %s" % [";".join(f[-4:]) for f, _ in prof][:3])
check("kernels" in err and "gpu_time" in err, "record says where the gpu_time profile went")

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
    check(prof and total == truth["launches"] * KERNEL_NS,
          "gpu_ctypes.py: %d ns on the GPU, its %d launches x 37 us" % (total, truth["launches"]))
    under = sum(v for f, v in prof or [] if all(c in f for c in chain))
    check(under == total, "all of it under the Python line that launched it (%s): %d of %d ns%s"
          % (" -> ".join(chain), under, total,
             "" if under == total else " -- %s" % [";".join(f) for f, _ in prof][:2]))
else:
    print("note: no %s: the Python case is not run" % PYTHON)

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
    p = subprocess.run([os.path.join(GPU_WL, "gpu_train"), "--gpus", "1", "--steps", "3",
                        "--no-nccl"], capture_output=True, text=True, timeout=120,
                       env=dict(env, CUDA_INJECTION64_PATH=os.path.join(B, "libsonde_cupti.so")))
    check(p.returncode == 0, "the job started after the agent exits 0")
    truth = json.loads([l for l in p.stdout.splitlines() if l.startswith("{")][-1])
    launches = truth["launches"]
    want_ns = (sum(launches["by_kernel"].values()) - launches["captured"]) * KERNEL_NS
    pq = '{type="gpu_time",pid="%d"}' % truth["pid"]

    def stored():
        st, _, body = srv.get("/api/v1/top", query=pq, limit=50, **{"from": t0, "until": "now"})
        top = json.loads(body) if st == 200 else None
        return top if top and top["total"] >= want_ns else None
    top = wait_for(stored, 30, "the job's %d ns of kernels at the server" % want_ns)
    by = {f["name"]: f["self"] for f in top["functions"] if f["module"] == "[cuda]"}
    check(top["total"] == want_ns and set(by) == set(launches["by_kernel"]),
          "agent: the job's gpu_time stored, %d ns in all, per kernel %s" % (top["total"], by))
finally:
    a.stop()
    srv.stop()
print("ok")
