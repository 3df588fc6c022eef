#!/usr/bin/env python3
"""`sonde server`'s own /metrics: valid for `promtool check metrics`, and
counting what happened -- requests by route and status code, samples,
windows and points ingested, a query latency histogram per query route whose
count is the number of queries, the store's series and windows -- and
/healthz answering ok."""
import json
import os
import re
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from sonde_test import check, fail, skip, tmpdir  # noqa: E402
from server_test import Server  # noqa: E402

promtool = shutil.which("promtool")
srv = Server(tmpdir())
try:
    now = int(time.time())
    for i in range(3):
        srv.ingest_folded("m.cpu{i=%d}" % i, now - 60 + i * 10, now - 50 + i * 10,
                          {"main;a": 2, "main;b": 1})
    st, _, _ = srv.post("/api/v1/ingest/points", json.dumps({"points": [
        {"name": "gpu_memory_used_bytes", "ts_ms": now * 1000, "value": 1}] * 4}).encode(),
        "application/json")
    check(st == 200, "4 points ingested")
    for _ in range(5):
        srv.get_json("/api/v1/flamegraph", query="m.cpu")
    srv.get("/api/v1/flamegraph", query="{")
    srv.post("/ingest", b"bad", "text/plain", name="m.cpu")
    st, h, body = srv.get("/healthz")
    check(st == 200 and body == b"ok\n", "/healthz says ok")

    st, h, body = srv.get("/metrics")
    text = body.decode()
    check(st == 200 and h["content-type"].startswith("text/plain; version=0.0.4"),
          "/metrics is Prometheus text")
    if promtool:
        p = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True,
                           text=True, timeout=60)
        print(p.stdout + p.stderr)
        check(p.returncode == 0, "promtool check metrics accepts it")
    else:
        print("NOTE: promtool is not installed: the exposition was not linted")

    def value(series):
        m = re.search(r"^%s (\S+)$" % re.escape(series), text, re.M)
        if not m:
            fail("no sample %s in /metrics" % series)
        return float(m.group(1))

    check(value('sonde_server_requests_total{route="/ingest",code="200"}') == 3,
          "3 good Pyroscope ingests counted")
    check(value('sonde_server_requests_total{route="/ingest",code="400"}') == 1,
          "1 bad one counted as 400")
    check(value('sonde_server_requests_total{route="/api/v1/flamegraph",code="200"}') == 5,
          "5 flame graphs answered 200")
    check(value('sonde_server_requests_total{route="/api/v1/flamegraph",code="400"}') == 1,
          "1 bad selector answered 400")
    check(value('sonde_server_query_duration_seconds_count{route="/api/v1/flamegraph"}') == 6,
          "the latency histogram counts the 6 flame graph queries")
    check(value('sonde_server_query_duration_seconds_bucket{route="/api/v1/flamegraph",'
                'le="+Inf"}') == 6, "its +Inf bucket too")
    check(value("sonde_server_ingest_samples_total") == 6, "6 samples (2 stacks x 3) ingested")
    check(value("sonde_server_ingest_windows_total") == 3, "3 windows ingested")
    check(value("sonde_server_ingest_points_total") == 4, "4 points ingested")
    check(value("sonde_server_store_series") >= 3, "the store reports its series")
    check(value("sonde_server_store_windows") >= 1, "and its windows")
    check(value("sonde_server_store_bytes") > 0, "and its size on disk")
    check(value("sonde_server_expire_runs_total") >= 1, "retention ran at start")
    check(value("sonde_server_retention_seconds") == 7 * 86400, "default retention 7 days")
finally:
    srv.stop()
