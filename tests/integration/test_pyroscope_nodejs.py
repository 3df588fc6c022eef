"""Grafana's own Pyroscope SDK for Node.js talks to `sonde server` as it
is: @pyroscope/nodejs 0.6.4 from npm (tests/pyroscope, installed by
scripts/setup.sh; a client nobody here wrote) profiles a Node.js program
whose hotAlpha burns three times the CPU of hotBeta, pushing to the server
every second with the tag env=check. Its name carries OpenTelemetry-style
tags (`nodeapp{otel.scope.name=...,process.runtime.name=nodejs,...}`):

- every upload is answered 200 (the SDK's own requests, counted in the
  client), and the server logged no refusal;
- its wall-clock and heap profiles are two types under its app name
  (`wall`, `inuse_space`), not one mixed `cpu`;
- its functions render under the app with their file and line
  (`./client.mjs:hotAlpha:LINE`), hotAlpha about three times hotBeta;
- its tags select it: env="check", the dotted labels as `otel_scope_name`
  and as `otel.scope.name` (plain or quoted), and env="other" selects
  nothing."""
import json
import os
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from sonde_test import ROOT, check, fail, skip, tmpdir  # noqa: E402
from server_test import Server  # noqa: E402

CLIENT = os.path.join(ROOT, "tests", "pyroscope")
if not shutil.which("node"):
    skip("no node on the PATH (scripts/setup.sh installs it)")
if not os.path.isdir(os.path.join(CLIENT, "node_modules", "@pyroscope", "nodejs")):
    skip("@pyroscope/nodejs is not installed in tests/pyroscope (scripts/setup.sh runs npm ci "
         "there)")

SECONDS = 6
srv = Server(tmpdir())
try:
    t0 = int(time.time()) - 1
    p = subprocess.run(["node", os.path.join(CLIENT, "client.mjs"),
                        "http://127.0.0.1:%d" % srv.port, "nodeapp", str(SECONDS)],
                       capture_output=True, text=True, timeout=120)
    print(p.stderr[-2000:])
    check(p.returncode == 0, "the SDK's program ran and stopped (exit %d)" % p.returncode)
    done = json.loads(p.stdout.strip().splitlines()[-1])
    check(done["uploads"] >= SECONDS and done["failures"] == 0,
          "every upload of the SDK was taken: %d uploads, %d refused" %
          (done["uploads"], done["failures"]))
    refused = [l for l in srv.lines if " 400 " in l or "refus" in l]
    check(not refused, "the server logged no refusal: %s" % refused[:3])
    t1 = int(time.time()) + 1
    rng = {"from": t0 - 60, "until": t1 + 60}  # seconds on the Pyroscope routes
    api = {"from": (t0 - 60) * 1000, "until": (t1 + 60) * 1000}  # ms on /api/v1

    types = srv.get_json("/api/v1/label/values", name="type",
                         query='{service_name="nodeapp"}', **api)["values"]
    check(sorted(types) == ["inuse_space", "wall"],
          "its wall-clock and heap profiles are two types: %s" % types)
    names = srv.get_json("/api/v1/labels", query='{service_name="nodeapp"}', **api)["names"]
    check({"otel_scope_name", "process_runtime_name", "env"} <= set(names),
          "its OpenTelemetry tags are labels, a dot as '_': %s" % names)

    def render(query):
        st, _, body = srv.get("/pyroscope/render", query=query, format="json", **rng)
        if st != 200:
            fail("render %s: HTTP %d %s" % (query, st, body[:300]))
        return json.loads(body)["flamebearer"]

    def self_of(fb, fn):
        """Self ticks of the frames whose name holds fn."""
        total = 0
        for lv in fb["levels"]:
            for k in range(0, len(lv), 4):
                if fn in fb["names"][lv[k + 3]]:
                    total += lv[k + 2]
        return total

    fb = render('nodeapp.wall{env="check"}')
    alpha = [n for n in fb["names"] if ":hotAlpha:" in n]
    beta = [n for n in fb["names"] if ":hotBeta:" in n]
    check(alpha and beta and all("client.mjs" in n for n in alpha + beta),
          "its functions render with file and line: %s %s" % (alpha, beta))
    a, b = self_of(fb, ":hotAlpha:"), self_of(fb, ":hotBeta:")
    check(b > 0 and 2.0 <= a / b <= 4.5,
          "hotAlpha about three times hotBeta in wall time: %d / %d" % (a, b))
    total = fb["numTicks"]
    for q in ['nodeapp.wall{otel_scope_name="com.grafana.pyroscope/nodejs"}',
              'nodeapp.wall{otel.scope.name="com.grafana.pyroscope/nodejs"}',
              '{service_name="nodeapp", type="wall", "process.runtime.name"="nodejs"}']:
        got = render(q)["numTicks"]
        check(got == total, "%s selects the app whole (%d of %d)" % (q, got, total))
    check(render('nodeapp.wall{env="other"}')["numTicks"] == 0,
          "env=\"other\" selects nothing")
    heap = render('nodeapp.inuse_space{env="check"}')
    check(heap["numTicks"] > 0, "its heap profile renders: %d bytes" % heap["numTicks"])
finally:
    srv.stop()
