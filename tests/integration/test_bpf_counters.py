"""Every counter of the BPF programs is on /metrics (issue 25): bpf/counters.h's
tables -- the CPU sampler's and off-CPU profiler's drops and counts, the
unwinder's, the GPU probes' -- each a family with a sample per counter (the
*_live map-entry gauges left out), read from the header itself, so that a
counter added there and not exported fails here. Then the ones a plain job
makes move do: samples, off-CPU blocks, short blocks and waits (and their
time), frames stepped by table and by frame pointers, stacks that stopped at
_start, the unwinder's failed steps; the GPU probes' records, deduplicated
and nested calls of a stand-in job; and the totals agree with the named
series that carry the same count (sonde_agent_offcpu_blocks_total,
sonde_agent_unwind_frames_total). Last,
`agent -p PID`: one pid filter shared by the CPU sampler and the GPU probes
lets the watched job's samples and launches through and filters the other
processes out in both (their filtered counters move).

Then every other counter is made to move, from 0, by what its help text
names, under an agent that watches only a shell running the workloads
(tests/workloads/counters.c, tests/gpu/workloads/gpu_counters.c): with the
defaults, new programs' first stacks (late, no_table), a frame returning
into no mapping, a stack deeper than the walk, Python frames, waits in page
faults on the sys_exit path (leaf_only), a GPU call entered inside another
(overwrite, no_entry), a free of memory allocated before the agent, a read
of an unreadable page; with a page of ring each (SONDE_*_RINGBUF), the
rings' drops; with one entry in the GPU maps (SONDE_GPU_MAX_*), one
off-CPU slot (SONDE_OFFCPU_SLOTS) and --offcpu-rate 1, the maps' and the
rate's drops, and more record_function scopes open than their map holds
(Debian's PyTorch). A counter no workload can move here is printed with
why; one neither moved nor listed so fails. Each wait is for a count, with
a deadline."""
import os
import re
import shutil
import signal
import subprocess

from agent_test import (Agent, GPU_WL, Workload, need_standins, poll_until, series,
                        standin_env, value)
from sonde_test import *

need_bpf()
need_standins()


def tables():
    """{table macro: [(name, help)]} from bpf/counters.h."""
    text = open(os.path.join(ROOT, "bpf", "counters.h")).read().replace("\\\n", " ")
    out = {}
    for m in re.finditer(r"#define (\w+)\(X\)(.*)", text):
        out[m.group(1)] = re.findall(r'X\(\w+, "([^"]+)"', m.group(2))
    return out


T = tables()
check(set(T) == {"CPU_DROPS", "CPU_COUNTERS", "UNW_COUNTERS", "GPU_DROPS", "GPU_COUNTERS"},
      "bpf/counters.h's tables: %s" % sorted(T))
FAMILY = {"CPU_DROPS": ("sonde_agent_bpf_cpu_drops_total", "reason"),
          "CPU_COUNTERS": ("sonde_agent_bpf_cpu_counts_total", "counter"),
          "UNW_COUNTERS": ("sonde_agent_bpf_unwind_total", "counter"),
          "GPU_DROPS": ("sonde_agent_bpf_gpu_drops_total", "reason"),
          "GPU_COUNTERS": ("sonde_agent_bpf_gpu_counts_total", "counter")}

