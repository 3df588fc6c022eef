#!/usr/bin/env python3
"""The server killed with -9 mid-ingest, under many agents at once: while
simulated agents (loadgen.py) ship keyed windows, `sonde server` gets
SIGKILL with requests in flight (the agents post in bursts, all at once,
and the kill comes when half of them are in flight), and starts again on the same address and
--data; the agents send again what was not acknowledged. Afterwards every
acknowledged window is there exactly once with its exact total (a window
stored but not acknowledged before the kill, then sent again, is
deduplicated by its key), every window made is acknowledged in the end,
and none is refused. Figures: windows in flight at each kill, the time
from the kill to the first acknowledgement of the new server.

(test_server_crash.py does it for one client in sequence on SQLite,
test_server_clickhouse_faults.py on ClickHouse.)

Short form: 30 agents, 1 s windows, 2 kills 60 acknowledgements apart.
The campaign's: KILL_AGENTS=200 KILL_WINDOW=10 KILL_ROUNDS=3
KILL_AFTER=600."""
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from faults_test import check_verified, figures, param, restart_server  # noqa: E402
from loadgen import LoadGen, ProcWatch  # noqa: E402
from server_test import Server  # noqa: E402
from sonde_test import check, free_port, tmpdir, wait_until  # noqa: E402

AGENTS = param("KILL_AGENTS", 30)
WINDOW = param("KILL_WINDOW", 1.0)
ROUNDS = param("KILL_ROUNDS", 2)
AFTER = param("KILL_AFTER", 60)

data = tmpdir()
port = free_port()
srv = Server(data, listen="127.0.0.1:%d" % port)
watch = ProcWatch(srv.p.pid)
lg = LoadGen(port, AGENTS, WINDOW, stagger=False)
rounds = []
try:
    for rnd in range(ROUNDS):
        n0 = lg.acked()
        wait_until(lambda: lg.acked() >= n0 + AFTER, 60 + AFTER * WINDOW / AGENTS * 4,
                   "%d more windows acknowledged" % AFTER, step=0.05)
        wait_until(lambda: lg.in_flight >= AGENTS // 2, 10 + 2 * WINDOW,
                   "a burst of requests in flight", step=0.001)
        in_flight = lg.in_flight
        t_kill = time.time()
        srv.p.send_signal(signal.SIGKILL)
        srv.p.wait(10)
        acked_at_kill = lg.acked()
        srv = restart_server(data, port)
        t_up = time.time()
        watch.switch(srv.p.pid)
        wait_until(lambda: lg.acked() > acked_at_kill, 60,
                   "a window acknowledged by the new server")
        t_ack = time.time()
        rounds.append({"acked_before": acked_at_kill, "requests_in_flight": in_flight,
                       "restart_s": round(t_up - t_kill, 2),
                       "kill_to_first_ack_s": round(t_ack - t_kill, 2)})
        print("round %d: %s" % (rnd, rounds[-1]))
    n0 = lg.acked()
    wait_until(lambda: lg.acked() >= n0 + AFTER, 60 + AFTER * WINDOW / AGENTS * 4,
               "the stream going on after the last restart", step=0.05)
    unsent = lg.stop(drain_s=60)
    server = watch.stop()
    f = lg.figures()
    v = lg.verify(srv.get_json)
    figures("server_kill", dict(f, rounds=rounds, verify=v,
                                server_cpu_pct=round(server["cpu_pct"], 1),
                                server_rss_max_mb=round(server["rss_max_mb"], 1)))
    check(not f["crashed"], "the load generator ran to its end (%s)" % f["crashed"])
    check(unsent == 0 and f["acknowledged"] == f["windows"],
          "every window made was acknowledged in the end (%d of %d)" % (f["acknowledged"],
                                                                         f["windows"]))
    check(f["rejected"] == 0, "no window refused: %d" % f["rejected"])
    check(f["retried_windows"] > 0, "%d windows were sent again after the kills" %
          f["retried_windows"])
    print("%d acknowledgements said the window was stored already (answers lost in the kill)"
          % f["duplicate_acks"])
    check_verified(v, "after %d kills" % ROUNDS)
finally:
    lg.stop(drain_s=0)
    srv.stop()
