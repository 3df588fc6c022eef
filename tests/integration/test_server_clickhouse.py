#!/usr/bin/env python3
"""The same API answers from the ClickHouse store as from SQLite, exactly:
one `sonde server` on SQLite is fed everything; two `sonde server`s on one
ClickHouse database (started here) are fed half each, alternately, as
stateless servers behind a load balancer would be. Every query route is
then asked of all three -- label names and values, totals, flame graphs
(whole, cut, grouped), Pyroscope's render and diff, the diff, top, time
series, points, the folded and speedscope downloads and the pprof
download's content -- and each ClickHouse server must answer exactly what
the SQLite server answers. Then one of them is killed with -9 and started
again: it answers the same (nothing acknowledged lost, its caches cold)."""
import gzip
import json
import os
import shutil
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
import pprof_wire  # noqa: E402
from clickhouse import ClickHouse  # noqa: E402
from sonde_test import check, fail, run, tmpdir  # noqa: E402
from server_test import Server  # noqa: E402

WS, WINDOWS = 10, 16
now = int(time.time()) // WS * WS
base = now - 900
half = base + WINDOWS // 2 * WS
end = base + WINDOWS * WS
RANGE = {"from": base * 1000, "until": end * 1000}

EARLY = {"main;serve;parse;memcpy": 50, "main;serve;reply": 25,
         "main;serve;read;sys_read_[k]": 9}
LATE = {"main;serve;parse;memcpy": 20, "main;serve;reply": 60,
        "main;serve;write;sys_write_[k]": 4}
TRAIN = {"_start;main;train_step;forward;matmul": 120, "_start;main;train_step;backward": 70,
         "_start;main;load;decode_jpeg": 30}


def ingest(srv, name, f, stacks, **params):
    srv.ingest_folded(name, f, f + WS, stacks, **params)


def agent(srv, node, f, weight):
    msg = pprof_wire.encode(
        [("samples", "count"), ("cpu", "nanoseconds")],
        [(["main", "loop", "hash"], [weight, weight * 10101010]),
         (["main", "loop", "compress"], [3 * weight, 3 * weight * 10101010])],
        sources={"loop": ("/src/loop.c", 12), "hash": ("/src/hash.c", 3)},
        modules={"main": "/usr/bin/worker", "loop": "/usr/bin/worker",
                 "hash": "/usr/lib/libhash.so"})
    st, _, body = srv.post("/api/v1/ingest", gzip.compress(msg), node=node, type="cpu",
                           service_name="worker", key="%s/%d/cpu" % (node, f),
                           **{"from": f * 1000, "until": (f + WS) * 1000})
    if st != 200:
        fail("agent ingest: HTTP %d %s" % (st, body[:300]))


def points(srv, labels, ts):
    pts = [{"name": "gpu_memory_used_bytes", "labels": labels, "ts_ms": t * 1000,
            "value": (t % 89) * 1.5e6} for t in ts]
    pts.append({"name": "gpu_memory_used_bytes", "labels": labels, "ts_ms": ts[0] * 1000 + 1,
                "value": "NaN"})
    st, _, body = srv.post("/api/v1/ingest/points", json.dumps({"points": pts}).encode(),
                           "application/json")
    if st != 200:
        fail("points: HTTP %d %s" % (st, body[:300]))


