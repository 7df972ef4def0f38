"""A PyTorch-style training loop run by Loom: an MLP classifying points of
two interleaved spirals. Nothing here asks for compilation: the forward,
backward and optimizer of each step are traced, and Loom compiles each of
their segments once and replays them.

    scripts/install_python.sh && .venv/bin/python examples/python/mlp.py [--steps N]

With --data-parallel, under `mpirun -np N`, every rank trains on its own
share of each batch and the gradients are averaged across the ranks
(loom.distributed.DistributedDataParallel); rank 0 prints.
"""
import argparse
import math
import time

import numpy as np

import loom
import loom.distributed as dist
import loom.nn as nn
import loom.nn.functional as F


def spirals(n, rng):
    t = rng.uniform(0.5, 3 * math.pi, n)
    label = rng.integers(0, 2, n)
    r = t / (3 * math.pi)
    angle = t + math.pi * label
    x = np.stack([r * np.cos(angle), r * np.sin(angle)], 1) + rng.normal(0, 0.02, (n, 2))
    return x.astype(np.float32), label.astype(np.int64)


class MLP(nn.Module):
    def __init__(self, hidden=64):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(2, hidden), nn.Tanh(), nn.Linear(hidden, hidden),
                                 nn.Tanh(), nn.Linear(hidden, 2))

    def forward(self, x):
        return self.net(x)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--data-parallel", action="store_true")
    args = ap.parse_args()
    rank, ranks = 0, 1
    if args.data_parallel:
        dist.init_process_group()
        rank, ranks = dist.get_rank(), dist.get_world_size()
    rng = np.random.default_rng(0)
    loom.manual_seed(0)
    model = MLP()
    if args.data_parallel:
        model = dist.DistributedDataParallel(model)
    opt = loom.optim.Adam(model.parameters(), lr=1e-2)
    share = args.batch // ranks
    x_all, y_all = spirals(args.steps * args.batch, rng)
    start = time.perf_counter()
    for step in range(args.steps):
        at = step * args.batch + rank * share
        sl = slice(at, at + share)
        x, y = loom.from_numpy(x_all[sl]), loom.from_numpy(y_all[sl])
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        if (step % 100 == 0 or step == args.steps - 1) and rank == 0:
            print(f"step {step:4d}  loss {loss.item():.4f}")
    elapsed = time.perf_counter() - start
    x, y = spirals(2000, rng)
    with loom.no_grad():
        accuracy = (model(loom.from_numpy(x)).argmax(1).numpy() == y).mean()
    s = loom.stats()
    if rank == 0:
        print(f"{args.steps / elapsed:.0f} steps/s ({ranks} rank{'s' if ranks > 1 else ''}); "
              f"test accuracy {accuracy:.3f}; segments {s['segments']}, cache hits "
              f"{s['hits']}, compiles {s['compiles']}")
    if args.data_parallel:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
