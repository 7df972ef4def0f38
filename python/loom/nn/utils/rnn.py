"""torch.nn.utils.rnn: sequences of unequal lengths, padded or packed.

A PackedSequence holds the steps of a batch sorted by decreasing length,
time-major: data's first batch_sizes[0] rows are every sequence's first
step, and so on. The index arithmetic runs in NumPy (the lengths are
known in Python); the tensors move by one gather each way, so gradients
flow through packing and padding."""
from collections import namedtuple

import numpy as np


def _index(values):
    from ... import int64, tensor
    return tensor(np.asarray(values, dtype=np.int64), dtype=int64)


def _cat(tensors, dim):
    """cat of any number of tensors (the op takes at most 64)."""
    from ... import cat
    while len(tensors) > 64:
        tensors = [cat(tensors[i:i + 64], dim) for i in range(0, len(tensors), 64)]
    return cat(tensors, dim)


def _stack(tensors, dim):
    return _cat([t.unsqueeze(dim) for t in tensors], dim)


def _invert(permutation):
    if permutation is None:
        return None
    p = np.asarray(permutation, dtype=np.int64)
    inverse = np.empty_like(p)
    inverse[p] = np.arange(len(p))
    return _index(inverse)


class PackedSequence(namedtuple("PackedSequence",
                                ["data", "batch_sizes", "sorted_indices", "unsorted_indices"])):
    """torch's PackedSequence: data (sum of the lengths, *), batch_sizes
    (int64, one per step), sorted_indices (the batch's order by decreasing
    length, or None) and unsorted_indices (its inverse)."""
    __slots__ = ()

    def __new__(cls, data, batch_sizes=None, sorted_indices=None, unsorted_indices=None):
        if unsorted_indices is None:
            unsorted_indices = _invert(sorted_indices)
        return super().__new__(cls, data, batch_sizes, sorted_indices, unsorted_indices)

    is_cuda = False


def _batch_sizes(sorted_lengths):
    """How many sequences are still running at each step."""
    steps = np.arange(sorted_lengths[0])
    return (sorted_lengths[None, :] > steps[:, None]).sum(1)


def _lengths(batch_sizes):
    """Each sequence's length, in packed (decreasing) order."""
    return (batch_sizes[None, :] > np.arange(batch_sizes[0])[:, None]).sum(1)


def _pack(padded, batch_sizes):
    """The data of a time-major (T, B, *) tensor whose batch is sorted."""
    steps, batch = padded.shape[0], padded.shape[1]
    rows = np.concatenate([t * batch + np.arange(b) for t, b in enumerate(batch_sizes)])
    flat = padded.reshape(steps * batch, *padded.shape[2:])
    return flat.index_select(0, _index(rows))


def _unpack(data, batch_sizes, steps, padding_value):
    """data as a time-major (steps, B, *) tensor, padding_value past each
    sequence's end (one row appended to data supplies it)."""
    from ... import cat, full
    batch = int(batch_sizes[0])
    sizes = np.zeros(steps, dtype=np.int64)
    sizes[:len(batch_sizes)] = batch_sizes
    offsets = np.cumsum(sizes) - sizes
    j = np.arange(batch)[None, :]
    rows = np.where(j < sizes[:, None], offsets[:, None] + j, data.shape[0])
    feature = tuple(data.shape[1:])
    source = cat([data, full((1,) + feature, padding_value, dtype=data.dtype)])
    return source.index_select(0, _index(rows.reshape(-1))).reshape(steps, batch, *feature)


