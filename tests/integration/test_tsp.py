#!/usr/bin/env python3
"""The Trace Server Protocol at /tsp/api of a real `sonde server`, with the
real npm client: ingests two services' cpu profiles (the trainer's two
processes, with off-CPU time), GPU memory points and process_time_share
points of one process, then runs tests/tsp/tsp.mjs (tsp-typescript-client
0.9.0) against the server -- health, traces, opening by sonde: URI, an
experiment, its outputs, the data tree against /api/v1/top and the truth,
XY series against /api/v1/timeseries, GPU memory and the time graph's
states as sent, deletion. Then malformed requests: each a 4xx with a JSON
error, the server up after all of them. Skips (77) when node or the npm
packages (scripts/setup.sh: npm ci in tests/tsp) are missing."""
import json
import os
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from sonde_test import ROOT, check, fail, skip, tmpdir  # noqa: E402
from server_test import Server, error_of  # noqa: E402

TSP_DIR = os.path.join(ROOT, "tests", "tsp")
WS = 10
PID = "42"

node = shutil.which("node")
if not node:
    skip("node is not installed -- run scripts/setup.sh")
if not os.path.isfile(os.path.join(TSP_DIR, "node_modules", "tsp-typescript-client",
                                   "package.json")):
    skip("tests/tsp has no npm packages -- run scripts/setup.sh (npm ci in tests/tsp)")

