#!/usr/bin/env python3
"""test_auth.py: projects and tokens on a real `sonde server --auth` (SQLite
store; test_auth_clickhouse.py runs the same over ClickHouse).

- `sonde token create|list|revoke`: a token printed once, listed by id,
  project and role without the token itself; bad arguments refused.
- The matrix: every route of the server against no token, a malformed one,
  an unknown one, a revoked one, and tokens of each role -- 401 (with
  WWW-Authenticate) for the first four, 403 for a role short, 2xx for the
  right role; /healthz and the UI's files need none. A Pyroscope client's
  Basic auth with the token as the password works.
- Two projects ingest the same service name, windows, points and alerts:
  each reads exactly its own (flame graph totals, label values, top, time
  series, points, alerts, totals, the pprof download, the Trace Server
  Protocol's traces), never the other's, whatever its selector says; label
  names never show the project label.
- A token created while the server runs works at once; a revoked one stops
  working within TOKENS_REFRESH_MS (2 s; waited for up to 10 s).
- 20 failed attempts from one address (127.0.0.2) get it 429 with
  Retry-After for a bad token or none, while a valid token from it and
  127.0.0.1 go on being answered; every result is counted in /metrics.
"""
import base64
import gzip
import http.client
import json
import os
import sys
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(__file__))
import pprof_wire  # noqa: E402
from server_test import Server, error_of  # noqa: E402
from sonde_test import SONDE, fail, run, tmpdir, wait_until  # noqa: E402


def check(cond, msg):
    """Fails with msg (what went wrong) unless cond."""
    if not cond:
        fail(msg)

STORE = os.environ.get("SONDE_TEST_STORE_ARGS")  # "--store URL" for ClickHouse


def store_args(data):
    return STORE.split() if STORE else ["--data", data]


def token(data, project, role):
    p = run([SONDE, "token", "create"] + store_args(data) + ["--project", project, "--role", role])
    check(p.returncode == 0, "token create %s/%s failed: %s" % (project, role, p.stderr))
    tok = p.stdout.strip()
    check(tok.startswith("sonde_") and len(tok) == 49 and "\n" not in tok,
          "a token is one line of 'sonde_' and 43 characters: %r" % tok)
    return tok


def tokens_list(data):
    p = run([SONDE, "token", "list"] + store_args(data))
    check(p.returncode == 0, "token list failed: %s" % p.stderr)
    rows = [line.split() for line in p.stdout.splitlines()[1:]]
    return {r[0]: r for r in rows}


class Client:
    """Requests to the server with one Authorization (None: none), from
    one source address."""

    def __init__(self, srv, auth, source="127.0.0.1"):
        self.srv, self.auth, self.source = srv, auth, source

    def request(self, method, path, body=None, ctype=None, **params):
        if params:
            path += "?" + urllib.parse.urlencode(params)
        headers = {}
        if self.auth:
            headers["Authorization"] = self.auth
        if ctype:
            headers["Content-Type"] = ctype
        c = http.client.HTTPConnection("127.0.0.1", self.srv.port, timeout=60,
                                       source_address=(self.source, 0))
        try:
            c.request(method, path, body=body, headers=headers)
            r = c.getresponse()
            data = r.read()
            return r.status, {k.lower(): v for k, v in r.getheaders()}, data
        finally:
            c.close()

    def json(self, path, **params):
        st, _, body = self.request("GET", path, **params)
        if st != 200:
            fail("GET %s %s as %s: HTTP %d %s" % (path, params, self.auth and self.auth[:20],
                                                   st, body[:300]))
        return json.loads(body)


def bearer(tok):
    return "Bearer " + tok


NOW = int(time.time())


