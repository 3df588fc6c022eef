#!/usr/bin/env python3
"""A URI of too many query arguments is answered 414 at once (issue 22,
security probe finding 12). libmicrohttpd parses a request's arguments into
its connection's memory pool (128 KiB): 2,000 arguments in an 8 KB URL
filled it, left no room for the error it meant to send, and the request
got no answer -- a reset 10 s later, when the head deadline closed it.
`sonde server` now refuses a URI of more than 256 query arguments or 32
KiB with a JSON 414 that says the limits, before libmicrohttpd parses any
of it, closes the connection, and counts it in
sonde_server_uri_too_long_total.

- 256 arguments (the most taken) are answered 200.
- 2,000 and 5,000 arguments, and a 40 KB argument: 414 within 2 s, with
  {"error": ...} naming the limits; the connection closed.
- A URI of 200 KB (more than the pool) gets libmicrohttpd's own 414.
- The server answers /healthz between them and counts the refusals."""
import json
import os
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from sonde_test import check, tmpdir  # noqa: E402
from server_test import Server  # noqa: E402


def get(port, query, timeout=2.0):
    """(status, body, seconds, closed): a GET of /api/v1/labels?query, its
    answer read until the server closes (within timeout)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    t = time.monotonic()
    data, closed = b"", False
    try:
        s.sendall(("GET /api/v1/labels?%s HTTP/1.1\r\nHost: x\r\n\r\n" % query).encode())
        end = t + timeout
        while time.monotonic() < end:
            s.settimeout(max(0.05, end - time.monotonic()))
            try:
                chunk = s.recv(65536)
            except socket.timeout:
                break
            except ConnectionResetError:
                closed = True
                break
            if not chunk:
                closed = True
                break
            data += chunk
            head, _, body = data.partition(b"\r\n\r\n")
            if body and b"content-length" in head.lower():
                n = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
                if len(body) >= n and b"connection: close" not in head.lower():
                    break
    finally:
        s.close()
    secs = time.monotonic() - t
    if not data.startswith(b"HTTP/"):
        return None, data[:200], secs, closed
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), body, secs, closed


def args(n):
    return "&".join("a%d=1" % i for i in range(n))


def main():
    srv = Server(tmpdir())
    try:
        st, body, secs, _ = get(srv.port, args(256))
        check(st == 200, "256 query arguments are answered: %s %s" % (st, body[:200]))
        for what, q in (("2000 arguments (%d bytes)" % len(args(2000)), args(2000)),
                        ("5000 arguments (%d bytes)" % len(args(5000)), args(5000)),
                        ("one argument of 40 KB", "query=" + "x" * 40000)):
            st, body, secs, closed = get(srv.port, q)
            try:
                err = json.loads(body).get("error", "")
            except ValueError:
                err = body[:200]
            check(st == 414 and "256 arguments" in err and "32768 bytes" in err,
                  "%s: 414 with the limits in its JSON error, in %.2f s: %s %s"
                  % (what, secs, st, err))
            check(closed, "%s: the connection closed after the 414" % what)
            check(srv.get("/healthz")[0] == 200, "/healthz answered after it")
        st, body, secs, _ = get(srv.port, "query=" + "x" * 200000)
        check(st == 414, "a URI of 200 KB, past the connection's memory, gets "
                         "libmicrohttpd's own 414: %s" % st)
        m = srv.get("/metrics")[2].decode()
        n = [float(l.split()[-1]) for l in m.splitlines()
             if l.startswith("sonde_server_uri_too_long_total")]
        check(n == [3.0], "the three 414s of ours counted: %s" % n)
    finally:
        srv.stop()


main()
