#!/usr/bin/env python3
"""The web UI served by `sonde coordinator` in a real browser (Debian's
Chromium through playwright-core, tests/ui/coordinator.mjs): with one of
its two servers down the profile view draws the other's data under a
banner naming the missing server; with both up the banner is gone."""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from sonde_test import SONDE, check, free_port, tmpdir  # noqa: E402
from server_test import Coordinator, Server  # noqa: E402
from ui_test import artifacts, need_browser, run_script  # noqa: E402

SHARES = {"main;run;hot_a": 60, "main;run;hot_b": 30, "main;run;hot_c": 10}
WS, WINDOWS = 10, 12

need_browser()

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
    truth = {"service": "shares", "total": WINDOWS * 100, "start_ms": base * 1000,
             "end_ms": (base + WINDOWS * WS) * 1000}
    art, truth_path = artifacts("ui-coordinator", truth)
    env = dict(os.environ, SONDE_URL="http://127.0.0.1:%d/" % co.port,
               SONDE_UI_TRUTH=truth_path, SONDE_UI_ARTIFACTS=art,
               SONDE_BIN=SONDE, SONDE_DEAD_PORT=str(dead_port), SONDE_DEAD_DATA=tmpdir())
    rc = run_script("coordinator.mjs", env, 180)
    check(rc == 0, "the coordinator's UI shows and clears the partial banner (artifacts: %s)"
          % art)
finally:
    for p in procs:
        p.kill()
