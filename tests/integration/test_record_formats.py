"""The three outputs of one kind of recording: pprof is read by
`go tool pprof -top` (the hot functions listed, labels pid/tid/comm present),
speedscope parses as JSON with the hot function among its frames, and the
format follows the output's extension or -f."""
import gzip
import json
import os
import shutil
from sonde_test import *

need_bpf()
d = tmpdir()
shares = os.path.join(WL, "shares")

pb = os.path.join(d, "out.pb.gz")
p = record(["-F", "299", "-o", pb, "--", shares, "2"])
check(p.returncode == 0, "record to .pb.gz exits 0")
with open(pb, "rb") as f:
    head = f.read(2)
check(head == b"\x1f\x8b", "the .pb.gz output is gzip")

go = shutil.which("go")
if go:
    t = run([go, "tool", "pprof", "-top", pb], timeout=120)
    check(t.returncode == 0, "go tool pprof -top accepts the file")
    check("hot_a" in t.stdout and "hot_b" in t.stdout, "pprof -top lists hot_a and hot_b")
    t = run([go, "tool", "pprof", "-raw", pb], timeout=120)
    check(t.returncode == 0 and "pid" in t.stdout and "comm" in t.stdout,
          "samples carry pid and comm labels")
    check("build_id" in t.stdout.lower() or "buildid" in t.stdout.lower() or
          "shares" in t.stdout, "mappings name the binary")
else:
    print("SKIP part: go not installed, go tool pprof check not run")

ss = os.path.join(d, "out.speedscope.json")
p = record(["-F", "299", "-o", ss, "--", shares, "1"])
check(p.returncode == 0, "record to .speedscope.json exits 0")
doc = json.load(open(ss))
names = [f["name"] for f in doc["shared"]["frames"]]
check("hot_a" in names, "speedscope frames include hot_a")
prof = doc["profiles"][0]
check(prof["type"] == "sampled" and len(prof["samples"]) == len(prof["weights"]) > 0,
      "speedscope profile is sampled with one weight per sample")

fo = os.path.join(d, "out.txt")
p = record(["-F", "99", "-f", "folded", "-o", fo, "--", shares, "0.5"])
check(p.returncode == 0 and parse_folded(fo), "-f folded writes folded text")

p = record(["-F", "99", "-f", "nonsense", "--", shares, "0.1"])
check(p.returncode != 0 and "unknown format" in p.stderr, "an unknown -f is refused")

p = run([SONDE, "record", "-F", "99", "-o", "-", "--", shares, "0.5"])
check(p.returncode == 0 and "hot_a" in p.stdout, "-o - writes to stdout")
