"""A process that loads a CUDA runtime no probe is on is held and probed
from its first call even when another process has filled the probes' ring
buffer: the loader's records (GPU_EV_NEW_LIB, _LOADED) go through a ring
of their own (bpf/gpu.bpf.c `control`), so a full event ring costs the
flooding process events -- counted, per pid -- and never another process's
attach.

The agent (SONDE_GPU_RINGBUF=64K) is started without its library search, a
flood job (tests/gpu/workloads/gpu_deep.py: 50,000 launches/s with ~80-frame
stacks, each beside an allocation and a free) after it. Three times: the
agent is stopped (SIGSTOP) until the flood has run long enough to fill the
ring to its last bytes (0.05 s of its CPU: thousands of records, the ring
holds about fifty), a short job starts with a copy of the stand-in runtime
no probe has seen and no terminal, and the agent goes on once the job is
held in its loader (or, were the loader's record lost, has run). Every
launch the job made is then counted or counted as lost for its pid: none
was made unprobed. Before the control ring the loader's record was lost
in the full ring, the job ran on unheld, and its launches went unseen."""
import json
import os
import select
import shutil
import signal
import subprocess

from agent_test import GPU_SI, GPU_WL, Agent, need_standins, poll_until, series, value, wait_for
from sonde_test import *

need_bpf()
need_standins()
PYTHON = "/usr/bin/python3"
if not os.path.exists(PYTHON):
    skip("no %s (Debian's python3)" % PYTHON)
FLOOD = [PYTHON, os.path.join(ROOT, "tests", "gpu", "workloads", "gpu_deep.py"),
         os.path.join(B, "gpu"), "--rate", "50000", "--duration", "30", "--allocs"]
JOBS = 3
d = tmpdir()
driver = os.path.join(d, "driver")
os.makedirs(driver)
shutil.copy(os.path.join(GPU_SI, "libcuda.so.1"), driver)
env = dict(os.environ, SONDE_STANDIN_KERNEL_US="0")
env.pop("LD_LIBRARY_PATH", None)


def per_pid(m, name, pid):
    return sum(v for l, v in series(m, name) if l.get("pid") == str(pid))


def start_job(i):
    """gpu_train on a fresh copy of the runtime, held (--hold) until released."""
    libdir = os.path.join(d, "rt%d" % i)
    os.makedirs(libdir)
    shutil.copy(os.path.join(GPU_SI, "libcudart.so.13"), libdir)
    cmd = [os.path.join(GPU_WL, "gpu_train"), "--gpus", "1", "--steps", "2", "--no-nccl",
           "--hold"]
    p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, start_new_session=True,
                         env=dict(env, LD_LIBRARY_PATH=libdir + ":" + driver))
    return p


def cpu_ticks(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


def state(pid):
    with open("/proc/%d/stat" % pid) as f:
        return f.read().rsplit(")", 1)[1].split()[0]


TICKS = os.sysconf("SC_CLK_TCK")
a = Agent(["--no-cpu", "--no-library-search"], env=dict(env, SONDE_GPU_RINGBUF="64K"))
flood = None
jobs = []
try:
    wait_for(lambda: value(a.metrics(), "sonde_agent_gpu_library_search_done") == 1, 60,
             "the agent's start")
    flood = subprocess.Popen(FLOOD, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             stdin=subprocess.DEVNULL, env=env, start_new_session=True)
    wait_for(lambda: (value(a.metrics(), "sonde_agent_gpu_drops_total") or 0) > 0, 30,
             "the flood to fill the ring (sonde_agent_gpu_drops_total > 0)")
    check(True, "the flood fills the 64 KiB ring")
    for i in range(JOBS):
        a.p.send_signal(signal.SIGSTOP)
        try:
            t0 = cpu_ticks(flood.pid)
            # Holds last 2 s past the agent's last poll: the job must get to
            # its loader within that.
            wait_for(lambda: cpu_ticks(flood.pid) - t0 >= max(1, TICKS // 20), 1.5,
                     "the flood to run 0.05 s of CPU with the agent stopped")
            p = start_job(i)
            jobs.append(p)
            wait_for(lambda: state(p.pid) == "T" or p.poll() is not None or
                     select.select([p.stdout], [], [], 0)[0], 10,
                     "job %d to be held in its loader, or to run" % i)
            held = state(p.pid) == "T"
        finally:
            a.p.send_signal(signal.SIGCONT)
        line = p.stdout.readline()
        if not line.startswith("{"):
            fail("gpu_train printed no truth line: %r %s" % (line, p.stderr.read()[-2000:]))
        t = json.loads(line)
        pid, launches = t["pid"], t["launches"]["total"]
        check(held, "job %d (pid %d) was held in its loader with the event ring full" % (i, pid))

        def accounted():
            m = a.metrics()
            return (per_pid(m, "sonde_cuda_launches_total", pid) +
                    per_pid(m, "sonde_agent_gpu_lost_events_total", pid))
        # Counted or lost, every launch shows within a few of the agent's
        # second-long reads; one made before the attach never does.
        got = poll_until(accounted, lambda n: n >= launches, 15)
        check(got >= launches, "job %d (pid %d): its %d launches counted or lost (%d), none "
              "made before its new runtime was probed" % (i, pid, launches, got))
        p.stdin.close()
        check(p.wait(30) == 0, "job %d exits 0" % i)
    check(flood.poll() is None, "the flood ran throughout")
    m = a.metrics()
    missed = sum(v for l, v in series(m, "sonde_agent_gpu_hold_missed_total"))
    check(missed == 0, "no job missed its hold (sonde_agent_gpu_hold_missed_total %d)" % missed)
except SystemExit:
    a.p.send_signal(signal.SIGCONT)
    a.dump_log()
    raise
finally:
    for p in jobs:
        if p.poll() is None:
            p.kill()
            p.wait()
    if flood:
        flood.kill()
        flood.wait()
    rc = a.stop()
check(rc == 0, "the agent exits 0 on SIGINT")
print("ok")
