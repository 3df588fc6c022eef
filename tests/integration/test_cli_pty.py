"""`sonde top` and `sonde watch` as a user sees them: in a pseudo-terminal of
a set size (TIOCSWINSZ), live, quit with q (issue 10).

- `top` on the machine while `shares` runs: the header's sample count is
  grouped by thousands (-F 999 over 2 s is more than 1,000 samples), a row
  names the process `shares` beside hot_a in the PROCESS column, and every
  line fits the terminal's 100 columns;
- `watch` of the metrics harness (the agent's metrics and stream, fed exact
  events) whose pids are real processes: each memory row has the process's
  name beside its pid (read by the agent, not sent by the test), a share of
  0.1 % of a GPU draws a sliver of a bar -- a partial block in a UTF-8
  terminal, a '#' in an ASCII one -- and reads "0.1%", 1,434,660 launches
  and 12,345 allreduces are grouped, a stuck collective names its process,
  and every line fits an 80-column terminal;
- `watch` of a real agent with nothing but a CPU workload (and no stand-in
  NVML on its library path): no GPU lines, no process holding GPU memory;
- `watch` of a real agent while the stand-in training job runs on two GPUs:
  its rows read `PID:0 gpu_train` and `PID:1 gpu_train`, its thousands of
  launches are grouped, the device lines are those of the GPUs in use and
  no others, and no bar of memory held is empty;
- `--help` of both explains every column and line."""
import fcntl
import json
import os
import re
import select
import signal
import struct
import subprocess
import sys
import termios
import threading
import time

from agent_test import GPU_WL, Agent, need_standins
from sonde_test import *

sys.path.insert(0, os.path.join(ROOT, "tests", "metrics"))
from metrics_test import Harness  # noqa: E402

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
GROUPED = re.compile(r"^\d{1,3}(,\d{3})*$")


def clean_env(**extra):
    """The environment without a library path: the agent's loader sees the
    machine as it is (no stand-in NVML, no stand-in CUDA)."""
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    env.update(extra)
    return env


class Pty:
    """args in a pseudo-terminal of rows x cols; .out holds what it drew."""

    def __init__(self, args, rows, cols, env=None):
        print("$ " + " ".join(args) + "   (pty %dx%d)" % (cols, rows))
        self.fd, slave = os.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        self.p = subprocess.Popen(args, stdin=slave, stdout=slave, stderr=slave, env=env,
                                  start_new_session=True)
        os.close(slave)
        self.out = b""

    def read(self, timeout):
        if select.select([self.fd], [], [], timeout)[0]:
            try:
                data = os.read(self.fd, 65536)
            except OSError:  # EIO: the other side is closed
                return False
            self.out += data
            return bool(data)
        return True

    def until(self, pred, timeout, what):
        """Reads until pred(self) holds; fails after timeout."""
        end = time.time() + timeout
        while time.time() < end:
            v = pred(self)
            if v:
                return v
            if not self.read(0.2) and self.p.poll() is not None:
                break
        v = pred(self)
        if v:
            return v
        print(self.text()[-4000:])
        fail("%s within %g s (exit %s)" % (what, timeout, self.p.poll()))

    def text(self):
        return self.out.decode("utf-8", "replace").replace("\r", "")

    def quit(self, timeout=10):
        """Presses q; the exit code."""
        os.write(self.fd, b"q")
        end = time.time() + timeout
        while time.time() < end and self.p.poll() is None:
            self.read(0.1)
        if self.p.poll() is None:
            self.close()
            fail("q didn't end %s within %g s" % (self.p.args[1], timeout))
        while self.read(0):
            pass
        return self.p.returncode

    def close(self):
        if self.p.poll() is None:
            self.p.kill()
            self.p.wait()
        try:
            os.close(self.fd)
        except OSError:
            pass


def top_frames(pty):
    """top's complete frames (each starts by clearing the screen and ends
    where the next starts), as lists of lines without escapes."""
    parts = pty.text().split("\x1b[H\x1b[2J")[1:-1]
    return [[ANSI.sub("", l) for l in p.split("\n")] for p in parts]


def watch_frames(pty):
    """watch's complete frames: from cursor home to the clear of the rest."""
    frames = []
    for part in pty.text().split("\x1b[H")[1:]:
        if "\x1b[J" in part and "sonde watch  " in part:
            frames.append([ANSI.sub("", l) for l in part.split("\x1b[J")[0].split("\n")])
    return frames


def mem_rows(frame):
    """{"PID:GPU": (process, bar, used)} of a watch frame's memory rows."""
    rows = {}
    for l in frame:
        m = re.match(r"^  (\d+:\d+)\s+(\S+)\s+\[([^\]]*)\]\s.*\s(\S+)$", l)
        if m:
            rows[m.group(1)] = (m.group(2), m.group(3), m.group(4))
    return rows


