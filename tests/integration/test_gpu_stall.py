"""Why kernels stall, by CUPTI's PC sampling (issue 24, opt-in): `sonde record
--gpu --gpu-stalls -- JOB` starts the job with Sonde's CUPTI library and
SONDE_CUPTI_PC_SAMPLING=1; the library enables PC sampling in each context's
creation callback, takes CUPTI's samples on the job's threads, and the probes
put them in x.gpu_stall.folded: the kernel's launching stack, the kernel, the
instruction's offset ("+0x10", [sass]) and the stall reason ([stall]),
weighted by samples.

CUPTI here is the stand-in (tests/gpu/standin/cupti.c), whose samples follow
a rule: with period P, a kernel's runs of T ns in all give floor(T / 2^P)
samples, the j-th at offset 0x10 * (j % 4) and stall reason REASONS[(j / 4)
% 5]. Each kernel of the stand-in runs 37 us, so the test knows every
(kernel, offset, reason) count exactly:

- gpu_train (C): every count as the rule gives it, under the stack that
  launched the kernel (one of its gpu_time stacks), reasons named without
  CUPTI's prefix.
- gpu_ctypes.py (Python through ctypes): the samples under the Python line
  that launched the kernels, train -> launch_step.
- With nvdisasm (SONDE_NVDISASM: the stand-in's, which lists LDC, S2R,
  LDG.E.128 and FFMA at those offsets): each instruction named, "+0x20
  LDG.E.128"; the library saved the cubins under their CRCs.
- A hardware buffer that fills (SONDE_STANDIN_PC_MAX_PCS): samples kept +
  samples CUPTI says it dropped = the rule's total; record says so.
- `--gpu-stalls` without `--gpu` is refused.
- `sonde agent`, shipping to a server: a job started with the library and
  SONDE_CUPTI_PC_SAMPLING=1 has its samples taken while it runs and as it
  exits, named by nvdisasm, counted
  (sonde_agent_gpu_stall_samples_total) and stored as the gpu_stall type,
  per reason as the rule gives them."""
import collections
import json
import os
import re
import time

from agent_test import Agent, GPU_SI, GPU_WL, Workload, need_standins, poll_until, value, wait_for
from server_test import Server
from sonde_test import *

need_bpf()
need_standins()
if not os.path.exists(os.path.join(B, "libsonde_cupti.so")):
    skip("no %s/libsonde_cupti.so: built only where the CUDA toolkit's CUPTI headers are" % B)
d = tmpdir()
PERIOD = 10
CUBINS = os.path.join(d, "cubins")
env = dict(os.environ, LD_LIBRARY_PATH=GPU_SI, SONDE_STANDIN_KERNEL_US="37",
           SONDE_CUPTI_PC_PERIOD=str(PERIOD), SONDE_CUPTI_CUBIN_DIR=CUBINS)
env.pop("CUDA_INJECTION64_PATH", None)
env.pop("SONDE_NVDISASM", None)
# The stand-in nvdisasm (NVIDIA's is not installed here): its listing has
# these instructions at the offsets the stand-in CUPTI samples.
NVDISASM = os.path.join(GPU_SI, "bin", "nvdisasm")
OPS = {"+0x0": "LDC", "+0x10": "S2R", "+0x20": "LDG.E.128", "+0x30": "FFMA"}
KERNEL_NS = 37000
REASONS = ["barrier", "long_scoreboard", "math_pipe_throttle", "selected", "wait"]