def ingest_all(c, tag, weight):
    """The same service name in every project, stacks and values of its
    own: a folded window, an agent's pprof window, points and an alert."""
    st, _, body = c.request("POST", "/ingest", ("main;%s %d\n" % (tag, weight)).encode(),
                            "text/plain", name="shop{env=prod}", format="folded",
                            **{"from": NOW - 120, "until": NOW - 110})
    check(st == 200, "folded ingest of %s: %d %s" % (tag, st, body[:200]))
    prof = pprof_wire.encode([("samples", "count")], [(["main", tag + "_agent"], [weight])])
    st, _, body = c.request("POST", "/api/v1/ingest", prof, "application/octet-stream",
                            service_name="shop", type="cpu",
                            **{"from": (NOW - 100) * 1000, "until": (NOW - 90) * 1000})
    check(st == 200, "pprof ingest of %s: %d %s" % (tag, st, body[:200]))
    pts = {"points": [{"name": "gpu_memory_used_bytes", "labels": {"service_name": "shop",
                                                                   "gpu": "0"},
                       "ts_ms": (NOW - 60) * 1000, "value": weight}]}
    st, _, body = c.request("POST", "/api/v1/ingest/points", json.dumps(pts).encode(),
                            "application/json")
    check(st == 200, "points of %s: %d %s" % (tag, st, body[:200]))
    alert = {"alert": "Stuck", "status": "firing", "labels": {"service": "shop"},
             "annotations": {"summary": tag}, "startsAt": "2026-11-28T10:00:00Z"}
    st, _, body = c.request("POST", "/api/v1/alerts", json.dumps(alert).encode(),
                            "application/json")
    check(st == 200, "alert of %s: %d %s" % (tag, st, body[:200]))


def check_own(c, tag, other, weight):
    """What a project reads is its own data alone."""
    rng = {"from": (NOW - 600) * 1000, "until": NOW * 1000}
    top = c.json("/api/v1/top", query='{service_name="shop"}', **rng)
    names = {f["name"] for f in top["functions"]}
    check(tag in names and tag + "_agent" in names, "%s's top lacks its functions: %s"
          % (tag, names))
    check(other not in names and other + "_agent" not in names,
          "%s's top shows the other project's functions: %s" % (tag, names))
    check(top["total"] == 2 * weight, "%s's total is %s, want %d" % (tag, top["total"],
                                                                     2 * weight))
    # A selector naming the other project's label gets nothing more.
    sneaky = c.json("/api/v1/top", query='{__project=~".+"}', **rng)
    check(sneaky["total"] == 2 * weight, "a selector on __project reached other data: %s"
          % sneaky["total"])
    vals = c.json("/api/v1/label/values", name="service_name", **rng)["values"]
    check(vals == ["shop"], "%s's services: %s" % (tag, vals))
    labels = c.json("/api/v1/labels", **rng)["names"]
    check("__project" not in labels, "label names show the project label: %s" % labels)
    ts = c.json("/api/v1/timeseries", query='{service_name="shop"}', step="600s",
                **{"from": (NOW - 600) * 1000, "until": NOW * 1000})
    got = sum(v for s in ts["series"] for _, v in s["values"] if v is not None) \
        if "series" in ts else None
    check(got is None or abs(got - 2 * weight) < 1e-6 * weight,
          "%s's time series sums to %s, want %d" % (tag, got, 2 * weight))
    pts = c.json("/api/v1/points", name="gpu_memory_used_bytes", **rng)
    values = [p[1] if isinstance(p, list) else p.get("value")
              for s in pts["series"] for p in s["points"]]
    check(values == [weight], "%s's points: %s" % (tag, values))
    alerts = c.json("/api/v1/alerts")["alerts"]
    check([a["annotations"]["summary"] for a in alerts] == [tag],
          "%s's alerts: %s" % (tag, alerts))
    check(all("__project" not in a["labels"] for a in alerts), "alerts show the project label")
    st, _, body = c.request("GET", "/api/v1/pprof", query='{service_name="shop"}', **rng)
    if body[:2] == b"\x1f\x8b":
        body = gzip.decompress(body)
    check(st == 200 and (other + "_agent").encode() not in body and tag.encode() in body,
          "%s's pprof download: %d, holds the other's: %s" % (tag, st, other.encode() in body))
    traces = c.json("/tsp/api/traces")
    check(traces and all("shop" in json.dumps(t) for t in traces),
          "%s's TSP traces: %s" % (tag, traces))