a = Agent(["--offcpu", "--window", "1"], env=standin_env())
try:
    # A CPU burner (frame-pointer-less -O2 code: table steps) beside an
    # off-CPU sleeper, and a stand-in GPU job (runtime launches: the driver
    # calls inside them deduplicated).
    shares = subprocess.Popen([os.path.join(B, "workloads", "shares-O2"), "3"])
    sleeper = subprocess.Popen([os.path.join(B, "workloads", "offcpu"), "3"],
                               stdout=subprocess.DEVNULL)
    gpu = Workload("gpu_train", ["--gpus", "1", "--steps", "3", "--no-nccl"], standin_env())

    def got():
        m = a.metrics()
        return {k: {l[lab]: v for l, v in series(m, fam)} for k, (fam, lab) in FAMILY.items()}

    # (offcpu's sleeps include blocks under the minimum; gpu_train's
    # runtime calls make driver calls of the same layer inside them.)
    want_moving = {"CPU_COUNTERS": ["samples", "offcpu_blocks", "offcpu_waits", "offcpu_wait_ns",
                                    "offcpu_short", "offcpu_short_ns"],
                   "UNW_COUNTERS": ["table", "fp", "stop", "failed_step"],
                   "GPU_COUNTERS": ["events", "dedup", "nested"]}
    g = poll_until(got, lambda g: all(g[t].get(n, 0) > 0 for t, ns in want_moving.items()
                                      for n in ns), 30)
    for t, names in T.items():
        fam = FAMILY[t][0]
        want = [n for n in names if not n.endswith("_live")]
        check(sorted(g[t]) == sorted(want),
              "%s: a sample per counter of %s %s%s" % (fam, t, want,
                                                      "" if sorted(g[t]) == sorted(want)
                                                      else " -- got %s" % sorted(g[t])))
    for t, names in want_moving.items():
        for n in names:
            check(g[t].get(n, 0) > 0, "%s{%s=%s} moved: %s"
                  % (FAMILY[t][0], FAMILY[t][1], n, g[t].get(n)))
    m = a.metrics()
    blocks = [v for _, v in series(m, "sonde_agent_offcpu_blocks_total")]
    fams = {k: {l[FAMILY[k][1]]: v for l, v in series(m, FAMILY[k][0])} for k in FAMILY}
    check(blocks and blocks[0] == fams["CPU_COUNTERS"]["offcpu_blocks"],
          "the same count in both: sonde_agent_offcpu_blocks_total %s, offcpu_blocks %s"
          % (blocks, fams["CPU_COUNTERS"]["offcpu_blocks"]))
    frames = {l["method"]: v for l, v in series(m, "sonde_agent_unwind_frames_total")}
    check(frames.get("table") == fams["UNW_COUNTERS"]["table"],
          "... sonde_agent_unwind_frames_total{method=table} %s, table %s"
          % (frames.get("table"), fams["UNW_COUNTERS"]["table"]))
    gpu.release()
    shares.wait(30)
    sleeper.wait(30)
finally:
    a.stop()

# -p: one pid filter for the CPU sampler and the GPU probes (the agent adds
# the pid once): the watched job's samples and launches counted, the other
# processes' filtered out by both.
other = subprocess.Popen([os.path.join(B, "workloads", "shares-O2"), "4"])
watched = subprocess.Popen([os.path.join(GPU_WL, "gpu_train"), "--gpus", "1", "--steps", "400",
                            "--cpu-us", "20000", "--no-nccl"], stdout=subprocess.DEVNULL,
                           env=dict(standin_env(), SONDE_STANDIN_KERNEL_US="5"))
a = Agent(["-p", str(watched.pid), "--window", "1"], env=standin_env())
try:
    other_gpu = Workload("gpu_train", ["--gpus", "1", "--steps", "2", "--no-nccl"],
                         standin_env())

    def counts():
        m = a.metrics()
        return ({l["counter"]: v for l, v in series(m, "sonde_agent_bpf_cpu_counts_total")},
                {l["counter"]: v for l, v in series(m, "sonde_agent_bpf_gpu_counts_total")},
                value(m, "sonde_cuda_launches_total", pid=watched.pid),
                value(m, "sonde_cuda_launches_total", pid=other_gpu.pid))
    cpu, gpu, mine, theirs = poll_until(
        counts, lambda c: c[0].get("filtered", 0) > 0 and c[1].get("filtered", 0) > 0 and
        c[0].get("samples", 0) > 0 and (c[2] or 0) > 0, 30)
    check(cpu.get("filtered", 0) > 0 and gpu.get("filtered", 0) > 0,
          "agent -p: both the CPU sampler and the GPU probes filter the other processes "
          "out (filtered: cpu %s, gpu %s)" % (cpu.get("filtered"), gpu.get("filtered")))
    check(cpu.get("samples", 0) > 0 and (mine or 0) > 0 and theirs is None,
          "... and both let the watched job through: its samples (%s) and launches (%s), "
          "none of the other job's (%s)" % (cpu.get("samples"), mine, theirs))
    other_gpu.release()
    other.wait(30)
finally:
    watched.kill()
    watched.wait()
    a.stop()
moved = {(t, n) for t, ns in want_moving.items() for n in ns}
moved |= {("CPU_COUNTERS", "filtered"), ("GPU_COUNTERS", "filtered")}


# The rest, each moved by what its help text names: the agent watches a
# shell (-p, following its children) that runs the workloads, so that
# every count is theirs. Fresh copies of a program are new files: no
# unwind table yet, and a new process's first stacks.
d = tmpdir()
fresh_n = [0]


def fresh(prog):
    fresh_n[0] += 1
    path = os.path.join(d, "%s-%d" % (os.path.basename(prog), fresh_n[0]))
    shutil.copy(prog, path)
    return path


