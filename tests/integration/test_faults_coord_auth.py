#!/usr/bin/env python3
"""test_faults_coord_auth.py: a hostile client of `sonde coordinator` over
`sonde server --auth` (issue 22, security probe findings 5 and 6). Two
servers share one token store; a coordinator asks both.

Finding 5 -- through the coordinator, anyone locked everyone out: 20
requests with no token or a bad one made each server's limiter of failed
attempts (keyed on the peer address: the coordinator's, shared by all its
callers) answer 429 to every caller for 30 s, and the coordinator said 502.
Now:
  - directly, from one address: after 20 failures a bad token gets 429
    with Retry-After, and a valid token from the same address still 200;
  - through the coordinator: 40 junk requests (no token, bad tokens)
    answer 401 and then 429 with Retry-After (every server's 429 passed
    on, not 502), and alpha's valid token is answered 200 with its data
    after each burst of junk.
Finding 6 -- the coordinator's Trace Server Protocol kept a state for
every Authorization value it saw: 256 `Bearer junkN` requests to
/tsp/api/health left every real token 507 until a restart, and /tsp/api
without a token answered 502. Now:
  - 300 junk tokens on /tsp/api/health: none answered 200 (401 or 429),
    and the coordinator's count of token states stays 0;
  - alpha's token then opens its traces (200), and 270 real tokens of
    their own (past the 256 states kept) are each answered 200 on
    /tsp/api/health: the least recently used state is dropped, and
    counted;
  - without a token, /tsp/api/traces is 401 with WWW-Authenticate;
  - an experiment of alpha's is not seen by beta.
"""
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from server_test import Coordinator, Server  # noqa: E402
from sonde_test import SONDE, check, fail, run, tmpdir  # noqa: E402
import test_auth  # noqa: E402

Client, bearer = test_auth.Client, test_auth.bearer


def metric(co, name):
    st, _, body = co.request("GET", "/metrics")
    if st != 200:
        fail("coordinator /metrics: %d" % st)
    for line in body.decode().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    fail("no %s in the coordinator's /metrics" % name)


def make_tokens(data, project, n):
    """n read tokens of project (one `sonde token create` each)."""
    out = []
    for _ in range(n):
        p = subprocess.run([SONDE, "token", "create", "--data", data, "--project", project,
                            "--role", "read"], capture_output=True, text=True, timeout=30)
        if p.returncode != 0:
            fail("token create: %s" % p.stderr)
        out.append(p.stdout.strip())
    return out


