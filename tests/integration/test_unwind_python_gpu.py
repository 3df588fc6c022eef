"""Python frames in the stacks of GPU launches. A Python job on Debian's
python3.11 drives the stand-in CUDA runtime (tests/gpu/) through ctypes
(tests/workloads/gpu_ctypes.py): it looks a kernel up by name and calls
cudaLaunchKernel a known number of times, always from
<module> -> train -> launch_step, and burns CPU in pure Python between the
steps (<module> -> train -> preprocess).

- `sonde record --gpu -- python3 gpu_ctypes.py`: the gpu_launch profile
  counts exactly the job's launches, each topped by the kernel's name; in
  >= 90 % of them the chain "<module> (gpu_ctypes.py)",
  "train (gpu_ctypes.py)", "launch_step (gpu_ctypes.py)" stands in that
  order, the interpreter's native frames whole below it down to _start, and
  ctypes' native frames (libffi's ffi_call among them, no Python frame)
  between launch_step and the kernel. In fact in every launch, the first
  ones right after the job loaded CUDA included: record holds its command
  in its loader until the probes are on the new libraries and the unwind
  tables of the files it maps are built. The CPU profile's samples in
  preprocess have their chain too (>= 90 %).
- `sonde agent --server URL`, its probes already on the stand-in libraries
  (attached at start, as its library search would), and the same job
  started after it with no terminal: the gpu_launch windows it ships hold
  the job's launches exactly, the same chain in >= 90 % of them -- in
  every one: nothing is attached when the job loads the libraries, but it
  waits in its loader while the unwind tables of its files (libffi's...)
  are built -- and its CPU windows hold the job's preprocess samples with
  their Python chain in >= 90 %. The server is the test's own collector,
  which decodes the pprof windows the agent POSTs to /api/v1/ingest."""
import collections
import gzip
import json
import os
import subprocess
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from agent_test import GPU_SI, Agent, need_standins, standin_env, value, wait_for
from sonde_test import *

need_bpf()
need_standins()
PYTHON = "/usr/bin/python3"  # Debian's 3.11: no frame pointers, libpython linked in
SCRIPT = os.path.join(ROOT, "tests", "workloads", "gpu_ctypes.py")
BASE = os.path.basename(SCRIPT)
STEPS, LAUNCHES, SPIN = 20, 50, 1.5
JOB = [PYTHON, SCRIPT, GPU_SI, str(STEPS), str(LAUNCHES), str(SPIN)]
env = dict(os.environ, SONDE_STANDIN_KERNEL_US="0")
env.pop("LD_LIBRARY_PATH", None)


def py(func):
    return "%s (%s)" % (func, BASE)


def is_python(frame):
    return " (" in frame and frame.endswith(")")


def chain_at(frames, want):
    """Index of want[-1] when frames (root first, no comm) hold want's
    Python frames as a run in that order -- no other Python frame between
    them -- and the interpreter's native frames whole below, from _start;
    else -1."""
    if not frames or frames[0] != "_start" or want[-1] not in frames:
        return -1
    j = frames.index(want[-1])
    pys = [f for f in frames[:j + 1] if is_python(f)]
    return j if pys == want else -1


LAUNCH_CHAIN = [py("<module>"), py("train"), py("launch_step")]
CPU_CHAIN = [py("<module>"), py("train"), py("preprocess")]


def launch_ok(frames, kernels):
    """The launch chain, then ctypes' native frames, then the kernel."""
    j = chain_at(frames, LAUNCH_CHAIN)
    if j < 0 or frames[-1] not in kernels:
        return False
    native = frames[j + 1:-1]
    return bool(native) and not any(is_python(f) for f in native) and "ffi_call" in native


