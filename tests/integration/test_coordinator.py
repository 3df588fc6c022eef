#!/usr/bin/env python3
"""`sonde coordinator` over three real `sonde server`s, each fed different
data (Pyroscope folded ingest, agents' pprof with modules and source
files, metric points, alerts -- some series on two servers at once), checked
value by value against a fourth server fed all of it: label names and
values, totals, /api/v1/flamegraph and /pyroscope/render (whole, cut to a
few nodes, grouped by a label), the diff of two halves, top by self and by
total (a function of the same name in two modules kept apart), time series,
points, alerts, the folded download and the pprof download (read by `go
tool pprof`). Also: --help, the YAML config (names, labels,
/api/v1/servers) and its errors, a coordinator without servers, POST
refused, and the web UI served."""
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(__file__))
import pprof_wire  # noqa: E402
from sonde_test import SONDE, check, fail, run, tmpdir  # noqa: E402
from server_test import Coordinator, Server  # noqa: E402


WS, WINDOWS = 10, 20
now = int(time.time()) // WS * WS
base = now - 600
half = base + WINDOWS // 2 * WS
end = base + WINDOWS * WS
RANGE = {"from": base * 1000, "until": end * 1000}

OLD = {"main;run;hot_a": 60, "main;run;hot_b": 30, "main;run;read;sys_read_[k]": 10}
NEW = {"main;run;hot_a": 40, "main;run;hot_b": 50, "main;run;write;sys_write_[k]": 7}
TRAINER = {"_start;main;train;matmul": 140, "_start;main;train;load_batch": 60}
DEEP = {";".join("f%d" % i for i in range(40)) + ";leaf": 3}


def feed(targets, window, name, stacks, **params):
    for t in targets:
        t.ingest_folded(name, window, window + WS, stacks, **params)


def agent_pprof(targets, node, module, weight):
    """An agent's window: functions in a module, with source files; "main"
    is in a different module on each node, as two programs' mains are."""
    msg = pprof_wire.encode(
        [("samples", "count"), ("cpu", "nanoseconds")],
        [(["main", "serve", "parse"], [weight, weight * 10000000]),
         (["main", "serve", "encode"], [2 * weight, 2 * weight * 10000000])],
        sources={"serve": ("/src/serve.c", 10), "parse": ("/src/parse.c", 0)},
        modules={"main": module, "serve": "/usr/lib/libserve.so", "parse": module})
    for t in targets:
        st, _, body = t.post("/api/v1/ingest", msg, "application/octet-stream", node=node,
                             type="cpu", service_name="api", **{"from": half * 1000,
                                                                "until": (half + WS) * 1000})
        if st != 200:
            fail("agent ingest: HTTP %d %s" % (st, body[:300]))


def points(targets, series, ts):
    pts = [{"name": "gpu_memory_used_bytes", "labels": series, "ts_ms": t * 1000,
            "value": float(t % 97) * 1e6} for t in ts]
    for t in targets:
        st, _, body = t.post("/api/v1/ingest/points", json.dumps({"points": pts}).encode(),
                             "application/json")
        if st != 200:
            fail("points: HTTP %d %s" % (st, body[:300]))


def alert(targets, name, status, starts):
    body = json.dumps({"status": status, "alert": name, "labels": {"alertname": name},
                       "annotations": {"summary": name}, "startsAt": starts,
                       "endsAt": None if status == "firing" else starts}).encode()
    for t in targets:
        st, _, out = t.post("/api/v1/alerts", body, "application/json")
        if st != 200:
            fail("alert: HTTP %d %s" % (st, out[:300]))


def strip(answer):
    answer.pop("partial", None)
    answer.pop("failed", None)
    return answer


