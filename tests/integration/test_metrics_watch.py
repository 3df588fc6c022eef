"""`sonde watch` against `sonde agent --simulate`: the very first snapshot the
agent serves -- the first WebSocket frame and the first /json, taken the
moment its ports answer, before the simulator's first tick -- already holds
the simulated processes and their first step; `watch -b -n 2` prints exactly
two frames, the first one included, with the memory per pid:gpu, launch
latency, allreduce and dataloader lines and the simulated marker, and exits
0; -j prints the snapshots as JSON lines; the interactive mode (in a
pseudo-terminal) draws in place on its own screen and quits on q; an address
with nothing listening, or an HTTP port that isn't a WebSocket, fails with a
clear error."""
import base64
import http.client
import json
import os
import pty
import select
import socket
import struct
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "metrics"))
from metrics_test import SONDE, SimAgent, check, fail, free_port  # noqa: E402

WATCH = [SONDE, "watch"]
SIM_KEYS = ["1000:0", "1001:1", "1002:0"]  # the two ranks and the inference server


def connect_asap(port, deadline):
    """A socket connected to port as soon as something listens there."""
    while time.time() < deadline:
        s = socket.socket()
        try:
            s.connect(("127.0.0.1", port))
            return s
        except OSError:
            s.close()
            time.sleep(0.001)
    fail("nothing listened on port %d in time" % port)


def first_ws_snapshot(port, deadline):
    """The first frame of the stream, from a client that connects the moment
    the port answers (a plain RFC 6455 client: server frames are unmasked)."""
    s = connect_asap(port, deadline)
    s.settimeout(max(deadline - time.time(), 1))
    key = base64.b64encode(os.urandom(16)).decode()
    s.sendall(("GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
               "Connection: Upgrade\r\nSec-WebSocket-Key: %s\r\n"
               "Sec-WebSocket-Version: 13\r\n\r\n" % key).encode())
    buf = b""

    def need(n):
        nonlocal buf
        while len(buf) < n:
            more = s.recv(65536)
            if not more:
                fail("the stream ended before its first frame")
            buf += more

    while b"\r\n\r\n" not in buf:
        need(len(buf) + 1)
    head, buf = buf.split(b"\r\n\r\n", 1)
    check(head.startswith(b"HTTP/1.1 101"), "the early client is upgraded")
    need(2)
    n, off = buf[1] & 0x7f, 2
    if n == 126:
        need(4)
        n, off = struct.unpack(">H", buf[2:4])[0], 4
    elif n == 127:
        need(10)
        n, off = struct.unpack(">Q", buf[2:10])[0], 10
    need(off + n)
    s.close()
    return json.loads(buf[off:off + n])


def first_json(port, deadline):
    """The first /json, asked for the moment the port answers."""
    connect_asap(port, deadline).close()
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request("GET", "/json")
    body = c.getresponse().read()
    c.close()
    return json.loads(body)


def keys(snap):
    return sorted(g["key"] for g in snap.get("gpu_utilization", []))


# --- the first snapshot carries the simulated processes -----------------------
# The ports are chosen here so that the clients can knock before the agent
# says where it listens: their first snapshot is taken as soon as the servers
# answer, ahead of the simulator's first tick.
http_port, ws_port = free_port(), free_port()
cmd = [SONDE, "agent", "--simulate", "--metrics", "127.0.0.1:%d" % http_port,
       "--ws", "127.0.0.1:%d" % ws_port, "--interval", "5"]
print("$ " + " ".join(cmd))
early = {}


def knock(name, fn, port):
    try:
        early[name] = fn(port, time.time() + 10)
    except Exception as e:  # reported below, on the main thread
        early[name] = e