def main():
    d1, d2 = os.path.join(tmpdir(), "a"), os.path.join(tmpdir(), "b")
    alpha = test_auth.token(d1, "alpha", "admin")
    beta = test_auth.token(d1, "beta", "admin")
    many = make_tokens(d1, "gamma", 270)
    os.makedirs(d2)
    subprocess.run(["cp", os.path.join(d1, "tokens.db"), d2], check=True)
    servers = [Server(d, ["--auth"]) for d in (d1, d2)]
    co = None
    try:
        now = int(time.time())
        for i, s in enumerate(servers):
            st, _, body = Client(s, bearer(alpha)).request(
                "POST", "/ingest", b"main;alpha_fn %d\n" % (3 + i), "text/plain", name="web",
                format="folded", **{"from": now - 40, "until": now - 30})
            check(st == 200, "alpha's ingest on server %d: %d %s" % (i, st, body[:200]))
        rng = {"from": (now - 600) * 1000, "until": now * 1000}

        # ---- finding 5, directly: a valid token passes a blocked address.
        s0 = servers[0]
        bad = Client(s0, bearer("sonde_" + "z" * 43), "127.0.0.3")
        codes = [bad.request("GET", "/api/v1/labels")[0] for _ in range(20)]
        check(codes == [401] * 20, "20 bad tokens from 127.0.0.3 answered 401: %s" % codes)
        st, h, _ = bad.request("GET", "/api/v1/labels")
        check(st == 429 and h.get("retry-after"),
              "the 21st bad token from 127.0.0.3: 429 with Retry-After (%d %s)" % (st, h))
        st, _, body = Client(s0, bearer(alpha), "127.0.0.3").request(
            "GET", "/api/v1/top", query='{service_name="web"}', **rng)
        check(st == 200 and json.loads(body)["total"] == 3,
              "alpha's valid token from the blocked 127.0.0.3: 200 with its data (%d %s)"
              % (st, body[:200]))

        co = Coordinator(sum((["--server", "http://127.0.0.1:%d" % s.port]
                              for s in servers), []))
        # Without a token (before any failure from the coordinator's
        # address): 401, also from its Trace Server Protocol.
        st, h, body = Client(co, None).request("GET", "/tsp/api/traces")
        check(st == 401 and "www-authenticate" in h,
              "/tsp/api/traces without a token: 401 with WWW-Authenticate (%d %s %s)"
              % (st, h, body[:200]))
        # ---- finding 6: junk tokens take no Trace Server Protocol state.
        t0 = time.monotonic()
        codes = {}
        for k in range(300):
            st, _, _ = Client(co, bearer("junk%d" % k)).request("GET", "/tsp/api/health")
            codes[st] = codes.get(st, 0) + 1
        check(set(codes) <= {401, 429} and 401 in codes,
              "300 junk tokens on /tsp/api/health: none answered 200 -- 401, then 429 once "
              "the servers refuse the coordinator's address (%s, %.1f s)"
              % (codes, time.monotonic() - t0))
        check(metric(co, "sonde_coordinator_tsp_token_states") == 0,
              "no Trace Server Protocol state kept for a junk token")
        # ---- finding 5, through the coordinator (after finding 6's junk,
        # the servers refuse its address at once).
        for burst in range(2):
            junk = [Client(co, None if k % 2 else bearer("junk%d-%d" % (burst, k)))
                    for k in range(40)]
            answers = [c.request("GET", "/api/v1/labels", **rng) for c in junk]
            codes = [a[0] for a in answers]
            check(set(codes) <= {401, 429},
                  "burst %d: the junk requests answered 401 or 429, never 502: %s"
                  % (burst, codes))
            check(codes[-1] == 429 and answers[-1][1].get("retry-after", "").isdigit(),
                  "burst %d: once the servers refuse the coordinator's address, 429 with "
                  "their Retry-After is passed on (%d %s)"
                  % (burst, codes[-1], answers[-1][1]))
            st, _, body = Client(co, bearer(alpha)).request(
                "GET", "/api/v1/top", query='{service_name="web"}', **rng)
            check(st == 200 and json.loads(body)["total"] == 7,
                  "burst %d: alpha's valid token through the coordinator right after the "
                  "junk: 200, total 7 of both servers (%d %s)" % (burst, st, body[:300]))

        traces = Client(co, bearer(alpha)).json("/tsp/api/traces")
        check(any("web" in json.dumps(t) for t in traces),
              "alpha's traces after all the junk: 200 (%s)" % traces)
        a, b = Client(co, bearer(alpha)), Client(co, bearer(beta))
        uuids = [t["UUID"] for t in traces]
        st, _, body = a.request("POST", "/tsp/api/experiments", json.dumps(
            {"parameters": {"name": "alpha-exp", "traces": uuids}}).encode(), "application/json")
        check(st == 200, "alpha's experiment: %d %s" % (st, body[:200]))
        check(b.json("/tsp/api/experiments") == [], "beta doesn't see alpha's experiment")

        # 270 real tokens: the states are recycled, none refused.
        codes = {}
        for tok in many:
            st, _, _ = Client(co, bearer(tok)).request("GET", "/tsp/api/health")
            codes[st] = codes.get(st, 0) + 1
        check(codes == {200: len(many)},
              "%d real tokens, past the 256 states kept: each answered 200 (%s)"
              % (len(many), codes))
        states = metric(co, "sonde_coordinator_tsp_token_states")
        dropped = metric(co, "sonde_coordinator_tsp_token_states_dropped_total")
        check(states == 256 and dropped >= len(many) + 2 - 256,
              "256 states kept, the least recently used dropped (%d kept, %d dropped)"
              % (states, dropped))
        print("ok: findings 5 and 6 hold")
    finally:
        if co:
            co.kill()
        for s in servers:
            s.stop()


if __name__ == "__main__":
    main()
