"""Python frames in every stack. A pure-Python script with known shares
(tests/workloads/shares.py: alpha 50 %, beta 30 %, gamma 20 %, each
through spin, from <module> -> run) under `sonde record`, on Debian's
python3.11 (no frame pointers, libpython linked in statically, its
interpreter loop split in two) and on each pyenv CPython 3.10-3.13 the
machine has (skipped, saying so, when absent):

- each function's share within 5 points of the truth;
- in >= 90 % of the samples in spin, the Python chain in order --
  "<module> (shares.py)", "run (shares.py)", the share function,
  "spin (shares.py)" -- in place of the interpreter loop's native frames,
  under the interpreter's own native frames, whole down to _start;
- a C builtin calling back into Python (sorted(key=...)): the key
  function under the caller, the builtin's native frames between;
- with three threads, the shares hold and the threads' stacks go from
  threading's bootstrap to spin."""
import glob
import os
import shutil
import subprocess

from sonde_test import *

need_bpf()
d = tmpdir()
script = os.path.join(d, "shares.py")
shutil.copy(os.path.join(ROOT, "tests", "workloads", "shares.py"), script)
TRUTH = {"alpha": 50.0, "beta": 30.0, "gamma": 20.0}


def pyname(f):
    return "%s (shares.py)" % f


def interpreters():
    out = [("debian-3.11", "/usr/bin/python3.11")]
    try:
        root = subprocess.run(["pyenv", "root"], capture_output=True, text=True,
                              timeout=10).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        root = ""
    for minor in (10, 11, 12, 13):
        found = sorted(glob.glob(os.path.join(root, "versions", "3.%d.*" % minor,
                                              "bin", "python3.%d" % minor))) if root else []
        if found:
            out.append(("pyenv-3.%d" % minor, found[-1]))
        else:
            print("SKIP part: no pyenv CPython 3.%d on this machine" % minor)
    return out


def whole(frames):
    want = [pyname("<module>"), pyname("run"), None, pyname("spin")]
    i = 0
    for f in frames:
        w = want[i]
        if (w is None and f in [pyname(x) for x in TRUTH]) or f == w:
            i += 1
            if i == len(want):
                # the interpreter's own frames whole, down to the stack's end
                return frames[1] == "_start"
    return False


for name, exe in interpreters():
    if not os.path.exists(exe):
        print("SKIP part: %s not installed" % exe)
        continue
    out = os.path.join(d, name + ".folded")
    p = record(["-F", "499", "-o", out, "--", exe, script, "4"])
    check(p.returncode == 0, "%s: record exits 0 (got %d)" % (name, p.returncode))
    stacks = parse_folded(out)
    n = total(stacks)
    check(n >= 1000, "%s: at least 1000 samples (got %d)" % (name, n))
    for func, truth in TRUTH.items():
        got = share(stacks, pyname(func))
        check(abs(got - truth) <= 5.0, "%s: %s share %.1f%% within 5 points of %.0f%%"
              % (name, pyname(func), got, truth))
    spin = [(f, c) for f, c in stacks if pyname("spin") in f]
    n_spin = total(spin)
    good = sum(c for f, c in spin if whole(f))
    bad = sorted(((c, ";".join(f)) for f, c in spin if not whole(f)), reverse=True)[:2]
    check(n_spin >= 0.8 * n, "%s: %d of %d samples in spin" % (name, n_spin, n))
    check(good >= 0.9 * n_spin, "%s: %d of %d spin samples whole: _start ... <module>;run;X;spin "
          "(others: %s)" % (name, good, n_spin, bad))
# A C builtin calling back into Python: sorted(key=...) on Debian's
# python3.11 -- the key function's frames under sort_all's, with the
# builtin's native frames between them, and the whole chain from _start.
cb = os.path.join(d, "callback.py")
with open(cb, "w") as f:
    f.write("import sys, time\n"
            "def key(v):\n"
            "    x = 0\n"
            "    for i in range(300):\n"
            "        x += i * v\n"
            "    return x\n"
            "def sort_all(seconds):\n"
            "    end = time.thread_time() + seconds\n"
            "    while time.thread_time() < end:\n"
            "        sorted(range(200), key=key)\n"
            "sort_all(float(sys.argv[1]))\n")
out = os.path.join(d, "callback.folded")
p = record(["-F", "499", "-o", out, "--", "/usr/bin/python3.11", cb, "2"])
check(p.returncode == 0, "callback: record exits 0")
st = [(f, c) for f, c in parse_folded(out) if "key (callback.py)" in f]
n_key = total(st)


def through_builtin(frames):
    if frames[1] != "_start" or "sort_all (callback.py)" not in frames:
        return False
    i, j = frames.index("sort_all (callback.py)"), frames.index("key (callback.py)")
    return i < j - 1 and all(" (" not in x for x in frames[i + 1:j])


good = sum(c for f, c in st if through_builtin(f))
check(n_key >= 300 and good >= 0.9 * n_key,
      "callback: %d of %d samples in key whole from _start, sort_all;<native frames of "
      "sorted>;key (others: %s)" % (good, n_key, [";".join(f) for f, c in st
                                                  if not through_builtin(f)][:1]))

# Threads: every thread's Python stack, whether it holds the GIL or waits
# for it. Three threads on Debian's python3.11: the shares hold, and the
# threads other than the main one show their chain from threading's
# bootstrap down to spin.
out = os.path.join(d, "threads.folded")
p = record(["-F", "499", "-o", out, "--", "/usr/bin/python3.11", script, "2", "3"])
check(p.returncode == 0, "threads: record exits 0")
stacks = parse_folded(out)
for func, truth in TRUTH.items():
    got = share(stacks, pyname(func))
    check(abs(got - truth) <= 5.0, "threads: %s share %.1f%% within 5 points of %.0f%%"
          % (pyname(func), got, truth))
spin = [(f, c) for f, c in stacks if pyname("spin") in f]
boot = sum(c for f, c in spin
           if any(x.startswith("Thread._bootstrap ") for x in f)
           and f.index(pyname("run")) > max(i for i, x in enumerate(f)
                                             if x.startswith("Thread._bootstrap ")))
check(boot >= 0.5 * total(spin),
      "threads: %d of %d spin samples in a thread's chain Thread._bootstrap ... run;X;spin "
      "(two threads of three)" % (boot, total(spin)))
print("ok")
