"""No process is too short to be named. `sonde record -- sh -c LOOP` where
LOOP starts a 25 ms process (the shares workload: main -> run -> hot_a/b/c)
40 times in a row: each has exited long before its samples are written,
and each is named from what the kernel reported when it exec'ed and mapped
its code -- every sample of it has a named leaf (a function, or
module+offset for a file without symbols), the workload's functions come
with their chain from main, and none is lost.

A frame-pointer chain that runs through code built without frame pointers
(the loader) can end in a bogus address: that is an unwinding matter
(stacks without frame pointers), not one of naming, and is tolerated above
the leaf only."""
import os
from sonde_test import *

need_bpf()
d = tmpdir()
shares = os.path.join(WL, "shares")
out = os.path.join(d, "short.folded")
RUNS, SECS, HZ = 40, 0.025, 999

p = record(["-F", str(HZ), "-o", out, "--", "sh", "-c",
            "i=0; while [ $i -lt %d ]; do %s %s; i=$((i+1)); done" % (RUNS, shares, SECS)])
check(p.returncode == 0, "record of the loop exits 0")
stacks = for_comm(parse_folded(out), "shares")
n = total(stacks)
# Each process burns SECS of its own CPU time, which cpu-clock samples.
check(n >= RUNS * SECS * HZ * 0.6,
      "%d samples of the 40 processes (about %d expected)" % (n, RUNS * SECS * HZ))

unnamed, hot, chained = 0, 0, 0
for frames, c in stacks:
    user = [f for f in frames[1:] if not f.endswith("_[k]")]
    if user and user[-1].startswith("[unknown]"):
        unnamed += c
        print("unnamed leaf: %s %d" % (";".join(frames), c))
    if any(f.startswith("shares+0x") for f in user):
        unnamed += c
        print("workload frame unnamed: %s %d" % (";".join(frames), c))
    if user and user[-1] in ("hot_a", "hot_b", "hot_c"):
        hot += c
        chained += c if user[-3:-1] == ["main", "run"] or "main" in user else 0
check(unnamed == 0, "every sample's leaf is named, the workload's frames all (%d unnamed)"
      % unnamed)
check(hot >= n * 0.7, "%d of %d samples in hot_a/b/c" % (hot, n))
check(chained == hot, "every hot_a/b/c sample reached from main (%d of %d)" % (chained, hot))