def _check_lengths(lengths, batch, steps, enforce_sorted):
    if lengths.ndim != 1:
        raise RuntimeError(f"'lengths' argument should be a 1D int64 tensor, but got "
                           f"{lengths.ndim}D")
    if len(lengths) != batch:
        raise RuntimeError(f"Expected `len(lengths)` to be equal to batch_size, but got "
                           f"{len(lengths)} (batch_size={batch})")
    if enforce_sorted and np.any(lengths[1:] > lengths[:-1]):
        raise RuntimeError("`lengths` array must be sorted in decreasing order when "
                           "`enforce_sorted` is True. You can pass `enforce_sorted=False` "
                           "to pack_padded_sequence and/or pack_sequence to sidestep this "
                           "requirement if you do not need ONNX exportability.")
    if batch == 0 or lengths.min() <= 0:
        raise RuntimeError("Length of all samples has to be greater than 0, but found an "
                           "element in 'lengths' that is <= 0")
    if lengths.max() > steps:
        raise ValueError(f"a length ({lengths.max()}) exceeds the padded input's sequence "
                         f"length ({steps})")


def pack_padded_sequence(input, lengths, batch_first=False, enforce_sorted=True):
    """Packs a padded batch (T, B, *), or (B, T, *) with batch_first, of
    the given lengths; enforce_sorted=False sorts the batch first."""
    lengths = np.asarray(lengths, dtype=np.int64)
    if batch_first:
        input = input.transpose(0, 1)
    _check_lengths(lengths, input.shape[1], input.shape[0], enforce_sorted)
    sorted_indices = None
    if not enforce_sorted:
        order = np.argsort(-lengths, kind="stable")
        lengths, sorted_indices = lengths[order], _index(order)
        input = input.index_select(1, sorted_indices)
    batch_sizes = _batch_sizes(lengths)
    return PackedSequence(_pack(input, batch_sizes), _index(batch_sizes), sorted_indices)


def pad_packed_sequence(sequence, batch_first=False, padding_value=0.0, total_length=None):
    """The inverse of pack_padded_sequence: (padded, lengths), the batch
    in its original order."""
    batch_sizes = np.asarray(sequence.batch_sizes, dtype=np.int64)
    steps = len(batch_sizes)
    if total_length is not None:
        if total_length < steps:
            raise ValueError("Expected total_length to be at least the length of the longest "
                             f"sequence in input, but got total_length={total_length} and "
                             f"max sequence length being {steps}")
        steps = total_length
    padded = _unpack(sequence.data, batch_sizes, steps, padding_value)
    lengths = _lengths(batch_sizes)
    if sequence.unsorted_indices is not None:
        padded = padded.index_select(1, sequence.unsorted_indices)
        lengths = lengths[np.asarray(sequence.unsorted_indices)]
    if batch_first:
        padded = padded.transpose(0, 1)
    return padded, _index(lengths)


def pad_sequence(sequences, batch_first=False, padding_value=0.0):
    """Stacks tensors (L_i, *) into (max L, B, *), or (B, max L, *)."""
    from ... import Tensor, cat, full
    if isinstance(sequences, Tensor):
        sequences = sequences.unbind(0)
    sequences = list(sequences)
    if not sequences:
        raise RuntimeError("received an empty list of sequences")
    longest = max(s.shape[0] for s in sequences)
    padded = [s if s.shape[0] == longest else
              cat([s, full((longest - s.shape[0],) + tuple(s.shape[1:]), padding_value,
                           dtype=s.dtype)])
              for s in sequences]
    return _stack(padded, 0 if batch_first else 1)


def pack_sequence(sequences, enforce_sorted=True):
    """Packs a list of tensors (L_i, *)."""
    lengths = [s.shape[0] for s in sequences]
    return pack_padded_sequence(pad_sequence(sequences), lengths,
                                enforce_sorted=enforce_sorted)


def unpad_sequence(padded_sequences, lengths, batch_first=False):
    """The list of tensors that pad_sequence stacked."""
    if not batch_first:
        padded_sequences = padded_sequences.transpose(0, 1)
    return [padded_sequences[i, :int(n)] for i, n in enumerate(np.asarray(lengths))]


def unpack_sequence(packed_sequences):
    """The list of tensors that pack_sequence packed."""
    padded, lengths = pad_packed_sequence(packed_sequences, batch_first=True)
    return unpad_sequence(padded, lengths, batch_first=True)
