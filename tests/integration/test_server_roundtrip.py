#!/usr/bin/env python3
"""`sonde server` round trips on constructed data with known truth: Pyroscope
folded ingest of two services over 30 windows (the hot functions' shares
change half way), GPU launch profiles, metric points; then every query
answers exactly -- label names and values, /pyroscope/render and
/api/v1/flamegraph (numbers decoded from the levels, the timeline summing to
the total), the diff of the two halves, top by self and total, time series
per window, points; the pprof download read by `go tool pprof -top` with the
right totals, ingested back through the agents' /api/v1/ingest (the
project's own pprof writer) and queried again; speedscope; an unknown profile
type stored under its name and unit."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
from sonde_test import check, fail, run, tmpdir  # noqa: E402
from server_test import Server, flame_total  # noqa: E402

OLD = {"hot_a": 60, "hot_b": 30, "hot_c": 10}
NEW = {"hot_a": 40, "hot_b": 50, "hot_c": 10}
PREFIX = "main;run;"
TRAINER = {"_start;main;train;matmul": 140, "_start;main;train;load_batch": 60}
WINDOWS, WS = 30, 10

srv = Server(tmpdir())
try:
    now = int(time.time()) // WS * WS
    base = now - 600
    half = base + WINDOWS // 2 * WS
    for w in range(WINDOWS):
        f = base + w * WS
        shares = OLD if f < half else NEW
        srv.ingest_folded("shares.cpu{comm=shares,pid=4242}", f, f + WS,
                          {PREFIX + k: v for k, v in shares.items()}, sampleRate=99,
                          spyName="sonde")
        srv.ingest_folded("trainer.cpu{comm=python3,pid=777}", f, f + WS, TRAINER)
        srv.ingest_folded("trainer.gpu_launch{comm=python3,pid=777}", f, f + WS,
                          {"_start;main;train;cudaLaunchKernel": 500}, units="launches")
    end = base + WINDOWS * WS
    total_shares = WINDOWS * 100
    funcs = {k: (OLD[k] + NEW[k]) * WINDOWS // 2 for k in OLD}

    # Labels.
    names = srv.get_json("/api/v1/labels", **{"from": base * 1000, "until": end * 1000})["names"]
    check(names == ["comm", "pid", "service_name", "type"], "label names: %s" % names)
    vals = srv.get_json("/api/v1/label/values", name="service_name")["values"]
    check(vals == ["shares", "trainer"], "service_name values: %s" % vals)
    vals = srv.get_json("/api/v1/label/values", name="type",
                        query='{service_name="trainer"}')["values"]
    check(vals == ["cpu", "gpu_launch"], "trainer's types: %s" % vals)

    # Pyroscope render: seconds, APP.TYPE{...}.
    r = srv.get_json("/pyroscope/render", query="shares.cpu{}", **{"from": base},
                     until=end, format="json")
    fb = r["flamebearer"]
    check(fb["numTicks"] == total_shares, "render numTicks %d == %d" % (fb["numTicks"],
                                                                      total_shares))
    for k, v in funcs.items():
        got = flame_total(fb, ["main", "run", k])
        check(got == v, "render: %s total %s == %d" % (k, got, v))
    check(fb["maxSelf"] == funcs["hot_a"], "maxSelf is hot_a's self")
    check(r["metadata"]["units"] == "samples" and r["metadata"]["format"] == "single",
          "metadata: units samples, format single")
    tl = r["timeline"]
    check(sum(tl["samples"]) == total_shares and tl["durationDelta"] == 10,
          "the timeline sums to the total in 10 s steps")
    check(tl["startTime"] <= base and len(tl["samples"]) <= 1000, "the timeline covers the range")

    # Our own flame graph with a Prometheus selector, and max_nodes.
    r = srv.get_json("/api/v1/flamegraph", query='{service_name=~"sh.*", type="cpu"}',
                     **{"from": base * 1000}, until=end * 1000)
    check(r["flamebearer"]["numTicks"] == total_shares, "flamegraph with a regex selector")
    r = srv.get_json("/api/v1/flamegraph", query='{type="cpu"}', max_nodes=4,
                     **{"from": base * 1000}, until=end * 1000)
    fb = r["flamebearer"]
    n = sum(len(lv) // 4 for lv in fb["levels"])
    check(n <= 4 and "other" in fb["names"], "max_nodes=4 writes %d nodes with an other" % n)
    check(fb["numTicks"] == total_shares + WINDOWS * 200, "collapsing keeps the total")

    # Diff of the halves.
    r = srv.get_json("/api/v1/diff", query='{service_name="shares"}',
                     **{"from": base * 1000}, until=half * 1000, right_from=half * 1000,
                     right_until=end * 1000)
    check(r["metadata"]["format"] == "double", "diff: format double")
    check(r["leftTicks"] == 1500 and r["rightTicks"] == 1500, "diff: each half has 1500")
    fb = r["flamebearer"]
    found = {}
    for d, lv in enumerate(fb["levels"]):
        for k in range(0, len(lv), 7):
            found.setdefault(fb["names"][lv[k + 6]], (lv[k + 1], lv[k + 4]))
    check(found.get("hot_a") == (900, 600) and found.get("hot_b") == (450, 750),
          "diff: hot_a 900 -> 600, hot_b 450 -> 750: %s" % found)

    # Top.
    r = srv.get_json("/api/v1/top", query='{service_name="shares"}', **{"from": base * 1000},
                     until=end * 1000)
    got = [(f["name"], f["self"], f["total"]) for f in r["functions"][:3]]
    check(got == [("hot_a", 1500, 1500), ("hot_b", 1200, 1200), ("hot_c", 300, 300)],
          "top by self: %s" % got)
    check(r["total"] == total_shares and r["unit"] == "samples", "top: total and unit")
    r = srv.get_json("/api/v1/top", query='{service_name="shares"}', sort="total", limit=2,
                     **{"from": base * 1000}, until=end * 1000)
    got = [(f["name"], f["total"]) for f in r["functions"]]
    check(got == [("main", 3000), ("run", 3000)], "top by total, limit 2: %s" % got)

    # Time series: one value per window.
    r = srv.get_json("/api/v1/timeseries", query="shares.cpu", step=WS * 1000,
                     **{"from": base * 1000}, until=end * 1000)
    check(r["values"] == [100] * WINDOWS and r["step_ms"] == 10000 and
          r["start_ms"] == base * 1000, "timeseries: 100 per window")
    r = srv.get_json("/api/v1/timeseries", type="gpu_launch", step=60000,
                     **{"from": base * 1000}, until=end * 1000)
    check(r["unit"] == "launches" and sum(r["values"]) == WINDOWS * 500,
          "gpu_launch timeseries in launches: %s" % r["values"])

    # Points.
    pts = [{"name": "gpu_memory_used_bytes", "ts_ms": (base + i) * 1000, "value": 2**30 * i,
            "labels": {"node": "gpu-7", "pid": "4242", "gpu_id": "0"}} for i in range(5)]
    pts.append({"name": "nccl_calls", "ts_ms": base * 1000, "value": 3,
                "labels": {"op": "allreduce"}})
    st, _, body = srv.post("/api/v1/ingest/points", json.dumps({"points": pts}).encode(),
                           "application/json")
    check(st == 200 and json.loads(body)["points"] == 6, "points ingested")
    r = srv.get_json("/api/v1/points", name="gpu_memory_used_bytes", query='{gpu_id="0"}',
                     **{"from": base * 1000}, until=end * 1000)
    check(len(r["series"]) == 1 and r["series"][0]["labels"]["pid"] == "4242" and
          [p[1] for p in r["series"][0]["points"]] == [2**30 * i for i in range(5)],
          "points read back in order")
    # The verdicts' evidence: a share per state, filtered by state.
    shares = {"gpu_wait": 0.8, "on_cpu": 0.1, "dataloader_wait": 0.05}
    pts = [{"name": "process_time_share", "ts_ms": (base + i) * 1000, "value": v,
            "labels": {"node": "gpu-7", "pid": "4242", "comm": "python3", "state": st}}
           for i in range(3) for st, v in shares.items()]
    st, _, body = srv.post("/api/v1/ingest/points", json.dumps({"points": pts}).encode(),
                           "application/json")
    check(st == 200 and json.loads(body)["points"] == 9, "process_time_share points ingested")
    r = srv.get_json("/api/v1/points", name="process_time_share",
                     **{"from": base * 1000}, until=end * 1000)
    check(sorted((s["labels"]["state"], [p[1] for p in s["points"]]) for s in r["series"]) ==
          sorted((st, [v] * 3) for st, v in shares.items()),
          "process_time_share: a series per state, with its state label")
    r = srv.get_json("/api/v1/points", name="process_time_share",
                     query='{pid="4242", state=~"gpu_wait|on_cpu"}',
                     **{"from": base * 1000}, until=end * 1000)
    check(sorted(s["labels"]["state"] for s in r["series"]) == ["gpu_wait", "on_cpu"],
          "process_time_share filtered by state: %s" % [s["labels"] for s in r["series"]])

    # pprof download, read by go tool pprof.
    st, h, pb = srv.get("/api/v1/pprof", query="shares.cpu", **{"from": base * 1000},
                        until=end * 1000)
    check(st == 200 and pb[:2] == b"\x1f\x8b" and
          h.get("content-disposition") == 'attachment; filename="sonde-cpu.pb.gz"',
          "pprof download: gzip, named sonde-cpu.pb.gz")
    d = tmpdir()
    path = os.path.join(d, "shares.pb.gz")
    open(path, "wb").write(pb)
    go = shutil.which("go")
    if go:
        t = run([go, "tool", "pprof", "-top", "-sample_index=0", path], timeout=180,
                env=dict(os.environ, HOME=d, GOCACHE=os.path.join(d, "gocache")))
        check(t.returncode == 0, "go tool pprof -top reads the download")
        check("of %d total" % total_shares in t.stdout, "go tool pprof: %d total" % total_shares)
        for k, v in funcs.items():
            check(any(line.split()[0] == str(v) and line.split()[-1] == k
                      for line in t.stdout.splitlines() if line.strip()),
                  "go tool pprof: %s flat %d" % (k, v))
    else:
        print("NOTE: go is not installed: the go tool pprof check did not run")

    # The download (Sonde's own writer) through the agents' ingest.
    st, _, body = srv.post("/api/v1/ingest", pb, "application/octet-stream", node="n2",
                           **{"from": base * 1000}, until=end * 1000)
    check(st == 200 and json.loads(body)["series"] == 1, "the pprof ingests as one series")
    r = srv.get_json("/api/v1/top", query='{node="n2"}', **{"from": base * 1000},
                     until=end * 1000)
    check(r["total"] == total_shares and r["functions"][0]["self"] == funcs["hot_a"],
          "agent ingest of the download: same totals")

    # Speedscope.
    st, h, body = srv.get("/api/v1/speedscope", query="shares.cpu", **{"from": base * 1000},
                          until=end * 1000)
    doc = json.loads(body)
    weights = sum(sum(p["weights"]) for p in doc["profiles"])
    check(st == 200 and weights == total_shares, "speedscope: weights sum to the total")

    # An unknown profile type keeps its name and unit.
    srv.ingest_folded("widgets.mytype", base, base + 10, {"main;make": 7}, units="widgets")
    st, _, pb2 = srv.get("/api/v1/pprof", query="widgets.mytype", **{"from": base * 1000},
                         until=end * 1000)
    st, _, body = srv.post("/api/v1/ingest", pb2, "application/x-protobuf", node="n3",
                           **{"from": base * 1000}, until=(base + 10) * 1000)
    check(st == 200, "a pprof of an unknown type is accepted")
    vals = srv.get_json("/api/v1/label/values", name="type", query='{node="n3"}')["values"]
    check(vals == ["mytype"], "stored under its own type: %s" % vals)
    r = srv.get_json("/api/v1/top", query='{node="n3", type="mytype"}',
                     **{"from": base * 1000}, until=end * 1000)
    check(r["unit"] == "widgets" and r["total"] == 7, "with its unit and total: %s" % r)
finally:
    rc = srv.stop()
print("server exit code on SIGTERM: %s" % rc)
check(rc == 0, "SIGTERM stops the server with exit code 0")
