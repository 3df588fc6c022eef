#!/usr/bin/env python3
"""A query has a time limit, and queries never hold up /healthz or ingest
(issue 22, security probe finding 2). Regex matchers cost something on
every series: over 102,400 series one 1.5 KB /api/v1/labels selector (63 x
lab0=~"(.*[x0-9].*){12}") took 59 s of CPU, and two at once left /healthz
unanswered for more than 100 s -- the queries held the HTTP threads, and
the store's dictionary lock that every put and read (/healthz's) waits for.

`sonde server --threads 2 --query-timeout 1s` over 1,024 series whose
label lab0 is 1,000 bytes long, 60 such matchers (seconds of matching per
query here):

- 4 of those queries at once are each answered 503 within 15 s with a JSON
  error naming the limit (--query-timeout, 1s), and counted in
  sonde_server_query_timeouts_total;
- meanwhile /healthz, asked every 0.1 s, is answered within 1 s every time,
  and an ingest every 0.25 s is stored (200) within 2 s;
- the server's CPU time for the 4 queries stays within 4 x the limit and 3 s;
- a query without the costly regexes is answered 200 afterwards."""
import json
import os
import sys
import threading
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(__file__))
from sonde_test import check, cpu_seconds, tmpdir  # noqa: E402
from server_test import Server  # noqa: E402
from pprof_wire import field, packed, vint  # noqa: E402

NSERIES = 1024
VALUE_LEN = 1000
MATCHERS = 60
LIMIT_S = 1.0


def labelled_pprof(first, n):
    """A pprof of n samples (main;work, value 1), sample i labelled
    lab0 = a 1,000-byte value of its own that the regex matches (a digit
    every 7 bytes), service_name = budget."""
    strings = ["", "samples", "count", "main", "work", "lab0", "service_name", "budget"]

    def s(x):
        strings.append(x)
        return len(strings) - 1
    msg = field(1, vint(1, 1) + vint(2, 2))
    for i in range(first, first + n):
        head = "%06d" % i
        value = head + "".join("1" if k % 7 == 0 else "a" for k in range(VALUE_LEN - len(head)))
        lab = field(3, vint(1, 5) + vint(2, s(value)))
        svc = field(3, vint(1, 6) + vint(2, 7))
        msg += field(2, packed(1, [2, 1]) + packed(2, [1]) + lab + svc)
    for fid, name in ((1, 3), (2, 4)):
        msg += field(4, vint(1, fid) + field(4, vint(1, fid)))
        msg += field(5, vint(1, fid) + vint(2, name))
    for x in strings:
        msg += field(6, x.encode())
    return msg


def ingest(srv, body, end_s):
    return srv.post("/api/v1/ingest", body, type="cpu",
                    **{"from": (end_s - 10) * 1000, "until": end_s * 1000})


def main():
    srv = Server(tmpdir(), ["--threads", "2", "--query-timeout", "1s"])
    try:
        now = int(time.time())
        for k in range(0, NSERIES, 256):
            st, _, body = ingest(srv, labelled_pprof(k, 256), now - 60)
            check(st == 200 and json.loads(body)["series"] == 256,
                  "256 series ingested: %s %s" % (st, body[:200]))
        costly = "{" + ",".join(['lab0=~"(.*[x0-9].*){12}"'] * MATCHERS) + "}"
        path = "/api/v1/labels?" + urllib.parse.urlencode(
            {"query": costly, "from": (now - 3600) * 1000, "until": (now + 60) * 1000})
        print("selector of %d bytes" % len(costly))

        answers, probes, ingests = [], [], []
        stop = threading.Event()

        def query():
            t = time.monotonic()
            st, _, body = srv.request("GET", path, timeout=60)
            answers.append((st, body, time.monotonic() - t))

        def probe():
            while not stop.is_set():
                t = time.monotonic()
                try:
                    st = srv.request("GET", "/healthz", timeout=10)[0]
                except OSError as e:
                    st = type(e).__name__
                probes.append((st, time.monotonic() - t))
                stop.wait(0.1)

        def ingester():
            i = 0
            while not stop.is_set():
                t = time.monotonic()
                try:
                    st = srv.post("/ingest", b"main;during 1\n", "text/plain",
                                  name="during{n=%d}" % i, format="folded",
                                  **{"from": now - 30, "until": now - 20})[0]
                except OSError as e:
                    st = type(e).__name__
                ingests.append((st, time.monotonic() - t))
                i += 1
                stop.wait(0.25)

        cpu0 = cpu_seconds(srv.p.pid)
        side = [threading.Thread(target=probe), threading.Thread(target=ingester)]
        qs = [threading.Thread(target=query) for _ in range(4)]
        for t in side + qs:
            t.start()
        for t in qs:
            t.join(120)
        stop.set()
        for t in side:
            t.join(30)
        cpu = cpu_seconds(srv.p.pid) - cpu0

        for st, body, secs in answers:
            err = json.loads(body).get("error", "") if st == 503 else body[:200]
            print("query: %s in %.2f s: %s" % (st, secs, err))
        check(len(answers) == 4 and all(
            st == 503 and "--query-timeout" in json.loads(body).get("error", "") and
            "1s" in json.loads(body)["error"] and secs < 15 for st, body, secs in answers),
            "the 4 costly queries are each stopped at the limit: 503 naming it, within 15 s")
        slow = [p for p in probes if p[0] != 200 or p[1] > 1.0]
        check(probes and not slow,
              "/healthz answered within 1 s all along (%d probes, slowest %.2f s; off: %s)"
              % (len(probes), max(p[1] for p in probes), slow[:5]))
        bad = [p for p in ingests if p[0] != 200 or p[1] > 2.0]
        check(ingests and not bad,
              "ingest stored within 2 s all along (%d ingests, slowest %.2f s; off: %s)"
              % (len(ingests), max(p[1] for p in ingests), bad[:5]))
        check(cpu < 4 * LIMIT_S + 3,
              "the server spent %.1f s of CPU on the 4 queries (at most 4 x 1 s and 3 s)" % cpu)
        m = srv.get("/metrics")[2].decode()
        n = [float(l.split()[-1]) for l in m.splitlines()
             if l.startswith("sonde_server_query_timeouts_total")]
        check(n == [4.0], "the 4 counted in sonde_server_query_timeouts_total: %s" % n)
        labels = srv.get_json("/api/v1/labels", query='{service_name="budget"}',
                              **{"from": (now - 3600) * 1000, "until": (now + 60) * 1000})
        check("lab0" in labels.get("names", []),
              "a query without the costly regexes answers: %s" % labels)
    finally:
        srv.stop()


main()
