"""loom.save and loom.load in the safetensors format: an 8-byte
little-endian header size, a JSON header naming each tensor's dtype,
shape and byte range, then the bytes. A file is written whole or not at
all (a temporary file renamed over the path); a malformed one is refused
with ValueError, never half read.

A dict of name -> Tensor (a state_dict) is saved as those tensors. Any
other object of tensors and plain Python values (dicts, OrderedDicts,
lists, tuples, numbers, strings, None: a checkpoint such as {"model":
sd, "optim": opt.state_dict(), "epoch": 3}) is saved as its tensors,
numbered, and its structure as JSON in the header's metadata under
"loom.tree"; load gives the same structure back. Nothing is pickled, so
loading runs no code."""
import itertools
import json
import os
import stat
import struct
from collections import OrderedDict

from . import _C
from ._dtype import _BY_NAME
from ._tensor import Tensor

_CODES = {"float64": "F64", "float32": "F32", "float16": "F16", "bfloat16": "BF16",
          "int64": "I64", "int32": "I32", "int8": "I8", "bool": "BOOL"}
_DTYPES = {code: _BY_NAME[name] for name, code in _CODES.items()}
_MAX_HEADER = 100 << 20
_TREE = "loom.tree"


def save(obj, path, metadata=None):
    """Saves obj to path: a dict of name -> Tensor (a state_dict) as a plain
    safetensors file, any other nesting of tensors and plain Python values
    with its structure (see the module's doc). metadata: str -> str pairs
    kept in the header."""
    meta = {str(k): str(v) for k, v in (metadata or {}).items()}
    if _is_flat(obj):
        tensors = obj
    else:
        tensors = {}
        meta[_TREE] = json.dumps(_encode(obj, tensors, {}), separators=(",", ":"))
    _write(tensors, path, meta)


def _is_flat(obj):
    return isinstance(obj, dict) and bool(obj) and all(
        isinstance(k, str) and isinstance(v, Tensor) for k, v in obj.items())


def _encode(obj, tensors, seen):
    """obj as JSON, its tensors put into tensors under numbers (a tensor met
    twice is stored once, and loads as one tensor)."""
    if isinstance(obj, Tensor):
        if id(obj) not in seen:
            seen[id(obj)] = str(len(tensors))
            tensors[seen[id(obj)]] = obj
        return {"T": seen[id(obj)], "g": bool(obj.requires_grad and obj.is_leaf)}
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    if isinstance(obj, (list, tuple)):
        return {"L" if isinstance(obj, list) else "U": [_encode(v, tensors, seen) for v in obj]}
    if isinstance(obj, dict):
        items = [[_encode(k, tensors, seen), _encode(v, tensors, seen)] for k, v in obj.items()]
        return {"O" if isinstance(obj, OrderedDict) else "D": items}
    raise TypeError(f"loom.save: cannot save a {type(obj).__module__}.{type(obj).__name__}: "
                    "only loom tensors, dicts, lists, tuples, numbers, strings and None")


def _decode(node, tensors):
    if not isinstance(node, dict):
        return node
    (kind, body), = ((k, v) for k, v in node.items() if k != "g")
    if kind == "T":
        t = tensors[body]
        if node.get("g") and t.dtype.is_floating_point:
            t.requires_grad = True
        return t
    if kind in ("L", "U"):
        items = [_decode(v, tensors) for v in body]
        return items if kind == "L" else tuple(items)
    pairs = ((_decode(k, tensors), _decode(v, tensors)) for k, v in body)
    return OrderedDict(pairs) if kind == "O" else dict(pairs)


# Temporaries are named _TEMP + "PID.N": a save that a kill -9 cut short
# leaves one, which the next save into the directory removes once its
# process is gone.
_TEMP = ".loom-save-"
_temps = itertools.count()


