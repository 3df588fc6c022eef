"""The WebSocket stream with a standard client (node's ws): a snapshot at
connection and then one per interval (count and spacing over ~3.5 s), with
the seed's fields and "simulated": true under the simulator; pings answered
with pongs, a close answered with a close; a plain HTTP GET answered 426.
Then a client that connects and never reads (4 KiB receive buffer) while a
second one streams: the second still gets every snapshot at the interval,
the slow one provably falls behind (skipped frames while connected) and is
dropped after the stall timeout."""
import base64
import json
import os
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "metrics"))
from metrics_test import (Harness, SimAgent, NODE_PATH, check, fail, get, need_node_ws,  # noqa: E402
                          node)

need_node_ws()

SEED_FIELDS = ["gpu_utilization", "cuda_latency_p50_us", "cuda_latency_p99_us",
               "nccl_allreduce_p50_ms", "nccl_allreduce_p99_ms", "dataloader_wait_p50_ms",
               "last_update_ms"]

# Prints one JSON line per message: {"t": ms since open, "len": n, "snap": {...}}
# (snap only with FULL), then {"end": true, "pong": bool, "close": code}.
CLIENT = r"""
const WebSocket = require('ws');
const [url, secs, full] = [process.argv[1], +process.argv[2], process.argv[3] === '1'];
const ws = new WebSocket(url);
let t0 = 0, pong = false, n = 0;
ws.on('open', () => { t0 = Date.now(); ws.ping('x'); });
ws.on('pong', () => { pong = true; });
ws.on('message', (d, isBinary) => {
  n++;
  const o = {t: Date.now() - t0, len: d.length, binary: isBinary};
  if (full || n <= 2) o.snap = JSON.parse(d.toString());
  console.log(JSON.stringify(o));
});
ws.on('close', (code) => { console.log(JSON.stringify({end: true, pong, close: code})); process.exit(0); });
ws.on('error', (e) => { console.log(JSON.stringify({error: String(e)})); process.exit(1); });
setTimeout(() => ws.close(1000), secs * 1000);
setTimeout(() => { console.log(JSON.stringify({error: 'no close'})); process.exit(1); }, secs * 1000 + 5000);
"""


