#!/usr/bin/env python3
"""sonde agent --state: what an agent killed with -9 never shipped is
logged and counted by the next one. An agent profiling a workload ships
1 s windows with --state FILE; killed with SIGKILL, its file says it did
not stop cleanly; the agent started next with the same file logs the loss
and exports it (sonde_agent_ship_lost_seconds: what the first profiled
after its last acknowledged window, up to its last sign of life -- at
most about a window and a second). A clean stop (SIGINT) leaves nothing
to account for: the next agent reports 0. Two agents can't share one
file: the second says so and runs without it."""
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from agent_test import Agent, value, wait_for  # noqa: E402
from server_test import Server  # noqa: E402
from sonde_test import WL, check, need_bpf, skip, tmpdir  # noqa: E402

need_bpf()
prog = os.path.join(WL, "shares")
if not os.access(prog, os.X_OK):
    skip("%s is not built (make workloads)" % prog)

srv = Server(os.path.join(tmpdir(), "data"))
state = os.path.join(tmpdir(), "agent.state")
url = "http://127.0.0.1:%d" % srv.port
args = ["--no-gpu", "-F", "99", "--window", "1", "--server", url, "--state", state]
work = subprocess.Popen([prog, "30"], stdout=subprocess.DEVNULL)
agents = []
try:
    a = Agent(args)
    agents.append(a)
    wait_for(lambda: value(a.metrics(), "sonde_agent_ship_requests_total") >= 3, 30,
             "three windows acknowledged")
    other = Agent(["--no-gpu", "-F", "49", "--window", "1", "--server", url, "--state", state])
    agents.append(other)
    wait_for(lambda: any("state file" in line and "in use" in line for line in other.log), 10,
             "the second agent on the same --state to say it is in use")
    other.stop()
    check(True, "a second agent on the same --state says it is in use and runs on")

    a.p.send_signal(signal.SIGKILL)
    a.p.wait(10)
    with open(state) as f:
        text = f.read()
    check("clean=0" in text, "the killed agent's state says it did not stop cleanly (%r)" % text)
    b = Agent(args)
    agents.append(b)
    m = wait_for(lambda: (lambda m: m if ("sonde_agent_ship_lost_seconds", ()) in m else None)(
        b.metrics()), 10, "the next agent's metrics")
    lost = value(m, "sonde_agent_ship_lost_seconds")
    check(0 < lost <= 1 + 1 + 1.5,
          "the next agent counts what the killed one never sent: %.2f s (at most a window, "
          "a second of heartbeat and a margin)" % lost)
    check(any("stopped without shutting down" in line for line in b.log),
          "and logs it")
    rc = b.stop(timeout=60)
    with open(state) as f:
        text = f.read()
    check(rc == 0 and "clean=1" in text,
          "the next agent stops on SIGINT (rc %s) and its state says so (%r)" % (rc, text))
    c = Agent(args)
    agents.append(c)
    m = wait_for(lambda: (lambda m: m if ("sonde_agent_ship_lost_seconds", ()) in m else None)(
        c.metrics()), 10, "the metrics after a clean stop")
    check(value(m, "sonde_agent_ship_lost_seconds") == 0 and
          not any("stopped without shutting down" in line for line in c.log),
          "after a clean stop nothing is reported lost (%s s; %s)"
          % (value(m, "sonde_agent_ship_lost_seconds"),
             [line for line in c.log if "state" in line or "lost" in line][:2]))
finally:
    for ag in agents:
        if ag.p.poll() is None:
            ag.stop()
    work.kill()
    work.wait()
    srv.stop()
