"""RDP value propagation: the values of small integer tensors as symbolic dims.

`propagate(ctx, out_type)` returns the flattened values of a node's single output
when its inputs' values are known (constants, ``Shape`` of a shaped tensor, and
arithmetic / indexing on those), or None. Booleans are 0/1. The arithmetic of an
elementwise operator is its declared scalar semantics (rules/operators.dnnr) evaluated on
dims through `ops.scalar.evaluate_in` (`_dim_domain`), not a table per operator.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from egraph_compiler import ops
from egraph_compiler.ir.dims import Dim, dim_add, dim_floordiv, dim_mod, dim_mul
from egraph_compiler.ir.graph import TensorType
from egraph_compiler.ops import scalar
from egraph_compiler.shapes.prover import prove_eq, prove_le, prove_lt
from egraph_compiler.shapes.symbolic import exact_div, product

Values = tuple[Dim, ...]


def _broadcast_values(operands: list[Values]) -> list[Values] | None:
    """The operands at one common length (a length-1 operand repeats), or None."""
    length = max(len(v) for v in operands)
    if any(len(v) not in (1, length) for v in operands):
        return None
    return [v * length if len(v) == 1 else v for v in operands]


def _div(a: Dim, b: Dim) -> Dim | None:
    quotient = exact_div(a, b)
    if quotient is not None:
        return quotient
    if isinstance(b, int) and b > 0:  # dims are non-negative: truncation == floor
        return dim_floordiv(a, b)
    return None


def _integer_div(a: Dim, b: Dim) -> Dim | None:
    if isinstance(a, int) and isinstance(b, int):
        return None if b == 0 else int(a / b)  # ONNX integer Div truncates
    return _div(a, b)


def _dim_domain(ranges: Mapping[str, tuple[int, int]], real: bool) -> scalar.Domain:
    """Symbolic dims as a `scalar.Domain`: + − × exactly, ``/`` an exact quotient (a real
    result) or ONNX's integer division, comparisons and min/max as far as the prover decides
    them (0/1 for booleans); None for everything else."""

    def less(a: Dim, b: Dim, strict: bool) -> Dim | None:
        if (prove_lt if strict else prove_le)(a, b, ranges):
            return 1
        return 0 if (prove_le if strict else prove_lt)(b, a, ranges) else None

    def equal(a: Dim, b: Dim) -> Dim | None:
        if prove_eq(a, b, ranges):
            return 1
        return 0 if prove_lt(a, b, ranges) or prove_lt(b, a, ranges) else None

    def extreme(largest: bool) -> Callable[..., Dim | None]:
        def pick(*dims: Dim) -> Dim | None:
            best: Dim | None = dims[0]
            for d in dims[1:]:
                if best is None:
                    return None
                best = (d if largest else best) if prove_le(best, d, ranges) else \
                    (best if largest else d) if prove_le(d, best, ranges) else None
            return best
        return pick

    def ints(fn: Callable[..., Dim]) -> Callable[..., Dim | None]:
        return lambda *dims: fn(*dims) if all(isinstance(d, int) for d in dims) else None

    def total(*dims: Dim) -> Dim:
        out: Dim = 0
        for d in dims:
            out = dim_add(out, d)
        return out

    return scalar.Domain(
        binary={"+": dim_add, "-": lambda a, b: dim_add(a, dim_mul(b, -1)), "*": dim_mul,
                "/": exact_div if real else _integer_div,
                "==": equal, "!=": lambda a, b: None if equal(a, b) is None else 1 - equal(a, b),
                "<": lambda a, b: less(a, b, True), "<=": lambda a, b: less(a, b, False),
                ">": lambda a, b: less(b, a, True), ">=": lambda a, b: less(b, a, False),
                "and": ints(lambda a, b: int(bool(a and b))), "or": ints(lambda a, b: int(bool(a or b)))},
        functions={"abs": lambda d: abs(d) if isinstance(d, int) else d,  # a symbolic dim is ≥ 0
                   "floor": lambda d: d, "ceil": lambda d: d, "round": lambda d: d,
                   "select": lambda c, a, b: (a if c else b) if isinstance(c, int) else None,
                   "min": extreme(False), "max": extreme(True), "sum": total,
                   "mod": lambda a, b: dim_mod(a, b) if isinstance(b, int) and b > 0 else None},
        number=lambda v: int(v) if float(v).is_integer() else None,
        negate=lambda d: dim_mul(d, -1),
        logical_not=ints(lambda d: 1 - d),
    )


def _declared(ctx, info: ops.OpInfo, out_type: TensorType) -> Values | None:
    """An elementwise operator's values through its declared scalar semantics (or its
    elementwise built-in) evaluated on dims, element by element."""
    operands = [ctx.value(i) for i in range(len(ctx.node.inputs)) if ctx.has(i)]
    if not operands or any(v is None for v in operands):
        return None
    columns = _broadcast_values(operands)
    if columns is None:
        return None
    domain = _dim_domain(ctx.ranges, real=out_type.dtype.startswith("float"))
    params = [p.name for p in info.decl.params]
    attrs = {name: info.attr(ctx.attrs, name) for name in info.defaults}
    out: list[Dim | None] = []
    for element in zip(*columns, strict=True):
        if info.semantics is not None:
            out.append(scalar.evaluate_in(info.semantics, attrs | dict(zip(params, element, strict=False)), domain))
        else:
            builtin = domain.functions.get(info.decl.builtin or "")
            out.append(None if builtin is None else builtin(*element))
    return None if any(v is None for v in out) else tuple(out)


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
    if op in ("Unsqueeze", "Squeeze", "Reshape", "Flatten", "Cast", "CastLike", "Transpose", "Expand",
              "ReduceProd", "ReduceSum", "ReduceMax", "ReduceMin"):
        source = ctx.value(0)
        if source is None:
            return None
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
    info = ops.current().get(op)
    if info is not None and info.elementwise:
        return _declared(ctx, info, out_type)
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
