"""The training step of bench/peers/torch_train.py under PyTorch's
DistributedDataParallel (gloo, Debian's python3-torch): RANKS processes on
this machine, one thread each, each on its own batch of the model's size;
the twin of `mpirun -np RANKS build/bench_dist step MODEL --data-parallel`.

  torch_ddp.py MODEL [--ranks N] [--threads T]
      prints "MS ITEMS_PER_S": the median step over blocks of steps after
      warm-up (every rank at a barrier around each block), and
      batch x ranks / step."""
import argparse
import os
import socket
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import models  # noqa: E402
from torch_train import MODELS  # noqa: E402

WARMUP, ROUNDS, BLOCK_S, REPS = 5, 7, 0.3, 30


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker(rank, ranks, port, name, threads, out):
    torch.set_num_threads(threads)
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % port,
                            rank=rank, world_size=ranks)
    ctor, shape, classes = MODELS[name]
    x = torch.from_numpy(models.init_values("input", int(np.prod(shape)), 1.0)).view(shape)
    labels = torch.arange(shape[0], dtype=torch.int64) * 7 % classes
    model = nn.parallel.DistributedDataParallel(models.load_loom_init(ctor()).train())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.999), eps=1e-8,
                            weight_decay=0.01, foreach=True)
    loss_fn = nn.CrossEntropyLoss()

    def step():
        loss = loss_fn(model(x), labels)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(WARMUP):
        step()
    dist.barrier()
    t0 = time.perf_counter()
    step()
    once = time.perf_counter() - t0
    reps = torch.tensor([min(REPS, int(BLOCK_S / max(once, 1e-9)) + 1)])
    dist.broadcast(reps, 0)
    samples = []
    for _ in range(ROUNDS):
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(int(reps)):
            step()
        dist.barrier()
        samples.append((time.perf_counter() - t0) / int(reps))
    if rank == 0:
        ms = float(np.median(samples)) * 1e3
        out.put("%.6f %.6f" % (ms, shape[0] * ranks / ms * 1e3))
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model", choices=sorted(MODELS))
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    ctx = mp.get_context("spawn")
    out = ctx.SimpleQueue()
    mp.start_processes(worker, args=(args.ranks, free_port(), args.model, args.threads, out),
                       nprocs=args.ranks, join=True, start_method="spawn")
    print(out.get(), flush=True)


if __name__ == "__main__":
    main()