class Shell:
    """sh reading commands from a pipe, in a session of its own (killed
    whole at the end)."""

    def __init__(self, env):
        self.p = subprocess.Popen(["sh"], stdin=subprocess.PIPE, text=True, env=env,
                                  start_new_session=True)

    def run(self, cmd):
        print("sh$ " + cmd)
        self.p.stdin.write(cmd + "\n")
        self.p.stdin.flush()

    def stop(self):
        try:
            os.killpg(self.p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.p.wait()


def moves(what, args, env, start, want, again=None, pids=(), timeout=60):
    """Runs an agent watching a shell (and pids), start(shell) the
    workloads, again(shell, counts) each poll while some of want
    ({table: [names]}) are still 0; checks each moved from 0."""
    sh = Shell(env)
    a = Agent(["-p", ",".join(str(p) for p in (sh.p.pid,) + tuple(pids)), "--window", "1"] +
              args, env=env)
    try:
        def got():
            m = a.metrics()
            return {k: {l[lab]: v for l, v in series(m, fam)}
                    for k, (fam, lab) in FAMILY.items()}

        before = got()
        start(sh)

        def done(g):
            left = [(t, n) for t, ns in want.items() for n in ns if not g[t].get(n)]
            if left and again:
                again(sh, left)
            return not left
        g = poll_until(got, done, timeout, step=0.5)
        if not done(g):
            print("%s: the counters seen: %s" % (what, g))
            a.dump_log()
        for t, names in want.items():
            for n in names:
                check(before[t].get(n) == 0 and g[t].get(n, 0) > 0,
                      "%s: %s{%s=%s} moved from %s to %s" % (what, FAMILY[t][0], FAMILY[t][1], n,
                                                             before[t].get(n), g[t].get(n)))
                moved.add((t, n))
    finally:
        sh.stop()
        a.stop()


QUICK = os.path.join(WL, "quick")
CTR = os.path.join(WL, "counters")
GC = os.path.join(GPU_WL, "gpu_counters")


def fresh_starts(sh, left):
    # A program just started: its first stacks reach a file with no table
    # (late, no_table; with no room for the end, the frame-pointer walk:
    # ustack). A launch through code in a memfd mapped just now: the same
    # for the GPU probes (late; late_stack).
    if any(t.startswith("CPU") or t == "UNW_COUNTERS" for t, _ in left):
        sh.run("%s 0.05 &" % fresh(QUICK))
    if any(t.startswith("GPU") for t, _ in left):
        sh.run("SONDE_STANDIN_KERNEL_US=5 %s late >/dev/null &" % GC)


# 1. Defaults (the off-CPU waits' user stacks at sys_exit, the older
# kernels' way, where a wait in a page fault has no system call to return
# from: leaf_only).
uffd_ok = subprocess.run([CTR, "fault", "0.01"], capture_output=True).returncode == 0
held = subprocess.Popen([GC, "hold"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                        env=standin_env())
check(held.stdout.readline().strip() == "ready", "gpu_counters hold: allocated before the agent")


def start_defaults(sh):
    sh.run("timeout 60 %s 200 100000 &" % os.path.join(WL, "deep-O2"))   # truncated
    sh.run("timeout 60 python3 %s 60 &" % os.path.join(ROOT, "tests", "workloads", "shares.py"))
    sh.run("%s nomap 60 &" % CTR)                                         # no_vma
    if uffd_ok:
        sh.run("%s fault 60 &" % CTR)                                     # offcpu_leaf_only
    sh.run("SONDE_STANDIN_KERNEL_US=300000 %s signal >/dev/null &" % GC)  # overwrite, no_entry
    sh.run("%s badread >/dev/null &" % GC)                                # read
    held.stdin.write("free\n")                                           # unmatched
    held.stdin.flush()


want = {"CPU_COUNTERS": ["late"],
        "UNW_COUNTERS": ["no_table", "no_vma", "truncated", "python"],
        "GPU_COUNTERS": ["overwrite", "no_entry", "unmatched", "late"],
        "GPU_DROPS": ["read"]}
if uffd_ok:
    want["CPU_COUNTERS"].append("offcpu_leaf_only")
else:
    print("skip: offcpu_leaf_only: no userfaultfd here to make a thread wait in a page fault")
moves("defaults", ["--offcpu", "-F", "499"],
      dict(standin_env(), SONDE_OFFCPU_SYS_EXIT="1"),
      start_defaults, want, again=fresh_starts, pids=(held.pid,))
held.wait(30)

# 2. Rings made small (SONDE_CPU_RINGBUF, SONDE_OFFCPU_RINGBUF,
# SONDE_GPU_RINGBUF, SONDE_GPU_CONTROL_RINGBUF): a page each for the
# samples, the waits, the GPU records and the news of code loaded.


def start_rings(sh):
    for _ in range(2):
        sh.run("%s 60 &" % os.path.join(WL, "shares-O2"))                # ringbuf
    sh.run("%s waits 60 8 &" % CTR)                                       # offcpu_ringbuf
    sh.run("%s dlopen 60 &" % CTR)                                        # control
    sh.run("SONDE_STANDIN_KERNEL_US=5 %s --gpus 1 --steps 50 --no-nccl >/dev/null &"
           % os.path.join(GPU_WL, "gpu_train"))                           # ringbuf


moves("small rings", ["--offcpu", "-F", "499"],
      dict(standin_env(), SONDE_CPU_RINGBUF="4K", SONDE_OFFCPU_RINGBUF="4K",
           SONDE_GPU_RINGBUF="4K", SONDE_GPU_CONTROL_RINGBUF="4K"),
      start_rings,
      {"CPU_DROPS": ["ringbuf", "ustack", "offcpu_ringbuf"],
       "GPU_DROPS": ["ringbuf", "late_stack", "control"]},
      again=fresh_starts)

# 3. The GPU probes' maps made small (SONDE_GPU_MAX_THREADS,
# SONDE_GPU_MAX_ALLOCS): one entry for the calls in flight, the threads'
# devices and the allocations; the off-CPU rate bound at 1 wait a second:
# the rest dropped, with their time; and one slot for the waits on their
# way back to user space (SONDE_OFFCPU_SLOTS): a thread that wakes while
# another's wait holds it is not timed.


def start_maps(sh):
    sh.run("%s waits 60 4 &" % CTR)                       # offcpu_rate, offcpu_storage
    # inflight, devices; then allocs (alone: a call of another process in
    # flight would take the one entry from these)
    sh.run("(SONDE_STANDIN_KERNEL_US=200000 %s threads 3; %s allocs 4) >/dev/null &" % (GC, GC))
    if torch_ok:
        sh.run("%s %s 20000 >/dev/null &" % (TORCH_PY, RF_OPEN))        # record_function


# Debian's PyTorch: more record_function scopes open at once than the
# torch_rf map holds (16384), probed in its libtorch_cpu.
TORCH_PY = "/usr/bin/python3"
RF_OPEN = os.path.join(ROOT, "tests", "workloads", "rf_open.py")
torch_ok = subprocess.run([TORCH_PY, "-c", "import torch"], capture_output=True,
                          timeout=120).returncode == 0
want = {"CPU_DROPS": ["offcpu_rate", "offcpu_storage"], "CPU_COUNTERS": ["offcpu_dropped_ns"],
        "GPU_DROPS": ["inflight", "allocs", "devices"]}
if torch_ok:
    want["GPU_DROPS"].append("record_function")
else:
    print("skip: record_function: Debian's python3-torch is not installed "
          "(scripts/setup.sh installs it)")
moves("small maps, --offcpu-rate 1", ["--offcpu-rate", "1"],
      dict(standin_env(), SONDE_GPU_MAX_THREADS="1", SONDE_GPU_MAX_ALLOCS="1",
           SONDE_OFFCPU_SLOTS="1"), start_maps, want)

# What no test here moves, and why: each printed, none silently.
cannot = {
    ("CPU_DROPS", "kstack"): "bpf_get_stack fails only when perf's callchain buffers are "
    "busy at the same interrupt level on the CPU (a nested NMI): not something a workload "
    "can make happen",
    ("CPU_DROPS", "offcpu_kstack"): "bpf_get_task_stack of a thread being switched in fails "
    "only when its stack is gone or the callchain buffers are busy (see kstack)",
    ("GPU_DROPS", "stack"): "counted only when the kernel has no memory for a thread's "
    "task storage (the unwinder's state), or can't copy its own scratch",
}
for t, names in T.items():
    for n in names:
        if n.endswith("_live") or (t, n) in moved:
            continue
        if (t, n) in cannot:
            print("skip: %s{%s=%s}: %s" % (FAMILY[t][0], FAMILY[t][1], n, cannot[(t, n)]))
        else:
            fail("%s{%s=%s}: no test moves it" % (FAMILY[t][0], FAMILY[t][1], n))
print("ok")
