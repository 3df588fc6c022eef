"""rf_open.py: opens N torch.autograd.profiler.record_function scopes
(default 20000) and never closes them, each object kept alive: more scopes
open at once than the GPU probes keep (their torch_rf map holds 16384), so
that the ends of the rest could not be reported (test_bpf_counters.py).
Prints "done". Needs PyTorch (Debian's python3-torch)."""
import sys

import torch

n = int(sys.argv[1]) if len(sys.argv) > 1 else 20000
scopes = [torch.autograd.profiler.record_function("open") for _ in range(n)]
for s in scopes:
    s.__enter__()
print("done", flush=True)
