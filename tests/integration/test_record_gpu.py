"""sonde record --gpu -- a stand-in training job (tests/gpu/): beside the CPU
profile it writes a gpu_launch profile -- the launching thread's stack topped
by the kernel's name, one count per launch -- and a gpu_wait profile -- the
waiting stack topped by the synchronize call, weighted by nanoseconds. The
launches per kernel equal the job's own count exactly (host stubs named,
CUDA 13 kernel handles resolved to their stubs, a graph launch as "[CUDA
graph: ...]" naming the kernels captured into it),
each is reached from the launching thread's function, and the time per wait
API agrees with the job's own clock. pprof output is read by go tool pprof.
The job's libraries are on LD_LIBRARY_PATH, where the loader finds them.
Attached to a running nvcc-built program (-p) after it looked its kernels
up, the kernels are still named -- from nvcc's __device_stub__ callers."""
import collections
import json
import os
import re
import shutil
import time
import subprocess

from agent_test import GPU_SI, GPU_WL, need_standins
from sonde_test import *

need_bpf()
need_standins()
d = tmpdir()
env = dict(os.environ, LD_LIBRARY_PATH=GPU_SI, SONDE_STANDIN_KERNEL_US="5")
job = [os.path.join(GPU_WL, "gpu_train"), "--gpus", "2", "--steps", "5"]

out = os.path.join(d, "train.folded")
p = run([SONDE, "record", "--gpu", "-o", out, "--"] + job, env=env)
check(p.returncode == 0, "record --gpu exits with the job's code 0")
truth = json.loads(p.stdout.strip().splitlines()[-1])
launch = parse_folded(os.path.join(d, "train.gpu_launch.folded"))
wait = parse_folded(os.path.join(d, "train.gpu_wait.folded"))

by_leaf = collections.Counter()
for frames, n in launch:
    by_leaf[frames[-1]] += n
want = dict(truth["launches"]["by_kernel"])
# The job's graph: matmul_tile twice and softmax_fwd, captured from its stream.
GRAPH = ("[CUDA graph: matmul_tile(float*, float*, float*, int) \u00d72, "
         "softmax_fwd(float*, int)]")
want[GRAPH] = truth["launches"]["by_api"]["cudaGraphLaunch"]
check(dict(by_leaf) == want, "launches per kernel %s%s" % (
    want, "" if dict(by_leaf) == want else " -- profile: %s" % dict(by_leaf)))
check(all(f[0] == "gpu_train" and "gpu_thread" in f[:-1] for f, _ in launch),
      "every launch is reached from the launching thread's gpu_thread")
# Launched through a host stub of the same name (nvcc's), below the kernel.
for f, _ in launch:
    if f[-1] != GRAPH:
        check(f[-2] == f[-1], "%s launched from its host stub" % f[-1])
        break

by_api = collections.Counter()
for frames, ns in wait:
    by_api[frames[-1]] += ns
for api, w in truth["waits"]["by_api"].items():
    got = by_api.get(api, 0)
    check(w["total_ns"] - w["count"] * 200000 <= got <= w["total_ns"] * 1.001 + 1000,
          "%s: %d ns waited in the profile, %d by the job's clock" % (api, got, w["total_ns"]))
check(all("gpu_thread" in f for f, _ in wait), "every wait is reached from gpu_thread")

# pprof, read by go tool pprof.
if shutil.which("go"):
    out = os.path.join(d, "train.pb.gz")
    p = run([SONDE, "record", "-q", "--gpu", "-o", out, "--"] + job, env=env)
    check(p.returncode == 0, "record --gpu -o x.pb.gz exits 0")
    truth = json.loads(p.stdout.strip().splitlines()[-1])
    top = run(["go", "tool", "pprof", "-top", "-nodecount=50",
               os.path.join(d, "train.gpu_launch.pb.gz")])
    check(top.returncode == 0, "go tool pprof reads the gpu_launch profile")
    flat = {}
    for line in top.stdout.splitlines():
        # "94launches 35.34% 35.34% 94launches 35.34%  matmul_tile(...)"
        m = re.match(r"\s*(\d+)launches\s+\S+\s+\S+\s+\S+\s+\S+\s+(.*)$", line)
        if m:
            flat[m.group(2)] = flat.get(m.group(2), 0) + int(m.group(1))
    for k, n in truth["launches"]["by_kernel"].items():
        check(flat.get(k) == n, "go tool pprof: %s flat %s (want %d)" % (k, flat.get(k), n))
else:
    print("note: go is not installed (golang-go): the pprof check is skipped")

p = run([SONDE, "record", "--gpu", "-o", "-", "--", "true"])
check(p.returncode == 125 and "--gpu" in p.stderr,
      "--gpu with -o - is refused: 125, a failure of sonde's with a command")

# Attached late to a program built by nvcc: its kernel handles were looked up
# before the probes were there, and are named from nvcc's stubs.
nvcc_prog = os.path.join(GPU_WL, "gpu_nvcc")
if os.path.exists(nvcc_prog):
    env20 = dict(env, SONDE_STANDIN_KERNEL_US="20")
    # Launching until it is killed: a job of a fixed length could end
    # before the recording is attached on a busy machine (none of its
    # launches seen), or before it had used a fifth of a second of CPU on
    # an idle one.
    job = subprocess.Popen([nvcc_prog, "1000000000"], stdout=subprocess.PIPE, env=env20,
                           text=True)
    try:
        # Its kernels are looked up at their first launches, at its start:
        # a fifth of a second of its CPU is well past them.
        wait_until(lambda: cpu_seconds(job.pid) >= 0.2, 60, "the nvcc program to run")
        out = os.path.join(d, "late.folded")
        p = run([SONDE, "record", "-q", "--gpu", "-p", str(job.pid), "-d", "2", "-o", out])
        check(p.returncode == 0, "record --gpu -p on a running nvcc program exits 0")
    finally:
        job.kill()
        job.wait()
    leaves = collections.Counter()
    for frames, n in parse_folded(os.path.join(d, "late.gpu_launch.folded")):
        leaves[frames[-1]] += n
    print(leaves)
    check(leaves and set(leaves) <= {"saxpy(float, float const*, float*, int)",
                                     "scale_rows(float*, int, int, float)"},
          "late attach: every launch named after its kernel %s" % dict(leaves))
else:
    print("note: nvcc is not installed: the nvcc-built program is not tested")
