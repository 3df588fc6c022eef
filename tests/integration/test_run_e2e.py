"""`sonde run` end to end, everything real on 127.0.0.1: the agent samples
the CPU and probes CUDA/NCCL, ships each window to its in-process server over
loopback, and the query API answers --

- the known-share workload (hot_a 60 %, hot_b 30 %, hot_c 10 %): the flame
  graph (Pyroscope's flamebearer) has each function within 5 points of its
  truth, reached through main -> run, and the top table agrees;
- a stand-in training job (tests/gpu/): its gpu_launch profile counts every
  launch per kernel exactly, its GPU memory points end at exactly what it
  holds per device, its launches per second add up to its launches; the
  agent's verdict evidence reaches the server as process_time_share points
  of its pid, a series per state, on_cpu among them (its host work);
- the web UI is served at /;
- after a restart on the same --data, what was stored is still there."""
import json
import os
import re
import signal
import subprocess
import threading
import time
import urllib.parse
import urllib.request

from agent_test import GPU_SI, GPU_WL, Workload, need_standins, parse_prom, value, wait_for
from server_test import flame_total
from sonde_test import *

need_bpf()
need_standins()
TRUTH = {"hot_a": 60.0, "hot_b": 30.0, "hot_c": 10.0}
data = os.path.join(tmpdir(), "sonde-data")


class Run:
    def __init__(self):
        cmd = [SONDE, "run", "--listen", "127.0.0.1:0", "--data", data, "--metrics",
               "127.0.0.1:0", "--ws", "127.0.0.1:0", "--window", "2", "-F", "199"]
        print("$ " + " ".join(cmd))
        env = dict(os.environ, LD_LIBRARY_PATH=GPU_SI)
        self.p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE, text=True, env=env)
        self.log, ready = [], threading.Event()
        self.url = self.metrics_url = None

        def pump():
            for line in self.p.stderr:
                self.log.append(line.rstrip("\n"))
                m = re.search(r"metrics on (http://[^ ]+)/metrics", line)
                if m:
                    self.metrics_url = m.group(1)
                m = re.search(r"open (http://[^ ]+/) in a browser", line)
                if m:
                    self.url = m.group(1).rstrip("/")
                    ready.set()
            ready.set()
        threading.Thread(target=pump, daemon=True).start()
        if not ready.wait(30) or not self.url:
            self.stop()
            print("\n".join(self.log))
            fail("sonde run did not print the UI's address")

    def get(self, path, **params):
        if params:
            path += "?" + urllib.parse.urlencode(params)
        with urllib.request.urlopen(self.url + path, timeout=30) as r:
            return r.status, r.headers.get("Content-Type", ""), r.read()

    def json(self, path, **params):
        return json.loads(self.get(path, **params)[2])

    def agent_metrics(self):
        with urllib.request.urlopen(self.metrics_url + "/metrics", timeout=30) as r:
            return parse_prom(r.read().decode())

    def settle(self):
        """Waits until what the agent sampled so far is in the store: two
        more windows cut (the one holding now, then the next) and none
        waiting to be sent."""
        w0 = value(self.agent_metrics(), "sonde_agent_profile_windows_total")

        def settled():
            m = self.agent_metrics()
            return (value(m, "sonde_agent_profile_windows_total") >= w0 + 2 and
                    value(m, "sonde_agent_ship_queue") == 0)
        wait_for(settled, 30, "two more windows shipped")

    def stop(self):
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGINT)
            try:
                self.p.wait(30)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        return self.p.returncode


