"""Data parallelism from Python: run alone and under `mpirun -np 2` by
test_distributed.py (MPI starts once a process, so not inside pytest's).
Each rank trains an MLP, whose branch follows the sign of its own share of
the batch, on that share; the parameters must be those of PyTorch training
the same MLP on the whole batch from rank 0's initial weights. The same
through a loom.compile'd training step; then the collectives. Prints
"distributed_ranks: rank R of N: ok" per rank, or fails."""
import sys

import numpy as np
import torch

import loom
import loom.distributed as dist
import loom.nn as nn
import loom.nn.functional as F

B, DIN, HID, DOUT, STEPS = 8, 6, 16, 3, 4


def batch():
    rng = np.random.default_rng(7)
    x = rng.standard_normal((B, DIN)).astype(np.float32)
    x[B // 2:] = -np.abs(x[B // 2:])  # the second half's rows sum below zero
    x[:B // 2] = np.abs(x[:B // 2])
    return x, rng.standard_normal((B, DOUT)).astype(np.float32)


class Net(nn.Module):
    def __init__(self, branch):
        super().__init__()
        self.a, self.b, self.c = nn.Linear(DIN, HID), nn.Linear(HID, DOUT), nn.Linear(HID, DOUT)
        self.branch = branch

    def forward(self, x):
        h = self.a(x).tanh()
        if self.branch and not x.sum() > 0:  # each rank its own path
            return self.c(h)
        return self.b(h)


class TorchNet(torch.nn.Module):
    def __init__(self, weights, branch):
        super().__init__()
        self.branch = branch
        self.a, self.b, self.c = (torch.nn.Linear(DIN, HID), torch.nn.Linear(HID, DOUT),
                                  torch.nn.Linear(HID, DOUT))
        with torch.no_grad():
            for p, w in zip(self.parameters(), weights):
                p.copy_(torch.from_numpy(w))

    def forward(self, x):
        h = self.a(x).tanh()
        if self.branch and not x.sum() > 0:
            return self.c(h)
        return self.b(h)


def torch_reference(weights, x, y, size, branch):
    """The mean over ranks of each share's loss, on one process."""
    net = TorchNet(weights, branch)
    opt = torch.optim.Adam(net.parameters(), lr=0.05)
    rows = B // size
    for _ in range(STEPS):
        opt.zero_grad()
        loss = sum(F_t(net(torch.from_numpy(x[r * rows:(r + 1) * rows])),
                       torch.from_numpy(y[r * rows:(r + 1) * rows])) for r in range(size)) / size
        loss.backward()
        opt.step()
    return [p.detach().numpy() for p in net.parameters()]


def F_t(a, b):
    return torch.nn.functional.mse_loss(a, b)


def train(compiled, rank, size, clip=False):
    """Traced, each rank on its own branch; or one captured executable a
    rank (no branch: loom.compile(fullgraph=True) fails on a graph break).
    clip: .grad clipped (by a norm it never reaches) before the step, which
    then works from .grad, each parameter's gradient given by one rank's
    branch only."""
    loom.manual_seed(100 + rank)  # each rank's own weights, which DDP replaces with rank 0's
    model = dist.DistributedDataParallel(Net(branch=not compiled))
    weights = [p.detach().numpy().copy() for p in model.parameters()]
    opt = loom.optim.Adam(model.parameters(), lr=0.05)
    x, y = batch()
    rows = B // size
    xs = loom.from_numpy(x[rank * rows:(rank + 1) * rows].copy())
    ys = loom.from_numpy(y[rank * rows:(rank + 1) * rows].copy())

    def step(xb, yb):
        opt.zero_grad()
        loss = F.mse_loss(model(xb), yb)
        loss.backward()
        if clip:
            nn.utils.clip_grad_norm_(model.parameters(), 1e6)
        opt.step()
        return loss

    run = loom.compile(step, fullgraph=True) if compiled else step
    for _ in range(STEPS):
        run(xs, ys)
    loom.step()
    want = torch_reference(weights, x, y, size, not compiled)
    for got, w in zip(model.parameters(), want):
        np.testing.assert_allclose(got.detach().numpy(), w, rtol=1e-4, atol=1e-5)
    return weights


def main():
    try:
        dist.init_process_group()
    except NotImplementedError as e:  # Loom built without MPI
        print(f"distributed_ranks: skipped: {e}")
        return
    rank, size = dist.get_rank(), dist.get_world_size()
    if B % size:
        sys.exit(f"distributed_ranks: {size} ranks do not divide a batch of {B}")
    weights = train(False, rank, size)
    # DDP started every rank from rank 0's weights
    for w in weights:
        theirs = loom.from_numpy(w.copy())
        dist.broadcast(theirs, 0)
        np.testing.assert_array_equal(theirs.numpy(), w)
    # the same with a captured step: the exchange inside the executable
    train(True, rank, size)
    # the update from .grad (changed by the program): averaged there
    train(False, rank, size, clip=True)
    t = loom.tensor([float(rank + 1), -float(rank)])
    dist.all_reduce(t)
    np.testing.assert_allclose(t.numpy(), [size * (size + 1) / 2, -size * (size - 1) / 2])
    t = loom.tensor([float(rank)])
    dist.all_reduce(t, dist.ReduceOp.MAX)
    assert t.numpy()[0] == size - 1
    t = loom.tensor([float(rank)] * 3)
    dist.broadcast(t, size - 1)
    assert (t.numpy() == size - 1).all()
    dist.barrier()
    print(f"distributed_ranks: rank {rank} of {size}: ok", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
