"""One training step of a benchmark model in PyTorch eager: forward,
cross-entropy, backward, AdamW step, zero_grad; the twin of bench/train.c,
with the same architecture, initial weights (models.load_loom_init), batch
and optimizer settings.

  torch_train.py MODEL --threads N    prints "MS PEAK_BYTES FIRST_LOSS"
  torch_train.py MODEL --threads N --serve
      prints "ready FIRST_LOSS" after the first step and two warm-up
      steps, then answers each line of stdin: "steps K" runs K steps and
      prints their median in ms; "peak" prints PEAK_BYTES; end of input
      ends it. bench/train.c alternates these blocks with its own steps.

MS is the median step after warm-up. PEAK_BYTES is the growth of the
process's resident memory during the run: the most resident memory ever
(getrusage's ru_maxrss) at the end, minus the resident memory just before
the model is built (input batch and PyTorch's libraries already there).
It counts weights, gradients, AdamW's moments, saved activations and
temporaries, and what the allocator keeps. Run it as bench/run does, with
PyTorch at its best (../shared/PEERS.md): with that malloc setting freed
memory stays resident, so the figure is the allocator's high-water mark."""
import argparse
import os
import resource
import sys
import time

import numpy as np
import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import models  # noqa: E402
from torch_infer import median_ms  # noqa: E402


def vit():
    from torchvision.models.vision_transformer import VisionTransformer
    return VisionTransformer(image_size=64, patch_size=8, num_layers=6, num_heads=3,
                             hidden_dim=192, mlp_dim=768, num_classes=10)


# name -> (constructor, input shape, classes), as bench/train.c's table.
MODELS = {
    "mlp": (models.MLP, (64, 784), 10),
    "resnet18": (models.resnet18, (8, 3, 64, 64), 1000),
    "transformer": (models.Encoder, (8, 128, 256), 10),
    "vit": (vit, (8, 3, 64, 64), 10),
}


def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def main():
    models.lock_memory()
    ap = argparse.ArgumentParser()
    ap.add_argument("model", choices=sorted(MODELS))
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--serve", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    ctor, shape, classes = MODELS[args.model]
    x = torch.from_numpy(models.init_values("input", int(np.prod(shape)), 1.0)).view(shape)
    labels = torch.arange(shape[0], dtype=torch.int64) * 7 % classes
    base = rss_bytes()
    model = models.load_loom_init(ctor()).train()
    # foreach: the multi-tensor AdamW, PyTorch's fastest CPU form here.
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.999), eps=1e-8,
                            weight_decay=0.01, foreach=True)
    loss_fn = nn.CrossEntropyLoss()
    losses = []

    def step():
        loss = loss_fn(model(x), labels)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(float(loss.detach()))

    def peak():
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - base

    step()
    if args.serve:
        serve(step, peak, losses[0])
        return
    ms = median_ms(step, min_reps=5, min_s=0.5, warmup=2)
    print(f"{ms:.6f} {peak()} {losses[0]:.9g}", flush=True)


def serve(step, peak, loss0):
    for _ in range(2):
        step()
    print(f"ready {loss0:.9g}", flush=True)
    for line in sys.stdin:
        words = line.split()
        if words[:1] == ["steps"] and len(words) == 2:
            samples = []
            for _ in range(max(1, int(words[1]))):
                t0 = time.perf_counter()
                step()
                samples.append((time.perf_counter() - t0) * 1e3)
            print(f"{float(np.median(samples)):.6f}", flush=True)
        elif words == ["peak"]:
            print(peak(), flush=True)
        else:
            print("error", flush=True)


if __name__ == "__main__":
    main()
