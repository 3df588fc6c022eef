#!/usr/bin/env python3
"""test_faults_names.py: what a client sends can't grow the store's memory
without bound (issue 22, security probe finding 8).

  1. Eight pprofs of 50 frames of 256 KB unique names each (100 MB of names
     in about 0.4 MB of gzip): stored, each name cut to 4,096 bytes ending
     in "…"; the server's RSS grows by less than 32 MB (was the 100 MB of
     names, and as much on disk and again after a restart); the unfiltered
     flame graph over them is under 4 MB with a peak under 64 MB more; after
     a restart the server is as small.
  2. `sonde server --auth --max-series 4 --max-names 1M`, two projects:
     alpha's fifth series is refused (507, the error naming the project
     and --max-series), points making a new series too, while alpha's own
     series still take windows and beta has four of its own; 200 new names
     of 4 KB fit alpha's 1 MiB of names, 200 more are refused (507 naming
     --max-names) and stored nowhere; each refusal is counted in
     sonde_server_quota_refusals_total{bound}.
Needs root to reset the peak RSS (clear_refs) for the flame graph's peak;
without it that figure is left out.
"""
import gzip
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
import pprof_wire  # noqa: E402
import test_auth  # noqa: E402
from faults_test import figures, proc_mb, reset_peak  # noqa: E402
from server_test import Server  # noqa: E402
from sonde_test import check, tmpdir  # noqa: E402

MB = 1024.0
CUT = "\u2026"


def pprof(names, labels=None):
    return gzip.compress(pprof_wire.encode([("samples", "count")],
                                           [(names, [1], labels or {})]))


def long_names(out):
    srv = Server(os.path.join(tmpdir(), "d"))
    pid, now = srv.p.pid, int(time.time())
    try:
        idle = proc_mb(pid, "VmRSS")
        wire = 0
        for k in range(8):
            msg = pprof(["n%d_%d_" % (k, j) + "x" * (256 << 10) for j in range(50)])
            wire += len(msg)
            st, _, body = srv.post("/api/v1/ingest", msg, service_name="long", type="cpu",
                                   **{"from": (now - 100 + k) * 1000,
                                      "until": (now - 99 + k) * 1000})
            check(st == 200, "a pprof of 50 names of 256 KB stored: %d %s" % (st, body[:200]))
        grew = proc_mb(pid, "VmRSS") - idle
        out.update(names_wire_bytes=wire, names_rss_growth_mb=round(grew, 1))
        check(grew < 32, "8 pprofs, 100 MB of names in %d bytes: the server's RSS +%.1f MB "
              "(< 32)" % (wire, grew))
        measured = reset_peak(pid)
        base = proc_mb(pid, "VmRSS")
        st, _, body = srv.get("/pyroscope/render", query="long.cpu{}",
                              **{"from": "now-1h", "until": "now"})
        peak = proc_mb(pid, "VmHWM") - base
        check(st == 200, "the unfiltered flame graph: %d %s" % (st, body[:200]))
        names = json.loads(body)["flamebearer"]["names"]
        longest = max(len(n.encode()) for n in names)
        cut = [n for n in names if n.startswith("n")]
        out.update(flame_bytes=len(body), flame_peak_mb=round(peak, 1) if measured else None,
                   longest_name=longest)
        check(len(cut) == 400 and all(len(n.encode()) == 4096 and n.endswith(CUT)
                                      for n in cut),
              "its 400 names each cut to 4096 bytes, ending in '%s' (longest %d)"
              % (CUT, longest))
        check(len(body) < 4 << 20, "the flame graph: %d bytes (< 4 MiB)" % len(body))
        if measured:
            check(peak < 64, "its peak: +%.1f MB (< 64)" % peak)
        du = sum(os.path.getsize(os.path.join(srv.data, f)) for f in os.listdir(srv.data))
        out.update(names_disk_mb=round(du / 1e6, 1))
        check(du < 32e6, "on disk: %.1f MB (< 32)" % (du / 1e6))
        srv.stop()
        srv = Server(srv.data)
        again = proc_mb(srv.p.pid, "VmRSS")
        out.update(names_rss_restart_mb=round(again, 1))
        check(again < idle + 32, "after a restart: %.1f MB (< %.1f)" % (again, idle + 32))
    finally:
        srv.stop()


