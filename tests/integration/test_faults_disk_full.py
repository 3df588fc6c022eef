#!/usr/bin/env python3
"""The disk full under the SQLite store: `sonde server --data` on a small
tmpfs the test mounts (and unmounts), simulated agents (loadgen.py)
shipping keyed windows; a file fills the rest of the disk mid-stream.
While it is full the server must acknowledge nothing it did not store
(checked by query afterwards), answer every ingest with an error the
agents retry (5xx), stay up, and log why; once the file is removed the
stream goes on by itself. Afterwards every acknowledged window is there
exactly once, also after the server is killed with -9 and started again
on the same data, and SQLite's integrity_check says ok.

And it must say so as for the store's other outages: every refusal a 503
with Retry-After, /healthz 503 while nothing can be written, and the log a
few lines per 10 s, not one per request (commit 7f12b54; before it: 500,
/healthz ok, two lines per refused request).

Short form: 20 agents, 1 s windows, full for 60 failed tries. The
campaign's: FULL_AGENTS=200 FULL_WINDOW=10 FULL_FAILS=1200 (the agents'
backoff grows to its 30 s)."""
import os
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from faults_test import check_verified, figures, need_root, param  # noqa: E402
from loadgen import LoadGen  # noqa: E402
from server_test import Server  # noqa: E402
from sonde_test import check, skip, tmpdir, wait_until  # noqa: E402

AGENTS = param("FULL_AGENTS", 20)
WINDOW = param("FULL_WINDOW", 1.0)
FAILS = param("FULL_FAILS", 3 * AGENTS)
SIZE_MB = param("FULL_SIZE_MB", 32)

need_root("mount a tmpfs")
mnt = tmpdir()
p = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=%dm,mode=0700" % SIZE_MB,
                    "sonde-disk-full", mnt], capture_output=True, text=True)
if p.returncode != 0:
    skip("can't mount a tmpfs on %s: %s" % (mnt, p.stderr.strip()))
srv = lg = None
try:
    data = os.path.join(mnt, "data")
    filler = os.path.join(mnt, "filler")
    srv = Server(data)
    t_begin = time.time()
    lg = LoadGen(srv.port, AGENTS, WINDOW)
    wait_until(lambda: lg.acked() >= 2 * AGENTS, 60, "windows stored before the disk fills")

    # Fill the disk: a file takes every block left (unbuffered writes, so
    # that the error comes from a write, not from a close).
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    err = None
    try:
        for size in (1 << 20, 4096, 1):
            while True:
                try:
                    os.write(fd, b"\0" * size)
                except OSError as e:
                    err = e
                    break
    finally:
        os.close(fd)
    check(err is not None and err.errno == 28, "the disk is full (%s)" % err)
    t_full = time.time()
    n_full = lg.acked()
    fails0 = sum(v for k, v in lg.statuses.items() if k != 200)
    log0 = len(srv.lines)
    wait_until(lambda: sum(v for k, v in lg.statuses.items() if k != 200) >= fails0 + FAILS,
               60 + FAILS * 2, "%d ingests refused while the disk is full" % FAILS, step=0.05)
    acked_while_full = lg.acked() - n_full
    st, h, body = srv.get("/healthz")
    answers = {k: v for k, v in lg.statuses.items() if k != 200}
    full_lines = srv.lines[log0:]
    full_s = time.time() - t_full
    check(srv.p.poll() is None, "the server stays up on a full disk")
    check(all(isinstance(k, int) and k >= 500 for k in answers),
          "every refusal is a status the agents retry (%s)" % answers)
    check(any("No space left on device" in l for l in full_lines),
          "the full disk is logged (%s)" % (full_lines[:1],))
    healthz = (st, body[:200])
    du = shutil.disk_usage(mnt)

    # Free the space: the agents' retries go through by themselves.
    os.unlink(filler)
    t_free = time.time()
    n_free = lg.acked()
    wait_until(lambda: lg.acked() >= n_free + AGENTS and lg.queued() <= AGENTS, 60 + 35,
               "the stream going on once the disk has room")
    catch_up_s = time.time() - t_free
    unsent = lg.stop(drain_s=60)
    t_end = time.time()
    f = lg.figures()
    check(unsent == 0 and f["acknowledged"] == f["windows"] and f["rejected"] == 0,
          "every window made was acknowledged in the end (%d of %d, %d refused for good)" %
          (f["acknowledged"], f["windows"], f["rejected"]))
    v = lg.verify(srv.get_json)
    check_verified(v, "after the full disk")

    # Killed with -9 and started again: the database is whole.
    srv.p.send_signal(signal.SIGKILL)
    srv.p.wait(10)
    if shutil.which("sqlite3"):
        dbs = [n for n in os.listdir(data) if n.endswith(".db")]
        ic = subprocess.run(["sqlite3", os.path.join(data, dbs[0]), "PRAGMA integrity_check"],
                            capture_output=True, text=True, timeout=120)
        check(ic.stdout.strip() == "ok", "SQLite's integrity_check: %s" %
              (ic.stdout.strip()[:200] or ic.stderr.strip()[:200]))
    srv = Server(data)
    v2 = lg.verify(srv.get_json)
    check_verified(v2, "after a kill -9 and a restart")

    per_fail = len(full_lines) / max(1, sum(answers.values()))
    figures("disk_full", dict(
        f, verify=v, verify_after_restart=v2, full_s=round(full_s, 1),
        acked_while_full=acked_while_full, answers_while_full=answers,
        healthz_while_full=healthz, log_lines_while_full=len(full_lines),
        log_lines_per_refusal=round(per_fail, 2), catch_up_s=round(catch_up_s, 1),
        disk_mb=SIZE_MB, free_bytes_when_full=du.free,
        latency_before=lg.latency_between(t_begin, t_full),
        latency_while_full=lg.latency_between(t_full, t_free),
        latency_after=lg.latency_between(t_free, t_end)))

    check(all(k == 503 for k in answers) and
          lg.retry_after.get(503) == lg.statuses.get(503),
          "a full disk is answered 503 with Retry-After like the store's other outages "
          "(%s while full; %s 503s in all, %s with Retry-After)" %
          (answers, lg.statuses.get(503), lg.retry_after.get(503)))
    check(healthz[0] == 503, "/healthz says the store can't write (%d %r)" % healthz)
    check(len(full_lines) <= 4 + 2 * full_s / 10,
          "the full disk is logged a few lines per 10 s, not per request (%d lines in %.0f s)"
          % (len(full_lines), full_s))
finally:
    if lg:
        lg.stop(drain_s=0)
    if srv:
        srv.stop()
    subprocess.run(["umount", "-l", mnt])