# Every route, its method, and the role it needs (None: no token).
CTYPES = {"/ingest": "text/plain", "/api/v1/ingest": "application/octet-stream"}
ROUTES = [
    ("POST", "/ingest", "ingest"),
    ("POST", "/api/v1/ingest", "ingest"),
    ("POST", "/api/v1/ingest/points", "ingest"),
    ("POST", "/api/v1/alerts", "ingest"),
    ("GET", "/api/v1/alerts", "read"),
    ("GET", "/api/v1/labels", "read"),
    ("GET", "/api/v1/label/values", "read"),
    ("GET", "/api/v1/totals", "read"),
    ("GET", "/api/v1/flamegraph", "read"),
    ("GET", "/api/v1/diff", "read"),
    ("GET", "/api/v1/top", "read"),
    ("GET", "/api/v1/timeseries", "read"),
    ("GET", "/api/v1/points", "read"),
    ("GET", "/api/v1/pprof", "read"),
    ("GET", "/api/v1/speedscope", "read"),
    ("GET", "/pyroscope/render", "read"),
    ("GET", "/pyroscope/render-diff", "read"),
    ("GET", "/tsp/api/health", "read"),
    ("GET", "/metrics", "read"),
    ("GET", "/healthz", None),
    ("GET", "/", None),
    ("GET", "/ui/app.js", None),
]


def matrix(srv, toks, revoked):
    n = 0
    for k, (method, path, need) in enumerate(ROUTES):
        # The failing clients of each route from an address of their own,
        # under the limit of failures per address.
        bad = "127.0.1.%d" % (k + 1)
        clients = {
            "none": Client(srv, None, bad),
            "malformed": Client(srv, "Bearer", bad),
            "unknown": Client(srv, bearer("sonde_" + "x" * 43), bad),
            "revoked": Client(srv, bearer(revoked), bad),
            "ingest": Client(srv, bearer(toks["ingest"])),
            "read": Client(srv, bearer(toks["read"])),
            "admin": Client(srv, bearer(toks["admin"])),
        }
        for who, c in clients.items():
            st, h, body = c.request(method, path, b"" if method == "POST" else None,
                                    CTYPES.get(path, "application/json")
                                    if method == "POST" else None)
            if need is None or who == "admin" or who == need:
                ok = st not in (401, 403, 429)
            elif who in ("ingest", "read"):
                ok = st == 403
            else:
                ok = st == 401 and "bearer" in h.get("www-authenticate", "").lower()
            if not ok:
                fail("%s %s as %s: HTTP %d %s (needs %s)" % (method, path, who, st,
                                                              body[:200], need))
            if st in (401, 403):
                check(error_of(body), "%s %s as %s: %d without a JSON error"
                      % (method, path, who, st))
            n += 1
    print("ok: the matrix: %d routes x 7 clients answered as their roles say" % len(ROUTES))
    return n


