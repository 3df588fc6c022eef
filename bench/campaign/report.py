#!/usr/bin/env python3
"""report.py: the Markdown tables of docs/reliability.md from the figures
the campaign's cases wrote (bench/campaign/run.sh's figures.jsonl, one
JSON object per line, "case" naming it).

    python3 bench/campaign/report.py build/campaign/figures.jsonl"""
import json
import sys


def rows(figs, case):
    return [f for f in figs if f.get("case") == case]


def fmt(x, nd=1):
    if x is None:
        return "-"
    if isinstance(x, float):
        return ("%%.%df" % nd) % x
    return str(x)


def table(head, body):
    print("| " + " | ".join(head) + " |")
    print("| " + " | ".join("---" for _ in head) + " |")
    for r in body:
        print("| " + " | ".join(fmt(x) for x in r) + " |")
    print()


def main(path):
    figs = [json.loads(line) for line in open(path) if line.strip()]
    load = rows(figs, "load")
    if load:
        print("### Load\n")
        table(["store", "agents x window", "seconds", "windows made / acknowledged",
               "lost / duplicated / wrong (by query)", "retried", "ingest p50 / p99 / max (ms)",
               "server CPU (% of a core)", "server RSS max (MB)", "ClickHouse CPU / RSS",
               "load generator CPU (%)", "load average at the end"],
              [[f["store"], "%d x %g s" % (f["agents"], f["window_s"]), f["seconds"],
                "%d / %d" % (f["windows"], f["acknowledged"]),
                "%d / %d / %d" % (f["verify"]["lost"], f["verify"]["duplicated"],
                                  f["verify"]["wrong"]),
                f["retried_windows"],
                "%.1f / %.1f / %.1f" % (f["latency_p50_ms"], f["latency_p99_ms"],
                                        f["latency_max_ms"]),
                f["server_cpu_pct"], f["server_rss_max_mb"],
                ("%s %% / %s MB" % (f["clickhouse_cpu_pct"], f["clickhouse_rss_max_mb"])
                 if f.get("clickhouse_cpu_pct") is not None else "-"),
                f["loadgen_cpu_pct"], " ".join("%.2f" % x for x in f["loadavg"])]
               for f in load])
    for f in rows(figs, "server_kill"):
        print("### The server killed with -9\n")
        table(["kill", "acknowledged before", "requests in flight", "restart (s)",
               "kill to first acknowledgement (s)"],
              [[k + 1, r["acked_before"], r["requests_in_flight"], r["restart_s"],
                r["kill_to_first_ack_s"]] for k, r in enumerate(f["rounds"])])
        print("%d agents x %g s windows: %d windows made, %d acknowledged, %d sent again, %d "
              "acknowledged as already stored; by query lost %d, duplicated %d, wrong %d.\n" %
              (f["agents"], f["window_s"], f["windows"], f["acknowledged"],
               f["retried_windows"], f.get("duplicate_acks", 0), f["verify"]["lost"],
               f["verify"]["duplicated"], f["verify"]["wrong"]))
    for f in rows(figs, "disk_full"):
        print("### The disk full under the SQLite store\n")
        table(["what", "measured"], [
            ["agents x window", "%d x %g s" % (f["agents"], f["window_s"])],
            ["disk (tmpfs)", "%d MB" % f["disk_mb"]],
            ["full for", "%.1f s" % f["full_s"]],
            ["answers while full", f["answers_while_full"]],
            ["acknowledged while full", f["acked_while_full"]],
            ["/healthz while full", f["healthz_while_full"]],
            ["log lines while full", "%d (%.2f per refusal)" % (f["log_lines_while_full"],
                                                                f["log_lines_per_refusal"])],
            ["space freed to the stream going on", "%.1f s" % f["catch_up_s"]],
            ["windows made / acknowledged", "%d / %d" % (f["windows"], f["acknowledged"])],
            ["lost / duplicated / wrong, then after kill -9", "%d / %d / %d, %d / %d / %d" % (
                f["verify"]["lost"], f["verify"]["duplicated"], f["verify"]["wrong"],
                f["verify_after_restart"]["lost"], f["verify_after_restart"]["duplicated"],
                f["verify_after_restart"]["wrong"])]])
    for f in rows(figs, "clickhouse_kill"):
        print("### ClickHouse killed with -9 and started again\n")
        table(["what", "measured"], [
            ["agents x window", "%d x %g s" % (f["agents"], f["window_s"])],
            ["ClickHouse away", "%.1f s" % f["down_s"]],
            ["answers meanwhile", f["refusals_while_down"]],
            ["acknowledged meanwhile", f["acked_while_down"]],
            ["/healthz meanwhile", f["healthz_while_down"]],
            ["ClickHouse up to the stream going on", "%.1f s" % f["up_to_stream_s"]],
            ["ClickHouse up to every queue empty", "%.1f s" % f["up_to_drained_s"]],
            ["windows made / acknowledged", "%d / %d" % (f["windows"], f["acknowledged"])],
            ["lost / duplicated / wrong", "%d / %d / %d" % (
                f["verify"]["lost"], f["verify"]["duplicated"], f["verify"]["wrong"])],
            ["ingest p50 / p99 / max", "%.0f / %.0f / %.0f ms" % (
                f["latency_p50_ms"], f["latency_p99_ms"], f["latency_max_ms"])]])
    for f in rows(figs, "agent_kill"):
        print("### An agent killed with -9 and started again\n")
        table(["kill", "hole in the data (ms)", "of it: not shipped before the kill (ms)",
               "of it: the restart (ms)", "new agent ready after (ms)",
               "the new agent says lost (s)"],
              [[k + 1, r["hole_ms"], r["unshipped_ms"], r["restart_ms"],
                r["ready_after_kill_ms"], r.get("said_lost_s")]
               for k, r in enumerate(f["rounds"])])
        print("--window %g, -F %d; other holes: %d ms.\n" % (f["window_s"], f["freq"],
                                                           f["other_holes_ms"]))
    for f in rows(figs, "connections"):
        print("### Slowloris and idle connections\n")
        table(["attack", "connections", "probes", "answered during it", "p50 / p99 (ms)",
               "answered per 10 s (%)", "server's sockets", "server RSS (MB)",
               "back after (s)"],
              [[name, p.get("conns"), p["probes"],
                "%d (%s %%)" % (p["answered"], p["answered_pct"]),
                "%s / %s" % (fmt(p["p50_ms"]), fmt(p["p99_ms"])),
                ", ".join(fmt(x, 0) for x in p.get("answered_pct_per_10s", [])),
                p["server_sockets_max"], p.get("server_rss_mb"), p["back_after_s"]]
               for name, p in f["phases"].items()])
        a = f["agents"]
        print("%g s each; %d slow and %d idle connections; agents connected before: %d "
              "windows made, %d acknowledged, statuses %s; lost %d, duplicated %d; server "
              "RSS max %.1f MB.\n" % (f["phase_s"], f["slow_conns"], f["idle_conns"],
                                      a["windows"], a["acknowledged"], a["statuses"],
                                      f["verify"]["lost"], f["verify"]["duplicated"],
                                      f["server_rss_max_mb"]))
    for f in rows(figs, "big_body"):
        print("### A 1 GB body\n")
        table(["body", "answer", "body the client got in", "seconds", "server RSS max (MB)"], [
            ["Content-Length 1 GiB, /api/v1/ingest", f["content_length_1gib"]["status"],
             "%d bytes" % f["content_length_1gib"]["body_sent_bytes"],
             f["content_length_1gib"]["seconds"], f["content_length_1gib"]["rss_max_mb"]],
            ["Content-Length 1 GiB, /ingest", f["pyroscope_content_length_1gib"]["status"],
             "%d bytes" % f["pyroscope_content_length_1gib"]["body_sent_bytes"],
             f["pyroscope_content_length_1gib"]["seconds"],
             f["pyroscope_content_length_1gib"]["rss_max_mb"]],
            ["chunked 1 GiB", f["chunked_1gib"]["answer"] or f["chunked_1gib"]["end"],
             "%d MiB" % f["chunked_1gib"]["body_sent_mib"], f["chunked_1gib"]["seconds"],
             f["chunked_1gib"]["rss_max_mb"]],
            ["gzip, 1 GiB inflated", f["gzip_bomb_1gib"]["status"],
             "%d bytes" % f["gzip_bomb_1gib"]["bytes"], f["gzip_bomb_1gib"]["seconds"],
             f["gzip_bomb_1gib"]["rss_max_mb"]]])
        print("RSS before: %.1f MB; probes %s.\n" % (f["rss_before_mb"], f["probes"]))
    fz = rows(figs, "fuzz")
    if fz:
        print("### Fuzzing\n")
        table(["target", "executions", "seconds", "executions/s", "coverage", "corpus",
               "result"],
              [[f["target"], f["executions"], f["seconds"], f.get("exec_per_s"), f["cov"],
                f["corpus"], f["result"]] for f in fz])


if __name__ == "__main__":
    main(sys.argv[1])
