"""Output shapes of operators from input shapes and attributes (ONNX opset 17,
attribute-held axes as `ir/graph.py` documents), over symbolic dims.

Used for e-classes that rewrites create (the e-graph asks Python through an
oracle relation) and by extraction for classes without a shape fact. A function
returns ``None`` when it cannot tell: unknown is never guessed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from egraph_compiler.ir.dims import Dim, DimExpr, dim_floordiv

Shape = tuple[Dim, ...]
ShapeFn = Callable[[list, dict, dict], Shape | None]


def _prod(dims: Sequence[Dim]) -> Dim:
    total: Dim = 1
    for d in dims:
        total = total * d
    return total


def broadcast(shapes: Sequence[Shape | None]) -> Shape | None:
    if any(s is None for s in shapes):
        return None
    rank = max((len(s) for s in shapes), default=0)  # type: ignore[arg-type]
    out: list[Dim] = []
    for axis in range(rank):
        dims = {s[len(s) - rank + axis] for s in shapes if len(s) - rank + axis >= 0}  # type: ignore[arg-type]
        dims.discard(1)
        if not dims:
            out.append(1)
        elif len(dims) == 1:
            out.append(dims.pop())
        else:
            return None  # symbolic dims we cannot prove equal, or a broadcast error
    return tuple(out)


def _axis(axis: int, rank: int) -> int:
    return axis + rank if axis < 0 else axis


def _same(shapes, attrs, values):
    return shapes[0]


def _transpose(shapes, attrs, values):
    x = shapes[0]
    perm = attrs.get("perm") or tuple(reversed(range(len(x))))
    if sorted(perm) != list(range(len(x))):
        return None
    return tuple(x[p] for p in perm)


def _reshape(shapes, attrs, values):
    x, target = shapes[0], values.get(1)
    if target is None:
        return None
    out: list[Dim] = []
    infer = None
    for i, d in enumerate(target):
        if isinstance(d, int) and d == 0 and not attrs.get("allowzero"):
            if i >= len(x):
                return None
            out.append(x[i])
        elif isinstance(d, int) and d == -1:
            infer = i
            out.append(1)
        else:
            out.append(d)
    if infer is not None:
        known = _prod(out)
        total = _prod(x)
        if isinstance(known, int) and known > 0 and isinstance(total, int):
            out[infer] = total // known
        elif isinstance(known, int) and known > 0:
            out[infer] = dim_floordiv(total, known)  # type: ignore[arg-type]
        else:
            return None
    return tuple(out)


def _flatten(shapes, attrs, values):
    x = shapes[0]
    axis = _axis(attrs.get("axis", 1), len(x))
    return (_prod(x[:axis]), _prod(x[axis:]))


def _squeeze(shapes, attrs, values):
    x = shapes[0]
    axes = attrs.get("axes")
    if not axes:
        if any(not isinstance(d, int) for d in x):
            return None
        return tuple(d for d in x if d != 1)
    drop = {_axis(a, len(x)) for a in axes}
    return tuple(d for i, d in enumerate(x) if i not in drop)


def _unsqueeze(shapes, attrs, values):
    x = list(shapes[0])
    axes = attrs.get("axes") or ()
    rank = len(x) + len(axes)
    for a in sorted(_axis(a, rank) for a in axes):
        x.insert(a, 1)
    return tuple(x)


def _matmul(shapes, attrs, values):
    a, b = shapes[0], shapes[1]
    if len(a) < 1 or len(b) < 1:
        return None
    a2 = (1,) + a if len(a) == 1 else a
    b2 = b + (1,) if len(b) == 1 else b
    batch = broadcast([a2[:-2], b2[:-2]])
    if batch is None:
        return None
    out = batch + (a2[-2], b2[-1])
    if len(a) == 1:
        out = out[:-2] + out[-1:]
    if len(b) == 1:
        out = out[:-1]
    return out


def _gemm(shapes, attrs, values):
    a, b = shapes[0], shapes[1]
    m = a[1] if attrs.get("transA") else a[0]
    n = b[0] if attrs.get("transB") else b[1]
    return (m, n)


def _window(x: Shape, kernel: Sequence[int], attrs: dict, channels: Dim) -> Shape | None:
    spatial = len(x) - 2
    strides = attrs.get("strides") or (1,) * spatial
    dilations = attrs.get("dilations") or (1,) * spatial
    pads = attrs.get("pads") or (0,) * (2 * spatial)
    auto_pad = attrs.get("auto_pad") or "NOTSET"
    ceil_mode = attrs.get("ceil_mode", 0)
    out: list[Dim] = [x[0], channels]
    for i in range(spatial):
        size = x[2 + i]
        if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            if not isinstance(size, int):
                return None
            out.append(-(-size // strides[i]))
            continue
        if auto_pad == "VALID":
            pads_i = 0
        else:
            pads_i = pads[i] + pads[i + spatial]
        span = (kernel[i] - 1) * dilations[i] + 1
        numer = size + pads_i - span
        if isinstance(numer, int):
            out.append((-(-numer // strides[i]) if ceil_mode else numer // strides[i]) + 1)
        elif ceil_mode:
            return None
        else:
            out.append(dim_floordiv(numer, strides[i]) + 1)
    return tuple(out)


def _conv(shapes, attrs, values):
    x, w = shapes[0], shapes[1]
    kernel = attrs.get("kernel_shape") or w[2:]
    if any(not isinstance(k, int) for k in kernel):
        return None
    return _window(x, kernel, attrs, w[0])


def _pool(shapes, attrs, values):
    x = shapes[0]
    kernel = attrs.get("kernel_shape")
    if not kernel:
        return None
    return _window(x, kernel, attrs, x[1])


def _global_pool(shapes, attrs, values):
    x = shapes[0]
    return tuple(x[:2]) + (1,) * (len(x) - 2)


def _reduce(shapes, attrs, values):
    x = shapes[0]
    axes = attrs.get("axes")
    if not axes:
        if attrs.get("noop_with_empty_axes"):
            return x
        axes = tuple(range(len(x)))
    axes = {_axis(a, len(x)) for a in axes}
    if attrs.get("keepdims", 1):
        return tuple(1 if i in axes else d for i, d in enumerate(x))
    return tuple(d for i, d in enumerate(x) if i not in axes)


def _arg_reduce(shapes, attrs, values):
    x = shapes[0]
    axis = _axis(attrs.get("axis", 0), len(x))
    if attrs.get("keepdims", 1):
        return tuple(1 if i == axis else d for i, d in enumerate(x))
    return tuple(d for i, d in enumerate(x) if i != axis)


def _concat(shapes, attrs, values):
    parts = shapes[0]
    if not parts or "axis" not in attrs:
        return None
    rank = len(parts[0])
    axis = _axis(attrs["axis"], rank)
    total: Dim = 0
    for part in parts:
        if len(part) != rank:
            return None
        total = total + part[axis]
    return tuple(total if i == axis else d for i, d in enumerate(parts[0]))


def _pad(shapes, attrs, values):
    x = shapes[0]
    pads = attrs.get("pads")
    if not pads or len(pads) != 2 * len(x):
        return None
    return tuple(d + pads[i] + pads[i + len(x)] for i, d in enumerate(x))


def _slice(shapes, attrs, values):
    x = shapes[0]
    starts, ends = attrs.get("starts"), attrs.get("ends")
    if starts is None or ends is None:
        return None
    axes = attrs.get("axes") or tuple(range(len(starts)))
    steps = attrs.get("steps") or (1,) * len(starts)
    out = list(x)
    for start, end, axis, step in zip(starts, ends, axes, steps, strict=False):
        axis = _axis(axis, len(x))
        size = x[axis]
        if not isinstance(size, int) or step == 0:
            return None
        out[axis] = len(range(*slice(start, end, step).indices(size)))
    return tuple(out)


def _elementwise(shapes, attrs, values):
    flat: list = []
    for s in shapes:
        if isinstance(s, list):
            flat.extend(s)
        elif s is not None:
            flat.append(s)
    return broadcast(flat)


def _expand(shapes, attrs, values):
    target = values.get(1)
    if target is None:
        return None
    return broadcast([shapes[0], tuple(target)])


def _split0(shapes, attrs, values):
    x = shapes[0]
    split = attrs.get("split")
    if not split:
        return None
    axis = _axis(attrs.get("axis", 0), len(x))
    return tuple(split[0] if i == axis else d for i, d in enumerate(x))


SHAPE_FUNCTIONS: dict[str, ShapeFn] = {
    "Split": _split0,
    "QuantizeLinear": _same,
    "DequantizeLinear": _same,
    "Transpose": _transpose,
    "Reshape": _reshape,
    "Flatten": _flatten,
    "Squeeze": _squeeze,
    "Unsqueeze": _unsqueeze,
    "MatMul": _matmul,
    "Gemm": _gemm,
    "Conv": _conv,
    "MaxPool": _pool,
    "AveragePool": _pool,
    "GlobalAveragePool": _global_pool,
    "GlobalMaxPool": _global_pool,
    "ArgMax": _arg_reduce,
    "ArgMin": _arg_reduce,
    "Concat": _concat,
    "Pad": _pad,
    "Slice": _slice,
    "Expand": _expand,
    "Softmax": _same,
    "LogSoftmax": _same,
    "LRN": _same,
    "BatchNormalization": _same,
    "InstanceNormalization": _same,
    "LayerNormalization": _same,
    "CumSum": _same,
    "Dropout": _same,
}
for _name in ("ReduceSum", "ReduceMean", "ReduceProd", "ReduceMax", "ReduceMin", "ReduceL2"):
    SHAPE_FUNCTIONS[_name] = _reduce

# ops whose output needs the *value* of input i (a small int constant)
VALUE_INPUTS: dict[str, tuple[int, ...]] = {"Reshape": (1,), "Expand": (1,)}


def shape_function(op: str, mapping: str) -> ShapeFn | None:
    """The shape rule for an op: a named one, else broadcasting for elementwise ops."""
    if op in SHAPE_FUNCTIONS:
        return SHAPE_FUNCTIONS[op]
    if mapping == "one_to_one":
        return _elementwise
    return None


def infer(op: str, mapping: str, shapes: list, attrs: dict, values: dict) -> Shape | None:
    fn = shape_function(op, mapping)
    if fn is None:
        return None
    try:
        return fn(shapes, attrs, values)
    except (IndexError, KeyError, TypeError, ValueError, ZeroDivisionError):
        return None


__all__ = ["DimExpr", "SHAPE_FUNCTIONS", "VALUE_INPUTS", "broadcast", "infer", "shape_function"]
