#!/usr/bin/env python3
"""Nothing acknowledged is lost with the ClickHouse store. A client streams
an agent's keyed windows (pprof, one second each, in sequence) to a `sonde
server --store clickhouse://...` as fast as the acknowledgements come
back, sending a window again until it is acknowledged, as agents do.
Round 1: the sonde server is killed with -9 mid-stream and started again.
Round 2: ClickHouse itself is killed mid-stream: the server answers 503
with Retry-After (and /healthz 503) until ClickHouse is started again on
the same data. Afterwards every acknowledged window is there exactly once
(the retried ones too: keys), with its exact value. Bounded: a few hundred
windows, each wait with a deadline."""
import gzip
import http.client
import os
import signal
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(__file__))
import pprof_wire  # noqa: E402
from clickhouse import ClickHouse  # noqa: E402
from sonde_test import check, fail, tmpdir, wait_until  # noqa: E402
from server_test import Server  # noqa: E402

MAX_WINDOWS = 300
BODY = gzip.compress(pprof_wire.encode([("samples", "count")],
                                       [(["main", "work", "step"], [4]),
                                        (["main", "idle"], [3])]))
now = int(time.time())
base_ms = (now - 1800) * 1000


class Client:
    """Sends window after window; each until it is acknowledged."""

    def __init__(self):
        self.port = None
        self.next = 0
        self.acked = []
        self.statuses = {}
        self.retry_after = set()
        self.stop = threading.Event()
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()

    def send(self, i):
        path = ("/api/v1/ingest?type=cpu&service_name=faults&node=n1&key=n1/%d/cpu"
                "&from=%d&until=%d") % (i, base_ms + i * 1000, base_ms + (i + 1) * 1000)
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        try:
            c.request("POST", path, body=BODY,
                      headers={"Content-Type": "application/octet-stream"})
            r = c.getresponse()
            r.read()
            self.statuses[r.status] = self.statuses.get(r.status, 0) + 1
            if r.status == 503 and r.getheader("Retry-After"):
                self.retry_after.add(r.getheader("Retry-After"))
            return r.status
        finally:
            c.close()

    def run(self):
        while not self.stop.is_set() and self.next < MAX_WINDOWS:
            if self.port is None:
                time.sleep(0.01)
                continue
            try:
                st = self.send(self.next)
            except OSError:
                st = None  # the server is away: the same window again
            if st == 200:
                self.acked.append(self.next)
                self.next += 1
            elif st not in (None, 503):
                fail("window %d: HTTP %s" % (self.next, st))
            else:
                time.sleep(0.05)


def acked_since(client, n):
    return lambda: len(client.acked) >= n


ch = ClickHouse()
url = ch.url("faults")
srv = Server(tmpdir(), ["--store", url])
client = Client()
try:
    client.port = srv.port
    # Round 1: the sonde server killed mid-stream, then started again.
    wait_until(acked_since(client, 20), 120, "20 windows acknowledged")
    srv.p.send_signal(signal.SIGKILL)
    srv.p.wait(10)
    n1 = len(client.acked)
    srv = Server(tmpdir(), ["--store", url])
    client.port = srv.port
    wait_until(acked_since(client, n1 + 20), 120, "the stream goes on after the restart")

    # Round 2: ClickHouse killed mid-stream.
    ch.kill()
    n2 = len(client.acked)
    wait_until(lambda: client.statuses.get(503, 0) >= 3, 60,
               "the server answers 503 while ClickHouse is away")
    check(srv.get("/healthz")[0] == 503, "/healthz says the store is failing")
    check(len(client.acked) <= n2 + 1, "nothing is acknowledged while ClickHouse is away")
    check(client.retry_after and all(v.isdigit() and int(v) > 0 for v in client.retry_after),
          "503s carry Retry-After (%s)" % sorted(client.retry_after))
    ch.start()
    wait_until(acked_since(client, n2 + 20), 120, "the stream goes on once ClickHouse is back")
    client.stop.set()
    client.t.join(30)
    check(not client.t.is_alive(), "the client stopped")

    acked = client.acked
    check(acked == list(range(len(acked))), "windows acknowledged in sequence: %d of them" %
          len(acked))
    last = len(acked) + 2
    r = srv.get_json("/api/v1/timeseries", query='{service_name="faults"}', step=1000,
                     **{"from": base_ms}, until=base_ms + last * 1000)
    vals = r["values"]
    lost = [i for i in acked if vals[i] != 7]
    check(not lost, "every acknowledged window is there exactly once, value 7 (wrong: %s)" %
          [(i, vals[i]) for i in lost[:10]])
    extra = [i for i, v in enumerate(vals) if i >= len(acked) and v not in (0, 7)]
    check(not extra, "no torn window after the last acknowledged one: %s" % extra)
    top = srv.get_json("/api/v1/top", query='{service_name="faults"}', **{"from": base_ms},
                       until=base_ms + last * 1000)
    check(top["total"] in (7 * len(acked), 7 * (len(acked) + 1)),
          "the totals add up: %d for %d windows" % (top["total"], len(acked)))
    print("statuses seen: %s" % client.statuses)
finally:
    client.stop.set()
    srv.stop()
    ch.stop()
