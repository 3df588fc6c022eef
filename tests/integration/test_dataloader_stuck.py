"""A DataLoader wait that does not end raises an alert naming the process
and the Python line that waits (issue 11, item 4): a real PyTorch loop
(Debian's python3-torch) whose worker hangs making one item, so that the
loop is stuck in next(). The agent's sonde_dataloader_stuck_seconds
{pid,tid,file,line,function,process} counts the time it has waited, at the
loop's own line (the `x = next(it)` of tests/workloads/dataloader_torch.py,
in main); the DataLoaderWaitStuck alert (threshold lowered to 2 s with
--dataloader-stuck) fires with that line in its summary, /json lists the
wait in dataloader_stuck[] and `sonde watch` under "Waiting for a batch".
When the item is made the series goes, the alert resolves, and the wait is
one observation of sonde_dataloader_wait_seconds as long as the loop
measured it."""
import json
import os
import subprocess
import time

from agent_test import *

need_bpf()
PY = "/usr/bin/python3"
if subprocess.run([PY, "-c", "import torch"], capture_output=True, timeout=120).returncode:
    skip("Debian's python3-torch is not installed (scripts/setup.sh installs it)")
SCRIPT = os.path.join(ROOT, "tests", "workloads", "dataloader_torch.py")
LINE = [i + 1 for i, l in enumerate(open(SCRIPT)) if "x = next(it)" in l][0]
THRESHOLD = 2


def ours(alerts):
    return [x for x in alerts if x["name"] == "DataLoaderWaitStuck"]


def stuck(a, pid):
    return [(l, v) for l, v in series(a.metrics(), "sonde_dataloader_stuck_seconds")
            if l["pid"] == str(pid)]


a = Agent(["--no-library-search", "--dataloader-stuck", str(THRESHOLD)])
p = None
try:
    release = os.path.join(tmpdir(), "release")
    # Two workers, batches of 2: item 6 (the fourth batch) hangs.
    cmd = [PY, SCRIPT, "2", "6", "2", "0", "6", release]
    print("$ " + " ".join(cmd))
    p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, start_new_session=True)
    line = p.stderr.readline()
    check(line.startswith("waiting at item 6"), "a worker hangs: %s" % line.strip())
    t0 = time.time()

    (labels, secs), = wait_for(lambda: (lambda s: s if s and s[0][1] >= THRESHOLD else None)(
        stuck(a, p.pid)), 15, "sonde_dataloader_stuck_seconds{pid=%d} to pass %d s"
        % (p.pid, THRESHOLD))
    check(labels["file"] == SCRIPT and labels["line"] == str(LINE) and
          labels["function"] == "main",
          "the wait is at the loop's line %s:%d in main: %s" % (SCRIPT, LINE, labels))
    check(labels["tid"] == str(p.pid) and labels.get("process") == "python3",
          "on the main thread of python3: %s" % labels)
    check(secs <= time.time() - t0 + 2.5, "it counts the time waited (%.1f s)" % secs)

    mine = wait_for(lambda: [x for x in ours(json.loads(a.get("/alerts")))
                             if x["state"] == "firing"], 10, "DataLoaderWaitStuck to fire")
    summary = mine[0]["summary"]
    check("%s:%d" % (SCRIPT, LINE) in summary and "in main" in summary and
          str(p.pid) in summary and "python3" in summary,
          "the alert names the process and the line: %r" % summary)
    check(mine[0]["labels"].get("severity") == "critical", "it is critical")
    snap = json.loads(a.get("/json"))
    st = [x for x in snap["dataloader_stuck"] if x["pid"] == p.pid]
    check(len(st) == 1 and st[0]["line"] == LINE and st[0]["file"] == SCRIPT and
          st[0]["seconds"] >= THRESHOLD,
          "/json dataloader_stuck lists the wait: %s" % st)
    w = subprocess.run([SONDE, "watch", a.ws_url, "-b", "-n", "1"], capture_output=True,
                       text=True, timeout=30)
    want = "pid %d python3  dataloader_torch.py:%d in main  waiting" % (p.pid, LINE)
    check(w.returncode == 0 and "Waiting for a batch" in w.stdout and want in w.stdout,
          "sonde watch shows the wait: %r" % [l for l in w.stdout.splitlines() if "pid" in l])

    # The item is made: the loop goes on and finishes its epoch.
    open(release, "w").close()
    out = json.loads(p.stdout.readline())
    check(out["batches"] == 6, "the loop finished its 6 batches")
    wait_for(lambda: not stuck(a, p.pid), 5, "the stuck series to go")
    check(True, "the stuck series is gone once the batch came")
    wait_for(lambda: not [x for x in ours(json.loads(a.get("/alerts")))
                          if x["state"] == "firing"], 5, "the alert to resolve")
    check(True, "DataLoaderWaitStuck resolved")
    m = wait_for(lambda: (lambda m: m if (value(m, "sonde_dataloader_wait_seconds_count",
                                                pid=out["pid"]) or 0) >= out["calls"]
                          else None)(a.metrics()), 10, "the waits counted")
    s = value(m, "sonde_dataloader_wait_seconds_sum", pid=out["pid"])
    check(abs(s - out["wait_s"]) <= 0.15 * out["wait_s"],
          "the long wait is measured: %.2f s (the loop's own %.2f s)" % (s, out["wait_s"]))
    p.stdin.close()
    check(p.wait(30) == 0, "the loop exits 0")
    p = None
except SystemExit:
    a.dump_log()
    raise
finally:
    if p:
        p.kill()
        p.wait()
    rc = a.stop()
check(rc == 0, "the agent exits 0 on SIGINT")
print("ok")
