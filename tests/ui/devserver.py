#!/usr/bin/env python3
"""devserver.py: a stand-in for `sonde server` for working on the UI without
building the C server: serves ui/ and answers the query API of docs/api.md from
folded stacks and points kept in memory (POST /ingest, /api/v1/ingest/points,
/api/v1/alerts). It is a development aid only; the browser tests run against
the real `sonde server`. Usage: devserver.py [PORT] (prints the URL)."""
import json
import os
import re
import sys
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "ui"))
WINDOWS = []  # (labels, from_ms, until_ms, {stack tuple: count})
POINTS = []   # (name, labels, ts_ms, value)
ALERTS = {}
TYPES = {".html": "text/html", ".js": "text/javascript", ".css": "text/css",
         ".json": "application/json", ".svg": "image/svg+xml"}
UNITS = {"cpu": "samples", "gpu_launch": "launches", "gpu_wait": "nanoseconds",
         "offcpu": "nanoseconds"}


def parse_time(s, default, now, secs=False):
    if not s:
        return default
    if s == "now":
        return now
    m = re.fullmatch(r"now-(\d+)([smhd])", s)
    if m:
        return now - int(m.group(1)) * {"s": 1, "m": 60, "h": 3600, "d": 86400}[m.group(2)] * 1000
    v = int(s)
    return v * 1000 if secs and v < 10**11 else v


def parse_query(q, typ=None):
    ms = []
    q = (q or "").strip()
    m = re.match(r"^([^{.]+)\.([^{]+)", q)
    if m:
        ms += [("service_name", "=", m.group(1)), ("type", "=", m.group(2))]
    for k, op, v in re.findall(r'(\w+)\s*(=~|!~|!=|=)\s*"([^"]*)"', q):
        ms.append((k, op, v))
    if typ:
        ms.append(("type", "=", typ))
    return ms


def match(labels, ms):
    for k, op, v in ms:
        x = labels.get(k, "")
        ok = {"=": x == v, "!=": x != v, "=~": re.fullmatch(v, x) is not None,
              "!~": re.fullmatch(v, x) is None}[op]
        if not ok:
            return False
    return True


def select(qs, prefix=""):
    now = int(time.time() * 1000)
    f = parse_time(qs.get(prefix + "from"), now - 3600000, now)
    u = parse_time(qs.get(prefix + "until"), now, now)
    ms = parse_query(qs.get(prefix + "query", qs.get("query")), qs.get("type"))
    wins = [w for w in WINDOWS if w[1] < u and w[2] > f and match(w[0], ms)]
    return f, u, wins, ms


def merge(wins):
    st = {}
    for w in wins:
        for s, c in w[3].items():
            st[s] = st.get(s, 0) + c
    return st


def tree(stacks):
    root = {"n": "total", "t": 0, "s": 0, "c": {}}
    for s, c in stacks.items():
        root["t"] += c
        node = root
        for fr in s:
            node = node["c"].setdefault(fr, {"n": fr, "t": 0, "s": 0, "c": {}})
            node["t"] += c
        node["s"] += c
    return root


def flamebearer(stacks):
    root = tree(stacks)
    names, idx, levels = [], {}, []

    def walk(node, d, x):
        if node["n"] not in idx:
            idx[node["n"]] = len(names)
            names.append(node["n"])
        while len(levels) <= d:
            levels.append([])
        levels[d].append((x, node["t"], node["s"], idx[node["n"]]))
        cx = x
        for k in sorted(node["c"]):
            walk(node["c"][k], d + 1, cx)
            cx += node["c"][k]["t"]
    walk(root, 0, 0)
    out = []
    for lv in levels:
        row, end = [], 0
        for x, t, s, n in lv:
            row += [x - end, t, s, n]
            end = x + t
        out.append(row)
    return {"names": names, "levels": out, "numTicks": root["t"],
            "maxSelf": max((r[i] for r in out for i in range(2, len(r), 4)), default=0)}


