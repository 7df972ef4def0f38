"""Exports the models of `bench/run onnx` from PyTorch to ONNX, with an input
and PyTorch's output on it, for Loom and ONNX Runtime to run the same file.

  onnx_export.py MODEL DIR     writes DIR/model.onnx (opset 17, one input
                               "x", one output "y"), DIR/x.npy and DIR/y.npy

The models: ResNet-18 and MobileNetV2 (torchvision, 1x3x224x224), the ViT
and the Transformer encoder of the training benchmark (bench/peers/
torch_train.py, at its batch of 8), the MLP (64x784) and a 2-layer LSTM
(sequence 50, batch 8, 256 features and hidden units, sequence first);
resnet18_dynamic is ResNet-18 exported with a symbolic batch (dynamic_axes,
as most exported models have it), run at batch 1; lstm_dynamic the LSTM
with symbolic sequence and batch (a loop over its steps in Loom), run at
sequence 50, batch 8.
Weights are PyTorch's initialization under a fixed seed; the input is
models.init_values's, as the other benchmarks'."""
import argparse
import os
import sys

import numpy as np
import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import models  # noqa: E402
import torch_train  # noqa: E402


class LSTM(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(256, 256, num_layers=2)

    def forward(self, x):
        return self.lstm(x)[0]


def mobilenet_v2():
    import torchvision
    return torchvision.models.mobilenet_v2(weights=None)


# name -> (constructor, input shape)
MODELS = {
    "resnet18": (models.resnet18, (1, 3, 224, 224)),
    "mobilenet_v2": (mobilenet_v2, (1, 3, 224, 224)),
    "vit": (torch_train.vit, (8, 3, 64, 64)),
    "transformer": (models.Encoder, (8, 128, 256)),
    "mlp": (models.MLP, (64, 784)),
    "lstm": (LSTM, (50, 8, 256)),
    "resnet18_dynamic": (models.resnet18, (1, 3, 224, 224)),
    "lstm_dynamic": (LSTM, (50, 8, 256)),
}
# The symbolic dims of the _dynamic models' input and output.
DYNAMIC = {"resnet18_dynamic": {0: "batch"}, "lstm_dynamic": {0: "seq", 1: "batch"}}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model", choices=sorted(MODELS))
    ap.add_argument("dir")
    args = ap.parse_args()
    torch.manual_seed(0)
    ctor, shape = MODELS[args.model]
    model = ctor().eval()
    # torchvision's ViT starts its head at zero: random weights there, so
    # that the outputs compared are not all zeros.
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() > 1 and not p.any():
                nn.init.normal_(p, std=0.02)
    x = torch.from_numpy(models.init_values("input", int(np.prod(shape)), 1.0)).view(shape)
    # Gradients stay on during the export so that nn.TransformerEncoder
    # takes its slow path, whose ops ONNX knows.
    axes = DYNAMIC.get(args.model)
    dynamic = {"x": axes, "y": axes} if axes else None
    torch.onnx.export(model, (x,), os.path.join(args.dir, "model.onnx"), opset_version=17,
                      input_names=["x"], output_names=["y"], dynamic_axes=dynamic)
    with torch.no_grad():
        y = model(x)
    np.save(os.path.join(args.dir, "x.npy"), x.numpy().astype(np.float32))
    np.save(os.path.join(args.dir, "y.npy"), y.numpy().astype(np.float32))


if __name__ == "__main__":
    main()
