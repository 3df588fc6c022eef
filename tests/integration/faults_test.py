"""faults_test.py: helpers of the fault and load campaign's tests
(test_faults_*.py), stdlib only. Each test runs its short form in `make
test`; bench/campaign/run.sh runs the same script at full size by setting
its parameters in the environment (param()).

- param(NAME, default): a number from the environment.
- figures(case, dict): prints the case's figures as one line
  "FIGURES {json}" and appends it to $CAMPAIGN_OUT when set (the bench's
  report is made from those lines).
- Known: checks that fail because of a product bug whose fix is pending.
  Every other check runs first; at the end, if a known check failed, the
  test exits 77 with 'known failure: ...' (so the suite stays green and
  says why); once the product is fixed, the check passes and the test with
  it -- then remove the mark.
- Probe: a client that asks GET /healthz on a new connection every period,
  from 127.0.0.1, and keeps each answer's status and latency: what "others
  keep being answered" measures.
- restart_server(): a `sonde server` again on the same address and data.
- proc_mb(pid, key), reset_peak(pid): a process's memory figures (VmRSS,
  VmHWM) in MB, and its peak reset (root)."""
import json
import os
import socket
import threading
import time

from sonde_test import check, skip
from server_test import Server


def param(name, default):
    v = os.environ.get(name)
    if v is None or v == "":
        return default
    return type(default)(float(v)) if isinstance(default, int) else type(default)(v)


def figures(case, d):
    line = json.dumps(dict(d, case=case, date=time.strftime("%Y-%m-%d %H:%M:%S UTC",
                                                              time.gmtime()),
                           loadavg=os.getloadavg()), sort_keys=True, default=str)
    print("FIGURES " + line)
    out = os.environ.get("CAMPAIGN_OUT")
    if out:
        with open(out, "a") as f:
            f.write(line + "\n")


class Known:
    """known.check(cond, msg, fix) for the checks a pending product fix
    will make pass; known.end() at the test's end."""

    def __init__(self):
        self.failed = []

    def check(self, cond, msg):
        if cond:
            print("ok: " + msg)
        else:
            print("KNOWN FAILURE: " + msg)
            self.failed.append(msg)

    def end(self):
        if self.failed:
            skip("known failure: " + "; ".join(self.failed))


class Probe:
    """GET /healthz every period s on a new connection (timeout s), each in
    a thread of its own (a probe that hangs doesn't delay the next), until
    stop(); answers as (sent at, latency or None, status or error)."""

    def __init__(self, port, period=0.25, timeout=5.0, source="127.0.0.1"):
        self.port, self.period, self.timeout, self.source = port, period, timeout, source
        self.results = []
        self.sent = []  # when each probe was sent
        self.threads = []
        self.stop_ev = threading.Event()
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()

    def one(self):
        t0 = time.time()
        t = time.monotonic()
        s = None
        try:
            s = socket.create_connection(("127.0.0.1", self.port), timeout=self.timeout,
                                         source_address=(self.source, 0))
            s.settimeout(max(0.1, self.timeout - (time.monotonic() - t)))
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            data = b""
            while b"\r\n" not in data:
                chunk = s.recv(4096)
                if not chunk:
                    break
                data += chunk
            status = int(data.split()[1]) if data.startswith(b"HTTP/") else "no answer"
            r = (t0, time.monotonic() - t, status)
        except socket.timeout:
            r = (t0, None, "timeout")
        except OSError as e:
            r = (t0, None, type(e).__name__)
        finally:
            if s:
                s.close()
        self.results.append(r)

    def run(self):
        while not self.stop_ev.is_set():
            self.sent.append(time.time())
            t = threading.Thread(target=self.one, daemon=True)
            t.start()
            self.threads = [x for x in self.threads if x.is_alive()] + [t]
            self.stop_ev.wait(self.period)

    def between(self, t0, t1):
        return [r for r in self.results if t0 <= r[0] < t1]

    def stop(self):
        self.stop_ev.set()
        self.t.join(5)
        for t in self.threads:
            t.join(self.timeout + 5)

    @staticmethod
    def summary(rs, until=None):
        """Counts, latencies in ms, failures of rs; with until, an answer
        that came after it is not counted as answered (a probe of an
        attack answered once the attack ended)."""
        ok = sorted(lat for t, lat, st in rs
                    if st == 200 and (until is None or t + lat <= until))
        n = len(rs)

        def pct(p):
            return round(ok[min(len(ok) - 1, int(p * len(ok)))] * 1000, 1) if ok else None
        return {"probes": n, "answered": len(ok),
                "answered_pct": round(100.0 * len(ok) / n, 1) if n else None,
                "p50_ms": pct(0.5), "p99_ms": pct(0.99),
                "max_ms": round(ok[-1] * 1000, 1) if ok else None,
                "failures": sorted({str(st) for _, _, st in rs if st != 200}),
                "answered_after": len([1 for t, lat, st in rs
                                       if st == 200 and until and t + lat > until])}


def restart_server(data, port, args=()):
    """A new `sonde server` on 127.0.0.1:port over data (the old one
    killed); its port must be free again at once (SO_REUSEADDR)."""
    return Server(data, list(args), listen="127.0.0.1:%d" % port)


def need_root(what):
    if os.geteuid() != 0:
        skip("needs root to %s" % what)


def raise_nofile(want):
    """Raises this process's open-file limit to want (or the hard limit);
    returns what it got."""
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = want if hard == resource.RLIM_INFINITY else min(want, hard)
    if soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def check_verified(v, what):
    """The checks of LoadGen.verify()'s answer."""
    check(v["lost"] == 0 and v["duplicated"] == 0 and v["wrong"] == 0,
          "%s: every acknowledged window is there exactly once with its total (%d checked; "
          "lost %d, duplicated %d, wrong %d; e.g. %s)" % (what, v["checked"], v["lost"],
                                                           v["duplicated"], v["wrong"],
                                                           v["examples"][:3]))


def proc_mb(pid, key):
    """The figure key (VmRSS, VmHWM) of /proc/PID/status, in MB (0 if absent)."""
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024.0
    return 0.0


def reset_peak(pid):
    """Resets pid's peak RSS (VmHWM) to its RSS through /proc/PID/clear_refs:
    True, or False where that can't be done (not root)."""
    try:
        with open("/proc/%d/clear_refs" % pid, "w") as f:
            f.write("5")
        return True
    except OSError:
        return False
