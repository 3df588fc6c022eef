#!/usr/bin/env python3
"""test_faults_huge_values.py: values as large as a window may hold never
take a query down (security probe, issue 22, finding 7). `main;x
9223372036854775807` (INT64_MAX, the most a window may hold) in two
windows made every unfiltered read -- flame graph, top, time series,
totals, pprof -- answer 500 and the Trace Server Protocol 502 for the
retention period: their sums passed 2^63. Now sums stop at INT64_MAX:
every read answers 200, the huge stack reads INT64_MAX, and what is
beside it reads exactly. Run on the SQLite store, through a coordinator,
and on a ClickHouse store (when clickhouse-server is installed)."""
import json
import os
import sys
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(__file__))
import pprof_wire  # noqa: E402
from server_test import Coordinator, Server  # noqa: E402
from sonde_test import check, tmpdir  # noqa: E402

MAX = 2**63 - 1


def load(srv, now):
    for w in range(2):
        srv.ingest_folded("big.cpu{comm=big,pid=9}", now - 100 + 10 * w, now - 90 + 10 * w,
                          {"main;x": MAX})
    srv.ingest_folded("small.cpu{comm=small,pid=8}", now - 100, now - 90, {"main;y": 5})
    # An agent's window of the same size, in a third window.
    body = pprof_wire.encode([("samples", "count")], [(["main", "x"], [MAX])])
    st, _, out = srv.post("/api/v1/ingest", body, **{
        "from": (now - 80) * 1000, "until": (now - 70) * 1000, "type": "cpu",
        "service_name": "big", "comm": "big", "pid": "9"})
    check(st == 200, "an agent window of INT64_MAX is taken (%d %s)" % (st, out[:200]))


def reads(srv, now, where, tsp=True):
    rng = {"from": (now - 300) * 1000, "until": (now + 10) * 1000}
    bad = []
    answers = {}
    for path, params in [("/api/v1/flamegraph", {}), ("/api/v1/top", {}),
                         ("/api/v1/timeseries", {}), ("/api/v1/totals", {"by": "service_name"}),
                         ("/api/v1/pprof", {}), ("/api/v1/speedscope", {}),
                         ("/api/v1/diff", {}), ("/api/v1/flamegraph", {"group_by": "comm"}),
                         ("/pyroscope/render", {"query": "big.cpu", "format": "json",
                                                "from": now - 300, "until": now + 10})]:
        p = dict(rng, **params)
        st, _, out = srv.get(path + "?" + urllib.parse.urlencode(p))
        if st != 200:
            bad.append("%s %s: %d %s" % (path, params, st, out[:160]))
        else:
            answers[(path, tuple(params))] = out
    check(not bad, "%s: every unfiltered read answers 200 (%s)" % (where, "; ".join(bad)))
    fb = json.loads(answers[("/api/v1/flamegraph", ())])["flamebearer"]
    check(fb["numTicks"] == MAX, "%s: the flame graph's total reads INT64_MAX" % where)
    top = {f["name"]: f for f in json.loads(answers[("/api/v1/top", ())])["functions"]}
    check(top["x"]["self"] == MAX and top["y"]["self"] == 5,
          "%s: top: x at INT64_MAX, y exactly 5 (%s)" % (where, top))
    tot = {g["value"]: g["total"]
           for g in json.loads(answers[("/api/v1/totals", ("by",))])["groups"]}
    check(tot == {"big": MAX, "small": 5}, "%s: totals %s" % (where, tot))
    small = srv.get_json("/api/v1/top", query='{service_name="small"}', **rng)
    check(small["total"] == 5, "%s: a filtered read beside it is exact" % where)
    if not tsp:
        return
    st, _, out = srv.request("POST", "/tsp/api/traces",
                             json.dumps({"parameters": {"uri": "sonde:{}"}}).encode(),
                             {"Content-Type": "application/json"})
    check(st == 200, "%s: TSP opens the trace (%d %s)" % (where, st, out[:200]))
    trace = json.loads(out)
    st, _, out = srv.request("POST", "/tsp/api/experiments", json.dumps(
        {"parameters": {"name": "huge", "traces": [trace["UUID"]]}}).encode(),
        {"Content-Type": "application/json"})
    check(st == 200, "%s: TSP makes an experiment (%d %s)" % (where, st, out[:200]))
    exp = json.loads(out)
    timerange = {"start": exp["start"], "end": exp["end"]}
    for kind, oid, what in [("data", "sonde.top.cpu", "tree"), ("XY", "sonde.rate.cpu", "tree"),
                            ("timeGraph", "sonde.states", "tree")]:
        st, _, out = srv.request(
            "POST", "/tsp/api/experiments/%s/outputs/%s/%s/%s" % (exp["UUID"], kind, oid, what),
            json.dumps({"parameters": {"requested_timerange": timerange}}).encode(),
            {"Content-Type": "application/json"})
        check(st == 200, "%s: TSP output %s/%s answers (%d %s)" % (where, oid, what, st,
                                                                  out[:160]))


now = int(time.time()) // 10 * 10
srv = Server(os.path.join(tmpdir(), "data"))
co = None
try:
    load(srv, now)
    reads(srv, now, "SQLite store")
    co = Coordinator(["--server", "http://127.0.0.1:%d" % srv.port])
    reads(co, now, "coordinator", tsp=False)
    warned = [line for line in srv.lines if "warning" in line]
    check(not warned, "no warning in the server's log: %s" % warned[:2])
finally:
    if co:
        co.stop()
    srv.stop()

try:
    from clickhouse import ClickHouse
    ch = ClickHouse()
except SystemExit:  # skip(): clickhouse-server is not installed
    print("SKIP: the ClickHouse half (clickhouse-server is not installed)")
    sys.exit(0)
srv = Server(os.path.join(tmpdir(), "data"), ["--store", ch.url("huge")])
try:
    load(srv, now)
    reads(srv, now, "ClickHouse store")
finally:
    srv.stop()
    ch.stop()
