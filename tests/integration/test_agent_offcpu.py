"""sonde agent --offcpu --server: the agent ships an "offcpu" profile each
window beside "cpu", and the server shows it like any type: the type's
label values list it (the UI's type picker), /api/v1/top of
{service_name=...,type="offcpu"} has unit nanoseconds, a total within
10 % of the time the workload (tests/workloads/offcpu.c, 30 ms and 10 ms
waits) measured it blocked, and block_long and block_short at 75/25 within
5 points. The agent serves the last window at /profile/offcpu and its
counters on /metrics (sonde_agent_offcpu_*, none dropped). Without
--offcpu there is no offcpu profile."""
import os
import re
import subprocess
import time

from agent_test import Agent, value, wait_for
from server_test import Server
from sonde_test import *

need_bpf()

srv = Server(os.path.join(tmpdir(), "data"))
a = None
try:
    a = Agent(["--no-gpu", "--offcpu", "-F", "49", "--window", "1", "--node", "offcpu-test",
               "--server", "http://127.0.0.1:%d" % srv.port])
    check(any("off-CPU" in l for l in a.log), "the agent says it profiles off-CPU time")
    # The agent builds the unwind tables of a file when a stack first
    # goes through it: a first run of the workload, under a service name of
    # its own, has them built (libc, the workload) before the one measured.
    t0 = int(time.time() * 1000)
    env = dict(os.environ, SONDE_SERVICE="offcpu-warmup")
    subprocess.run([os.path.join(WL, "offcpu"), "1"], capture_output=True, timeout=60, env=env)
    wait_for(lambda: srv.get_json("/api/v1/top", query='{service_name="offcpu-warmup"}',
                                  **{"from": t0 - 2000, "until": "now"})["total"] > 0,
             30, "the warm-up run's profiles to reach the server")
    env = dict(os.environ, SONDE_SERVICE="offcpu-measured")
    w = subprocess.run([os.path.join(WL, "offcpu"), "3"], capture_output=True, text=True,
                       timeout=60, env=env)
    check(w.returncode == 0, "the workload ran")
    m = re.search(r"blocked_ns long=(\d+) short=(\d+)", w.stdout)
    truth = int(m.group(1)) + int(m.group(2))
    sel = '{service_name="offcpu-measured",type="offcpu",node="offcpu-test"}'

    # Every window with the workload in it cut and sent: two windows more
    # than when it ended, and the agent's queue empty.
    last = value(a.metrics(), "sonde_agent_profile_windows_total") + 2
    wait_for(lambda: (lambda m: value(m, "sonde_agent_profile_windows_total") >= last and
                      value(m, "sonde_agent_ship_queue") == 0)(a.metrics()),
             30, "the windows of the workload to be sent")
    top = srv.get_json("/api/v1/top", query=sel, limit=1000,
                       **{"from": t0 - 2000, "until": "now"})
    check(top["unit"] == "nanoseconds", "unit nanoseconds (%s)" % top["unit"])
    check(abs(top["total"] - truth) <= 0.1 * truth,
          "the server holds %.3f s off-CPU, within 10 %% of the %.3f s the workload measured"
          % (top["total"] / 1e9, truth / 1e9))
    funcs = {f["name"]: f for f in top["functions"]}
    for func, want in (("block_long", 75.0), ("block_short", 25.0)):
        got = 100.0 * funcs.get(func, {}).get("total", 0) / top["total"]
        check(abs(got - want) <= 5.0, "%s: %.1f%% of it, within 5 points of %.0f%%"
              % (func, got, want))
    got = 100.0 * funcs.get("main", {}).get("total", 0) / top["total"]
    check(got >= 98, "%.1f%% of it is under main" % got)
    types = srv.get_json("/api/v1/label/values", name="type",
                         **{"from": t0 - 2000, "until": "now"})["values"]
    check("offcpu" in types and "cpu" in types,
          "the type label's values (the UI's picker) list offcpu beside cpu: %s" % types)

    body = a.get("/profile/offcpu")
    check(len(body) > 0 and body[:2] == b"\x1f\x8b", "/profile/offcpu serves a gzip pprof")
    m = a.metrics()
    events = value(m, "sonde_agent_offcpu_events_total")
    check(events is not None and events >= 2 * 60,
          "sonde_agent_offcpu_events_total counts the waits (%s)" % events)
    check(value(m, "sonde_agent_offcpu_seconds_total") >= truth / 1e9 * 0.9,
          "sonde_agent_offcpu_seconds_total has their time")
    # The agent watches the whole machine: the rate bound is shared with
    # every other process's waits, and may drop some of theirs on a busy
    # machine (the workload's time above is whole); each is counted.
    drops = {r: value(m, "sonde_agent_offcpu_dropped_total", reason=r)
             for r in ("rate", "ringbuf", "storage")}
    check(all(v is not None for v in drops.values()) and
          value(m, "sonde_agent_offcpu_dropped_seconds_total") is not None,
          "the drops are counted by reason, with their time: %s, %.3f s" %
          (drops, value(m, "sonde_agent_offcpu_dropped_seconds_total") or 0))
    check(drops["ringbuf"] == 0, "none lost to the ring buffer")
    check(value(m, "sonde_agent_profile_last_window_total", type="offcpu") is not None,
          "the last window's total by type includes offcpu")
finally:
    if a:
        a.stop()

# Without --offcpu: no such profile, no such series.
a = Agent(["--no-gpu", "-F", "49", "--window", "1"])
try:
    wait_for(lambda: value(a.metrics(), "sonde_agent_profile_windows_total") >= 1, 15,
             "a window")
    m = a.metrics()
    check(value(m, "sonde_agent_offcpu_events_total") is None,
          "without --offcpu the agent has no off-CPU series")
    import urllib.error
    try:
        a.get("/profile/offcpu")
        fail("/profile/offcpu answered without --offcpu")
    except urllib.error.HTTPError as e:
        check(e.code == 503, "/profile/offcpu is 503 without --offcpu (%d)" % e.code)
finally:
    a.stop()
    srv.stop()
