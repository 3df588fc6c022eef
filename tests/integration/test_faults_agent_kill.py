#!/usr/bin/env python3
"""An agent killed with -9 and started again: the real `sonde agent`
profiles a CPU-bound workload (build/workloads/shares) and ships its
windows to a real `sonde server`; the agent gets SIGKILL in the middle of
a window and is started again with the same arguments. What it had not
shipped -- the window under way and any queued -- is lost, and nothing
else: the server's time series of the workload (in steps of 100 ms) has
one hole, from the end of the last window the first agent shipped to the
start of the second agent's first window, no longer than a window plus the
time the new agent took to start (and a margin); before and after it the
samples are there, and no step holds more than the workload could make
(no window twice). Figures: the hole, and its parts -- what was not
shipped (kill time less the end of the last window shipped) and the
restart (the new agent's first window less the kill).

And the new agent says what the killed one lost, from the state the
shipper keeps (`--state FILE`, commit 5bdea0e): a log line naming the
previous agent, and sonde_agent_ship_lost_seconds within 2.5 s of the
hole's part before the kill (the state is written every 2 s or so).

Short form: --window 1, -F 99, killed twice. The campaign's:
AGENTKILL_WINDOW=10 AGENTKILL_ROUNDS=5 (killed at a random point of a
window)."""
import os
import random
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from agent_test import Agent, value  # noqa: E402
from faults_test import figures, param  # noqa: E402
from server_test import Server  # noqa: E402
from sonde_test import WL, check, need_bpf, skip, tmpdir, wait_until  # noqa: E402

WINDOW = param("AGENTKILL_WINDOW", 1)
ROUNDS = param("AGENTKILL_ROUNDS", 2)
FREQ = 99
STEP_MS = 100

need_bpf()
prog = os.path.join(WL, "shares")
if not os.access(prog, os.X_OK):
    skip("%s is not built (make workloads)" % prog)
srv = Server(tmpdir())
node = "agentkill-%d" % os.getpid()
# The workload burns one CPU until the test ends (its CPU seconds, more
# than the test can last).
work = subprocess.Popen([prog, "100000"])
args = ["--no-gpu", "-F", str(FREQ), "--window", str(WINDOW), "--node", node, "-p",
        str(work.pid), "--server", "http://127.0.0.1:%d" % srv.port]
args += ["--state", os.path.join(tmpdir(), "agent.state")]
agent = None
rounds = []
said = []  # per restart: (log lines, metrics) where the new agent says what was lost
r = random.Random(os.getpid())
try:
    t_begin = int(time.time() * 1000)
    agent = Agent(args)

    def shipped(a, n):
        return lambda: value(a.metrics(), "sonde_agent_ship_requests_total") >= n

    for rnd in range(ROUNDS):
        wait_until(shipped(agent, 3), 30 + 4 * WINDOW, "3 windows shipped", step=0.05)
        # Somewhere in the middle of a window: the agent's windows start
        # when it starts; the metrics say nothing finer, so wait a
        # random part of a window after a shipment was counted.
        n = value(agent.metrics(), "sonde_agent_ship_requests_total")
        wait_until(shipped(agent, n + 1), 10 + 2 * WINDOW, "one more window shipped",
                   step=0.01)
        time.sleep(WINDOW * (0.2 + 0.6 * r.random()))  # a point in the window, not a wait
        t_kill = time.time() * 1000
        agent.p.send_signal(signal.SIGKILL)
        agent.p.wait(10)
        agent = Agent(args)
        t_ready = time.time() * 1000
        rounds.append({"kill_ms": t_kill, "ready_ms": t_ready})
        # What the new agent says of the one before, once it has started.
        lost = wait_until(lambda: value(agent.metrics(), "sonde_agent_ship_lost_seconds"), 10,
                          "the new agent's sonde_agent_ship_lost_seconds")
        said.append(([l for l in agent.log if "previous agent" in l], lost))
    wait_until(shipped(agent, 3), 30 + 4 * WINDOW, "3 windows shipped after the last restart",
               step=0.05)
    agent.stop()
    agent = None
    t_end = int(time.time() * 1000)
    ts = srv.get_json("/api/v1/timeseries", query='{node="%s",type="cpu"}' % node,
                      step=STEP_MS, **{"from": t_begin, "until": t_end})
    vals = ts["values"]
    start = ts["start_ms"]
    nz = [i for i, x in enumerate(vals) if x > 0]
    check(nz, "the workload's samples reached the server")
    # Holes: runs of empty steps between the first and the last step with
    # samples, longest first.
    holes = []
    i = nz[0]
    while i <= nz[-1]:
        if vals[i] == 0:
            j = i
            while vals[j] == 0:
                j += 1
            holes.append((start + i * STEP_MS, start + j * STEP_MS))
            i = j
        else:
            i += 1
    print("holes (ms from the first sample): %s" % [(a - start - nz[0] * STEP_MS,
                                                       b - a) for a, b in holes])
    per_step = FREQ * STEP_MS / 1000.0
    check(max(vals) <= per_step * 1.5 + 2,
          "no step holds more samples than one CPU at %d Hz makes (%g in %d ms): no window "
          "twice" % (FREQ, max(vals), STEP_MS))
    for k, rd in enumerate(rounds):
        # The hole around this kill: the one that covers the kill time.
        h = [x for x in holes if x[0] - STEP_MS <= rd["kill_ms"] <= x[1] + STEP_MS]
        check(h, "round %d: a hole where the agent was killed" % k)
        a, b = h[0]
        rd.update(hole_ms=b - a, unshipped_ms=round(rd["kill_ms"] - a),
                  restart_ms=round(b - rd["kill_ms"]),
                  ready_after_kill_ms=round(rd["ready_ms"] - rd["kill_ms"]))
        bound = WINDOW * 1000 + rd["ready_after_kill_ms"] + 1500
        check(rd["hole_ms"] <= bound,
              "round %d: the hole (%d ms) is at most a window, the restart (%d ms) and a "
              "margin: %d ms" % (k, rd["hole_ms"], rd["ready_after_kill_ms"], bound))
        check(rd["unshipped_ms"] <= WINDOW * 1000 + 2 * STEP_MS + 500,
              "round %d: what was lost before the kill (%d ms) is at most the window under "
              "way" % (k, rd["unshipped_ms"]))
    # Between the holes, the workload was sampled: steps without samples
    # outside the holes around the kills would be losses too.
    other = [x for x in holes
             if not any(x[0] - STEP_MS <= rd["kill_ms"] <= x[1] + STEP_MS for rd in rounds)]
    check(sum(b - a for a, b in other) <= 1000,
          "no other hole longer than a second in all (%s)" % other[:5])
    for k, (lines, lost) in enumerate(said):
        rounds[k]["said_lost_s"] = lost
    figures("agent_kill", {"window_s": WINDOW, "freq": FREQ, "rounds": rounds,
                           "other_holes_ms": sum(b - a for a, b in other),
                           "said": [x[0][:1] for x in said]})
    for k, (lines, lost) in enumerate(said):
        check(lines, "round %d: the new agent logs what the killed one lost: %s" %
              (k, lines[:1]))
        check(abs(lost - rounds[k]["unshipped_ms"] / 1000.0) <= 2.5,
              "round %d: it counts %.2f s lost (sonde_agent_ship_lost_seconds), the hole "
              "before the kill being %.2f s" % (k, lost, rounds[k]["unshipped_ms"] / 1000.0))
finally:
    if agent:
        agent.p.kill()
    work.kill()
    work.wait()
    srv.stop()
