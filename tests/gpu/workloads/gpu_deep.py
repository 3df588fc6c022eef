"""gpu_deep.py: kernel launches at a paced rate from a PyTorch-like stack, for the GPU
loss-rate test (tests/integration/test_gpu_rate.py) and benchmark (bench/gpu_rate.sh).
A Python job on Debian's python3 recurses DEPTH Python frames deep (<module>, main,
DEPTH - 4 frames of layer(), pump, then one of four operator functions), and each
operator call goes through ctypes into libtorchlike.so (torchlike.c: an operator frame
and twenty dispatch frames built -O2 without frame pointers, as libtorch) which calls
cudaLaunchKernel of the stand-in runtime: about 80 frames a launch (40 of them Python's,
the interpreter's and ctypes' native frames between), four distinct stacks.
It launches RATE * DURATION kernels, RATE a second on a schedule (catching up in bursts
when behind), looked up by name with cuLibraryGetKernel. At the end it prints one JSON
line: {"workload", "pid", "launches", "seconds", "rate", "cpu_s" (its own CPU),
"kernel"}; with --hold it then waits for its stdin to close before exiting. --load LIB
loads a library halfway through, as PyTorch loads cuBLAS or cuDNN at their first use;
--allocs makes a cudaMalloc and a cudaFree beside each launch.

usage: python3 gpu_deep.py GPUDIR [--rate R] [--duration S] [--depth D] [--load LIB] [--allocs] [--hold]
(GPUDIR: the build's gpu/ folder, holding standin/ and workloads/)"""
import argparse
import ctypes
import json
import os
import resource
import sys
import time

KERNEL = b"_Z12deep_forwardPfi"  # deep_forward(float*, int)


def load(gpudir):
    si = os.path.join(gpudir, "standin")
    cuda = ctypes.CDLL(os.path.join(si, "libcuda.so.1"))
    rt = ctypes.CDLL(os.path.join(si, "libcudart.so.13"))
    shim = ctypes.CDLL(os.path.join(gpudir, "workloads", "libtorchlike.so"))
    shim.torchlike_launch.argtypes = [ctypes.c_int, ctypes.c_void_p]
    shim.torchlike_launch.restype = ctypes.c_int
    if cuda.cuInit(0):
        sys.exit("gpu_deep: cuInit failed")
    lib = ctypes.c_void_p()
    image = ctypes.create_string_buffer(b"gpu_deep-cubin")
    if cuda.cuLibraryLoadData(ctypes.byref(lib), image, None, None, 0, None, None, 0):
        sys.exit("gpu_deep: cuLibraryLoadData failed")
    kernel = ctypes.c_void_p()
    if cuda.cuLibraryGetKernel(ctypes.byref(kernel), lib, KERNEL):
        sys.exit("gpu_deep: cuLibraryGetKernel failed")
    if rt.cudaSetDevice(0):
        sys.exit("gpu_deep: cudaSetDevice failed")
    return rt, shim.torchlike_launch, kernel.value


def linear(launch, kernel):
    return launch(0, kernel)


def relu(launch, kernel):
    return launch(1, kernel)


def layer_norm(launch, kernel):
    return launch(2, kernel)


def add(launch, kernel):
    return launch(3, kernel)


OPS = (linear, relu, layer_norm, add)


def pump(launch, kernel, rate, total, load=None, rt=None):
    """total launches, rate a second from now on; halfway through, loads the
    library load (a path) as PyTorch loads cuBLAS or cuDNN at their first use.
    With rt, a cudaMalloc and a cudaFree beside each launch (small records
    between the launches' big ones, as a caching allocator's)."""
    t0 = time.monotonic()
    n = 0
    ptr = ctypes.c_void_p()
    while n < total:
        if load and n >= total // 2:
            ctypes.CDLL(load)
            load = None
        due = min(total, int((time.monotonic() - t0) * rate) + 1)
        while n < due:
            if OPS[n & 3](launch, kernel):
                sys.exit("gpu_deep: launch %d failed" % n)
            if rt and (rt.cudaMalloc(ctypes.byref(ptr), 4096) or rt.cudaFree(ptr)):
                sys.exit("gpu_deep: cudaMalloc/cudaFree %d failed" % n)
            n += 1
        ahead = n / rate - (time.monotonic() - t0)
        if ahead > 0:
            time.sleep(ahead)
    return n, time.monotonic() - t0


def layer(d, launch, kernel, rate, total, load, rt):
    # Plain positional calls: Python 3.11 runs them in the same C frame of
    # the eval loop, as a model's nested modules are (no native frame each).
    if d > 0:
        return layer(d - 1, launch, kernel, rate, total, load, rt)
    return pump(launch, kernel, rate, total, load, rt)


def main():
    ap = argparse.ArgumentParser(usage=__doc__.rsplit("\n", 2)[-2])
    ap.add_argument("gpudir")
    ap.add_argument("--rate", type=float, default=20000)
    ap.add_argument("--duration", type=float, default=10)
    ap.add_argument("--depth", type=int, default=40)
    ap.add_argument("--load", help="a library to load halfway through")
    ap.add_argument("--hold", action="store_true")
    ap.add_argument("--allocs", action="store_true",
                    help="a cudaMalloc and a cudaFree beside each launch")
    o = ap.parse_args()
    rt, launch, kernel = load(o.gpudir)
    n, secs = layer(max(0, o.depth - 4), launch, kernel, o.rate, int(o.rate * o.duration),
                    o.load, rt if o.allocs else None)
    if rt.cudaDeviceSynchronize():
        sys.exit("gpu_deep: cudaDeviceSynchronize failed")
    ru = resource.getrusage(resource.RUSAGE_SELF)
    print(json.dumps({"workload": "gpu_deep", "pid": os.getpid(), "launches": n,
                      "seconds": round(secs, 3), "rate": round(n / secs, 1),
                      "cpu_s": round(ru.ru_utime + ru.ru_stime, 3),
                      "kernel": KERNEL.decode()}), flush=True)
    if o.hold:
        sys.stdin.read()


if __name__ == "__main__":
    main()
