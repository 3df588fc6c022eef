"""The agent attaches to every CUDA/NCCL library file the machine has when it
starts -- one in a directory no loader path names (a virtualenv's, a build
tree's) included: its search of the local filesystems finds it before any
process maps it, so a job started afterwards from it needs no hold and its
first calls are counted. With --no-library-search the file is attached only
once a process maps it."""
import json
import os
import shutil
import subprocess

from agent_test import GPU_SI, GPU_WL, Agent, need_standins, value, wait_for
from sonde_test import *

need_bpf()
need_standins()
d = tmpdir()
os.makedirs(os.path.join(d, "venv", "lib", "workloads"))
shutil.copytree(GPU_SI, os.path.join(d, "venv", "lib", "standin"), symlinks=True)
bench = os.path.join(d, "venv", "lib", "workloads", "gpu_launch_bench")
shutil.copy(os.path.join(GPU_WL, "gpu_launch_bench"), bench)
lib = os.path.join(d, "venv", "lib", "standin", "libcudart.so.13")
env = dict(os.environ, SONDE_STANDIN_KERNEL_US="0")
env.pop("LD_LIBRARY_PATH", None)


def attached(a):
    return any(("attached to " + lib) in l for l in a.log)


a = Agent(["--no-cpu"], env=env)
try:
    # The search is over within a few minutes even on a cold filesystem.
    wait_for(lambda: value(a.metrics(), "sonde_agent_gpu_library_search_done") == 1, 300,
             "the search of the filesystems")
    m = a.metrics()
    check(value(m, "sonde_agent_gpu_library_search_files") > 1000,
          "the search looked at %d files" % value(m, "sonde_agent_gpu_library_search_files"))
    check(attached(a), "%s attached before any process mapped it" % lib)
    holds = value(m, "sonde_agent_gpu_holds_total")
    w = subprocess.Popen([bench, "-n", "250", "--hold"], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True, env=env, start_new_session=True)
    t = json.loads(w.stdout.readline())
    want = t["launches"]["total"]
    wait_for(lambda: value(a.metrics(), "sonde_cuda_launches_total", pid=t["pid"]) == want, 10,
             "the job's %d launches" % want)
    w.stdin.close()
    w.wait(30)
    check(True, "a job started from it: all %d launches counted" % want)
    m = wait_for(lambda: (lambda m: m if value(m, "sonde_agent_gpu_new_libraries_total") is not None
                          else None)(a.metrics()), 5, "the probe counters")
    check(value(m, "sonde_agent_gpu_holds_total") == holds,
          "and it was not held: its libraries were attached already")
except SystemExit:
    a.dump_log()
    raise
finally:
    a.stop()

a = Agent(["--no-cpu", "--no-library-search"], env=env)
try:
    check(value(a.metrics(), "sonde_agent_gpu_library_search_done") == 1,
          "--no-library-search: no search under way")
    check(not attached(a), "--no-library-search: the file is not attached at start")
finally:
    a.stop()
