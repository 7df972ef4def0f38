"""Tensor printing in PyTorch's format (torch/_tensor_str.py, its default
print options): elements of one width, floats with 4 decimals (integral
ones as "1.", scientific notation for wide ranges), rows wrapped at 80
columns, tensors of more than 1000 elements summarized to 3 items at
each edge, and a dtype suffix where PyTorch's default would not be
assumed."""
import math

import numpy as np

PRECISION, THRESHOLD, EDGEITEMS, LINEWIDTH = 4, 1000, 3, 80
SCI_MODE = None  # None: chosen per tensor; True or False: always or never

_PROFILES = {"default": (4, 1000, 3, 80), "short": (2, 1000, 2, 80),
             "full": (4, math.inf, 3, 80)}


def set_printoptions(precision=None, threshold=None, edgeitems=None, linewidth=None,
                     profile=None, sci_mode=None):
    """torch.set_printoptions: a profile ("default", "short", "full") first,
    then each option given; sci_mode None goes back to choosing per tensor."""
    global PRECISION, THRESHOLD, EDGEITEMS, LINEWIDTH, SCI_MODE
    if profile is not None:
        if profile not in _PROFILES:
            raise ValueError(f"set_printoptions: profile {profile!r} is not one of "
                             f"{sorted(_PROFILES)}")
        PRECISION, THRESHOLD, EDGEITEMS, LINEWIDTH = _PROFILES[profile]
    PRECISION = PRECISION if precision is None else int(precision)
    THRESHOLD = THRESHOLD if threshold is None else threshold
    EDGEITEMS = EDGEITEMS if edgeitems is None else int(edgeitems)
    LINEWIDTH = LINEWIDTH if linewidth is None else int(linewidth)
    SCI_MODE = sci_mode
_PREFIX = "tensor("
# the dtypes PyTorch prints without a suffix: the default float, long, bool
_IMPLIED = ("float32", "int64", "bool")


class _Formatter:
    """One width and notation for every element shown, as PyTorch's."""

    def __init__(self, values, floating):
        self.floating, self.int_mode, self.sci_mode, self.width = floating, True, False, 1
        if not floating:
            self.width = max([len(str(v)) for v in values] or [1])
            return
        finite = values[np.isfinite(values) & (values != 0)]
        if finite.size == 0:
            return
        big, small = np.abs(finite).max(), np.abs(finite).min()
        self.int_mode = bool(np.all(finite == np.ceil(finite)))
        self.sci_mode = big / small > 1000.0 or big > 1.0e8 or \
            (not self.int_mode and small < 1.0e-4)
        if SCI_MODE is not None:
            self.sci_mode = bool(SCI_MODE)
        if self.sci_mode:
            widths = [len(f"{v:.{PRECISION}e}") for v in finite.tolist()]
        elif self.int_mode:
            widths = [len(f"{v:.0f}") + 1 for v in finite.tolist()]
        else:
            widths = [len(f"{v:.{PRECISION}f}") for v in finite.tolist()]
        self.width = max(widths)

    def format(self, v):
        if not self.floating:
            s = str(v)
        elif self.sci_mode:
            s = f"{v:{self.width}.{PRECISION}e}"
        elif self.int_mode:
            s = f"{v:.0f}" + ("" if math.isinf(v) or math.isnan(v) else ".")
        else:
            s = f"{v:.{PRECISION}f}"
        return " " * (self.width - len(s)) + s


def _summarized(a):
    """The elements that a summarized print shows."""
    if a.ndim == 0:
        return a
    if a.shape[0] > 2 * EDGEITEMS:
        a = np.concatenate([a[:EDGEITEMS], a[-EDGEITEMS:]])
    return np.stack([_summarized(x) for x in a]) if a.ndim > 1 else a


def _vector(a, indent, summarize, fmt):
    per_line = max(1, (LINEWIDTH - indent) // (fmt.width + 2))
    if summarize and a.shape[0] > 2 * EDGEITEMS:
        items = [fmt.format(v) for v in a[:EDGEITEMS].tolist()] + [" ..."] + \
            [fmt.format(v) for v in a[-EDGEITEMS:].tolist()]
    else:
        items = [fmt.format(v) for v in a.tolist()]
    lines = [", ".join(items[i:i + per_line]) for i in range(0, len(items), per_line)]
    return "[" + (",\n" + " " * (indent + 1)).join(lines) + "]"


def _nested(a, indent, summarize, fmt):
    if a.ndim == 0:
        return fmt.format(a.item())
    if a.ndim == 1:
        return _vector(a, indent, summarize, fmt)
    rows = range(a.shape[0])
    if summarize and a.shape[0] > 2 * EDGEITEMS:
        rows = list(range(EDGEITEMS)) + [None] + list(range(a.shape[0] - EDGEITEMS, a.shape[0]))
    parts = ["..." if i is None else _nested(a[i], indent + 1, summarize, fmt) for i in rows]
    return "[" + ("," + "\n" * (a.ndim - 1) + " " * (indent + 1)).join(parts) + "]"


def _with_suffixes(body, suffixes):
    last = len(body) - body.rfind("\n") + 1
    out = [_PREFIX, body]
    for s in suffixes:
        if last + len(s) + 2 > LINEWIDTH:
            out.append(",\n" + " " * len(_PREFIX) + s)
            last = len(_PREFIX) + len(s)
        else:
            out.append(", " + s)
            last += len(s) + 2
    return "".join(out) + ")"


def tensor_repr(t, values):
    """repr of tensor t whose elements are the array values."""
    dtype, suffixes = t.dtype, []
    if values.size == 0:
        body = "[]"
        if values.ndim != 1:
            suffixes.append(f"size={tuple(values.shape)}")
        if dtype.name != "float32":
            suffixes.append(f"dtype={dtype!r}")
    else:
        if dtype.name not in _IMPLIED:
            suffixes.append(f"dtype={dtype!r}")
        floating = dtype.is_floating_point
        if floating:
            values = values.astype(np.float64)
        summarize = values.size > THRESHOLD
        fmt = _Formatter((_summarized(values) if summarize else values).reshape(-1), floating)
        body = _nested(values, len(_PREFIX), summarize, fmt)
    if t.grad_fn is not None:  # a computed tensor: its backward, as PyTorch shows it
        suffixes.append(f"grad_fn=<{t.grad_fn.name()}>")
    elif t.requires_grad:
        suffixes.append("requires_grad=True")
    return _with_suffixes(body, suffixes)