agent = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
try:
    threads = [threading.Thread(target=knock, args=("ws", first_ws_snapshot, ws_port)),
               threading.Thread(target=knock, args=("json", first_json, http_port))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(15)
finally:
    agent.terminate()
    agent.wait(10)
for name, what in [("ws", "the first WebSocket frame"), ("json", "the first /json")]:
    snap = early.get(name)
    if not isinstance(snap, dict):
        fail("%s: no snapshot (%r)" % (what, snap))
    print("%s: gpu_utilization %s" % (what, keys(snap)))
    check(snap.get("simulated") is True, "%s says the data is simulated" % what)
    check(all(k in keys(snap) for k in SIM_KEYS),
          "%s already holds the simulated processes %s (has %s)" % (what, SIM_KEYS, keys(snap)))
    check(snap.get("cuda_launches_total", 0) > 0 and snap.get("nccl_allreduce_p50_ms", 0) > 0
          and snap.get("dataloader_wait_p50_ms", 0) > 0,
          "%s already has the first step's launches, allreduces and dataloader waits" % what)
with SimAgent("--interval", "0.3") as h:
    url = "ws://127.0.0.1:%d" % h.ws

    def watch(*args, timeout=20):
        cmd = WATCH + list(args)
        print("$ " + " ".join(cmd))
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        print(r.stdout[-4000:])
        print(r.stderr[-2000:])
        return r

    r = watch("-b", "-n", "2", url)
    check(r.returncode == 0, "watch -b -n 2 exits 0")
    frames = [l for l in r.stdout.splitlines() if l.startswith("sonde watch  ")]
    check(len(frames) == 2, "it prints two frames (%d headers)" % len(frames))
    check(r.stdout.count("SIMULATED") == 2, "each frame says the data is simulated")
    # Counts read with thousands separators.
    import re
    counts = re.findall(r" launches ([0-9,]+)", r.stdout)
    check(counts and all(c == "{:,}".format(int(c.replace(",", ""))) for c in counts),
          "launch counts are grouped by thousands: %s" % counts)
    bodies = r.stdout.split("sonde watch  ")[1:]
    check(bodies and "no process holds GPU memory" not in bodies[0]
          and all(k in bodies[0] for k in SIM_KEYS),
          "the first frame shows the simulated processes %s" % SIM_KEYS)
    for want in ["GPU memory", "PID:GPU", "PROCESS", "1000:0", "1001:1", "CUDA launch latency",
                 "NCCL allreduce", "Dataloader wait", "GiB", " us ", " ms "]:
        check(all(want in b for b in bodies), "each frame shows %r" % want)
    # The simulated processes' names, beside their pids.
    rows = re.findall(r"^  (100[012]:\d) +(\S+) +\[", bodies[0], re.M)
    check(sorted(rows) == [("1000:0", "train.py"), ("1001:1", "train.py"),
                           ("1002:0", "infer-server")],
          "each pid:gpu row names its process: %s" % rows)
    check("\033" not in r.stdout, "batch output has no terminal escapes")
    check(max(len(l) for l in r.stdout.splitlines()) <= 100, "lines fit in 100 columns")

    r = watch("-j", "-n", "3", url)
    lines = r.stdout.splitlines()
    check(r.returncode == 0 and len(lines) == 3, "watch -j -n 3 prints three lines")
    check(all(json.loads(l)["simulated"] is True for l in lines), "each line is a snapshot")

    # Interactive: a pseudo-terminal, q quits.
    pid, fd = pty.fork()
    if pid == 0:
        os.execv(WATCH[0], WATCH + [url])
    out = b""
    deadline = time.time() + 10
    while time.time() < deadline and out.count(b"sonde watch  ") < 2:
        if select.select([fd], [], [], 0.5)[0]:
            try:
                out += os.read(fd, 65536)
            except OSError:
                break
    check(out.count(b"sonde watch  ") >= 2, "the live view redraws as snapshots come")
    check(b"\033[?1049h" in out and b"\033[H" in out,
          "it draws in place on its own screen (alternate screen, cursor home)")
    os.write(fd, b"q")
    deadline = time.time() + 5
    status = None
    while time.time() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if select.select([fd], [], [], 0.2)[0]:
            try:
                out += os.read(fd, 65536)
            except OSError:
                pass
    if status is None or not os.WIFEXITED(status):
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        fail("q didn't end the live view within 5 s")
    check(os.WEXITSTATUS(status) == 0, "q quits with exit 0")
    # What it wrote last may still be in the terminal when it has exited:
    # read it to the end (EIO once the other side is closed).
    deadline = time.time() + 5
    while time.time() < deadline and select.select([fd], [], [], 0.2)[0]:
        try:
            chunk = os.read(fd, 65536)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    check(b"\033[?1049l" in out, "it gives the terminal's screen back")
    os.close(fd)

    # Errors.
    r = watch("-b", "-n", "1", "ws://127.0.0.1:%d" % free_port())
    check(r.returncode == 1 and "can't connect to ws://127.0.0.1:" in r.stderr
          and "Connection refused" in r.stderr, "nothing listening: a clear error, exit 1")
    r = watch("-b", "-n", "1", "ws://127.0.0.1:%d" % h.http)
    check(r.returncode == 1 and "not a WebSocket upgrade" in r.stderr,
          "an HTTP port that isn't the stream: a clear error, exit 1")
    r = watch("-b", "wss://127.0.0.1:1")
    check(r.returncode == 2 and "not supported" in r.stderr, "wss:// is refused")

# The agent going away ends the watch with a message.
with SimAgent("--interval", "0.2") as h:
    cmd = WATCH + ["-b", "ws://127.0.0.1:%d" % h.ws]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # Stop the agent once watch shows its first frame (it is connected).
    ready = threading.Event()
    out_lines = []

    def read_out():
        for line in p.stdout:
            out_lines.append(line)
            if line.startswith("sonde watch  "):
                ready.set()

    reader = threading.Thread(target=read_out, daemon=True)
    reader.start()
    check(ready.wait(10), "watch shows a frame")
    h.stop()
    try:
        p.wait(10)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
        fail("watch didn't end within 10 s of the agent stopping")
    reader.join(5)
    err = p.stderr.read()
    print(err)
    check(p.returncode == 0 and "closed the stream" in err,
          "when the agent stops, watch says so and ends")
print("PASS")
