"""Alert rules from a file, in real time, through the harness (the engine as
`sonde agent --rules FILE` runs it):

1. bad rule files are refused with "FILE:LINE: reason" and a non-zero exit;
2. a rule with `for: 1s`, labels and templates, over two processes, sends a
   webhook exactly one firing and one resolved POST per process, at the right
   moments, with rendered summaries;
3. a webhook that hangs and one that refuses connections neither delay the
   evaluation ticks nor a healthy webhook; their failures are counted.
Everything on 127.0.0.1."""
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "alerts"))
from alerts_helpers import (Harness, Receiver, check, ensure_harness, fail,  # noqa: E402
                            free_port)
from sonde_test import tmpdir  # noqa: E402

BAD = [
    ("rules:\n  - alert: A\n    expr: x > 1\n    sumary: hi\n",
     "4: unknown key `sumary` in a rule -- did you mean `summary`?"),
    ("rules:\n  - alert: A\n    for: 5m\n", "2: rule `A` has no `expr:`"),
    ("rules:\n  - alert: A\n    expr: x > 1\n    for: 5x\n",
     "4: bad duration `5x` in `for`: use seconds or a number and a unit, e.g. 30s, 5m, 1h30m"),
    ("rules:\n  - alert: A\n    expr: gpu_mem{pid=\"1\"} >> 0.9\n",
     "3:29: bad expression: unexpected `>`: expected a metric, a number or `(`"),
    ("rules:\n\t- alert: A\n", "2: tab in the indentation: YAML indents with spaces"),
    ("- alert: A\n  expr: x > 1\n",
     "1: the top level must be a mapping with a `rules:` list, not a list"),
    ("rules:\n  - alert: A\n    expr: x > 1\n    summary: '{{ $value | humanise }}'\n",
     "4: bad template in annotation `summary`: unknown function `humanise`"),
]

RULES = """\
rules:
  - alert: GpuMemoryHigh
    expr: gpu_mem_ratio{gpu_id=~"0|1"} > 0.9
    for: 1s
    labels:
      team: ml
    severity: warning
    summary: "pid {{ $labels.pid }} uses {{ $value | humanizePercentage }} of GPU {{ $labels.gpu_id }}"
"""

SCRIPT = """\
0 set gpu_mem_ratio 0.95 pid=1 gpu_id=0
0 set gpu_mem_ratio 0.97 pid=2 gpu_id=1
0 set gpu_mem_ratio 0.99 pid=3 gpu_id=7
3000 set gpu_mem_ratio 0.5 pid=1 gpu_id=0
5000 del gpu_mem_ratio pid=2 gpu_id=1
6500 end
"""


def bad_files():
    harness = ensure_harness()
    d = tmpdir()
    for i, (text, want) in enumerate(BAD):
        path = os.path.join(d, "bad%d.yml" % i)
        with open(path, "w") as f:
            f.write(text)
        p = subprocess.run([harness, "--check", "--rules", path], capture_output=True,
                           text=True, timeout=30)
        first = p.stderr.splitlines()[0] if p.stderr else ""
        check(p.returncode != 0 and first.startswith("%s:%s" % (path, want)),
              "%s refused: %s" % (os.path.basename(path), first))
    p = subprocess.run([harness, "--check", "--rules", os.path.join(d, "missing.yml")],
                       capture_output=True, text=True, timeout=30)
    check(p.returncode != 0 and "can't read the rule file: No such file" in p.stderr,
          "a missing file is refused: " + p.stderr.strip())
    good = os.path.join(d, "good.yml")
    with open(good, "w") as f:
        f.write(RULES)
    p = subprocess.run([harness, "--check", "--rules", good], capture_output=True, text=True,
                       timeout=30)
    rules = json.loads(p.stdout)["rules"] if p.returncode == 0 else []
    check(len(rules) == 1 and rules[0]["for"] == "1s", "the good file loads: %s" % rules)


