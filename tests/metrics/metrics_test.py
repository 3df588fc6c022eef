"""metrics_test.py: helpers of the tests/integration/test_metrics_* tests
(stdlib only): start `sonde agent --simulate` (SimAgent) or the metrics
harness (build/metrics/harness, see tests/metrics/harness.c: the agent's
metrics and servers fed with events scripted on stdin, for exact values) on
loopback with ephemeral ports, fetch over HTTP, run node WebSocket
clients."""
import http.client
import os
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
from sonde_test import B, ROOT, SONDE, check, fail, free_port, skip  # noqa: E402,F401

HARNESS = os.path.join(B, "metrics", "harness")
NODE_PATH = "/usr/share/nodejs"


def build_harness():
    """Builds the harness if needed (quick when up to date)."""
    p = subprocess.run(["make", "-s", "-C", ROOT, "B=" + os.path.relpath(B, ROOT),
                        os.path.relpath(HARNESS, ROOT)],
                       capture_output=True, text=True, timeout=300)
    if p.returncode != 0 or not os.access(HARNESS, os.X_OK):
        print(p.stdout[-2000:], p.stderr[-2000:])
        fail("can't build %s" % HARNESS)


class Harness:
    """The harness as a child: .http and .ws ports, .send(lines), .stop()."""

    def __init__(self, *args):
        build_harness()
        cmd = [HARNESS] + list(args)
        print("$ " + " ".join(cmd))
        self.p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  text=True, bufsize=1)
        ports = {}
        deadline = time.time() + 10
        while len(ports) < 2 and time.time() < deadline:
            line = self.p.stdout.readline()
            if not line:
                break
            k, v = line.split()
            ports[k] = int(v)
        if len(ports) < 2:
            self.stop()
            fail("the harness didn't say where it listens")
        self.http, self.ws = ports["http"], ports["ws"]

    def send(self, *lines):
        """Runs stdin commands and waits until they are applied."""
        self.p.stdin.write("\n".join(lines) + "\nsync\n")
        self.p.stdin.flush()
        if self.p.stdout.readline().strip() != "ok":
            fail("the harness didn't apply: %r" % (lines,))

    def stop(self):
        if self.p.poll() is None:
            self.p.terminate()
            try:
                self.p.wait(10)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
                fail("the harness didn't stop on SIGTERM within 10 s")
        return self.p.returncode

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


class SimAgent(Harness):
    """`sonde agent --simulate` as a child, on free loopback ports: .http and
    .ws ports, .stop(); the same interface as Harness but for send()."""

    def __init__(self, *args):
        import re
        cmd = [SONDE, "agent", "--simulate", "--metrics", "127.0.0.1:0", "--ws",
               "127.0.0.1:0"] + list(args)
        print("$ " + " ".join(cmd))
        self.p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE, text=True)
        line = self.p.stderr.readline()
        m = re.search(r"http://[^:]+:(\d+)/metrics, stream on ws://[^:]+:(\d+)", line)
        if not m:
            self.stop()
            fail("sonde agent --simulate didn't say where it listens: %r" % line)
        self.http, self.ws = int(m.group(1)), int(m.group(2))

    def send(self, *lines):
        fail("sonde agent --simulate takes no scripted events")


def get(port, path, method="GET"):
    """(status, headers dict with lower-case names, body bytes)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request(method, path)
    r = c.getresponse()
    body = r.read()
    c.close()
    return r.status, {k.lower(): v for k, v in r.getheaders()}, body


def need(cmd, why):
    if not shutil.which(cmd):
        skip("%s is not installed (%s)" % (cmd, why))


def need_node_ws():
    need("node", "Debian nodejs, for a standard WebSocket client")
    if not os.path.exists(os.path.join(NODE_PATH, "ws")):
        skip("node's ws module is missing (Debian node-ws)")


def node(script, timeout=60):
    """Runs a node script with the ws module reachable; CompletedProcess."""
    env = dict(os.environ, NODE_PATH=NODE_PATH)
    return subprocess.run(["node", "-e", script], capture_output=True, text=True,
                          timeout=timeout, env=env)
