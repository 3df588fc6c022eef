"""`make run` (scripts/demo.sh) as the README tells it (issue 10):

- it prints the lines of the README's "What you will see" block, in order,
  and nothing else while the demo runs (the set-up and the build are quiet,
  `sonde run` logs problems only);
- it calls neither npm nor apt-get (the browser tests' packages are
  `make test`'s; this machine's build packages are present): stand-ins of
  both first on the PATH say if they are called, and fail;
- the GPU job runs on the stand-ins while the agent's own library path has
  none: the agent reports the two GPUs the job uses and no others (the
  stand-in NVML would have given it eight), names the job, counts its
  launches, and the server has its memory points for the GPU page;
- Ctrl-C (SIGINT to its process group, as a terminal sends it) stops it
  all, quietly: every process it started -- found by a marker in their
  environment -- is gone within seconds.

Bounded: its own free ports and data directory (RUN_ARGS, DEMO_DATA), no
network, a deadline on every wait, and whatever is left is killed."""
import json
import os
import re
import signal
import subprocess
import threading
import time
import urllib.parse
import urllib.request
import uuid

from agent_test import need_standins
from sonde_test import *

need_bpf()
need_standins()
if os.path.realpath(B) != os.path.join(ROOT, "build"):
    skip("make run builds and runs build/, not B=%s" % B)


def readme_block():
    """The lines the README says `make run` prints."""
    text = open(os.path.join(ROOT, "README.md")).read()
    sec = text[text.index("## What you will see"):]
    m = re.search(r"```\n(.*?)```", sec, re.S)
    return m.group(1).splitlines()


def norm(line, data):
    """A line with its addresses' ports and the data directory made generic."""
    line = line.replace(data + "/", "DATA/").replace("sonde-data/", "DATA/")
    return re.sub(r"127\.0\.0\.1:\d+", "127.0.0.1:PORT", line)


def marked(mark):
    """Pids of the processes whose environment holds mark."""
    pids = []
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == os.getpid():
            continue
        try:
            with open("/proc/%s/environ" % d, "rb") as f:
                if mark in f.read():
                    pids.append(int(d))
        except OSError:
            pass
    return pids


want = readme_block()
print("the README promises:\n" + "\n".join(want))
check(2 <= len(want) <= 4 and any("sonde run: open" in l for l in want),
      "the README shows what make run prints (%d lines)" % len(want))

tmp = tmpdir()
data = os.path.join(tmp, "data")
fakebin = os.path.join(tmp, "bin")
calls = os.path.join(tmp, "calls")
os.mkdir(fakebin)
for tool in ("npm", "apt-get", "apt"):
    with open(os.path.join(fakebin, tool), "w") as f:
        f.write('#!/bin/sh\necho "%s $*" >> %s\nexit 1\n' % (tool, calls))
    os.chmod(os.path.join(fakebin, tool), 0o755)
mark = "SONDE_DEMO_TEST=" + uuid.uuid4().hex
env = {k: v for k, v in os.environ.items()
       if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS", "LD_LIBRARY_PATH", "SONDE_LOG")}
env.update(PATH=fakebin + ":" + env.get("PATH", "/usr/bin:/bin"), DEMO_DATA=data)
env[mark.split("=")[0]] = mark.split("=")[1]
mport, wport = free_port(), free_port()
run_args = ("--listen 127.0.0.1:0 --metrics 127.0.0.1:%d --ws 127.0.0.1:%d --window 2"
            % (mport, wport))
cmd = ["make", "run", "RUN_ARGS=" + run_args]
print("$ " + " ".join(cmd))
t0 = int(time.time() * 1000)
p = subprocess.Popen(cmd, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                     stderr=subprocess.STDOUT, text=True, start_new_session=True)
lines = []


def pump():
    for line in p.stdout:
        lines.append(line.rstrip("\n"))
        print("| " + lines[-1], flush=True)


reader = threading.Thread(target=pump, daemon=True)
reader.start()


def get_json(url):
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read())


def wait_for(fn, timeout, what):
    end = time.time() + timeout
    while time.time() < end:
        try:
            v = fn()
        except OSError:
            v = None
        if v:
            return v
        if p.poll() is not None:
            fail("make run ended (exit %s) while waiting for %s" % (p.returncode, what))
        time.sleep(0.2)
    fail("timed out after %g s waiting for %s" % (timeout, what))


try:
    # A build may be due (the tree changed): minutes at most.
    wait_for(lambda: len(lines) >= len(want), 300, "the README's %d lines" % len(want))
    got = [norm(l, data) for l in lines[:len(want)]]
    check(got == [norm(l, data) for l in want],
          "make run prints the README's lines:\n%s" % "\n".join(lines[:len(want)]))
    ui = re.search(r"open (http://\S+?)/? in a browser", "\n".join(lines)).group(1)

    # The agent: the job's two GPUs and no others, its name, its launches.
    def job():
        snap = get_json("http://127.0.0.1:%d/json" % mport)
        procs = [x for x in snap["processes"] if x.get("process") == "gpu_train"
                 and x["launches"]["count"] > 0 and len(x["memory"]) == 2]
        return (snap, procs[0]) if procs else None
    snap, proc = wait_for(job, 60, "the agent to see gpu_train launch on two GPUs")
    devices = {d["gpu_id"]: d.get("capacity_source") for d in snap["devices"]}
    print("devices:", devices)
    check(sorted(devices) == [0, 1] and "nvml" not in devices.values(),
          "the agent reports the job's two GPUs, none from a stand-in NVML: %s" % devices)
    check(proc["launches"]["count"] > 0, "gpu_train (pid %d): %d launches seen"
          % (proc["pid"], proc["launches"]["count"]))

    # The server: the job's memory points, per GPU, for the GPU page.
    def points():
        q = urllib.parse.urlencode({"name": "gpu_memory_used_bytes",
                                    "query": '{comm="gpu_train"}', "from": t0,
                                    "until": "now"})
        pts = get_json(ui + "/api/v1/points?" + q)
        gpus = {s["labels"].get("gpu_id") for s in pts.get("series", []) if s["points"]}
        return gpus if gpus >= {"0", "1"} else None
    check(wait_for(points, 60, "gpu_train's memory points on the server"),
          "the GPU page has gpu_train's memory on GPUs 0 and 1")
    check(len(lines) == len(want), "nothing else was printed meanwhile (%d lines)" % len(lines))
    check(not os.path.exists(calls), "neither npm nor apt-get was called: %s"
          % (open(calls).read() if os.path.exists(calls) else ""))

    # Ctrl-C.
    os.killpg(p.pid, signal.SIGINT)
    try:
        p.wait(60)
    except subprocess.TimeoutExpired:
        fail("make run didn't stop within 60 s of Ctrl-C")
    reader.join(10)
    print("make run ended: %s" % p.returncode)
    check(not any(l.startswith("make: ***") for l in lines),
          "Ctrl-C: make reports no error: %s" % lines[len(want):])
    end = time.time() + 30
    while marked(mark.encode()) and time.time() < end:
        time.sleep(0.2)
    left = marked(mark.encode())
    check(not left, "Ctrl-C: every process make run started is gone (left: %s)" % left)
finally:
    if p.poll() is None:
        os.killpg(p.pid, signal.SIGINT)
        try:
            p.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    for pid in marked(mark.encode()):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
print("PASS")
