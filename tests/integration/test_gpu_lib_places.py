"""CUDA where real jobs get it from, not where the toolkit puts it (issue 23,
item 4): a runtime loaded from a Python wheel's directory
(site-packages/nvidia/cu13/lib, as PyTorch's pip wheels ship it), a training
job linked against a conda environment's lib/, and a runtime in a
container's filesystem (a mount namespace of its own, where the path the
process maps does not exist for the agent) are each probed like a runtime
linked against the toolkit: the agent, started before them and without its
library search (so nothing was attached ahead), holds each job in its
loader, attaches to the new file, and counts every launch and allocation
the job made; sonde_agent_gpu_probe_calls_total names the container's file
by the path the job mapped, not by /proc/PID/map_files, and
sonde_agent_gpu_process_library lists each job's CUDA files as attached --
and a file named like the runtime that holds none of its functions as
no_functions."""
import json
import os
import shutil
import subprocess
import sys

from agent_test import GPU_SI, GPU_WL, Agent, need_standins, poll_until, series, value
from sonde_test import *

need_bpf()
need_standins()
d = tmpdir()
# The node's driver, where the loader looks; each runtime is a copy (a file
# the agent never saw).
driver = os.path.join(d, "driver")
os.makedirs(driver)
shutil.copy(os.path.join(GPU_SI, "libcuda.so.1"), driver)
ENV = dict(os.environ, SONDE_STANDIN_KERNEL_US="5", LD_LIBRARY_PATH=driver)


def copy_runtime(libdir):
    os.makedirs(libdir, exist_ok=True)
    shutil.copy(os.path.join(GPU_SI, "libcudart.so.13"), libdir)
    return os.path.join(libdir, "libcudart.so.13")


def held(cmd, env):
    """Runs a workload with --hold: (process, truth)."""
    print("$ " + " ".join(cmd))
    p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=env)
    line = p.stdout.readline()
    if not line.startswith("{"):
        p.kill()
        fail("%s printed no truth line: %r %s" % (cmd[0], line, p.stderr.read()[-2000:]))
    return p, json.loads(line)


def library_state(a, pid, path, want):
    """Waits until sonde_agent_gpu_process_library says path's state in pid."""
    got = poll_until(
        lambda: [l.get("state") for l, v in series(a.metrics(), "sonde_agent_gpu_process_library")
                 if l.get("pid") == str(pid) and l.get("file") == path],
        lambda g: g == [want], 10)
    check(got == [want], "sonde_agent_gpu_process_library{pid=%d, file=%s}: %s (agent: %s)"
          % (pid, path, want, got))


def counted(a, t, what):
    """Waits until the agent's counts for the job equal its truth line."""
    pid = t["pid"]
    dev = t["memory"]["devices"][0]
    want = (t["launches"]["total"], dev["allocs"], dev["frees"], dev["current_bytes"])

    def seen():
        m = a.metrics()
        return (value(m, "sonde_cuda_launches_total", pid=pid) or 0,
                value(m, "sonde_cuda_memory_allocations_total", pid=pid, gpu_id=0),
                value(m, "sonde_cuda_memory_frees_total", pid=pid, gpu_id=0),
                value(m, "sonde_gpu_memory_used_bytes", pid=pid, gpu_id=0))
    got = poll_until(seen, lambda g: g == want, 10)
    check(got == want, "%s: launches, allocations, frees, bytes held on GPU 0 %s%s"
          % (what, want, "" if got == want else " -- agent %s" % (got,)))


a = Agent(["--no-cpu", "--no-library-search", "--window", "1"], env=dict(os.environ))
try:
    # --- a pip wheel's runtime, loaded late as PyTorch loads it -------------
    wheel = copy_runtime(os.path.join(d, "venv", "lib", "python3.11", "site-packages", "nvidia",
                                      "cu13", "lib"))
    p, t = held([os.path.join(GPU_WL, "gpu_dlopen"), wheel, "--delay-ms", "200", "--allocs", "8",
                 "--hold"], ENV)
    counted(a, t, "wheel (site-packages/nvidia/cu13/lib)")
    library_state(a, t["pid"], wheel, "attached")
    library_state(a, t["pid"], os.path.join(driver, "libcuda.so.1"), "attached")
    p.stdin.close()
    check(p.wait(30) == 0, "the wheel's job exits 0")

    # --- a job linked against a conda environment's runtime -----------------
    env_lib = os.path.join(d, "conda", "envs", "train", "lib")
    copy_runtime(env_lib)
    shutil.copy(os.path.join(GPU_SI, "libnccl.so.2"), env_lib)
    p, t = held([os.path.join(GPU_WL, "gpu_train"), "--gpus", "1", "--steps", "4", "--no-nccl",
                 "--hold"], dict(ENV, LD_LIBRARY_PATH=env_lib + ":" + driver))
    counted(a, t, "conda (envs/train/lib)")
    p.stdin.close()
    check(p.wait(30) == 0, "the conda job exits 0")

    # --- a container's runtime: a path only its mount namespace has ---------
    if shutil.which("unshare") and shutil.which("mount"):
        files = os.path.join(d, "image")
        copy_runtime(files)
        mnt = os.path.join(d, "rootfs-usr-lib")
        os.makedirs(mnt)
        inner = os.path.join(mnt, "libcudart.so.13")
        script = ("mount -t tmpfs sonde-ctr %s && cp %s/libcudart.so.13 %s/ && exec %s %s "
                  "--delay-ms 200 --allocs 8 --hold" %
                  (mnt, files, mnt, os.path.join(GPU_WL, "gpu_dlopen"), inner))
        p, t = held(["unshare", "-m", "--propagation", "private", "sh", "-c", script], ENV)
        check(not os.path.exists(inner), "the container's runtime is not at %s for the agent"
              % inner)
        counted(a, t, "container (its own mount namespace)")
        library_state(a, t["pid"], inner, "attached")
        # The per-probe counts are read about once a second.
        n = poll_until(lambda: value(a.metrics(), "sonde_agent_gpu_probe_calls_total",
                                     file=inner, function="cudaMalloc"), lambda n: n == 8, 10)
        check(n == 8, "the container's file is named by the path the job mapped, %s "
              "(cudaMalloc: %s calls)" % (inner, n))
        p.stdin.close()
        check(p.wait(30) == 0, "the container's job exits 0")
    else:
        print("note: unshare or mount missing: the container case is not run")
    # A file named like the runtime that holds none of its functions (a
    # build's leftover, another vendor's shim): mapped, not attached, said.
    fake = os.path.join(d, "shim", "libcudart.so.12")
    os.makedirs(os.path.dirname(fake))
    src = os.path.join(d, "shim.c")
    open(src, "w").write("int sonde_shim_answer(void) { return 42; }\n")
    subprocess.run(["cc", "-shared", "-fPIC", "-o", fake, src], check=True)
    p = subprocess.Popen([sys.executable, "-c",
                          "import ctypes, os, sys; ctypes.CDLL(%r); print(os.getpid(), flush=True); "
                          "sys.stdin.read()" % fake], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         text=True)
    pid = int(p.stdout.readline())
    library_state(a, pid, fake, "no_functions")
    p.stdin.close()
    p.wait(30)
    holds = value(a.metrics(), "sonde_agent_gpu_holds_total")
    check(holds is not None and holds >= 3, "each job was held for its attach (%s holds)" % holds)
except SystemExit:
    a.dump_log()
    raise
finally:
    a.stop()
print("ok")
