"""A real Prometheus (Debian `prometheus`) scrapes the metrics endpoint on
loopback every second; its query API must return the scripted values
exactly (memory, counters, the seed's summaries, the stuck collective, the
health series), a histogram_quantile over sonde_*_bucket must land in the
right bucket, and the target must be healthy. Then `sonde agent
--simulate`: its whole /metrics (with the alert engine's and the WebSocket
server's series) is scraped, carries sonde_agent_simulated 1, and moves
between scrapes."""
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "metrics"))
from metrics_test import Harness, SimAgent, check, fail, free_port, need, skip  # noqa: E402
from sonde_test import tmpdir  # noqa: E402

need("prometheus", "Debian prometheus")


class Prometheus:
    def __init__(self, targets):
        self.dir = tmpdir()
        self.port = free_port()
        cfg = os.path.join(self.dir, "prometheus.yml")
        with open(cfg, "w") as f:
            f.write("global:\n  scrape_interval: 1s\n  scrape_timeout: 900ms\n"
                    "scrape_configs:\n  - job_name: sonde\n    static_configs:\n"
                    "      - targets: [%s]\n" % ", ".join("'%s'" % t for t in targets))
        self.log = open(os.path.join(self.dir, "prometheus.log"), "w")
        cmd = ["prometheus", "--config.file=" + cfg,
               "--web.listen-address=127.0.0.1:%d" % self.port,
               "--storage.tsdb.path=" + os.path.join(self.dir, "data")]
        print("$ " + " ".join(cmd))
        self.p = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 30
        while time.time() < deadline:
            if self.p.poll() is not None:
                self.dump()
                fail("prometheus exited at start (exit %d)" % self.p.returncode)
            try:
                if urllib.request.urlopen(self.url("/-/ready"), timeout=2).status == 200:
                    return
            except OSError:
                pass
            time.sleep(0.2)
        self.dump()
        self.stop()
        skip("prometheus didn't get ready in 30 s on this machine")

    def url(self, path):
        return "http://127.0.0.1:%d%s" % (self.port, path)

    def query(self, q):
        """{frozenset(labels.items()): float} of an instant query."""
        u = self.url("/api/v1/query?" + urllib.parse.urlencode({"query": q}))
        r = json.load(urllib.request.urlopen(u, timeout=10))
        if r.get("status") != "success":
            fail("query %s: %s" % (q, r))
        out = {}
        for s in r["data"]["result"]:
            labels = {k: v for k, v in s["metric"].items()
                      if k not in ("instance", "job", "__name__")}
            out[frozenset(labels.items())] = float(s["value"][1])
        return out

    def wait_for(self, q, pred, what, secs=20):
        """Polls q until pred(result) holds; returns the result."""
        deadline = time.time() + secs
        res = None
        while time.time() < deadline:
            res = self.query(q)
            if pred(res):
                check(True, what)
                return res
            time.sleep(0.5)
        self.dump()
        fail("%s: last result of %s was %s" % (what, q, res))

    def dump(self):
        self.log.flush()
        with open(self.log.name) as f:
            print(f.read()[-3000:])

    def stop(self):
        if self.p.poll() is None:
            self.p.terminate()
            try:
                self.p.wait(15)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def one(res):
    return list(res.values())[0] if len(res) == 1 else None