def check_launches(what, stacks, truth):
    """stacks: [(frames root first without comm, count)] of the job."""
    kernels = {truth["kernel"]}
    # A kernel looked up by name may show mangled or demangled.
    kernels.add("python_step(float*, int)")
    n = total(stacks)
    check(n == truth["launches"], "%s: %d launches in the gpu_launch profile, the job made %d"
          % (what, n, truth["launches"]))
    leaves = collections.Counter()
    for f, c in stacks:
        leaves[f[-1] if f else "<empty>"] += c
    check(set(leaves) <= kernels, "%s: every launch is topped by the kernel's name %s"
          % (what, dict(leaves)))
    good = sum(c for f, c in stacks if launch_ok(f, kernels))
    bad = sorted(((c, ";".join(f)) for f, c in stacks if not launch_ok(f, kernels)),
                 reverse=True)[:2]
    check(good >= 0.9 * n, "%s: %d of %d launches from _start ... %s;<ctypes' native frames>;"
          "kernel (others: %s)" % (what, good, n, ";".join(LAUNCH_CHAIN), bad))
    # The job waits in its loader, as it loads CUDA, while the probes go on
    # the library or the unwind tables of the files it maps (libffi's, its
    # extension modules') are built: even the launches of its first step,
    # right after the load, are whole.
    check(good == n, "%s: every launch whole, the first ones after the job loaded CUDA "
          "included (%d of %d)" % (what, good, n))


def check_cpu(what, stacks, minimum):
    pre = [(f, c) for f, c in stacks if py("preprocess") in f]
    n = total(pre)
    good = sum(c for f, c in pre if chain_at(f, CPU_CHAIN) >= 0)
    bad = sorted(((c, ";".join(f)) for f, c in pre if chain_at(f, CPU_CHAIN) < 0),
                 reverse=True)[:2]
    check(n >= minimum, "%s: %d CPU samples in %s (at least %d)" % (what, n, py("preprocess"),
                                                                   minimum))
    check(good >= 0.9 * n, "%s: %d of %d of them from _start ... %s (others: %s)"
          % (what, good, n, ";".join(CPU_CHAIN), bad))


# --- sonde record --gpu -------------------------------------------------------
d = tmpdir()
out = os.path.join(d, "job.folded")
p = run([SONDE, "record", "-F", "99", "--gpu", "-o", out, "--"] + JOB, env=env, timeout=180)
check(p.returncode == 0, "record --gpu exits with the job's 0 (got %d)" % p.returncode)
truth = json.loads(p.stdout.strip().splitlines()[-1])
check(truth["launches"] == STEPS * LAUNCHES, "the job launched %d kernels" % truth["launches"])
launch = parse_folded(os.path.join(d, "job.gpu_launch.folded"))
check(all(f[0] == "python3" for f, _ in launch), "every launch is the python3 process's")
check_launches("record", [(f[1:], c) for f, c in launch], truth)
# About 99 Hz x 1.5 s of CPU in preprocess.
check_cpu("record", [(f[1:], c) for f, c in parse_folded(out)], 40)


# --- sonde agent --------------------------------------------------------------
def varint(b, i):
    v = s = 0
    while True:
        x = b[i]
        i += 1
        v |= (x & 0x7F) << s
        s += 7
        if x < 0x80:
            return v, i


def fields(b):
    """(field number, value) of a protobuf message: ints and bytes."""
    i = 0
    while i < len(b):
        key, i = varint(b, i)
        wt = key & 7
        if wt == 0:
            v, i = varint(b, i)
        elif wt == 2:
            n, i = varint(b, i)
            v, i = b[i:i + n], i + n
        elif wt == 1:
            v, i = int.from_bytes(b[i:i + 8], "little"), i + 8
        elif wt == 5:
            v, i = int.from_bytes(b[i:i + 4], "little"), i + 4
        else:
            fail("pprof: wire type %d" % wt)
        yield key >> 3, v


def ints(v):
    """A repeated integer field: packed (bytes) or one value."""
    if isinstance(v, int):
        return [v]
    out, i = [], 0
    while i < len(v):
        x, i = varint(v, i)
        out.append(x)
    return out


