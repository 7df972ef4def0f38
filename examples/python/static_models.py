"""Static models written once for loom.nn and torch.nn (pass the module,
`lib`): the MLP 784-512-512-10, ResNet-18 and a ViT with torchvision's
parameter names, and the Transformer encoder of bench/run train, so that a
state dict moves between the two. Used by bench/python.py (python_train),
the examples and the tests."""
from collections import OrderedDict


def mlp(lib):
    nn = lib.nn

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1, self.fc2, self.fc3 = nn.Linear(784, 512), nn.Linear(512, 512), \
                nn.Linear(512, 10)

        def forward(self, x):
            return self.fc3(self.fc2(self.fc1(x).relu()).relu())

    return MLP()


def resnet18(lib, classes=1000):
    nn = lib.nn

    class BasicBlock(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.relu = nn.ReLU()
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.downsample = None
            if stride != 1 or cin != cout:
                self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                                nn.BatchNorm2d(cout))

        def forward(self, x):
            y = self.bn2(self.conv2(self.bn1(self.conv1(x)).relu()))
            return (y + (self.downsample(x) if self.downsample is not None else x)).relu()

    class ResNet18(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
            self.bn1 = nn.BatchNorm2d(64)
            self.relu = nn.ReLU()
            self.maxpool = nn.MaxPool2d(3, 2, 1)
            widths = [64, 128, 256, 512]
            cin = 64
            for i, w in enumerate(widths):
                stride = 1 if i == 0 else 2
                setattr(self, f"layer{i + 1}", nn.Sequential(BasicBlock(cin, w, stride),
                                                             BasicBlock(w, w, 1)))
                cin = w
            self.avgpool = nn.AdaptiveAvgPool2d(1)
            self.fc = nn.Linear(512, classes)

        def forward(self, x):
            x = self.maxpool(self.bn1(self.conv1(x)).relu())
            for i in range(4):
                x = getattr(self, f"layer{i + 1}")(x)
            return self.fc(self.avgpool(x).flatten(1))

    return ResNet18()


def transformer(lib, classes=10):
    """4 post-norm encoder layers (d 256, 4 heads, feed-forward 1024), the
    mean over positions, a linear head: bench/run train's Transformer."""
    nn = lib.nn

    class Encoder(nn.Module):
        def __init__(self):
            super().__init__()
            layer = nn.TransformerEncoderLayer(256, 4, 1024, dropout=0.0, batch_first=True)
            self.encoder = nn.TransformerEncoder(layer, 4)
            self.head = nn.Linear(256, classes)

        def forward(self, x):
            return self.head(self.encoder(x).mean(1))

    return Encoder()


def vit(lib, image=64, patch=8, layers=6, heads=3, dim=192, mlp_dim=768, classes=10):
    """torchvision's VisionTransformer (its parameter names): patches by a
    strided convolution, a class token, learned positions, pre-norm
    encoder layers (LayerNorm eps 1e-6, GELU), the class token's head."""
    nn = lib.nn
    seq = (image // patch) ** 2 + 1

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1 = nn.LayerNorm(dim, eps=1e-6)
            self.self_attention = nn.MultiheadAttention(dim, heads, batch_first=True)
            self.ln_2 = nn.LayerNorm(dim, eps=1e-6)
            self.mlp = nn.Sequential(nn.Linear(dim, mlp_dim), nn.GELU(), nn.Dropout(0.0),
                                     nn.Linear(mlp_dim, dim), nn.Dropout(0.0))

        def forward(self, x):
            y = self.ln_1(x)
            x = x + self.self_attention(y, y, y, need_weights=False)[0]
            return x + self.mlp(self.ln_2(x))

    class Encoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.pos_embedding = nn.Parameter(lib.randn(1, seq, dim) * 0.02)
            self.layers = nn.Sequential(OrderedDict(
                (f"encoder_layer_{i}", Block()) for i in range(layers)))
            self.ln = nn.LayerNorm(dim, eps=1e-6)

        def forward(self, x):
            return self.ln(self.layers(x + self.pos_embedding))

    class ViT(nn.Module):
        def __init__(self):
            super().__init__()
            self.class_token = nn.Parameter(lib.zeros(1, 1, dim))
            self.conv_proj = nn.Conv2d(3, dim, patch, patch)
            self.encoder = Encoder()
            self.heads = nn.Sequential()
            self.heads.add_module("head", nn.Linear(dim, classes))

        def forward(self, x):
            n = x.shape[0]
            x = self.conv_proj(x).flatten(2).transpose(1, 2)
            x = lib.cat([self.class_token.expand(n, -1, -1), x], 1)
            return self.heads(self.encoder(x)[:, 0])

    return ViT()


MODELS = {"mlp": (mlp, (64, 784), 10), "resnet18": (resnet18, (8, 3, 64, 64), 1000),
          "transformer": (transformer, (8, 128, 256), 10), "vit": (vit, (8, 3, 64, 64), 10)}
