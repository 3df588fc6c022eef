"""GPU probes end to end on calls that succeed: the stand-in libraries of
tests/gpu/standin (the real symbol names, versions and signatures, a fake
GPU behind them) run the workloads of tests/gpu/workloads, which print what
they did; the events gpu-probe-dump decodes must add up to exactly that --
launches by API and by kernel name (host stubs symbolized, driver names
from cuModuleGetFunction/cuLibraryGetKernel), failed calls, allocations
and frees per device (frees matched to their allocation's size), waits,
copies, collectives and their bytes, communicator ranks. Run with the
runtime calling its own internals and, with SONDE_STANDIN_CUDART_VIA_DRIVER,
through the public driver functions, where every runtime call is also a
driver call on the same thread and must still count once; and with the
per-thread-stream entry points, cudart linked statically, and the driver
API alone."""
import collections
import subprocess

from gpu_real import *

STANDIN = os.path.join(ROOT, "tests", "gpu", "standin")
if not os.path.exists(os.path.join(STANDIN, "standin.mk")):
    skip("no stand-in libraries in tests/gpu/standin")
need_cuda("include/cuda.h", "include/nccl.h")
p = subprocess.run(["make", "-s", "-C", ROOT, "-f", "tests/gpu/standin/standin.mk",
                    "B=" + os.path.relpath(B, ROOT), "gpu-standin"], capture_output=True, text=True)
if p.returncode != 0:
    print(p.stdout[-3000:], p.stderr[-3000:])
    fail("building the stand-ins failed")
SI = os.path.join(B, "gpu", "standin")
GW = os.path.join(B, "gpu", "workloads")
LIBS = [os.path.join(SI, n) for n in ("libcudart.so.13", "libcuda.so.1", "libnccl.so.2")]
KIND = {0: "HostToHost", 1: "HostToDevice", 2: "DeviceToHost", 3: "DeviceToDevice",
        4: "Default"}


def run_workload(prog, args, attach, env_extra=None):
    """Runs a workload under the harness with the files attached before it
    starts; returns (events, stats, truth)."""
    env = dict(os.environ, SONDE_STANDIN_KERNEL_US="5")
    env.update(env_extra or {})
    cmd = [DUMP, "-n"]
    for a in attach:
        cmd += ["-a", a]
    cmd += ["--", os.path.join(GW, prog)] + args
    print("$ " + " ".join(cmd))
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
    if p.returncode != 0:
        print(p.stderr[-3000:])
        fail("%s under gpu-probe-dump exited %d" % (prog, p.returncode))
    events, stats, truth = [], None, None
    # The workload's truth line is forwarded to the harness's stderr.
    for line in p.stderr.splitlines():
        if line.startswith('{"workload"'):
            truth = json.loads(line)
    for line in p.stdout.splitlines():
        o = json.loads(line)
        if o["type"] == "stats":
            stats = o
        elif o["type"] != "probe":
            events.append(o)
    check(truth is not None and stats is not None, "%s: truth and counters printed" % prog)
    return events, stats, truth


def compare(what, got, want):
    got = {k: v for k, v in got.items() if v}
    want = {k: v for k, v in want.items() if v}
    check(got == want, "%s: %s%s" % (what, want, "" if got == want else " -- probes: %s" % got))


