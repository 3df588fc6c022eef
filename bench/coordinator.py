#!/usr/bin/env python3
"""coordinator.py: `sonde coordinator` over N `sonde server`s (N=100 by
default), each a process on its own loopback port with its own --data,
holding 1 h of one service (60 windows of a minute, STACKS distinct stacks
each, a share of them the same on every server and the rest its own),
merging the service's 1 h flame graph: the latency of /api/v1/flamegraph
and /api/v1/top through the coordinator (REPS runs each, after a warm-up),
one server's own flame graph for comparison, the servers' pprof bytes, the
merged tree's size, and the RSS of the coordinator and of the servers.
Prints a Markdown report. Run by `make bench-coordinator` (B=build);
N=, STACKS=, REPS= override."""
import http.client
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
SONDE = os.path.join(ROOT, os.environ.get("B", "build"), "sonde")
N = int(os.environ.get("N", "100"))
STACKS = int(os.environ.get("STACKS", "200"))
REPS = int(os.environ.get("REPS", "7"))
WINDOWS, WS = 60, 60


def start(args):
    p = subprocess.Popen([SONDE] + args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, start_new_session=True)
    line = p.stdout.readline()
    m = re.search(r"listening on http://[^ ]*:(\d+)/", line)
    if not m:
        p.kill()
        sys.exit("can't start sonde %s: %s" % (args[0], line + p.stdout.read()))
    threading.Thread(target=lambda: [None for _ in p.stdout], daemon=True).start()
    return p, int(m.group(1))


def req(port, path, body=None, ctype=None, timeout=120):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        c.request("POST" if body is not None else "GET", path, body=body,
                  headers={"Content-Type": ctype} if ctype else {})
        r = c.getresponse()
        data = r.read()
        if r.status != 200:
            raise RuntimeError("%s: HTTP %d %s" % (path, r.status, data[:200]))
        return data
    finally:
        c.close()


def rss_kb(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def stacks_of(i):
    """Server i's stacks: half shared by every server, half its own."""
    rnd = random.Random(i)
    out = {}
    for k in range(STACKS):
        own = k % 2 == 1
        r = random.Random(k * 7919 + (i * 104729 if own else 0))
        depth = 6 + r.randrange(14)
        frames = ["main", "serve"] + ["fn_%d_%d" % (d, r.randrange(12)) for d in range(depth)]
        if own:
            frames.append("site%d_leaf%d" % (i, k))
        out[";".join(frames)] = 1 + rnd.randrange(50)
    return out


def feed(i, port, base):
    text = "".join("%s %d\n" % kv for kv in stacks_of(i).items()).encode()
    for w in range(WINDOWS):
        q = urllib.parse.urlencode({"name": "api.cpu{node=n%d}" % i, "from": base + w * WS,
                                    "until": base + (w + 1) * WS, "sampleRate": 99})
        req(port, "/ingest?" + q, text, "text/plain")


def timed(port, path):
    t0 = time.perf_counter()
    body = req(port, path)
    return time.perf_counter() - t0, body


def main():
    tmp = tempfile.mkdtemp(prefix="sonde-bench-coord-")
    procs = []
    try:
        print("# sonde coordinator over %d servers\n" % N)
        with open("/proc/meminfo") as f:
            mem = int(f.readline().split()[1]) / 2**20
        print("- machine: %d CPUs, %.1f GiB RAM, %s" % (os.cpu_count(), mem,
                                                        os.uname().release))
        print("- date: %s, commit %s" % (
            time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                           capture_output=True, text=True).stdout.strip()))
        print("- command: `make bench-coordinator` (N=%d, STACKS=%d, REPS=%d)" % (N, STACKS, REPS))
        print("- load average before: %s\n" % " ".join("%.2f" % x for x in os.getloadavg()))
        ports = []
        t0 = time.time()
        for i in range(N):
            p, port = start(["server", "--listen", "127.0.0.1:0", "--threads", "2",
                             "--data", os.path.join(tmp, "s%d" % i)])
            procs.append(p)
            ports.append(port)
        base = int(time.time()) // WS * WS - WINDOWS * WS
        with ThreadPoolExecutor(8) as ex:
            list(ex.map(lambda a: feed(a[0], a[1], base), enumerate(ports)))
        print("Started %d servers and fed each 1 h (%d windows of %d stacks) in %.0f s.\n"
              % (N, WINDOWS, STACKS, time.time() - t0))
        args = ["coordinator", "--listen", "127.0.0.1:0", "--timeout", "30s"]
        for port in ports:
            args += ["--server", "http://127.0.0.1:%d" % port]
        co, cport = start(args)
        procs.append(co)
        rng = "&from=%d&until=%d" % (base * 1000, (base + WINDOWS * WS) * 1000)
        q = "query=" + urllib.parse.quote("api.cpu") + rng
        pprof = len(req(ports[0], "/api/v1/pprof?" + q))
        rows = []
        for what, port, path in (
                ("one server's own flame graph", ports[0], "/api/v1/flamegraph?" + q),
                ("coordinator: /api/v1/flamegraph (1 h, merged)", cport,
                 "/api/v1/flamegraph?" + q),
                ("coordinator: /api/v1/top", cport, "/api/v1/top?limit=100&" + q),
                ("coordinator: /api/v1/label/values", cport,
                 "/api/v1/label/values?name=node" + rng)):
            timed(port, path)  # warm-up
            runs = [timed(port, path) for _ in range(REPS)]
            secs = sorted(t for t, _ in runs)
            body = runs[-1][1]
            rows.append((what, statistics.median(secs), secs[-1], len(body)))
            if "flamegraph" in path and port == cport:
                fb = json.loads(body)
                if fb.get("partial"):
                    sys.exit("the merged answer is partial: %s" % fb["failed"][:3])
                merged_ticks = fb["flamebearer"]["numTicks"]
                merged_names = len(fb["flamebearer"]["names"])
        print("| query (%d servers, 1 h each) | median | max of %d | answer |" % (N, REPS))
        print("| --- | ---: | ---: | ---: |")
        for what, med, mx, size in rows:
            print("| %s | %.0f ms | %.0f ms | %d KB |" % (what, med * 1e3, mx * 1e3,
                                                      size // 1024))
        want = sum(sum(stacks_of(i).values()) for i in range(N)) * WINDOWS
        print("\nMerged: %d samples (%s the sum fed), %d distinct names; each server's "
              "pprof download of its hour is %d KB.\n"
              % (merged_ticks, "equal to" if merged_ticks == want else "NOT equal to",
                 merged_names, pprof // 1024))
        srss = sorted(rss_kb(p.pid) for p in procs[:-1])
        print("RSS: coordinator %.1f MB after the queries; servers median %.1f MB, max %.1f MB,"
              " %.0f MB in all.\n" % (rss_kb(co.pid) / 1024, statistics.median(srss) / 1024,
                                     srss[-1] / 1024, sum(srss) / 1024))
        med = rows[1][1]
        print("Target: 100 servers merged <= 1 s: %s (median %.0f ms over %d servers)."
              % ("met" if med <= 1.0 and N >= 100 else "**not met**", med * 1e3, N))
        print("\nLoad average after: %s" % " ".join("%.2f" % x for x in os.getloadavg()))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
