"""Times a model in PyTorch eager and TorchScript (trace + freeze +
optimize_for_inference), or exports it to ONNX for ONNX Runtime.

  torch_infer.py MODEL --threads 1,2     prints "THREADS EAGER_MS TS_MS" lines
  torch_infer.py MODEL --export PATH     writes the ONNX model (opset 17)
  torch_infer.py MODEL --logits PATH     writes the logits as .npy (f32)
  torch_infer.py MODEL --threads N --serve
      prints "ready" after warm-up, then answers each stdin line "eager K"
      or "script K" with the median ms of K runs (bench/infer.c
      alternates these with its own runs)

Run it as bench/run does, with PyTorch at its best (../shared/PEERS.md)."""
import argparse
import os
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import models  # noqa: E402


def median_ms(fn, min_reps=10, min_s=1.0, warmup=3):
    for _ in range(warmup):
        fn()
    samples, start = [], time.perf_counter()
    while len(samples) < min_reps or time.perf_counter() - start < min_s:
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1e3)
    return float(np.median(samples))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model", choices=sorted(models.MODELS))
    ap.add_argument("--threads", default="")
    ap.add_argument("--export", default="")
    ap.add_argument("--logits", default="")
    ap.add_argument("--serve", action="store_true",
                    help="with --threads N: serve timed runs on stdin (see serve)")
    args = ap.parse_args()
    model, x = models.build(args.model)
    if args.export:
        # With gradients on, so that nn.TransformerEncoder takes its slow
        # path, whose ops ONNX knows (its fused fast path has no export).
        try:
            torch.onnx.export(model, (x,), args.export, opset_version=17,
                              input_names=["x"], output_names=["logits"])
        except Exception as e:  # the timings below still count
            print(f"torch_infer: ONNX export failed: {e}", file=sys.stderr)
    with torch.no_grad():
        if args.logits:
            np.save(args.logits, model(x).numpy().astype(np.float32))
        if args.threads:
            script = torch.jit.optimize_for_inference(torch.jit.freeze(torch.jit.trace(model, (x,))))
            if args.serve:
                torch.set_num_threads(int(args.threads))
                serve({"eager": lambda: model(x), "script": lambda: script(x)})
                return
            for t in [int(n) for n in args.threads.split(",")]:
                torch.set_num_threads(t)
                eager = median_ms(lambda: model(x))
                ts = median_ms(lambda: script(x))
                print(f"{t} {eager:.6f} {ts:.6f}", flush=True)


def serve(runs):
    """After 3 warm-up runs of each, answers stdin lines "NAME K" (NAME in
    runs) with the median ms of K runs; end of input ends it."""
    for fn in runs.values():
        for _ in range(3):
            fn()
    print("ready", flush=True)
    for line in sys.stdin:
        words = line.split()
        if len(words) != 2 or words[0] not in runs:
            print("error", flush=True)
            continue
        samples = []
        for _ in range(max(1, int(words[1]))):
            t0 = time.perf_counter()
            runs[words[0]]()
            samples.append((time.perf_counter() - t0) * 1e3)
        print(f"{float(np.median(samples)):.6f}", flush=True)

if __name__ == "__main__":
    main()
