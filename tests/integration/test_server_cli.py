#!/usr/bin/env python3
"""`sonde server` as a command: --help prints the grammar, bad options and
arguments exit 2 with one line saying what is wrong, an address in use and
an unusable --data directory fail with a message, --retention is applied
(old windows expire at start), and SIGINT stops it cleanly with exit 0
keeping the data for the next start."""
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from sonde_test import SONDE, check, run, tmpdir  # noqa: E402
from server_test import Server  # noqa: E402

p = run([SONDE, "server", "--help"])
check(p.returncode == 0 and "--listen" in p.stdout and "--retention" in p.stdout and
      "--data" in p.stdout, "--help prints the options")
for args, words in ((["--retention", "soon"], "--retention"),
                    (["--retention", "10s"], "a duration from 1m"),
                    (["--threads", "0"], "--threads"),
                    (["--bogus"], "unrecognized"),
                    (["extra"], "unexpected argument")):
    p = run([SONDE, "server"] + args, timeout=30)
    check(p.returncode == 2 and words in p.stderr, "%s: exit 2 naming %s" % (args, words))

p = run([SONDE, "server", "--listen", "nowhere", "--data", tmpdir()], timeout=30)
check(p.returncode != 0 and "invalid address" in p.stderr, "a bad --listen is refused")
d = tmpdir()
blocker = os.path.join(d, "file")
open(blocker, "w").write("not a directory")
p = run([SONDE, "server", "--listen", "127.0.0.1:0", "--data", os.path.join(blocker, "x")],
        timeout=30)
check(p.returncode != 0 and p.stderr.strip(), "an unusable --data fails with a message")

data = tmpdir()
srv = Server(data, ["--retention", "1h"])
try:
    now = int(time.time())
    srv.ingest_folded("old.cpu", now - 7200, now - 7190, {"main;a": 1})
    srv.ingest_folded("new.cpu", now - 60, now - 50, {"main;a": 2})
    p = run([SONDE, "server", "--listen", "127.0.0.1:%d" % srv.port, "--data", tmpdir()],
            timeout=30)
    check(p.returncode != 0 and "in use" in p.stderr, "an address in use is refused")
    vals = srv.get_json("/api/v1/label/values", name="service_name",
                        **{"from": (now - 8000) * 1000})["values"]
    check(vals == ["new"], "a query older than the retention sees nothing older: %s" % vals)
    st, _, body = srv.get("/metrics")
    check(b"\nsonde_server_store_windows 2\n" in body, "both windows are in the store")
finally:
    rc = srv.stop(signal.SIGINT)
check(rc == 0, "SIGINT: exit 0")

# Next start: the retention pass at start removes the old window from disk.
srv = Server(data, ["--retention", "1h"])
try:
    # The pass runs on its own thread as the server starts: give it a moment.
    for _ in range(100):
        st, _, body = srv.get("/metrics")
        if b"sonde_server_expire_runs_total 1" in body:
            break
        time.sleep(0.1)
    check(b"sonde_server_expire_runs_total 1" in body, "retention ran at start")
    check(b"\nsonde_server_store_windows 1\n" in body, "and removed the old window")
    vals = srv.get_json("/api/v1/label/values", name="service_name")["values"]
    check(vals == ["new"], "the data outlives the restart: %s" % vals)
finally:
    srv.stop()
