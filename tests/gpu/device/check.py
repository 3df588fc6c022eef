"""check.py: issues 23 and 24's checks on a real GPU, driven by run.sh (read it first).

Runs a PyTorch job (torch_job.py) four ways beside one `sonde agent` started before
them, and compares what Sonde saw with the job's own account:

1. profiled alone (torch.profiler, i.e. CUPTI): the launch API calls and kernels by name;
2. under the agent, held alive at its end: the agent's launches for its pid against (1),
   launches it could not name, NVML's per-process memory against nvidia-smi's, what the
   probes saw allocated, the hold time, drops, and each probed function's calls
   (sonde_agent_gpu_probe_calls_total; with kernel.bpf_stats_enabled, bpftool's run
   counts of the programs too, where bpftool is installed);
3. the same with PyTorch's expandable segments (cuMemCreate/cuMemMap);
4. under `sonde record --gpu`: launches per kernel against (1), "[unknown kernel]",
   cuBLAS's kernels named, events lost, at the job's real launch rate; and (issue 24)
   the CUPTI library's gpu_time: kernels and their GPU time against the profiler's, the
   launching Python line, the kernel timeline written, CUPTI subscribed;
   With --gpu-stalls: PC samples, their shape (kernel;+0xOFF;reason), under the
   launching Python line, the top reasons and the cost (informational); with
   --gpu-graphs=graph: graph replays as "[CUDA graph N]" runs; the host's waits on the
   timeline (CUPTI's synchronisation records);
5. under the agent with CUDA_INJECTION64_PATH set to the library: the kernels' GPU time
   per process (sonde_gpu_kernel_seconds_total) against the profiler's, the process
   marked as timed; with PyTorch's cudaMallocAsync backend, its pool's memory
   (sonde_gpu_memory_pool_bytes) and the process's against nvidia-smi.

Writes device-report.md (and the raw files) to OUTDIR and prints the report.
Exit 0 when every check passed, 1 when one failed, 77 when this machine cannot run them.
"""
import collections
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import urllib.request

B = os.environ.get("B", "build")
SONDE = os.path.abspath(os.path.join(B, "sonde"))
HERE = os.path.dirname(os.path.abspath(__file__))
JOB = os.path.join(HERE, "torch_job.py")
PY = os.environ.get("PYTHON", sys.executable)
OUT = os.environ.get("OUTDIR") or "/tmp/sonde-device"
STEPS = os.environ.get("STEPS", "300")
REPLAYS = os.environ.get("REPLAYS", "100")
PORT = int(os.environ.get("PORT", "19391"))
os.makedirs(OUT, exist_ok=True)
rows = []  # (check, want, got, ok)


def skip(why):
    print("SKIP: " + why)
    sys.exit(77)


def row(check, want, got, ok):
    rows.append((check, str(want), str(got), "yes" if ok else "**NO**"))
    print("%s %s: want %s, got %s" % ("ok:" if ok else "FAIL:", check, want, got), flush=True)


def metrics():
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % PORT, timeout=30) as r:
        text = r.read().decode()
    out = []
    for line in text.splitlines():
        m = re.match(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$', line)
        if m:
            labels = dict(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"',
                                     m.group(3) or ""))
            out.append((m.group(1), labels, float(m.group(4))))
    return out


def value(ms, name, **labels):
    for n, l, v in ms:
        if n == name and all(l.get(k) == str(x) for k, x in labels.items()):
            return v
    return None


def series(ms, name):
    return [(l, v) for n, l, v in ms if n == name]


def job(extra, hold=False, env=None):
    cmd = [PY, JOB, "--steps", STEPS, "--replays", REPLAYS] + extra + (["--hold"] if hold else [])
    print("$ " + " ".join(cmd), flush=True)
    return subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            env=dict(os.environ, **(env or {})))


def truth_of(p):
    line = p.stdout.readline()
    if not line.startswith("{"):
        p.kill()
        raise SystemExit("torch_job printed no truth line: %r" % line)
    return json.loads(line)


def smi_used_mib(pid):
    r = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory",
                        "--format=csv,noheader,nounits"], capture_output=True, text=True)
    for line in r.stdout.splitlines():
        f = [x.strip() for x in line.split(",")]
        if len(f) == 2 and f[0] == str(pid):
            return float(f[1])
    return None