ch = ClickHouse()
url = ch.url("fleet")
servers = []
try:
    lite = Server(tmpdir())
    a = Server(tmpdir(), ["--store", url])
    b = Server(tmpdir(), ["--store", url])
    servers += [lite, a, b]
    check(any("clickhouse://127.0.0.1:%d/fleet" % ch.http in line for line in a.lines),
          "the server says where its data is (the ClickHouse URL)")

    for w in range(WINDOWS):
        f = base + w * WS
        one = a if w % 2 else b  # half each, as a load balancer would
        for srv in (lite, one):
            ingest(srv, "api.cpu{pid=4242,comm=api}", f, EARLY if f < half else LATE,
                   sampleRate=99)
            ingest(srv, "trainer.cpu{pid=777,comm=python3}", f, TRAIN, sampleRate=99)
            ingest(srv, "trainer.gpu_launch{pid=777,comm=python3}", f,
                   {"_start;main;train_step;cudaLaunchKernel": 300 + w}, units="launches")
            agent(srv, "node-%d" % (w % 3), f, 2 + w % 4)
    # Two windows of one series and range add up, in every store.
    for srv in (lite, a):
        ingest(srv, "api.cpu{pid=4242,comm=api}", base, {"main;again": 5}, sampleRate=99)
    for srv in (lite, b):
        points(srv, {"node": "node-0", "pid": "777", "gpu_id": "0"}, list(range(base, half, 5)))
    for srv in (lite, a):
        points(srv, {"node": "node-1", "pid": "777", "gpu_id": "1"}, list(range(half, end, 7)))

    def same(path, what, raw=False, **params):
        st, _, want = lite.get(path, **params)
        if st != 200:
            fail("%s: the SQLite server answered HTTP %d %s" % (what, st, want[:300]))
        for name, srv in (("server a", a), ("server b", b)):
            st, _, got = srv.get(path, **params)
            if st != 200:
                fail("%s: ClickHouse %s answered HTTP %d %s" % (what, name, st, got[:300]))
            if not raw:
                got, want_j = json.loads(got), json.loads(want)
                if got != want_j:
                    for k in set(got) | set(want_j):
                        if got.get(k) != want_j.get(k):
                            print("differs at %s:\n clickhouse %s\n sqlite     %s" %
                                  (k, json.dumps(got.get(k))[:800],
                                   json.dumps(want_j.get(k))[:800]))
                    fail("%s: ClickHouse %s's answer differs from SQLite's" % (what, name))
            elif got != want:
                fail("%s: ClickHouse %s's download differs from SQLite's:\n%s\n%s" %
                     (what, name, got[:400], want[:400]))
        print("ok: %s: both ClickHouse servers answer exactly as SQLite" % what)
        return want if raw else json.loads(want)

    def all_routes(tag):
        same("/api/v1/labels", tag + "label names", **RANGE)
        for name in ("service_name", "pid", "type", "node", "comm"):
            same("/api/v1/label/values", tag + "values of " + name, name=name, **RANGE)
        same("/api/v1/label/values", tag + "values of type, one service", name="type",
             query='{service_name="trainer"}', **RANGE)
        same("/api/v1/labels", tag + "names with a regex matcher",
             query='{service_name=~"tr.*|wor.er"}', **RANGE)
        for by in ("service_name", "pid", "node"):
            same("/api/v1/totals", tag + "totals by " + by, by=by, **RANGE)
        for q in ("api.cpu", "trainer.cpu", '{type="cpu"}', "worker.cpu",
                  "trainer.gpu_launch", '{type="cpu",service_name!="api"}'):
            fb = same("/api/v1/flamegraph", tag + "flame graph of " + q, query=q, **RANGE)
            check(fb["flamebearer"]["numTicks"] > 0, tag + q + " has samples")
        fb = same("/api/v1/flamegraph", tag + "flame graph of worker", query="worker.cpu",
                  **RANGE)
        check("sources" in fb["flamebearer"], tag + "the sources of the agent's functions")
        for n in (4, 9):
            same("/api/v1/flamegraph", tag + "flame graph cut to %d nodes" % n,
                 query='{type="cpu"}', max_nodes=n, **RANGE)
        same("/api/v1/flamegraph", tag + "flame graph grouped by node", query="worker.cpu",
             group_by="node", **RANGE)
        same("/api/v1/flamegraph", tag + "flame graph of a part of the range",
             query="api.cpu", **{"from": (base + 25) * 1000, "until": (half + 13) * 1000})
        same("/pyroscope/render", tag + "Pyroscope render", query="api.cpu{}", format="json",
             **{"from": base, "until": end, "maxNodes": 6})
        same("/api/v1/diff", tag + "diff of two halves", query="api.cpu",
             **{"from": base * 1000, "until": half * 1000, "right_from": half * 1000,
                "right_until": end * 1000})
        same("/pyroscope/render-diff", tag + "Pyroscope diff", leftQuery='{type="cpu"}',
             rightQuery="trainer.cpu", leftFrom=base, leftUntil=end, rightFrom=base,
             rightUntil=end)
        for sort in ("self", "total"):
            same("/api/v1/top", tag + "top by " + sort, query='{type="cpu"}', sort=sort,
                 **RANGE)
        for step in (10000, 7000, 60000):
            same("/api/v1/timeseries", tag + "time series by %d ms" % step,
                 query='{type="cpu"}', step=step, **RANGE)
        same("/api/v1/points", tag + "points", name="gpu_memory_used_bytes", **RANGE)
        same("/api/v1/points", tag + "points of one GPU", name="gpu_memory_used_bytes",
             query='{gpu_id="1"}', **RANGE)
        same("/pyroscope/render", tag + "the folded download", raw=True,
             query='{type="cpu"}', format="collapsed", **{"from": base, "until": end})
        same("/api/v1/speedscope", tag + "the speedscope download", query="worker.cpu",
             **RANGE)

    all_routes("")

    # The pprof download, byte for byte (a select's samples come in one
    # order from every store), and go tool pprof reads it.
    pb = same("/api/v1/pprof", "the pprof download", raw=True, query='{type="cpu"}', **RANGE)
    if shutil.which("go"):
        path = os.path.join(tmpdir(), "cpu.pb.gz")
        with open(path, "wb") as out:
            out.write(pb)
        r = run(["go", "tool", "pprof", "-top", "-nodefraction=0", path], timeout=120)
        check(r.returncode == 0 and "matmul" in r.stdout and "compress" in r.stdout,
              "go tool pprof reads the download")

    # Killed with -9 and started again on the same database: the same.
    a.p.send_signal(signal.SIGKILL)
    a.p.wait(10)
    servers.remove(a)
    a = Server(tmpdir(), ["--store", url])
    servers.append(a)
    all_routes("after kill -9 of server a: ")
finally:
    for s in servers:
        s.stop()
    ch.stop()
