"""alerts_helpers.py: what the alert engine's integration tests share (stdlib
only): the harness (tests/alerts/harness.c) run in real time, an HTTP receiver
on 127.0.0.1 that records every POST, and a real Alertmanager on loopback.

Used by tests/integration/test_alerts*.py."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "integration"))
from sonde_test import B, ROOT, check, fail, free_port, skip  # noqa: E402,F401

HARNESS = os.path.join(B, "alerts", "harness")


def ensure_harness():
    """Builds the harness if `make test` hasn't yet."""
    if not os.path.exists(HARNESS):
        p = subprocess.run(["make", "-s", "-C", ROOT, "B=" + os.path.relpath(B, ROOT),
                            os.path.relpath(HARNESS, ROOT)],
                           capture_output=True, text=True, timeout=600)
        if p.returncode:
            fail("can't build the alerts harness:\n" + p.stdout + p.stderr)
    return HARNESS


class Receiver:
    """An HTTP server on 127.0.0.1 recording POSTs as (time, path, json).
    Paths in `hang` are answered only after hang_s seconds."""

    def __init__(self, hang=(), hang_s=30):
        self.posts = []
        self.lock = threading.Lock()
        rec = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n)
                try:
                    doc = json.loads(body)
                except ValueError:
                    doc = {"unparsable": body.decode("utf-8", "replace")}
                with rec.lock:
                    rec.posts.append((time.time(), self.path, doc,
                                      self.headers.get("Content-Type")))
                if self.path in hang:
                    time.sleep(hang_s)
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *a):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = "http://127.0.0.1:%d" % self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def at(self, path):
        with self.lock:
            return [(t, d) for t, p, d, _ in self.posts if p == path]

    def content_types(self, path):
        with self.lock:
            return [c for _, p, _, c in self.posts if p == path]

    def close(self):
        self.server.shutdown()
        self.server.server_close()


class Alertmanager:
    """The real Alertmanager (Debian's prometheus-alertmanager) on loopback,
    with one webhook receiver, clustering off."""

    def __init__(self, webhook_url, group_by=("alertname", "rank", "comm")):
        binary = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")
        if not binary:
            skip("prometheus-alertmanager is not installed (apt-get install "
                 "prometheus-alertmanager)")
        self.dir = tempfile.mkdtemp(prefix="sonde-am-")
        self.port = free_port()
        self.url = "http://127.0.0.1:%d" % self.port
        cfg = os.path.join(self.dir, "alertmanager.yml")
        with open(cfg, "w") as f:
            f.write("route:\n"
                    "  receiver: test\n"
                    "  group_by: [%s]\n"
                    "  group_wait: 1s\n"
                    "  group_interval: 1s\n"
                    "  repeat_interval: 1h\n"
                    "receivers:\n"
                    "  - name: test\n"
                    "    webhook_configs:\n"
                    "      - url: %s\n"
                    "        send_resolved: true\n" % (", ".join(group_by), webhook_url))
        self.log = open(os.path.join(self.dir, "alertmanager.log"), "w+")
        args = [binary, "--config.file=" + cfg,
                "--storage.path=" + os.path.join(self.dir, "data"),
                "--web.listen-address=127.0.0.1:%d" % self.port,
                "--cluster.listen-address="]
        print("$ " + " ".join(args))
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 30
        while time.time() < deadline:
            if self.proc.poll() is not None:
                fail("Alertmanager exited at start:\n" + self.log_text())
            try:
                with urllib.request.urlopen(self.url + "/-/ready", timeout=1) as r:
                    if r.status == 200:
                        print("Alertmanager ready on " + self.url)
                        return
            except OSError:
                pass
            time.sleep(0.1)
        self.stop()
        fail("Alertmanager not ready after 30 s:\n" + self.log_text())

    def alerts(self):
        with urllib.request.urlopen(self.url + "/api/v2/alerts", timeout=2) as r:
            return json.load(r)

    def log_text(self):
        self.log.flush()
        self.log.seek(0)
        return self.log.read()[-4000:]

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


class Harness:
    """Runs the harness on a script; collects its JSON lines as they come,
    each with the time it arrived."""

    def __init__(self, args, script):
        ensure_harness()
        fd, self.script = tempfile.mkstemp(prefix="sonde-alerts-", suffix=".txt")
        with os.fdopen(fd, "w") as f:
            f.write(script)
        self.args = [HARNESS] + args + [self.script]
        print("$ " + " ".join(self.args))
        self.proc = subprocess.Popen(self.args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True)
        self.events = []
        self.stderr = ""
        self.started = threading.Event()
        self.t_out = threading.Thread(target=self._read, daemon=True)
        self.t_err = threading.Thread(target=self._read_err, daemon=True)
        self.t_out.start()
        self.t_err.start()
        if not self.started.wait(10):
            fail("the harness didn't start:\n" + self.stderr)
        self.start_epoch = self.events[0][1]["epoch_ms"] / 1000.0

    def _read(self):
        for line in self.proc.stdout:
            ev = json.loads(line)
            self.events.append((time.time(), ev))
            if ev.get("event") == "start":
                self.started.set()

    def _read_err(self):
        for line in self.proc.stderr:
            self.stderr += line

    def of(self, kind):
        return [e for _, e in self.events if e.get("event") == kind]

    def wait(self, timeout):
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            fail("the harness didn't finish within %d s" % timeout)
        self.t_out.join(5)
        self.t_err.join(5)
        os.unlink(self.script)
        print("harness stderr:\n" + self.stderr[-3000:])
        if self.proc.returncode:
            fail("the harness exited %d" % self.proc.returncode)
        end = self.of("end")
        if not end:
            fail("the harness printed no end line")
        return end[0]

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
