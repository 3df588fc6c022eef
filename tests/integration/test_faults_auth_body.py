#!/usr/bin/env python3
"""With --auth, a request without a valid token costs its head alone
(issue 22, security probe finding 1): `sonde server --auth` refuses it
(401, 403, or 429 once the address failed too often) as soon as its head is
in, before any byte of its body is read, and closes the connection. Before,
the body was read and buffered first and the token checked at the end: 100
connections announcing a 16 MiB ingest without a token took the server from
15 MB to 1.6 GB.

- 24 heads of POST /api/v1/ingest announcing 16 MiB (no token, an unknown
  token, a read token on an ingest route) are each answered within 5 s
  with no body sent, the answer says Connection: close, and the server
  closes the connection.
- 16 connections at once each sending a head and 12 MiB of body without a
  token: the server's peak RSS grows by less than 64 MB (the bodies, 192
  MiB, were buffered before).
- A valid ingest token still ingests, before and after."""
import os
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(__file__))
from sonde_test import SONDE, check, run, tmpdir  # noqa: E402
from server_test import Server  # noqa: E402
from faults_test import proc_mb  # noqa: E402
import pprof_wire  # noqa: E402

ANNOUNCED = 16 << 20


def token(data, project, role):
    p = run([SONDE, "token", "create", "--data", data, "--project", project, "--role", role])
    check(p.returncode == 0, "sonde token create --role %s" % role)
    return p.stdout.strip().splitlines()[-1].strip()


def head(auth):
    h = ("POST /api/v1/ingest?name=x.cpu HTTP/1.1\r\nHost: x\r\n"
         "Content-Type: application/octet-stream\r\nContent-Length: %d\r\n" % ANNOUNCED)
    if auth:
        h += "Authorization: %s\r\n" % auth
    return (h + "\r\n").encode()


def answer_to_head(port, auth, source):
    """Sends a head alone; (status, headers text, closed) within 5 s, or
    (None, why, False)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=5, source_address=(source, 0))
    try:
        s.sendall(head(auth))
        data = b""
        end = time.monotonic() + 5
        while b"\r\n\r\n" not in data:
            s.settimeout(max(0.05, end - time.monotonic()))
            try:
                chunk = s.recv(4096)
            except socket.timeout:
                return None, "no answer within 5 s of the head", False
            if not chunk:
                return None, "closed without an answer", False
            data += chunk
        hdrs, _, body = data.partition(b"\r\n\r\n")
        closed = False
        while time.monotonic() < end:
            s.settimeout(max(0.05, end - time.monotonic()))
            try:
                chunk = s.recv(4096)
            except socket.timeout:
                break
            except ConnectionResetError:
                closed = True
                break
            if not chunk:
                closed = True
                break
        return int(hdrs.split()[1]), hdrs.decode("latin-1"), closed
    finally:
        s.close()


def send_body(port, source, nbytes, out):
    """A head and nbytes of body without a token, as fast as the server
    takes it; out gets the status answered (or what happened)."""
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=20, source_address=(source, 0))
    except OSError as e:
        out.append(type(e).__name__)
        return
    try:
        s.sendall(head(None))
        chunk = b"\0" * (1 << 20)
        for _ in range(nbytes >> 20):
            s.sendall(chunk)
        data = s.recv(4096)
        out.append(int(data.split()[1]) if data.startswith(b"HTTP/") else "no answer")
    except OSError as e:
        # The server answered and closed while the body was on its way.
        out.append(type(e).__name__)
    finally:
        s.close()


def ingest(srv, tok, tag):
    import http.client
    now = int(time.time())
    body = pprof_wire.encode([("samples", "count")], [(["main", tag], [5])])
    c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=30)
    try:
        c.request("POST", "/api/v1/ingest?service_name=%s&type=cpu&from=%d&until=%d"
                  % (tag, (now - 10) * 1000, now * 1000), body=body, headers={"Content-Type": "application/octet-stream",
                                      "Authorization": "Bearer " + tok})
        r = c.getresponse()
        r.read()
        return r.status
    finally:
        c.close()


def main():
    data = tmpdir()
    ing = token(data, "alpha", "ingest")
    rd = token(data, "alpha", "read")
    srv = Server(data, ["--auth", "--threads", "2"])
    try:
        check(ingest(srv, ing, "before") == 200, "a valid ingest token ingests")

        cases = [(None, (401, 429)), ("Bearer sonde_" + "x" * 43, (401, 429)),
                 ("Bearer " + rd, (403, 429))]
        for auth, want in cases:
            for i in range(8):
                st, hdrs, closed = answer_to_head(srv.port, auth, "127.0.0.3")
                check(st in want,
                      "a head of a 16 MiB ingest with %s is answered %s before its body: "
                      "%s %s" % (auth and auth[:12] + "..." or "no token", want, st,
                                 hdrs if st is None else ""))
                check("connection: close" in hdrs.lower() and closed,
                      "the refused connection is closed (Connection: close and EOF)")

        pid = srv.p.pid
        before = proc_mb(pid, "VmHWM") * 1024
        out, ts = [], []
        for i in range(16):
            t = threading.Thread(target=send_body, args=(srv.port, "127.0.0.4", 12 << 20, out))
            t.start()
            ts.append(t)
        for t in ts:
            t.join(60)
        after = proc_mb(pid, "VmHWM") * 1024
        print("peak RSS %d kB before, %d kB after 16 x 12 MiB unauthenticated bodies; "
              "answers %s" % (before, after, out))
        check(len(out) == 16, "the 16 senders are done")
        check(after - before < 64 * 1024,
              "the server's peak RSS grew by %d MB for 192 MiB of unauthenticated bodies "
              "(at most 64 MB: none is buffered)" % ((after - before) // 1024))
        check(srv.alive(), "the server is up")
        check(ingest(srv, ing, "after") == 200, "a valid ingest token still ingests")
    finally:
        srv.stop()


main()
