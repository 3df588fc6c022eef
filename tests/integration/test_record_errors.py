"""The errors a user will hit: each a clear one-line message and a non-zero
exit -- not root, no BTF, a pid that does not exist, a command that is not
found, an unwritable output path -- and Ctrl-C writes what was collected."""
import os
import shutil
import signal
import subprocess
import time
from sonde_test import *

need_bpf()
d = tmpdir()
shares = os.path.join(WL, "shares")


def one_line_error(p, words, what):
    err = p.stderr.strip().splitlines()
    check(p.returncode != 0, "%s: non-zero exit (%d)" % (what, p.returncode))
    check(len(err) == 1 and err[0].startswith("sonde: ") and all(w in err[0] for w in words),
          "%s: one clear line mentioning %s: %r" % (what, words, err))


# Not root.
if shutil.which("setpriv"):
    p = run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all",
             SONDE, "record", "-o", "/tmp/x.folded", "--", "/bin/true"])
    one_line_error(p, ["root"], "not root")
else:
    print("SKIP part: setpriv missing, not-root check not run")

# No BTF: hide it in a private mount namespace.
if shutil.which("unshare"):
    p = run(["unshare", "-m", "sh", "-c",
             "mount -t tmpfs none /sys/kernel/btf && exec %s record -o %s/x.folded -- /bin/true"
             % (SONDE, d)])
    one_line_error(p, ["BTF"], "no BTF")
else:
    print("SKIP part: unshare missing, no-BTF check not run")

# A pid that does not exist.
pid = 4190000
while os.path.exists("/proc/%d" % pid):
    pid += 1
p = record(["-p", str(pid), "-d", "1"])
one_line_error(p, ["no process", str(pid)], "missing pid")

# A command that is not found.
p = record(["-o", os.path.join(d, "x.folded"), "--", "no-such-command-xyz"])
one_line_error(p, ["no-such-command-xyz", "not found"], "command not found")
check(p.returncode == 127, "command not found exits 127")

# An unwritable output path.
p = record(["-o", "/nonexistent-dir/out.folded", "--", shares, "0.1"])
one_line_error(p, ["/nonexistent-dir/out.folded"], "unwritable output")

# Bad option values.
p = record(["-F", "0", "--", shares, "0.1"])
one_line_error(p, ["-F"], "bad frequency")

# Exit codes: with a command, sonde's own failures are 125 (as env(1) and
# timeout(1) say theirs), so that they can't be taken for the command's;
# the command's own code passes through; without one, 1 and 2.
check(p.returncode == 125, "a usage error with a command exits 125 (got %d)" % p.returncode)
p = record(["-o", "/nonexistent-dir/out.folded", "--", shares, "0.1"])
check(p.returncode == 125, "a failure of sonde's with a command exits 125 (got %d)" % p.returncode)
p = record(["-q", "-o", os.path.join(d, "one.folded"), "--", "sh", "-c", "exit 1"])
check(p.returncode == 1 and not p.stderr.strip(),
      "the command's own exit 1 is passed through, sonde saying nothing (got %d)" % p.returncode)
p = record(["-q", "-o", os.path.join(d, "sig.folded"), "--", "sh", "-c", "kill -TERM $$"])
check(p.returncode == 128 + signal.SIGTERM, "a command killed by SIGTERM: 143 (got %d)" %
      p.returncode)
p = record(["-F", "0", "-d", "1"])
check(p.returncode == 2, "a usage error without a command exits 2 (got %d)" % p.returncode)
p = record(["-d", "1", "-o", "/nonexistent-dir/out.folded"])
check(p.returncode == 1, "a failure without a command exits 1 (got %d)" % p.returncode)
ro = os.path.join(d, "noexec")
with open(ro, "w") as f:
    f.write("#!/bin/sh\n")
os.chmod(ro, 0o644)
p = record(["-o", os.path.join(d, "x.folded"), "--", ro])
check(p.returncode == 126, "a command that can't be executed exits 126 (got %d)" % p.returncode)

# -d ends before the command: the profile is written at once, then the
# command is waited for and its code returned.
out = os.path.join(d, "short-d.folded")
p = record(["-q", "-d", "0.3", "-o", out, "--", "sh", "-c", "%s 1; exit 3" % shares])
check(p.returncode == 3 and os.path.getsize(out) > 0,
      "-d shorter than the command: profile written, the command's 3 returned (got %d)"
      % p.returncode)

# Ctrl-C during a whole-machine recording: what was collected is written, exit 0.
out = os.path.join(d, "sigint.folded")
bg = subprocess.Popen([shares, "30"])
r = Recording(["-F", "199", "-o", out])
# Some CPU of the workload under the sampler, whatever the machine's speed.
t0 = cpu_seconds(bg.pid)
wait_until(lambda: cpu_seconds(bg.pid) >= t0 + 1, 60, "a second of the workload's CPU")
rc = r.stop(signal.SIGINT)
bg.kill()
bg.wait()
check(rc == 0, "SIGINT: exit 0 (got %d)" % rc)
stacks = parse_folded(out)
check(share(for_comm(stacks, "shares"), "hot_a") > 30, "SIGINT: the samples taken so far are written")

# A process that exits mid-run keeps its samples (whole-machine mode).
out = os.path.join(d, "exit.folded")
r = Recording(["-F", "299", "-d", "30", "-o", out])
subprocess.run([shares, "1"])
r.stop(signal.SIGINT)
stacks = for_comm(parse_folded(out), "shares")
check(total(stacks) > 100 and share(stacks, "hot_a") > 40,
      "a process that exited mid-run keeps its named samples (%d)" % total(stacks))
