#!/usr/bin/env python3
"""test_faults_put_keys.py: ingest keys belong to their project (security
probe, issue 22, finding 4). On `sonde server --auth`, project B's token
posted a window with the key `gpu-7/1795900000000/1/cpu`; project A's
later window with the same key answered 200 {"duplicate": true} and
stored nothing (A's agent then dropped it as delivered): data lost across
projects, and an oracle of A's keys. Now the key is the project's (the
store keeps it with the series of the window): A's window is stored, A
reads it, and each project's retry is still a duplicate. The store
conformance suite (unit/test_store, integration/test_store_clickhouse)
holds the same for both stores."""
import json
import os
import sys
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(__file__))
import pprof_wire  # noqa: E402
from server_test import Server  # noqa: E402
from sonde_test import SONDE, check, fail, run, tmpdir  # noqa: E402


def token(data, project, role):
    p = run([SONDE, "token", "create", "--data", data, "--project", project, "--role", role])
    if p.returncode != 0:
        fail("token create %s/%s: %s" % (project, role, p.stderr))
    return p.stdout.strip()


def ingest(srv, tok, key, start_ms, func, value):
    body = pprof_wire.encode([("samples", "count")], [(["main", func], [value])])
    path = "/api/v1/ingest?" + urllib.parse.urlencode(
        {"from": start_ms, "until": start_ms + 10000, "type": "cpu", "node": "gpu-7",
         "key": key})
    st, _, out = srv.request("POST", path, body, {"Authorization": "Bearer " + tok,
                                                  "Content-Type": "application/octet-stream"})
    check(st == 200, "ingest %s: 200 (got %d %s)" % (key, st, out[:200]))
    return out


def total(srv, tok, start_ms):
    path = "/api/v1/totals?" + urllib.parse.urlencode(
        {"by": "node", "from": start_ms - 60000, "until": start_ms + 60000})
    st, _, out = srv.request("GET", path, headers={"Authorization": "Bearer " + tok})
    check(st == 200, "totals: 200 (got %d %s)" % (st, out[:200]))
    return sum(g["total"] for g in json.loads(out)["groups"])


data = os.path.join(tmpdir(), "data")
a_ingest, a_read = token(data, "alpha", "ingest"), token(data, "alpha", "read")
b_ingest, b_read = token(data, "beta", "ingest"), token(data, "beta", "read")
srv = Server(data, ["--auth"])
try:
    start = (int(time.time()) - 120) * 1000
    key = "gpu-7/%d/1/cpu" % start
    out = ingest(srv, b_ingest, key, start, "beta_first", 5)
    check(b'"duplicate":false' in out, "B's window is stored: %s" % out)
    out = ingest(srv, a_ingest, key, start, "alpha_same_key", 7)
    check(b'"duplicate":false' in out,
          "A's window with the key B used first is stored, not a duplicate: %s" % out)
    out = ingest(srv, a_ingest, key, start, "alpha_same_key", 7)
    check(b'"duplicate":true' in out, "A's retry of it is a duplicate: %s" % out)
    out = ingest(srv, b_ingest, key, start, "beta_first", 5)
    check(b'"duplicate":true' in out, "B's retry of its own is a duplicate: %s" % out)
    check(total(srv, a_read, start) == 7, "A reads its window once (total 7)")
    check(total(srv, b_read, start) == 5, "B reads its own once (total 5)")
    # Across a restart (the keys are on disk with their series).
    srv.stop()
    srv = Server(data, ["--auth"])
    out = ingest(srv, a_ingest, key, start, "alpha_same_key", 7)
    check(b'"duplicate":true' in out, "after a restart A's retry is still a duplicate")
    key2 = "gpu-7/%d/2/cpu" % start
    ingest(srv, b_ingest, key2, start, "beta_second", 1)
    out = ingest(srv, a_ingest, key2, start, "alpha_second", 2)
    check(b'"duplicate":false' in out, "and B's new key keeps no window of A's out")
    check(total(srv, a_read, start) == 9, "A reads both its windows (total 9)")
finally:
    srv.stop()
