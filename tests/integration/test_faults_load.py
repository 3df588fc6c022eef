#!/usr/bin/env python3
"""Load: simulated agents (loadgen.py: what `sonde agent --server` posts,
keyed windows sent again until acknowledged) ship windows to one `sonde
server` for a while; then every acknowledged window must be in the store
exactly once with its exact total, every window made must have been
acknowledged, and no try may have timed out (the agent's 10 s). Prints the
figures: ingest latency p50/p99/max, the server's CPU and RSS (and
ClickHouse's), the load generator's own CPU.

Short form (make test): 50 agents, 1 s windows, 15 s, SQLite. The
campaign's (bench/campaign/run.sh): LOAD_AGENTS=200 LOAD_WINDOW=10
LOAD_SECONDS=600, LOAD_STORE=sqlite and clickhouse."""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from faults_test import check_verified, figures, param  # noqa: E402
from loadgen import LoadGen, ProcWatch, self_cpu  # noqa: E402
from server_test import Server  # noqa: E402
from sonde_test import check, tmpdir, wait_until  # noqa: E402

AGENTS = param("LOAD_AGENTS", 50)
WINDOW = param("LOAD_WINDOW", 1.0)
SECONDS = param("LOAD_SECONDS", 15.0)
STORE = param("LOAD_STORE", "sqlite")
PROCS = param("LOAD_PROCS", 30)

ch = None
args = []
if STORE == "clickhouse":
    from clickhouse import ClickHouse
    ch = ClickHouse()
    args = ["--store", ch.url("load")]
srv = Server(tmpdir(), args)
lg = None
try:
    watch = ProcWatch(srv.p.pid)
    chwatch = ProcWatch(ch.p.pid) if ch else None
    cpu0 = self_cpu()
    lg = LoadGen(srv.port, AGENTS, WINDOW, duration_s=SECONDS, procs=PROCS)
    # The generator stops making windows after SECONDS; then it drains.
    wait_until(lambda: not lg.t.is_alive() or time.time() > lg.started + SECONDS + WINDOW,
               SECONDS + WINDOW + 60, "the load's duration", step=0.2)
    unsent = lg.stop(drain_s=60)
    gen_cpu = self_cpu() - cpu0
    server = watch.stop()
    chfig = chwatch.stop() if chwatch else None
    f = lg.figures()
    v = lg.verify(srv.get_json)
    st, _, body = srv.get("/metrics")
    # The figures first, whatever the checks say.
    figures("load", dict(
        f, store=STORE, seconds=SECONDS, procs=PROCS, verify=v,
        windows_per_s=round(f["windows"] / SECONDS, 1),
        samples_per_s=round(f["samples"] / SECONDS),
        server_cpu_pct=round(server["cpu_pct"], 1), server_cpu_s=server["cpu_s"],
        server_rss_max_mb=round(server["rss_max_mb"], 1),
        server_hwm_mb=round(server["hwm_mb"], 1),
        server_per_minute=server["timeline"],
        clickhouse_per_minute=chfig["timeline"] if chfig else None,
        clickhouse_cpu_pct=round(chfig["cpu_pct"], 1) if chfig else None,
        clickhouse_rss_max_mb=round(chfig["rss_max_mb"], 1) if chfig else None,
        loadgen_cpu_s=round(gen_cpu, 1),
        loadgen_cpu_pct=round(100.0 * gen_cpu / server["wall_s"], 1),
        body_bytes=[int(x.split()[-1]) for x in body.decode().splitlines()
                    if x.startswith("sonde_server_ingest_received_bytes_total")]))
    check(not f["crashed"], "the load generator ran to its end (%s)" % f["crashed"])
    check(f["windows"] >= AGENTS * (int(SECONDS / WINDOW) - 1) * 0.9,
          "%d windows made by %d agents over %g s" % (f["windows"], AGENTS, SECONDS))
    check(unsent == 0 and f["acknowledged"] == f["windows"],
          "every window was acknowledged (%d of %d, %d unsent)" % (f["acknowledged"],
                                                                   f["windows"], unsent))
    check(f["rejected"] == 0, "no window refused (4xx): %d" % f["rejected"])
    check_verified(v, "after the load")
    check(v["checked"] == f["windows"], "%d windows checked by query" % v["checked"])
    check(not f["statuses"].get("error: timeout"),
          "no try took longer than the agent's 10 s (statuses %s)" % f["statuses"])
finally:
    if lg:
        lg.stop(drain_s=0)
    srv.stop()
    if ch:
        ch.stop()
