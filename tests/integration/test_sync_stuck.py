"""A CUDA synchronisation that does not end raises an alert naming the
process and the Python line that waits (issue 11, item 4), as
NcclCollectiveStuck does for collectives: a Python job (Debian's python3,
through ctypes, on the GPU stand-ins) queues a copy the stand-in GPU makes
last 12 s and waits for it in cudaDeviceSynchronize -- as a loop waits for
a hung kernel. The agent's sonde_cuda_sync_stuck_seconds
{pid,tid,api,file,line,function,process} counts the time it has waited at
the job's own line (`err = rt.cudaDeviceSynchronize()` of
tests/workloads/sync_stuck.py, in wait_for_gpu: the stack taken when the
call began); the CudaSyncStuck alert (threshold lowered to 2 s with
--cuda-sync-stuck) fires with that line in its summary, and no
NcclCollectiveStuck does (the job queued no collective); /json lists the
wait in sync_stuck[] and `sonde watch` under "Stuck in a synchronisation".
When the copy is done the series goes and the alert
resolves."""
import json
import os
import subprocess
import time

from agent_test import *

need_bpf()
need_standins()
PY = "/usr/bin/python3"
SCRIPT = os.path.join(ROOT, "tests", "workloads", "sync_stuck.py")
LINE = [i + 1 for i, l in enumerate(open(SCRIPT)) if "err = rt.cudaDeviceSynchronize()" in l][0]
THRESHOLD, HANG_S = 2, 12


def firing(a, name):
    return [x for x in json.loads(a.get("/alerts")) if x["name"] == name and
            x["state"] == "firing"]


def stuck(a, pid):
    return [(l, v) for l, v in series(a.metrics(), "sonde_cuda_sync_stuck_seconds")
            if l["pid"] == str(pid)]


a = Agent(["--cuda-sync-stuck", str(THRESHOLD), "--nccl-stuck", "1"], env=standin_env())
p = None
try:
    cmd = [PY, SCRIPT, GPU_SI, str(HANG_S)]
    print("$ " + " ".join(cmd))
    p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, start_new_session=True)
    line = p.stderr.readline()
    t0 = time.time()
    check(line.startswith("sync_stuck: waiting"), "the job waits: %s" % line.strip())

    (labels, secs), = wait_for(lambda: (lambda s: s if s and s[0][1] >= THRESHOLD else None)(
        stuck(a, p.pid)), 15, "sonde_cuda_sync_stuck_seconds{pid=%d} to pass %d s"
        % (p.pid, THRESHOLD))
    check(labels["file"] == SCRIPT and labels["line"] == str(LINE) and
          labels["function"] == "wait_for_gpu",
          "the wait is at the job's line %s:%d in wait_for_gpu: %s" % (SCRIPT, LINE, labels))
    check(labels["api"] == "cudaDeviceSynchronize" and labels["tid"] == str(p.pid) and
          labels.get("process") == "python3",
          "in cudaDeviceSynchronize on the main thread of python3: %s" % labels)
    check(secs <= time.time() - t0 + 1.5, "it counts the time waited (%.1f s)" % secs)

    mine = wait_for(lambda: firing(a, "CudaSyncStuck"), 10, "CudaSyncStuck to fire")
    summary = mine[0]["summary"]
    check("%s:%d" % (SCRIPT, LINE) in summary and "in wait_for_gpu" in summary and
          "cudaDeviceSynchronize" in summary and str(p.pid) in summary and
          "python3" in summary, "the alert names the call, process and line: %r" % summary)
    check(mine[0]["labels"].get("severity") == "critical", "it is critical")
    check(not firing(a, "NcclCollectiveStuck") and
          not series(a.metrics(), "sonde_nccl_stuck_seconds"),
          "and it is not taken for a stuck collective")
    snap = json.loads(a.get("/json"))
    st = [x for x in snap["sync_stuck"] if x["pid"] == p.pid]
    check(len(st) == 1 and st[0]["line"] == LINE and st[0]["api"] == "cudaDeviceSynchronize"
          and st[0]["seconds"] >= THRESHOLD, "/json sync_stuck lists the wait: %s" % st)
    w = subprocess.run([SONDE, "watch", a.ws_url, "-b", "-n", "1"], capture_output=True,
                       text=True, timeout=30)
    want = "pid %d python3  cudaDeviceSynchronize  sync_stuck.py:%d in wait_for_gpu  blocked" \
        % (p.pid, LINE)
    check(w.returncode == 0 and "Stuck in a synchronisation" in w.stdout and want in w.stdout,
          "sonde watch shows the wait: %r" % [l for l in w.stdout.splitlines() if "pid" in l])

    # The copy is done: the job goes on and exits.
    out = json.loads(p.stdout.readline())
    check(out["waited_s"] >= HANG_S - 1, "the job waited %.1f s" % out["waited_s"])
    check(p.wait(30) == 0, "the job exits 0")
    p = None
    wait_for(lambda: not stuck(a, out["pid"]), 5, "the stuck series to go")
    check(True, "the stuck series is gone once the wait ended")
    wait_for(lambda: not firing(a, "CudaSyncStuck"), 5, "the alert to resolve")
    check(True, "CudaSyncStuck resolved")
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
