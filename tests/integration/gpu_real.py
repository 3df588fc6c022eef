"""gpu_real.py: helpers of the test_gpu_real*.py tests (stdlib only).

Those tests run the programs of tests/gpu/real/, which call the REAL CUDA 13
runtime, driver stub and NCCL libraries of /usr/local/cuda with known
arguments, under build/gpu-real/gpu-probe-dump, which attaches the GPU probes
the way the agent does and prints every decoded call as a JSON line. The
calls fail (there is no GPU), but only after the probes have read their
arguments: each decoded field must equal what the program passed."""
import json
import os
import subprocess

from sonde_test import *

CUDA = os.environ.get("CUDA_HOME", "/usr/local/cuda")
GR = os.path.join(B, "gpu-real")
DUMP = os.path.join(GR, "gpu-probe-dump")


def need_cuda(*parts):
    """Skips unless the CUDA toolkit (and each of parts under it) is there,
    then builds the programs (a no-op when they are up to date)."""
    for p in ("bin/nvcc",) + parts:
        if not os.path.exists(os.path.join(CUDA, p)):
            skip("no %s/%s: the CUDA toolkit is not installed" % (CUDA, p))
    need_bpf()
    p = subprocess.run(["make", "-s", "-C", ROOT, "B=" + os.path.relpath(B, ROOT), "gpu-real"],
                       capture_output=True, text=True)
    if p.returncode != 0:
        print(p.stdout[-3000:])
        print(p.stderr[-3000:])
        fail("make gpu-real failed")


def dump(prog, *args, perf_uprobes=False):
    """Runs prog under the harness. Returns (events, probes, stats, expect):
    the decoded events, the attach results, the counters, and what the
    program wrote it passed (its JSON output file). perf_uprobes: attach
    with one perf uprobe per function instead of uprobe_multi links."""
    d = tmpdir()
    out = os.path.join(d, "expect.json")
    env = dict(os.environ)
    if perf_uprobes:
        env["SONDE_GPU_PERF_UPROBES"] = "1"
    p = run([DUMP, "--", os.path.join(GR, prog), out] + list(args), timeout=120, env=env)
    if p.returncode != 0:
        fail("%s under gpu-probe-dump exited %d" % (prog, p.returncode))
    events, probes, stats = [], [], None
    for line in p.stdout.splitlines():
        o = json.loads(line)
        if o["type"] == "probe":
            probes.append(o)
        elif o["type"] == "stats":
            stats = o
        else:
            events.append(o)
    check(stats is not None, "%s: the harness printed its counters" % prog)
    with open(out) as f:
        expect = json.load(f)
    return events, probes, stats, expect


def one(events, type_, api, **match):
    """The single event of that type and api (and matching fields)."""
    found = [e for e in events if e["type"] == type_ and e["api"] == api and
             all(e.get(k) == v for k, v in match.items())]
    if len(found) != 1:
        fail("expected one %s event of %s %s, got %d" % (type_, api, match or "", len(found)))
    return found[0]


def fields(ev, what, **want):
    """Checks each decoded field of ev against the value passed."""
    bad = {k: (ev.get(k), v) for k, v in want.items() if ev.get(k) != v}
    check(not bad, "%s: %s decoded as passed%s" % (
        what, ", ".join(sorted(want)), "" if not bad else " -- got/want %s" % bad))


def healthy(stats, what):
    drops = {k: v for k, v in stats["drops"].items() if v}
    check(not drops, "%s: no drops (%s)" % (what, drops))
    check(stats["bad_records"] == 0, "%s: no malformed records" % what)
    check(stats["events"] == stats["received"],
          "%s: every record submitted was received (%d)" % (what, stats["events"]))
    check(stats["probes_failed"] == 0, "%s: no probe failed to attach" % what)
    check(stats["no_entry"] == 0 and stats["overwrite"] == 0,
          "%s: every return matched its entry" % what)
    check(stats["inflight_live"] == 0 and stats["allocs_live"] == 0,
          "%s: nothing left in flight" % what)


def attached(probes, what, path_part, absent=()):
    """Every symbol of the table was found and attached in a file whose path
    holds path_part, except the ones named absent (not in this library)."""
    files = {p["path"] for p in probes}
    check(files and all(path_part in f for f in files),
          "%s: probes attached in %s" % (what, sorted(files)))
    missing = sorted(p["symbol"] for p in probes if p["err"] == -2)
    check(missing == sorted(absent), "%s: symbols not found: %s" % (what, missing))
    bad = [p for p in probes if p["err"] not in (0, -2)]
    check(not bad, "%s: every attach succeeded" % what)
