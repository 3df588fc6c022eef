"""Inlined functions and source lines.

shares-inline (gcc -O3 -g) has the known shares of shares-O2 -- alpha 50 %,
beta 30 %, gamma 20 %, each through spin_unit -- but run, alpha, beta and
gamma are inlined into main and crunch (the work) into spin_unit: the
symbol table names main and spin_unit alone. From the DWARF, each inlined
function must be a frame of its own: shares within 5 points, and
main;run;X;spin_unit;crunch whole from _start in >= 90 % of the samples.

Lines: the pprof written for it has, for each frame, the source file and
the line (for a caller, of its call; for an inlined function, of the call
it was inlined at), as `go tool pprof -traces -lines` shows them, checked
against the lines of the source; the same for a pure-Python script on
Debian's python3.11 (the line each Python frame is at); and speedscope's
frames (one per function and line) name their file and line. The server keeps where
each function is: its flame graph's "sources" and its pprof download name
each function's file and first line."""
import json
import os
import re
import shutil
import subprocess
import time
import urllib.parse

from sonde_test import *
from server_test import Server

need_bpf()
d = tmpdir()
TRUTH = {"alpha": 50.0, "beta": 30.0, "gamma": 20.0}
prog = os.path.join(WL, "shares-inline")
src = os.path.join(ROOT, "tests", "workloads", "shares_inline.c")

# The functions really are inlined: only main and spin_unit are symbols.
nm = subprocess.run(["nm", prog], capture_output=True, text=True, timeout=30).stdout
syms = {l.split()[-1] for l in nm.splitlines() if re.match(r"\S+ [Tt] ", l)}
check("spin_unit" in syms and "main" in syms, "main and spin_unit are symbols")
for f in ("run", "alpha", "beta", "gamma", "crunch"):
    check(f not in syms, "%s is inlined (no symbol of its own)" % f)

out = os.path.join(d, "inline.folded")
p = record(["-F", "499", "-o", out, "--", prog, "4"])
check(p.returncode == 0, "record of shares-inline exits 0 (got %d)" % p.returncode)
stacks = for_comm(parse_folded(out), "shares-inline")
n = total(stacks)
check(n >= 1000, "at least 1000 samples (got %d)" % n)
for func, truth in TRUTH.items():
    got = share(stacks, func)
    check(abs(got - truth) <= 5.0,
          "%s share %.1f%% within 5 points of %.0f%%" % (func, got, truth))


def whole(frames):
    return in_order(frames, ["_start", "main", "run", None, "spin_unit", "crunch"], TRUTH)


work = [(f, c) for f, c in stacks if "spin_unit" in f]
good = sum(c for f, c in work if whole(f))
bad = sorted(((c, ";".join(f)) for f, c in work if not whole(f)), reverse=True)[:3]
check(total(work) >= 0.9 * n, "%d of %d samples in spin_unit" % (total(work), n))
check(good >= 0.9 * total(work),
      "%d of %d samples whole from _start through main;run;X;spin_unit;crunch (others: %s)"
      % (good, total(work), bad))
print("ok: inlined frames")


def line_of(path, text):
    with open(path) as f:
        for i, l in enumerate(f, 1):
            if text in l:
                return i
    fail("no line holding %r in %s" % (text, path))


go = shutil.which("go")
if not go:
    print("SKIP part: go not installed, pprof lines not checked")
