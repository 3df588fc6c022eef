"""sync_stuck.py: a Python job stuck in a CUDA synchronisation, for the
CudaSyncStuck alert test (tests/integration/test_sync_stuck.py). It loads
the CUDA runtime from LIBDIR (the stand-ins of tests/gpu/) through ctypes,
queues a copy of 1 MiB that the stand-in GPU makes last SECONDS (its copy
rate, SONDE_STANDIN_COPY_GBPS, is set for that before the library loads),
prints "sync_stuck: waiting" on stderr, then waits for it at one line --
`rt.cudaDeviceSynchronize()` in wait_for_gpu -- as a training loop waits
for a kernel that hangs. When the wait ends it prints one JSON line {"pid",
"waited_s"} and exits.

usage: python3 sync_stuck.py LIBDIR SECONDS"""
import ctypes
import json
import os
import sys
import time

SIZE = 1 << 20


def wait_for_gpu(rt):
    t0 = time.monotonic()
    err = rt.cudaDeviceSynchronize()
    if err:
        sys.exit("sync_stuck: cudaDeviceSynchronize returned %d" % err)
    return time.monotonic() - t0


def main():
    libdir, seconds = sys.argv[1], float(sys.argv[2])
    os.environ["SONDE_STANDIN_COPY_GBPS"] = repr(SIZE / (seconds * 1e9))
    rt = ctypes.CDLL(os.path.join(libdir, "libcudart.so.13"))
    rt.cudaMemcpyAsync.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t,
                                   ctypes.c_int, ctypes.c_void_p]
    dev = ctypes.c_void_p()
    host = ctypes.create_string_buffer(SIZE)
    if rt.cudaSetDevice(0) or rt.cudaMalloc(ctypes.byref(dev), ctypes.c_size_t(SIZE)):
        sys.exit("sync_stuck: cudaSetDevice or cudaMalloc failed")
    if rt.cudaMemcpyAsync(dev, host, SIZE, 1, None):
        sys.exit("sync_stuck: cudaMemcpyAsync failed")
    print("sync_stuck: waiting", file=sys.stderr, flush=True)
    waited = wait_for_gpu(rt)
    print(json.dumps({"pid": os.getpid(), "waited_s": waited}), flush=True)


if __name__ == "__main__":
    main()
