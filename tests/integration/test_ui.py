#!/usr/bin/env python3
"""test_ui.py: the web UI in a real browser. Starts `sonde server` on
127.0.0.1 (a port it picks) with a fresh --data directory, loads known
profiles, GPU points and alerts through the ingest API (tests/ui/testdata.py),
then runs the Playwright tests (tests/ui/run.mjs, playwright-core driving
Debian's Chromium) against it. First, the unit tests of the flame graph
model and of the verdicts over a range (tests/ui/model.test.mjs,
verdict.test.mjs; node --test). Screenshots, the exported files and the
100 000-node smoothness numbers are kept in $B/test-artifacts/ui/.

Skips (77) when node, Chromium or tests/ui's npm packages are missing (run
scripts/setup.sh), or when `sonde server` is not built."""
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "ui"))
from sonde_test import SONDE, check, fail, skip, tmpdir  # noqa: E402
from ui_test import UI_TESTS, artifacts, need_browser, run_script  # noqa: E402
import testdata  # noqa: E402


def start_server(data):
    """Starts the server; returns (process, base URL, output lines)."""
    lines = []
    cmd = [SONDE, "server", "--listen", "127.0.0.1:0", "--data", data]
    print("$ " + " ".join(cmd))
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         start_new_session=True)
    found = []

    def pump():
        for line in p.stdout:
            lines.append(line.rstrip("\n"))
            m = re.search(r"(?:127\.0\.0\.1|localhost):(\d+)", line)
            if m and m.group(1) != "0" and not found:
                found.append(int(m.group(1)))
    threading.Thread(target=pump, daemon=True).start()
    deadline = time.time() + 20
    while time.time() < deadline and not found and p.poll() is None:
        time.sleep(0.05)
    if not found:
        stop(p)
        out = "\n".join(lines[-10:])
        if "not built yet" in out or p.returncode == 1 and not lines:
            skip("sonde server is not available yet: " + out.strip()[:200])
        fail("the server did not say where it listens:\n" + out)
    base = "http://127.0.0.1:%d/" % found[0]
    for _ in range(200):
        try:
            with urllib.request.urlopen(base + "healthz", timeout=2) as r:
                if r.status == 200:
                    break
        except OSError:
            pass
        if p.poll() is not None:
            fail("the server exited:\n" + "\n".join(lines[-10:]))
        time.sleep(0.1)
    else:
        stop(p)
        fail("the server never answered /healthz")
    return p, base, lines


def stop(p):
    if p.poll() is None:
        os.killpg(p.pid, signal.SIGTERM)
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()


def main():
    if not shutil.which("node"):
        skip("node is not installed -- run scripts/setup.sh")
    print("$ node --test tests/ui/model.test.mjs tests/ui/verdict.test.mjs")
    u = subprocess.run(["node", "--test", "model.test.mjs", "verdict.test.mjs"], cwd=UI_TESTS,
                       capture_output=True, text=True, timeout=120)
    print("\n".join(l for l in u.stdout.splitlines() if l.startswith(("ok", "not ok", "# pass",
                                                                    "# fail", "  error"))))
    check(u.returncode == 0, "the flame graph model's and the verdicts' unit tests pass")
    need_browser()
    if not os.access(SONDE, os.X_OK):
        skip("%s is not built" % SONDE)
    data = tmpdir()
    art = None
    p, base, lines = start_server(data)
    try:
        truth = testdata.ingest(base)
        check(True, "loaded %d samples of 2 services, GPU points and alerts into %s"
              % (truth["total"] + truth["other_total"], base))
        art, truth_path = artifacts("ui", truth)
        env = dict(os.environ, SONDE_URL=base, SONDE_UI_TRUTH=truth_path, SONDE_UI_ARTIFACTS=art)
        rc = run_script("run.mjs", env, 240)
        pprof = os.path.join(art, "export.pb.gz")
        if shutil.which("go") and os.path.exists(pprof):
            g = subprocess.run(["go", "tool", "pprof", "-top", "-nodecount=10", pprof],
                               capture_output=True, text=True, timeout=120,
                               env=dict(os.environ, PPROF_TMPDIR=data, HOME=data))
            print(g.stdout[-1500:], g.stderr[-500:])
            check(g.returncode == 0 and truth["hottest"] in g.stdout,
                  "go tool pprof reads the UI's pprof export and names %s" % truth["hottest"])
        print("artifacts: " + art)
        if rc != 0:
            fail("browser tests failed (screenshots in %s)" % art)
        if p.poll() is not None:
            fail("the server died during the tests")
        check(True, "browser tests passed")
    finally:
        stop(p)
        shutil.rmtree(data, ignore_errors=True)
        if art:
            with open(os.path.join(art, "server.log"), "w") as f:
                f.write("\n".join(lines) + "\n")


main()
