"""sonde agent --server: while the server is unreachable the agent keeps its
windows and retries with backoff; once a server starts on that address every
window arrives -- a workload profiled during the outage is queryable with
all its samples. Past --buffer-age the oldest windows are dropped, counted in
sonde_agent_ship_dropped_total{reason="too_old"} and logged; a server that
refuses a window (4xx) gets it dropped as "rejected", never silently."""
import os
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from agent_test import Agent, value, wait_for
from server_test import Server
from sonde_test import *

need_bpf()


# --- an outage, then the server comes up ------------------------------------
port = free_port()
a = Agent(["--no-gpu", "-F", "99", "--window", "1", "--node", "ship-test",
           "--server", "http://127.0.0.1:%d" % port])
srv = None
try:
    t0 = int(time.time() * 1000)
    w = subprocess.run([os.path.join(WL, "shares"), "3"], timeout=60)
    check(w.returncode == 0, "a workload ran while the server was down")
    m = wait_for(lambda: (lambda m: m if value(m, "sonde_agent_ship_queue") >= 3 and
                          value(m, "sonde_agent_ship_failures_total") >= 1 else None)(
        a.metrics()), 10, "windows queued and sends failing")
    kept = value(m, "sonde_agent_ship_queue")
    check(value(m, "sonde_agent_ship_requests_total") == 0 and
          sum(v for (n, l), v in m.items() if n == "sonde_agent_ship_dropped_total") == 0,
          "%d windows kept, none sent, none dropped" % kept)
    check(any("can't send to the server" in l for l in a.log), "the outage is logged")

    srv = Server(os.path.join(tmpdir(), "data"), listen="127.0.0.1:%d" % port)
    # A window being posted is off the queue: the queue is empty before the
    # last send is acknowledged, so wait for the acknowledgements.
    m = wait_for(lambda: (lambda m: m if value(m, "sonde_agent_ship_queue") == 0 and
                          value(m, "sonde_agent_ship_requests_total") >= kept else None)(
        a.metrics()), 40, "the queue to drain and its windows acknowledged once the server is up")
    check(value(m, "sonde_agent_ship_requests_total") >= kept and
          sum(v for (n, l), v in m.items() if n == "sonde_agent_ship_dropped_total") == 0,
          "%d sends acknowledged (%d were kept), none dropped"
          % (value(m, "sonde_agent_ship_requests_total"), kept))
    top = srv.get_json("/api/v1/top", query='{service_name="shares",type="cpu",node="ship-test"}',
                       **{"from": t0 - 2000, "until": "now"})
    check(top["total"] >= 240, "the workload's samples from the outage are in the store (%d)"
          % top["total"])
    check(any("answers again" in l for l in a.log), "the recovery is logged")
finally:
    a.stop()
    if srv:
        srv.stop()

# --- too long an outage: the oldest windows are dropped, counted -------------
a = Agent(["--no-gpu", "-F", "49", "--window", "1", "--buffer-age", "2",
           "--server", "http://127.0.0.1:%d" % free_port()])
try:
    m = wait_for(lambda: (lambda m: m if value(m, "sonde_agent_ship_dropped_total",
                                              reason="too_old") else None)(a.metrics()),
                 15, "windows older than --buffer-age to be dropped")
    check(value(m, "sonde_agent_ship_queue") <= 4,
          "at most --buffer-age worth of windows kept (%d)" % value(m, "sonde_agent_ship_queue"))
    check(any("dropped a window" in l and "too_old" in l for l in a.log), "the drop is logged")
finally:
    a.stop()


# --- a server that refuses: dropped as rejected --------------------------------
class Refuse(BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = b'{"error": "no such tenant"}'
        self.send_response(403)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass


hs = ThreadingHTTPServer(("127.0.0.1", 0), Refuse)
threading.Thread(target=hs.serve_forever, daemon=True).start()
a = Agent(["--no-gpu", "-F", "49", "--window", "1",
           "--server", "http://127.0.0.1:%d" % hs.server_address[1]])
try:
    m = wait_for(lambda: (lambda m: m if value(m, "sonde_agent_ship_dropped_total",
                                              reason="rejected") >= 2 else None)(a.metrics()),
                 15, "refused windows to be dropped")
    check(value(m, "sonde_agent_ship_queue") <= 2, "refused windows are not retried")
    check(any("refused a window" in l and "no such tenant" in l for l in a.log),
          "the refusal is logged with the server's reason")
finally:
    a.stop()
    hs.shutdown()
