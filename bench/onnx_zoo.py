"""bench/run zoo: ONNX models that Loom was not tuned on, exported from
torchvision (classification, segmentation, video) by PyTorch's exporter at
opset 17, run by the documented command line as a user runs them:
`loom run` (its output against PyTorch's on the same input) and `loom
bench` (p50) against ONNX Runtime (bench/peers/ort_infer.js, all graph
optimizations, the same thread count) on the same file, Loom and ONNX
Runtime alternated twice and each side's faster run kept. One JSON line a
model and thread count:

  {"bench":"onnx_zoo","model","threads","max_rel_err","loom_ms","ort_ms",
   "vs_ort"}

max_rel_err: the largest |Loom - PyTorch| over the largest |PyTorch|.
LOOM_BENCH_MODELS=efficientnet_b0,googlenet picks some; LOOM_BENCH_THREADS=1
one thread count. Weights are torchvision's initialization under a fixed
seed (no download). A model whose export or run fails prints its error
and null figures."""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
BUILD = os.environ.get("LOOM_BUILD_DIR") or os.path.join(HERE, "..", "build")
LOOM = os.path.join(BUILD, "loom")

# name -> (constructor in torchvision.models, input shape)
MODELS = {
    "squeezenet1_0": ("squeezenet1_0", (1, 3, 224, 224)),
    "shufflenet_v2_x1_0": ("shufflenet_v2_x1_0", (1, 3, 224, 224)),
    "mnasnet1_0": ("mnasnet1_0", (1, 3, 224, 224)),
    "efficientnet_b0": ("efficientnet_b0", (1, 3, 224, 224)),
    "mobilenet_v3_small": ("mobilenet_v3_small", (1, 3, 224, 224)),
    "googlenet": ("googlenet", (1, 3, 224, 224)),
    "inception_v3": ("inception_v3", (1, 3, 299, 299)),
    "densenet121": ("densenet121", (1, 3, 224, 224)),
    "regnet_y_400mf": ("regnet_y_400mf", (1, 3, 224, 224)),
    "resnext50_32x4d": ("resnext50_32x4d", (1, 3, 224, 224)),
    "convnext_tiny": ("convnext_tiny", (1, 3, 224, 224)),
    "swin_t": ("swin_t", (1, 3, 224, 224)),
    "lraspp_mobilenet_v3_large": ("segmentation.lraspp_mobilenet_v3_large", (1, 3, 128, 128)),
    "fcn_resnet50": ("segmentation.fcn_resnet50", (1, 3, 128, 128)),
    "r3d_18": ("video.r3d_18", (1, 3, 8, 64, 64)),
}


def build_model(torch, torchvision, ctor):
    fn = torchvision.models
    for part in ctor.split("."):
        fn = getattr(fn, part)
    kw = {"weights": None}
    if ctor in ("googlenet", "inception_v3"):
        kw.update(aux_logits=False, init_weights=True)
    if ctor.startswith("segmentation."):
        kw.update(weights_backbone=None)
        if "fcn" in ctor:
            kw.update(aux_loss=False)

    class Main(torch.nn.Module):
        """The model's main output (segmentation models return a dict)."""

        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, x):
            y = self.m(x)
            return y["out"] if isinstance(y, dict) else y

    return Main(fn(**kw)).eval()


def export(name, d):
    """Writes d/model.onnx and d/x.npy; PyTorch's output, or an error."""
    import torch
    import torchvision
    torch.manual_seed(0)
    ctor, shape = MODELS[name]
    model = build_model(torch, torchvision, ctor)
    x = torch.randn(*shape)
    with torch.no_grad():
        y = model(x)
    torch.onnx.export(model, x, os.path.join(d, "model.onnx"), opset_version=17,
                      input_names=["x"], output_names=["y"])
    np.save(os.path.join(d, "x.npy"), x.numpy())
    return y.numpy()


def loom_p50(path, threads):
    p = subprocess.run([LOOM, "bench", path, "--threads", str(threads), "--runs", "100"],
                       capture_output=True, text=True, timeout=1200)
    if p.returncode != 0:
        raise RuntimeError("loom bench: " + p.stderr.strip()[-300:])
    return json.loads(p.stdout.strip().splitlines()[-1])["p50_ms"]


def ort_ms(path, shape, threads):
    js = os.path.join(HERE, "peers", "ort_infer.js")
    if not os.path.isdir(os.path.join(HERE, "node_modules", "onnxruntime-node")):
        return None
    p = subprocess.run(["node", js, path, ",".join(map(str, shape)), str(threads)],
                       capture_output=True, text=True, timeout=1200)
    if p.returncode != 0 or not p.stdout.strip():
        print("bench zoo: ONNX Runtime failed on %s: %s" % (path, p.stderr.strip()[-300:]),
              file=sys.stderr)
        return None
    return float(p.stdout.split()[1])


def one(name, threads_list):
    shape = MODELS[name][1]
    with tempfile.TemporaryDirectory(prefix="loom-zoo-") as d:
        path = os.path.join(d, "model.onnx")
        err = None
        try:
            want = export(name, d)
            p = subprocess.run([LOOM, "run", path, "--input", "x=" + os.path.join(d, "x.npy"),
                                "--output-dir", d], capture_output=True, text=True, timeout=1200)
            if p.returncode != 0:
                raise RuntimeError("loom run: " + p.stderr.strip()[-300:])
            got = np.load(os.path.join(d, "y.npy"))
            err = float(np.abs(got - want).max() / max(float(np.abs(want).max()), 1e-30))
        except Exception as e:  # noqa: BLE001: one model's failure is its line's
            print("bench zoo: %s: %s" % (name, e), file=sys.stderr)
            for t in threads_list:
                line(name, t, None, None, None)
            return
        for t in threads_list:
            mine, theirs = [], []
            for _ in range(2):
                mine.append(loom_p50(path, t))
                o = ort_ms(path, shape, t)
                if o is not None:
                    theirs.append(o)
            line(name, t, err, min(mine), min(theirs) if theirs else None)


def line(name, threads, err, loom_ms, ort):
    print(json.dumps({
        "bench": "onnx_zoo", "model": name, "threads": threads,
        "max_rel_err": None if err is None else float("%.3g" % err),
        "loom_ms": loom_ms, "ort_ms": None if ort is None else round(ort, 4),
        "vs_ort": round(ort / loom_ms, 3) if ort and loom_ms else None}), flush=True)


def main():
    names = [m for m in os.environ.get("LOOM_BENCH_MODELS", ",".join(MODELS)).split(",") if m]
    unknown = [m for m in names if m not in MODELS]
    if unknown:
        sys.exit("bench zoo: unknown models %s (known: %s)" % (unknown, ", ".join(MODELS)))
    threads = [int(t) for t in os.environ.get("LOOM_BENCH_THREADS", "1,2").split(",")]
    for name in names:
        one(name, threads)


if __name__ == "__main__":
    main()
