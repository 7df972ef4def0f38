"""The public API as libloom describes it (loom_api_describe): struct
layouts, enums and constants read from the library itself, so that a
binding's ctypes mirror is built from the compiler's numbers, never copied
by hand."""
import ctypes as C
import json

# C types of the headers' fields -> ctypes; pointers are mapped below.
SCALARS = {
    "int": C.c_int, "int32_t": C.c_int32, "int64_t": C.c_int64,
    "uint32_t": C.c_uint32, "uint64_t": C.c_uint64, "size_t": C.c_size_t,
    "double": C.c_double, "float": C.c_float,
}


def describe(cdll):
    """The listing of the loaded library, as a dict."""
    fn = cdll.loom_api_describe
    fn.argtypes = [C.POINTER(C.c_void_p)]
    fn.restype = C.c_int
    out = C.c_void_p()
    if fn(C.byref(out)) != 0:
        raise RuntimeError("loom_api_describe failed")
    try:
        return json.loads(C.string_at(out.value).decode())
    finally:
        cdll.loom_free.argtypes = [C.c_void_p]
        cdll.loom_free(out)


class Api:
    def __init__(self, cdll):
        self.listing = describe(cdll)
        self._structs = {s["name"]: s for s in self.listing["structs"]}
        self._enums = {e["name"]: e for e in self.listing["enums"]}
        self._typedefs = {t["name"]: t for t in self.listing["typedefs"]}
        self._built = {}

    def functions(self):
        return [f["name"] for f in self.listing["functions"]]

    def enum(self, name):
        """{enumerator: value} of enum type `name` ("loom_dtype_t")."""
        return {v["name"]: v["value"] for v in self._enums[name]["values"]}

    def constant(self, name):
        return next(c["value"] for c in self.listing["constants"] if c["name"] == name)

    def ctype(self, text):
        """The ctypes type of one element of C type `text`."""
        if text.endswith("*"):
            return C.c_char_p if text.replace(" ", "") == "constchar*" else C.c_void_p
        text = text.replace("const ", "")
        if text in SCALARS:
            return SCALARS[text]
        if text in self._structs:
            return self.struct(text)
        if text in self._enums:
            return {4: C.c_int32, 8: C.c_int64}[self._enums[text]["size"]]
        if text in self._typedefs:
            decl = self._typedefs[text]["decl"]
            if "(*" in decl:
                return C.c_void_p  # a function pointer
            return self.ctype(decl[:-len(text)].strip())
        raise KeyError("no ctypes type for C type %r" % text)

    def struct(self, name):
        """A ctypes Structure laid out as the library's struct `name`;
        fails if ctypes would place a field elsewhere than the compiler."""
        if name in self._built:
            return self._built[name]
        s = self._structs[name]
        fields = []
        for f in s["fields"]:
            t = self.ctype(f["type"])
            fields.append((f["name"], t * f["count"] if f["count"] != 1 else t))
        cls = type(name, (C.Structure,), {"_fields_": fields})
        for f in s["fields"]:
            if getattr(cls, f["name"]).offset != f["offset"]:
                raise ValueError("%s.%s: ctypes puts it at %d, the library at %d" % (
                    name, f["name"], getattr(cls, f["name"]).offset, f["offset"]))
        if C.sizeof(cls) != s["size"]:
            raise ValueError("%s: ctypes makes %d bytes, the library %d" % (
                name, C.sizeof(cls), s["size"]))
        self._built[name] = cls
        return cls

    def new(self, name, **fields):
        """A zeroed struct `name`, its size field set when it has one."""
        cls = self.struct(name)
        obj = cls(**fields)
        if any(f[0] == "size" for f in cls._fields_):
            obj.size = C.sizeof(cls)
        return obj