else:
    def traces(pb):
        t = run([go, "tool", "pprof", "-traces", "-lines", pb], timeout=180)
        check(t.returncode == 0, "go tool pprof -traces -lines reads %s" % pb)
        out, cur = [], []
        for l in t.stdout.splitlines():
            if l.startswith("-----"):
                if cur:
                    out.append(cur)
                cur = []
                continue
            # "   2ms   leaf FILE:LINE", then "         caller FILE:LINE"
            m = re.match(r"^\s*(?:[\d.]+[a-z]*s\s+)?(\S.*?) (\S+):(\d+)$", l)
            if m and not l.strip().startswith(("comm:", "pid:", "tid:")):
                cur.append((m.group(1), m.group(2), int(m.group(3))))
        if cur:
            out.append(cur)
        return out

    pb = os.path.join(d, "inline.pb.gz")
    p = record(["-F", "499", "-o", pb, "--", prog, "2"])
    check(p.returncode == 0, "record to pprof exits 0")
    want = [("crunch", line_of(src, "BURN_CPU(ns);")),
            ("spin_unit", line_of(src, "\tcrunch(ns);")),
            ("alpha", line_of(src, "SHARE_FN(alpha)")),
            ("run", line_of(src, "alpha(r * 5 / 10);")),
            ("main", line_of(src, "run(argc > 1"))]
    tr = traces(pb)
    alpha_traces = [t for t in tr if [f for f, _, _ in t[:5]] == [w for w, _ in want]]
    check(len(alpha_traces) >= 1, "a trace leaf-first crunch;spin_unit;alpha;run;main (%d traces)"
          % len(tr))
    for t in alpha_traces:
        got = [(f, l) for f, _, l in t[:5]]
        check(got == want, "file lines %s == %s" % (got, want))
        check(all(os.path.realpath(fl) == os.path.realpath(src) for _, fl, _ in t[:5]),
              "every frame's file is %s (got %s)" % (src, [fl for _, fl, _ in t[:5]]))
    print("ok: native lines")

    # Python: the line each frame is at.
    script = os.path.join(d, "shares.py")
    shutil.copy(os.path.join(ROOT, "tests", "workloads", "shares.py"), script)
    pb = os.path.join(d, "py.pb.gz")
    p = record(["-F", "499", "-o", pb, "--", "/usr/bin/python3.11", script, "2"])
    check(p.returncode == 0, "record of shares.py to pprof exits 0")
    tr = traces(pb)
    spin_first = line_of(script, "def spin(")
    spin_last = line_of(script, "    return x")
    calls = {"alpha": line_of(script, "spin(r * 0.5)"),
             "run": line_of(script, "        alpha(r)")}
    seen = 0
    for t in tr:
        names = [f for f, _, _ in t]
        if "alpha (shares.py)" not in names or "spin (shares.py)" not in names:
            continue
        seen += 1
        by = {f: (fl, l) for f, fl, l in t}
        fl, l = by["spin (shares.py)"]
        check(os.path.realpath(fl) == os.path.realpath(script),
              "spin's file is the script (got %s)" % fl)
        # its first instruction is on the def line (RESUME), the rest in its body
        check(spin_first <= l <= spin_last, "spin's line %d is in its def or body (%d-%d)"
              % (l, spin_first, spin_last))
        check(by["alpha (shares.py)"][1] == calls["alpha"],
              "alpha is at its call of spin, line %d (got %d)"
              % (calls["alpha"], by["alpha (shares.py)"][1]))
        check(by["run (shares.py)"][1] == calls["run"],
              "run is at its call of alpha, line %d (got %d)"
              % (calls["run"], by["run (shares.py)"][1]))
    check(seen >= 1, "traces through alpha and spin (%d)" % seen)
    print("ok: Python lines")

# speedscope: a frame per function and line, with its file.
ss = os.path.join(d, "inline.speedscope.json")
p = record(["-F", "499", "-o", ss, "--", prog, "1"])
check(p.returncode == 0, "record to speedscope exits 0")
frames = json.load(open(ss))["shared"]["frames"]
for name, text in (("alpha", "SHARE_FN(alpha)"), ("spin_unit", "\tcrunch(ns);"),
                   ("crunch", "BURN_CPU(ns);")):
    want = (os.path.realpath(src), line_of(src, text))
    got = [(os.path.realpath(f.get("file", "")), f.get("line")) for f in frames
           if f["name"] == name]
    check(want in got, "speedscope has %s at %s:%d (got %s)" % (name, src, want[1], got))
print("ok: speedscope")

# The server: a window with lines (as an agent ships it) keeps where each
# function is, in its flame graph and its pprof download.
pb = os.path.join(d, "server.pb.gz")
p = record(["-F", "499", "-o", pb, "--", prog, "1"])
check(p.returncode == 0, "record to pprof exits 0")
srv = Server(tmpdir())
try:
    now = int(time.time() * 1000)
    st, _, out = srv.post("/api/v1/ingest", open(pb, "rb").read(), "application/octet-stream",
                          node="n1", **{"from": now - 10000}, until=now)
    check(st == 200, "the window is acknowledged: %s" % out[:200])
    fb = srv.get_json("/api/v1/flamegraph", query='{comm="shares-inline"}',
                      **{"from": now - 60000}, until=now + 1000)["flamebearer"]
    check(len(fb.get("sources", [])) == len(fb["names"]),
          "the flame graph has a source per name (%d names)" % len(fb["names"]))
    srcs = dict(zip(fb["names"], fb["sources"]))
    for name, text in (("alpha", "SHARE_FN(alpha)"), ("crunch", "void crunch("),
                       ("main", "int main(")):
        want = "%s:%d" % (src, line_of(src, text))
        check(os.path.realpath(srcs.get(name, "").rsplit(":", 1)[0]) == os.path.realpath(src)
              and srcs[name].endswith(":%d" % line_of(src, text)),
              "the server's %s is at %s (got %r)" % (name, want, srcs.get(name)))
    if go:
        qs = urllib.parse.urlencode({"query": '{comm="shares-inline"}', "from": now - 60000,
                                     "until": now + 1000})
        st, _, body = srv.request("GET", "/api/v1/pprof?" + qs)
        check(st == 200, "the pprof download answers 200")
        dl = os.path.join(d, "download.pb.gz")
        open(dl, "wb").write(body)
        # -raw lists each location as "ID: ADDR M=MAPPING FUNC FILE:LINE s=FIRST_LINE".
        t = run([go, "tool", "pprof", "-raw", dl], timeout=180)
        check(t.returncode == 0 and re.search(r" alpha \S*shares_inline\.c:\d+ s=%d\b"
                                              % line_of(src, "SHARE_FN(alpha)"), t.stdout),
              "the download names alpha's file and first line")
finally:
    srv.stop()
print("ok")
