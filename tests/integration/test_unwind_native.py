"""Stacks of code built without frame pointers are whole: the unwinder walks
them with the unwind tables built from each file's .eh_frame.

shares-O2 (gcc -O2, as distributions build) spends 50/30/20 % of its CPU in
alpha, beta and gamma, each through spin_unit, from main -> run. Its libc
has no frame pointers either, nor does the vdso its clock reads go
through. Each share must come within 5 points of the truth, and at least
90 % of the samples in spin_unit must carry the whole chain, from _start
(where the tables say the stack ends) through main, run and the share
function, in that order. The same through libc for a qsort callback, and
for a signal handler above the code it interrupted, and for C++ that
throws (the throw's own unwinding in libstdc++ and libgcc_s included).
The same for the
launching stacks of a stand-in
GPU job built that way. The agent counts its tables and the frames they
step, and a file whose table is over --unwind-memory falls back to frame
pointers, counted and logged."""
import os
import subprocess

from agent_test import GPU_WL, Agent, need_standins, value, wait_for
from sonde_test import *

need_bpf()
d = tmpdir()
prog = os.path.join(WL, "shares-O2")
TRUTH = {"alpha": 50.0, "beta": 30.0, "gamma": 20.0}

out = os.path.join(d, "o2.folded")
p = record(["-F", "499", "-o", out, "--", prog, "4"])
check(p.returncode == 0, "record of shares-O2 exits 0 (got %d)" % p.returncode)
stacks = for_comm(parse_folded(out), "shares-O2")
n = total(stacks)
check(n >= 1000, "at least 1000 samples (got %d)" % n)

for func, truth in TRUTH.items():
    got = share(stacks, func)
    check(abs(got - truth) <= 5.0,
          "%s share %.1f%% within 5 points of %.0f%%" % (func, got, truth))


def whole(frames):
    """_start at the root, then main, run, one share function, spin_unit."""
    return in_order(frames, ["_start", "main", "run", None, "spin_unit"], TRUTH)


spin = [(f, c) for f, c in stacks if "spin_unit" in f]
n_spin = total(spin)
good = sum(c for f, c in spin if whole(f))
bad = sorted(((c, ";".join(f)) for f, c in spin if not whole(f)), reverse=True)[:3]
check(n_spin >= 0.9 * n, "%d of %d samples in spin_unit" % (n_spin, n))
check(good >= 0.9 * n_spin,
      "%d of %d spin_unit samples whole from _start through main;run;X;spin_unit "
      "(others: %s)" % (good, n_spin, bad))
print("ok")

# A callback through a library (qsort calling back into the program), a
# signal handler above the code it interrupted (the kernel's signal frame
# between them), both gcc -O2 and through libc, and a frame that realigns
# its stack (gcc's DRAP: its CFA saved below rbp), whole from _start.
cases = os.path.join(WL, "unwind-cases")
for mode, leaf, chain in (
        ("qsort", "cmp_slow", ["_start", "main", "sort_loop", "qsort_r", "cmp_slow"]),
        ("signal", "handler_work", ["_start", "main", "signal_loop", "raise", "[signal]",
                                    "on_signal", "handler_work"]),
        ("drap", "drap_leaf", ["_start", "main", "drap_loop", "realigned", "drap_leaf"])):
    out = os.path.join(d, mode + ".folded")
    p = record(["-F", "499", "-o", out, "--", cases, mode, "2"])
    check(p.returncode == 0, "%s: record exits 0" % mode)
    st = [(f, c) for f, c in for_comm(parse_folded(out), "unwind-cases") if leaf in f]
    n_leaf = total(st)
    good = sum(c for f, c in st if in_order(f, chain))
    bad = sorted(((c, ";".join(f)) for f, c in st if not in_order(f, chain)), reverse=True)[:2]
    check(n_leaf >= 300 and good >= 0.9 * n_leaf, "%s: %d of %d samples in %s whole: %s (others: %s)"
          % (mode, good, n_leaf, leaf, ";".join(chain), bad))

