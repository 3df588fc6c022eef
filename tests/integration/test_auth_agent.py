#!/usr/bin/env python3
"""test_auth_agent.py: the clients of `sonde server --auth` -- an agent and
the coordinator.

- `sonde agent --server URL --token T` (and SONDE_TOKEN, which keeps the
  token out of the process list): a workload's CPU windows land in T's
  project and only there -- the other project sees none; an agent without
  a token, or with a revoked one, has its windows refused (401), counted
  as rejected and logged. `--token` without `--server` is a usage error.
- `sonde coordinator` over two `--auth` servers forwards the caller's
  token: with project alpha's read token it merges alpha's data of both
  servers (and nothing of beta's); without a token every server refuses it
  and the answer is a 401 listing theirs; its Trace Server Protocol
  keeps each token's experiments apart.
"""
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from agent_test import Agent, value, wait_for  # noqa: E402
from server_test import Coordinator, Server, error_of  # noqa: E402
from sonde_test import SONDE, WL, check, fail, need_bpf, run, tmpdir  # noqa: E402
import test_auth  # noqa: E402


def ingest(srv, tok, name, stacks, t):
    text = "".join("%s %d\n" % kv for kv in stacks.items()).encode()
    st, _, body = test_auth.Client(srv, test_auth.bearer(tok)).request(
        "POST", "/ingest", text, "text/plain", name=name, format="folded",
        **{"from": t - 10, "until": t})
    test_auth.check(st == 200, "ingest: %d %s" % (st, body[:200]))


def coordinator_part():
    d1, d2 = os.path.join(tmpdir(), "a"), os.path.join(tmpdir(), "b")
    # The same tokens on both servers: one token store copied.
    alpha = test_auth.token(d1, "alpha", "admin")
    beta = test_auth.token(d1, "beta", "admin")
    os.makedirs(d2)
    subprocess.run(["cp", os.path.join(d1, "tokens.db"), d2], check=True)
    servers = [Server(d, ["--auth"]) for d in (d1, d2)]
    co = None
    try:
        now = int(time.time())
        ingest(servers[0], alpha, "web", {"main;a_one": 3}, now - 30)
        ingest(servers[1], alpha, "web", {"main;a_two": 4}, now - 30)
        ingest(servers[1], beta, "web", {"main;b_fn": 50}, now - 30)
        co = Coordinator(sum((["--server", "http://127.0.0.1:%d" % s.port] for s in servers), []))
        rng = {"from": (now - 600) * 1000, "until": now * 1000}
        top = test_auth.Client(co, test_auth.bearer(alpha)).json(
            "/api/v1/top", query='{service_name="web"}', **rng)
        names = {f["name"] for f in top["functions"]}
        test_auth.check(top["total"] == 7 and {"a_one", "a_two"} <= names and "b_fn" not in names,
                        "the coordinator with alpha's token: total %s, %s" % (top["total"], names))
        st, _, body = test_auth.Client(co, None).request("GET", "/api/v1/top",
                                                         query='{service_name="web"}', **rng)
        test_auth.check(st == 401 and "401" in body.decode(),
                        "the coordinator without a token: %d %s" % (st, body[:300]))
        a, b = test_auth.Client(co, test_auth.bearer(alpha)), test_auth.Client(
            co, test_auth.bearer(beta))
        uuids = [t["UUID"] for t in a.json("/tsp/api/traces")]
        st, _, body = a.request("POST", "/tsp/api/experiments", json.dumps(
            {"parameters": {"name": "alpha-exp", "traces": uuids}}).encode(), "application/json")
        test_auth.check(st == 200, "alpha's experiment on the coordinator: %d %s" % (st, body))
        test_auth.check(b.json("/tsp/api/experiments") == [],
                        "beta sees alpha's experiment on the coordinator")
        print("ok: the coordinator forwards the caller's token: alpha's data of both servers "
              "merged, nothing of beta's; no token: 401 listing the servers' 401; TSP "
              "experiments kept per token")
    finally:
        if co:
            co.kill()
        for s in servers:
            s.stop()


def agent_part():
    data = os.path.join(tmpdir(), "data")
    ingest_tok = test_auth.token(data, "alpha", "ingest")
    read_tok = test_auth.token(data, "alpha", "read")
    beta_read = test_auth.token(data, "beta", "read")
    revoked = test_auth.token(data, "alpha", "ingest")
    rid = [i for i, r in test_auth.tokens_list(data).items() if r[2] == "ingest"][-1]
    run([SONDE, "token", "revoke", "--data", data, rid])
    p = run([SONDE, "agent", "--token", ingest_tok, "--no-gpu", "-d", "1"])
    check(p.returncode == 2 and "--server" in p.stderr, "--token without --server is refused")
    srv = Server(data, ["--auth"])
    url = "http://127.0.0.1:%d" % srv.port
    agents = []
    try:
        t0 = int(time.time() * 1000)
        good = Agent(["--no-gpu", "-F", "99", "--window", "1", "--node", "auth-node",
                      "--server", url], env=dict(os.environ, SONDE_TOKEN=ingest_tok))
        agents.append(good)
        none = Agent(["--no-gpu", "-F", "49", "--window", "1", "--server", url])
        agents.append(none)
        bad = Agent(["--no-gpu", "-F", "49", "--window", "1", "--server", url,
                     "--token", revoked])
        agents.append(bad)
        w = subprocess.run([os.path.join(WL, "shares"), "2"], timeout=60)
        check(w.returncode == 0, "a workload ran")
        q = '{service_name="shares",type="cpu",node="auth-node"}'
        top = wait_until_total(srv, read_tok, q, t0)
        check(top >= 150, "the agent's windows are in alpha's project (%d samples)" % top)
        other = test_auth.Client(srv, test_auth.bearer(beta_read)).json(
            "/api/v1/top", query='{service_name="shares"}', **{"from": t0 - 2000, "until": "now"})
        check(other["total"] == 0, "beta sees none of them (%d)" % other["total"])
        for ag, what in ((none, "no token"), (bad, "a revoked token")):
            m = wait_for(lambda: (lambda m: m if value(m, "sonde_agent_ship_dropped_total",
                                                      reason="rejected") else None)(ag.metrics()),
                         20, "the windows of the agent with %s to be refused" % what)
            check(value(m, "sonde_agent_ship_dropped_total", reason="rejected") >= 1 and
                  any("401" in line or "token" in line for line in ag.log),
                  "the agent with %s: its windows refused (401), counted as rejected and logged"
                  % what)
    finally:
        for ag in agents:
            ag.stop()
        srv.stop()


def wait_until_total(srv, tok, q, t0):
    end = time.time() + 30
    total = 0
    while time.time() < end:
        total = test_auth.Client(srv, test_auth.bearer(tok)).json(
            "/api/v1/top", query=q, **{"from": t0 - 2000, "until": "now"})["total"]
        if total >= 150:
            break
        time.sleep(0.2)
    return total


coordinator_part()
need_bpf()
agent_part()
