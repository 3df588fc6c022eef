"""GPU probes against the CUDA driver API of the toolkit's driver stub
(lib64/stubs/libcuda.so: the real exported symbols, every call returning
CUDA_ERROR_STUB_LIBRARY without touching its arguments): a program calls
each probed function with known arguments -- cuLaunchKernel's eleven of
which three are on the stack, the CUlaunchConfig of cuLaunchKernelEx, the
device of a CUmemAllocationProp, context constructors of three vintages --
and, built again, the _ptsz entry points. Every field must decode as
passed; out-parameters, left as the program set them, prove which register
holds which pointer."""
from gpu_real import *

need_cuda("lib64/stubs/libcuda.so")


def driver(prog, ptsz):
    def api(name):
        return name + "_ptsz" if ptsz else name

    events, probes, stats, e = dump(prog)
    what = prog
    healthy(stats, what)
    attached(probes, what, "libcuda.so")
    rc = iter(e["rc"])

    ev = one(events, "device", "cuCtxSetCurrent")
    fields(ev, "cuCtxSetCurrent(ctx)", ctx=0xc7c7, ret=next(rc))
    ev = one(events, "device", "cuDevicePrimaryCtxRetain")
    fields(ev, "cuDevicePrimaryCtxRetain(&ctx, 1)", device=1, ctx=0xc1c1, ret=next(rc))
    ev = one(events, "device", "cuCtxCreate_v2")
    fields(ev, "cuCtxCreate_v2(&ctx, 0, 2)", device=2, ctx=0xc2c2, ret=next(rc))
    ev = one(events, "device", "cuCtxCreate_v3")
    fields(ev, "cuCtxCreate_v3(&ctx, NULL, 0, 0, 3)", device=3, ctx=0xc3c3, ret=next(rc))
    ev = one(events, "device", "cuCtxCreate_v4")
    fields(ev, "cuCtxCreate(&ctx, NULL, 0, 4)", device=4, ctx=0xc4c4, ret=next(rc))
    ev = one(events, "kernel_name", "cuModuleGetFunction")
    fields(ev, "cuModuleGetFunction(&f, mod, name)", handle=0x4242, stub=0x3d3d,
           name="sonde_drv_kernel", ret=next(rc))
    ev = one(events, "kernel_name", "cuLibraryGetKernel")
    fields(ev, "cuLibraryGetKernel(&k, lib, name)", handle=0x4343, stub=0x3e3e,
           name="sonde_lib_kernel", ret=next(rc))

    ev = one(events, "launch", api("cuLaunchKernel"))
    fields(ev, "cuLaunchKernel(f, 3,5,7, 32,2,1, 1024, s, NULL, NULL)", func=0x4242,
           grid=[3, 5, 7], block=[32, 2, 1], shmem=1024, stream=0x3333, graph=False,
           ret=next(rc))
    check(ev.get("stack", [None])[0] == "sonde_drv_launch" and "main" in ev["stack"],
          "driver launch has the launching stack (%s)" % ev.get("stack"))
    check("name" not in ev, "a failed cuModuleGetFunction names no kernel")
    ev = one(events, "launch", api("cuLaunchKernelEx"))
    fields(ev, "cuLaunchKernelEx(&{2,4,6, 8,16,1, 2048, s}, f)", func=0x4343, grid=[2, 4, 6],
           block=[8, 16, 1], shmem=2048, stream=0x5555, ret=next(rc))
    ev = one(events, "launch", api("cuGraphLaunch"))
    fields(ev, "cuGraphLaunch(exec, s)", func=0x6666, stream=0x7777, graph=True, ret=next(rc))
    ev = one(events, "graph", "cuGraphAddKernelNode_v2", graph=0x8888)
    fields(ev, "cuGraphAddKernelNode(&n, g, NULL, 0, &{func f, kern k})", op="add_kernel",
           func=0x4242, ret=next(rc))
    ev = one(events, "graph", "cuGraphAddKernelNode_v2", graph=0x8889)
    fields(ev, "cuGraphAddKernelNode(&n, g, NULL, 0, &{func NULL, kern k})", op="add_kernel",
           func=0x4343, ret=next(rc))

    ev = one(events, "alloc", "cuMemAlloc_v2")
    fields(ev, "cuMemAlloc(&d, 4099)", size=4099, out=e["d1"], addr=0x5b5b0001, ret=next(rc))
    ev = one(events, "alloc", "cuMemAllocManaged")
    fields(ev, "cuMemAllocManaged(&d, 8192, global)", size=8192, out=e["d2"], addr=0x5b5b0002,
           managed=True, ret=next(rc))
    ev = one(events, "alloc", api("cuMemAllocAsync"))
    fields(ev, "cuMemAllocAsync(&d, 999, s)", size=999, out=e["d3"], addr=0x5b5b0003,
           stream=0x1111, is_async=True, ret=next(rc))
    ev = one(events, "free", "cuMemFree_v2")
    fields(ev, "cuMemFree(d)", addr=0xdead0000, ret=next(rc))
    ev = one(events, "free", api("cuMemFreeAsync"))
    fields(ev, "cuMemFreeAsync(d, s)", addr=0xbeef0000, stream=0x2222, is_async=True,
           ret=next(rc))
    ev = one(events, "alloc", "cuMemCreate")
    fields(ev, "cuMemCreate(&h, 2 MiB, &{device 2}, 0)", size=2097152, out=e["h"], addr=0x6c6c,
           device=2, handle=True, ret=next(rc))
    ev = one(events, "free", "cuMemRelease")
    fields(ev, "cuMemRelease(h)", addr=0x6d6d, handle=True, ret=next(rc))

    for name, handle in ((api("cuStreamSynchronize"), 0x9999), ("cuCtxSynchronize", 0),
                         ("cuCtxSynchronize_v2", 0xc8c8)):
        b = one(events, "sync_begin", name)
        end = one(events, "sync_end", name)
        fields(b, name + " begin", handle=handle)
        fields(end, name + " end", handle=handle, ret=next(rc))
        check(b["ts"] == end["ts"] - end["dur"], "%s: the begin is the end's entry" % name)
    ev = one(events, "capacity", "cuMemGetInfo_v2")
    fields(ev, "cuMemGetInfo(&free, &total)", free=111, total=222, ret=next(rc))
    ev = one(events, "capacity", "cuDeviceTotalMem_v2")
    fields(ev, "cuDeviceTotalMem(&bytes, 2)", device=2, total=0x9876543210, ret=next(rc))
    check(next(rc, None) is None, "every call of the program was checked")
    calls = [ev for ev in events if ev["type"] not in ("sync_begin", "process_exit")]
    check(len(calls) == len(e["rc"]), "one event per call (%d)" % len(calls))


driver("driver_calls", ptsz=False)
driver("driver_calls_ptsz", ptsz=True)