def settle(pid, want_launches, timeout=30):
    """The agent's metrics once its launch count for pid stops moving."""
    end, last, ms = time.time() + timeout, None, metrics()
    while time.time() < end:
        ms = metrics()
        n = value(ms, "sonde_cuda_launches_total", pid=pid)
        if n is not None and n == last and (want_launches is None or n >= want_launches):
            break
        last = n
        time.sleep(1)
    return ms


# ---- the agent ----------------------------------------------------------------
subprocess.run(["sysctl", "-qw", "kernel.bpf_stats_enabled=1"], check=False)
alog = open(os.path.join(OUT, "agent.log"), "w")
agent = subprocess.Popen([SONDE, "agent", "--metrics", "127.0.0.1:%d" % PORT, "--ws",
                          "127.0.0.1:%d" % (PORT + 1), "--window", "2"],
                         stdout=alog, stderr=subprocess.STDOUT)
try:
    end = time.time() + 180
    ready = False
    while time.time() < end and agent.poll() is None:
        with open(os.path.join(OUT, "agent.log")) as f:
            log = f.read()
        if "metrics on" in log:
            ready = True
            break
        time.sleep(0.5)
    if not ready:
        print(open(os.path.join(OUT, "agent.log")).read()[-3000:])
        skip("sonde agent did not start here (BPF unavailable? see agent.log)")
    # Its search of the filesystems for CUDA libraries attaches what it finds.
    end = time.time() + 300
    while time.time() < end and value(metrics(), "sonde_agent_gpu_library_search_done") != 1:
        time.sleep(1)
    row("agent's library search done before the jobs", 1,
        value(metrics(), "sonde_agent_gpu_library_search_done"), True)

    # 1. the job's own account (CUPTI through torch.profiler), alone.
    p = job(["--profile"])
    prof = truth_of(p)
    p.wait()
    json.dump(prof, open(os.path.join(OUT, "profile.json"), "w"), indent=1)
    prof_launches = sum(prof["launch_apis"].values())
    print("profiler: %d launch calls %s, %d kernel names" % (
        prof_launches, prof["launch_apis"], len(prof["kernels"])))

    # 2. under the agent.
    for label, extra in (("default allocator", []), ("expandable segments", ["--expandable"])):
        m0 = metrics()
        holds0 = value(m0, "sonde_agent_gpu_holds_total") or 0
        hold_s0 = value(m0, "sonde_agent_gpu_hold_seconds_total") or 0
        p = job(extra, hold=True)
        t = truth_of(p)
        pid = t["pid"]
        ms = settle(pid, None)
        got = value(ms, "sonde_cuda_launches_total", pid=pid)
        row("%s: agent launches = the profiler's launch calls" % label, prof_launches, got,
            got == prof_launches)
        unk = value(ms, "sonde_agent_gpu_unknown_kernel_launches_total")
        row("%s: launches no name was found for" % label, 0, unk, unk == 0)
        smi = smi_used_mib(pid)
        nv = sum(v for l, v in series(ms, "sonde_gpu_process_memory_bytes")
                 if l.get("pid") == str(pid) and l.get("source") == "nvml")
        alloc = sum(v for l, v in series(ms, "sonde_gpu_process_memory_bytes")
                    if l.get("pid") == str(pid) and l.get("source") == "allocations")
        ok = smi is not None and abs(nv / 2**20 - smi) <= 0.05 * smi
        row("%s: NVML per-process memory vs nvidia-smi (MiB, within 5 %%)" % label, smi,
            round(nv / 2**20, 1), ok)
        row("%s: memory the probes saw allocated (MiB) vs torch reserved" % label,
            round(t["memory"]["reserved"] / 2**20, 1), round(alloc / 2**20, 1),
            alloc >= t["memory"]["reserved"] * 0.95)
        holds = (value(ms, "sonde_agent_gpu_holds_total") or 0) - holds0
        hold_s = (value(ms, "sonde_agent_gpu_hold_seconds_total") or 0) - hold_s0
        row("%s: time held in the loader (s, %d holds)" % (label, holds), "<= 0.1 each",
            round(hold_s, 3), holds == 0 or hold_s / holds <= 0.1)
        drops = value(ms, "sonde_agent_gpu_drops_total") or 0
        row("%s: GPU events dropped by the agent" % label, 0, drops, drops == 0)
        with open(os.path.join(OUT, "metrics-%s.txt" % label.replace(" ", "-")), "w") as f:
            for n, l, v in ms:
                if n.startswith(("sonde_agent_gpu", "sonde_cuda", "sonde_gpu")):
                    f.write("%s%s %s\n" % (n, json.dumps(l), v))
        calls = sorted(((l["file"], l["function"], v) for l, v in
                        series(ms, "sonde_agent_gpu_probe_calls_total")), key=lambda c: -c[2])
        print("probe calls (file, function, calls), busiest first:")
        for c in calls[:40]:
            print("  %s %s %d" % c)
        p.stdin.close()
        p.wait(60)
    if shutil.which("bpftool"):
        r = subprocess.run(["bpftool", "prog", "show"], capture_output=True, text=True)
        open(os.path.join(OUT, "bpftool-prog.txt"), "w").write(r.stdout)
        print("bpftool prog show (run_cnt with bpf_stats_enabled) -> bpftool-prog.txt")

    # 4. under record, beside the agent.
    rec = os.path.join(OUT, "rec.folded")
    cmd = [SONDE, "record", "--gpu", "-o", rec, "--", PY, JOB, "--steps", STEPS, "--replays",
           REPLAYS]
    print("$ " + " ".join(cmd), flush=True)
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=540)
    open(os.path.join(OUT, "record.err"), "w").write(r.stderr)
    t = json.loads([l for l in r.stdout.splitlines() if l.startswith("{")][-1])
    leaves = collections.Counter()
    for line in open(os.path.join(OUT, "rec.gpu_launch.folded")):
        stack, n = line.rstrip("\n").rsplit(" ", 1)
        leaves[stack.split(";")[-1]] += int(n)
    total = sum(leaves.values())
    rate = total / max(t["seconds"], 1e-3)
    row("record: launches = the profiler's launch calls", prof_launches, total,
        total == prof_launches)
    row("record: [unknown kernel]", 0, leaves.get("[unknown kernel]", 0),
        leaves.get("[unknown kernel]", 0) == 0)
    blas = sum(n for k, n in leaves.items() if re.search(r"gemm|cublas|sm\d+_xmma", k, re.I))
    row("record: cuBLAS kernels named", "> 0", blas, blas > 0)
    lost = re.search(r"(\d+) GPU events lost", r.stderr)
    row("record: GPU events lost at %.0f launches/s" % rate, 0, lost.group(1) if lost else 0,
        not lost)
    named = {k: n for k, n in leaves.items() if not k.startswith("[")}
    common = set(named) & set(prof["kernels"])
    row("record: kernel names also in the profiler's kernel list", "most", "%d of %d" % (
        len(common), len(named)), len(common) >= len(named) * 0.8)

    # 4b. the CUPTI library under record: each kernel's GPU time by launching stack.
    prof_kernels = sum(prof["kernels"].values())
    m = re.search(r"(\d+) kernels and \d+ copies, ([\d.]+) s on the GPU", r.stderr)
    joined, gpu_s = (int(m.group(1)), float(m.group(2))) if m else (0, 0.0)
    unjoined = re.search(r"(\d+) kernels ran whose launch was not seen", r.stderr)
    unjoined = int(unjoined.group(1)) if unjoined else 0
    row("record: CUPTI subscribed (no 'sonde_cupti: can't' line)", "none",
        "; ".join(l for l in r.stderr.splitlines() if "sonde_cupti:" in l)[:200] or "none",
        "sonde_cupti: can't" not in r.stderr and "no CUPTI library" not in r.stderr)
    row("record: kernels timed (joined + launch not seen) vs the profiler's kernels",
        prof_kernels, "%d + %d" % (joined, unjoined),
        abs(joined + unjoined - prof_kernels) <= 0.02 * prof_kernels)
    row("record: kernels joined to their launch's stack (graph replays' are not yet)",
        "> 90 %% of %d" % prof_kernels, joined, joined >= 0.9 * prof_kernels)
    want_s = prof.get("kernel_us", 0) / 1e6
    row("record: GPU time of the joined kernels (s) vs the profiler's summed kernel time",
        "<= %.3f, > 50 %%" % want_s, gpu_s, 0.5 * want_s < gpu_s <= want_s * 1.05)
    gt = os.path.join(OUT, "rec.gpu_time.folded")
    lines = open(gt).read().splitlines() if os.path.exists(gt) else []
    py = sum(int(l.rsplit(" ", 1)[1]) for l in lines if "train_step (torch_job.py)" in l)
    allns = sum(int(l.rsplit(" ", 1)[1]) for l in lines) or 1
    row("record: gpu_time under the Python line train_step (torch_job.py)", "> 50 %",
        "%.0f %%" % (100.0 * py / allns), py > 0.5 * allns)
    tr = os.path.join(OUT, "rec.gpu_trace.json")
    nk = 0
    if os.path.exists(tr):
        nk = sum(1 for e in json.load(open(tr))["traceEvents"]
                 if e.get("ph") == "X" and e.get("cat") == "kernel")
    row("record: kernel timeline rec.gpu_trace.json, kernels in it", joined + unjoined, nk,
        nk == joined + unjoined)

    # 4c. copies and NVTX ranges under record: the steps' host-to-device
    # copies in gpu_memcpy, on the timeline; the kernels under the NVTX
    # range each step opens (torch.cuda.nvtx).
    rec2 = os.path.join(OUT, "rec2.folded")
    cmd = [SONDE, "record", "--gpu", "-o", rec2, "--", PY, JOB, "--steps", "20", "--replays",
           "0", "--copies", "--nvtx"]
    print("$ " + " ".join(cmd), flush=True)
    r2 = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    open(os.path.join(OUT, "record2.err"), "w").write(r2.stderr)
    t2 = json.loads([l for l in r2.stdout.splitlines() if l.startswith("{")][-1])
    mc = os.path.join(OUT, "rec2.gpu_memcpy.folded")
    htod = sum(int(l.rsplit(" ", 1)[1]) for l in (open(mc).read().splitlines()
                                                 if os.path.exists(mc) else [])
               if l.rsplit(" ", 1)[0].endswith("[memcpy HtoD]"))
    row("record: gpu_memcpy HtoD bytes vs the job's step copies (+ the model's upload)",
        ">= %d" % t2["copy_bytes"], htod, htod >= t2["copy_bytes"] > 0)
    gt2 = os.path.join(OUT, "rec2.gpu_time.folded")
    lines = open(gt2).read().splitlines() if os.path.exists(gt2) else []
    step = sum(int(l.rsplit(" ", 1)[1]) for l in lines if ";sonde_step;" in l)
    allns = sum(int(l.rsplit(" ", 1)[1]) for l in lines) or 1
    row("record: gpu_time under the NVTX range sonde_step", "> 50 %",
        "%.0f %%" % (100.0 * step / allns), step > 0.5 * allns)
    tr2 = os.path.join(OUT, "rec2.gpu_trace.json")
    ncopy = 0
    if os.path.exists(tr2):
        ncopy = sum(1 for e in json.load(open(tr2))["traceEvents"]
                    if e.get("ph") == "X" and e.get("cat") == "copy")
    row("record: copies on the timeline rec2.gpu_trace.json", ">= 20", ncopy, ncopy >= 20)

    # 4d. stall reasons (--gpu-stalls, CUPTI's PC sampling): samples under the
    # launching Python line, each with an instruction offset and a reason;
    # the job's time with sampling on against without (informational: the
    # cost the docs quote).
    rec3 = os.path.join(OUT, "rec3.folded")
    cmd = [SONDE, "record", "--gpu", "--gpu-stalls", "-o", rec3, "--", PY, JOB, "--steps",
           "20", "--replays", "0"]
    print("$ " + " ".join(cmd), flush=True)
    t0 = time.time()
    r3 = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    wall3 = time.time() - t0
    open(os.path.join(OUT, "record3.err"), "w").write(r3.stderr)
    st = os.path.join(OUT, "rec3.gpu_stall.folded")
    slines = open(st).read().splitlines() if os.path.exists(st) else []
    samples = sum(int(l.rsplit(" ", 1)[1]) for l in slines)
    shaped = sum(int(l.rsplit(" ", 1)[1]) for l in slines
                 if re.search(r";\+0x[0-9a-f]+;[^;]+$", l.rsplit(" ", 1)[0]))
    in_py = sum(int(l.rsplit(" ", 1)[1]) for l in slines if "(torch_job.py)" in l)
    row("record --gpu-stalls: PC samples in rec3.gpu_stall.folded", "> 0", samples, samples > 0)
    row("record --gpu-stalls: samples as kernel;+0xOFF;reason", samples, shaped,
        samples > 0 and shaped == samples)
    row("record --gpu-stalls: samples under a torch_job.py line", "> 50 %",
        "%.0f %%" % (100.0 * in_py / (samples or 1)), in_py > 0.5 * samples)
    reasons = collections.Counter()
    for l in slines:
        reasons[l.rsplit(" ", 1)[0].rsplit(";", 1)[-1]] += int(l.rsplit(" ", 1)[1])
    row("record --gpu-stalls: top stall reasons (informational)", "-",
        ", ".join("%s %d" % kv for kv in reasons.most_common(5)), True)
    dropped = re.search(r"CUPTI dropped (\d+) PC samples", r3.stderr)
    row("record --gpu-stalls: samples CUPTI dropped (informational)", "-",
        dropped.group(1) if dropped else 0, True)
    t0 = time.time()
    subprocess.run([SONDE, "record", "--gpu", "-o", os.path.join(OUT, "rec4.folded"), "--", PY,
                    JOB, "--steps", "20", "--replays", "0"], capture_output=True, text=True,
                   timeout=300)
    row("record --gpu-stalls: wall time with PC sampling vs without (informational)", "-",
        "%.1f s vs %.1f s" % (wall3, time.time() - t0), True)

    # 4e. CUDA graphs traced as a whole (--gpu-graphs=graph, CUPTI's
    # GRAPH_TRACE): one "[CUDA graph N]" run per replay under the launching
    # Python line, none of the graph's kernels one by one; the host's waits
    # (CUPTI's synchronisation records: torch.cuda.synchronize) on the
    # timeline of the first record run.
    rec5 = os.path.join(OUT, "rec5.folded")
    cmd = [SONDE, "record", "--gpu", "--gpu-graphs=graph", "-o", rec5, "--", PY, JOB,
           "--steps", "5", "--replays", "40"]
    print("$ " + " ".join(cmd), flush=True)
    r5 = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    open(os.path.join(OUT, "record5.err"), "w").write(r5.stderr)
    g5 = os.path.join(OUT, "rec5.gpu_time.folded")
    glines = open(g5).read().splitlines() if os.path.exists(g5) else []
    graph_ns = sum(int(l.rsplit(" ", 1)[1]) for l in glines
                   if re.search(r";\[CUDA graph \d+\]$", l.rsplit(" ", 1)[0]))
    m5 = re.search(r"(\d+) CUDA graph runs", r5.stderr)
    runs = int(m5.group(1)) if m5 else 0
    row("record --gpu-graphs=graph: graph runs told (CUPTI GRAPH_TRACE)", ">= 40", runs,
        runs >= 40 and "can't record graphs" not in r5.stderr)
    row("record --gpu-graphs=graph: [CUDA graph N] GPU time in gpu_time (ns)", "> 0", graph_ns,
        graph_ns > 0)
    row("record --gpu-graphs=graph: CUPTI lines (informational)", "-",
        "; ".join(l for l in r5.stderr.splitlines() if "sonde_cupti:" in l)[:200] or "none",
        True)
    nsync = 0
    if os.path.exists(tr):
        nsync = sum(1 for e in json.load(open(tr))["traceEvents"]
                    if e.get("ph") == "X" and e.get("cat") == "sync")
    row("record: host waits (CUPTI synchronisation records) on rec.gpu_trace.json", "> 0",
        nsync, nsync > 0)

    # 5. the agent with the library in the job.
    lib = os.path.join(os.path.dirname(SONDE), "libsonde_cupti.so")
    p = job([], hold=True, env={"CUDA_INJECTION64_PATH": lib})
    t = truth_of(p)
    pid = t["pid"]
    ms = settle(pid, None)
    end = time.time() + 10
    while time.time() < end and not value(ms, "sonde_gpu_kernel_seconds_total", pid=pid):
        time.sleep(1)
        ms = metrics()
    ks = sum(v for l, v in series(ms, "sonde_gpu_kernel_seconds_total") if l.get("pid") == str(pid))
    row("agent + library: sonde_gpu_kernel_seconds_total (s) vs the profiler's kernel time",
        "<= %.3f, > 50 %%" % want_s, round(ks, 3), 0.5 * want_s < ks <= want_s * 1.05)
    row("agent + library: sonde_agent_gpu_process_kernel_timing", 1,
        value(ms, "sonde_agent_gpu_process_kernel_timing", pid=pid),
        value(ms, "sonde_agent_gpu_process_kernel_timing", pid=pid) == 1)
    row("agent + library: sonde_agent_gpu_process_cupti{state=recording}", 1,
        value(ms, "sonde_agent_gpu_process_cupti", pid=pid, state="recording"),
        value(ms, "sonde_agent_gpu_process_cupti", pid=pid, state="recording") == 1)
    p.stdin.close()
    p.wait(60)

    # 5b. PyTorch's cudaMallocAsync backend (a pool whose release threshold
    # it sets to the maximum): the memory CUPTI's records account to the
    # process -- its pool's reservation, not what its tensors use -- against
    # nvidia-smi's (which adds the context's few hundred MiB).
    p = job([], hold=True, env={"CUDA_INJECTION64_PATH": lib,
                                "PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync"})
    t = truth_of(p)
    pid = t["pid"]
    ms = settle(pid, None)
    end = time.time() + 10
    while time.time() < end and not value(ms, "sonde_gpu_memory_pool_bytes", pid=pid,
                                          gpu_id=0, state="reserved"):
        time.sleep(1)
        ms = metrics()
    pool = value(ms, "sonde_gpu_memory_pool_bytes", pid=pid, gpu_id=0, state="reserved")
    used = value(ms, "sonde_gpu_memory_pool_bytes", pid=pid, gpu_id=0, state="used")
    cmem = value(ms, "sonde_gpu_process_memory_bytes", pid=pid, gpu_id=0, source="cupti")
    smi = smi_used_mib(pid)
    row("agent + library, cudaMallocAsync: pool reserved / used (MiB)", "> 0",
        "%s / %s" % (pool and round(pool / 2**20), used and round(used / 2**20)),
        bool(pool) and pool >= (used or 0))
    row("agent + library, cudaMallocAsync: cupti memory vs nvidia-smi (MiB)",
        "<= smi, >= smi - 1024", "%s vs %s" % (cmem and round(cmem / 2**20), smi),
        cmem is not None and smi is not None and smi - 1024 <= cmem / 2**20 <= smi)
    p.stdin.close()
    p.wait(60)

    # 6. PyTorch's profiler in a job that also has the library: CUPTI has one
    # subscriber, and the library (loaded at cuInit) comes first. What the
    # profiler still sees is recorded; a profiler left blind is a finding.
    p = job(["--profile"], hold=True, env={"CUDA_INJECTION64_PATH": lib})
    t = truth_of(p)
    seen = sum(t.get("kernels", {}).values())
    row("torch.profiler's kernels with the library injected (informational)",
        prof_kernels, seen, True)
    p.stdin.close()
    p.wait(60)
finally:
    agent.terminate()
    try:
        agent.wait(30)
    except subprocess.TimeoutExpired:
        agent.kill()

rep = ["# Sonde on a real GPU (tests/gpu/device/run.sh)", "",
       "- date: %s" % time.strftime("%Y-%m-%d %H:%M:%S %Z"),
       "- GPU: %s; torch %s (CUDA %s)" % (prof.get("device"), prof.get("torch"), prof.get("cuda")),
       "- kernel: %s" % os.uname().release, "",
       "| check | want | got | ok |", "|---|---|---|---|"]
rep += ["| %s | %s | %s | %s |" % r for r in rows]
open(os.path.join(OUT, "device-report.md"), "w").write("\n".join(rep) + "\n")
print("\n".join(rep))
sys.exit(0 if all(r[3] == "yes" for r in rows) else 1)
