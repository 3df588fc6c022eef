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
processes out in both (their filtered counters move)."""
import os
import re
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
print("ok")
