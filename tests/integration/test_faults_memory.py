#!/usr/bin/env python3
"""test_faults_memory.py: small requests must not cost large memory, and
memory a request took goes back (issue 22, security probe finding 9).
Each figure is the process's peak RSS (VmHWM, reset through
/proc/PID/clear_refs before each case) or its RSS after.

  1. A 5 KB pprof of 1,024 series (one sample each): the server's peak
     grows by less than 16 MB, and by less than 48 MB for eight at once
     (was 34 and 274 MB: 66 KB of index and a 256 KB block per series).
  2. 60 KB of gzip holding 30 million empty samples ("\\x12\\x00"): a 413,
     the peak growing by less than 100 MB -- the inflated 60 MB, nothing
     unpacked (was 552 MB: protobuf-c unpacked until its budget).
  3. The coordinator's /api/v1/top over 100,000 stacks, three times: its
     RSS after each is within 64 MB of where it started (was 125 MB more
     after each, every worker thread's malloc arena keeping its peak).
  4. The server's /api/v1/diff?max_nodes=1000000 over the same stacks: its
     RSS after it and the coordinator's three reads within 64 MB of where
     it was before them (was each thread's peak, kept).
Needs root to reset a process's peak (clear_refs); skips otherwise.
"""
import gzip
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(__file__))
import pprof_wire  # noqa: E402
from faults_test import figures, need_root, proc_mb, reset_peak  # noqa: E402
from server_test import Coordinator, Server  # noqa: E402
from sonde_test import check, tmpdir  # noqa: E402

def reset_rss(pid):
    """Resets pid's peak; its RSS now, the base of the next peak."""
    reset_peak(pid)
    return proc_mb(pid, "VmRSS")


def main():
    need_root("reset a process's peak RSS (/proc/PID/clear_refs)")
    out = {}
    srv = Server(tmpdir())
    co = None
    pid = srv.p.pid
    now = int(time.time()) // 10 * 10
    try:
        # 1. 1,024 series in 5 KB.
        samples = [(["main", "f%d" % (i % 7)], [1], {"pid": str(i)}) for i in range(1024)]
        msg = gzip.compress(pprof_wire.encode([("samples", "count")], samples))
        base = reset_rss(pid)
        st, _, body = srv.post("/api/v1/ingest", msg, service_name="many", type="cpu",
                               **{"from": (now - 300) * 1000, "until": (now - 299) * 1000})
        one = proc_mb(pid, "VmHWM") - base
        check(st == 200, "1,024 series in one pprof stored: %d %s" % (st, body[:200]))
        base = reset_rss(pid)
        codes = []

        def post(k):
            codes.append(srv.post("/api/v1/ingest", msg, service_name="many%d" % k,
                                  type="cpu", **{"from": (now - 290) * 1000,
                                                 "until": (now - 289) * 1000})[0])
        ts = [threading.Thread(target=post, args=(k,)) for k in range(8)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(120)
        eight = proc_mb(pid, "VmHWM") - base
        out.update(series_body_bytes=len(msg), series_peak_mb=round(one, 1),
                   series_eight_peak_mb=round(eight, 1))
        check(codes == [200] * 8, "eight at once stored: %s" % codes)
        check(one < 16, "a %d-byte pprof of 1,024 series: peak +%.1f MB (< 16)"
              % (len(msg), one))
        check(eight < 48, "eight at once: peak +%.1f MB (< 48)" % eight)

        # 2. Empty submessages.
        bomb = gzip.compress(b"\x12\x00" * (30 * 1000 * 1000), 9)
        base = reset_rss(pid)
        t0 = time.monotonic()
        st, _, body = srv.post("/api/v1/ingest", bomb, service_name="bomb", type="cpu")
        peak = proc_mb(pid, "VmHWM") - base
        out.update(empty_body_bytes=len(bomb), empty_peak_mb=round(peak, 1),
                   empty_s=round(time.monotonic() - t0, 2))
        check(st == 413, "%d bytes of empty samples: 413 (%d %s)" % (len(bomb), st, body[:200]))
        check(peak < 100, "...refused before unpacking: peak +%.1f MB (< 100)" % peak)

        # 3. The coordinator's arenas.
        n = 100000
        text = "".join("main;mod%d;fn_%d_%d %d\n" % (i % 97, i % 1000, i, 1 + i % 5)
                       for i in range(n)).encode()
        for half, w in ((0, now - 100), (1, now - 50)):
            st, _, body = srv.post("/ingest", text, "text/plain", name="big.cpu{x=%d}" % half,
                                   **{"from": w, "until": w + 10, "format": "folded"})
            check(st == 200, "ingest of %d stacks: %d %s" % (n, st, body[:200]))
        rng = {"from": (now - 200) * 1000, "until": now * 1000}
        idle = proc_mb(pid, "VmRSS")
        co = Coordinator(["--timeout", "60s", "--server", "http://127.0.0.1:%d" % srv.port])
        cbase = reset_rss(co.p.pid)
        after = []
        for _ in range(3):
            st, _, body = co.get("/api/v1/top", query='big.cpu{}', **rng)
            check(st == 200, "the coordinator's top: %d %s" % (st, body[:200]))
            after.append(round(proc_mb(co.p.pid, "VmRSS") - cbase, 1))
        out.update(coord_top_peak_mb=round(proc_mb(co.p.pid, "VmHWM") - cbase, 1),
                   coord_rss_after_mb=after)
        check(max(after) < 64, "the coordinator's RSS after each top over %d stacks: %s MB "
              "more (< 64; peak +%.0f MB)" % (n, after, proc_mb(co.p.pid, "VmHWM") - cbase))

        # 4. The server's diff.
        base = reset_rss(pid)
        st, _, body = srv.get("/api/v1/diff", leftQuery='big.cpu{x="0"}',
                              rightQuery='big.cpu{x="1"}', max_nodes=1000000, **rng)
        grew = proc_mb(pid, "VmRSS") - idle
        out.update(diff_peak_mb=round(proc_mb(pid, "VmHWM") - base, 1),
                   server_rss_after_queries_mb=round(grew, 1), diff_answer_bytes=len(body))
        check(st == 200, "diff max_nodes=1000000: %d %s" % (st, body[:200]))
        check(grew < 64, "the server's RSS after the coordinator's three reads and the diff: "
              "+%.1f MB (< 64; the diff's peak +%.0f MB)" % (grew, proc_mb(pid, "VmHWM") - base))
    finally:
        figures("memory", out)
        if co:
            co.stop()
        srv.stop()


if __name__ == "__main__":
    main()
