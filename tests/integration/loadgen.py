"""loadgen.py: simulated agents for the fault and load campaign
(tests/integration/test_faults_*.py, bench/campaign/), stdlib only.

Each simulated agent posts what a real `sonde agent --server` posts
(src/agent/shipper.c, agent.c): every window a gzip-compressed pprof of
sample types [samples/count, cpu/nanoseconds] with the period, the window's
time and duration, and each sample's pid, tid and comm labels, to
POST /api/v1/ingest?type=cpu&from=&until=&node=&key= with the key
NODE/START_MS/WINDOW/cpu, over one kept-alive connection (as libcurl's easy
handle keeps it). It keeps a queue of its windows and sends the oldest
until it is acknowledged (2xx): a connection error, a timeout (10 s), a 5xx,
408 or 429 puts it back at the head for another try after a backoff of 1 s
doubling to 30 s; any other 4xx drops it, counted as rejected. Every agent
runs on one asyncio loop in a thread of its own: 200 agents at 20 windows
a second cost about 13 % of a core (reported beside the server's CPU).

Afterwards verify() asks the server for each agent's windows, one time
series per agent with a step of one window: every acknowledged window must
be there exactly once with its exact total of samples (0 is a lost
window, twice the total a duplicate), and a window never acknowledged is
there once or not at all.

Content: a fleet of the same software -- PROGRAMS programs whose stacks
(8 to 40 frames, from a pool of functions in a few modules) every agent
shares -- each agent running PROCS processes of them; a window holds
about HZ x CPUS x WINDOW samples over the processes' stacks and threads
(49 Hz, 2 CPUs, 10 s: 980 samples, some 400 distinct (thread, stack)
pairs). Deterministic from the seed."""
import asyncio
import gzip
import os
import random
import threading
import time
import urllib.parse

from pprof_wire import field, packed, vint

HZ = 49
PERIOD_NS = 1000000000 // HZ
PROGRAMS = 40
FUNCTIONS = 3000
MODULES = ["/usr/bin/python3.11", "/usr/lib/x86_64-linux-gnu/libc.so.6",
           "/usr/lib/x86_64-linux-gnu/libstdc++.so.6", "/opt/app/bin/server",
           "/usr/lib/x86_64-linux-gnu/libtorch_cpu.so", "[kernel.kallsyms]"]
COMMS = ["python3", "trainer", "nginx", "postgres", "envoy", "java", "node", "redis-server",
         "dataloader", "sshd", "containerd", "kubelet"]


class Fleet:
    """The stacks every agent shares: PROGRAMS programs, each with its
    stacks (lists of function ids, root first)."""

    def __init__(self, seed=1, stacks_per_program=60):
        r = random.Random(seed)
        self.funcs = ["%s_%s_%d" % (r.choice(["run", "do", "handle", "step", "read", "write",
                                              "parse", "encode", "alloc", "lock", "poll"]),
                                    r.choice(["batch", "request", "frame", "page", "row",
                                              "tensor", "event", "buffer", "node"]), i)
                      for i in range(FUNCTIONS)]
        self.module_of = [r.randrange(len(MODULES)) for _ in range(FUNCTIONS)]
        self.programs = []
        for g in range(PROGRAMS):
            base = [r.randrange(FUNCTIONS) for _ in range(4)]
            stacks = []
            for _ in range(stacks_per_program):
                depth = r.randint(4, 36)
                stacks.append(base + [r.randrange(FUNCTIONS) for _ in range(depth)])
            self.programs.append(stacks)


