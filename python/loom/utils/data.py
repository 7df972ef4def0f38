"""torch.utils.data's datasets, samplers and DataLoader, in the same names
and order of draws: a DataLoader batches a dataset's items (indices from
a sampler, shuffled by loom's generator or a loom.Generator) and collates
them into loom tensors. It loads in the calling thread: num_workers,
pin_memory and the rest of PyTorch's worker options are taken and change
nothing but their checks."""
import bisect
import collections.abc
import math
import numbers

import numpy as np


def _generator(generator):
    from .. import _generator_now
    return generator if generator is not None else _generator_now()


# ---- datasets ----

class Dataset:
    """A map-style dataset: __getitem__(i) and __len__."""

    def __getitem__(self, index):
        raise NotImplementedError("Dataset subclasses define __getitem__")

    def __add__(self, other):
        return ConcatDataset([self, other])


class IterableDataset(Dataset):
    """A dataset read by iterating it (__iter__), without indices."""

    def __iter__(self):
        raise NotImplementedError("IterableDataset subclasses define __iter__")


class TensorDataset(Dataset):
    """Item i is the tuple of row i of each tensor (or NumPy array); all
    of one first size."""

    def __init__(self, *tensors):
        if any(len(t) != len(tensors[0]) for t in tensors):
            raise ValueError("Size mismatch between tensors")
        self.tensors = tensors

    def __getitem__(self, index):
        return tuple(t[index] for t in self.tensors)

    def __len__(self):
        return len(self.tensors[0])


class Subset(Dataset):
    def __init__(self, dataset, indices):
        self.dataset, self.indices = dataset, indices

    def __getitem__(self, idx):
        if isinstance(idx, list):
            return self.dataset[[self.indices[i] for i in idx]]
        return self.dataset[self.indices[idx]]

    def __len__(self):
        return len(self.indices)


class ConcatDataset(Dataset):
    """The datasets one after another."""

    def __init__(self, datasets):
        self.datasets = list(datasets)
        if not self.datasets:
            raise ValueError("datasets should not be an empty iterable")
        if any(isinstance(d, IterableDataset) for d in self.datasets):
            raise ValueError("ConcatDataset does not support IterableDataset")
        self.cumulative_sizes = list(np.cumsum([len(d) for d in self.datasets]))

    def __len__(self):
        return int(self.cumulative_sizes[-1])

    def __getitem__(self, idx):
        if idx < 0:
            if -idx > len(self):
                raise ValueError("absolute value of index should not exceed dataset length")
            idx += len(self)
        k = bisect.bisect_right(self.cumulative_sizes, idx)
        return self.datasets[k][idx - (int(self.cumulative_sizes[k - 1]) if k else 0)]


def random_split(dataset, lengths, generator=None):
    """Subsets of the given lengths (or fractions of the dataset summing to
    1, the remainder spread one by one from the first) over a random
    permutation of its indices."""
    n = len(dataset)
    lengths = list(lengths)
    if math.isclose(sum(lengths), 1) and sum(lengths) <= 1:
        sizes = [int(math.floor(n * f)) for f in lengths]
        for i in range(n - sum(sizes)):
            sizes[i % len(sizes)] += 1
        lengths = sizes
    if sum(lengths) != n:
        raise ValueError("Sum of input lengths does not equal the length of the input dataset!")
    order = _generator(generator).permutation(n).tolist()
    out, start = [], 0
    for k in lengths:
        out.append(Subset(dataset, order[start:start + k]))
        start += k
    return out


# ---- samplers ----

class Sampler:
    def __init__(self, data_source=None):
        pass


class SequentialSampler(Sampler):
    def __init__(self, data_source):
        self.data_source = data_source

    def __iter__(self):
        return iter(range(len(self.data_source)))

    def __len__(self):
        return len(self.data_source)


