#!/usr/bin/env python3
"""A 1 GB body must be refused without being buffered, and others
answered meanwhile. Against `sonde server` (16 MiB bodies at most, 64 MiB
decompressed), with a probe asking /healthz four times a second:
  1. POST /api/v1/ingest with Content-Length: 1 GiB: a 413 before a byte
     of the body is sent;
  2. the same at Pyroscope's /ingest;
  3. 1 GiB sent chunked (no length): the server reads and drops it and
     cuts the connection off well before the end (16 times the limit);
  4. a 1 MB gzip that inflates to 1 GiB, as an agent's window: a 413
     naming the decompressed limit.
Each time the server's RSS stays within 150 MB of where it was (it never
holds the body), the probes are answered within 2 s, and afterwards an
ordinary window is stored. Figures: the time to each refusal, the bytes
the server took of the chunked body, the RSS."""
import gzip
import os
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from faults_test import Probe, figures  # noqa: E402
from loadgen import Fleet, ProcWatch, SimAgent  # noqa: E402
from server_test import Server  # noqa: E402
from sonde_test import check, tmpdir  # noqa: E402

GIB = 1 << 30
MIB = 1 << 20
srv = Server(tmpdir())
watch = ProcWatch(srv.p.pid, interval=0.05)
probe = Probe(srv.port)
out = {}


def rss_now():
    watch._sample()
    return watch.rss_last_mb


def stream(head, chunks, limit_s=120):
    """Sends head then the chunks while reading what comes back; stops at
    the first answer's end, a closed connection or an error. Returns
    (bytes of chunks sent, seconds, answer bytes, how it ended)."""
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=30)
    sent, answer, t = 0, b"", time.monotonic()
    end = "all sent"
    try:
        s.sendall(head)
        for ch in chunks:
            s.setblocking(False)
            if not ch:  # wait a little for an answer
                s.settimeout(0.1)
            try:
                d = s.recv(65536)
                if not d:
                    end = "closed by the server"
                    break
                answer += d
                if b"\r\n\r\n" in answer:
                    end = "answered"
                    break
            except (BlockingIOError, socket.timeout):
                pass
            except ConnectionResetError:
                end = "reset by the server"
                break
            s.settimeout(30)
            try:
                s.sendall(ch)
            except (BrokenPipeError, ConnectionResetError):
                end = "cut off by the server"
                break
            sent += len(ch)
            if time.monotonic() - t > limit_s:
                end = "time limit"
                break
        s.settimeout(10)
        try:
            while b"\r\n\r\n" not in answer:
                d = s.recv(65536)
                if not d:
                    break
                answer += d
        except OSError:
            pass
    finally:
        s.close()
    return sent, time.monotonic() - t, answer, end


zeros = b"\0" * MIB
try:
    base = rss_now()
    out["rss_before_mb"] = round(base, 1)
    for name, path in (("content_length_1gib", "/api/v1/ingest?type=cpu"),
                       ("pyroscope_content_length_1gib", "/ingest?name=big&format=folded")):
        watch.rss_max_mb = 0
        t0 = time.time()
        head = ("POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/octet-stream"
                "\r\nContent-Length: %d\r\n\r\n" % (path, GIB)).encode()
        # Nothing of the body is sent until the answer came (5 s at
        # most), then the rest as far as the server takes it.
        sent, secs, answer, end = stream(head, [b""] * 50 + [zeros] * 1024)
        check(answer.startswith(b"HTTP/1.1 413"), "%s: 413 (%r, %s)" % (name, answer[:40], end))
        check(sent == 0, "%s: refused before a byte of the body was sent (%d sent, %s)" %
              (name, sent, end))
        out[name] = {"status": 413, "body_sent_bytes": sent, "seconds": round(secs, 3),
                     "rss_max_mb": round(max(watch.rss_max_mb, rss_now()), 1)}

    # Chunked: no length to refuse on; the server reads past its limit,
    # dropping, and cuts the sender off at 16 times the limit.
    watch.rss_max_mb = 0
    head = (b"POST /api/v1/ingest?type=cpu HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/octet-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
    chunk = b"%x\r\n" % MIB + zeros + b"\r\n"
    sent, secs, answer, end = stream(head, (chunk for _ in range(1024)))
    rss = max(watch.rss_max_mb, rss_now())
    check(sent < GIB // 2, "chunked 1 GiB: the server stopped taking it after %d MiB (%s)" %
          (sent // MIB, end))
    check(rss - base < 150, "chunked 1 GiB: the server's RSS rose %.1f MB at most (not "
          "buffered)" % (rss - base))
    out["chunked_1gib"] = {"body_sent_mib": sent // MIB, "seconds": round(secs, 2), "end": end,
                           "answer": answer[:40].decode("latin-1"), "rss_max_mb": round(rss, 1)}

    # A gzip bomb: 64 members of 16 MiB of zeros, 1 GiB inflated.
    watch.rss_max_mb = 0
    bomb = gzip.compress(b"\0" * (16 * MIB), 9) * 64
    t0 = time.monotonic()
    st, _, body = srv.request("POST", "/api/v1/ingest?type=cpu&node=bomb", bomb,
                              {"Content-Type": "application/octet-stream"})
    secs = time.monotonic() - t0
    rss = max(watch.rss_max_mb, rss_now())
    check(st == 413 and b"decompressed" in body, "gzip bomb (%d bytes, 1 GiB inflated): %d %s"
          % (len(bomb), st, body[:120]))
    check(rss - base < 150, "gzip bomb: the server's RSS rose %.1f MB at most" % (rss - base))
    out["gzip_bomb_1gib"] = {"bytes": len(bomb), "status": st, "seconds": round(secs, 3),
                             "rss_max_mb": round(rss, 1)}

    probe.stop()
    s = Probe.summary(probe.results)
    check(s["probes"] and s["answered"] == s["probes"] and s["max_ms"] < 2000,
          "others answered meanwhile: %d of %d probes, the slowest in %s ms" %
          (s["answered"], s["probes"], s["max_ms"]))
    out["probes"] = s
    a = SimAgent(Fleet(), "big-body-%d" % os.getpid(), int(time.time() * 1000) - 20000, 10000,
                 7)
    path, body = a.window(0)
    st, _, ans = srv.post(path, body)
    check(st == 200, "an ordinary window is stored afterwards (%d %s)" % (st, ans[:100]))
    check(srv.alive(), "the server is up")
    figures("big_body", out)
finally:
    probe.stop()
    watch.stop()
    srv.stop()
