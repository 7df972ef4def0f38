"""PyTorch twins of Loom's example models (examples/models), loaded with the
very same initial weights (model_init_value's hash), so that Loom's logits
can be compared with PyTorch's as well as timed against them."""
import ctypes
import math
import os
import sys

import numpy as np
import torch
from torch import nn


def lock_memory():
    """mlockall(MCL_CURRENT | MCL_FUTURE), as Loom's side of the bench does
    (bench_lock_memory in bench/bench_util.h): the pages of a side left idle
    while the other runs are otherwise taken away and faulted back in its
    next timed block. Failing that, a note on stderr."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.mlockall(3) != 0:
        print(f"peer: memory not locked ({os.strerror(ctypes.get_errno())})", file=sys.stderr)


def fnv1a(name):
    h = 2166136261
    for b in name.encode():
        h = ((h ^ b) * 16777619) & 0xFFFFFFFF
    return h


def init_values(name, n, bound):
    """model_init_value(name, i, bound) for i in 0..n-1, as float32."""
    i = np.arange(n, dtype=np.uint64).astype(np.uint32)
    seed = np.uint32((fnv1a(name) * 0x9E3779B9) & 0xFFFFFFFF)
    with np.errstate(over="ignore"):
        h = (i * np.uint32(2654435761)) ^ seed
        h ^= h >> np.uint32(15)
        h *= np.uint32(0x2C1B3C6D)
        h ^= h >> np.uint32(12)
    u = (h & np.uint32(0xFFFFFF)).astype(np.float64) / 8388608.0 - 1.0
    return (bound * u).astype(np.float32)


def load_loom_init(model):
    """Weights (rank >= 2) get bound sqrt(6 / fan_in), their biases
    1 / sqrt(fan_in); norms keep PyTorch's defaults, as in Loom."""
    params = dict(model.named_parameters())
    with torch.no_grad():
        for name, p in params.items():
            if p.dim() >= 2:
                weight = p
            elif name.endswith("bias") and params.get(name[:-4] + "weight") is not None \
                    and params[name[:-4] + "weight"].dim() >= 2:
                weight = params[name[:-4] + "weight"]
            else:
                continue
            fan_in = weight[0].numel()
            bound = math.sqrt(6.0 / fan_in) if p is weight else 1.0 / math.sqrt(fan_in)
            p.copy_(torch.from_numpy(init_values(name, p.numel(), bound)).view(p.shape))
    return model


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2, self.fc3 = nn.Linear(784, 512), nn.Linear(512, 512), nn.Linear(512, 10)

    def forward(self, x):
        return self.fc3(torch.relu(self.fc2(torch.relu(self.fc1(x)))))


class LeNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 6, 5, padding=2)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.fc1, self.fc2, self.fc3 = nn.Linear(400, 120), nn.Linear(120, 84), nn.Linear(84, 10)

    def forward(self, x):
        x = torch.max_pool2d(torch.relu(self.conv1(x)), 2)
        x = torch.max_pool2d(torch.relu(self.conv2(x)), 2)
        x = torch.flatten(x, 1)
        return self.fc3(torch.relu(self.fc2(torch.relu(self.fc1(x)))))


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        layer = nn.TransformerEncoderLayer(256, 4, 1024, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 4, enable_nested_tensor=False)
        self.head = nn.Linear(256, 10)

    def forward(self, x):
        return self.head(self.encoder(x).mean(dim=1))


def resnet18():
    import torchvision
    return torchvision.models.resnet18(weights=None)


# name -> (constructor, input shape), as bench/bench_util.c's table.
MODELS = {
    "mlp": (MLP, (64, 784)),
    "lenet": (LeNet, (64, 1, 28, 28)),
    "transformer": (Encoder, (1, 128, 256)),
    "resnet18": (resnet18, (1, 3, 224, 224)),
}


def build(name):
    ctor, shape = MODELS[name]
    model = load_loom_init(ctor()).eval()
    x = torch.from_numpy(init_values("input", int(np.prod(shape)), 1.0)).view(shape)
    return model, x
