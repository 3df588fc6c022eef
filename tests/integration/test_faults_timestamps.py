#!/usr/bin/env python3
"""test_faults_timestamps.py: windows and points from the far future are
refused (security probe, issue 22, finding 14). A window `from=4102444800`
(2100) or `99999999999999999` was stored: it never expires, and the
totals' until_ms -- the range the UI fits to the data -- reached into the
future. Now every ingest route answers 400 naming the bound (10 minutes
ahead of the server's clock, for senders whose clock is a little fast)
and stores nothing; a window a minute ahead is still taken."""
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
import pprof_wire  # noqa: E402
from server_test import Server, error_of  # noqa: E402
from sonde_test import check, tmpdir  # noqa: E402

AHEAD_S = 600


def pprof(time_ns=0):
    msg = pprof_wire.encode([("samples", "count")], [(["main", "future"], [5])])
    return msg + (pprof_wire.vint(9, time_ns) if time_ns else b"")


srv = Server(os.path.join(tmpdir(), "data"))
try:
    now = int(time.time())
    refused = [
        ("Pyroscope folded from=2100", "/ingest", b"main;future 5\n", "text/plain",
         {"name": "far.cpu", "from": 4102444800, "until": 4102444810}),
        ("Pyroscope folded until=2100", "/ingest", b"main;future 5\n", "text/plain",
         {"name": "far.cpu", "from": now - 10, "until": 4102444800}),
        ("agent pprof from=99999999999999999 ms", "/api/v1/ingest", pprof(),
         "application/octet-stream", {"from": 99999999999999999, "type": "cpu"}),
        ("agent pprof an hour ahead", "/api/v1/ingest", pprof(), "application/octet-stream",
         {"from": (now + 3600) * 1000, "until": (now + 3610) * 1000, "type": "cpu"}),
        ("pprof whose time_nanos is in 2100", "/api/v1/ingest", pprof(4102444800 * 10**9),
         "application/octet-stream", {"type": "cpu"}),
        ("metric point in 2100", "/api/v1/ingest/points",
         json.dumps({"points": [{"name": "m", "ts_ms": now * 1000, "value": 1},
                                {"name": "m", "ts_ms": 4102444800000, "value": 2}]}).encode(),
         "application/json", {}),
    ]
    for what, path, body, ctype, params in refused:
        st, _, out = srv.post(path, body, ctype, **params)
        msg = error_of(out)
        check(st == 400 and "%d s ahead" % AHEAD_S in msg and "clock" in msg,
              "%s: 400 naming the bound (got %d: %s)" % (what, st, msg or out[:200]))

    # Nothing of them was stored: no series, no point.
    st, _, body = srv.get("/metrics")
    check(b"\nsonde_server_store_windows 0\n" in body and
          b"\nsonde_server_store_points 0\n" in body, "nothing of them is in the store")

    # A sender whose clock is a minute fast is still answered.
    srv.ingest_folded("skewed.cpu", now + 50, now + 60, {"main;skewed": 3})
    st, _, out = srv.post("/api/v1/ingest", pprof(), "application/octet-stream",
                          **{"from": (now + 50) * 1000, "until": (now + 60) * 1000,
                             "type": "cpu", "service_name": "skewed2"})
    check(st == 200, "an agent window a minute ahead is taken (%d %s)" % (st, out[:200]))
    st, _, out = srv.post("/api/v1/ingest/points", json.dumps(
        {"points": [{"name": "m", "ts_ms": (now + 60) * 1000, "value": 1}]}).encode(),
        "application/json")
    check(st == 200, "a point a minute ahead is taken (%d %s)" % (st, out[:200]))

    tot = srv.get_json("/api/v1/totals", by="service_name",
                       **{"from": (now - 3600) * 1000, "until": 4200000000000})
    check(tot["until_ms"] is not None and tot["until_ms"] <= (time.time() + AHEAD_S) * 1000,
          "totals' until_ms is within the bound: %s" % tot["until_ms"])
    check(sorted(g["value"] for g in tot["groups"]) == ["skewed", "skewed2"],
          "only the windows within the bound are stored: %s" % tot["groups"])
finally:
    srv.stop()