class SimAgent:
    """One agent: its processes, the static part of its pprof (strings,
    functions, locations, mappings), its windows and its queue."""

    def __init__(self, fleet, node, start_ms, window_ms, seed, procs=30, cpus=2):
        self.node, self.start_ms, self.window_ms = node, start_ms, window_ms
        self.r = random.Random(seed)
        self.samples_per_window = max(1, HZ * cpus * window_ms // 1000)
        self.procs = []  # (pid, comm index into strings, [stack as location ids])
        used = {}
        strings = ["", "samples", "count", "cpu", "nanoseconds", "pid", "tid", "comm"]
        for k in range(procs):
            g = self.r.randrange(PROGRAMS)
            comm = COMMS[g % len(COMMS)]
            if comm not in strings:
                strings.append(comm)
            pid = 1000 + self.r.randrange(4000000)
            stacks = self.r.sample(fleet.programs[g], min(20, len(fleet.programs[g])))
            for s in stacks:
                for f in s:
                    used.setdefault(f, len(used) + 1)
            self.procs.append((pid, strings.index(comm), stacks))
        # Location id = function id (one location per function), as
        # pprof_wire does; a mapping per module. A window holds the
        # locations and functions its samples use, as the agent's writer
        # does; the string table keeps every function's slot, empty for
        # those the window doesn't use, so that the pieces are encoded once.
        mods = {}
        for f in used:
            mods.setdefault(fleet.module_of[f], len(mods) + 1)
        msg = b""
        for mod, mid in mods.items():
            strings.append(MODULES[mod])
            msg += field(3, vint(1, mid) + vint(2, mid << 28) + vint(3, (mid + 1) << 28) +
                         vint(5, len(strings) - 1))
        for x in strings:
            msg += field(6, x.encode())
        # sample_type [samples/count, cpu/nanoseconds], period_type cpu/ns.
        msg += field(1, vint(1, 1) + vint(2, 2)) + field(1, vint(1, 3) + vint(2, 4))
        msg += field(11, vint(1, 3) + vint(2, 4)) + vint(12, PERIOD_NS)
        self.static = msg
        self.nfuncs = len(used)
        self.func_bytes = [b""] * (len(used) + 1)  # by id: location, function
        self.name_bytes = [b""] * (len(used) + 1)  # by id: its string
        for f, fid in used.items():
            mid = mods[fleet.module_of[f]]
            name = len(strings) + fid - 1
            self.func_bytes[fid] = (field(4, vint(1, fid) + vint(2, mid) +
                                          vint(3, mid << 28 | fid << 4) + field(4, vint(1, fid)))
                                    + field(5, vint(1, fid) + vint(2, name) + vint(3, name)))
            self.name_bytes[fid] = field(6, fleet.funcs[f].encode())
        # (a thread's stack): its locations encoded, its location ids, its
        # labels pid, tid and comm encoded.
        self.combos = []
        for pid, comm, stacks in self.procs:
            labels = [field(3, vint(1, 5) + vint(3, pid)) + field(3, vint(1, 6) +
                                                                   vint(3, pid + t)) +
                      field(3, vint(1, 7) + vint(2, comm)) for t in range(4)]
            for s in stacks:
                ids = [used[f] for f in reversed(s)]
                locs = packed(1, ids)
                for t in range(4):
                    self.combos.append((locs, ids, labels[t]))
        self.totals = []  # window index -> samples in it
        self.queue = []   # window indexes waiting to be sent, oldest first
        self.acked = {}   # window index -> (latency of the acknowledged try, tries)
        self.tries = {}
        self.rejected = []
        self.produced = None  # windows made, once it stopped making them

    def window(self, i):
        """The body of window i (gzip pprof) and its query path; records its
        total."""
        # Totals differ from window to window: a window put in another's
        # place reads wrong.
        total = self.samples_per_window + self.r.randrange(self.samples_per_window // 10 + 2)
        counts = {}
        for k in self.r.choices(range(len(self.combos)), k=total):
            counts[k] = counts.get(k, 0) + 1
        msg = bytearray(self.static)
        fids = set()
        for k in counts:
            fids.update(self.combos[k][1])
        empty = field(6, b"")
        msg += b"".join(self.name_bytes[f] if f in fids else empty
                        for f in range(1, self.nfuncs + 1))
        msg += b"".join(self.func_bytes[f] for f in sorted(fids))
        for k, c in counts.items():
            msg += field(2, self.combos[k][0] + packed(2, [c, c * PERIOD_NS]) + self.combos[k][2])
        frm = self.start_ms + i * self.window_ms
        msg += vint(9, frm * 1000000) + vint(10, self.window_ms * 1000000)
        assert len(self.totals) == i
        self.totals.append(total)
        q = urllib.parse.urlencode([("type", "cpu"), ("from", frm),
                                    ("until", frm + self.window_ms), ("node", self.node),
                                    ("key", "%s/%d/%d/cpu" % (self.node, self.start_ms, i))])
        # Level 1, not the agent's 6: a third of the generator's CPU, and the
        # server inflates either alike.
        return "/api/v1/ingest?" + q, gzip.compress(bytes(msg), 1, mtime=0)


class Conn:
    """One kept-alive HTTP/1.1 connection (asyncio streams)."""

    def __init__(self):
        self.reader = self.writer = None

    def close(self):
        if self.writer:
            self.writer.transport.abort()
        self.reader = self.writer = None

    async def post(self, host, port, path, body):
        if not self.writer:
            self.reader, self.writer = await asyncio.open_connection(host, port)
        self.writer.write(("POST %s HTTP/1.1\r\nHost: %s:%d\r\nUser-Agent: sonde-loadgen\r\n"
                           "Accept: */*\r\nContent-Type: application/octet-stream\r\n"
                           "Content-Length: %d\r\n\r\n" % (path, host, port, len(body))).encode()
                          + body)
        await self.writer.drain()
        line = await self.reader.readline()
        if not line:
            raise ConnectionError("the server closed the connection")
        status = int(line.split()[1])
        length, chunked, close = 0, False, False
        headers = {}
        while True:
            h = await self.reader.readline()
            if h in (b"\r\n", b"\n", b""):
                break
            k, _, v = h.decode("latin-1").partition(":")
            k, v = k.strip().lower(), v.strip()
            headers[k] = v
            if k == "content-length":
                length = int(v)
            elif k == "transfer-encoding" and "chunked" in v.lower():
                chunked = True
            elif k == "connection" and v.lower() == "close":
                close = True
        if chunked:
            data = b""
            while True:
                n = int((await self.reader.readline()).split(b";")[0], 16)
                if n == 0:
                    await self.reader.readline()
                    break
                data += await self.reader.readexactly(n)
                await self.reader.readline()
        else:
            data = await self.reader.readexactly(length) if length else b""
        if close:
            self.close()
        return status, headers, data


class LoadGen:
    """n simulated agents posting windows of window_s seconds to
    127.0.0.1:port (an attribute: change it when the server moves) for
    duration_s seconds (None: until stop()), started at once in a thread.

    Backoff and timeout are the agent's (1 s doubling to 30 s, 10 s);
    stagger spreads the agents' starts over one window (False: every agent
    posts at the same instants, bursts of n requests in flight).
    in_flight is the number of requests sent and not yet answered;
    duplicates counts the acknowledgements that said the server had the
    window already (sent again after a lost answer: its key)."""

    def __init__(self, port, n, window_s, duration_s=None, seed=1, procs=30, cpus=2,
                 prefix=None, backoff_first=1.0, backoff_max=30.0, timeout=10.0,
                 max_age_s=900, host="127.0.0.1", stagger=True):
        self.host, self.port, self.n = host, port, n
        self.window_ms = int(window_s * 1000)
        self.duration_s, self.timeout = duration_s, timeout
        self.backoff_first, self.backoff_max = backoff_first, backoff_max
        self.max_age_ms = max_age_s * 1000
        prefix = prefix or "sim%d" % (int(time.time() * 1000) % 100000000)
        fleet = Fleet(seed)
        self.agents = [SimAgent(fleet, "%s-%03d" % (prefix, k), 0, self.window_ms,
                                seed * 100003 + k, procs, cpus) for k in range(n)]
        t0 = int(time.time() * 1000) + 200
        r = random.Random(seed)
        for a in self.agents:
            a.start_ms = t0 + (r.randrange(self.window_ms) if stagger else 0)
        self.statuses = {}     # status (or "error: kind") -> count of tries
        self.latencies = []    # seconds of each acknowledged try
        self.try_latencies = []  # of every try that got an answer
        self.tries_log = []    # (when it ended, latency, status) of every try
        self.dropped_too_old = 0
        self.in_flight = 0
        self.duplicates = 0
        self.retry_after = {}  # status -> answers of it with a Retry-After
        self.producing = True
        self.started = time.time()
        self.stopped_producing = None
        self.loop = None
        self._stop = None
        self.drain_deadline = None
        self.crashed = None
        self._ready = threading.Event()
        self.t = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)
        self.t.start()
        if not self._ready.wait(30):
            raise RuntimeError("the load generator's event loop did not start within 30 s")

    # ---- the loop ----

    async def _main(self):
        self.loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        self._ready.set()
        await asyncio.gather(*(self._agent(a) for a in self.agents))

    async def _agent(self, a):
        wake = asyncio.Event()
        await asyncio.gather(self._produce(a, wake), self._ship(a, wake))

    async def _produce(self, a, wake):
        i = 0
        while True:
            end_ms = a.start_ms + (i + 1) * a.window_ms
            delay = end_ms / 1000.0 - time.time()
            if delay > 0:
                try:
                    await asyncio.wait_for(self._stop.wait(), delay)
                except asyncio.TimeoutError:
                    pass
            if not self.producing or (self.duration_s is not None and
                                      end_ms / 1000.0 > self.started + self.duration_s):
                break
            path, body = a.window(i)
            a.queue.append((i, path, body, end_ms))
            i += 1
            wake.set()
        a.produced = i
        wake.set()

    async def _ship(self, a, wake):
        conn = Conn()
        backoff = 0.0
        while True:
            if not a.queue:
                if a.produced is not None:
                    break
                wake.clear()
                await wake.wait()
                continue
            if self.drain_deadline and time.time() > self.drain_deadline:
                break
            now_ms = time.time() * 1000
            while a.queue and now_ms - a.queue[0][3] > self.max_age_ms:
                a.queue.pop(0)
                self.dropped_too_old += 1
            if not a.queue:
                continue
            i, path, body, _ = a.queue[0]
            a.tries[i] = a.tries.get(i, 0) + 1
            t = time.monotonic()
            h = {}
            self.in_flight += 1
            try:
                st, h, data = await asyncio.wait_for(
                    conn.post(self.host, self.port, path, body), self.timeout)
                self.try_latencies.append(time.monotonic() - t)
            except asyncio.TimeoutError:
                conn.close()
                st = "error: timeout"
            except (OSError, ConnectionError, asyncio.IncompleteReadError, ValueError,
                    IndexError) as e:
                conn.close()
                st = "error: " + type(e).__name__
            finally:
                self.in_flight -= 1
            self.tries_log.append((time.time(), time.monotonic() - t, st))
            self.statuses[st] = self.statuses.get(st, 0) + 1
            if isinstance(st, int) and st >= 400 and "retry-after" in h:
                self.retry_after[st] = self.retry_after.get(st, 0) + 1
            if isinstance(st, int) and 200 <= st < 300:
                if b'"duplicate":true' in data.replace(b" ", b""):
                    self.duplicates += 1
                a.queue.pop(0)
                a.acked[i] = (time.monotonic() - t, a.tries[i])
                self.latencies.append(time.monotonic() - t)
                backoff = 0.0
                continue
            if isinstance(st, int) and 400 <= st < 500 and st not in (408, 429):
                a.queue.pop(0)
                a.rejected.append((i, st, data[:200]))
                continue
            backoff = min(self.backoff_max, backoff * 2 if backoff else self.backoff_first)
            if self.drain_deadline:
                backoff = max(0.0, min(backoff, self.drain_deadline - time.time()))
            await asyncio.sleep(backoff)
        conn.close()

    # ---- control and figures ----

    def latency_between(self, t0, t1):
        """p50, p99 and max (ms) of the tries that ended in [t0, t1) and were
        acknowledged, and how many tries ended then."""
        lat = sorted(x[1] for x in self.tries_log
                     if t0 <= x[0] < t1 and isinstance(x[2], int) and 200 <= x[2] < 300)
        n = sum(1 for x in self.tries_log if t0 <= x[0] < t1)
        if not lat:
            return {"tries": n, "acked": 0}
        return {"tries": n, "acked": len(lat),
                "p50_ms": round(lat[len(lat) // 2] * 1000, 1),
                "p99_ms": round(lat[min(len(lat) - 1, int(0.99 * len(lat)))] * 1000, 1),
                "max_ms": round(lat[-1] * 1000, 1)}

    def acked(self):
        return sum(len(a.acked) for a in self.agents)

    def queued(self):
        return sum(len(a.queue) for a in self.agents)

    def stop(self, drain_s=60):
        """Stops making windows and sends what is queued (drain_s at most,
        as an agent stopping does); returns the windows left unsent."""
        self.producing = False
        self.stopped_producing = time.time()
        self.drain_deadline = time.time() + drain_s
        if self.t.is_alive():
            try:
                self.loop.call_soon_threadsafe(self._stop.set)
            except RuntimeError:  # the loop has just ended
                pass
        self.t.join(drain_s + 30)
        return self.queued()

    def figures(self):
        lat = sorted(self.latencies)

        def pct(p):
            return lat[min(len(lat) - 1, int(p * len(lat)))] if lat else float("nan")
        made = sum(len(a.totals) for a in self.agents)
        return {
            "agents": self.n, "window_s": self.window_ms / 1000.0,
            "windows": made, "acknowledged": self.acked(),
            "unsent": self.queued(), "rejected": sum(len(a.rejected) for a in self.agents),
            "dropped_too_old": self.dropped_too_old,
            "duplicate_acks": self.duplicates,
            "retried_windows": sum(1 for a in self.agents for i, t in a.tries.items() if t > 1),
            "tries": sum(self.statuses.values()),
            "statuses": {str(k): v for k, v in sorted(self.statuses.items(), key=str)},
            "with_retry_after": {str(k): v for k, v in sorted(self.retry_after.items())},
            "latency_p50_ms": pct(0.50) * 1000, "latency_p99_ms": pct(0.99) * 1000,
            "latency_max_ms": (lat[-1] * 1000) if lat else float("nan"),
            "samples": sum(sum(a.totals) for a in self.agents),
            "crashed": self.crashed,
        }

    def verify(self, get_json):
        """Every window of every agent against the server's time series
        (get_json(path, **params) -> the decoded answer). Returns
        {"checked", "lost", "duplicated", "wrong", "unacked_present",
        "examples"}: lost, duplicated and wrong count acknowledged windows
        not there exactly once (wrong also counts a window never
        acknowledged that is there with another value)."""
        out = {"checked": 0, "lost": 0, "duplicated": 0, "wrong": 0, "unacked_present": 0,
               "examples": []}
        for a in self.agents:
            n = len(a.totals)
            if not n:
                continue
            r = get_json("/api/v1/timeseries", query='{node="%s",type="cpu"}' % a.node,
                         step=a.window_ms, **{"from": a.start_ms,
                                              "until": a.start_ms + n * a.window_ms})
            vals = r["values"] + [0] * (n - len(r["values"]))
            for i in range(n):
                want, got = a.totals[i], vals[i]
                out["checked"] += 1
                if i in a.acked:
                    if abs(got - want) < 1e-6:
                        continue
                    kind = ("lost" if abs(got) < 1e-6 else
                            "duplicated" if abs(got - 2 * want) < 1e-6 else "wrong")
                elif abs(got) < 1e-6:
                    continue
                elif abs(got - want) < 1e-6:
                    out["unacked_present"] += 1
                    continue
                else:
                    kind = "wrong"
                out[kind] += 1
                if len(out["examples"]) < 10:
                    out["examples"].append((a.node, i, want, got, i in a.acked))
        return out


class ProcWatch:
    """Samples a process's RSS and CPU time every interval seconds in a
    thread; the pid may change (a restarted server): CPU adds up across
    pids. rss_max_mb is the highest VmRSS seen, hwm_mb the highest
    VmHWM; timeline holds (seconds, VmRSS MB, CPU seconds) once a
    minute."""

    def __init__(self, pid, interval=0.5):
        self.pid, self.interval = pid, interval
        self.rss_max_mb = self.hwm_mb = self.rss_last_mb = 0.0
        self.cpu_done = 0.0  # of pids before the current one
        self.cpu_pid = self._cpu(pid) or 0.0
        self.cpu_start = self.cpu_pid
        self.t0 = time.time()
        self.timeline = []
        self.stop_ev = threading.Event()
        self.lock = threading.Lock()
        self.t = threading.Thread(target=self._run, daemon=True)
        self.t.start()

    @staticmethod
    def _cpu(pid):
        try:
            with open("/proc/%d/stat" % pid) as f:
                x = f.read().rsplit(")", 1)[1].split()
            return (int(x[11]) + int(x[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, IndexError, ValueError):
            return None

    def _sample(self):
        with self.lock:
            try:
                with open("/proc/%d/status" % self.pid) as f:
                    for line in f:
                        if line.startswith("VmRSS:"):
                            self.rss_last_mb = int(line.split()[1]) / 1024.0
                            self.rss_max_mb = max(self.rss_max_mb, self.rss_last_mb)
                        elif line.startswith("VmHWM:"):
                            self.hwm_mb = max(self.hwm_mb, int(line.split()[1]) / 1024.0)
            except OSError:
                pass
            c = self._cpu(self.pid)
            if c is not None:
                self.cpu_pid = c

    def _run(self):
        while not self.stop_ev.wait(self.interval):
            self._sample()
            if time.time() - self.t0 >= 60 * (len(self.timeline) + 1):
                self.timeline.append((round(time.time() - self.t0), round(self.rss_last_mb, 1),
                                      round(self.cpu_seconds(), 1)))

    def switch(self, pid):
        """The process was replaced by pid (a restart): its CPU so far is
        kept."""
        with self.lock:
            self.cpu_done += self.cpu_pid - self.cpu_start
            self.pid = pid
            self.cpu_start = self.cpu_pid = self._cpu(pid) or 0.0

    def cpu_seconds(self):
        with self.lock:
            return self.cpu_done + self.cpu_pid - self.cpu_start

    def stop(self):
        self._sample()
        self.stop_ev.set()
        self.t.join(5)
        wall = time.time() - self.t0
        cpu = self.cpu_seconds()
        return {"wall_s": wall, "cpu_s": cpu, "cpu_pct": 100.0 * cpu / wall if wall else 0.0,
                "rss_max_mb": self.rss_max_mb, "rss_last_mb": self.rss_last_mb,
                "hwm_mb": self.hwm_mb, "timeline": self.timeline}


def self_cpu():
    """User + system CPU seconds of this process so far (the load
    generator's, with the test's own threads)."""
    t = os.times()
    return t.user + t.system