def main():
    data = os.path.join(tmpdir(), "data")
    # The CLI's refusals.
    for args in (["create", "--data", data, "--project", "p"],
                 ["create", "--data", data, "--project", "a b", "--role", "read"],
                 ["create", "--data", data, "--project", "p", "--role", "root"],
                 ["create", "--project", "p", "--role", "read"],
                 ["revoke", "--data", data],
                 ["frobnicate"]):
        p = run([SONDE, "token"] + args)
        check(p.returncode == 2 and p.stderr.strip(), "sonde token %s: exit %d, %r"
              % (" ".join(args), p.returncode, p.stderr))
    toks = {r: token(data, "alpha", r) for r in ("ingest", "read", "admin")}
    beta = {r: token(data, "beta", r) for r in ("ingest", "read")}
    revoked = token(data, "alpha", "admin")
    listed = tokens_list(data)
    check(len(listed) == 6, "token list shows %d tokens: %s" % (len(listed), listed))
    p = run([SONDE, "token", "list"] + store_args(data))
    check(not any(t in p.stdout for t in list(toks.values()) + [revoked]),
          "token list shows a token itself")
    rid = [i for i, r in listed.items() if r[2] == "admin"][-1]
    p = run([SONDE, "token", "revoke"] + store_args(data) + [rid])
    check(p.returncode == 0, "revoke failed: %s" % p.stderr)
    check(tokens_list(data)[rid][-1] != "-", "the revoked token is not shown revoked")
    p = run([SONDE, "token", "revoke"] + store_args(data) + ["0123456789ab"])
    check(p.returncode == 1 and "no token" in p.stderr, "revoke of no token: %s" % p.stderr)

    srv = Server(data, (["--auth"] + (STORE.split() if STORE else [])))
    try:
        check(any("tokens required" in line for line in srv.lines),
              "the server doesn't say tokens are required: %s" % srv.lines)
        matrix(srv, toks, revoked)

        # Pyroscope clients' Basic auth: the token as the password.
        basic = "Basic " + base64.b64encode(("pyroscope:" + toks["read"]).encode()).decode()
        st, _, _ = Client(srv, basic).request("GET", "/api/v1/labels")
        check(st == 200, "Basic auth with the token as password: %d" % st)

        # Two projects, one service name.
        ingest_all(Client(srv, bearer(toks["ingest"])), "alpha_fn", 7)
        ingest_all(Client(srv, bearer(beta["ingest"])), "beta_fn", 5)
        check_own(Client(srv, bearer(toks["read"])), "alpha_fn", "beta_fn", 7)
        check_own(Client(srv, bearer(beta["read"])), "beta_fn", "alpha_fn", 5)
        # The Trace Server Protocol's experiments are a project's own.
        a, b = Client(srv, bearer(toks["read"])), Client(srv, bearer(beta["read"]))
        uuids = [t["UUID"] for t in a.json("/tsp/api/traces")]
        st, _, body = a.request("POST", "/tsp/api/experiments", json.dumps(
            {"parameters": {"name": "alpha-exp", "traces": uuids}}).encode(),
            "application/json")
        check(st == 200, "alpha's experiment: %d %s" % (st, body[:200]))
        check([e["name"] for e in a.json("/tsp/api/experiments")] == ["alpha-exp"],
              "alpha doesn't list its experiment")
        check(b.json("/tsp/api/experiments") == [], "beta lists alpha's experiment: %s"
              % b.json("/tsp/api/experiments"))
        print("ok: two projects with one service name read exactly their own data, and "
              "their own TSP experiments")

        # A token made now works at once; a revoked one stops within 2 s.
        late = token(data, "beta", "read")
        st, _, body = Client(srv, bearer(late)).request("GET", "/api/v1/labels")
        check(st == 200, "a token created while the server runs: %d %s" % (st, body[:200]))
        lid = [i for i, r in tokens_list(data).items() if r[1] == "beta" and r[2] == "read"][-1]
        run([SONDE, "token", "revoke"] + store_args(data) + [lid])
        t0 = time.time()
        wait_until(lambda: Client(srv, bearer(late)).request("GET", "/api/v1/labels")[0] == 401,
                   10, "the revoked token to be refused")
        print("ok: a new token worked at once; its revocation took effect in %.1f s"
              % (time.time() - t0))

        # 20 failures from 127.0.0.2: refused there unless the token is
        # valid (the callers of a coordinator share its address: finding
        # 5 of issue 22); 127.0.0.1 still answered.
        bad = Client(srv, bearer("sonde_" + "y" * 43), "127.0.0.2")
        codes = [bad.request("GET", "/api/v1/labels")[0] for _ in range(20)]
        check(codes == [401] * 20, "the failures: %s" % codes)
        for auth in (bearer("sonde_" + "x" * 43), None):
            st, h, _ = Client(srv, auth, "127.0.0.2").request("GET", "/api/v1/labels")
            check(st == 429 and h.get("retry-after"), "after 20 failures, %s: %d %s"
                  % (auth and "another bad token" or "no token", st, h))
        st, h, _ = Client(srv, bearer(toks["read"]), "127.0.0.2").request("GET",
                                                                         "/api/v1/labels")
        check(st == 200, "a valid token from 127.0.0.2 after its 20 failures: %d %s" % (st, h))
        st, _, _ = Client(srv, bearer(toks["read"])).request("GET", "/api/v1/labels")
        check(st == 200, "another address, while 127.0.0.2 is refused: %d" % st)
        metrics = Client(srv, bearer(toks["read"])).request("GET", "/metrics")[2].decode()
        counts = {}
        for line in metrics.splitlines():
            if line.startswith("sonde_server_auth_checks_total{"):
                counts[line.split('"')[1]] = float(line.split()[-1])
        for res in ("ok", "missing", "unknown", "revoked", "forbidden", "rate_limited"):
            check(counts.get(res, 0) > 0, "no %s check counted: %s" % (res, counts))
        print("ok: 20 failures from one address refused its bad tokens (429), valid "
              "tokens and others answered; "
              "checks counted by result: %s" % counts)
    finally:
        srv.stop()


if __name__ == "__main__":
    main()
