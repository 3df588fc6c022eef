"""sonde record -- ./shares: each hot function's measured CPU share is within
5 points of the truth (60/30/10) and its call chain from main is exact; the
command's exit code is passed through. Also for the hot code in a shared
library and for a stripped PIE (dynamic symbols only)."""
import os
from sonde_test import *

need_bpf()
d = tmpdir()

CASES = [
    ("shares", ["hot_a", "hot_b", "hot_c"]),
    ("shares-lib", ["lib_hot_a", "lib_hot_b", "lib_hot_c"]),
    ("shares-stripped", ["hot_a", "hot_b", "hot_c"]),
]
TRUTH = [60.0, 30.0, 10.0]

for prog, funcs in CASES:
    out = os.path.join(d, prog + ".folded")
    p = record(["-F", "499", "-o", out, "--", os.path.join(WL, prog), "4"])
    check(p.returncode == 0, "%s: record exits 0 (got %d)" % (prog, p.returncode))
    stacks = for_comm(parse_folded(out), prog[:15])
    n = total(stacks)
    check(n >= 1000, "%s: at least 1000 samples (got %d)" % (prog, n))
    for func, truth in zip(funcs, TRUTH):
        got = share(stacks, func)
        check(abs(got - truth) <= 5.0,
              "%s: %s share %.1f%% within 5 points of %.0f%%" % (prog, func, got, truth))
        ch = chains(stacks, func)
        want = ("main", "run", func)
        good = ch.get(want, 0)
        allc = sum(ch.values())
        check(good >= 0.98 * allc,
              "%s: %s reached through main;run;%s in %d of %d samples (other chains: %s)"
              % (prog, func, func, good, allc,
                 sorted(((c, k) for k, c in ch.items() if k != want), reverse=True)[:3]))

# The command's exit code is sonde's.
p = record(["-o", os.path.join(d, "x.folded"), "--", os.path.join(WL, "shares"), "0.2", "7"])
check(p.returncode == 7, "record exits with the command's exit code 7 (got %d)" % p.returncode)
