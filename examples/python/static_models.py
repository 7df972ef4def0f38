"""Static models written once for loom.nn and torch.nn (pass the module,
`lib`): the MLP 784-512-512-10 and ResNet-18 with torchvision's parameter
names, so that a state dict moves between the two. Used by
bench/python.py (python_train) and the tests."""


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


MODELS = {"mlp": (mlp, (64, 784), 10), "resnet18": (resnet18, (8, 3, 64, 64), 1000)}
