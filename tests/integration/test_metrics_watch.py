"""`sonde watch` against `sonde agent --simulate`: `watch -b -n 2` prints exactly
two frames with the memory per pid:gpu, launch latency, allreduce and
dataloader lines and the simulated marker, and exits 0; -j prints the
snapshots as JSON lines; the interactive mode (in a pseudo-terminal) draws
in place on its own screen and quits on q; an address with nothing
listening, or an HTTP port that isn't a WebSocket, fails with a clear error."""
import json
import os
import pty
import select
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "metrics"))
from metrics_test import SONDE, SimAgent, check, fail, free_port  # noqa: E402

WATCH = [SONDE, "watch"]
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
    bodies = r.stdout.split("sonde watch  ")[1:]
    for want in ["GPU memory (pid:gpu)", "1000:0", "1001:1", "CUDA launch latency",
                 "NCCL allreduce", "Dataloader wait", "GiB", " us ", " ms "]:
        check(all(want in b for b in bodies), "each frame shows %r" % want)
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
    time.sleep(1)
    h.stop()
    out, err = p.communicate(timeout=10)
    print(err)
    check(p.returncode == 0 and "closed the stream" in err,
          "when the agent stops, watch says so and ends")
print("PASS")
