"""No GPU job is too fast to be seen. A job (gcc -O2, linked to a stand-in
libcudart) that launches its kernels in its first milliseconds and exits:

- under `sonde record --gpu -- JOB`, 20 runs out of 20 give the job's exact
  launch count and kernel name, its launching stack named, though each run
  uses a copy of the libraries no probe has seen (attached before the job
  runs, from what its loader resolves);
- a job that dlopen()s a copy of the runtime never seen before and calls it
  at once: held in the loader until the probes are on it, so its first
  allocation is counted (record and agent, 20 runs each);
- the agent, with jobs started after it from libraries it has never seen:
  exact launches and allocations, 20 runs out of 20.

The jobs run in a session of their own (no controlling terminal, as a batch
job or a service): the agent holds only those (docs/cli.md)."""
import collections
import json
import os
import shutil
import signal
import subprocess
import time

from agent_test import GPU_SI, GPU_WL, Agent, need_standins, poll_until, value, wait_for
from sonde_test import *

RUNS = int(os.environ.get("FAST_JOB_RUNS", "20"))

need_bpf()
need_standins()
top = tmpdir()


def fresh_copy(n):
    """A directory laid out as build/gpu (workloads/ beside standin/), with
    copies of the libraries: files no probe has seen."""
    d = os.path.join(top, "copy%s" % n)
    os.makedirs(os.path.join(d, "workloads"))
    shutil.copytree(GPU_SI, os.path.join(d, "standin"), symlinks=True)
    for prog in ("gpu_launch_bench", "gpu_dlopen"):
        shutil.copy(os.path.join(GPU_WL, prog), os.path.join(d, "workloads"))
    return d


def truth_of(stdout):
    return json.loads(stdout.strip().splitlines()[-1])


env = dict(os.environ, SONDE_STANDIN_KERNEL_US="0")
env.pop("LD_LIBRARY_PATH", None)

# --- record: a job that launches at once and exits --------------------------
for i in range(RUNS):
    d = fresh_copy(i)
    out = os.path.join(d, "job.folded")
    job = [os.path.join(d, "workloads", "gpu_launch_bench"), "-n", "250"]
    p = subprocess.run([SONDE, "record", "-q", "--gpu", "-o", out, "--"] + job, env=env,
                       capture_output=True, text=True, timeout=120)
    if p.returncode != 0:
        print(p.stderr[-2000:])
    check(p.returncode == 0, "run %d: record --gpu exits with the job's 0" % i)
    t = truth_of(p.stdout)
    got = collections.Counter()
    for frames, n in parse_folded(os.path.join(d, "job.gpu_launch.folded")):
        got[frames[-1]] += n
        if not ("main" in frames and "launch_one" in frames):
            # What record said (its warnings: process records the kernel
            # dropped, stacks left to userspace) tells why.
            print(p.stderr[-2000:])
            fail("run %d: a launch's stack is not named: %s" % (i, frames))
    want = t["launches"]["by_kernel"]
    if dict(got) != want:
        fail("run %d: launches per kernel %s, the job says %s" % (i, dict(got), want))
check(True, "%d runs of a job that launches at once and exits: every launch counted and "
      "named, from main" % RUNS)

# --- record: dlopen of a runtime never seen, called at once -----------------
# gpu_dlopen has no launch; its allocations show in its wait-free run only
# through the agent's metrics -- so record checks it starts and ends well,
# and the agent below counts.
d = fresh_copy("dl")
lib = os.path.join(d, "standin", "libcudart.so.13")
p = subprocess.run([SONDE, "record", "-q", "--gpu", "-o", os.path.join(d, "dl.folded"), "--",
                    os.path.join(d, "workloads", "gpu_dlopen"), lib, "--delay-ms", "0"],
                   env=env, capture_output=True, text=True, timeout=120)
check(p.returncode == 0 and truth_of(p.stdout)["memory"]["devices"],
      "record --gpu of a job that dlopen()s an unseen runtime: it runs and exits 0")
if "attached to " + lib not in p.stderr:
    print(p.stderr)
check("attached to " + lib in p.stderr, "the dlopen()ed file was attached (%s)" % lib)

# --- the agent: jobs started after it, from files it has never seen ---------
# Without its background search of the filesystems (test_agent_libsearch's
# part): a search could attach a fresh copy before its job starts, and that
# job would not be held; and at nice 19 beside busy CPUs the search of a
# large filesystem takes minutes. The jobs meet files no probe is on.
a = Agent(["--no-cpu", "--window", "60", "--no-library-search"], env=env)