# C++ with exceptions (g++ -O2): the work under main;run;Parser::parse, and
# the throw's own unwinding (__cxa_throw, libgcc_s) from the parse that
# threw, whole from _start.
out = os.path.join(d, "cxx.folded")
p = record(["-F", "499", "-o", out, "--", os.path.join(WL, "cxx-throw"), "2"])
check(p.returncode == 0, "cxx-throw: record exits 0")
st = for_comm(parse_folded(out), "cxx-throw")


def cxx_whole(frames, last):
    return in_order([f.split("(")[0] for f in frames],
                    ["_start", "main", "run", "Parser::parse", last])


for what, last in (("Parser::work", "Parser::work"), ("__cxa_throw", "__cxa_throw")):
    sel = [(f, c) for f, c in st if any(x.startswith(what) for x in f)]
    n_sel = total(sel)
    good = sum(c for f, c in sel if cxx_whole(f, last))
    check(n_sel >= 10 and good >= 0.9 * n_sel,
          "cxx-throw: %d of %d samples in %s whole from _start through main;run;Parser::parse "
          "(others: %s)" % (good, n_sel, what,
                            [";".join(f) for f, c in sel if not cxx_whole(f, last)][:1]))

# The agent's counters, and the memory budget: with 64 KiB of tables (8192
# rows), the program's own table (about 60 rows) fits and libc's (about
# 28,000) does not -- libc is walked by frame pointers, and counted.
a = Agent(["--no-gpu", "-F", "199", "--unwind-memory", "64K"])
try:
    w = subprocess.Popen([prog, "2"])
    check(w.wait(60) == 0, "shares-O2 ran beside the agent")
    m = wait_for(lambda: (lambda m: m if (value(m, "sonde_agent_unwind_frames_total",
                                                  method="table") or 0) > 0 else None)(
        a.metrics()), 10, "frames stepped by table")
    check((value(m, "sonde_agent_unwind_tables") or 0) >= 1,
          "tables in the maps: %s" % value(m, "sonde_agent_unwind_tables"))
    check(value(m, "sonde_agent_unwind_table_budget_bytes") == 64 * 1024,
          "the budget is --unwind-memory's 64 KiB")
    check((value(m, "sonde_agent_unwind_fallback_files_total", reason="over_budget") or 0) >= 1,
          "a file over the budget (libc) counted: %s"
          % value(m, "sonde_agent_unwind_fallback_files_total", reason="over_budget"))
    over = [l for l in a.log if "bigger than the budget" in l]
    check(any("libc.so" in l for l in over), "and logged: %s" % over[:2])
finally:
    rc = a.stop()
check(rc == 0, "the agent exits 0")

# GPU: a stand-in job built the same way (gcc -O2, no frame pointers) that
# launches at once and exits: every launch's stack whole from _start
# through main (the tables of the command and its libraries are built
# before it runs).
need_standins()
job = os.path.join(GPU_WL, "gpu_launch_o2")
out = os.path.join(d, "gpu.folded")
env = dict(os.environ, SONDE_STANDIN_KERNEL_US="0")
p = subprocess.run([SONDE, "record", "-q", "--gpu", "-o", out, "--", job, "-n", "250"],
                   env=env, capture_output=True, text=True, timeout=120)
check(p.returncode == 0, "record --gpu of gpu_launch_o2 exits 0")
launches = parse_folded(os.path.join(d, "gpu.gpu_launch.folded"))
n = total(launches)
whole = sum(c for f, c in launches
            if f[1:2] == ["_start"] and "main" in f and f.index("main") < len(f) - 1)
check(n >= 250 and whole == n, "%d of %d launches carry the chain from _start through main "
      "(%s)" % (whole, n, [";".join(f) for f, c in launches][:3]))
print("ok")
