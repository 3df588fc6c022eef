"""train_torch.py: a small CPU training loop on real PyTorch for SECONDS
(default 4): a two-layer MLP, MSE loss, SGD. Its time goes to the matrix
products (BLAS) run from step()."""
import sys
import time

import torch


def make_batch(n=256, d=512):
    x = torch.randn(n, d)
    return x, x.sum(dim=1, keepdim=True)


def step(model, opt, x, y):
    opt.zero_grad()
    loss = ((model(x) - y) ** 2).mean()
    loss.backward()
    opt.step()
    return loss.item()


def train(seconds):
    torch.set_num_threads(1)
    model = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.ReLU(),
                                torch.nn.Linear(1024, 1))
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    x, y = make_batch()
    end = time.time() + seconds
    while time.time() < end:
        step(model, opt, x, y)


if __name__ == "__main__":
    train(float(sys.argv[1]) if len(sys.argv) > 1 else 4.0)