servers = []
coords = []
try:
    a, b, c, combined = (Server(tmpdir()) for _ in range(4))
    servers += [a, b, c, combined]

    for w in range(WINDOWS):
        f = base + w * WS
        # The same series on two servers (a and b), and series of their own.
        feed([a if w % 2 else b, combined], f, "shares.cpu{comm=shares,pid=4242}",
             OLD if f < half else NEW, sampleRate=99)
        feed([c, combined], f, "trainer.cpu{comm=python3,pid=777}", TRAINER, sampleRate=99)
        feed([b, combined], f, "trainer.gpu_launch{comm=python3,pid=777}",
             {"_start;main;train;cudaLaunchKernel": 500 + w}, units="launches")
    feed([a, combined], base, "deep.cpu{comm=deep,pid=9}", DEEP, sampleRate=99)
    agent_pprof([a, combined], "node-a", "/usr/bin/app_a", 5)
    agent_pprof([c, combined], "node-c", "/usr/bin/app_c", 7)
    points([a, combined], {"node": "n1", "pid": "4242", "gpu_id": "0"},
           range(base, half, 5))
    points([b, combined], {"node": "n1", "pid": "4242", "gpu_id": "0"},
           range(half, end, 5))
    points([c, combined], {"node": "n2", "pid": "777", "gpu_id": "1"}, range(base, end, 20))
    alert([a, combined], "GpuMemoryHigh", "firing", "2026-11-20T10:00:00Z")
    alert([c, combined], "NcclStuck", "firing", "2026-11-20T11:00:00Z")
    alert([b, combined], "Old", "resolved", "2026-11-19T10:00:00Z")

    co = Coordinator(["--server", "a=http://127.0.0.1:%d" % a.port,
                      "--server", "http://127.0.0.1:%d" % b.port,
                      "--server", "http://127.0.0.1:%d/" % c.port])
    coords.append(co)

    def same(path, what, **params):
        want = combined.get_json(path, **params)
        got = co.get_json(path, **params)
        check("partial" not in got and "failed" not in got,
              "%s: complete (no partial, no failed)" % what)
        if got != want:
            for k in set(got) | set(want):
                if got.get(k) != want.get(k):
                    print("differs at %s: %s vs %s" % (k, json.dumps(got.get(k))[:600],
                                                       json.dumps(want.get(k))[:600]))
            fail("%s differs:\n coordinator %s\n one server  %s"
                 % (what, json.dumps(got)[:1500], json.dumps(want)[:1500]))
        print("ok: %s: the coordinator's answer is the combined server's" % what)
        return got

    # Labels and totals.
    same("/api/v1/labels", "label names", **RANGE)
    for name in ("service_name", "pid", "type", "node"):
        same("/api/v1/label/values", "values of %s" % name, name=name, **RANGE)
    same("/api/v1/label/values", "values of type for trainer", name="type",
         query='{service_name="trainer"}', **RANGE)
    same("/api/v1/totals", "totals by service", by="service_name", query='{type="cpu"}',
         **RANGE)
    same("/api/v1/totals", "totals by pid", by="pid", **RANGE)

    # Flame graphs: whole, cut, grouped; ours and Pyroscope's.
    for q in ("shares.cpu", "trainer.cpu", '{type="cpu"}', "api.cpu", "trainer.gpu_launch"):
        fb = same("/api/v1/flamegraph", "flame graph of %s" % q, query=q, **RANGE)
    check(fb["metadata"]["units"] == "launches", "gpu_launch's unit kept")
    fb = same("/api/v1/flamegraph", "flame graph of all cpu", query='{type="cpu"}', **RANGE)
    check(fb["flamebearer"]["numTicks"] > 0 and "modules" in fb["flamebearer"]
          and "sources" in fb["flamebearer"], "the merged graph has modules and sources")
    names = fb["flamebearer"]["names"]
    check("sys_read_[k]" in names and "sys_write_[k]" in names,
          "kernel frames of folded input kept as kernel frames")
    for n in (3, 7, 12):
        same("/api/v1/flamegraph", "flame graph cut to %d nodes" % n, query='{type="cpu"}',
             max_nodes=n, **RANGE)
    same("/api/v1/flamegraph", "flame graph grouped by pid", query='{type="cpu"}',
         group_by="pid", **RANGE)
    same("/pyroscope/render", "Pyroscope render", query="shares.cpu{}", format="json",
         **{"from": base, "until": end, "maxNodes": 5})
    same("/api/v1/diff", "diff of two halves", query="shares.cpu",
         **{"from": base * 1000, "until": half * 1000, "right_from": half * 1000,
            "right_until": end * 1000})
    same("/pyroscope/render-diff", "Pyroscope diff", leftQuery='{type="cpu"}',
         rightQuery="trainer.cpu", leftFrom=base, leftUntil=end, rightFrom=base,
         rightUntil=end)

    # Top, recomputed from the merged profile.
    for sort in ("self", "total"):
        top = same("/api/v1/top", "top by %s" % sort, query='{type="cpu"}', sort=sort,
                   limit=50, **RANGE)
    mains = sorted(f["module"] for f in top["functions"] if f["name"] == "main")
    check(mains == ["", "app_a", "app_c"],
          "top keeps main of app_a, of app_c and of folded input apart: %s" % mains)
    same("/api/v1/top", "top 3", query="shares.cpu", limit=3, **RANGE)

    # Time series, points, alerts.
    same("/api/v1/timeseries", "time series per window", query="shares.cpu", step="10s",
         **RANGE)
    same("/api/v1/timeseries", "time series per 35 s", query='{type="cpu"}', step=35000,
         **RANGE)
    pts = same("/api/v1/points", "GPU memory points", name="gpu_memory_used_bytes", **RANGE)
    check(len(pts["series"]) == 2 and len(pts["series"][0]["points"]) == WINDOWS * WS // 5,
          "the series on two servers is one series with the points of both")
    same("/api/v1/alerts", "alerts")

    # Downloads: folded text and pprof.
    q = urllib.parse.urlencode({"query": '{type="cpu"}', "from": base, "until": end,
                                "format": "collapsed"})
    want, got = combined.get("/pyroscope/render?" + q), co.get("/pyroscope/render?" + q)
    check(got[0] == 200 and got[2] == want[2] and b"sys_read_[k]" in got[2],
          "folded download: the same lines")
    d = tmpdir()
    tops = []
    for srv, f in ((combined, "one.pb.gz"), (co, "merged.pb.gz")):
        st, h, body = srv.get("/api/v1/pprof", query='{type="cpu"}', **RANGE)
        check(st == 200 and "sonde-partial" not in h, "pprof download from %s" %
              ("the coordinator" if srv is co else "one server"))
        with open(os.path.join(d, f), "wb") as out:
            out.write(body)
        if shutil.which("go"):
            r = run(["go", "tool", "pprof", "-top", "-nodecount=100",
                     os.path.join(d, f)], timeout=120)
            tops.append([ln for ln in r.stdout.splitlines()
                         if not ln.startswith(("File:", "Type:", "Time:"))])
    if len(tops) == 2:
        check(tops[0] == tops[1] and len(tops[0]) > 5,
              "go tool pprof -top reads the same profile from both")

    # What the coordinator does not do, and what it says of itself.
    st, _, body = co.post("/api/v1/ingest", b"x")
    check(st in (404, 405), "POST to the coordinator refused (%d)" % st)
    st, h, body = co.get("/")
    check(st == 200 and b"<html" in body.lower(), "the web UI is served")
    st, _, body = co.get("/healthz")
    check(st == 200 and body.startswith(b"ok: 3 of 3"), "healthz: %r" % body)
    sv = co.get_json("/api/v1/servers")
    check([s["name"] for s in sv["servers"]] ==
          ["a", "http://127.0.0.1:%d" % b.port, "http://127.0.0.1:%d" % c.port],
          "servers listed with their names (the URL when none)")
    st, _, body = co.get("/metrics")
    m = body.decode()
    check(st == 200 and 'sonde_coordinator_server_requests_total{server="a"}' in m
          and 'route="/api/v1/flamegraph",code="200"' in m, "metrics: requests per server")
    if shutil.which("promtool"):
        p = subprocess.run(["promtool", "check", "metrics"], input=body, capture_output=True,
                           timeout=60)
        check(p.returncode == 0, "promtool check metrics: %s" % p.stdout.decode()[-300:])
    # The Trace Server Protocol over the merged answers: every server's
    # services are traces of the one endpoint.
    st, _, body = co.get("/tsp/api/health")
    check(st == 200 and json.loads(body)["status"] == "UP", "TSP health")
    traces = sorted(t["name"] for t in co.get_json("/tsp/api/traces"))
    want = sorted(t["name"] for t in combined.get_json("/tsp/api/traces"))
    check(traces == want and {"shares", "trainer", "api", "deep"} <= set(traces),
          "TSP traces: every server's services, as one server of all the data lists them: %s"
          % traces)
    co.stop()

    # The config file: names and labels.
    d = tmpdir()
    cfg = os.path.join(d, "sites.yaml")
    with open(cfg, "w") as f:
        f.write("servers:\n"
                "  - name: eu-1\n    url: http://127.0.0.1:%d\n    labels: {region: eu}\n"
                "  - url: http://127.0.0.1:%d\n" % (a.port, b.port))
    co2 = Coordinator(["--config", cfg, "--timeout", "2s"])
    coords.append(co2)
    sv = co2.get_json("/api/v1/servers")
    check(sv["servers"][0] == {"name": "eu-1", "url": "http://127.0.0.1:%d" % a.port,
                               "labels": {"region": "eu"}} and sv["timeout_ms"] == 2000,
          "config: name, url and labels of a server; the timeout")
    tot = co2.get_json("/api/v1/flamegraph", query="shares.cpu", **RANGE)
    check(tot["flamebearer"]["numTicks"] == WINDOWS // 2 * 100 + WINDOWS // 2 * 97
          and "partial" not in tot, "config: both servers' data")
    co2.stop()

    for text, want in (("servers: [{url: ftp://x}]\n", "not an http"),
                       ("servers:\n  - url: http://a:1\n    colour: red\n", "unknown key"),
                       ("servers:\n  - {name: x, url: 'http://a:1'}\n"
                        "  - {name: x, url: 'http://b:1'}\n", "twice"),
                       ("servers: [\n", "bad YAML"),
                       ("servers:\n  - url: http://a:1\n    labels: {'bad name': x}\n",
                        "label name")):
        with open(cfg, "w") as f:
            f.write(text)
        r = run([SONDE, "coordinator", "--config", cfg], timeout=30)
        check(r.returncode == 1 and want in r.stderr and "sites.yaml" in r.stderr,
              "bad config refused: %s" % r.stderr.strip())
    r = run([SONDE, "coordinator"], timeout=30)
    check(r.returncode == 2 and "--server" in r.stderr, "no servers: a usage error")
    r = run([SONDE, "coordinator", "--server", "localhost:7470"], timeout=30)
    check(r.returncode == 2 and "http://" in r.stderr, "a server without a scheme refused")
    r = run([SONDE, "coordinator", "--help"], timeout=30)
    check(r.returncode == 0 and "--timeout" in r.stdout and "partial" in r.stdout,
          "--help")
finally:
    for p in coords + servers:
        p.kill()
