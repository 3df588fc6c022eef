"""dataloader_torch.py: a PyTorch training loop fed by a DataLoader, for the
DataLoader-wait tests (tests/integration/test_dataloader_wait.py). Each item
takes 40 ms to make (time.sleep in __getitem__); a batch is BATCH_SIZE
items, made by WORKERS worker processes (0: by the loop itself); the epoch
has BATCHES batches. Each step trains a small model, inside record_function
scopes that are not DataLoader waits (the optimizer's own, and one of ours
around the step), then sleeps STEP_MS (the accelerator's share of a step).

The loop times every next() itself, the one that ends the epoch
(StopIteration) included, and prints one JSON line when the epoch is over:
{"pid", "batches", "calls" (next() calls), "wait_s" (their total time)};
then it waits for its stdin to close, so that its series stay up while the
test reads them.

With BLOCK_AT and RELEASE, making item BLOCK_AT waits until the file
RELEASE exists (a worker that hangs, as it were): the loop is stuck in
next() until then. It prints "waiting at item N" on stderr when it starts
to wait.

With CUDART set to a CUDA runtime library (the tests' stand-in), each step
also copies its batch to the GPU and waits for it (cudaMemcpy,
cudaDeviceSynchronize), as a training loop on a GPU does.

Usage: dataloader_torch.py WORKERS BATCHES BATCH_SIZE STEP_MS [BLOCK_AT RELEASE]"""
import ctypes
import json
import os
import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset


class Slow(Dataset):
    def __init__(self, n, block_at=-1, release=None):
        self.n, self.block_at, self.release = n, block_at, release

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        time.sleep(0.04)
        if i == self.block_at:
            print("waiting at item %d" % i, file=sys.stderr, flush=True)
            while not os.path.exists(self.release):
                time.sleep(0.05)
        return torch.full((8,), float(i))


def main():
    workers, batches, batch_size, step_ms = (int(a) for a in sys.argv[1:5])
    block_at = int(sys.argv[5]) if len(sys.argv) > 6 else -1
    release = sys.argv[6] if len(sys.argv) > 6 else None
    torch.set_num_threads(1)
    model = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    loader = DataLoader(Slow(batches * batch_size, block_at, release), batch_size=batch_size,
                        num_workers=workers)
    cuda = dev = None
    if os.environ.get("CUDART"):
        cuda = ctypes.CDLL(os.environ["CUDART"])
        dev = ctypes.c_void_p()
        if cuda.cudaMalloc(ctypes.byref(dev), ctypes.c_size_t(4096)):
            sys.exit("cudaMalloc failed")
    it = iter(loader)
    n = calls = 0
    waited = 0.0
    while True:
        t0 = time.monotonic()
        calls += 1
        try:
            x = next(it)
        except StopIteration:
            waited += time.monotonic() - t0
            break
        waited += time.monotonic() - t0
        n += 1
        if cuda:
            host = x.contiguous()
            cuda.cudaMemcpy(dev, ctypes.c_void_p(host.data_ptr()),
                            ctypes.c_size_t(host.numel() * host.element_size()), 1)
            cuda.cudaDeviceSynchronize()
        with torch.autograd.profiler.record_function("train_step"):
            opt.zero_grad()
            model(x).sum().backward()
            opt.step()
        time.sleep(step_ms / 1000)
    print(json.dumps({"pid": os.getpid(), "batches": n, "calls": calls, "wait_s": waited}),
          flush=True)
    sys.stdin.read()


if __name__ == "__main__":
    main()
