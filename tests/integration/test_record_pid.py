"""sonde record -p PID: profiles a running process until -d ends or it exits;
a second pid in the list is followed too."""
import os
import subprocess
import time
from sonde_test import *

need_bpf()
d = tmpdir()
w = subprocess.Popen([os.path.join(WL, "shares"), "3"])
out = os.path.join(d, "pid.folded")
t0 = time.time()
p = record(["-F", "499", "-p", str(w.pid), "-d", "30", "-o", out])
el = time.time() - t0
w.wait()
check(p.returncode == 0, "record -p exits 0")
check(el < 10, "record stops when the process exits (%.1fs)" % el)
stacks = for_comm(parse_folded(out), "shares")
check(total(stacks) > 500, "samples collected (%d)" % total(stacks))
a = share(stacks, "hot_a")
check(abs(a - 60) <= 5, "hot_a share %.1f%% within 5 points of 60%%" % a)
pids = {s[0] for s, _ in parse_folded(out)}
check(pids == {"shares"}, "only the given process is sampled (%s)" % pids)

w = subprocess.Popen([os.path.join(WL, "shares"), "20"])
t0 = time.time()
p = record(["-F", "99", "-p", str(w.pid), "-d", "2", "-o", out])
el = time.time() - t0
w.kill()
w.wait()
check(p.returncode == 0 and 1.5 < el < 6, "-d 2 ends the recording after ~2 s (%.1fs)" % el)
