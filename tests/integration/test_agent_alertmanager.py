"""The stuck-collective alert end to end, with nothing mocked but the GPU:
the real agent probes a stand-in NCCL rank (tests/gpu/workloads/nccl_hang)
whose allreduce never completes on the GPU, so the host blocks in the
cudaStreamSynchronize after it -- as with a peer that died. The agent's
sonde_nccl_stuck_seconds{pid,op,rank,comm} counts up; the NcclCollectiveStuck
alert (threshold lowered to 3 s) reaches a real Alertmanager within the
threshold + 5 s, naming op, rank and communicator, and a webhook gets one
firing POST; when the collective completes (after 12 s) the alert resolves
in Alertmanager and the webhook gets one resolved POST. All on 127.0.0.1."""
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "alerts"))
from alerts_helpers import Alertmanager, Receiver  # noqa: E402
from agent_test import *  # noqa: E402

THRESHOLD, HANG_S = 3, 12

need_bpf()
need_standins()


def ours(alerts):
    return [a for a in alerts if a["labels"].get("alertname") == "NcclCollectiveStuck"]


recv = Receiver()
am = Alertmanager(recv.url + "/am")
agent = hang = None
try:
    agent = Agent(["--no-cpu", "--nccl-stuck", str(THRESHOLD), "--alertmanager", am.url,
                   "--webhook", recv.url + "/hook", "--node", "gpu-test-node"],
                  env=standin_env())
    env = dict(os.environ, SONDE_STANDIN_NCCL_HANG_MS=str(HANG_S * 1000))
    cmd = [os.path.join(GPU_WL, "nccl_hang"), "--before", "3", "--rank", "1", "--nranks", "4"]
    print("$ SONDE_STANDIN_NCCL_HANG_MS=%d %s" % (HANG_S * 1000, " ".join(cmd)))
    hang = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env)
    line = hang.stderr.readline()
    t0 = time.time()
    check(line.startswith("nccl_hang: waiting"), "the rank is stuck: %s" % line.strip())
    pid = hang.pid

    # The agent's metric, while it waits.
    def stuck():
        s = [(l, v) for l, v in series(agent.metrics(), "sonde_nccl_stuck_seconds")
             if l["pid"] == str(pid)]
        return s if s and s[0][1] >= 2 else None
    (labels, secs), = wait_for(stuck, 6, "sonde_nccl_stuck_seconds{pid=%d}" % pid)
    check(labels["op"] == "allreduce" and labels["rank"] == "1" and
          labels["comm"].startswith("0x") and len(labels["comm"]) > 3,
          "sonde_nccl_stuck_seconds%s = %.1f s" % (labels, secs))
    check(abs(secs - (time.time() - t0)) < 2.5, "it counts the time blocked (%.1f s)" % secs)

    # Firing, in Alertmanager's own API.
    mine = wait_for(lambda: ours(am.alerts()), THRESHOLD + 5 + 1, "the alert in Alertmanager")
    seen = time.time() - t0
    print("in Alertmanager %.2f s after the collective got stuck" % seen)
    check(seen <= THRESHOLD + 5, "alert in Alertmanager within threshold + 5 s (%.2f s)" % seen)
    check(seen >= THRESHOLD - 0.5, "and not before the threshold (%.2f s)" % seen)
    a = mine[0]
    for k, v in (("op", "allreduce"), ("rank", "1"), ("comm", labels["comm"]),
                 ("pid", str(pid)), ("severity", "critical"), ("node", "gpu-test-node")):
        check(a["labels"].get(k) == v, "label %s=%s" % (k, v))
    summary = a["annotations"].get("summary", "")
    check("allreduce" in summary and "rank 1" in summary and labels["comm"] in summary,
          "summary names op, rank and communicator: %r" % summary)
    listed = json.loads(agent.get("/alerts"))
    check([x["state"] for x in listed if x["name"] == "NcclCollectiveStuck"] == ["firing"],
          "the agent's /alerts lists it firing")

    # Resolved once the collective completes.
    out, _ = hang.communicate(timeout=HANG_S + 10)
    t_done = time.time()
    check(hang.returncode == 0, "the rank finished its collective and exited 0")
    wait_for(lambda: not ours(am.alerts()), 8, "the alert to resolve in Alertmanager")
    check(time.time() - t_done <= 6,
          "resolved in Alertmanager %.2f s after the collective completed"
          % (time.time() - t_done))
    hook = wait_for(lambda: [d for _, d in recv.at("/hook")][1:] and
                    [d for _, d in recv.at("/hook")], 5, "the webhook's resolved POST")
    check([d["status"] for d in hook] == ["firing", "resolved"],
          "the webhook got one firing and one resolved POST: %s" % [d["status"] for d in hook])
    check(hook[0]["labels"]["comm"] == labels["comm"] and hook[0]["value"] > THRESHOLD,
          "webhook body: comm %s, value %.1f s" % (hook[0]["labels"]["comm"], hook[0]["value"]))
    m = agent.metrics()
    check(not [l for l, v in series(m, "sonde_nccl_stuck_seconds") if l["pid"] == str(pid)],
          "the stuck series is gone")
    check(value(m, "sonde_alerts_notifications_failed_total", sink="alertmanager") == 0 and
          value(m, "sonde_alerts_notifications_total", sink="webhook") == 2,
          "the agent counted 2 webhook POSTs and no failed Alertmanager POST")
except SystemExit:
    if agent:
        agent.dump_log()
    raise
finally:
    if hang and hang.poll() is None:
        hang.kill()
    if agent:
        agent.stop()
    am.stop()
    recv.close()
