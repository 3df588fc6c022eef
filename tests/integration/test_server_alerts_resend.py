"""sonde agent --server sends its alerts to the server, and the firing ones
again every --alert-resend: a server restarted while an alert fires lists it
again without the alert changing state. A plain --webhook still gets one
POST per firing (no repeats)."""
import json
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from agent_test import Agent, wait_for
from server_test import Server
from sonde_test import *


hook_bodies = []


class Hook(BaseHTTPRequestHandler):
    def do_POST(self):
        n = int(self.headers.get("Content-Length", "0"))
        hook_bodies.append(json.loads(self.rfile.read(n)))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *a):
        pass


def firing(srv):
    alerts = srv.get_json("/api/v1/alerts")["alerts"]
    return [a for a in alerts if a["alert"] == "SimMemory" and a["status"] == "firing"] or None


hs = ThreadingHTTPServer(("127.0.0.1", 0), Hook)
threading.Thread(target=hs.serve_forever, daemon=True).start()
rules = os.path.join(tmpdir(), "rules.yaml")
with open(rules, "w") as f:
    f.write("rules:\n"
            "  - alert: SimMemory\n"
            "    expr: zernel_gpu_memory_used_bytes > 0\n"
            "    summary: simulated memory in use\n")
port = free_port()
data = os.path.join(tmpdir(), "data")
srv = Server(data, listen="127.0.0.1:%d" % port)
a = None
try:
    a = Agent(["--simulate", "--rules", rules, "--alert-resend", "1", "--node", "resend-test",
               "--webhook", "http://127.0.0.1:%d/hook" % hs.server_address[1],
               "--server", "http://127.0.0.1:%d" % port])
    first = wait_for(lambda: firing(srv), 15, "the server to list the firing alert")
    starts = {x["startsAt"] for x in first}
    check(all(x["labels"].get("node") == "resend-test" for x in first),
          "%d firing alert(s) from the agent's node" % len(first))

    srv.stop()
    srv = Server(data, listen="127.0.0.1:%d" % port)
    check(firing(srv) is None, "a restarted server starts with no alerts")
    again = wait_for(lambda: firing(srv), 10, "the restarted server to learn the alert again")
    check({x["startsAt"] for x in again} == starts,
          "the same alerts again, same startsAt (%s)" % ", ".join(sorted(starts)))

    # A few more re-sends reach the server (its POST count on the alerts
    # route), and the plain webhook still has one POST per firing.
    def posts():
        body = srv.get("/metrics")[2].decode()
        return sum(float(l.rsplit(" ", 1)[1]) for l in body.splitlines()
                   if l.startswith('sonde_server_requests_total{route="/api/v1/alerts"') and
                   'code="200"' in l)
    n0 = posts()
    wait_for(lambda: posts() >= n0 + 3, 15, "three more re-sends to the server")
    # One POST per alert (a label set) that fired: the simulator may start
    # a series after the first look, so count distinct alerts, not those
    # of that moment.
    fired = [json.dumps(b["labels"], sort_keys=True) for b in hook_bodies
             if b.get("alert") == "SimMemory" and b["status"] == "firing"]
    check(len(fired) == len(set(fired)) and len(set(fired)) >= len(first),
          "the plain webhook got one POST per firing alert (%d), no repeats" % len(fired))
finally:
    if a:
        a.stop()
    srv.stop()
    hs.shutdown()