def diff(ls, rs):
    lt, rt = tree(ls), tree(rs)
    names, idx, levels = [], {}, []

    def walk(a, b, name, d, lx, rx):
        if name not in idx:
            idx[name] = len(names)
            names.append(name)
        while len(levels) <= d:
            levels.append([])
        levels[d].append((lx, a["t"] if a else 0, a["s"] if a else 0, rx, b["t"] if b else 0,
                          b["s"] if b else 0, idx[name]))
        kids = sorted(set((a or {"c": {}})["c"]) | set((b or {"c": {}})["c"]))
        for k in kids:
            ca = a["c"].get(k) if a else None
            cb = b["c"].get(k) if b else None
            walk(ca, cb, k, d + 1, lx, rx)
            lx += ca["t"] if ca else 0
            rx += cb["t"] if cb else 0
    walk(lt, rt, "total", 0, 0, 0)
    out = []
    for lv in levels:
        row, le, re_ = [], 0, 0
        for lx, ltt, lss, rx, rtt, rss, n in lv:
            row += [lx - le, ltt, lss, rx - re_, rtt, rss, n]
            le, re_ = lx + ltt, rx + rtt
        out.append(row)
    return {"names": names, "levels": out, "numTicks": lt["t"] + rt["t"], "maxSelf": 0,
            "leftTicks": lt["t"], "rightTicks": rt["t"]}


