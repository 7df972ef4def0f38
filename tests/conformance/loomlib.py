"""ctypes bindings to libloom: graphs, tensors over NumPy memory, running.

The builder signatures and struct layouts are read from the library's own
listing of its API (loom_api_describe, api.py), so that a call here passes
exactly the C types the header declares, laid out as the library lays
them out."""
import ctypes as C
import os
import re

import numpy as np

from api import Api
from dtypes import LOOM, STORAGE



# The library under test and its API listing (api.py), set by load(); the
# structs below are built from the listing, as the library lays them out.
CDLL = None
API = None
Value = ConvParams = PoolParams = OpInfo = None


def load(path):
    """Loads libloom at path and builds the structs from its listing."""
    global CDLL, API, Value, ConvParams, PoolParams, OpInfo
    if CDLL is not None:
        return
    CDLL = C.CDLL(os.path.abspath(path))
    API = Api(CDLL)
    Value = API.struct("loom_value_t")
    ConvParams = API.struct("loom_conv_params_t")
    PoolParams = API.struct("loom_pool_params_t")
    OpInfo = API.struct("loom_op_info_t")
    # The dtype numbers the tests use must be the library's.
    codes = API.enum("loom_dtype_t")
    for name in LOOM:
        if codes["LOOM_" + name.upper()] != LOOM[name]:
            raise ValueError("dtype %s is %d in the library" % (name, codes["LOOM_" + name.upper()]))


class LoomError(Exception):
    def __init__(self, status, where, message):
        super().__init__("%s: %s: %s" % (where, status, message))
        self.status = status


# C parameter types of ops.h -> ctypes; "out" marks an output value slot.
def builder_ctypes():
    return {
        "loom_value_t": Value,
        "int": C.c_int,
        "int64_t": C.c_int64,
        "double": C.c_double,
        "loom_dtype_t": C.c_int,
        "loom_pad_mode_t": C.c_int,
        "const int64_t *": C.POINTER(C.c_int64),
        "const loom_dim_t *": C.POINTER(C.c_int64),
        "const loom_value_t *": C.POINTER(Value),
        "const loom_conv_params_t *": C.POINTER(ConvParams),
        "const loom_pool_params_t *": C.POINTER(PoolParams),
        "loom_value_t *": "out",
        "loom_graph_t *": C.c_void_p,  # a subgraph (if, loop)
        "loom_comm_t *": C.c_void_p,   # a communicator (collectives)
        "loom_comm_reduce_t": C.c_int,
    }


def parse_builders():
    """{name: [ctype or "out", ...]} for every loom_<op>(loom_graph_t *g, ...)
    of ops.h and comm.h (the collectives), from the declarations in the
    library's listing."""
    ctypes_of = builder_ctypes()
    sigs = {}
    for f in API.listing["functions"]:
        m = re.match(r"loom_status_t loom_(\w+)\(loom_graph_t \*g, (.*)\);$", f["decl"])
        if f["header"] not in ("ops.h", "comm.h") or not m:
            continue
        if f["header"] == "comm.h" and "options" in m.group(2):
            continue  # loom_data_parallel_grads: a transformation, not an op
        params = []
        for p in m.group(2).split(", "):
            ctype = re.sub(r"\s*\w+$", "", p).strip()
            if ctype.endswith("*") and not ctype.endswith(" *"):
                ctype = ctype[:-1].strip() + " *"
            params.append(ctypes_of[ctype])
        sigs[m.group(1)] = params
    sigs["assign"] = [Value, Value]  # declared in loom.h with the graph API
    return sigs