def device_lines(frame):
    return sorted(int(m.group(1)) for l in frame for m in [re.match(r"^  GPU (\d+) \(all", l)]
                  if m)


def count_after(frame, word):
    for l in frame:
        m = re.search(r" %s (\S+)" % word, l)
        if m:
            return m.group(1)
    return None


def bar_filled(bar):
    return any(c not in " ." for c in bar.replace("|", ""))


need_bpf()

# --- --help ------------------------------------------------------------------
h = run([SONDE, "top", "--help"], timeout=30)
for want in ["SELF%", "TOTAL%", "PROCESS", "FUNCTION", "MODULE"]:
    check(re.search(r"^  %s +\S" % re.escape(want), h.stdout, re.M),
          "top --help explains the column %s" % want)
check("samples" in h.stdout and "lost" in h.stdout and "thousands" in h.stdout,
      "top --help says what the header's counts are")
h = run([SONDE, "watch", "--help"], timeout=30)
for want in ["PID:GPU", "PROCESS", "CURRENT", "PEAK", "CAPACITY", "USED", "p50", "p99",
             "partial block", "GPU N (all pids)", "CUDA launch latency", "NCCL allreduce",
             "Dataloader wait", "Stuck collectives", "thousands"]:
    check(want in h.stdout, "watch --help explains %r" % want)
check(max(len(l) for l in h.stdout.splitlines()) <= 80, "watch --help fits 80 columns")

shares = subprocess.Popen([os.path.join(WL, "shares"), "120"], stdout=subprocess.DEVNULL)
try:
    # --- top --------------------------------------------------------------------
    t = Pty([SONDE, "top", "-F", "999", "-d", "2"], rows=40, cols=100, env=clean_env())
    try:
        def shares_frame(pty):
            for f in top_frames(pty):
                if any(l[17:32].strip() == "shares" and "hot_" in l[32:] for l in f[2:]):
                    return f
            return None
        f = t.until(shares_frame, 40, "a frame of top with a row of the process shares")
        print("\n".join(f))
        check(f[1].split()[:5] == ["SELF%", "TOTAL%", "PROCESS", "FUNCTION", "MODULE"],
              "the columns: %s" % f[1])
        m = re.search(r"  (\S+) samples in ([0-9.]+) s  (\S+) lost", f[0])
        check(m and GROUPED.match(m.group(1)) and int(m.group(1).replace(",", "")) >= 1000,
              "the sample count (over 1,000 at 999 Hz for 2 s) is grouped by thousands: %r"
              % f[0])
        check(all(len(l) <= 100 for fr in top_frames(t) for l in fr),
              "every line fits the terminal's 100 columns")
        check(t.quit() == 0, "q quits top with exit 0")
        check(b"\x1b[?25h" in t.out, "top shows the cursor again")
    finally:
        t.close()

    # --- watch: exact events in the agent's metrics, real pids ----------------
    with Harness() as hs:
        # Real processes, so that their names are theirs: shares and a sleep.
        proc = subprocess.Popen(["sleep", "120"])
        try:
            hs.send("capacity 0 100000000000 config",
                    "alloc %d 0 100000000" % shares.pid,  # 0.1 % of GPU 0
                    "alloc %d 0 60000000000" % proc.pid,  # 60 % of it
                    "launch %d 5000 1434660" % shares.pid,
                    "stuck %d allreduce 1 2 7f3a2c000000 75" % proc.pid)
            hs.send(*["nccl %d allreduce 1048576 30000000" % proc.pid] * 12345)
            url = "ws://127.0.0.1:%d" % hs.ws
            for loc, sliver in [("C.UTF-8", "\u258f"), ("C", "#")]:
                w = Pty([SONDE, "watch", url], rows=40, cols=80, env=clean_env(LC_ALL=loc))
                try:
                    f = w.until(lambda p: (watch_frames(p) or [None])[-1], 20,
                                "a frame of watch (%s)" % loc)
                    print("\n".join(f))
                    rows = mem_rows(f)
                    small, big = ("%d:0" % shares.pid), ("%d:0" % proc.pid)
                    check(rows.get(small, ("",))[0] == "shares" and
                          rows.get(big, ("",))[0] == "sleep",
                          "%s: each pid:gpu row has the process's name beside it: %s"
                          % (loc, rows))
                    bar = rows[small][1]
                    check(bar.startswith(sliver) and bar[1:].strip(" .") == "",
                          "%s: 0.1 %% of the GPU draws a sliver (%r): [%s]" % (loc, sliver, bar))
                    check(rows[small][2] == "0.1%" and rows[big][2] == "60.0%",
                          "%s: USED reads 0.1%% and 60.0%%: %s" % (loc, rows))
                    check(count_after(f, "launches") == "1,434,660",
                          "%s: launches 1,434,660 (%s)" % (loc, count_after(f, "launches")))
                    check(count_after(f, "calls") == "12,345",
                          "%s: allreduce calls 12,345 (%s)" % (loc, count_after(f, "calls")))
                    check(any(re.match(r"^  pid %d sleep  allreduce  rank 1/2" % proc.pid, l)
                              for l in f), "%s: the stuck collective names its process" % loc)
                    check(device_lines(f) == [0], "%s: one device line, GPU 0" % loc)
                    # (but the first, which holds the machine's name)
                    check(all(len(l) <= 80 for fr in watch_frames(w) for l in fr[1:]),
                          "%s: every line fits the terminal's 80 columns" % loc)
                    check(w.quit() == 0, "%s: q quits watch with exit 0" % loc)
                finally:
                    w.close()
        finally:
            proc.kill()
            proc.wait()

    # --- watch: a real agent, no GPU anywhere ------------------------------------
    a = Agent(["--no-library-search", "-p", str(shares.pid)], env=clean_env())
    try:
        # A machine with a real GPU has an NVML that names its devices.
        try:
            import ctypes
            ctypes.CDLL("libnvidia-ml.so.1")
            real_gpu = True
        except OSError:
            real_gpu = False
        w = Pty([SONDE, "watch", a.ws_url], rows=40, cols=100, env=clean_env(LC_ALL="C.UTF-8"))
        try:
            f = w.until(lambda p: watch_frames(p)[1:] and watch_frames(p)[-1], 20,
                        "two frames of watch")
            print("\n".join(f))
            check(any(l.strip() == "no process holds GPU memory" for l in f),
                  "no GPU: no process holds GPU memory")
            if real_gpu:
                print("SKIP (this part): libnvidia-ml.so.1 loads here -- a machine with a GPU")
            else:
                check(device_lines(f) == [] and
                      not any("GPU " in l and "(all pids)" in l for l in f),
                      "no GPU: no device lines")
            check(w.quit() == 0, "q quits watch with exit 0")
        finally:
            w.close()
    finally:
        a.stop()
