"""loom.utils.data against torch.utils.data: the batches of a DataLoader in
order (the same items, collated the same way), shuffling (a permutation
per epoch, reproducible by seed), samplers, splits and iterable
datasets; and a training loop over a DataLoader against PyTorch's."""
import collections

import numpy as np
import pytest

import loom
from loom.utils import data

torch = pytest.importorskip("torch")
tdata = torch.utils.data


def same(a, b):
    """Loom's collated batch a has b's structure, values and dtype names."""
    if isinstance(b, torch.Tensor):
        assert isinstance(a, loom.Tensor) and a.shape == tuple(b.shape)
        assert a.dtype.name == str(b.dtype).split(".")[1]
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    elif isinstance(b, dict):
        assert list(a) == list(b)
        for k in b:
            same(a[k], b[k])
    elif isinstance(b, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b)
        for x, y in zip(a, b):
            same(x, y)
    else:
        assert a == b


class Items(data.Dataset):
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        rng = np.random.default_rng(i)
        return {"x": rng.standard_normal(3).astype(np.float32), "label": i % 3,
                "weight": float(i) / 2, "name": f"item{i}",
                "pair": (np.int64(i), np.arange(2) + i)}


class TorchItems(tdata.Dataset):
    def __init__(self, n):
        self.items = Items(n)

    def __len__(self):
        return self.items.n

    def __getitem__(self, i):
        return self.items[i]


@pytest.mark.parametrize("batch_size,drop_last", [(4, False), (4, True), (1, False), (10, False)])
def test_batches_in_order_collate_as_pytorch(batch_size, drop_last):
    mine = list(data.DataLoader(Items(10), batch_size=batch_size, drop_last=drop_last))
    theirs = list(tdata.DataLoader(TorchItems(10), batch_size=batch_size, drop_last=drop_last))
    assert len(mine) == len(theirs) == len(data.DataLoader(Items(10), batch_size=batch_size,
                                                           drop_last=drop_last))
    for a, b in zip(mine, theirs):
        same(a, b)


def test_tensor_dataset_and_named_tuples():
    Point = collections.namedtuple("Point", "x y")
    x, y = np.arange(12, dtype=np.float32).reshape(6, 2), np.arange(6)
    mine = list(data.DataLoader(data.TensorDataset(loom.tensor(x), loom.tensor(y)), 4))
    theirs = list(tdata.DataLoader(tdata.TensorDataset(torch.tensor(x), torch.tensor(y)), 4))
    for a, b in zip(mine, theirs):
        same(list(a), list(b))
    batch = data.default_collate([Point(1, 2.0), Point(3, 4.0)])
    assert type(batch) is Point and batch.x.tolist() == [1, 3] and batch.y.dtype == loom.float64
    same(data.default_convert({"a": np.ones(2)}),
         tdata.default_convert({"a": np.ones(2)}))
    with pytest.raises(ValueError, match="Size mismatch"):
        data.TensorDataset(loom.zeros(3), loom.zeros(4))


def test_shuffle_is_a_permutation_per_epoch_reproducible_by_seed():
    ds = data.TensorDataset(loom.arange(20))

    def epochs(seed):
        loader = data.DataLoader(ds, batch_size=6, shuffle=True,
                                 generator=loom.Generator().manual_seed(seed))
        return [[int(v) for batch in loader for v in batch[0].tolist()] for _ in range(2)]

    first, second = epochs(1)
    assert sorted(first) == list(range(20)) and sorted(second) == list(range(20))
    assert first != second and first != list(range(20))
    assert epochs(1) == [first, second] and epochs(2) != [first, second]
    loom.manual_seed(5)
    a = [b[0].tolist() for b in data.DataLoader(ds, batch_size=20, shuffle=True)]
    loom.manual_seed(5)
    assert a == [b[0].tolist() for b in data.DataLoader(ds, batch_size=20, shuffle=True)]


def test_splits_subsets_concatenation_and_samplers():
    parts = data.random_split(range(10), [0.5, 0.3, 0.2],
                              generator=loom.Generator().manual_seed(0))
    assert [len(p) for p in parts] == [len(p) for p in tdata.random_split(range(10),
                                                                          [0.5, 0.3, 0.2])]
    assert sorted(i for p in parts for i in p) == list(range(10))
    with pytest.raises(ValueError, match="Sum of input lengths"):
        data.random_split(range(10), [3, 3])
    both = data.ConcatDataset([data.Subset(range(10), [7, 8]), range(3)])
    assert [both[i] for i in range(len(both))] == [7, 8, 0, 1, 2] and both[-1] == 2
    sampler = data.SubsetRandomSampler([3, 5, 7])
    assert sorted(sampler) == [3, 5, 7]
    batches = list(data.BatchSampler(data.SequentialSampler(range(7)), 3, False))
    assert batches == [[0, 1, 2], [3, 4, 5], [6]]
    weighted = list(data.WeightedRandomSampler([0.1, 0.0, 0.9], 4000,
                                               generator=loom.Generator().manual_seed(3)))
    counts = np.bincount(weighted, minlength=3) / 4000
    assert counts[1] == 0 and abs(counts[2] - 0.9) < 0.03
    drawn = list(data.RandomSampler(range(5), replacement=True, num_samples=12))
    assert len(drawn) == 12 and set(drawn) <= set(range(5))
    with pytest.raises(ValueError, match="mutually exclusive"):
        data.DataLoader(range(5), sampler=sampler, shuffle=True)
    with pytest.raises(ValueError, match="batch_size should be a positive integer"):
        data.DataLoader(range(5), batch_size=0)


class Stream(data.IterableDataset):
    def __iter__(self):
        return iter(np.arange(7, dtype=np.float32).reshape(7, 1))


def test_iterable_dataset():
    batches = [b.tolist() for b in data.DataLoader(Stream(), batch_size=3)]
    assert batches == [[[0.0], [1.0], [2.0]], [[3.0], [4.0], [5.0]], [[6.0]]]
    with pytest.raises(ValueError, match="IterableDataset"):
        data.DataLoader(Stream(), shuffle=True)


def test_a_training_loop_over_a_data_loader_matches_pytorch():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((40, 5)).astype(np.float32)
    y = rng.integers(0, 3, 40)
    torch.manual_seed(0)
    tm = torch.nn.Linear(5, 3)
    lm = loom.nn.Linear(5, 3)
    lm.load_state_dict({k: v.detach().numpy() for k, v in tm.state_dict().items()})
    topt = torch.optim.SGD(tm.parameters(), lr=0.1)
    lopt = loom.optim.SGD(lm.parameters(), lr=0.1)
    tl = tdata.DataLoader(tdata.TensorDataset(torch.tensor(x), torch.tensor(y)), batch_size=8)
    ll = data.DataLoader(data.TensorDataset(loom.tensor(x), loom.tensor(y)), batch_size=8)
    for epoch in range(2):
        for (tx, ty), (mx, my) in zip(tl, ll):
            topt.zero_grad()
            tloss = torch.nn.functional.cross_entropy(tm(tx), ty)
            tloss.backward()
            topt.step()
            lopt.zero_grad()
            loss = loom.nn.functional.cross_entropy(lm(mx), my)
            loss.backward()
            lopt.step()
            assert abs(float(loss) - float(tloss)) < 1e-5
