#!/usr/bin/env python3
"""No acknowledged window is lost when `sonde server` is killed: a client
thread ingests agent windows (pprof, one second each, in sequence) as fast
as the acknowledgements come back; the server gets SIGKILL in the middle of
the stream; a new server on the same --data must hold every window that
was acknowledged, each with its exact total. Two rounds, each bounded to a
few hundred windows."""
import os
import signal
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(__file__))
from sonde_test import check, fail, tmpdir  # noqa: E402
from server_test import Server  # noqa: E402

ROUNDS, MAX_WINDOWS = 2, 400
data = tmpdir()
srv = Server(data)
now = int(time.time())
srv.ingest_folded("seed.cpu", now - 30, now - 20, {"main;a": 3, "main;b": 4})
st, _, body = srv.get("/api/v1/pprof", query="seed.cpu")
check(st == 200 and body[:2] == b"\x1f\x8b", "a pprof of 7 samples from the server's writer")
base_ms = (now - 3000) * 1000
acked = []
seq = [0]

try:
    for rnd in range(ROUNDS):
        stop = threading.Event()
        errors = []

        def client(port):
            import http.client
            while not stop.is_set() and seq[0] < MAX_WINDOWS * (rnd + 1):
                i = seq[0]
                path = "/api/v1/ingest?stream=1&from=%d&until=%d" % (
                    base_ms + i * 1000, base_ms + (i + 1) * 1000)
                try:
                    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
                    c.request("POST", path, body=body,
                              headers={"Content-Type": "application/octet-stream"})
                    r = c.getresponse()
                    r.read()
                    c.close()
                except OSError as e:
                    errors.append(str(e))
                    return
                if r.status == 200:
                    acked.append(i)
                else:
                    errors.append("HTTP %d" % r.status)
                    return
                seq[0] += 1

        before = len(acked)
        t = threading.Thread(target=client, args=(srv.port,))
        t.start()
        # Killed in the middle of the stream: once it has acknowledged a
        # few dozen windows, whatever the machine's speed.
        end = time.time() + 60
        while len(acked) - before < 30 and time.time() < end and t.is_alive():
            time.sleep(0.01)
        srv.p.send_signal(signal.SIGKILL)
        srv.p.wait(10)
        stop.set()
        t.join(30)
        check(not t.is_alive(), "round %d: the client stopped" % rnd)
        n = len(acked) - before
        check(n >= 5, "round %d: %d windows acknowledged before SIGKILL (%s)" %
              (rnd, n, errors[:1]))
        # The window in flight when the server died may or may not be there.
        seq[0] += 1
        srv = Server(data)
        last = max(acked) + 2
        r = srv.get_json("/api/v1/timeseries", query='{stream="1"}', step=1000,
                         **{"from": base_ms}, until=base_ms + last * 1000)
        vals = r["values"]
        lost = [i for i in acked if vals[i] != 7]
        check(not lost, "round %d: all %d acknowledged windows survived (lost: %s)" %
              (rnd, len(acked), lost[:10]))
        extra = [i for i, v in enumerate(vals) if v not in (0, 7)]
        check(not extra, "round %d: no window is torn (values other than 0 and 7: %s)" %
              (rnd, extra[:10]))
    r = srv.get_json("/api/v1/top", query='{stream="1"}', **{"from": base_ms},
                     until=base_ms + (max(acked) + 2) * 1000)
    check(r["total"] >= 7 * len(acked), "the totals add up: %d >= %d" % (r["total"],
                                                                         7 * len(acked)))
finally:
    srv.stop()