class H(BaseHTTPRequestHandler):
    def send(self, code, body, ctype="application/json", extra=None):
        if not isinstance(body, bytes):
            body = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass

    def do_POST(self):
        u = urllib.parse.urlparse(self.path)
        qs = dict(urllib.parse.parse_qsl(u.query))
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if u.path == "/ingest":
            name = qs.get("name", "")
            m = re.match(r"^([^{.]+)(?:\.([^{]+))?(?:\{(.*)\})?$", name)
            labels = {"service_name": m.group(1), "type": m.group(2) or "cpu"}
            for kv in (m.group(3) or "").split(","):
                if "=" in kv:
                    k, v = kv.split("=", 1)
                    labels[k.strip()] = v.strip()
            now = int(time.time() * 1000)
            f = parse_time(qs.get("from"), now - 10000, now, True)
            t = parse_time(qs.get("until"), now, now, True)
            st = {}
            for line in body.decode().splitlines():
                if line.strip():
                    s, _, c = line.rpartition(" ")
                    st[tuple(s.split(";"))] = st.get(tuple(s.split(";")), 0) + int(c)
            WINDOWS.append((labels, f, t, st))
            return self.send(200, b"", "text/plain")
        if u.path == "/api/v1/ingest/points":
            for p in json.loads(body)["points"]:
                POINTS.append((p["name"], p.get("labels", {}), p["ts_ms"], p["value"]))
            return self.send(200, {"points": len(json.loads(body)["points"])})
        if u.path == "/api/v1/alerts":
            a = json.loads(body)
            ALERTS[json.dumps(a.get("labels"), sort_keys=True)] = a
            return self.send(200, {})
        self.send(404, {"error": "no such route"})

    def do_GET(self):
        u = urllib.parse.urlparse(self.path)
        qs = dict(urllib.parse.parse_qsl(u.query))
        p = u.path
        if p == "/healthz":
            return self.send(200, b"ok", "text/plain")
        try:
            if p.startswith("/api/") or p.startswith("/pyroscope"):
                return self.api(p, qs)
        except Exception as e:  # the stand-in answers errors as the server does
            return self.send(400, {"error": str(e)})
        if p == "/":
            p = "/index.html"
        path = os.path.normpath(os.path.join(ROOT, p.lstrip("/")))
        if not path.startswith(ROOT) or not os.path.isfile(path):
            return self.send(404, {"error": "not found"})
        self.send(200, open(path, "rb").read(),
                  TYPES.get(os.path.splitext(path)[1], "application/octet-stream"))

    def api(self, p, qs):
        if p == "/api/v1/labels":
            _, _, wins, _ = select(qs)
            return self.send(200, {"names": sorted({k for w in wins for k in w[0]})})
        if p == "/api/v1/label/values":
            _, _, wins, _ = select(qs)
            n = qs["name"]
            return self.send(200, {"name": n, "values": sorted({w[0][n] for w in wins
                                                                  if n in w[0]})})
        if p == "/api/v1/flamegraph":
            f, u, wins, ms = select(qs)
            typ = next((v for k, o, v in ms if k == "type"), "cpu")
            return self.send(200, {"version": 1, "flamebearer": flamebearer(merge(wins)),
                                   "metadata": {"format": "single", "name": typ,
                                                "units": UNITS.get(typ, typ),
                                                "spyName": "sonde", "sampleRate": 99}})
        if p == "/api/v1/diff":
            _, _, lw, ms = select(qs)
            _, _, rw, _ = select(qs, "right_")
            typ = next((v for k, o, v in ms if k == "type"), "cpu")
            return self.send(200, {"version": 1, "flamebearer": diff(merge(lw), merge(rw)),
                                   "metadata": {"format": "double", "name": typ,
                                                "units": UNITS.get(typ, typ)}})
        if p == "/api/v1/top":
            _, _, wins, ms = select(qs)
            st = merge(wins)
            fs = {}
            for s, c in st.items():
                fs.setdefault(s[-1], [0, 0])[0] += c
                for fr in set(s):
                    fs.setdefault(fr, [0, 0])[1] += c
            typ = next((v for k, o, v in ms if k == "type"), "cpu")
            fl = [{"name": k, "module": "", "self": v[0], "total": v[1]} for k, v in fs.items()]
            fl.sort(key=lambda x: -x[qs.get("sort", "self")])
            return self.send(200, {"unit": UNITS.get(typ, typ), "total": sum(st.values()),
                                   "functions": fl[:int(qs.get("limit", 100))]})
        if p == "/api/v1/timeseries":
            f, u, wins, ms = select(qs)
            step = int(qs.get("step") or max(1000, (u - f) // 300))
            n = (u - f + step - 1) // step
            vals = [0] * n
            for w in wins:
                tot = sum(w[3].values())
                i = (w[1] - f) // step
                if 0 <= i < n:
                    vals[i] += tot
            typ = next((v for k, o, v in ms if k == "type"), "cpu")
            return self.send(200, {"unit": UNITS.get(typ, typ), "start_ms": f, "step_ms": step,
                                   "values": vals})
        if p == "/api/v1/points":
            now = int(time.time() * 1000)
            f = parse_time(qs.get("from"), now - 3600000, now)
            u = parse_time(qs.get("until"), now, now)
            ms = parse_query(qs.get("query"))
            ser = {}
            for name, lab, ts, v in POINTS:
                if name == qs["name"] and f <= ts < u and match(lab, ms):
                    ser.setdefault(json.dumps(lab, sort_keys=True), []).append([ts, v])
            return self.send(200, {"name": qs["name"], "series": [
                {"labels": json.loads(k), "points": sorted(v)} for k, v in ser.items()]})
        if p == "/api/v1/alerts":
            return self.send(200, {"alerts": list(ALERTS.values())})
        if p == "/api/v1/speedscope":
            _, _, wins, _ = select(qs)
            st = merge(wins)
            frames, idx, samples, weights = [], {}, [], []
            for s, c in st.items():
                row = []
                for fr in s:
                    if fr not in idx:
                        idx[fr] = len(frames)
                        frames.append({"name": fr})
                    row.append(idx[fr])
                samples.append(row)
                weights.append(c)
            return self.send(200, {
                "$schema": "https://www.speedscope.app/file-format-schema.json",
                "shared": {"frames": frames}, "name": "sonde", "exporter": "sonde",
                "profiles": [{"type": "sampled", "name": "cpu", "unit": "none",
                              "startValue": 0, "endValue": sum(weights),
                              "samples": samples, "weights": weights}]},
                extra={"Content-Disposition": 'attachment; filename="sonde-cpu.speedscope.json"'})
        return self.send(501, {"error": "the development stand-in does not serve " + p})


def main():
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    srv = ThreadingHTTPServer(("127.0.0.1", port), H)
    print("http://127.0.0.1:%d/" % srv.server_address[1], flush=True)
    srv.serve_forever()


main()
