"""loom.save and loom.load in the safetensors format: an 8-byte
little-endian header size, a JSON header naming each tensor's dtype,
shape and byte range, then the bytes. A file is written whole or not at
all (a temporary file renamed over the path); a malformed one is refused
with ValueError, never half read."""
import json
import os
import struct
import tempfile

from . import _C
from ._dtype import _BY_NAME
from ._tensor import Tensor

_CODES = {"float64": "F64", "float32": "F32", "float16": "F16", "bfloat16": "BF16",
          "int64": "I64", "int32": "I32", "int8": "I8", "bool": "BOOL"}
_DTYPES = {code: _BY_NAME[name] for name, code in _CODES.items()}
_MAX_HEADER = 100 << 20


def save(tensors, path, metadata=None):
    """Saves a dict of name -> Tensor (a state_dict) to path."""
    if not isinstance(tensors, dict):
        raise TypeError("loom.save: a dict of name -> Tensor (a state_dict)")
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        if not isinstance(name, str) or not isinstance(t, Tensor):
            raise TypeError(f"loom.save: entry {name!r} is not a str -> Tensor pair")
        data = _C.to_bytes(t.detach())
        header[name] = {"dtype": _CODES[t.dtype.name], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)  # the data starts 8-byte aligned
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".loom-save-")
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


def load(path):
    """The dict of name -> Tensor saved at path (by loom.save or any writer
    of safetensors)."""
    with open(path, "rb") as f:
        raw = f.read()
    where = f"loom.load: {path}"
    if raw[:2] == b"PK" or raw[:1] == b"\x80":
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
    return out
