"""Children of the recorded command are followed, and a short-lived child --
exited long before the profile is written -- is still symbolized."""
import os
from sonde_test import *

need_bpf()
d = tmpdir()
out = os.path.join(d, "spawn.folded")
p = record(["-F", "499", "-o", out, "--", os.path.join(WL, "spawner"), "3"])
check(p.returncode == 0, "record exits 0")
stacks = for_comm(parse_folded(out), "spawner")
n = total(stacks)
check(n > 300, "samples from parent and children (%d)" % n)
c = share(stacks, "child_burn")
pb = share(stacks, "parent_burn")
# Three children burn 200 ms each, the parent 100 ms between each: 2/3 vs 1/3.
check(abs(c - 66.7) <= 8, "child_burn share %.1f%% near 67%%" % c)
check(abs(pb - 33.3) <= 8, "parent_burn share %.1f%% near 33%%" % pb)
ch = chains(stacks, "child_burn")
check(ch.get(("main", "child_burn"), 0) >= 0.95 * sum(ch.values()),
      "child_burn is reached from main in the children (%s)" % list(ch.items())[:3])
unnamed = sum(cnt for s, cnt in stacks if any(f.startswith("spawner+0x") for f in s))
check(unnamed <= 0.02 * n, "no unnamed spawner frames (%d of %d samples)" % (unnamed, n))
