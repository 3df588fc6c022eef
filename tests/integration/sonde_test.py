"""sonde_test.py: helpers shared by the integration tests (stdlib only).

A test exits 0 on success, 77 to skip (printing why), anything else to fail.
Paths are relative to the repository root, where tests/run.sh runs them."""
import os
import socket
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
B = os.path.join(ROOT, os.environ.get("B", "build"))
SONDE = os.path.join(B, "sonde")
WL = os.path.join(B, "workloads")


def skip(reason):
    print("SKIP: " + reason)
    sys.exit(77)


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def check(cond, msg):
    if not cond:
        fail(msg)
    print("ok: " + msg)


def need_bpf():
    if os.geteuid() != 0:
        skip("needs root to load BPF programs")
    if not os.path.exists("/sys/kernel/btf/vmlinux"):
        skip("kernel has no BTF (/sys/kernel/btf/vmlinux)")


_tmpdirs = []


def _remove_tmpdirs():
    import shutil
    for d in _tmpdirs:
        shutil.rmtree(d, ignore_errors=True)


def tmpdir():
    """A new directory, removed when the test exits."""
    if not _tmpdirs:
        import atexit
        atexit.register(_remove_tmpdirs)
    d = tempfile.mkdtemp(prefix="sonde-test-")
    _tmpdirs.append(d)
    return d


def free_port():
    """A TCP port on 127.0.0.1 that nothing listens on just now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(args, timeout=120, **kw):
    """Runs a command, returning CompletedProcess with text output."""
    print("$ " + " ".join(args))
    p = subprocess.run(args, capture_output=True, text=True, timeout=timeout, **kw)
    if p.stdout.strip():
        print(p.stdout[-3000:])
    if p.stderr.strip():
        print(p.stderr[-3000:])
    return p


def record(args, timeout=120):
    return run([SONDE, "record"] + args, timeout=timeout)


class Recording:
    """`sonde record ARGS` in the background (whole machine or -p), started
    once it says it samples; .stop() sends SIGINT, .wait() waits."""

    def __init__(self, args, timeout=60):
        import threading
        import time
        print("$ " + " ".join([SONDE, "record"] + args))
        self.p = subprocess.Popen([SONDE, "record"] + args, stderr=subprocess.PIPE, text=True)
        self.err = []
        ready = threading.Event()

        def pump():
            for line in self.p.stderr:
                self.err.append(line)
                if "sampling" in line:
                    ready.set()
            ready.set()
        self.t = threading.Thread(target=pump, daemon=True)
        self.t.start()
        if not ready.wait(timeout) or self.p.poll() is not None:
            fail("sonde record did not start sampling: %s" % "".join(self.err[-10:]))

    def stop(self, sig=2):
        self.p.send_signal(sig)
        return self.wait()

    def wait(self, timeout=60):
        self.p.wait(timeout)
        self.t.join(5)
        print("".join(self.err[-20:]))
        return self.p.returncode


def cpu_seconds(pid):
    """User + system CPU time of pid so far, from /proc/PID/stat."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_until(fn, timeout, what, step=0.02):
    """Polls fn() until it returns a true value, within timeout seconds."""
    import time
    end = time.time() + timeout
    while time.time() < end:
        v = fn()
        if v:
            return v
        time.sleep(step)
    fail("timed out after %g s waiting for %s" % (timeout, what))


def parse_folded(path):
    """Returns [(frames, count)] with frames root first, comm first."""
    out = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.rstrip("\n")
            if not line:
                continue
            stack, _, count = line.rpartition(" ")
            if not stack or not count.isdigit():
                fail("%s:%d: malformed folded line %r" % (path, n, line))
            out.append((stack.split(";"), int(count)))
    return out


def for_comm(stacks, comm):
    return [(s, c) for s, c in stacks if s and s[0] == comm]


def total(stacks):
    return sum(c for _, c in stacks)


def share(stacks, func):
    """Inclusive share (0-100) of the samples with func on the stack."""
    t = total(stacks)
    if t == 0:
        return 0.0
    return 100.0 * sum(c for s, c in stacks if func in s) / t


def in_order(frames, want, wild=()):
    """Whether a folded stack (comm first, then root to leaf) has the frames
    of want in that order, want[0] at its root; a None in want is any frame
    in wild."""
    if frames[1:2] != list(want[:1]):
        return False
    i = 0
    for f in frames[1:]:
        w = want[i]
        if (w is None and f in wild) or f == w:
            i += 1
            if i == len(want):
                return True
    return False


def chains(stacks, func, start="main"):
    """{chain-from-start-to-func: count} over the stacks containing func."""
    res = {}
    for s, c in stacks:
        if func not in s:
            continue
        j = s.index(func)
        i = s.index(start) if start in s[:j] else -1
        key = tuple(s[i:j + 1]) if i >= 0 else ("<no %s>" % start,) + tuple(s[:j + 1])
        res[key] = res.get(key, 0) + c
    return res
