#!/usr/bin/env python3
"""ClickHouse killed with -9 and started again under many agents: while
simulated agents (loadgen.py) ship keyed windows to a `sonde server
--store clickhouse://...`, ClickHouse (tests/integration/clickhouse.py, on
loopback) is killed; the server must answer 503 with Retry-After and
acknowledge nothing meanwhile, say so at /healthz and in its log (a few
lines per 10 s, not one per request: commit 1783ef3), and once ClickHouse
is started again on the same data the agents' retries go through by
themselves. Afterwards every
acknowledged window is there exactly once with its exact total. Figures:
the outage, what the server answered, the time from ClickHouse's restart
until the agents' queues are empty.

(test_server_clickhouse_faults.py does it for one client in sequence.)

Short form: 20 agents, 1 s windows, ClickHouse away for 40 refused
tries. The campaign's: CHKILL_AGENTS=200 CHKILL_WINDOW=10
CHKILL_FAILS=400."""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from clickhouse import ClickHouse  # noqa: E402
from faults_test import check_verified, figures, param  # noqa: E402
from loadgen import LoadGen  # noqa: E402
from server_test import Server  # noqa: E402
from sonde_test import check, tmpdir, wait_until  # noqa: E402

AGENTS = param("CHKILL_AGENTS", 20)
WINDOW = param("CHKILL_WINDOW", 1.0)
FAILS = param("CHKILL_FAILS", 2 * AGENTS)

ch = ClickHouse()
srv = Server(tmpdir(), ["--store", ch.url("chkill")])
lg = None
try:
    t_begin = time.time()
    lg = LoadGen(srv.port, AGENTS, WINDOW)
    wait_until(lambda: lg.acked() >= 2 * AGENTS, 90, "windows stored before the kill")
    log0 = len(srv.lines)
    ch.kill()
    t_kill = time.time()
    n_kill = lg.acked()
    refused0 = sum(v for k, v in lg.statuses.items() if k != 200)
    wait_until(lambda: sum(v for k, v in lg.statuses.items() if k != 200) >= refused0 + FAILS,
               60 + FAILS * 2, "%d ingests refused while ClickHouse is away" % FAILS,
               step=0.05)
    st, h, _ = srv.get("/healthz")
    acked_while_down = lg.acked() - n_kill
    refusals = {k: v for k, v in lg.statuses.items() if k != 200}
    down_lines = srv.lines[log0:]
    ch.start()
    t_up = time.time()
    down_s = t_up - t_kill
    n_up = lg.acked()
    wait_until(lambda: lg.acked() >= n_up + AGENTS and lg.queued() <= AGENTS, 90,
               "the stream going on once ClickHouse is back")
    first_s = time.time() - t_up
    unsent = lg.stop(drain_s=90)
    drained_s = time.time() - t_up
    t_end = time.time()
    f = lg.figures()
    v = lg.verify(srv.get_json)
    figures("clickhouse_kill", dict(f, verify=v, down_s=round(down_s, 1),
                                    acked_while_down=acked_while_down,
                                    refusals_while_down=refusals, healthz_while_down=st,
                                    log_lines_while_down=len(down_lines),
                                    log_while_down=down_lines[:3],
                                    up_to_stream_s=round(first_s, 1),
                                    up_to_drained_s=round(drained_s, 1),
                                    latency_before=lg.latency_between(t_begin, t_kill),
                                    latency_after=lg.latency_between(t_up, t_end)))
    # At most one window each in flight at the kill may have been
    # acknowledged by a server that had already sent it to ClickHouse.
    check(acked_while_down <= AGENTS, "nothing is acknowledged while ClickHouse is away "
          "(%d acknowledged after the kill, %d agents)" % (acked_while_down, AGENTS))
    check(503 in refusals, "the server answers 503 meanwhile (%s)" % refusals)
    check(st == 503, "/healthz says the store is failing (%d)" % st)
    check(all(k == 503 for k in refusals) and
          lg.retry_after.get(503) == lg.statuses.get(503),
          "every refusal a 503 with Retry-After (%s while away; %s 503s in all, %s with "
          "Retry-After)" % (refusals, lg.statuses.get(503), lg.retry_after.get(503)))
    check(down_lines and len(down_lines) <= 4 + 2 * down_s / 10,
          "ClickHouse away is logged, a few lines per 10 s, not one per request (%d lines in "
          "%.0f s: %s)" % (len(down_lines), down_s, down_lines[:2]))
    check(unsent == 0 and f["acknowledged"] == f["windows"] and f["rejected"] == 0,
          "every window made was acknowledged in the end (%d of %d, %d refused for good)" %
          (f["acknowledged"], f["windows"], f["rejected"]))
    check_verified(v, "after ClickHouse's kill and restart")
finally:
    if lg:
        lg.stop(drain_s=0)
    srv.stop()
    ch.stop()
