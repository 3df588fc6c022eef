"""Deep user stacks come back whole. The CPU sampler's unwinder reads the
stack a block at a time (bpf/unwind.h); the deep workload's chain
of `descend` frames, each with PAD bytes of locals, puts frames in the same
block, across block ends and across pages. Every sample taken in leaf_work
must carry the whole chain: leaf_work under exactly DEPTH-5 descend frames
under main. A chain longer than the sampler's 128 user frames is cut at
the root end, leaf first: exactly 128 frames from leaf_work up, under a
[truncated] frame that says the root is missing."""
import os
from sonde_test import *

need_bpf()
d = tmpdir()
deep = os.path.join(WL, "deep")
CAP = 128  # CPU_MAX_FRAMES


def leaf_stacks(depth, pad, units):
    out = os.path.join(d, "deep-%d-%d.folded" % (depth, pad))
    p = record(["-F", "999", "-o", out, "--", deep, str(depth), str(units), str(pad)])
    check(p.returncode == 0, "record of deep %d (pad %d) exits 0" % (depth, pad))
    stacks = [(f, c) for f, c in for_comm(parse_folded(out), "deep") if f[-1] == "leaf_work"]
    n = total(stacks)
    check(n >= 20, "deep %d (pad %d): %d samples in leaf_work" % (depth, pad, n))
    return stacks, n


# Whole chains: small frames (many to a block), frames around a block's
# size, and frames bigger than a page (a read each).
for pad in (0, 136, 1000, 5000):
    depth = 60
    stacks, n = leaf_stacks(depth, pad, 150)
    whole = sum(c for f, c in stacks
                if f.count("descend") == depth - 5 and "main" in f
                and f.index("main") < f.index("descend"))
    for f, c in stacks:
        if f.count("descend") != depth - 5:
            print("pad %d: %d descend frames (%d samples): %s" % (pad, f.count("descend"), c,
                                                                 ";".join(f[:8])))
    # A sample can land in the loop's few instructions around the call,
    # where the chain is mid-update: allow a few.
    check(whole >= 0.95 * n,
          "pad %d: %d of %d leaf_work samples have all %d descend frames under main"
          % (pad, whole, n, depth - 5))

# A chain deeper than the cap: the leaf and the 126 frames above it.
stacks, n = leaf_stacks(200, 300, 120)
capped = sum(c for f, c in stacks if len(f) - 2 == CAP and f.count("descend") == CAP - 1
             and f[1] == "[truncated]")
check(capped >= 0.95 * n,
      "%d of %d samples of a 195-frame chain hold exactly %d frames, leaf_work and %d descend, "
      "under [truncated]" % (capped, n, CAP, CAP - 1))
print("ok")
