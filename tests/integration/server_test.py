"""server_test.py: helpers of the `sonde server` integration tests
(test_server_*.py), stdlib only: start a real server on 127.0.0.1 (port 0)
with a fresh --data directory and wait for /healthz, HTTP requests that
return the status instead of raising, Pyroscope ingest, and requests sent
as raw bytes for the cases clients libraries won't make (headers without
their body, chunked bodies)."""
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import threading
import time
import urllib.parse

from sonde_test import SONDE, fail, skip


class Server:
    def __init__(self, data, args=(), listen="127.0.0.1:0"):
        self.data = data
        self._launch([SONDE, "server", "--listen", listen, "--data", data] + list(args),
                     "the server")
        for _ in range(300):
            try:
                if self.request("GET", "/healthz")[0] == 200:
                    break
            except OSError:
                pass
            time.sleep(0.05)
        else:
            fail("the server never answered /healthz")

    def _launch(self, cmd, what):
        """Starts cmd and waits (20 s at most) for the line that says where
        it listens: self.p, self.lines (its output), self.port."""
        self.lines = []
        print("$ " + " ".join(cmd))
        self.p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  text=True, start_new_session=True)
        found = []

        def pump():
            for line in self.p.stdout:
                self.lines.append(line.rstrip("\n"))
                m = re.search(r"listening on http://[^ ]*:(\d+)/", line)
                if m and not found:
                    found.append(int(m.group(1)))
        threading.Thread(target=pump, daemon=True).start()
        deadline = time.time() + 20
        while time.time() < deadline and not found and self.p.poll() is None:
            time.sleep(0.02)
        if not found:
            self.kill()
            out = "\n".join(self.lines[-10:])
            if "not built yet" in out:
                skip("sonde is not built yet")
            fail("%s did not say where it listens:\n%s" % (what, out))
        self.port = found[0]

    def request(self, method, path, body=None, headers=None, timeout=60):
        """(status, headers dict lowercased, body bytes)."""
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            c.request(method, path, body=body, headers=headers or {})
            r = c.getresponse()
            data = r.read()
            return r.status, {k.lower(): v for k, v in r.getheaders()}, data
        finally:
            c.close()

    def get(self, path, **params):
        if params:
            path += "?" + urllib.parse.urlencode(params)
        return self.request("GET", path)

    def get_json(self, path, want=200, **params):
        st, h, body = self.get(path, **params)
        if st != want:
            fail("GET %s %s: HTTP %d %s" % (path, params, st, body[:500]))
        return json.loads(body)

    def post(self, path, body, ctype="application/octet-stream", **params):
        if params:
            path += "?" + urllib.parse.urlencode(params)
        return self.request("POST", path, body=body, headers={"Content-Type": ctype})

    def ingest_folded(self, name, from_s, until_s, stacks, **params):
        """Pyroscope folded ingest of {"a;b;c": count}."""
        text = "".join("%s %d\n" % (s, c) for s, c in stacks.items()).encode()
        st, _, body = self.post("/ingest", text, "text/plain", name=name, **{"from": from_s},
                                until=until_s, format="folded", **params)
        if st != 200:
            fail("ingest %s: HTTP %d %s" % (name, st, body[:300]))

    def raw(self, data, timeout=30):
        """Sends bytes as they are; returns what came back until close."""
        s = socket.create_connection(("127.0.0.1", self.port), timeout=timeout)
        try:
            s.sendall(data)
            out = b""
            while True:
                try:
                    chunk = s.recv(65536)
                except ConnectionResetError:
                    break
                if not chunk:
                    break
                out += chunk
            return out
        finally:
            s.close()

    def alive(self):
        return self.p.poll() is None and self.request("GET", "/healthz")[0] == 200

    def stop(self, sig=signal.SIGTERM, timeout=30):
        if self.p.poll() is None:
            self.p.send_signal(sig)
            try:
                self.p.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        return self.p.returncode

    def kill(self):
        if self.p.poll() is None:
            self.p.kill()
            self.p.wait(10)


class Coordinator(Server):
    """`sonde coordinator` on 127.0.0.1 (port 0), with Server's requests (it
    is not waited for with /healthz: that is 503 while its servers are
    down)."""

    def __init__(self, args):
        self._launch([SONDE, "coordinator", "--listen", "127.0.0.1:0"] + list(args),
                     "the coordinator")


def error_of(body):
    try:
        return json.loads(body).get("error", "")
    except ValueError:
        return ""


def flame_total(fb, path):
    """Total of the flamebearer node at path (root first, "total" left out),
    decoded from the levels as Pyroscope's UI does; None if absent."""
    names, levels = fb["names"], fb["levels"]
    lo, hi, found = 0, float("inf"), None
    for d, name in enumerate(path, 1):
        x, found = 0, None
        lv = levels[d] if d < len(levels) else []
        for k in range(0, len(lv), 4):
            x += lv[k]
            t = lv[k + 1]
            if lo <= x and x + t <= hi and names[lv[k + 3]] == name:
                lo, hi, found = x, x + t, t
                break
            x += t
        if found is None:
            return None
    return found
