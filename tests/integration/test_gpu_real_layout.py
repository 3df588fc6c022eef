"""The structures and enums the GPU probes assume, against the REAL headers
of /usr/local/cuda: offsets read by the BPF programs (cudaDeviceProp,
cudaLaunchConfig_t, CUlaunchConfig, CUmemAllocationProp) are checked when
tests/gpu/real/layout.c compiles, and the element size of every
ncclDataType_t by the type's name when it runs."""
from gpu_real import *

need_cuda("include/nccl.h", "include/cuda.h")
p = run([os.path.join(GR, "layout")])
check(p.returncode == 0, "layout checks pass")
check(p.stdout.count("\nok ") == 12, "the 12 NCCL types were checked")
