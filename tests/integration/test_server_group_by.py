#!/usr/bin/env python3
"""`sonde server`'s group_by (docs/api.md, /api/v1/flamegraph and
/pyroscope/render): the flame graph of a selection with a frame
"LABEL=VALUE" per value of a label under the root. 55 threads of known
weights and a series without the label: the 50 busiest threads get a frame
each holding exactly their stacks, the 5 others one "thread=(other)" frame,
the series without the label "thread=(none)", and the whole is the
ungrouped graph's total; a selector that leaves room for fewer matchers
shows fewer values; a bad label name is a 400, an empty one no grouping."""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from sonde_test import check, tmpdir  # noqa: E402
from server_test import Server, error_of, flame_total  # noqa: E402

WINDOWS, WS = 3, 10
THREADS = {"t%02d" % i: 100 + i for i in range(55)}  # per window; t54 the busiest
NONE = 7  # per window, a series without the thread label


def children(fb, depth=1):
    """{name: total} of the nodes at depth (the root's children at 1)."""
    names, lv, out = fb["names"], fb["levels"][depth], {}
    for k in range(0, len(lv), 4):
        out[names[lv[k + 3]]] = out.get(names[lv[k + 3]], 0) + lv[k + 1]
    return out


srv = Server(tmpdir())
try:
    now = int(time.time()) // WS * WS
    base = now - 300
    for w in range(WINDOWS):
        f = base + w * WS
        for t, v in THREADS.items():
            srv.ingest_folded("app.cpu{thread=%s,pid=%d}" % (t, 1000 + int(t[1:])), f, f + WS,
                              {"main;loop;spin": v - 1, "main;loop;work_" + t: 1})
        srv.ingest_folded("app.cpu{pid=9}", f, f + WS, {"main;idle": NONE})
    rng = {"from": base * 1000, "until": (base + WINDOWS * WS) * 1000}
    total = WINDOWS * (sum(THREADS.values()) + NONE)
    plain = srv.get_json("/api/v1/flamegraph", query="app.cpu{}", **rng)["flamebearer"]
    check(plain["numTicks"] == total, "ungrouped: %d == %d" % (plain["numTicks"], total))

    r = srv.get_json("/api/v1/flamegraph", query="app.cpu{}", group_by="thread", **rng)
    fb = r["flamebearer"]
    check(fb["numTicks"] == total, "grouped: the same total (%d)" % fb["numTicks"])
    top = sorted(THREADS, key=lambda t: -THREADS[t])[:50]
    rest = sorted(THREADS, key=lambda t: -THREADS[t])[50:]
    want = {"thread=" + t: WINDOWS * THREADS[t] for t in top}
    want["thread=(other)"] = WINDOWS * sum(THREADS[t] for t in rest)
    want["thread=(none)"] = WINDOWS * NONE
    got = children(fb)
    check(got == want, "one frame per thread of the 50 busiest, (other) and (none): %s"
          % sorted(set(got.items()) ^ set(want.items()))[:6])
    check(list(got) == sorted(got, key=lambda s: s.encode()), "group frames in name order")
    for t in top[:3] + top[-2:]:
        check(flame_total(fb, ["thread=" + t, "main", "loop", "spin"]) == WINDOWS * (THREADS[t] - 1)
              and flame_total(fb, ["thread=" + t, "main", "loop", "work_" + t]) == WINDOWS,
              "thread=%s holds its own stacks and no other's" % t)
        check(flame_total(fb, ["thread=" + t, "main", "loop", "work_" + rest[0]]) is None,
              "thread=%s holds no stack of another thread" % t)
    for t in rest:
        check(flame_total(fb, ["thread=(other)", "main", "loop", "work_" + t]) == WINDOWS,
              "%s is in thread=(other)" % t)
    check(flame_total(fb, ["thread=(none)", "main", "idle"]) == WINDOWS * NONE,
          "the series without the label under thread=(none)")
    md = r["metadata"]
    check(md["groupBy"] == "thread" and md["groupValues"] == 55,
          "metadata: groupBy thread, 55 values (%s, %s)" % (md.get("groupBy"),
                                                            md.get("groupValues")))
    check(sum(r["timeline"]["samples"]) == total, "the timeline is the whole selection's")

    # By pid: 56 values, the series without a thread has one too.
    fb = srv.get_json("/api/v1/flamegraph", query="app.cpu{}", group_by="pid",
                      **rng)["flamebearer"]
    got = children(fb)
    check(len(got) == 51 and "pid=(other)" in got and "pid=(none)" not in got,
          "by pid: 50 frames and (other) (%d frames)" % len(got))
    check(sum(got.values()) == total, "by pid: the frames sum to the total")

    # A selector of 20 matchers leaves room for 63 - 20 = 43 values.
    sel = '{service_name="app", type="cpu", %s}' % ", ".join('x%d!="y"' % i for i in range(18))
    got = children(srv.get_json("/api/v1/flamegraph", query=sel, group_by="thread",
                                **rng)["flamebearer"])
    check(len(got) == 43 + 2 and got["thread=(other)"] == WINDOWS * sum(
        THREADS[t] for t in sorted(THREADS, key=lambda t: -THREADS[t])[43:]),
        "20 matchers in the selector: 43 threads shown, the rest in (other)")

    # Narrowed by the selector to one thread: one frame, no (other).
    got = children(srv.get_json("/api/v1/flamegraph", query='app.cpu{thread="t07"}',
                                group_by="thread", **rng)["flamebearer"])
    check(got == {"thread=t07": WINDOWS * THREADS["t07"]}, "one thread selected: %s" % got)

    # Pyroscope's render, seconds and groupBy.
    fb = srv.get_json("/pyroscope/render", query="app.cpu{}", groupBy="thread", format="json",
                      **{"from": base, "until": base + WINDOWS * WS})["flamebearer"]
    check(children(fb)["thread=t54"] == WINDOWS * THREADS["t54"], "/pyroscope/render groupBy")

    # Errors, and an empty group_by is no grouping.
    for bad in ("9thread", "a-b", "x" * 65):
        st, _, body = srv.get("/api/v1/flamegraph", query="app.cpu{}", group_by=bad, **rng)
        check(st == 400 and "group_by" in error_of(body),
              "group_by=%s: 400 naming it (%d %s)" % (bad[:10], st, error_of(body)))
    sel = "{%s}" % ", ".join('x%d!="y"' % i for i in range(64))
    st, _, body = srv.get("/api/v1/flamegraph", query=sel, group_by="thread", **rng)
    check(st == 400 and "group_by" in error_of(body),
          "64 matchers leave none for group_by: 400 (%d %s)" % (st, error_of(body)))
    fb = srv.get_json("/api/v1/flamegraph", query="app.cpu{}", group_by="", **rng)["flamebearer"]
    check(fb == plain, "group_by= (empty): the ungrouped graph")
    check(srv.alive(), "the server is up")
finally:
    srv.stop()
