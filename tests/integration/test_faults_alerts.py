#!/usr/bin/env python3
"""test_faults_alerts.py: the alerts a server keeps are bounded per project
(security probe, issue 22, finding 3). On `sonde server --auth`, project
B's ingest token posted 10 x 1,000 firing alerts and project A's next
alert answered 503 "10000 alerts are firing" until a restart (the table
was shared, and firing alerts never expired); labels and annotations had
no size bound (300 alerts of 1 MB took 306 MB). Now each project has its
own room: B's flood fills B's and A's alert is taken; an alert over
16 KiB of JSON is a 413 that says so; B's alert past its own room is
B's 503. (That firing alerts not sent again expire is unit/
test_server_alerts's, which drives the clock.)"""
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from server_test import Server, error_of  # noqa: E402
from sonde_test import SONDE, check, fail, run, tmpdir  # noqa: E402

PER_PROJECT = 10000


def token(data, project, role):
    p = run([SONDE, "token", "create", "--data", data, "--project", project, "--role", role])
    if p.returncode != 0:
        fail("token create %s/%s: %s" % (project, role, p.stderr))
    return p.stdout.strip()


def alert(name, i, annotation=""):
    return {"status": "firing", "alert": name,
            "labels": {"alertname": name, "node": "n%d" % i},
            "annotations": {"summary": annotation or "alert %d" % i},
            "startsAt": "2024-05-01T12:00:02.100Z", "endsAt": None, "value": 1}


def post(srv, tok, alerts):
    return srv.request("POST", "/api/v1/alerts", json.dumps(alerts).encode(),
                       {"Authorization": "Bearer " + tok, "Content-Type": "application/json"})


def listed(srv, tok):
    st, _, out = srv.request("GET", "/api/v1/alerts", headers={"Authorization": "Bearer " + tok})
    check(st == 200, "GET /api/v1/alerts: 200 (got %d %s)" % (st, out[:200]))
    return json.loads(out)["alerts"]


data = os.path.join(tmpdir(), "data")
a_ingest, a_read = token(data, "alpha", "ingest"), token(data, "alpha", "read")
b_ingest, b_read = token(data, "beta", "ingest"), token(data, "beta", "read")
srv = Server(data, ["--auth"])
try:
    t0 = time.monotonic()
    for k in range(PER_PROJECT // 1000):
        st, _, out = post(srv, b_ingest, [alert("Flood", k * 1000 + i) for i in range(1000)])
        check(st == 200, "B's batch %d of 1,000 firing alerts: 200 (got %d %s)"
              % (k, st, out[:200]))
    print("B posted %d firing alerts in %.1f s" % (PER_PROJECT, time.monotonic() - t0))
    st, _, out = post(srv, a_ingest, alert("Mine", 1))
    check(st == 200, "A's alert after B's flood: 200 (got %d %s)" % (st, out[:200]))
    mine = listed(srv, a_read)
    check([x["alert"] for x in mine] == ["Mine"], "A lists its one alert, none of B's")
    check(len(listed(srv, b_read)) == PER_PROJECT, "B lists its %d" % PER_PROJECT)
    st, _, out = post(srv, b_ingest, alert("Flood", PER_PROJECT))
    check(st == 503 and "project's alerts are all firing" in error_of(out),
          "B's alert past its own room: 503 saying so (got %d %s)" % (st, out[:200]))

    # Size: one alert of 1 MB (under the body limit), and one just over
    # 16 KiB, are refused; one of 15 KiB is taken.
    for size, want in ((1000000, 413), (17 * 1024, 413), (15 * 1024, 200)):
        st, _, out = post(srv, a_ingest, alert("Big", 2, "x" * size))
        check(st == want, "an alert with a %d-byte annotation: %d (got %d %s)"
              % (size, want, st, out[:200]))
        if want == 413:
            check("16384" in error_of(out) and "annotations" in error_of(out),
                  "the 413 names the bound: %s" % error_of(out))
    check(sorted(x["alert"] for x in listed(srv, a_read)) == ["Big", "Mine"],
          "A lists the alerts it was answered 200 for")
    check(srv.alive(), "the server still answers")
finally:
    srv.stop()