def quota(out):
    data = tmpdir()
    alpha = test_auth.token(data, "alpha", "admin")
    beta = test_auth.token(data, "beta", "admin")
    srv = Server(data, ["--auth", "--max-series", "4", "--max-names", "1M"])
    a, b = test_auth.Client(srv, test_auth.bearer(alpha)), test_auth.Client(
        srv, test_auth.bearer(beta))
    now = int(time.time())

    def ingest(c, pid, names=("main", "work"), t=now - 60):
        return c.request("POST", "/api/v1/ingest", pprof(list(names)),
                         "application/octet-stream", service_name="q", type="cpu", pid=pid,
                         **{"from": t * 1000, "until": (t + 1) * 1000})

    def total(c):
        return sum(g["total"] for g in c.json(
            "/api/v1/totals", by="pid", query='{service_name="q"}',
            **{"from": (now - 600) * 1000, "until": now * 1000})["groups"])

    try:
        for pid in range(1, 5):
            st, _, body = ingest(a, pid)
            check(st == 200, "alpha's series %d: %d %s" % (pid, st, body[:200]))
        before = total(a)
        st, _, body = ingest(a, 5)
        err = test_auth.error_of(body)
        out.update(series_refusal=err)
        check(st == 507 and "alpha" in err and "--max-series" in err,
              "alpha's fifth series: 507 naming the project and the bound (%d %s)" % (st, err))
        pts = {"points": [{"name": "gpu_memory_used_bytes", "labels": {"gpu": "9"},
                           "ts_ms": (now - 60) * 1000, "value": 1}]}
        st, _, body = a.request("POST", "/api/v1/ingest/points", json.dumps(pts).encode(),
                                "application/json")
        check(st == 507, "alpha's points of a new series: 507 (%d %s)" % (st, body[:200]))
        st, _, body = ingest(a, 1, t=now - 30)
        check(st == 200, "alpha's first series still takes windows: %d %s" % (st, body[:200]))
        for pid in range(1, 5):
            st, _, body = ingest(b, pid)
            check(st == 200, "beta's series %d (its own bound): %d %s" % (pid, st, body[:200]))

        def names(k):
            return ["q%d_%d_" % (k, j) + "y" * 4000 for j in range(200)]
        st, _, body = ingest(a, 2, names(0))
        check(st == 200, "200 names of 4 KB within alpha's 1 MiB: %d %s" % (st, body[:200]))
        st, _, body = ingest(a, 2, names(1), t=now - 20)
        err = test_auth.error_of(body)
        out.update(names_refusal=err)
        check(st == 507 and "alpha" in err and "--max-names" in err,
              "200 more: 507 naming the project and the bound (%d %s)" % (st, err))
        fb = a.json("/pyroscope/render", query='q.cpu{}', **{"from": "now-1h", "until": "now"})
        check(not any(n.startswith("q1_") for n in fb["flamebearer"]["names"]),
              "nothing of the refused windows stored")
        after = total(a)
        check(after == before + 2, "alpha's totals: its accepted windows alone (%d -> %d)"
              % (before, after))
        metrics = a.request("GET", "/metrics")[2].decode()
        counts = {}
        for line in metrics.splitlines():
            if line.startswith("sonde_server_quota_refusals_total{"):
                counts[line.split('"')[1]] = float(line.split()[-1])
        out.update(quota_refusals=counts)
        check(counts.get("series") == 2 and counts.get("names") == 1,
              "refusals counted by bound: %s" % counts)
    finally:
        srv.stop()


def main():
    out = {}
    try:
        long_names(out)
        quota(out)
    finally:
        figures("names", out)


if __name__ == "__main__":
    main()