def expect(runs):
    """{(kernel, "+0xOFF", reason): samples} for {kernel: runs}, by the stand-in's rule."""
    want = collections.Counter()
    for k, n in runs.items():
        for j in range(n * KERNEL_NS >> PERIOD):
            want[(k, "+0x%x" % (0x10 * (j % 4)), REASONS[(j // 4) % 5])] += 1
    return want


def record(name, job, extra=None, flags=("--gpu", "--gpu-stalls")):
    out = os.path.join(d, name + ".folded")
    p = run([SONDE, "record"] + list(flags) + ["-o", out, "--"] + job,
            env=dict(env, **(extra or {})), timeout=180)
    return p, out


def kernel_runs(truth):
    launches = truth["launches"]
    graphs = launches["by_api"]["cudaGraphLaunch"]
    in_graph = {"matmul_tile(float*, float*, float*, int)": 2, "softmax_fwd(float*, int)": 1}
    return {k: n - in_graph.get(k, 0) + graphs * in_graph.get(k, 0)
            for k, n in launches["by_kernel"].items()}


def by_instr(prof):
    got = collections.Counter()
    for frames, v in prof:
        got[tuple(frames[-3:])] += v
    return got


TRAIN = [os.path.join(GPU_WL, "gpu_train"), "--gpus", "1", "--steps", "4", "--no-nccl"]

# --- C: every count, under its launching stack -------------------------------------
p, out = record("train", TRAIN)
check(p.returncode == 0, "record --gpu --gpu-stalls exits 0 (%d): %s"
      % (p.returncode, p.stderr[-1500:]))
truth = json.loads([l for l in p.stdout.splitlines() if l.startswith("{")][-1])
path = os.path.join(d, "train.gpu_stall.folded")
check(os.path.exists(path), "record wrote train.gpu_stall.folded: %s" % p.stderr[-800:])
prof = parse_folded(path)
want = expect(kernel_runs(truth))
got = by_instr(prof)
check(got == want, "each kernel's samples per instruction and stall reason as the rule gives "
      "them (%d samples in %d cells)%s" % (sum(want.values()), len(want), "" if got == want else
                                          " -- got %s, want %s" % (sorted(got.items())[:4],
                                                                   sorted(want.items())[:4])))
gt = parse_folded(os.path.join(d, "train.gpu_time.folded"))
stacks = collections.defaultdict(set)
for frames, _ in gt:
    stacks[frames[-1]].add(tuple(frames[:-1]))
homeless = [f for f, _ in prof if tuple(f[:-3]) not in stacks.get(f[-3], ())]
check(not homeless, "each kernel's samples under a stack that launched it (gpu_time's): %s"
      % [";".join(f[-6:]) for f in homeless][:3])
check(all(f[-5] == "gpu_thread" or f[-4] == "gpu_thread" for f, _ in prof),
      "... the job's gpu_thread below the kernel: %s" % [";".join(f[-6:]) for f, _ in prof][:2])
m = re.search(r"(\d+) GPU PC samples", p.stderr)
check(m and int(m.group(1)) == sum(want.values()) and "gpu_stall" in p.stderr,
      "record says how many samples and where they went: %s" % (m and m.group(0)))

# --- Python: under the line that launched the kernels ------------------------------
PYTHON = "/usr/bin/python3"
SCRIPT = os.path.join(ROOT, "tests", "workloads", "gpu_ctypes.py")
if os.path.exists(PYTHON):
    p, out = record("py", [PYTHON, SCRIPT, GPU_SI, "4", "10", "0"])
    check(p.returncode == 0, "record of gpu_ctypes.py exits 0: %s" % p.stderr[-800:])
    truth = json.loads([l for l in p.stdout.splitlines() if l.startswith("{")][-1])
    path = os.path.join(d, "py.gpu_stall.folded")
    prof = parse_folded(path) if os.path.exists(path) else []
    total = sum(v for _, v in prof)
    chain = ["train (gpu_ctypes.py)", "launch_step (gpu_ctypes.py)"]
    under = sum(v for f, v in prof if all(c in f for c in chain))
    check(prof and total == truth["launches"] * KERNEL_NS >> PERIOD and under == total,
          "gpu_ctypes.py: its %d samples (%d launches x 37 us / 2^%d) all under %s (%d)%s"
          % (total, truth["launches"], PERIOD, " -> ".join(chain), under,
             "" if under == total else " -- %s" % [";".join(f) for f, _ in prof][:2]))
else:
    print("note: no %s: the Python case is not run" % PYTHON)

# --- a full hardware buffer: kept + dropped = all ----------------------------------
p, out = record("full", TRAIN, {"SONDE_STANDIN_PC_MAX_PCS": "3"})
check(p.returncode == 0, "record with a small PC buffer exits 0: %s" % p.stderr[-800:])
truth = json.loads([l for l in p.stdout.splitlines() if l.startswith("{")][-1])
path = os.path.join(d, "full.gpu_stall.folded")
kept = sum(v for _, v in parse_folded(path)) if os.path.exists(path) else 0
m = re.search(r"CUPTI dropped (\d+) PC samples", p.stderr)
dropped = int(m.group(1)) if m else 0
total = sum(expect(kernel_runs(truth)).values())
check(dropped > 0 and kept + dropped == total,
      "a full buffer: %d samples kept + %d CUPTI dropped = the rule's %d" % (kept, dropped, total))

# --- instructions named by nvdisasm -----------------------------------------------
# The library saved each module's cubin under the CRC its samples carry;
# record ran nvdisasm on them: each instruction "+0x20 LDG.E.128".
p, out = record("named", TRAIN, {"SONDE_NVDISASM": NVDISASM})
check(p.returncode == 0, "record with nvdisasm exits 0: %s" % p.stderr[-800:])
truth = json.loads([l for l in p.stdout.splitlines() if l.startswith("{")][-1])
path = os.path.join(d, "named.gpu_stall.folded")
prof = parse_folded(path) if os.path.exists(path) else []
want = collections.Counter()
for (k, off, r), v in expect(kernel_runs(truth)).items():
    want[(k, "%s %s" % (off, OPS[off]), r)] += v
got = by_instr(prof)
check(got == want, "each instruction named as nvdisasm lists it (%s), the counts as before%s"
      % (sorted({f[1] for f in got}), "" if got == want else
         " -- got %s" % sorted(got.items())[:3]))
saved = sorted(os.listdir(CUBINS)) if os.path.isdir(CUBINS) else []
check(saved and all(re.fullmatch(r"[0-9a-f]{16}\.cubin", f) for f in saved),
      "the modules' cubins saved in SONDE_CUPTI_CUBIN_DIR by their CRC: %s" % saved)

# --- refused without --gpu ----------------------------------------------------------
p, out = record("bad", TRAIN, flags=("--gpu-stalls",))
check(p.returncode == 125 and "--gpu-stalls" in p.stderr,
      "--gpu-stalls without --gpu is refused (%d): %s" % (p.returncode, p.stderr[-300:]))

# --- the agent ----------------------------------------------------------------------
srv = Server(os.path.join(d, "data"))
a = Agent(["--no-cpu", "--window", "1", "--server", "http://127.0.0.1:%d" % srv.port],
          env=dict(os.environ, SONDE_NVDISASM=NVDISASM))
try:
    t0 = int(time.time() * 1000) - 1000
    # 12 steps of 60 ms on the CPU each: the library takes CUPTI's samples
    # at a launch every 250 ms while the job runs, the rest as it exits.
    w = Workload("gpu_train", ["--gpus", "1", "--steps", "12", "--cpu-us", "60000",
                               "--no-nccl"],
                 dict(env, CUDA_INJECTION64_PATH=os.path.join(B, "libsonde_cupti.so"),
                      SONDE_CUPTI_PC_SAMPLING="1"))
    want = expect(kernel_runs(w.truth))
    n = sum(want.values())
    early = poll_until(lambda: value(a.metrics(), "sonde_agent_gpu_stall_samples_total"),
                       lambda v: v, 20)
    check(early and early < n, "agent: samples came while the job ran (%s of %d before it "
          "exited)" % (early, n))
    check(w.release() == 0, "the job exits 0")
    got = poll_until(lambda: value(a.metrics(), "sonde_agent_gpu_stall_samples_total"),
                     lambda v: v is not None and v >= n, 20)
    check(got == n, "agent: sonde_agent_gpu_stall_samples_total %s, the rule's %d" % (got, n))
    pq = '{type="gpu_stall",pid="%d"}' % w.truth["pid"]

    def stored():
        st, _, body = srv.get("/api/v1/top", query=pq, limit=50, **{"from": t0, "until": "now"})
        top = json.loads(body) if st == 200 else None
        return top if top and top["total"] >= n else None
    top = wait_for(stored, 90, "the job's %d samples at the server" % n)
    reasons = {f["name"]: f["self"] for f in top["functions"] if f["module"] == "[stall]"}
    want_reasons = collections.Counter()
    for (_, _, r), v in want.items():
        want_reasons[r] += v
    check(top["total"] == n and reasons == dict(want_reasons),
          "agent: the job's gpu_stall stored, %d samples, per reason %s (want %s)"
          % (top["total"], reasons, dict(want_reasons)))
    # Named by nvdisasm in the agent too (those that waited for it a window
    # later): the instructions' samples by name.
    instrs = {f["name"]: f["total"] for f in top["functions"] if f["module"] == "[sass]"}
    want_instrs = collections.Counter()
    for (_, off, _), v in want.items():
        want_instrs["%s %s" % (off, OPS[off])] += v
    check(instrs == dict(want_instrs), "agent: each instruction named, %s (want %s)"
          % (instrs, dict(want_instrs)))
finally:
    a.stop()
    srv.stop()
print("ok")
