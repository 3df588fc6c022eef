"""torch_step.py: a small CPU training loop on real PyTorch for the
DataLoader-wait benchmark (bench/dataloader.sh): 20 blocks of
Linear(64, 64) + ReLU + LayerNorm, Adam, batches of 32 from a DataLoader
(num_workers=0, items ready at once), STEPS steps (default 300) after 20 of
warm-up. Each step makes about 160 at::RecordFunction objects of the
operator and autograd scopes (each destructor calls end()) and three of
record_function's user scope (the DataLoader's __next__, Adam's step and
zero_grad). Prints the milliseconds a step took, on average."""
import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset


class Ready(Dataset):
    def __init__(self, n):
        self.x = torch.randn(n, 64)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i]


def main():
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 300
    torch.set_num_threads(1)
    model = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(),
                                                      torch.nn.LayerNorm(64))
                                  for _ in range(20)])
    opt = torch.optim.Adam(model.parameters())
    loader = DataLoader(Ready(32 * (steps + 20)), batch_size=32)
    it = iter(loader)
    for i in range(steps + 20):
        if i == 20:
            t0 = time.perf_counter()
        x = next(it)
        loss = model(x).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
    print("%.3f" % ((time.perf_counter() - t0) * 1000 / steps), flush=True)


if __name__ == "__main__":
    main()
