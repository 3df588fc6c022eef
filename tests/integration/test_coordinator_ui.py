#!/usr/bin/env python3
"""The web UI served by `sonde coordinator` in a real browser (Debian's
Chromium through playwright-core, tests/ui/coordinator.mjs): with one of
its two servers down the profile view draws the other's data under a
banner naming the missing server; with both up the banner is gone."""
import json
import os
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from sonde_test import B, ROOT, SONDE, check, fail, free_port, skip, tmpdir  # noqa: E402
from server_test import Coordinator, Server  # noqa: E402


UI_TESTS = os.path.join(ROOT, "tests", "ui")
CHROMIUM = os.environ.get("SONDE_CHROMIUM", "/usr/bin/chromium")
SHARES = {"main;run;hot_a": 60, "main;run;hot_b": 30, "main;run;hot_c": 10}
WS, WINDOWS = 10, 12

if not shutil.which("node"):
    skip("node is not installed -- run scripts/setup.sh")
if not os.access(CHROMIUM, os.X_OK):
    skip("%s is missing -- run scripts/setup.sh (Debian's chromium)" % CHROMIUM)
if not os.path.isdir(os.path.join(UI_TESTS, "node_modules", "playwright-core")):
    skip("tests/ui/node_modules is missing -- run scripts/setup.sh (npm ci in tests/ui)")

procs = []
try:
    live = Server(tmpdir())
    procs.append(live)
    base = int(time.time()) // WS * WS - WINDOWS * WS
    for w in range(WINDOWS):
        live.ingest_folded("shares.cpu{comm=shares}", base + w * WS, base + (w + 1) * WS, SHARES)
    dead_port = free_port()
    co = Coordinator(["--server", "http://127.0.0.1:%d" % live.port,
                      "--server", "http://127.0.0.1:%d" % dead_port, "--timeout", "3s"])
    procs.append(co)
    art = os.path.join(B, "test-artifacts", "ui-coordinator")
    shutil.rmtree(art, ignore_errors=True)
    os.makedirs(art)
    truth = {"service": "shares", "total": WINDOWS * 100, "start_ms": base * 1000,
             "end_ms": (base + WINDOWS * WS) * 1000}
    with open(os.path.join(art, "truth.json"), "w") as f:
        json.dump(truth, f)
    env = dict(os.environ, SONDE_URL="http://127.0.0.1:%d/" % co.port,
               SONDE_UI_TRUTH=os.path.join(art, "truth.json"), SONDE_UI_ARTIFACTS=art,
               SONDE_BIN=SONDE, SONDE_DEAD_PORT=str(dead_port), SONDE_DEAD_DATA=tmpdir())
    print("$ node tests/ui/coordinator.mjs")
    node = subprocess.Popen(["node", "coordinator.mjs"], cwd=UI_TESTS, env=env,
                            start_new_session=True)
    try:
        rc = node.wait(timeout=180)
    except subprocess.TimeoutExpired:
        os.killpg(node.pid, signal.SIGKILL)
        node.wait()
        fail("the browser tests took more than 180 s")
    check(rc == 0, "the coordinator's UI shows and clears the partial banner (artifacts: %s)"
          % art)
finally:
    for p in procs:
        p.kill()