r = Run()
try:
    # --- CPU: the known-share workload --------------------------------------
    t0 = int(time.time() * 1000) - 1000
    w = subprocess.Popen([os.path.join(WL, "shares"), "6"])
    check(w.wait(60) == 0, "the workload ran")
    # Its own samples: another process named shares may run on the machine.
    q = '{service_name="shares",type="cpu",pid="%d"}' % w.pid

    def enough():
        top = r.json("/api/v1/top", query=q, **{"from": t0, "until": "now"})
        return top if top["total"] >= 900 else None
    # Windows of 2 s: everything the workload did is in within two of them,
    # on a machine with time to spare (a loaded one may take longer to cut
    # and ship them: the bound is only how long to wait before failing).
    wait_for(enough, 60, "the workload's samples in the store")
    r.settle()
    fg = r.json("/api/v1/flamegraph", query=q, **{"from": t0, "until": "now"})
    fb = fg["flamebearer"]
    n = fb["numTicks"]
    check(n >= 900 and fg["metadata"]["units"] == "samples",
          "the flame graph holds %d samples of shares" % n)
    check(fg["metadata"]["sampleRate"] == 199, "its sampleRate is the agent's -F 199 (%s)"
          % fg["metadata"]["sampleRate"])
    for func, truth in TRUTH.items():
        t = flame_total(fb, ["_start", "__libc_start_main", "__libc_start_call_main", "main",
                             "run", func])
        share = 100.0 * (t or 0) / n
        check(abs(share - truth) <= 5, "flame graph: main;run;%s %.1f %% (truth %.0f %%)"
              % (func, share, truth))
    top = r.json("/api/v1/top", query=q, limit=50, sort="total", **{"from": t0, "until": "now"})
    by = {f["name"]: f for f in top["functions"]}
    for func, truth in TRUTH.items():
        share = 100.0 * by[func]["total"] / top["total"]
        check(abs(share - truth) <= 5, "top: %s total %.1f %%" % (func, share))

    # --- GPU: a stand-in training job ---------------------------------------
    # 100 ms of host work a step: a second on a CPU, a share of its window
    # well above what the agent leaves out.
    job = Workload("gpu_train", ["--gpus", "2", "--steps", "10", "--cpu-us", "100000"])
    t, pid = job.truth, job.pid
    pq = '{type="gpu_launch",pid="%d"}' % pid

    def launches():
        top = r.json("/api/v1/top", query=pq, **{"from": t0, "until": "now"})
        return top if top["total"] >= t["launches"]["total"] else None
    top = wait_for(launches, 15, "the job's %d launches in the store" % t["launches"]["total"])
    check(top["total"] == t["launches"]["total"] and top["unit"] == "launches",
          "gpu_launch: %d launches, as the job counted" % top["total"])
    # The kernels, not the host functions of the same name that launch them.
    by = {f["name"]: f["self"] for f in top["functions"] if f["module"] == "[cuda]"}
    for kernel, count in t["launches"]["by_kernel"].items():
        check(by.get(kernel) == count, "gpu_launch: %s launched %d times (store: %s)"
              % (kernel, count, by.get(kernel)))
    ts = r.json("/api/v1/timeseries", query=pq, step=1000, **{"from": t0, "until": "now"})
    check(round(sum(ts["values"])) == t["launches"]["total"],
          "launches per second add up to %d" % t["launches"]["total"])

    def memory():
        pts = r.json("/api/v1/points", name="gpu_memory_used_bytes",
                     query='{pid="%d"}' % pid, **{"from": t0, "until": "now"})
        last = {s["labels"]["gpu_id"]: s["points"][-1][1] for s in pts["series"]}
        want = {str(d["device"]): d["current_bytes"] for d in t["memory"]["devices"]}
        return pts if last == want else None
    pts = wait_for(memory, 10, "the job's memory points")
    s0 = pts["series"][0]
    check(s0["labels"].get("comm") == "gpu_train" and s0["labels"].get("node"),
          "memory points carry pid, comm, gpu_id and node: %s" % s0["labels"])
    check(max(p[1] for s in pts["series"] for p in s["points"]) <=
          max(d["peak_bytes"] for d in t["memory"]["devices"]),
          "no memory point above the job's peak")

    # What bounds it: the shares of the window it ran in, shipped each
    # second of the next one (windows of 2 s: within a few of them).
    states = {"gpu_wait", "collective", "dataloader_wait", "on_cpu", "lock", "io", "sleep"}

    def shares():
        pts = r.json("/api/v1/points", name="process_time_share",
                     query='{pid="%d"}' % pid, **{"from": t0, "until": "now"})
        by = {s["labels"].get("state"): s for s in pts["series"]}
        return by if "on_cpu" in by else None
    by = wait_for(shares, 30, "the job's process_time_share points")
    check(set(by) <= states, "process_time_share: a series per state: %s" % sorted(by))
    labels = by["on_cpu"]["labels"]
    check(labels.get("comm") == "gpu_train" and labels.get("node") and
          labels.get("pid") == str(pid), "process_time_share carries node, pid, comm and state: %s"
          % labels)
    vals = [p[1] for s in by.values() for p in s["points"]]
    check(all(0.005 <= v <= 1.5 for v in vals),
          "every share at least half a percent of the window (and at most 1.5): %s"
          % sorted(set(round(v, 3) for v in vals)))
    job.release()

    # --- the UI ---------------------------------------------------------------
    st, ctype, body = r.get("/")
    check(st == 200 and ctype.startswith("text/html") and b"<html" in body.lower(),
          "the web UI is served at / (%s, %d bytes)" % (ctype, len(body)))
except SystemExit:
    print("\n".join(r.log[-30:]))
    raise
finally:
    rc = r.stop()
check(rc == 0, "sonde run exits 0 on Ctrl-C")

# --- the store outlives the process -------------------------------------------
r = Run()
try:
    top = r.json("/api/v1/top", query=q, **{"from": t0, "until": "now"})
    check(top["total"] >= n, "after a restart the workload's %d samples are still there (%d)"
          % (n, top["total"]))
finally:
    r.stop()