def client(port, secs, full=False):
    """Starts a node client; returns the Popen (stdout: JSON lines)."""
    env = dict(os.environ, NODE_PATH=NODE_PATH)
    return subprocess.Popen(["node", "-e", CLIENT, "ws://127.0.0.1:%d/" % port, str(secs),
                             "1" if full else "0"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)


def results(p, timeout):
    out, err = p.communicate(timeout=timeout)
    if err.strip():
        print(err[-2000:])
    rows = [json.loads(l) for l in out.splitlines() if l.strip()]
    if not rows or "end" not in rows[-1]:
        fail("the node client didn't end cleanly: %s" % rows[-3:])
    return [r for r in rows if "t" in r], rows[-1]


# --- interval, fields, ping and close, at the default interval (1 s) ---
with SimAgent() as h:
    p = client(h.ws, 3.5, full=True)
    msgs, end = results(p, 30)
    times = [m["t"] for m in msgs]
    print("arrivals (ms):", times)
    check(4 <= len(msgs) <= 5, "4 or 5 snapshots in 3.5 s at 1 s (one at once, then one per "
          "second): got %d" % len(msgs))
    check(times[0] < 500, "the first snapshot comes at connection (%d ms)" % times[0])
    gaps = [b - a for a, b in zip(times[1:], times[2:])]
    check(all(800 <= g <= 1200 for g in gaps), "snapshots are 1 s apart (gaps %s)" % gaps)
    check(not any(m["binary"] for m in msgs), "snapshots are text messages")
    for m in msgs:
        s = m["snap"]
        missing = [f for f in SEED_FIELDS if f not in s]
        if missing:
            fail("snapshot lacks the seed's fields %s" % missing)
        if s.get("simulated") is not True:
            fail("a simulated snapshot without \"simulated\": true")
    check(True, "every snapshot has the seed's fields and \"simulated\": true")
    keys = [g["key"] for g in msgs[-1]["snap"]["gpu_utilization"]]
    check("1000:0" in keys, "gpu_utilization keys are pid:gpu_id (%s)" % keys)
    check(end["pong"], "a ping is answered with a pong")
    check(end["close"] == 1000, "a close is answered with a close (code %s)" % end["close"])

    st, hdr, body = get(h.ws, "/")
    check(st == 426 and hdr.get("upgrade") == "websocket",
          "a plain GET on the WebSocket port is 426 Upgrade Required")

# --- a client that never reads doesn't stall the others ---
STALL_MS = 5000
INTERVAL_MS = 200
# 300 padding processes make each snapshot ~130 KB, so the slow client's
# socket fills within a couple of seconds.
with Harness("--pad-pids", "300", "--interval", str(INTERVAL_MS), "--stall-ms",
             str(STALL_MS)) as h:
    slow = socket.socket()
    slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    slow.settimeout(5)
    slow.connect(("127.0.0.1", h.ws))
    key = base64.b64encode(os.urandom(16)).decode()
    slow.sendall(("GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
                  "Connection: Upgrade\r\nSec-WebSocket-Key: %s\r\n"
                  "Sec-WebSocket-Version: 13\r\n\r\n" % key).encode())
    head = b""
    while not head.endswith(b"\r\n\r\n"):  # byte by byte: read no frame
        head += slow.recv(1)
    check(head.startswith(b"HTTP/1.1 101"), "the slow client is upgraded")
    t_slow = time.time()

    secs = 8
    p = client(h.ws, secs)
    # While the fast one streams, the slow one must be connected and behind.
    deadline = time.time() + secs
    while time.time() < deadline:
        mid = json.loads(get(h.http, "/ws-stats")[2])
        if mid["frames_skipped"] > 0:
            break
        time.sleep(0.1)
    print("ws stats while the fast client streams:", mid)
    check(mid["clients"] == 2, "both clients are connected while the fast one streams")
    check(mid["frames_skipped"] > 0, "the slow client skips frames: it is stuck (%d skipped)"
          % mid["frames_skipped"])
    msgs, end = results(p, secs + 15)
    times = [m["t"] for m in msgs]
    gaps = [b - a for a, b in zip(times[1:], times[2:])]
    expected = secs * 1000 // INTERVAL_MS
    print("fast client: %d snapshots, max gap %d ms" % (len(msgs), max(gaps)))
    check(len(msgs) >= expected - 2, "the fast client gets every snapshot: %d of ~%d"
          % (len(msgs), expected))
    check(max(gaps) <= 2 * INTERVAL_MS, "the fast client is never held up (max gap %d ms)"
          % max(gaps))
    check(all(m["len"] > 100000 for m in msgs), "snapshots were big (%d bytes)" % msgs[0]["len"])

    # The slow client is dropped once it has taken nothing for STALL_MS.
    deadline = t_slow + STALL_MS / 1000 + 8
    while time.time() < deadline:
        st = json.loads(get(h.http, "/ws-stats")[2])
        if st["clients_dropped"] == 1:
            break
        time.sleep(0.25)
    print("ws stats at the end:", st)
    check(st["clients_dropped"] == 1 and st["clients"] == 0,
          "the stalled client was dropped after %d ms without progress" % STALL_MS)
    # Its socket ends after what the kernel had buffered.
    slow.settimeout(5)
    got, eof = 0, False
    try:
        while True:
            b = slow.recv(65536)
            if not b:
                eof = True
                break
            got += len(b)
    except (ConnectionResetError, socket.timeout):
        eof = True
    check(eof, "the slow client's connection is closed (%d bytes were pending)" % got)
    slow.close()
print("PASS")