class Lib:
    def __init__(self, path):
        load(path)
        self.c = CDLL
        c = self.c
        c.loom_last_error.restype = C.c_char_p
        c.loom_status_name.restype = C.c_char_p
        c.loom_tensor_dim.restype = C.c_int64
        c.loom_tensor_numel.restype = C.c_int64
        c.loom_tensor_wrap.argtypes = [C.c_int, C.c_int, C.POINTER(C.c_int64),
                                       C.POINTER(C.c_int64), C.c_void_p,
                                       C.POINTER(C.c_void_p)]
        c.loom_tensor_read.argtypes = [C.c_void_p, C.c_void_p, C.c_size_t]
        for f in ("loom_tensor_rank", "loom_tensor_dtype", "loom_tensor_numel",
                  "loom_tensor_destroy"):
            getattr(c, f).argtypes = [C.c_void_p]
        c.loom_tensor_dim.argtypes = [C.c_void_p, C.c_int]
        c.loom_tensor_destroy.restype = None
        c.loom_graph_destroy.argtypes = [C.c_void_p]
        c.loom_graph_destroy.restype = None
        c.loom_graph_input.argtypes = [C.c_void_p, C.c_char_p, C.c_int, C.c_int,
                                       C.POINTER(C.c_int64), C.POINTER(Value)]
        c.loom_graph_param.argtypes = [C.c_void_p, C.c_char_p, C.c_int, C.c_int,
                                       C.POINTER(C.c_int64), C.c_void_p,
                                       C.POINTER(Value)]
        c.loom_graph_param_tensor.argtypes = [C.c_void_p, Value,
                                              C.POINTER(C.c_void_p)]
        c.loom_graph_output.argtypes = [C.c_void_p, Value]
        c.loom_interpret.argtypes = [C.c_void_p, C.c_int, C.POINTER(C.c_void_p),
                                     C.c_int, C.POINTER(C.c_void_p)]
        c.loom_dim_symbol.argtypes = [C.c_void_p, C.c_char_p, C.POINTER(C.c_int64)]
        c.loom_op_get_info.argtypes = [C.c_int, C.POINTER(OpInfo)]
        self.builders = parse_builders()

    def check(self, status, where):
        if status != 0:
            name = self.c.loom_status_name(status).decode()
            raise LoomError(name, where, self.c.loom_last_error().decode())

    def op_names(self):
        names = []
        for i in range(self.c.loom_op_count()):
            info = API.new("loom_op_info_t")
            self.check(self.c.loom_op_get_info(i, C.byref(info)), "op info")
            names.append(info.name.decode())
        return names

    def builder(self, name):
        """The ctypes function loom_<name> and its parsed parameter list."""
        params = self.builders[name]
        try:
            fn = getattr(self.c, "loom_" + name)
        except AttributeError:
            raise LoomError("MISSING", name, "libloom has no loom_%s" % name)
        fn.argtypes = [C.c_void_p] + [C.POINTER(Value) if p == "out" else p
                                      for p in params]
        fn.restype = C.c_int
        return fn, params

    # ---- tensors -------------------------------------------------------

    def wrap(self, arr, dtype):
        """A tensor over arr's memory (any strides); arr must stay alive."""
        isz = arr.itemsize
        shape = (C.c_int64 * max(arr.ndim, 1))(*arr.shape)
        strides = (C.c_int64 * max(arr.ndim, 1))(*[s // isz for s in arr.strides])
        t = C.c_void_p()
        ptr = arr.__array_interface__["data"][0]
        self.check(self.c.loom_tensor_wrap(LOOM[dtype], arr.ndim, shape, strides,
                                           ptr, C.byref(t)), "tensor_wrap")
        return t

    def read(self, t):
        """(dtype name, storage ndarray) of a tensor."""
        c = self.c
        code = c.loom_tensor_dtype(t)
        dtype = [k for k, v in LOOM.items() if v == code][0]
        shape = tuple(c.loom_tensor_dim(t, i) for i in range(c.loom_tensor_rank(t)))
        out = np.zeros(shape, dtype=STORAGE[dtype])
        self.check(c.loom_tensor_read(t, out.ctypes.data, out.nbytes), "tensor_read")
        return dtype, out


def as_int64_array(xs):
    if xs is None:
        return None
    return (C.c_int64 * max(len(xs), 1))(*[int(x) for x in xs])


class Graph:
    """One graph being built and run; closes (destroys) everything it made."""

    def __init__(self, lib):
        self.L = lib
        self.g = C.c_void_p()
        lib.check(lib.c.loom_graph_create(C.byref(self.g)), "graph_create")
        self.n_outputs = 0

    def close(self):
        self.L.c.loom_graph_destroy(self.g)
        self.g = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def input(self, dtype, shape, name="x"):
        v = Value()
        self.L.check(self.L.c.loom_graph_input(
            self.g, name.encode(), LOOM[dtype], len(shape), as_int64_array(shape),
            C.byref(v)), "graph_input")
        return v

    def symbol(self, name):
        d = C.c_int64()
        self.L.check(self.L.c.loom_dim_symbol(self.g, name.encode(), C.byref(d)),
                     "dim_symbol")
        return d.value

    def param(self, dtype, shape, name="p"):
        v = Value()
        self.L.check(self.L.c.loom_graph_param(
            self.g, name.encode(), LOOM[dtype], len(shape), as_int64_array(shape),
            None, C.byref(v)), "graph_param")
        return v

    def param_tensor(self, v):
        t = C.c_void_p()
        self.L.check(self.L.c.loom_graph_param_tensor(self.g, v, C.byref(t)),
                     "graph_param_tensor")
        return t

    def output(self, v):
        self.L.check(self.L.c.loom_graph_output(self.g, v), "graph_output")
        self.n_outputs += 1

    def op(self, name, *args):
        """Calls loom_<name>(g, args..., &out...): returns the output value,
        or a tuple when the builder has several output slots. Lists become
        int64 arrays, None a null pointer."""
        fn, params = self.L.builder(name)
        outs = [Value() for p in params if p == "out"]
        cargs, it_args, it_outs = [], iter(args), iter(outs)
        for p in params:
            if p == "out":
                cargs.append(C.byref(next(it_outs)))
                continue
            a = next(it_args)
            if isinstance(a, (list, tuple)) and a and isinstance(a[0], Value):
                a = (Value * len(a))(*a)
            elif isinstance(a, (list, tuple)):
                a = as_int64_array(a)
            elif isinstance(a, (ConvParams, PoolParams)):
                a = C.byref(a)
            elif isinstance(a, np.integer):
                a = int(a)
            elif isinstance(a, np.floating):
                a = float(a)
            cargs.append(a)
        self.L.check(fn(self.g, *cargs), name)
        return outs[0] if len(outs) == 1 else tuple(outs)

    def split(self, x, axis, sizes):
        fn, _ = self.L.builder("split")
        outs = (Value * max(len(sizes), 1))()
        self.L.check(fn(self.g, x, axis, len(sizes), as_int64_array(sizes), outs),
                     "split")
        return [outs[i] for i in range(len(sizes))]

    def run(self, tensors):
        """Interprets the graph; returns [(dtype, storage ndarray)] per output."""
        c = self.L.c
        ins = (C.c_void_p * max(len(tensors), 1))(*tensors)
        outs = (C.c_void_p * max(self.n_outputs, 1))()
        self.L.check(c.loom_interpret(self.g, len(tensors), ins, self.n_outputs,
                                      outs), "interpret")
        try:
            return [self.L.read(outs[i]) for i in range(self.n_outputs)]
        finally:
            for i in range(self.n_outputs):
                c.loom_tensor_destroy(outs[i])