def real_time():
    d = tmpdir()
    rules = os.path.join(d, "rules.yml")
    with open(rules, "w") as f:
        f.write(RULES)
    recv = Receiver()
    try:
        h = Harness(["--rules", rules, "--webhook", recv.url + "/hook", "--tick", "100",
                     "--node", "node-a"], SCRIPT)
        end = h.wait(60)
        t0 = h.start_epoch
        posts = recv.at("/hook")
        for t, doc in posts:
            print("%.2f s %s %s %s" % (t - t0, doc["status"], doc["labels"].get("pid"),
                                       doc["annotations"].get("summary")))
        by = {}
        for t, doc in posts:
            by.setdefault(doc["labels"]["pid"], []).append((t - t0, doc))
        check(sorted(by) == ["1", "2"], "alerts for pid 1 and 2 only (gpu_id 7 not matched)")
        for pid, until in (("1", 3.0), ("2", 5.0)):
            seq = by[pid]
            check([d["status"] for _, d in seq] == ["firing", "resolved"],
                  "pid %s: one firing then one resolved" % pid)
            (tf, f), (tr, r) = seq
            check(0.95 <= tf <= 1.0 + 1.5, "pid %s fired after `for: 1s` (%.2f s)" % (pid, tf))
            check(until - 0.05 <= tr <= until + 1.5,
                  "pid %s resolved when its series stopped (%.2f s)" % (pid, tr))
            check(f["labels"]["team"] == "ml" and f["labels"]["severity"] == "warning" and
                  f["labels"]["alertname"] == "GpuMemoryHigh" and
                  f["labels"]["node"] == "node-a", "pid %s labels: %s" % (pid, f["labels"]))
        f = by["1"][0][1]
        check(f["annotations"]["summary"] == "pid 1 uses 95% of GPU 0",
              "summary rendered: %r" % f["annotations"]["summary"])
        check(by["2"][0][1]["annotations"]["summary"] == "pid 2 uses 97% of GPU 1",
              "second summary rendered")
        check(abs(f["value"] - 0.95) < 1e-9, "value 0.95")
        st = end["stats"]
        check(st["notifications"]["webhook"] == 4 and st["notifications_failed"]["webhook"] == 0,
              "engine counted 4 delivered POSTs")
        # The alerts view over time: pending first, then firing.
        states = [[(a["labels"]["pid"], a["state"]) for a in e["alerts"]]
                  for e in h.of("alerts")]
        check(sorted(states[0]) == [("1", "pending"), ("2", "pending")],
              "both pending first: %s" % states[0])
        check(any(sorted(s) == [("1", "firing"), ("2", "firing")] for s in states),
              "then both firing")
        check(states[-1] == [], "none left at the end")
    finally:
        recv.close()


def failing_sinks():
    recv = Receiver(hang=("/hang",), hang_s=20)
    closed = "http://127.0.0.1:%d/refused" % free_port()
    try:
        rules = os.path.join(tmpdir(), "rules.yml")
        with open(rules, "w") as f:
            f.write("rules:\n  - alert: X\n    expr: x > 1\n")
        h = Harness(["--webhook", recv.url + "/hang", "--webhook", closed,
                     "--webhook", recv.url + "/good", "--timeout", "1000", "--retries", "1",
                     "--backoff", "100", "--tick", "50", "--rules", rules],
                    "0 set x 5 pid=1\n1500 del x pid=1\n3000 end\n")
        end = h.wait(60)
        t0 = h.start_epoch
        good = recv.at("/good")
        check([d["status"] for _, d in good] == ["firing", "resolved"],
              "the healthy webhook got both notifications")
        check(good[0][0] - t0 < 0.5,
              "without waiting for the hanging one (%.2f s)" % (good[0][0] - t0))
        check(end["max_tick_late_ms"] < 100,
              "evaluation ticks never late by 100 ms (max %d ms)" % end["max_tick_late_ms"])
        st = end["stats"]
        check(st["notifications"]["webhook"] == 2, "2 delivered: %s" % st)
        check(st["notifications_failed"]["webhook"] == 4,
              "4 failed (2 timed out, 2 refused): %s" % st["notifications_failed"])
        check(len(recv.at("/hang")) == 4,
              "the hanging receiver saw each notification tried twice (%d)"
              % len(recv.at("/hang")))
        check("can't deliver an alert notification to webhook " + closed in h.stderr,
              "the refused delivery is logged")
    finally:
        recv.close()


bad_files()
real_time()
failing_sinks()
