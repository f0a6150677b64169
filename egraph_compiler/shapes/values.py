"""RDP value propagation: the values of small integer tensors as symbolic dims.

`propagate(ctx, out_type)` returns the flattened values of a node's single output
when its inputs' values are known (constants, ``Shape`` of a shaped tensor, and
arithmetic / indexing on those), or None. Booleans are 0/1.
"""

from __future__ import annotations

from egraph_compiler.ir.dims import Dim, dim_add, dim_floordiv, dim_mod, dim_mul
from egraph_compiler.ir.graph import TensorType
from egraph_compiler.shapes.prover import prove_eq, prove_le, prove_lt
from egraph_compiler.shapes.symbolic import exact_div, product

Values = tuple[Dim, ...]


def _broadcast_values(a: Values, b: Values) -> tuple[Values, Values] | None:
    if len(a) == len(b):
        return a, b
    if len(a) == 1:
        return a * len(b), b
    if len(b) == 1:
        return a, b * len(a)
    return None


def _div(a: Dim, b: Dim) -> Dim | None:
    quotient = exact_div(a, b)
    if quotient is not None:
        return quotient
    if isinstance(b, int) and b > 0:  # dims are non-negative: truncation == floor
        return dim_floordiv(a, b)
    return None


def _compare(op: str, a: Dim, b: Dim, ranges) -> Dim | None:
    if op == "Equal":
        if prove_eq(a, b, ranges):
            return 1
        if prove_lt(a, b, ranges) or prove_lt(b, a, ranges):
            return 0
        return None
    if op in ("Less", "Greater"):
        left, right = (a, b) if op == "Less" else (b, a)
        if prove_lt(left, right, ranges):
            return 1
        if prove_le(right, left, ranges):
            return 0
    return None


def _elementwise(op: str, a: Dim, b: Dim, ranges) -> Dim | None:
    if op == "Add":
        return dim_add(a, b)
    if op == "Sub":
        return dim_add(a, dim_mul(b, -1))
    if op == "Mul":
        return dim_mul(a, b)
    if op == "Div":
        if isinstance(a, int) and isinstance(b, int):
            return None if b == 0 else int(a / b)
        return _div(a, b)
    if op == "Mod" and isinstance(b, int) and b > 0:
        return dim_mod(a, b)
    if op in ("Max", "Min"):
        if prove_le(a, b, ranges):
            return b if op == "Max" else a
        if prove_le(b, a, ranges):
            return a if op == "Max" else b
        return None
    return _compare(op, a, b, ranges)


def propagate(ctx, out_type: TensorType) -> Values | None:
    op = ctx.node.op
    node = ctx.node
    if op == "Shape":
        shape = ctx.shape(0)
        if shape is None:
            return None
        start, end = int(ctx.attrs.get("start", 0)), ctx.attrs.get("end")
        return tuple(shape[slice(start, None if end is None else int(end))])
    if op == "Size":
        shape = ctx.shape(0)
        return None if shape is None else (product(shape),)
    if op in ("Identity", "Unsqueeze", "Squeeze", "Reshape", "Flatten", "Floor", "Ceil", "Round", "Cast",
              "CastLike", "Transpose", "Expand", "Neg", "Abs", "ReduceProd", "ReduceSum", "ReduceMax",
              "ReduceMin", "Not"):
        source = ctx.value(0)
        if source is None:
            return None
        if op == "Neg":
            return tuple(dim_mul(v, -1) for v in source)
        if op == "Abs":
            return tuple(abs(v) if isinstance(v, int) else v for v in source)
        if op == "Not":
            return tuple(1 - v if isinstance(v, int) else None for v in source) if all(isinstance(v, int) for v in source) else None
        if op == "Cast" and out_type.dtype == "bool":
            return tuple(int(v != 0) for v in source) if all(isinstance(v, int) for v in source) else None
        if op in ("ReduceProd", "ReduceSum"):
            if ctx.shape(0) is None or len(ctx.shape(0)) > 1:
                return None
            if op == "ReduceProd":
                return (product(source),)
            total: Dim = 0
            for v in source:
                total = dim_add(total, v)
            return (total,)
        if op in ("ReduceMax", "ReduceMin"):
            return None
        if op == "Expand":
            length = out_type.shape[0] if out_type.shape else 1
            if len(source) == 1 and isinstance(length, int):
                return source * length
            return source if isinstance(length, int) and length == len(source) else None
        return source
    if op in ("Add", "Sub", "Mul", "Div", "Mod", "Max", "Min", "Equal", "Less", "Greater"):
        if len(node.inputs) != 2:
            return None
        a, b = ctx.value(0), ctx.value(1)
        if a is None or b is None:
            return None
        pair = _broadcast_values(a, b)
        if pair is None:
            return None
        if op == "Div" and out_type.dtype.startswith("float"):  # real division: exact quotients only
            out = [exact_div(x, y) for x, y in zip(*pair, strict=True)]
        else:
            out = [_elementwise(op, x, y, ctx.ranges) for x, y in zip(*pair, strict=True)]
        return None if any(v is None for v in out) else tuple(out)
    if op == "Where":
        cond, a, b = (ctx.value(i) for i in range(3))
        if cond is None or a is None or b is None or not all(isinstance(c, int) for c in cond):
            return None
        n = max(len(cond), len(a), len(b))
        pick = [(cond * n)[i] if len(cond) == 1 else cond[i] for i in range(n)]
        a, b = (a * n if len(a) == 1 else a), (b * n if len(b) == 1 else b)
        if len(a) != n or len(b) != n or len(pick) != n:
            return None
        return tuple(a[i] if pick[i] else b[i] for i in range(n))
    if op == "Gather":
        data, indices = ctx.value(0), ctx.value(1)
        if data is None or indices is None or not all(isinstance(i, int) for i in indices):
            return None
        if any(not -len(data) <= i < len(data) for i in indices):
            return None
        return tuple(data[i] for i in indices)
    if op == "Concat":
        parts = [ctx.value(i) for i in range(len(node.inputs)) if ctx.has(i)]
        if any(p is None for p in parts):
            return None
        return tuple(v for p in parts for v in p)
    if op == "Slice" and "starts" in ctx.attrs:
        source = ctx.value(0)
        if source is None:
            return None
        steps = ctx.attrs.get("steps") or (1,)
        start, end = ctx.attrs["starts"][0], ctx.attrs["ends"][0]
        return tuple(source[slice(*slice(start, end, steps[0]).indices(len(source)))])
    if op == "ConstantOfShape":
        dims = ctx.value(0)
        fill = ctx.attrs.get("value")
        if dims is None or not all(isinstance(d, int) for d in dims) or product(dims) > 64:
            return None
        if fill is not None and fill.dtype.startswith("float"):
            return None
        return (int(fill.to_numpy().reshape(-1)[0]) if fill is not None else 0,) * int(product(dims))
    if op == "Range":
        start, limit, delta = (ctx.value(i) for i in range(3))
        if start is None or limit is None or delta is None:
            return None
        s, lim, d = start[0], limit[0], delta[0]
        if all(isinstance(v, int) for v in (s, lim, d)) and d and abs((lim - s) // d) <= 64:
            return tuple(range(s, lim, d))
    return None
