#!/usr/bin/env python3
"""`sonde coordinator` when servers fail: one of two real servers killed ->
200 with the other's data exactly, "partial": true and "failed" naming the
dead one (a pprof download says so in Sonde-Partial and Sonde-Failed);
a server slower than --timeout (a small HTTP server on loopback that
sleeps, bounded, before answering) -> partial too, answered within the
timeout and a margin; every server down -> 502 with a JSON error, every
server too slow -> 504; /metrics counts each server's failures by
reason."""
import http.server
import json
import os
import re
import socketserver
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(__file__))
from sonde_test import check, fail, free_port, tmpdir  # noqa: E402
from server_test import Coordinator, Server  # noqa: E402

SLOW_S = 8  # the slow server's delay: well past the timeout, bounded
TIMEOUT_S = 1
# The slack a busy machine (STRESS=2) may need beyond the timeout.
MARGIN_S = 4


class Slow(http.server.BaseHTTPRequestHandler):
    """Answers every GET with an empty result, SLOW_S seconds late."""

    def do_GET(self):
        time.sleep(SLOW_S)
        body = b'{"names": [], "values": [], "groups": [], "series": [], "alerts": []}'
        try:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        except OSError:
            pass  # the coordinator gave up: as it should

    def log_message(self, *args):
        pass


class SlowServer(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True


WS = 10
now = int(time.time()) // WS * WS
base = now - 300
RANGE = {"from": base * 1000, "until": (base + 10 * WS) * 1000}

procs = []
slow = None
try:
    a, b = Server(tmpdir()), Server(tmpdir())
    procs += [a, b]
    for w in range(10):
        f = base + w * WS
        a.ingest_folded("app.cpu{pid=1}", f, f + WS, {"main;a_only": 10}, sampleRate=99)
        b.ingest_folded("app.cpu{pid=2}", f, f + WS, {"main;b_only": 7, "main;shared": 3},
                        sampleRate=99)
    url_a = "http://127.0.0.1:%d" % a.port
    url_b = "http://127.0.0.1:%d" % b.port
    co = Coordinator(["--server", url_a, "--server", url_b, "--timeout", "%ds" % TIMEOUT_S])
    procs.append(co)
    whole = co.get_json("/api/v1/flamegraph", query="app.cpu", **RANGE)
    check(whole["flamebearer"]["numTicks"] == 200 and "partial" not in whole,
          "both servers up: every sample (200), not partial")

    # One server killed.
    a.kill()
    t0 = time.time()
    got = co.get_json("/api/v1/flamegraph", query="app.cpu", **RANGE)
    want = b.get_json("/api/v1/flamegraph", query="app.cpu", **RANGE)
    check(got.get("partial") is True, "a server down: 200 with partial: true")
    check(len(got["failed"]) == 1 and got["failed"][0]["server"] == url_a
          and got["failed"][0]["error"], "failed names the dead server: %s" % got["failed"])
    check(got["flamebearer"] == want["flamebearer"], "the other server's flame graph, exactly")
    check(time.time() - t0 < TIMEOUT_S + MARGIN_S, "a dead server costs no timeout")
    top = co.get_json("/api/v1/top", query="app.cpu", **RANGE)
    check(top["partial"] is True and top["total"] == 100, "top: partial, b's 100 samples")
    vals = co.get_json("/api/v1/label/values", name="pid", **RANGE)
    check(vals["values"] == ["2"] and vals["partial"] is True, "label values: partial")
    st, h, body = co.get("/api/v1/pprof", query="app.cpu", **RANGE)
    check(st == 200 and h.get("sonde-partial") == "1" and url_a in h.get("sonde-failed", ""),
          "pprof download: Sonde-Partial: 1, Sonde-Failed: %s" % h.get("sonde-failed"))

    # A server slower than the timeout.
    slow = SlowServer(("127.0.0.1", 0), Slow)
    threading.Thread(target=slow.serve_forever, daemon=True).start()
    url_slow = "http://127.0.0.1:%d" % slow.server_address[1]
    co2 = Coordinator(["--server", url_b, "--server", "slow=" + url_slow,
                       "--timeout", "%ds" % TIMEOUT_S])
    procs.append(co2)
    for path, params in (("/api/v1/flamegraph", {"query": "app.cpu"}),
                         ("/api/v1/label/values", {"name": "pid"}),
                         ("/api/v1/timeseries", {"query": "app.cpu", "step": "10s"})):
        t0 = time.time()
        got = co2.get_json(path, **params, **RANGE)
        took = time.time() - t0
        check(got.get("partial") is True and [f["name"] for f in got["failed"]] == ["slow"]
              and "within" in got["failed"][0]["error"],
              "%s with a slow server: partial, failed: %s" % (path, got["failed"]))
        check(TIMEOUT_S * 0.9 <= took < TIMEOUT_S + MARGIN_S,
              "%s answered in %.2f s: the timeout (%d s), not the slow server's %d s"
              % (path, took, TIMEOUT_S, SLOW_S))
    check(co2.get_json("/api/v1/flamegraph", query="app.cpu", **RANGE)["flamebearer"] ==
          want["flamebearer"], "the slow server left out, the other's graph exact")

    # Every server failing.
    dead = "http://127.0.0.1:%d" % free_port()
    co3 = Coordinator(["--server", url_a, "--server", dead, "--timeout", "%ds" % TIMEOUT_S])
    procs.append(co3)
    st, h, body = co3.get("/api/v1/flamegraph", query="app.cpu", **RANGE)
    j = json.loads(body)
    check(st == 502 and "every server failed" in j["error"] and len(j["failed"]) == 2,
          "every server down: 502 with a JSON error: %s" % j["error"])
    st, _, body = co3.get("/healthz")
    check(st == 503, "healthz: 503 when no server answers")
    co4 = Coordinator(["--server", url_slow, "--timeout", "%ds" % TIMEOUT_S])
    procs.append(co4)
    t0 = time.time()
    st, h, body = co4.get("/api/v1/top", query="app.cpu", **RANGE)
    check(st == 504 and "within the timeout" in json.loads(body)["error"]
          and time.time() - t0 < TIMEOUT_S + MARGIN_S, "every server too slow: 504")

    # The coordinator's metrics say who failed and why.
    m = co2.get("/metrics")[2].decode()
    check(re.search(r'sonde_coordinator_server_failures_total\{server="slow",'
                    r'reason="timeout"\} [1-9]', m) is not None, "metrics: slow timed out")
    check(re.search(r'sonde_coordinator_partial_answers_total\{route="/api/v1/flamegraph"\}'
                    r' [1-9]', m) is not None, "metrics: partial answers counted")
    m = co.get("/metrics")[2].decode()
    check(re.search(r'sonde_coordinator_server_failures_total\{server="%s",'
                    r'reason="connect"\} [1-9]' % re.escape(url_a), m) is not None,
          "metrics: the dead server's connection failures")
finally:
    for p in procs:
        p.kill()
    if slow:
        slow.shutdown()
        slow.server_close()