class RandomSampler(Sampler):
    """A permutation of the indices, drawn anew at each iteration; with
    replacement, num_samples indices drawn independently."""

    def __init__(self, data_source, replacement=False, num_samples=None, generator=None):
        self.data_source, self.replacement = data_source, replacement
        self._num_samples, self.generator = num_samples, generator
        if not isinstance(self.num_samples, int) or self.num_samples <= 0:
            raise ValueError(f"num_samples should be a positive integer value, but got "
                             f"num_samples={self.num_samples}")

    @property
    def num_samples(self):
        return len(self.data_source) if self._num_samples is None else self._num_samples

    def __iter__(self):
        g, n = _generator(self.generator), len(self.data_source)
        if self.replacement:
            return iter(g.integers(0, n, self.num_samples).tolist())
        draws = [g.permutation(n) for _ in range(-(-self.num_samples // n))]
        return iter(np.concatenate(draws)[:self.num_samples].tolist())

    def __len__(self):
        return self.num_samples


class SubsetRandomSampler(Sampler):
    def __init__(self, indices, generator=None):
        self.indices, self.generator = indices, generator

    def __iter__(self):
        order = _generator(self.generator).permutation(len(self.indices))
        return iter([self.indices[i] for i in order.tolist()])

    def __len__(self):
        return len(self.indices)


class WeightedRandomSampler(Sampler):
    """num_samples indices drawn with probabilities proportional to
    weights, with or without replacement."""

    def __init__(self, weights, num_samples, replacement=True, generator=None):
        w = np.asarray(weights.tolist() if hasattr(weights, "tolist") else weights, np.float64)
        if w.ndim != 1 or (w < 0).any() or w.sum() <= 0:
            raise ValueError("weights should be a 1-d sequence of non-negative numbers, not "
                             "all zero")
        if not replacement and num_samples > len(w):
            raise ValueError("cannot draw more samples than weights without replacement")
        self.weights, self.num_samples = w, num_samples
        self.replacement, self.generator = replacement, generator

    def __iter__(self):
        g = _generator(self.generator)
        return iter(g.choice(len(self.weights), self.num_samples, self.replacement,
                             self.weights / self.weights.sum()).tolist())

    def __len__(self):
        return self.num_samples


class BatchSampler(Sampler):
    """The sampler's indices in lists of batch_size (the last one shorter
    unless drop_last)."""

    def __init__(self, sampler, batch_size, drop_last):
        if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size <= 0:
            raise ValueError(f"batch_size should be a positive integer value, but got "
                             f"batch_size={batch_size}")
        self.sampler, self.batch_size, self.drop_last = sampler, batch_size, drop_last

    def __iter__(self):
        batch = []
        for i in self.sampler:
            batch.append(i)
            if len(batch) == self.batch_size:
                yield batch
                batch = []
        if batch and not self.drop_last:
            yield batch

    def __len__(self):
        n = len(self.sampler)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)


# ---- collation ----

def default_convert(data):
    """NumPy arrays and numbers as loom tensors, inside containers too."""
    from .. import Tensor, tensor
    if isinstance(data, Tensor):
        return data
    if isinstance(data, np.ndarray) and data.dtype.kind in "biuf":
        return tensor(data)
    if isinstance(data, collections.abc.Mapping):
        return type(data)({k: default_convert(v) for k, v in data.items()})
    if isinstance(data, tuple) and hasattr(data, "_fields"):
        return type(data)(*(default_convert(d) for d in data))
    if isinstance(data, (list, tuple)):
        return type(data)(default_convert(d) for d in data)
    return data


def default_collate(batch):
    """A batch of items as one: tensors and NumPy arrays stacked along a
    new first dim, Python floats as float64 and ints as int64 tensors,
    strings as a list, and tuples, lists, named tuples and dicts item by
    item (PyTorch's default_collate)."""
    from .. import Tensor, stack, tensor, float64, int64
    first = batch[0]
    if isinstance(first, Tensor):
        return stack(list(batch), 0)
    if isinstance(first, np.ndarray):
        if first.dtype.kind not in "biuf":
            raise TypeError(f"default_collate: batch must contain tensors, numpy arrays, "
                            f"numbers, dicts or lists; found {first.dtype}")
        return tensor(np.stack(batch))
    if isinstance(first, bool):
        return tensor(list(batch))
    if isinstance(first, numbers.Integral):
        return tensor(list(batch), dtype=int64)
    if isinstance(first, numbers.Real):
        return tensor(list(batch), dtype=float64)
    if isinstance(first, (str, bytes)):
        return list(batch)
    if isinstance(first, collections.abc.Mapping):
        return type(first)({k: default_collate([d[k] for d in batch]) for k in first})
    if isinstance(first, tuple) and hasattr(first, "_fields"):
        return type(first)(*(default_collate(list(s)) for s in zip(*batch)))
    if isinstance(first, collections.abc.Sequence):
        if any(len(item) != len(first) for item in batch):
            raise RuntimeError("each element in list of batch should be of equal size")
        return [default_collate(list(s)) for s in zip(*batch)]
    raise TypeError(f"default_collate: batch must contain tensors, numpy arrays, numbers, "
                    f"dicts or lists; found {type(first)}")


# ---- the loader ----

class DataLoader:
    """Batches of a dataset's items, collated (default_collate): batch_size
    items a batch (None: items one by one, converted), in order or
    shuffled each epoch, or as a sampler or batch_sampler gives; the last
    batch shorter unless drop_last. An IterableDataset is read in its
    order. Loads in the calling thread (num_workers is taken and checked,
    as the other worker options are)."""

    def __init__(self, dataset, batch_size=1, shuffle=None, sampler=None, batch_sampler=None,
                 num_workers=0, collate_fn=None, pin_memory=False, drop_last=False,
                 timeout=0, worker_init_fn=None, multiprocessing_context=None,
                 generator=None, *, prefetch_factor=2, persistent_workers=False,
                 pin_memory_device=""):
        if num_workers < 0:
            raise ValueError("num_workers option should be non-negative; use num_workers=0 "
                             "to disable multiprocessing.")
        if timeout < 0:
            raise ValueError("timeout option should be non-negative")
        iterable = isinstance(dataset, IterableDataset)
        if iterable and (shuffle or sampler is not None or batch_sampler is not None):
            raise ValueError("DataLoader with IterableDataset: expected unspecified shuffle, "
                             "sampler or batch_sampler option")
        if sampler is not None and shuffle:
            raise ValueError("sampler option is mutually exclusive with shuffle")
        if batch_sampler is not None and (batch_size != 1 or shuffle or sampler is not None
                                          or drop_last):
            raise ValueError("batch_sampler option is mutually exclusive with batch_size, "
                             "shuffle, sampler, and drop_last")
        if batch_sampler is None and batch_size is None and drop_last:
            raise ValueError("batch_size=None option disables auto-batching and is mutually "
                             "exclusive with drop_last")
        self.dataset, self.num_workers, self.pin_memory = dataset, num_workers, pin_memory
        self.timeout, self.worker_init_fn, self.generator = timeout, worker_init_fn, generator
        self.prefetch_factor, self.persistent_workers = prefetch_factor, persistent_workers
        self.drop_last, self._iterable = drop_last, iterable
        if sampler is None and not iterable:
            sampler = RandomSampler(dataset, generator=generator) if shuffle else \
                SequentialSampler(dataset)
        if batch_size is not None and batch_sampler is None and not iterable:
            batch_sampler = BatchSampler(sampler, batch_size, drop_last)
        self.sampler, self.batch_sampler, self.batch_size = sampler, batch_sampler, batch_size
        self.collate_fn = collate_fn if collate_fn is not None else \
            default_collate if batch_size is not None or batch_sampler is not None \
            else default_convert

    def __iter__(self):
        if self._iterable:
            yield from self._iterate_stream()
        elif self.batch_sampler is not None:
            for indices in self.batch_sampler:
                yield self.collate_fn([self.dataset[i] for i in indices])
        else:
            for i in self.sampler:
                yield self.collate_fn(self.dataset[i])

    def _iterate_stream(self):
        if self.batch_size is None:
            for item in self.dataset:
                yield self.collate_fn(item)
            return
        batch = []
        for item in self.dataset:
            batch.append(item)
            if len(batch) == self.batch_size:
                yield self.collate_fn(batch)
                batch = []
        if batch and not self.drop_last:
            yield self.collate_fn(batch)

    def __len__(self):
        if self._iterable:
            n = len(self.dataset)  # TypeError where the dataset has no length, as PyTorch's
            if self.batch_size is None:
                return n
            return n // self.batch_size if self.drop_last else -(-n // self.batch_size)
        return len(self.batch_sampler if self.batch_sampler is not None else self.sampler)
