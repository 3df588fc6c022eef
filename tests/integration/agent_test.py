"""agent_test.py: helpers of the tests that run the real `sonde agent`
(stdlib only): start it on free loopback ports, read its metrics, build and
run the GPU stand-in workloads (tests/gpu/)."""
import json
import os
import re
import signal
import subprocess
import threading
import time
import urllib.request

from sonde_test import *

GPU_SI = os.path.join(B, "gpu", "standin")
GPU_WL = os.path.join(B, "gpu", "workloads")


def standin_env():
    """The agent's environment on a node whose CUDA and NCCL libraries are
    where the loader looks: the stand-ins' directory on LD_LIBRARY_PATH, so
    that the agent attaches to them at start (gpu_probes__attach_known)."""
    return dict(os.environ, LD_LIBRARY_PATH=GPU_SI)


def need_standins():
    """Skips unless the CUDA headers are there; builds the stand-in
    libraries and workloads (a no-op when they are up to date)."""
    cuda = os.environ.get("CUDA_HOME", "/usr/local/cuda")
    for h in ("include/cuda.h", "include/cuda_runtime_api.h", "include/nccl.h"):
        if not os.path.exists(os.path.join(cuda, h)):
            skip("no %s/%s: the stand-in GPU libraries are built against the CUDA headers"
                 % (cuda, h))
    p = subprocess.run(["make", "-s", "-C", ROOT, "-f", "tests/gpu/standin/standin.mk",
                        "B=" + os.path.relpath(B, ROOT), "gpu-standin"],
                       capture_output=True, text=True)
    if p.returncode != 0:
        print(p.stdout[-3000:], p.stderr[-3000:])
        fail("building the stand-ins failed")


class Agent:
    """`sonde agent` on 127.0.0.1 with free ports; stderr kept in .log."""

    def __init__(self, args, timeout=30, env=None):
        cmd = [SONDE, "agent", "--metrics", "127.0.0.1:0", "--ws", "127.0.0.1:0"] + args
        print("$ " + " ".join(cmd))
        self.p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE, text=True, env=env)
        self.log = []
        self.metrics_url = self.ws_url = None
        ready = threading.Event()

        def reader():
            for line in self.p.stderr:
                self.log.append(line.rstrip("\n"))
                m = re.search(r"metrics on (http://[^ ]+)/metrics, stream on (ws://[^ ,]+)", line)
                if m:
                    self.metrics_url, self.ws_url = m.group(1), m.group(2)
                    ready.set()
            ready.set()

        self.t = threading.Thread(target=reader, daemon=True)
        self.t.start()
        if not ready.wait(timeout) or not self.metrics_url:
            self.stop()
            print("\n".join(self.log[-30:]))
            fail("sonde agent did not start (exit %s)" % self.p.poll())

    def get(self, path, timeout=10):
        with urllib.request.urlopen(self.metrics_url + path, timeout=timeout) as r:
            return r.read()

    def metrics(self):
        return parse_prom(self.get("/metrics").decode())

    def stop(self, timeout=30):
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGINT)
            try:
                self.p.wait(timeout)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        self.t.join(5)
        return self.p.returncode

    def dump_log(self, n=40):
        print("--- agent log (last %d lines)" % n)
        print("\n".join(self.log[-n:]))


_LINE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_prom(text):
    """Prometheus text -> {(name, ((k, v), ...)): value}, labels sorted."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _LINE.match(line)
        if not m:
            fail("unparsable exposition line: %r" % line)
        labels = tuple(sorted(_LABEL.findall(m.group(3) or "")))
        out[(m.group(1), labels)] = float(m.group(4))
    return out


def value(metrics, name, **labels):
    """The value of the series name{labels...} (exactly those labels), or None."""
    return metrics.get((name, tuple(sorted((k, str(v)) for k, v in labels.items()))))


def series(metrics, name):
    """[(labels dict, value)] of every series of name."""
    return [(dict(l), v) for (n, l), v in metrics.items() if n == name]


def poll_until(fn, done, timeout, step=0.1):
    """Calls fn() until done(its value) or timeout seconds have passed;
    returns the last value, for a check that says what was seen when it is
    not what was wanted."""
    end = time.time() + timeout
    v = fn()
    while not done(v) and time.time() < end:
        time.sleep(step)
        v = fn()
    return v


def wait_for(fn, timeout, what, step=0.1):
    """Polls fn() until it returns a true value; fails after timeout."""
    end = time.time() + timeout
    while time.time() < end:
        v = fn()
        if v:
            return v
        time.sleep(step)
    fail("timed out after %g s waiting for %s" % (timeout, what))


class Workload:
    """A stand-in workload with --hold: runs until its truth line is printed,
    then holds (its process alive) until release()."""

    def __init__(self, prog, args, env_extra=None):
        env = dict(os.environ, SONDE_STANDIN_KERNEL_US="5")
        env.update(env_extra or {})
        cmd = [os.path.join(GPU_WL, prog)] + args + ["--hold"]
        print("$ " + " ".join(cmd))
        self.p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, env=env)
        line = self.p.stdout.readline()
        if not line.startswith("{"):
            self.p.kill()
            fail("%s printed no truth line: %r %s" % (prog, line, self.p.stderr.read()[-2000:]))
        self.truth = json.loads(line)
        self.pid = self.truth["pid"]

    def release(self):
        self.p.stdin.close()
        return self.p.wait(30)
