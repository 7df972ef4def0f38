"""Every op of Loom's op table under its own name and attribute names:
loom.ops.matmul(a, b, trans_b=1), loom.ops.sum(x, axes=[1], keepdim=1).
Built from the table itself (loom._C.op_table()), so that the table stays
the one list of ops."""
from . import _C


class OpInfo:
    """A row of the op table: name, fusion class, doc, inputs, outputs,
    whether it is differentiable, attributes (name, kind, optional, default)."""

    __slots__ = ("name", "fusion_class", "doc", "in_min", "in_max", "n_out",
                 "differentiable", "attrs")

    def __init__(self, row):
        (self.name, self.fusion_class, self.doc, self.in_min, self.in_max, self.n_out,
         self.differentiable, self.attrs) = row

    def __repr__(self):
        attrs = " ".join(f"{a[0]}:{a[1]}" for a in self.attrs)
        return f"<op {self.name} ({self.fusion_class}) {attrs}: {self.doc}>"


TABLE = {row[0]: OpInfo(row) for row in _C.op_table()}


def _make(info):
    name = info.name

    def fn(*inputs, **attrs):
        return _C.op(name, inputs, attrs or None)
    fn.__name__ = name
    fn.__qualname__ = name
    attrs = ", ".join(f"{a[0]}: {a[1]}" + ("" if not a[2] else f" = {a[3] or 'absent'}")
                      for a in info.attrs)
    fn.__doc__ = f"{info.doc}\n\nop table row: {info.fusion_class}; attributes: {attrs or 'none'}"
    return fn


for _info in TABLE.values():
    # 'and', 'or', 'not', 'if' are Python keywords: and_, or_, not_, if_
    _py = _info.name + "_" if _info.name in ("and", "or", "not", "if") else _info.name
    globals()[_py] = _make(_info)
del _info, _py