def run_held(cmd):
    """Starts cmd in its own session, reads its truth line, leaves it held."""
    w = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)
    line = w.stdout.readline()
    if not line.startswith("{"):
        w.kill()
        fail("%s printed no truth line: %r %s" % (cmd[0], line, w.stderr.read()[-2000:]))
    return w, json.loads(line)


def missed(m):
    return {r: value(m, "sonde_agent_gpu_hold_missed_total", reason=r)
            for r in ("busy", "signal")}


def counted(pid, name, want, timeout=10, **labels):
    """The value of name{pid, labels} once it equals want, else the last
    one seen after timeout seconds (the events of a finished job drain in
    milliseconds; a missed call never comes)."""
    return poll_until(lambda: value(a.metrics(), name, pid=pid, **labels), lambda g: g == want,
                      timeout, step=0.05)


try:
    for i in range(RUNS):
        d = fresh_copy("agent%d" % i)
        w, t = run_held([os.path.join(d, "workloads", "gpu_launch_bench"), "-n", "250",
                         "--hold"])
        pid, want = t["pid"], t["launches"]["total"]
        # The agent drains its ring every few ms: wait for the count to
        # reach the job's, and say where it stopped if it does not.
        got = counted(pid, "sonde_cuda_launches_total", want)
        w.stdin.close()
        w.wait(30)
        if got != want:
            fail("agent run %d: %s launches counted, the job made %d (processes not held "
                 "for the attach, by reason: %s)" % (i, got, want, missed(a.metrics())))

        lib = os.path.join(d, "standin", "libcudart.so.13")
        w, t = run_held([os.path.join(d, "workloads", "gpu_dlopen"), lib, "--delay-ms", "0",
                         "--allocs", "16", "--hold"])
        pid = t["pid"]
        dv = t["memory"]["devices"][0]
        got = counted(pid, "sonde_cuda_memory_allocations_total", dv["allocs"], gpu_id=0)
        w.stdin.close()
        w.wait(30)
        if got != dv["allocs"]:
            fail("agent run %d: the dlopen()ed runtime's first calls were missed: %s of %d "
                 "allocations" % (i, got, dv["allocs"]))
    check(True, "agent, %d runs each: a job launching at once and a job calling a runtime it "
          "has just dlopen()ed, from files never seen -- every launch and allocation" % RUNS)
    # The counters are copied every second.
    m = wait_for(lambda: (lambda m: m if (value(m, "sonde_agent_gpu_holds_total") or 0) >= RUNS
                          else None)(a.metrics()), 5, "the holds to be counted")
    check(True, "the jobs that mapped an unseen library were held for the attach: %d holds, "
          "%.3f s in all" % (value(m, "sonde_agent_gpu_holds_total"),
                             value(m, "sonde_agent_gpu_hold_seconds_total")))
    check(missed(m) == {"busy": 0, "signal": 0},
          "no process that should have been held ran on: %s" % missed(m))

    # An agent that has not polled its events for 2 s (busy, or stopped
    # as here) holds no process, for nobody would let it go: a job that
    # maps a library no probe is on meanwhile runs on, and its first
    # calls are missed -- which the agent says and counts.
    os.kill(a.p.pid, signal.SIGSTOP)
    try:
        # The BPF side's heartbeat ends 2 s after the last poll.
        time.sleep(3)
        d = fresh_copy("busy")
        p = subprocess.run([os.path.join(d, "workloads", "gpu_launch_bench"), "-n", "5"],
                           env=env, capture_output=True, text=True, timeout=60,
                           start_new_session=True)
        check(p.returncode == 0, "a job run while the agent is stopped runs on, not held")
    finally:
        os.kill(a.p.pid, signal.SIGCONT)
    wait_for(lambda: missed(a.metrics())["busy"] >= 1, 10,
             "sonde_agent_gpu_hold_missed_total{reason=\"busy\"} to count the job")
    wait_for(lambda: any("was not held for the attach" in l for l in a.log), 10,
             "the agent to say it")
    print([l for l in a.log if "was not held" in l][0])
    check(True, "a job that mapped an unseen library while the agent was stopped: not held, "
          "counted as missed (reason busy) and said in the log")
except SystemExit:
    a.dump_log()
    raise
finally:
    rc = a.stop()
check(rc == 0, "the agent exits 0")
