"""GPU probes against the REAL CUDA 13 runtime: a program built with nvcc
calls libcudart.so.13 (and, built again, its per-thread-stream entry points,
and a copy of cudart linked statically into the executable) with known
arguments; the probes must find the library (or the executable) by scanning
the process, and decode every argument exactly -- grid and block (a dim3 in
two registers), shared memory and stream (on the stack), sizes, copy kinds,
out-parameters -- with the stack of the calling thread and the kernel name
from the host stub. Both ways of attaching are run: uprobe_multi links and
one perf uprobe per function."""
from gpu_real import *

need_cuda("lib64/libcudart.so.13")

STUB_NAME = "sonde_test_kernel"


def runtime(prog, ptsz, static, perf_uprobes=False):
    def api(name, per_thread):
        return name + per_thread if ptsz else name

    events, probes, stats, e = dump(prog, perf_uprobes=perf_uprobes)
    what = prog + (" (perf uprobes)" if perf_uprobes else "")
    healthy(stats, what)
    if static:
        attached(probes, what, "/gpu-real/" + prog, absent=["cudaGetDeviceProperties_v2"])
    else:
        attached(probes, what, "libcudart.so.13", absent=["cudaGetDeviceProperties_v2"])
    rc = iter(e["rc"])
    pids = {ev["pid"] for ev in events if ev["type"] != "process_exit"}
    check(len(pids) == 1, "%s: events of the one process" % what)

    ev = one(events, "device", "cudaSetDevice")
    fields(ev, "cudaSetDevice(1)", device=1, ret=next(rc))
    ev = one(events, "alloc", "cudaMalloc")
    fields(ev, "cudaMalloc(&p, 1048583)", size=1048583, out=e["p1"], addr=e["p1_after"],
           ret=next(rc))
    ev = one(events, "alloc", "cudaMallocManaged")
    fields(ev, "cudaMallocManaged(&p, 12288, global)", size=12288, out=e["p2"], managed=True,
           ret=next(rc))
    ev = one(events, "alloc", api("cudaMallocAsync", "_ptsz"))
    fields(ev, "cudaMallocAsync(&p, 777, s)", size=777, out=e["p3"], stream=0x1111,
           is_async=True, ret=next(rc))
    ev = one(events, "free", "cudaFree")
    fields(ev, "cudaFree(p)", addr=0xdead0000, ret=next(rc))
    ev = one(events, "free", api("cudaFreeAsync", "_ptsz"))
    fields(ev, "cudaFreeAsync(p, s)", addr=0xbeef0000, stream=0x2222, is_async=True, ret=next(rc))

    # <<<>>>: CUDA 13 asks __cudaGetKernel for the handle of the host stub,
    # then launches through __cudaLaunchKernel (a tail call into
    # cudaLaunchKernel, which the probes report once).
    ev = one(events, "kernel_stub", "__cudaGetKernel")
    fields(ev, "__cudaGetKernel(&h, stub)", stub=e["stub"])
    ev = one(events, "launch", api("__cudaLaunchKernel", "_ptsz"))
    fields(ev, "<<<(3,5,7), (32,2,1), 1024, s>>>", grid=[3, 5, 7], block=[32, 2, 1],
           shmem=1024, stream=0x3333, func=e["stub"], stub=e["stub"], ret=next(rc))
    check(STUB_NAME in ev.get("kernel", ""), "chevron launch names the kernel (%s)"
          % ev.get("kernel"))
    check("sonde_launch_chevrons" in ev.get("stack", []) and "main" in ev["stack"],
          "chevron launch has the launching stack (%s)" % ev.get("stack"))
    check(stats["nested"] >= 1, "the tail call is counted as nested, not as a second launch")

    ev = one(events, "launch", api("cudaLaunchKernel", "_ptsz"))
    fields(ev, "cudaLaunchKernel(f, (11,13,17), (64,4,2), args, 4096, s)", grid=[11, 13, 17],
           block=[64, 4, 2], shmem=4096, stream=0x4444, func=e["stub"], ret=next(rc))
    check(STUB_NAME in ev.get("kernel", ""), "explicit launch names the kernel (%s)"
          % ev.get("kernel"))
    check(ev.get("stack", [None])[0] == "sonde_launch_explicit",
          "the launch stack's leaf is the caller (%s)" % ev.get("stack"))
    check(ev["dur"] > 0, "the launch call has a duration (%d ns)" % ev["dur"])

    ev = one(events, "launch", api("cudaLaunchKernelExC", "_ptsz"))
    fields(ev, "cudaLaunchKernelExC(&{(2,4,6), (8,16,1), 2048, s}, f, args)", grid=[2, 4, 6],
           block=[8, 16, 1], shmem=2048, stream=0x5555, func=e["stub"], ret=next(rc))
    ev = one(events, "launch", "cudaGraphLaunch")
    fields(ev, "cudaGraphLaunch(exec, s)", func=0x6666, stream=0x7777, graph=True, ret=next(rc))
    ev = one(events, "graph", "cudaGraphAddKernelNode")
    fields(ev, "cudaGraphAddKernelNode(&n, g, NULL, 0, &{stub})", op="add_kernel",
           graph=0x8888, func=e["stub"], stub=e["stub"], ret=next(rc))

    ev = one(events, "memcpy", api("cudaMemcpy", "_ptds"))
    fields(ev, "cudaMemcpy(d, h, 12345, H2D)", dst=0x10000, bytes=12345, kind=1, ret=next(rc))
    ev = one(events, "memcpy", api("cudaMemcpyAsync", "_ptsz"))
    fields(ev, "cudaMemcpyAsync(h, d, 54321, D2H, s)", src=0x20000, bytes=54321, kind=2,
           stream=0x8888, is_async=True, ret=next(rc))

    for name, handle in ((api("cudaStreamSynchronize", "_ptsz"), 0x9999),
                         ("cudaDeviceSynchronize", 0), ("cudaEventSynchronize", 0xaaaa)):
        b = one(events, "sync_begin", name)
        end = one(events, "sync_end", name)
        fields(b, name + " begin", handle=handle)
        fields(end, name + " end", handle=handle, ret=next(rc))
        check(b["ts"] == end["ts"] - end["dur"] and b["tid"] == end["tid"],
              "%s: the begin is the end's entry" % name)
        check("main" in end.get("stack", []), "%s: waiting stack (%s)" % (name, end.get("stack")))
    end = one(events, "sync_end", api("cudaStreamSynchronize", "_ptsz"))
    check(end["stack"][0] == "sonde_wait_stream", "wait stack leaf is the caller")

    # The calls fail, so they leave the out-parameters as the program set
    # them: reading them back proves which register holds which pointer.
    ev = one(events, "capacity", "cudaMemGetInfo")
    fields(ev, "cudaMemGetInfo(&free, &total)", free=e["free_after"], total=e["total_after"],
           ret=next(rc))
    ev = one(events, "capacity", "cudaGetDeviceProperties")
    fields(ev, "cudaGetDeviceProperties(&prop, 3).totalGlobalMem", device=3,
           total=e["prop_total"], ret=next(rc))
    ev = one(events, "kernel_stub", "cudaGetKernel")
    fields(ev, "cudaGetKernel(&h, stub)", stub=e["stub"], handle=e["handle_after"], ret=next(rc))
    check(next(rc, None) is None, "every call of the program was checked")

    calls = [ev for ev in events if ev["type"] not in ("sync_begin", "process_exit")]
    check(len(calls) == len(e["rc"]) + 1,
          "one event per call, no duplicate (%d events, %d calls + __cudaGetKernel)"
          % (len(calls), len(e["rc"])))
    check([ev["pid"] for ev in events if ev["type"] == "process_exit"] == list(pids),
          "the process's exit is reported")


runtime("cuda_calls", ptsz=False, static=False)
# The fallback for kernels before 6.6 (no uprobe_multi links).
runtime("cuda_calls", ptsz=False, static=False, perf_uprobes=True)
runtime("cuda_calls_ptsz", ptsz=True, static=False)
runtime("cuda_calls_static", ptsz=False, static=True)
