#!/usr/bin/env python3
"""The web UI of `sonde server --auth` in a real browser (Debian's Chromium
through playwright-core, tests/ui/auth.mjs): the token dialog, a read token
kept for the session drawing its project alone, a download that sends the
token, and a refused token. Two projects ingest the same service name with
different functions."""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from sonde_test import SONDE, check, fail, run, tmpdir  # noqa: E402
from server_test import Server  # noqa: E402
from ui_test import artifacts, need_browser, run_script  # noqa: E402

SHARES = {"main;run;hot_a": 60, "main;run;hot_b": 30, "main;run;hot_c": 10}
OTHER = {"main;run;beta_only": 500}
WS, WINDOWS = 10, 6

need_browser()


def token(data, project, role):
    p = run([SONDE, "token", "create", "--data", data, "--project", project, "--role", role])
    if p.returncode:
        fail("token create: %s" % p.stderr)
    return p.stdout.strip()


data = tmpdir()
toks = {"alpha_read": token(data, "alpha", "read"), "alpha_in": token(data, "alpha", "ingest"),
        "beta_in": token(data, "beta", "ingest")}
srv = Server(data, ["--auth"])
try:
    base = int(time.time()) // WS * WS - WINDOWS * WS
    for tok, stacks in ((toks["alpha_in"], SHARES), (toks["beta_in"], OTHER)):
        for w in range(WINDOWS):
            text = "".join("%s %d\n" % kv for kv in stacks.items()).encode()
            st, _, body = srv.request(
                "POST", "/ingest?name=shares.cpu%%7Bcomm%%3Dshares%%7D&from=%d&until=%d"
                "&format=folded" % (base + w * WS, base + (w + 1) * WS), body=text,
                headers={"Content-Type": "text/plain", "Authorization": "Bearer " + tok})
            if st != 200:
                fail("ingest: %d %s" % (st, body[:200]))
    truth = {"service": "shares", "total": WINDOWS * 100, "start_ms": base * 1000,
             "end_ms": (base + WINDOWS * WS) * 1000}
    art, truth_path = artifacts("ui-auth", truth)
    env = dict(os.environ, SONDE_URL="http://127.0.0.1:%d/" % srv.port,
               SONDE_UI_TRUTH=truth_path, SONDE_UI_ARTIFACTS=art,
               SONDE_TOKEN_READ=toks["alpha_read"], SONDE_OTHER_FN="beta_only")
    rc = run_script("auth.mjs", env, 180)
    check(rc == 0, "the UI asks for a token, keeps it for the session and shows its project "
          "alone (artifacts: %s)" % art)
finally:
    srv.stop()