finally:
    shares.kill()
    shares.wait()

# --- watch: a real agent, the stand-in training job on two GPUs ---------------
need_standins()
a = Agent(["--no-cpu"], env=clean_env())
job = None
try:
    # Without a terminal (a session of its own), the job waits in the loader
    # for the probes on the stand-ins it maps: every call is seen.
    cmd = [os.path.join(GPU_WL, "gpu_train"), "--gpus", "2", "--steps", "100", "--hold"]
    print("$ " + " ".join(cmd))
    job = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, start_new_session=True,
                           env=clean_env(SONDE_STANDIN_KERNEL_US="5"))
    truth = {}
    reader = threading.Thread(target=lambda: truth.update(json.loads(job.stdout.readline())),
                              daemon=True)
    reader.start()
    reader.join(60)
    check(truth.get("pid") == job.pid, "gpu_train ran its 100 steps and holds its memory")
    w = Pty([SONDE, "watch", a.ws_url], rows=40, cols=100, env=clean_env(LC_ALL="C.UTF-8"))
    try:
        keys = ["%d:0" % job.pid, "%d:1" % job.pid]

        def launches(f):
            n = count_after(f, "launches") or "0"
            return int(n.replace(",", "")) if re.match(r"^[\d,]+$", n) else 0

        # Once the agent has taken the job's events in (a busy machine delays it).
        def job_frame(p):
            for f in reversed(watch_frames(p)):
                if all(k in mem_rows(f) for k in keys) and launches(f) >= 1000:
                    return f
            return None
        f = w.until(job_frame, 30, "a frame of watch with gpu_train's two rows and its launches")
        print("\n".join(f))
        rows = mem_rows(f)
        check(all(rows[k][0] == "gpu_train" for k in keys),
              "the agent names the job beside its pid on both GPUs: %s"
              % {k: rows[k][0] for k in keys})
        n = count_after(f, "launches")
        check(n and GROUPED.match(n) and int(n.replace(",", "")) >= 1000,
              "its launches (%d by its own count) are grouped by thousands: %s"
              % (truth["launches"]["total"], n))
        gpus = sorted({int(k.split(":")[1]) for k in rows})
        check(device_lines(f) == gpus,
              "a device line per GPU in use, no other: %s (in use: %s)" % (device_lines(f), gpus))
        check(all(bar_filled(rows[k][1]) for k in keys),
              "the memory it holds shows in its bars: %s" % [rows[k][1] for k in keys])
        check(w.quit() == 0, "q quits watch with exit 0")
    finally:
        w.close()
finally:
    if job:
        try:
            job.stdin.close()
        except OSError:
            pass
        try:
            job.wait(30)
        except subprocess.TimeoutExpired:
            job.kill()
            job.wait()
    a.stop()
print("PASS")
