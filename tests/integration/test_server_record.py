#!/usr/bin/env python3
"""An agent's window as the server sees it: `sonde record` profiles the
shares workload into pprof (the format agents ship), the file is POSTed to
/api/v1/ingest with a node label, and the server's answers hold exactly what
the file holds -- the same total as `go tool pprof` reads from it, split into
series by comm and pid with service_name from comm, the hot functions in
their shares (60/30/10 % within 5 points), and the pprof download of the
selection again readable by `go tool pprof` with the same total. The same
window POSTed again under the key it was first sent with (an agent's retry
after a lost answer) is stored once. Needs root and BPF (skips otherwise)."""
import json
import os
import re
import shutil
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from sonde_test import WL, check, fail, need_bpf, record, run, skip, tmpdir  # noqa: E402
from server_test import Server  # noqa: E402

need_bpf()
go = shutil.which("go")
if not go:
    skip("go is not installed (golang-go): go tool pprof is the independent reader here")
d = tmpdir()
env = dict(os.environ, HOME=d, GOCACHE=os.path.join(d, "gocache"))
pb = os.path.join(d, "shares.pb.gz")
p = record(["-F", "199", "-o", pb, "--", os.path.join(WL, "shares"), "2"])
check(p.returncode == 0, "sonde record writes the workload's pprof")


def pprof_total(path):
    t = run([go, "tool", "pprof", "-top", "-sample_index=0", path], timeout=180, env=env)
    m = re.search(r"of (\d+) total", t.stdout)
    if t.returncode or not m:
        fail("go tool pprof can't read %s" % path)
    return int(m.group(1)), t.stdout


truth, _ = pprof_total(pb)
check(truth > 100, "the recording has %d samples" % truth)

srv = Server(tmpdir())
try:
    now = int(time.time() * 1000)
    body = open(pb, "rb").read()
    st, _, out = srv.post("/api/v1/ingest", body, "application/octet-stream", node="node-1",
                          **{"from": now - 10000}, until=now)
    check(st == 200, "the agent's window is acknowledged: %s" % out[:200])
    ack = json.loads(out)
    check(ack["series"] >= 1 and ack["samples"] > 0, "answer: %s" % ack)

    r = srv.get_json("/api/v1/top", query='{node="node-1", type="cpu"}')
    check(r["total"] == truth, "the server's total %d == go tool pprof's %d" % (r["total"], truth))
    # The workload, and the recorder's child before its exec (comm sonde).
    comms = srv.get_json("/api/v1/label/values", name="comm")["values"]
    check("shares" in comms and set(comms) <= {"shares", "sonde"}, "comm values: %s" % comms)
    check(ack["series"] == len(comms), "one series per comm (same pid)")
    pids = srv.get_json("/api/v1/label/values", name="pid")["values"]
    check(len(pids) == 1 and pids[0].isdigit(), "one pid: %s" % pids)
    svc = srv.get_json("/api/v1/label/values", name="service_name")["values"]
    check(svc == comms, "service_name defaults to the comm: %s" % svc)
    names = srv.get_json("/api/v1/labels")["names"]
    check("tid" not in names and "node" in names, "tid dropped, node added: %s" % names)

    r = srv.get_json("/api/v1/top", query='{node="node-1", comm="shares"}')
    shares_total = r["total"]
    # Inclusive, as the record tests count: the loops call into the kernel.
    incl = {f["name"]: f["total"] for f in r["functions"]}
    for fn, share in (("hot_a", 60), ("hot_b", 30), ("hot_c", 10)):
        got = 100.0 * incl.get(fn, 0) / r["total"]
        check(abs(got - share) <= 5, "%s: %.1f %% of the samples (truth %d %%)" % (fn, got, share))

    r = srv.get_json("/pyroscope/render", query='shares.cpu{node="node-1"}')
    check(r["flamebearer"]["numTicks"] == shares_total,
          "render of shares.cpu over the default hour: %d samples" %
          r["flamebearer"]["numTicks"])

    # An agent's window carries a key: sent twice, stored once.
    for attempt in (1, 2):
        st, _, out = srv.post("/api/v1/ingest", body, "application/octet-stream",
                              node="node-2", key="node-2/1/7/cpu",
                              **{"from": now - 10000}, until=now)
        check(st == 200 and json.loads(out)["duplicate"] == (attempt == 2),
              "keyed window, attempt %d: %s" % (attempt, out[:120]))
    r = srv.get_json("/api/v1/top", query='{node="node-2", type="cpu"}')
    check(r["total"] == truth, "the window sent twice under one key counts once (%d)"
          % r["total"])

    st, _, dl = srv.get("/api/v1/pprof", query='{node="node-1"}')
    path = os.path.join(d, "download.pb.gz")
    open(path, "wb").write(dl)
    got, text = pprof_total(path)
    check(got == truth and "hot_a" in text, "the download reads back with %d samples" % got)
finally:
    srv.stop()