def decode_pprof(body):
    """perftools.profiles.Profile -> [(pid, frames root first, value[0])]."""
    if body[:2] == b"\x1f\x8b":
        body = gzip.decompress(body)
    strings, funcs, locs, samples = [], {}, {}, []
    for num, v in fields(body):
        if num == 6:
            strings.append(v.decode("utf-8", "replace"))
        elif num == 5:
            fd = dict(fields(v))
            funcs[fd.get(1, 0)] = fd.get(2, 0)
        elif num == 4:
            lid, lines = 0, []
            for n2, v2 in fields(v):
                if n2 == 1:
                    lid = v2
                elif n2 == 4:
                    lines.append(dict(fields(v2)).get(1, 0))
            locs[lid] = lines
        elif num == 2:
            samples.append(v)
    out = []
    for s in samples:
        ids, vals, pid = [], [], None
        for n2, v2 in fields(s):
            if n2 == 1:
                ids += ints(v2)
            elif n2 == 2:
                vals += ints(v2)
            elif n2 == 3:
                lab = dict(fields(v2))
                if strings[lab.get(1, 0)] == "pid":
                    pid = lab.get(3)
        frames = []
        for lid in reversed(ids):  # leaf first in pprof
            frames += [strings[funcs[f]] for f in reversed(locs[lid])]
        out.append((pid, frames, vals[0] if vals else 0))
    return out


windows = []  # (type, from_ms, until_ms, [(pid, frames, value)])
wlock = threading.Lock()


class Collector(BaseHTTPRequestHandler):
    """What a `sonde server` is to the agent, as far as profiles go."""

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        u = urllib.parse.urlparse(self.path)
        if u.path == "/api/v1/ingest":
            q = dict(urllib.parse.parse_qsl(u.query))
            w = (q.get("type"), int(q.get("from", 0)), int(q.get("until", 0)),
                 decode_pprof(body))
            with wlock:
                windows.append(w)
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *a):
        pass


def of(typ, pid):
    """[(frames, value)] of pid in the windows of typ received so far."""
    with wlock:
        return [(f, v) for t, _, _, ss in windows if t == typ for p, f, v in ss if p == pid]


def window_from(typ, ms):
    """Whether a window of typ that starts at ms or later has come."""
    with wlock:
        return any(t == typ and frm >= ms for t, frm, _, _ in windows)


hs = ThreadingHTTPServer(("127.0.0.1", 0), Collector)
threading.Thread(target=hs.serve_forever, daemon=True).start()
# The stand-ins are where the loader looks (LD_LIBRARY_PATH): the agent
# attaches to them at start, as its search would to any on the node. The
# search itself is off: it runs at nice 19, and two CPU hogs at nice 0 on
# two cores starve it for minutes.
a = Agent(["-F", "99", "--window", "1", "--no-library-search",
           "--server", "http://127.0.0.1:%d" % hs.server_address[1]], env=standin_env())
job = None
try:
    wait_for(lambda: value(a.metrics(), "sonde_agent_gpu_library_search_done") == 1, 60,
             "the agent's library search to be over")
    # Its first windows carry its first work on the machine's processes
    # (their unwind tables and symbols): its loop polls often again after
    # them, as a hold in the loader needs.
    wait_for(lambda: (value(a.metrics(), "sonde_agent_profile_windows_total") or 0) >= 2, 60,
             "the agent's first two windows")
    for lib in ("libcuda.so.1", "libcudart.so.13"):
        path = os.path.join(GPU_SI, lib)
        check(any("attached to " + path in l for l in a.log),
              "the agent's probes are on %s before the job starts" % path)
    job = subprocess.Popen(JOB + ["--hold"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)
    line = job.stdout.readline()
    if not line.startswith("{"):
        job.kill()
        fail("the job printed no truth line: %r %s" % (line, job.stderr.read()[-2000:]))
    done_ms = int(time.time() * 1000)
    truth = json.loads(line)
    pid = truth["pid"]
    # Everything the job did is in the windows that end after its truth
    # line; the next window ends within --window of it.
    wait_for(lambda: sum(v for _, v in of("gpu_launch", pid)) >= truth["launches"], 30,
             "the job's %d launches in the agent's gpu_launch windows" % truth["launches"])
    wait_for(lambda: window_from("cpu", done_ms), 30,
             "a CPU window that starts after the job's work")
    check_launches("agent", of("gpu_launch", pid), truth)
    check_cpu("agent", of("cpu", pid), 40)
    job.stdin.close()
    check(job.wait(30) == 0, "the job exits 0")
    job = None
except SystemExit:
    a.dump_log()
    raise
finally:
    if job:
        job.kill()
        job.wait()
    rc = a.stop()
    hs.shutdown()
check(rc == 0, "the agent exits 0")
