"""gpu_ctypes.py: a Python job that drives the CUDA runtime through ctypes,
as a framework without compiled bindings would: it loads libcuda.so.1 and
libcudart.so.13 from LIBDIR (the stand-ins of tests/gpu/), looks a kernel
up by name (cuLibraryGetKernel, as code that loads its own cubins does) and
launches it with cudaLaunchKernel, STEPS times LAUNCHES times, always from
<module> -> train -> launch_step; between the steps, preprocess burns
SPIN seconds of CPU in all (time.thread_time) in pure Python, the chain
<module> -> train -> preprocess. At the end it prints one JSON line:
{"pid", "launches", "kernel" (the name looked up)}. With --hold it then
waits for its stdin to close before exiting, so that an observer can read
what it saw of the live process. With --preload LIB it maps LIB first (a
big library whose unwind table takes long to build, libtorch_cpu's, as a
PyTorch job maps it before CUDA) and prints {"preloaded": LIB} once it is
mapped. With --nvtx SHIM it opens an NVTX range "step" around each step
and a range "forward" (through nvtxRangePushEx) around its launches, by
NVTX's C API in SHIM (tests/gpu/workloads/nvtx_shim.c), as
torch.cuda.nvtx.range_push does. The ground truth of the Python-launches
tests (tests/integration/test_unwind_python_gpu.py, test_gpu_hold.py,
test_gpu_time.py).

usage: python3 gpu_ctypes.py LIBDIR [STEPS [LAUNCHES [SPIN]]] [--hold] [--preload LIB]
       [--nvtx SHIM]"""
import ctypes
import json
import os
import sys
import time

KERNEL = b"_Z11python_stepPfi"  # python_step(float*, int)


class dim3(ctypes.Structure):
    _fields_ = [("x", ctypes.c_uint), ("y", ctypes.c_uint), ("z", ctypes.c_uint)]


def load(libdir):
    cuda = ctypes.CDLL(os.path.join(libdir, "libcuda.so.1"))
    rt = ctypes.CDLL(os.path.join(libdir, "libcudart.so.13"))
    rt.cudaLaunchKernel.argtypes = [ctypes.c_void_p, dim3, dim3, ctypes.c_void_p,
                                    ctypes.c_size_t, ctypes.c_void_p]
    rt.cudaLaunchKernel.restype = ctypes.c_int
    if cuda.cuInit(0):
        sys.exit("gpu_ctypes: cuInit failed")
    lib = ctypes.c_void_p()
    image = ctypes.create_string_buffer(b"gpu_ctypes-cubin")
    if cuda.cuLibraryLoadData(ctypes.byref(lib), image, None, None, 0, None, None, 0):
        sys.exit("gpu_ctypes: cuLibraryLoadData failed")
    kernel = ctypes.c_void_p()
    if cuda.cuLibraryGetKernel(ctypes.byref(kernel), lib, KERNEL):
        sys.exit("gpu_ctypes: cuLibraryGetKernel failed")
    if rt.cudaSetDevice(0):
        sys.exit("gpu_ctypes: cudaSetDevice failed")
    return rt, kernel


def launch_step(rt, kernel, n):
    args = (ctypes.c_void_p * 2)()
    for _ in range(n):
        err = rt.cudaLaunchKernel(kernel, dim3(64, 1, 1), dim3(128, 1, 1), args, 0, None)
        if err:
            sys.exit("gpu_ctypes: cudaLaunchKernel returned %d" % err)


def preprocess(seconds):
    end = time.thread_time() + seconds
    x = 0
    while time.thread_time() < end:
        for i in range(500):
            x += i * i
    return x


def train(rt, kernel, steps, launches, spin, nvtx=None):
    for _ in range(steps):
        if nvtx:
            nvtx.shim_push(b"step")
            nvtx.shim_push_ex(b"forward")
        launch_step(rt, kernel, launches)
        if nvtx:
            nvtx.shim_pop()
            nvtx.shim_pop()
        preprocess(spin / steps)
    if rt.cudaDeviceSynchronize():
        sys.exit("gpu_ctypes: cudaDeviceSynchronize failed")
    return steps * launches


argv = [a for a in sys.argv[1:] if a != "--hold"]
if "--preload" in argv:
    i = argv.index("--preload")
    ctypes.CDLL(argv[i + 1], mode=ctypes.RTLD_GLOBAL)
    print(json.dumps({"preloaded": argv[i + 1]}), flush=True)
    del argv[i:i + 2]
nvtx = None
if "--nvtx" in argv:
    i = argv.index("--nvtx")
    nvtx = ctypes.CDLL(argv[i + 1])
    nvtx.shim_push.argtypes = nvtx.shim_push_ex.argtypes = [ctypes.c_char_p]
    del argv[i:i + 2]
if not argv:
    sys.exit(__doc__.rsplit("\n", 1)[-1])
steps = int(argv[1]) if len(argv) > 1 else 20
launches = int(argv[2]) if len(argv) > 2 else 50
spin = float(argv[3]) if len(argv) > 3 else 1.0
rt, kernel = load(argv[0])
n = train(rt, kernel, steps, launches, spin, nvtx)
print(json.dumps({"workload": "gpu_ctypes", "pid": os.getpid(), "launches": n,
                  "kernel": KERNEL.decode()}), flush=True)
if "--hold" in sys.argv[1:]:
    sys.stdin.read()
