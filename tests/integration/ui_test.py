"""ui_test.py: what the tests that drive the web UI in a real browser share
(test_ui.py, test_coordinator_ui.py, test_ui_auth.py): the check that
node, Debian's Chromium and tests/ui's npm packages are there (a skip
saying what is missing otherwise), a fresh artifacts directory with the
truth file the scripts read, and the run of one script of tests/ui in its
own process group, killed with its Chromium past its time."""
import json
import os
import shutil
import signal
import subprocess

from sonde_test import B, ROOT, fail, skip

UI_TESTS = os.path.join(ROOT, "tests", "ui")
CHROMIUM = os.environ.get("SONDE_CHROMIUM", "/usr/bin/chromium")


def need_browser():
    """Skips unless node, Chromium and tests/ui/node_modules are there."""
    if not shutil.which("node"):
        skip("node is not installed -- run scripts/setup.sh")
    if not os.access(CHROMIUM, os.X_OK):
        skip("%s is missing -- run scripts/setup.sh (Debian's chromium)" % CHROMIUM)
    if not os.path.isdir(os.path.join(UI_TESTS, "node_modules", "playwright-core")):
        skip("tests/ui/node_modules is missing -- run scripts/setup.sh (npm ci in tests/ui)")


def artifacts(name, truth):
    """A fresh build/test-artifacts/NAME holding truth.json: (dir, path)."""
    art = os.path.join(B, "test-artifacts", name)
    shutil.rmtree(art, ignore_errors=True)
    os.makedirs(art)
    path = os.path.join(art, "truth.json")
    with open(path, "w") as f:
        json.dump(truth, f, indent=1)
    return art, path


def run_script(script, env, timeout):
    """Runs node tests/ui/SCRIPT with env; its exit code. Fails past
    timeout seconds, its Chromium killed with it."""
    print("$ node tests/ui/" + script)
    node = subprocess.Popen(["node", script], cwd=UI_TESTS, env=env, start_new_session=True)
    try:
        return node.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(node.pid, signal.SIGKILL)
        node.wait()
        fail("the browser tests took more than %d s" % timeout)
