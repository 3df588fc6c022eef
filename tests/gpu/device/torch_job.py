"""torch_job.py: a small PyTorch training job on a real GPU, for tests/gpu/device/run.sh.

It does what the probes must see on real hardware: eager training steps of an MLP
(cuBLAS GEMMs through the library API, elementwise and reduction kernels launched
by PyTorch's own stubs, the caching allocator), a CUDA graph captured from a step
and replayed, and with --expandable the caching allocator's expandable segments
(cuMemCreate/cuMemMap). It prints one JSON line with its own account:

- pid, steps, graph_replays, seconds, launches_per_second;
- memory: torch.cuda.memory_allocated / memory_reserved at the end;
- with --profile: the launch API calls (cudaLaunchKernel*, cuLaunchKernel*,
  cudaGraphLaunch) and the kernels by name that torch.profiler (CUPTI) saw for the
  same work -- run it separately, the profiler being CUPTI's one subscriber.

--copies: each step also copies a pinned host batch to the GPU (x.copy_, HtoD);
--nvtx: each step inside an NVTX range "sonde_step" (torch.cuda.nvtx), as
Megatron's and vLLM's ranges are. Both add to the line: copy_bytes (the
steps' copies) and nvtx.

--hold: after the line, waits for stdin to close (so that an observer can read the
live process: memory still held). No network, no dataset: random tensors.
"""
import argparse
import collections
import json
import os
import sys
import time

import torch

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=200)
p.add_argument("--replays", type=int, default=50)
p.add_argument("--width", type=int, default=2048)
p.add_argument("--profile", action="store_true")
p.add_argument("--hold", action="store_true")
p.add_argument("--copies", action="store_true")
p.add_argument("--nvtx", action="store_true")
p.add_argument("--expandable", action="store_true",
               help="set before torch's first allocation: expandable segments")
args = p.parse_args()
if args.expandable:
    os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"

dev = torch.device("cuda")
model = opt = x = y = None


def setup():
    """The model and the batch on the GPU: the job's first launches."""
    global model, opt, x, y
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(args.width, args.width), torch.nn.GELU(),
        torch.nn.Linear(args.width, args.width), torch.nn.GELU(),
        torch.nn.Linear(args.width, 10)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(256, args.width, device=dev)
    y = torch.randint(0, 10, (256,), device=dev)


host_x = None
copied = 0


def train_step():
    global host_x, copied
    if args.nvtx:
        torch.cuda.nvtx.range_push("sonde_step")
    if args.copies:
        if host_x is None:
            host_x = torch.randn(256, args.width).pin_memory()
        x.copy_(host_x, non_blocking=True)
        copied += host_x.numel() * host_x.element_size()
    opt.zero_grad(set_to_none=False)
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    if args.nvtx:
        torch.cuda.nvtx.range_pop()
    return loss


def work():
    for _ in range(args.steps):
        train_step()
    torch.cuda.synchronize()
    # A graph of the forward pass, captured on a side stream and replayed.
    static_x = x.clone()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            model(static_x)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.no_grad(), torch.cuda.graph(g):
        model(static_x)
    for _ in range(args.replays):
        g.replay()
    torch.cuda.synchronize()


LAUNCH_APIS = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx",
               "cudaGraphLaunch", "cuGraphLaunch")

def warm_up():
    """The model set up, then CUDA's, cuBLAS's and the allocator's start-up:
    one step. Inside the profiled work, so that the profiler counts every
    launch the job makes."""
    setup()
    train_step()
    torch.cuda.synchronize()


t0 = time.time()
out = {"workload": "torch_job", "pid": os.getpid(), "steps": args.steps,
       "graph_replays": args.replays, "torch": torch.__version__,
       "cuda": torch.version.cuda, "device": torch.cuda.get_device_name(0)}
if args.profile:
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        warm_up()
        work()
    apis = collections.Counter()
    kernels = collections.Counter()
    kernel_us = 0.0
    for e in prof.events():
        name = e.name
        if any(name == a or name.startswith(a + "_") for a in LAUNCH_APIS):
            apis[name] += 1
        elif getattr(e, "device_type", None) == torch.autograd.DeviceType.CUDA:
            kernels[name] += 1
            kernel_us += getattr(e, "device_time", None) or getattr(e, "cuda_time", 0) or 0
    out["launch_apis"] = dict(apis)
    out["kernels"] = dict(kernels)
    out["kernel_us"] = round(kernel_us, 1)  # summed, overlap not removed
else:
    warm_up()
    work()
secs = time.time() - t0
out["seconds"] = round(secs, 3)
out["copy_bytes"] = copied
out["nvtx"] = args.nvtx
out["memory"] = {"allocated": torch.cuda.memory_allocated(), "reserved": torch.cuda.memory_reserved()}
print(json.dumps(out), flush=True)
if args.hold:
    sys.stdin.read()