tmp = tmpdir()
srv = Server(os.path.join(tmp, "data"))
try:
    base = int(time.time()) // WS * WS - 200
    hot = {"main;run;hot_a": 60, "main;run;hot_b": 30, "main;run;hot_c": 10}
    for w in range(6):
        f = base + w * WS
        srv.ingest_folded("trainer.cpu{comm=python3,pid=42,node=n1}", f, f + WS, hot)
        srv.ingest_folded("trainer.offcpu{comm=python3,pid=42,node=n1}", f, f + WS,
                          {"main;wait": 5000000}, units="nanoseconds")
        if w < 3:
            srv.ingest_folded("trainer.cpu{comm=python3,pid=43,node=n1}", f, f + WS,
                              {"main;load;read": 20})
    srv.ingest_folded("web.cpu{comm=nginx,pid=7,node=n1}", base + 30, base + 40, {"x;y": 7})

    t0 = (base + 10) * 1000
    labels = {"node": "n1", "pid": PID, "comm": "python3"}
    points = []
    for i in range(20):
        ts = t0 + i * 1000
        points.append({"name": "gpu_memory_used_bytes", "labels": dict(labels, gpu_id="0"),
                       "ts_ms": ts, "value": (i + 1) * 10**9})
        shares = {"gpu_wait": 0.7, "on_cpu": 0.2} if i < 10 else {"on_cpu": 0.9, "io": 0.05}
        for state, v in shares.items():
            points.append({"name": "process_time_share", "labels": dict(labels, state=state),
                           "ts_ms": ts, "value": v})
    st, _, body = srv.post("/api/v1/ingest/points", json.dumps({"points": points}).encode(),
                           "application/json")
    check(st == 200, "ingest points: %d %s" % (st, body[:200]))

    ns = lambda ms: str(ms * 1000000)  # noqa: E731
    truth = {
        "services": ["trainer", "web"],
        "from_ms": base * 1000,
        "until_ms": (base + 60) * 1000,
        "pid": PID,
        "nb_times": 6,
        "trainer_cpu_total": 6 * 100 + 3 * 20,
        "pid_cpu_total": 6 * 100,
        "trainer_functions": {"hot_a": [360, 360], "hot_b": [180, 180], "hot_c": [60, 60],
                              "main": [0, 660], "run": [0, 600], "load": [0, 60],
                              "read": [60, 60]},
        "gpu_from_ms": t0,
        "gpu_memory": [(i + 1) * 10**9 for i in range(20)],
        "states_from_ms": t0,
        "states_seconds": 20,
        "states": [[ns(t0), ns(t0 + 10000), "gpu_wait"],
                   [ns(t0 + 10000), ns(t0 + 20000), "on_cpu"]],
    }
    # The truth holds on the query API itself (what the client is held to).
    top = srv.get_json("/api/v1/top", query='{service_name="trainer"}', type="cpu",
                       **{"from": truth["from_ms"], "until": truth["until_ms"]})
    got = {f["name"]: [f["self"], f["total"]] for f in top["functions"]}
    check(got == truth["trainer_functions"], "top: %s" % got)

    tfile = os.path.join(tmp, "truth.json")
    with open(tfile, "w") as f:
        json.dump(truth, f)
    url = "http://127.0.0.1:%d" % srv.port
    print("$ node tests/tsp/tsp.mjs %s %s" % (url, tfile))
    try:
        r = subprocess.run([node, os.path.join(TSP_DIR, "tsp.mjs"), url, tfile], cwd=TSP_DIR,
                           capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        fail("tsp.mjs did not finish in 120 s")
    sys.stdout.write(r.stdout)
    sys.stdout.write(r.stderr)
    check(r.returncode == 0, "tsp.mjs passed every check (exit %d)" % r.returncode)
    check("checks passed" in r.stdout, "tsp.mjs reported its checks")

    # The answers' Content-Type is exactly what the client accepts.
    st, h, body = srv.request("GET", "/tsp/api/health")
    check(st == 200 and h.get("content-type") == "application/json",
          "health: %d %s" % (st, h.get("content-type")))
    check(json.loads(body) == {"status": "UP"}, "health body %r" % body)

    # Malformed requests: a 4xx with a JSON error each, never a crash.
    exp = json.loads(srv.request("POST", "/tsp/api/experiments", json.dumps(
        {"parameters": {"name": "fuzz", "traces": [
            t["UUID"] for t in json.loads(srv.get("/tsp/api/traces")[2])]}}).encode(),
        {"Content-Type": "application/json"})[2])
    check("UUID" in exp, "fuzz experiment: %s" % exp)
    e = "/tsp/api/experiments/" + exp["UUID"]
    generic = [b"{", b"[]", b"5", b"\"x\"", b"{\"parameters\": 5}", b"{\"parameters\": []}",
               b"\xff\xfe{\"a\"", b"[" * 5000 + b"]" * 5000,
               b"{\"parameters\": {\"a\": 99999999999999999999999}}"]
    ranges = [b"{\"parameters\": {\"requested_timerange\": {\"start\": \"x\", \"end\": 1}}}",
              b"{\"parameters\": {\"requested_timerange\": {\"start\": 5, \"end\": 1}}}",
              b"{\"parameters\": {\"requested_timerange\": {\"start\": 1e300, \"end\": 2}}}",
              b"{\"parameters\": {\"requested_timerange\": {\"start\": -5, \"end\": 2}}}",
              b"{\"parameters\": {\"requested_timerange\": {\"start\": 1, \"end\": 2,"
              b" \"nbTimes\": -3}}}",
              b"{\"parameters\": {\"requested_timerange\": 7}}",
              b"{\"parameters\": {\"requested_times\": [1, \"b\"]}}",
              b"{\"parameters\": {\"requested_items\": {}}}",
              b"{\"parameters\": {\"requested_items\": [\"a\", null]}}"]
    cases = {
        "/tsp/api/traces": [b"{\"parameters\": {\"uri\": 5}}", b"{\"parameters\": {}}",
                            b"{\"parameters\": {\"uri\": \"file:///x\"}}",
                            b"{\"parameters\": {\"uri\": \"sonde:{a=\\\"\"}}",
                            b"{\"parameters\": {\"uri\": \"sonde:{}\", \"name\": []}}",
                            b"{\"parameters\": {\"uri\": \"sonde:\\u0000\"}}"],
        "/tsp/api/experiments": [b"{\"parameters\": {\"name\": \"x\", \"traces\": {}}}",
                                 b"{\"parameters\": {\"name\": \"x\", \"traces\": [1]}}",
                                 b"{\"parameters\": {\"name\": \"x\", \"traces\": [\"zz\"]}}",
                                 b"{\"parameters\": {\"name\": \"x\", \"traces\": []}}",
                                 b"{\"parameters\": {\"name\": \"\", \"traces\": [\"%s\"]}}"
                                 % exp["traces"][0]["UUID"].encode(),
                                 b"{\"parameters\": {\"name\": \"x\", \"traces\": [\"%s\"]}}"
                                 % ("0" * 36).encode()],
        e + "/outputs/data/sonde.top.cpu/tree": ranges,
        e + "/outputs/XY/sonde.rate.cpu/xy": ranges,
        e + "/outputs/timeGraph/sonde.states/states": ranges,
    }
    n = 0
    for path, specific in cases.items():
        for b in generic + specific:
            st, h, body = srv.request("POST", path, b, {"Content-Type": "application/json"})
            n += 1
            if not (400 <= st < 500 and h.get("content-type") == "application/json"
                    and error_of(body)):
                fail("POST %s %r: HTTP %d %s, not a 4xx with a JSON error"
                     % (path, b[:80], st, body[:200]))
    for method, path in [("GET", "/tsp/api/nothing"), ("GET", "/tsp/api/traces/nope"),
                         ("DELETE", "/tsp/api/experiments/nope"), ("PUT", e),
                         ("GET", e + "/outputs/XY/sonde.top.cpu/xy"),
                         ("POST", e + "/outputs/data/sonde.top.nope/tree"),
                         ("GET", "/tsp/api/" + "a/" * 40)]:
        st, h, body = srv.request(method, path, b"{}" if method == "POST" else None,
                                  {"Content-Type": "application/json"})
        n += 1
        if not (400 <= st < 500 and error_of(body)):
            fail("%s %s: HTTP %d %s, not a 4xx with a JSON error" % (method, path, st, body[:200]))
    st, _, body = srv.request("POST", "/tsp/api/traces", b"{}", {"Content-Type": "text/plain"})
    check(st == 415, "a body that is not JSON: HTTP %d %s" % (st, body[:200]))
    check(srv.alive(), "the server is up after the malformed requests")
    print("%d malformed requests answered 4xx with a JSON error" % n)
finally:
    srv.stop()
print("ok")
