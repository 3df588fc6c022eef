"""sonde top -b: the hottest function of a running workload is at the top,
named with its process, with a total share near its truth. The truth (60/30/10) is inclusive: the
workload's functions read the thread's CPU clock as they burn, and on a
machine whose clock source has no vDSO path that time is spent in the
kernel below them, so their self share is lower by a machine-dependent
amount."""
import os
import subprocess
from sonde_test import *

need_bpf()
w = subprocess.Popen([os.path.join(WL, "shares"), "8"])
try:
    p = run([SONDE, "top", "-b", "-F", "499", "-d", "2", "-n", "2", "-p", str(w.pid)], timeout=60)
finally:
    w.kill()
    w.wait()
check(p.returncode == 0, "top exits 0 after -n 2")
tables = [t for t in p.stdout.split("\n\n") if "SELF%" in t]
check(len(tables) == 2, "two refreshes printed (%d)" % len(tables))
check(tables[-1].splitlines()[1].split()[:4] == ["SELF%", "TOTAL%", "PROCESS", "FUNCTION"],
      "columns SELF%%, TOTAL%%, PROCESS, FUNCTION: %s" % tables[-1].splitlines()[1])
rows = [l.split() for l in tables[-1].splitlines()[2:] if l.strip()]
check(rows and rows[0][3] == "hot_a" and rows[0][2] == "shares",
      "hot_a of the process shares is the top row (%s)" % rows[:1])
self_a, total_a = float(rows[0][0]), float(rows[0][1])
check(abs(total_a - 60) <= 10, "hot_a total %.1f%% near 60%%" % total_a)
check(0 < self_a <= total_a, "hot_a self %.1f%% within its total" % self_a)
names = [r[3] for r in rows]
check("hot_b" in names and "hot_c" in names, "hot_b and hot_c listed")

# -j: one JSON object per refresh.
import json
w = subprocess.Popen([os.path.join(WL, "shares"), "8"])
try:
    p = run([SONDE, "top", "-j", "-F", "499", "-d", "2", "-n", "1", "-p", str(w.pid)], timeout=60)
finally:
    w.kill()
    w.wait()
lines = [l for l in p.stdout.splitlines() if l.strip()]
check(p.returncode == 0 and len(lines) == 1, "top -j -n 1 prints one JSON line")
doc = json.loads(lines[0])
top = doc["functions"][0]
check(top["name"] == "hot_a" and top["module"] == "shares" and top["process"] == "shares" and
      abs(top["total_pct"] - 60) <= 10,
      "JSON: hot_a first, total %.1f%%" % top["total_pct"])
check(doc["samples"] >= sum(f["self"] for f in doc["functions"]) > 0, "JSON: sample counts add up")

# --help names the columns as they are printed.
h = run([SONDE, "top", "--help"], timeout=30)
import re
check(h.returncode == 0 and re.search(r"^  SELF% +share", h.stdout, re.M)
      and re.search(r"^  TOTAL% +share", h.stdout, re.M) and "%%" not in h.stdout,
      "top --help names SELF%% and TOTAL%% (no doubled percent signs): %r" % h.stdout[:200])
