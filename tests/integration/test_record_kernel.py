"""A syscall-heavy workload: its stacks carry kernel frames (suffixed _[k])
below the user frames that entered the kernel, and --no-kernel removes them.

With frame-pointer unwinding, the caller of a libc syscall wrapper that sets
up no frame (__read) is not seen: the stacks read main;__read;<kernel>, not
main;do_syscalls;__read;<kernel>. The test checks what frame pointers give."""
import os
from sonde_test import *

need_bpf()
d = tmpdir()
out = os.path.join(d, "sys.folded")
p = record(["-F", "499", "-o", out, "--", os.path.join(WL, "syscalls"), "2"])
check(p.returncode == 0, "record exits 0")
stacks = for_comm(parse_folded(out), "syscalls")
n = total(stacks)
check(n >= 300, "at least 300 samples (got %d)" % n)

kern = [(s, c) for s, c in stacks if s[-1].endswith("_[k]")]
kshare = 100.0 * total(kern) / n
check(kshare >= 50, "%.0f%% of samples end in a kernel frame (syscall-heavy)" % kshare)
# Kernel frames sit below the user frames that entered the kernel: once a
# stack reaches the kernel it stays there, and main is above it.
def kernel_at_bottom(s):
    k = next(i for i, f in enumerate(s) if f.endswith("_[k]"))
    return all(f.endswith("_[k]") for f in s[k:]) and "main" in s[:k]
good = [(s, c) for s, c in kern if kernel_at_bottom(s)]
check(total(good) >= 0.95 * total(kern),
      "kernel frames are below user frames from main (%d of %d samples)"
      % (total(good), total(kern)))
names = {f for s, _ in kern for f in s if f.endswith("_[k]")}
# The workload copies a megabyte each way: each path has its share.
reads = total([(s, c) for s, c in kern if any("sys_read" in f for f in s)])
writes = total([(s, c) for s, c in kern if any("sys_pwrite" in f for f in s)])
check(reads >= 0.1 * total(kern) and writes >= 0.1 * total(kern),
      "kernel read and write paths named: %d samples under sys_read, %d under sys_pwrite64 "
      "of %d" % (reads, writes, total(kern)))
check(any(f.startswith("entry_SYSCALL") or "syscall" in f.lower() for f in names),
      "the syscall entry is on the kernel stack")

out2 = os.path.join(d, "nok.folded")
p = record(["-F", "199", "--no-kernel", "-o", out2, "--", os.path.join(WL, "syscalls"), "1"])
stacks = for_comm(parse_folded(out2), "syscalls")
check(p.returncode == 0 and total(stacks) > 0 and
      not any(f.endswith("_[k]") for s, _ in stacks for f in s),
      "--no-kernel leaves no kernel frames")