def _owner_gone(pid, mtime):
    """Whether process pid, which wrote a file last modified at mtime, has
    ended: no such process, or one that started after the write (the PID
    taken again)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:
        pass  # alive, another user's
    try:
        with open(f"/proc/{pid}/stat") as f:
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/stat") as f:
            boot = next(int(line.split()[1]) for line in f if line.startswith("btime "))
        started = boot + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return False
    return started > mtime + 2  # btime counts whole seconds


def _clean_stale(directory):
    try:
        names = os.listdir(directory)
    except OSError:
        return
    for name in names:
        pid, dot, n = name[len(_TEMP):].partition(".")
        if not name.startswith(_TEMP) or not dot or not pid.isdigit() or not n.isdigit():
            continue
        full = os.path.join(directory, name)
        try:
            st = os.lstat(full)
            if (stat.S_ISREG(st.st_mode) and int(pid) != os.getpid()
                    and _owner_gone(int(pid), st.st_mtime)):
                os.unlink(full)
        except OSError:
            pass


def _write(tensors, path, meta):
    """The safetensors file of name -> Tensor and metadata, written to a
    temporary file that is renamed over path."""
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        if not isinstance(name, str) or not isinstance(t, Tensor):
            raise TypeError(f"loom.save: entry {name!r} is not a str -> Tensor pair")
        data = _C.to_bytes(t.detach())
        header[name] = {"dtype": _CODES[t.dtype.name], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    if meta:
        header["__metadata__"] = meta
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)  # the data starts 8-byte aligned
    directory = os.path.dirname(os.path.abspath(path))
    _clean_stale(directory)
    tmp = os.path.join(directory, f"{_TEMP}{os.getpid()}.{next(_temps)}")
    # the mode open() gives, as torch.save's file has
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(struct.pack("<Q", len(head)))
            f.write(head)
            for b in blobs:
                f.write(b)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def load(path, map_location=None):
    """What loom.save saved at path: the dict of name -> Tensor of a
    safetensors file (by any writer), or the structure saved with it.
    map_location: as torch.load's, "cpu" (the only device) or None."""
    if map_location is not None:
        from ._tensor import _check_device
        _check_device(map_location)
    with open(path, "rb") as f:
        raw = f.read()
    where = f"loom.load: {path}"
    # a safetensors header's length is any 8 bytes (its first 0x80 at a
    # length of 128 mod 256), its JSON starts at byte 8
    if raw[8:9] != b"{" and (raw[:2] == b"PK" or raw[:1] == b"\x80"):
        raise ValueError(f"{where}: not a safetensors file (a zip archive or a pickle: "
                         f"torch.save's format); loom.load reads safetensors files")
    if len(raw) < 8:
        raise ValueError(f"{where}: too short for a safetensors file")
    (n,) = struct.unpack("<Q", raw[:8])
    if n > _MAX_HEADER or 8 + n > len(raw):
        raise ValueError(f"{where}: header of {n} bytes does not fit the file")
    try:
        header = json.loads(raw[8:8 + n])
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{where}: the header is not JSON ({e})") from None
    if not isinstance(header, dict):
        raise ValueError(f"{where}: the header is not a JSON object")
    body = memoryview(raw)[8 + n:]
    out, ranges = {}, []
    for name, info in header.items():
        if name == "__metadata__":
            continue
        try:
            d = _DTYPES[info["dtype"]]
            shape = [int(s) for s in info["shape"]]
            begin, end = (int(v) for v in info["data_offsets"])
        except (KeyError, TypeError, ValueError):
            raise ValueError(f"{where}: tensor {name!r} has a malformed entry") from None
        count = 1
        for s in shape:
            if s < 0:
                raise ValueError(f"{where}: tensor {name!r} has a negative dim")
            count *= s
        if not 0 <= begin <= end <= len(body) or end - begin != count * d.itemsize:
            raise ValueError(f"{where}: tensor {name!r}: bytes {begin}..{end} do not hold "
                             f"{shape} of {d.name} within the file")
        ranges.append((begin, end, name))
        out[name] = _C.from_bytes(d._code, shape, body[begin:end])
    ranges.sort()
    for (_, e0, a), (b1, _, b) in zip(ranges, ranges[1:]):
        if b1 < e0:
            raise ValueError(f"{where}: tensors {a!r} and {b!r} overlap")
    # the format's data holds the tensors and nothing else (a file cut or
    # written over elsewhere shows here)
    covered = 0
    for begin, end, _ in ranges:
        if begin > covered:
            break
        covered = max(covered, end)
    if covered != len(body):
        raise ValueError(f"{where}: bytes {covered}..{len(body)} of the data are no "
                         f"tensor's (the format has no gaps or trailing bytes)")
    meta = header.get("__metadata__")
    if isinstance(meta, dict) and _TREE in meta:
        try:
            return _decode(json.loads(meta[_TREE]), out)
        except (KeyError, TypeError, ValueError):
            raise ValueError(f"{where}: the saved structure is malformed") from None
    return out
