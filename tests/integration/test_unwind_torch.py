"""A real PyTorch training step (Debian's python3-torch, on the CPU): the
matrix products (BLAS gemm, deep under libtorch_cpu's C++ dispatch, none
of it with frame pointers) sit under the Python function that ran them,
step() of tests/workloads/train_torch.py, itself under train() -- in at
least 85 % of the samples taken in a gemm over 8 s of training. (The
stacks of the first moments after `import torch` are cut short: the
tables of the libraries it loads, libtorch_cpu's 1.4 M rows among them,
are built when the first stacks reach them, in about a second.)"""
import os
import shutil
import subprocess

from sonde_test import *

need_bpf()
PY = "/usr/bin/python3"
if subprocess.run([PY, "-c", "import torch"], capture_output=True, timeout=120).returncode:
    skip("Debian's python3-torch is not installed (scripts/setup.sh installs it)")
d = tmpdir()
script = os.path.join(d, "train_torch.py")
shutil.copy(os.path.join(ROOT, "tests", "workloads", "train_torch.py"), script)
out = os.path.join(d, "torch.folded")
p = record(["-F", "199", "-o", out, "--", PY, script, "8"], timeout=300)
check(p.returncode == 0, "record of the training loop exits 0")
stacks = parse_folded(out)
gemm = [(f, c) for f, c in stacks if any("gemm" in x for x in f)]
n = total(gemm)
check(n >= 200, "%d samples in a BLAS gemm" % n)
under = sum(c for f, c in gemm
            if "train (train_torch.py)" in f and "step (train_torch.py)" in f
            and f.index("train (train_torch.py)") < f.index("step (train_torch.py)")
            < min(i for i, x in enumerate(f) if "gemm" in x))
bad = sorted(((c, ";".join(f)[-300:]) for f, c in gemm if "step (train_torch.py)" not in f),
             reverse=True)[:2]
check(under >= 0.85 * n, "%d of %d gemm samples under train;step (others: %s)" % (under, n, bad))
native = sum(c for f, c in gemm if any(x.startswith("at::") for x in f))
check(native >= 0.85 * n, "%d of %d gemm samples go through libtorch's at:: frames" % (native, n))
print("ok")