scripted = Harness()
simulated = SimAgent("--interval", "1")
prom = None
try:
    scripted.send(
        "capacity 0 85899345920 nvml",
        "alloc 1000 0 83886080000",
        "alloc 1000 0 1000",
        "free 1000 0 1000",
        "alloc 1001 1 4096",
        "launch 1000 142000 98",
        "launch 1000 891000 2",
        "launch 1000 3000 900",
        "nccl 1000 allreduce 1048576 34000000",
        "nccl 1001 allreduce 1048576 67000000",
        "dataloader 1000 8000000",
        "copy 1000 d2h 12345",
        "stuck 1001 allreduce 1 2 abc 75",
        "health 1000 3 500 7 12 1 0.125",
    )
    prom = Prometheus(["127.0.0.1:%d" % scripted.http, "127.0.0.1:%d" % simulated.http])
    prom.wait_for('count(up{job="sonde"} == 1)', lambda r: one(r) == 2, "both targets are up")
    scr = 'instance="127.0.0.1:%d"' % scripted.http
    r = prom.wait_for("zernel_gpu_memory_used_bytes{%s}" % scr, lambda r: len(r) == 2,
                      "the memory series arrived")
    check(r[frozenset({("pid", "1000"), ("gpu_id", "0")})] == 83886080000,
          "zernel_gpu_memory_used_bytes{pid=1000,gpu_id=0} = 83886080000")
    check(r[frozenset({("pid", "1001"), ("gpu_id", "1")})] == 4096,
          "zernel_gpu_memory_used_bytes{pid=1001,gpu_id=1} = 4096")
    r = prom.query("zernel_gpu_memory_peak_bytes{%s,pid=\"1000\"}" % scr)
    check(one(r) == 83886081000, "peak of pid 1000 = 83886081000")
    r = prom.query("zernel_cuda_launch_latency_seconds_count{%s}" % scr)
    check(one(r) == 1000, "zernel_cuda_launch_latency_seconds_count = 1000")
    r = prom.query("zernel_cuda_launch_latency_seconds{%s,quantile=\"0.99\"}" % scr)
    check(one(r) is not None and abs(one(r) - 142e-6) <= 142e-6 / 64,
          "launch p99 = 142 us within 1/64 (%s)" % r)
    r = prom.query("zernel_cuda_launch_latency_seconds{%s,quantile=\"0.5\"}" % scr)
    check(one(r) is not None and abs(one(r) - 3e-6) <= 3e-6 / 64,
          "launch p50 = 3 us within 1/64 (%s)" % r)
    r = prom.query("sonde_cuda_launches_total{%s}" % scr)
    check(one(r) == 1000, "sonde_cuda_launches_total = 1000")
    # histogram_quantile interpolates within the le bucket holding the rank.
    r = prom.query("histogram_quantile(0.95, sonde_cuda_launch_duration_seconds_bucket{%s})"
                   % scr)
    check(one(r) is not None and 100e-6 < one(r) <= 250e-6,
          "histogram_quantile(0.95) falls in the (100 us, 250 us] bucket (%s)" % r)
    r = prom.query("zernel_nccl_collective_duration_seconds{%s,op=\"allreduce\"}" % scr)
    check(r.get(frozenset({("op", "allreduce"), ("quantile", "0.99")})) == 0.067,
          "allreduce p99 = 67 ms")
    r = prom.query("sonde_nccl_bytes_total{%s,op=\"allreduce\"}" % scr)
    check(one(r) == 2097152, "sonde_nccl_bytes_total{op=allreduce} = 2 MiB")
    r = prom.query("zernel_dataloader_wait_seconds{%s,quantile=\"0.5\"}" % scr)
    check(one(r) == 0.008, "dataloader wait p50 = 8 ms")
    r = prom.query("sonde_cuda_memcpy_bytes_total{%s,kind=\"d2h\"}" % scr)
    check(one(r) == 12345, "sonde_cuda_memcpy_bytes_total{kind=d2h} = 12345")
    r = prom.query("sonde_nccl_stuck_seconds{%s}" % scr)
    check(r.get(frozenset({("pid", "1001"), ("op", "allreduce"), ("rank", "1"),
                           ("comm", "0xabc")})) == 75, "stuck allreduce rank 1 = 75 s")
    r = prom.query("sonde_gpu_memory_used_ratio{%s,pid=\"1000\"}" % scr)
    check(one(r) is not None and abs(one(r) - 83886080000 / 85899345920) < 1e-12,
          "sonde_gpu_memory_used_ratio of pid 1000")
    r = prom.query("sonde_agent_gpu_events_total{%s}" % scr)
    check(one(r) == 500, "sonde_agent_gpu_events_total = 500")
    r = prom.query("sonde_agent_simulated{%s}" % scr)
    check(one(r) == 0, "the scripted target is not simulated")

    sim = 'instance="127.0.0.1:%d"' % simulated.http
    r = prom.query("sonde_agent_simulated{%s}" % sim)
    check(one(r) == 1, "the simulated target says sonde_agent_simulated 1")
    prom.wait_for("increase(sonde_cuda_launches_total{%s,pid=\"1000\"}[5s])" % sim,
                  lambda r: one(r) is not None and one(r) > 0,
                  "simulated launches grow between scrapes")
    r = prom.query("count(zernel_gpu_memory_used_bytes{%s})" % sim)
    check(one(r) == 3, "the simulator shows three pid:gpu memory series")
    r = prom.query("scrape_samples_scraped{%s}" % scr)
    check(one(r) is not None and one(r) > 100, "Prometheus took every sample (%s)" % r)
finally:
    if prom:
        prom.stop()
    scripted.stop()
    simulated.stop()
print("PASS")