def verify(name, events, stats, t, via_driver=False):
    pid = t["pid"]
    mine = [e for e in events if e["pid"] == pid]
    ok = [e for e in mine if e["ret"] == 0]
    drops = {k: v for k, v in stats["drops"].items() if v}
    check(not drops and stats["bad_records"] == 0 and stats["events"] == stats["received"],
          "%s: no drops, no malformed records" % name)
    check(stats["no_entry"] == 0 and stats["overwrite"] == 0 and stats["inflight_live"] == 0,
          "%s: every return matched its entry, nothing left in flight" % name)
    check((stats["dedup"] > 0) == via_driver,
          "%s: %d driver calls inside runtime calls not reported again" % (name, stats["dedup"]))

    launches = [e for e in ok if e["type"] == "launch"]
    compare(name + ": launches by API", collections.Counter(e["api"] for e in launches),
            t["launches"]["by_api"])
    mangled = t["launches"].get("symbols", {})
    by_kernel = collections.Counter()
    for e in launches:
        if e["graph"]:
            continue
        if "name" in e:  # a driver name, mangled
            by_kernel[next((k for k, m in mangled.items() if m == e["name"]), e["name"])] += 1
        else:
            by_kernel[e.get("kernel", "?")] += 1
    if stats.get("process_records_lost"):
        print("%s: %d process records lost to a full ring (kernel names then come from the "
              "mappings read from /proc)" % (name, stats["process_records_lost"]))
    compare(name + ": launches by kernel", by_kernel, t["launches"]["by_kernel"])
    failed = collections.Counter(e["api"] for e in mine if e["ret"] != 0 and
                                 e["type"] not in ("sync_begin", "nccl_begin"))
    compare(name + ": failed calls by API", failed, t.get("failed", {}))

    for d in t["memory"]["devices"]:
        allocs = [e for e in ok if e["type"] == "alloc" and e["device"] == d["device"]]
        frees = [e for e in ok if e["type"] == "free" and e["device"] == d["device"] and
                 e["addr"]]
        got = dict(allocs=len(allocs), alloc_bytes=sum(e["size"] for e in allocs),
                   frees=len(frees), free_bytes=sum(e["size"] for e in frees))
        got["current_bytes"] = got["alloc_bytes"] - got["free_bytes"]
        want = {k: d[k] for k in got}
        check(got == want, "%s: device %d memory %s%s" % (
            name, d["device"], want, "" if got == want else " -- probes: %s" % got))
    check(not [e for e in ok if e["type"] == "free" and e["flags"] & 2],
          "%s: every successful free matched an allocation" % name)

    waits = collections.Counter(e["api"] for e in ok if e["type"] == "sync_end")
    compare(name + ": waits by API", waits,
            {k: v["count"] for k, v in t.get("waits", {}).get("by_api", {}).items()})
    if "memcpy" in t:
        copies = [e for e in ok if e["type"] == "memcpy"]
        # cudaMemcpy_ptds is what gpu_train_ptsz calls (nm -D says so);
        # its truth line may call it cudaMemcpy: compare without the suffix.
        compare(name + ": copies by API",
                collections.Counter(e["api"].replace("_ptds", "") for e in copies),
                {k.replace("_ptds", ""): v["calls"] for k, v in t["memcpy"]["by_api"].items()})
        by_kind = collections.Counter()
        for e in copies:
            by_kind[KIND[e["kind"]]] += e["bytes"]
        compare(name + ": copied bytes by kind", by_kind, t["memcpy"]["bytes"])
    if "nccl" in t:
        colls = [e for e in ok if e["type"] == "nccl_end"]
        compare(name + ": collectives by op", collections.Counter(e["api"] for e in colls),
                {k: v["calls"] for k, v in t["nccl"]["by_op"].items()})
        bytes_ = collections.Counter()
        for e in colls:
            bytes_[e["api"]] += e["bytes"]
        compare(name + ": collective bytes by op", bytes_,
                {k: v["bytes"] for k, v in t["nccl"]["by_op"].items()})
        comms = sorted((e["rank"], e["nranks"], e["device"]) for e in ok
                       if e["type"] == "nccl_comm")
        want = sorted((c["rank"], c["nranks"], c["device"]) for c in t["nccl"]["comms"])
        check(comms == want, "%s: communicators (rank, nranks, device) %s" % (name, want))
        ranked = [e for e in colls if e["rank"] < 0]
        check(not ranked, "%s: every collective knows its rank" % name)
    if "mem_get_info" in t:
        cap = [e for e in ok if e["type"] == "capacity" and e["api"] == "cuMemGetInfo_v2"]
        check(len(cap) == 1 and cap[0]["total"] == t["mem_get_info"]["total"] and
              cap[0]["free"] == t["mem_get_info"]["free"],
              "%s: cuMemGetInfo's free and total %s" % (name, t["mem_get_info"]))
    check([e["pid"] for e in events if e["type"] == "process_exit"] == [pid],
          "%s: the exit is reported" % name)


ARGS = ["--gpus", "2", "--steps", "5"]
# The runtime reaches the driver (its default, as the real one), or not (0).
for mode in ("0", ""):
    ev, st, t = run_workload("gpu_train", ARGS, LIBS, {"SONDE_STANDIN_CUDART_VIA_DRIVER": mode})
    verify("gpu_train" + (" via driver" if mode != "0" else ""), ev, st, t,
           via_driver=mode != "0")
ev, st, t = run_workload("gpu_train_ptsz", ARGS, LIBS)
verify("gpu_train_ptsz", ev, st, t, via_driver=True)
ev, st, t = run_workload("gpu_train_static", ARGS, [os.path.join(GW, "gpu_train_static")] + LIBS)
verify("gpu_train_static", ev, st, t, via_driver=True)
ev, st, t = run_workload("gpu_driver", ["-i", "5"], LIBS)
verify("gpu_driver", ev, st, t)
