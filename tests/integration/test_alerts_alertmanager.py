"""The stuck-collective alert reaches a real Alertmanager within threshold + 5 s
of the collective getting stuck, names op, rank and communicator, keeps its
startsAt across re-sends, and resolves in Alertmanager when the collective
completes; a plain webhook meanwhile receives exactly one firing and one
resolved POST. Everything on 127.0.0.1.

The default rules run with the stuck threshold lowered to 2 s; the series
sonde_nccl_stuck_seconds counts up from 0 like the agent's does while a thread
waits after a collective, and disappears when the wait ends (at 9 s)."""
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "alerts"))
from alerts_helpers import Alertmanager, Harness, Receiver, check, fail  # noqa: E402

THRESHOLD = 2
STUCK_FROM, STUCK_UNTIL, END = 0, 9, 16
LABELS = "pid=4242 op=allreduce rank=3 comm=0x7f00deadbeef"
SCRIPT = ("%d ramp sonde_nccl_stuck_seconds %s\n"
          "%d del sonde_nccl_stuck_seconds %s\n"
          "%d end\n" % (STUCK_FROM * 1000, LABELS, STUCK_UNTIL * 1000, LABELS, END * 1000))


def instant(ts):
    """An RFC 3339 time ("2024-05-01T12:00:02.1Z") as ms since the epoch."""
    import datetime
    head, _, frac = ts.rstrip("Z").partition(".")
    t = datetime.datetime.strptime(head, "%Y-%m-%dT%H:%M:%S").replace(
        tzinfo=datetime.timezone.utc)
    return int(t.timestamp()) * 1000 + int((frac + "000")[:3])


def ours(alerts):
    return [a for a in alerts if a["labels"].get("alertname") == "NcclCollectiveStuck"]


def main():
    recv = Receiver()
    am = Alertmanager(recv.url + "/am")
    h = None
    try:
        h = Harness(["--nccl-stuck", str(THRESHOLD), "--alertmanager", am.url,
                     "--webhook", recv.url + "/hook", "--resend", "1000", "--tick", "100"],
                    SCRIPT)
        t0 = h.start_epoch + STUCK_FROM

        # (a) firing, in Alertmanager's own API.
        seen = None
        starts = set()
        while time.time() < t0 + THRESHOLD + 5 + 1:
            mine = ours(am.alerts())
            if mine:
                seen = time.time()
                break
            time.sleep(0.1)
        if not seen:
            fail("the alert never reached Alertmanager; its log:\n" + am.log_text())
        print("in Alertmanager %.2f s after the collective got stuck" % (seen - t0))
        check(seen - t0 <= THRESHOLD + 5,
              "alert in Alertmanager within threshold + 5 s (%.2f s)" % (seen - t0))
        check(seen - t0 >= THRESHOLD - 0.2, "and not before the threshold (%.2f s)" % (seen - t0))
        a = mine[0]
        print(a)
        for k, v in (("op", "allreduce"), ("rank", "3"), ("comm", "0x7f00deadbeef"),
                     ("pid", "4242"), ("severity", "critical")):
            check(a["labels"].get(k) == v, "label %s=%s" % (k, v))
        summary = a["annotations"].get("summary", "")
        check("allreduce" in summary and "rank 3" in summary and "0x7f00deadbeef" in summary,
              "summary names op, rank and communicator: %r" % summary)
        check(a["status"]["state"] == "active", "state active")
        check(a.get("generatorURL", "").endswith("/alerts"), "generatorURL set")

        # Re-sent every second while firing: startsAt never moves.
        while time.time() < h.start_epoch + STUCK_UNTIL - 0.5:
            for x in ours(am.alerts()):
                starts.add(x["startsAt"])
            time.sleep(0.25)
        check(len(starts) == 1, "startsAt unchanged across re-sends: %s" % sorted(starts))

        # (b) resolution: gone from the active alerts, and AM's webhook says resolved.
        gone = None
        while time.time() < h.start_epoch + STUCK_UNTIL + 8:
            if not ours(am.alerts()):
                gone = time.time()
                break
            time.sleep(0.1)
        if not gone:
            fail("the alert is still active in Alertmanager 8 s after it resolved: %s"
                 % ours(am.alerts()))
        check(gone - (h.start_epoch + STUCK_UNTIL) <= 5,
              "resolved in Alertmanager %.2f s after the collective completed"
              % (gone - h.start_epoch - STUCK_UNTIL))
        end = h.wait(60)
        print(end)

        am_posts = recv.at("/am")
        firing = [d for _, d in am_posts if d.get("status") == "firing"
                  and ours(d.get("alerts", []))]
        resolved = [(t, d) for t, d in am_posts if d.get("status") == "resolved"
                    and ours(d.get("alerts", []))]
        check(len(firing) == 1,
              "Alertmanager notified its receiver once while firing (%d)" % len(firing))
        check(resolved, "Alertmanager's webhook delivered status resolved")
        r = ours(resolved[0][1]["alerts"])[0]
        check(r["status"] == "resolved" and not r["endsAt"].startswith("0001"),
              "its alert is resolved with endsAt %s" % r["endsAt"])
        # Alertmanager writes times as Go's RFC 3339 with nanoseconds, trailing
        # zeros trimmed ("...28.36Z" for "...28.360Z"): compare the instants.
        check(instant(r["startsAt"]) == instant(next(iter(starts))),
              "same startsAt as while firing")

        stats = end["stats"]
        check(stats["notifications"]["alertmanager"] >= 6,
              "Alertmanager got re-sends (%d POSTs)" % stats["notifications"]["alertmanager"])
        check(stats["notifications_failed"]["alertmanager"] == 0, "no failed AM POST")

        # The plain webhook: exactly one firing and one resolved.
        hook = [d for _, d in recv.at("/hook")]
        print(hook)
        check([d["status"] for d in hook] == ["firing", "resolved"],
              "webhook got exactly one firing then one resolved POST")
        check(all(c == "application/json" for c in recv.content_types("/hook")),
              "Content-Type application/json")
        f, res = hook
        check(f["alert"] == "NcclCollectiveStuck" and f["labels"]["rank"] == "3",
              "webhook body names the alert and its labels")
        check(f["endsAt"] is None and res["endsAt"], "endsAt null while firing, set resolved")
        check(instant(f["startsAt"]) == instant(res["startsAt"]) == instant(next(iter(starts))),
              "webhook startsAt matches Alertmanager's")
        check(f["value"] > THRESHOLD, "value %s above the threshold" % f["value"])
        check("allreduce" in f["annotations"]["summary"], "webhook summary rendered")
        check(stats["notifications"]["webhook"] == 2 and
              stats["notifications_failed"]["webhook"] == 0, "engine counted 2 webhook POSTs")
        firing_lines = [e for e in h.of("notification")
                        if e["notification"]["status"] == "firing"]
        check(len(firing_lines) == 1, "one firing notification over %d evaluations"
              % stats["evals"])
    finally:
        if h:
            h.kill()
        am.stop()
        recv.close()


main()
