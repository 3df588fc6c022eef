#!/usr/bin/env python3
"""Bad input never takes `sonde server` down or stores anything: truncated,
random and oversized protobuf, a gzip bomb, bodies over the limit (answered
413 from the headers alone, before a byte of the body is sent; chunked ones
dropped as they come), wrong content types, bad, huge and non-UTF-8 labels,
too many labels, bad time ranges and selectors, too many points, bad JSON,
bad Pyroscope names, formats, folded lines and multipart bodies, unknown
routes and methods, a client that hangs up mid-body. Each gets its 4xx with
a JSON message naming the problem; afterwards the server answers, its data
is what it was, and a function name that is not UTF-8 comes back repaired
in valid JSON."""
import gzip
import json
import os
import socket
import sys
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(__file__))
from sonde_test import check, fail, tmpdir  # noqa: E402
from server_test import Server, error_of  # noqa: E402

srv = Server(tmpdir())
MB = 1024 * 1024


def expect(resp, code, words, what):
    st, h, body = resp
    msg = error_of(body)
    ok = st == code and words in msg and h.get("content-type") == "application/json"
    check(ok, "%s: %d %r" % (what, st, msg[:160]))
    check(srv.alive(), "the server still answers after: %s" % what)


try:
    now = int(time.time())
    srv.ingest_folded("good.cpu", now - 20, now - 10, {"main;work": 5})
    st, _, pbgz = srv.get("/api/v1/pprof", query="good.cpu")
    check(st == 200, "a valid pprof to mutate, from the server's own writer")
    raw = gzip.decompress(pbgz)

    def ingest(body, ctype="application/octet-stream", **params):
        return srv.post("/api/v1/ingest", body, ctype, **params)

    # Protobuf.
    expect(ingest(raw[:len(raw) // 2]), 400, "not a valid pprof", "truncated protobuf")
    expect(ingest(pbgz[:len(pbgz) - 9]), 400, "not a valid pprof", "truncated gzip")
    expect(ingest(bytes((i * 7919 + 13) & 255 for i in range(5000))), 400, "not a valid pprof",
           "random bytes")
    expect(ingest(b""), 400, "not a valid pprof", "an empty body")
    bomb = gzip.compress(b"\0" * (100 * MB), 9)
    check(len(bomb) < 200 * 1024, "a gzip bomb of %d bytes" % len(bomb))
    expect(ingest(bomb), 413, "decompressed", "a gzip bomb (100 MB of zeros)")

    # Over the limit: answered from the headers, the body never sent.
    t0 = time.time()
    out = srv.raw(b"POST /api/v1/ingest HTTP/1.1\r\nHost: x\r\n"
                  b"Content-Type: application/octet-stream\r\n"
                  b"Content-Length: 1073741824\r\n\r\n")
    check(out.startswith(b"HTTP/1.1 413") and b"over the limit" in out,
          "1 GiB announced: 413 without reading it (%.2f s)" % (time.time() - t0))
    check(srv.alive(), "the server still answers after: 1 GiB announced")
    chunk = b"\0" * MB
    body = b"".join(b"%x\r\n%s\r\n" % (len(chunk), chunk) for _ in range(17)) + b"0\r\n\r\n"
    out = srv.raw(b"POST /api/v1/ingest HTTP/1.1\r\nHost: x\r\n"
                  b"Content-Type: application/octet-stream\r\n"
                  b"Transfer-Encoding: chunked\r\n\r\n" + body)
    check(out.startswith(b"HTTP/1.1 413"), "17 MiB chunked: 413 " + repr(out[:60]))
    check(srv.alive(), "the server still answers after: 17 MiB chunked")
    # A client that hangs up half way through its body.
    s = socket.create_connection(("127.0.0.1", srv.port))
    s.sendall(b"POST /api/v1/ingest HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n" +
              raw[:100])
    s.close()
    check(srv.alive(), "the server still answers after a client hung up mid-body")

    # Content types.
    expect(ingest(pbgz, "text/html"), 415, "text/html", "pprof sent as text/html")
    expect(srv.post("/api/v1/ingest/points", b"{}", "application/x-www-form-urlencoded"), 415,
           "not JSON", "points sent as a form")

    # Labels.
    expect(ingest(pbgz, **{"bad name": "x"}), 400, "'bad name'", "a label name with a space")
    expect(srv.post("/api/v1/ingest?node=%ff%fe%00", pbgz, "application/octet-stream"), 400,
           "not UTF-8", "a label value that is not UTF-8")
    expect(ingest(pbgz, node="x" * 5000), 400, "label 'node' has a value of 5000 bytes",
           "a 5000-byte label value")
    expect(ingest(pbgz, **{"l%d" % i: "v" for i in range(40)}), 400, "at most 32",
           "40 labels")
    expect(srv.post("/ingest", b"main 1\n", "text/plain", name=b"app.cpu{k=\xff}"), 400,
           "not UTF-8", "a Pyroscope label that is not UTF-8")

    # Times and ranges.
    expect(ingest(pbgz, **{"from": 20, "until": 10}), 400, "after until", "ingest from > until")
    expect(ingest(pbgz, **{"from": "tomorrow"}), 400, "tomorrow", "ingest from=tomorrow")
    expect(srv.get("/api/v1/flamegraph", **{"from": "now", "until": "now-1h"}), 400,
           "must be before", "a range that ends before it starts")
    expect(srv.get("/api/v1/top", **{"from": "now-1x"}), 400, "bad from", "a bad duration")
    expect(srv.get("/pyroscope/render", until="12:00"), 400, "bad until", "a clock time")

    # Selectors.
    expect(srv.get("/api/v1/flamegraph", query='{type="cpu"'), 400, "offset 11",
           "an unclosed selector")
    expect(srv.get("/api/v1/flamegraph", query='{type=cpu}'), 400, "quoted value",
           "an unquoted value")
    expect(srv.get("/api/v1/labels", query='{comm=~"(a"}'), 400, "bad regex",
           "a regex that does not compile")
    expect(srv.get("/api/v1/labels", query='{comm=~"(a{50}){50}"}'), 400, "repeats too much",
           "a regex that would expand too far")
    expect(srv.get("/api/v1/timeseries", query="{}", step="1", **{"from": "0"}), 400, "steps",
           "a time series of billions of steps")

    # Points.
    pts = [{"name": "m", "ts_ms": 1, "value": 1}] * 100001
    expect(srv.post("/api/v1/ingest/points", json.dumps({"points": pts}).encode(),
                    "application/json"), 413, "at most 100000", "100 001 points")
    expect(srv.post("/api/v1/ingest/points", b'{"points": [', "application/json"), 400,
           "not JSON", "truncated JSON")
    expect(srv.post("/api/v1/ingest/points", b"[" * 100000, "application/json"), 400,
           "not JSON", "JSON nested 100 000 deep")
    expect(srv.post("/api/v1/ingest/points",
                    b'{"points": [{"name": "m", "ts_ms": "soon", "value": 1}]}',
                    "application/json"), 400, "ts_ms", "a point without a time")
    expect(srv.post("/api/v1/alerts", b'{"status": "on fire"}', "application/json"), 400,
           "status", "an alert with a bad status")

    # Pyroscope ingest.
    expect(srv.post("/ingest", b"main 1\n", "text/plain", name=""), 400, "name is missing",
           "no name")
    expect(srv.post("/ingest", b"main 1\n", "text/plain", name="app.cpu{a=b"), 400,
           "offset", "an unclosed name")
    expect(srv.post("/ingest", b"main 1\n", "text/plain", name="app.cpu", format="jfr"), 400,
           "format 'jfr'", "an unsupported format")
    expect(srv.post("/ingest", b"main;a 1\nmain;b x\n", "text/plain", name="app.cpu"), 400,
           "line 2", "a bad folded line")
    expect(srv.post("/ingest", b"main;;a 1\n", "text/plain", name="app.cpu"), 400, "line 1",
           "an empty frame")
    expect(srv.post("/ingest", b"x", "multipart/form-data", name="app.cpu", format="pprof"),
           400, "boundary", "multipart without a boundary")
    expect(srv.post("/ingest", b"--bnd\r\nContent-Disposition: form-data; name=\"profile\"\r\n"
                    b"\r\nnot a pprof\r\n--bnd--\r\n", "multipart/form-data; boundary=bnd",
                    name="app.cpu", format="pprof"), 400, "not a valid pprof",
           "a multipart profile part that is not a pprof")

    # Routes and methods.
    expect(srv.get("/api/v1/nope"), 404, "/api/v1/nope", "an unknown route")
    expect(srv.request("DELETE", "/api/v1/alerts"), 405, "not allowed", "DELETE")
    expect(srv.request("PUT", "/ingest"), 405, "use POST", "PUT /ingest")

    # Nothing above was stored.
    vals = srv.get_json("/api/v1/label/values", name="service_name")["values"]
    check(vals == ["good"], "only the good series is stored: %s" % vals)
    r = srv.get_json("/api/v1/top", query="{}")
    check(r["total"] == 5, "with its 5 samples")

    # A function name that is not UTF-8 is kept and shown repaired.
    st, _, _ = srv.post("/ingest", b"main;caf\xe9 3\n", "text/plain", name="latin1.cpu",
                        **{"from": now - 20}, until=now - 10)
    check(st == 200, "a folded body with a Latin-1 name is accepted")
    st, h, body = srv.get("/pyroscope/render", query="latin1.cpu")
    doc = json.loads(body.decode("utf-8"))
    check("caf\ufffd" in doc["flamebearer"]["names"], "its name comes back as valid UTF-8")
finally:
    rc = srv.stop()
check(rc == 0, "the server exits 0 on SIGTERM after all that")
