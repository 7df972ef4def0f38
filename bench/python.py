"""Loom driven from Python against PyTorch eager on the same programs
(issue 19's benchmarks). One JSON object per line:

  python_overhead: 200 small elementwise ops on a (16,) tensor, written as
    plain Python, the result read at the end (Loom records them lazily and
    replays the segment, compiled once); ns per op, each side's best round.

Run by bench/run python, which points PYTHONPATH at the build's package.
"""
import json
import sys
import time

import numpy as np

import loom

try:
    import torch
    torch.set_num_threads(1)
except ImportError:
    torch = None

OPS = 200
ROUNDS = 9


def program(x, a, b, c):
    for _ in range(OPS // 4):
        x = ((x * a + b).tanh() - c)
    return x


def time_loom(reps):
    rng = np.random.default_rng(0)
    x, a, b, c = (loom.from_numpy(rng.standard_normal(16).astype(np.float32))
                  for _ in range(4))
    for _ in range(3):  # record, compile, settle
        program(x, a, b, c).numpy()
    deadline = time.perf_counter() + 5.0  # the compile runs in the background
    while loom.stats()["compiles"] == 0 and time.perf_counter() < deadline:
        program(x, a, b, c).numpy()
    best = float("inf")
    for _ in range(ROUNDS):
        t0 = time.perf_counter()
        for _ in range(reps):
            y = program(x, a, b, c).numpy()
        best = min(best, (time.perf_counter() - t0) / (reps * OPS))
    return best, y


def time_torch(reps):
    rng = np.random.default_rng(0)
    x, a, b, c = (torch.from_numpy(rng.standard_normal(16).astype(np.float32))
                  for _ in range(4))
    best = float("inf")
    with torch.no_grad():
        for _ in range(ROUNDS):
            t0 = time.perf_counter()
            for _ in range(reps):
                y = program(x, a, b, c).numpy()
            best = min(best, (time.perf_counter() - t0) / (reps * OPS))
    return best, y


def line(**kw):
    print(json.dumps(kw), flush=True)


def overhead():
    mine, y = time_loom(50)
    theirs, ty = time_torch(50) if torch else (float("nan"), None)
    if ty is not None and not np.allclose(y, ty, rtol=1e-4, atol=1e-5):
        print("bench python: Loom and PyTorch disagree on the overhead program",
              file=sys.stderr)
    line(bench="python_overhead", ops=OPS, loom_ns_per_op=round(mine * 1e9, 1),
         torch_ns_per_op=round(theirs * 1e9, 1), vs_torch_eager=round(theirs / mine, 3),
         compiles=loom.stats()["compiles"])


if __name__ == "__main__":
    overhead()
