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

# Ctrl-C during a whole-machine recording: what was collected is written, exit 0.
out = os.path.join(d, "sigint.folded")
bg = subprocess.Popen([shares, "5"])
r = subprocess.Popen([SONDE, "record", "-F", "199", "-o", out], stderr=subprocess.PIPE, text=True)
time.sleep(2)
r.send_signal(signal.SIGINT)
_, err = r.communicate(timeout=30)
bg.kill()
bg.wait()
print(err)
check(r.returncode == 0, "SIGINT: exit 0 (got %d)" % r.returncode)
stacks = parse_folded(out)
check(share(for_comm(stacks, "shares"), "hot_a") > 30, "SIGINT: the samples taken so far are written")

# A process that exits mid-run keeps its samples (whole-machine mode).
out = os.path.join(d, "exit.folded")
r = subprocess.Popen([SONDE, "record", "-F", "299", "-d", "3", "-o", out])
time.sleep(0.5)
subprocess.run([shares, "1"])
r.wait(timeout=30)
stacks = for_comm(parse_folded(out), "shares")
check(total(stacks) > 100 and share(stacks, "hot_a") > 40,
      "a process that exited mid-run keeps its named samples (%d)" % total(stacks))
