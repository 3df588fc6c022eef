#!/usr/bin/env python3
"""test_faults_tsp_utf8.py: the Trace Server Protocol's errors that echo
what the client sent stay valid JSON (security probe, issue 22, finding
11). A TSP error message quotes a parameter cut at a byte count (uri
'%.80s') or a path segment that is not UTF-8; it was handed to jansson as
it was, which refused it, and the request answered 500 "Cannot allocate
memory" with a warning line in the server's log each time. Now: the
error's status (400, 404) with a JSON body whose message is repaired
UTF-8, and no warning."""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from server_test import Server  # noqa: E402
from sonde_test import check, tmpdir  # noqa: E402

srv = Server(os.path.join(tmpdir(), "data"))
try:
    # A uri of 1 + 2 x 60 bytes: the message cuts it at 80, inside an "é".
    body = json.dumps({"parameters": {"uri": "x" + "é" * 60}}, ensure_ascii=False).encode()
    cases = [("POST", "/tsp/api/traces", body, 400),
             ("GET", "/tsp/api/traces/%FF%FE", None, 404),
             ("GET", "/tsp/api/experiments/%C3", None, 404)]
    for i in range(20):
        for method, path, data, want in cases:
            st, h, out = srv.request(method, path, body=data,
                                     headers={"Content-Type": "application/json"})
            try:
                msg = json.loads(out.decode("utf-8", errors="strict"))["error"]
            except (ValueError, KeyError) as e:
                msg = "(%s: %r)" % (e, out[:200])
            if i == 0 or st != want or not ("\ufffd" in msg or "é" in msg):
                check(st == want and ("\ufffd" in msg or "é" in msg),
                      "%s %s answers %d with a JSON error in valid UTF-8 that quotes what "
                      "was sent, repaired (got %d: %s)" % (method, path, want, st, msg[:120]))
    print("ok: 60 requests answered 400/404 with valid JSON")
    warned = [l for l in srv.lines if "warning" in l]
    check(not warned, "no warning in the server's log (%d: %s)" % (len(warned), warned[:2]))
    check(srv.alive(), "the server still answers")
finally:
    srv.stop()
