"""ResNet-18 (torchvision's layout, examples/python/static_models.py)
trained on procedurally generated 32x32 images of four classes, written
as a PyTorch training loop; Loom traces each step and replays it compiled.

    .venv/bin/python examples/python/resnet.py [--steps N] [--vit]
"""
import argparse
import time

import numpy as np

import images
import loom
import loom.nn.functional as F
import static_models


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--vit", action="store_true", help="a small ViT instead of ResNet-18")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    loom.manual_seed(0)
    classes = len(images.CLASSES)
    if args.vit:
        model = static_models.vit(loom, image=32, patch=4, layers=4, heads=4, dim=64,
                                  mlp_dim=128, classes=classes)
        opt = loom.optim.AdamW(model.parameters(), lr=1e-3)
    else:
        model = static_models.resnet18(loom, classes=classes)
        opt = loom.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)
    model.train()
    start = time.perf_counter()
    for step in range(args.steps):
        x, y = images.batch(rng, args.batch)
        opt.zero_grad()
        loss = F.cross_entropy(model(loom.from_numpy(x)), loom.from_numpy(y))
        loss.backward()
        opt.step()
        if step % 10 == 0 or step == args.steps - 1:
            print(f"step {step:3d}  loss {loss.item():.4f}")
    elapsed = time.perf_counter() - start
    model.eval()
    x, y = images.batch(rng, 64)
    with loom.no_grad():
        accuracy = (model(loom.from_numpy(x)).argmax(1).numpy() == y).mean()
    s = loom.stats()
    print(f"{args.steps * args.batch / elapsed:.1f} images/s; accuracy on new images "
          f"{accuracy:.2f}; segments {s['segments']}, hits {s['hits']}, "
          f"compiles {s['compiles']}")


if __name__ == "__main__":
    main()
