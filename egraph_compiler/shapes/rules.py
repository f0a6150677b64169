"""Forward shape rules, one function per op family (ONNX opset-17 semantics, IR attrs).

A rule takes a `Context` and returns one `TensorType` per node output. Dims may be
symbolic; a dim no rule can express becomes a fresh symbol, never a guess (for a term
no model vouches for, `ctx.assume_valid` is False and such a dim makes the shape unknown).
Flatten and Unsqueeze use the rule language's exact shape functions (`dsl.shape_builtins`);
Reshape and Squeeze cannot: over a model assumed valid they give a fresh dim where the
exact function must refuse (a -1 beside symbolic dims that do not cancel), honour
allowzero, and take a squeezed symbolic dim to be 1, where a rule must prove it.
"""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction

from egraph_compiler import ops
from egraph_compiler.dsl import shape_builtins
from egraph_compiler.ir.dims import Dim, dim_add, dim_floordiv, dim_mul
from egraph_compiler.ir.graph import Node, TensorType
from egraph_compiler.ir.onnx_types import dtype_from_onnx
from egraph_compiler.ops.quantised import INTEGER_SIGNATURES, float_operands
from egraph_compiler.shapes.prover import prove_le
from egraph_compiler.shapes.symbolic import cancel_div, ceil_div, normalize_axis, product

Rule = Callable[["Context"], list[TensorType]]  # noqa: F821 (Context lives in infer.py)
INT_MAX = 2**62  # slice bounds at or beyond this mean "to the end"

# Operators rules/operators.dnnr does not declare (yet): their shape kind stays here.
_UNDECLARED_SAME = frozenset({"RandomNormalLike", "RandomUniformLike"})
# The shipped library's shape kinds (`ops` derives them from the op declarations).
SAME_SHAPE = _UNDECLARED_SAME | {n for n, i in ops.shipped().ops.items() if i.shape == "same"}
BROADCAST = frozenset(n for n, i in ops.shipped().ops.items() if i.shape == "broadcast")


def _declared_dtype(ctx) -> str | None:
    """The output dtype the registry declares (``-> bool``, ``-> dtype(to)``, ``like(x)``), or
    None where the declaration cannot tell (``like`` a tensor attribute, no declaration)."""
    info = ops.current().get(ctx.node.op)
    if info is None:
        return None
    dtypes = [ctx.dtype(i) if ctx.has(i) else None for i in range(len(ctx.node.inputs))]
    return info.output_dtype(dtypes, ctx.attrs, lambda code: dtype_from_onnx(code, ctx.where))


def _dtype(ctx) -> str:
    return _declared_dtype(ctx) or ctx.dtype(0)


def _same(ctx) -> list[TensorType]:
    # BatchNormalization has one output in the IR (the importer refuses its training outputs)
    return [TensorType(_dtype(ctx), ctx.shape(0))]


def _broadcast(ctx) -> list[TensorType]:
    shapes = [ctx.need_shape(i) for i in range(len(ctx.node.inputs)) if ctx.has(i)]
    return [TensorType(_dtype(ctx), ctx.broadcast(shapes))]


def _same_dim(ctx, a: Dim, b: Dim, what: str) -> None:
    """Static dims that must agree and do not are the model's error; symbolic ones are not guessed."""
    if isinstance(a, int) and isinstance(b, int) and a != b:
        raise ctx.error(f"{what} disagree: {a} vs {b}")


def _matmul_shape(ctx, a: tuple[Dim, ...], b: tuple[Dim, ...]) -> tuple[Dim, ...]:
    if not a or not b:
        raise ctx.error("MatMul operands must have rank >= 1")
    a2 = (1, *a) if len(a) == 1 else a
    b2 = (*b, 1) if len(b) == 1 else b
    _same_dim(ctx, a2[-1], b2[-2], "MatMul inner dims")
    batch = ctx.broadcast([a2[:-2], b2[:-2]])
    shape = (*batch, a2[-2], b2[-1])
    if len(a) == 1:
        shape = shape[:-2] + shape[-1:]
    if len(b) == 1:
        shape = shape[:-1]
    return shape


def _matmul(ctx) -> list[TensorType]:
    return [TensorType(ctx.dtype(0), _matmul_shape(ctx, ctx.need_shape(0), ctx.need_shape(1)))]


def _gemm(ctx) -> list[TensorType]:
    a, b = ctx.need_shape(0), ctx.need_shape(1)
    if len(a) != 2 or len(b) != 2:
        raise ctx.error("Gemm operands must be 2-D")
    m, k = (a[1], a[0]) if ctx.attrs.get("transA", 0) else (a[0], a[1])
    k2, n = (b[1], b[0]) if ctx.attrs.get("transB", 0) else (b[0], b[1])
    _same_dim(ctx, k, k2, "Gemm inner dims")
    return [TensorType(ctx.dtype(0), (m, n))]


def _window(ctx, spatial: tuple[Dim, ...], kernel: tuple[int, ...], transposed: bool = False) -> tuple[Dim, ...]:
    """Output spatial dims of a conv/pool window: (H + pads - dilation*(k-1) - 1)//stride + 1."""
    n = len(spatial)
    strides = ctx.attrs.get("strides") or (1,) * n
    dilations = ctx.attrs.get("dilations") or (1,) * n
    for key, length in (("strides", n), ("dilations", n), ("pads", 2 * n), ("kernel_shape", n)):
        given = ctx.attrs.get(key)
        if given is not None and len(given) != length:
            raise ctx.error(f"{key} has {len(given)} values for {n} spatial dims")
    if len(kernel) != n or any(v < 1 for v in (*kernel, *strides, *dilations)):
        raise ctx.error(f"kernel {tuple(kernel)}, strides and dilations must be positive, one per spatial dim")
    pads = ctx.attrs.get("pads") or (0,) * (2 * n)
    auto_pad = ctx.attrs.get("auto_pad", "NOTSET")
    ceil_mode = ctx.attrs.get("ceil_mode", 0)
    out: list[Dim] = []
    for i, size in enumerate(spatial):
        stride, extent = strides[i], dilations[i] * (kernel[i] - 1) + 1
        if transposed:
            out.append(_transposed_dim(ctx, i, size, stride, extent, pads, auto_pad, n))
            continue
        if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            out.append(ceil_div(size, stride))
            continue
        total_pad = 0 if auto_pad == "VALID" else pads[i] + pads[i + n]
        span = dim_add(size, total_pad - extent)
        if ceil_mode:
            span = dim_add(span, stride - 1)
        out.append(dim_add(dim_floordiv(span, stride), 1))
    return tuple(out)


def _transposed_dim(ctx, i: int, size: Dim, stride: int, extent: int, pads, auto_pad: str, n: int) -> Dim:
    output_shape = ctx.attrs.get("output_shape")
    if output_shape:
        return output_shape[-n + i]
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        return dim_mul(size, stride)
    output_padding = (ctx.attrs.get("output_padding") or (0,) * n)[i]
    total_pad = 0 if auto_pad == "VALID" else pads[i] + pads[i + n]
    return dim_add(dim_mul(dim_add(size, -1), stride), output_padding + extent - total_pad)


def _conv(ctx) -> list[TensorType]:
    op = ctx.node.op
    x, w = ctx.need_shape(0), ctx.need_shape(1)
    kernel = ctx.attrs.get("kernel_shape") or tuple(w[2:])
    if not all(isinstance(k, int) for k in kernel):
        raise ctx.error("kernel dims must be static")
    transposed = op == "ConvTranspose"
    if len(x) != len(w) or len(kernel) != len(x) - 2:
        raise ctx.error(f"input rank {len(x)}, weight rank {len(w)} and kernel {tuple(kernel)} disagree")
    in_channels = w[0] if transposed else dim_mul(w[1], ctx.attrs.get("group", 1))
    _same_dim(ctx, x[1], in_channels, "input channels")
    channels = dim_mul(w[1], ctx.attrs.get("group", 1)) if transposed else w[0]
    spatial = _window(ctx, tuple(x[2:]), tuple(kernel), transposed)
    return [TensorType(ctx.dtype(0), (x[0], channels, *spatial))]


def _pool(ctx) -> list[TensorType]:
    x = ctx.need_shape(0)
    kernel = tuple(ctx.attrs["kernel_shape"])
    shape = (x[0], x[1], *_window(ctx, tuple(x[2:]), kernel))
    out = [TensorType(ctx.dtype(0), shape)]
    if len(ctx.node.outputs) > 1:
        out.append(TensorType("int64", shape))
    return out


def _global_pool(ctx) -> list[TensorType]:
    x = ctx.need_shape(0)
    return [TensorType(ctx.dtype(0), (x[0], x[1], *(1,) * (len(x) - 2)))]


def _exact(ctx, function, *args) -> tuple[Dim, ...]:
    """A shape function of the rule language (`dsl.shape_builtins`), exact for every
    input, so shape inference and the rules agree; where it fails the model is wrong."""
    try:
        return function(*args)
    except ValueError as error:
        raise ctx.error(str(error)) from None


def _flatten(ctx) -> list[TensorType]:
    shape = _exact(ctx, shape_builtins.flatten_shape, ctx.need_shape(0), int(ctx.attrs.get("axis", 1)))
    return [TensorType(ctx.dtype(0), shape)]


def _reshape(ctx) -> list[TensorType]:
    target = ctx.value(1)
    x = ctx.shape(0)
    if target is None:
        length = ctx.need_shape(1)
        if len(length) != 1 or not isinstance(length[0], int):
            raise ctx.error("Reshape target must be a 1-D tensor of static length")
        return [TensorType(ctx.dtype(0), tuple(ctx.fresh() for _ in range(length[0])))]
    dims: list[Dim | None] = []
    for i, dim in enumerate(target):
        if dim == 0 and not ctx.attrs.get("allowzero", 0):
            if x is None or i >= len(x):
                raise ctx.error("Reshape copies a dim (0) the input does not have")
            dims.append(x[i])
        elif dim == -1:
            dims.append(None)
        else:
            dims.append(dim)
    if dims.count(None) > 1:
        raise ctx.error("Reshape target has more than one -1")
    if x is not None and None not in dims and all(isinstance(d, int) for d in (*x, *dims)) \
            and product(x) != product(dims):  # type: ignore[arg-type]
        raise ctx.error(f"cannot reshape {tuple(x)} to {tuple(dims)}")
    if None in dims:
        known = [d for d in dims if d is not None]
        inferred = cancel_div(list(x), known) if x is not None else None
        dims[dims.index(None)] = inferred if inferred is not None else ctx.fresh()
    return [TensorType(ctx.dtype(0), tuple(dims))]  # type: ignore[arg-type]


def _transpose(ctx) -> list[TensorType]:
    x = ctx.need_shape(0)
    perm = ctx.attrs.get("perm") or tuple(reversed(range(len(x))))
    if sorted(perm) != list(range(len(x))):
        raise ctx.error(f"perm {tuple(perm)} is not a permutation of rank {len(x)}")
    return [TensorType(ctx.dtype(0), tuple(x[p] for p in perm))]


def _concat(ctx) -> list[TensorType]:
    shapes = [ctx.need_shape(i) for i in range(len(ctx.node.inputs)) if ctx.has(i)]
    rank = len(shapes[0])
    axis = normalize_axis(int(ctx.attrs["axis"]), rank, ctx.where)
    if any(len(s) != rank for s in shapes):
        raise ctx.error("Concat inputs have different ranks")
    total: Dim = 0
    for shape in shapes:
        total = dim_add(total, shape[axis])
    out = list(shapes[0])
    out[axis] = total
    for i in range(rank):
        if i != axis:
            for shape in shapes[1:]:
                _same_dim(ctx, shapes[0][i], shape[i], f"Concat dim {i}")
    for i in range(rank):  # in a valid node a static dim on any input pins a symbolic one
        if ctx.assume_valid and i != axis and not isinstance(out[i], int):
            out[i] = next((s[i] for s in shapes if isinstance(s[i], int)), out[i])
    return [TensorType(ctx.dtype(0), tuple(out))]


def _split(ctx) -> list[TensorType]:
    x = ctx.need_shape(0)
    axis = normalize_axis(int(ctx.attrs.get("axis", 0)), len(x), ctx.where)
    count = len(ctx.node.outputs)
    sizes = ctx.attrs.get("split") or ctx.value(1)
    if not sizes and ctx.has(1):  # sizes given at run time: each part's length is too
        sizes = [ctx.fresh() for _ in range(count)]
    if not sizes:
        dim = x[axis]
        if isinstance(dim, int):
            chunk = -(-dim // count)
            sizes = [min(chunk, max(dim - i * chunk, 0)) for i in range(count)]
        else:
            sizes = [dim_floordiv(dim, count)] * count
    return [TensorType(ctx.dtype(0), x[:axis] + (size,) + x[axis + 1:]) for size in sizes]


def _slice_dim(ctx, dim: Dim, start: int, end: int, step: int) -> Dim:
    if isinstance(dim, int):
        return len(range(*slice(start, end, step).indices(dim)))
    if step == 1:
        if start >= 0 and end >= INT_MAX and prove_le(start, dim, ctx.ranges):
            return dim_add(dim, -start)
        if start < 0 and end >= INT_MAX and prove_le(-start, dim, ctx.ranges):
            return -start
        if 0 <= start <= end < INT_MAX and prove_le(end, dim, ctx.ranges):
            return end - start
        if 0 <= start <= end and prove_le(dim, end, ctx.ranges) and prove_le(start, dim, ctx.ranges):
            return dim_add(dim, -start)  # the dim's range ends within the slice (--dim)
        if start >= 0 and end < 0 and prove_le(start - end, dim, ctx.ranges):
            return dim_add(dim, end - start)
        if start < 0 and end < 0 and prove_le(-start, dim, ctx.ranges):
            return max(end - start, 0)
    if step == -1 and start >= INT_MAX - 1 and end <= -INT_MAX:
        return dim
    return ctx.fresh()


def _symbolic_slice_dim(ctx, dim: Dim, start: Dim, end: Dim, step: Dim) -> Dim:
    """A unit-step slice whose bounds are dims (``x[:, :seq]`` from a Shape chain): without
    wrap-around or clamping, proved under the dim ranges, it has ``end - start`` elements
    (``dim - start`` where the range of ``dim`` ends within the slice)."""
    if step != 1 or not (isinstance(end, int) and end >= 0 or prove_le(0, end, ctx.ranges)) \
            or not prove_le(0, start, ctx.ranges):
        return ctx.fresh()
    if prove_le(end, dim, ctx.ranges) and prove_le(start, end, ctx.ranges):
        return dim_add(end, dim_mul(start, -1))
    if prove_le(dim, end, ctx.ranges) and prove_le(start, dim, ctx.ranges):
        return dim_add(dim, dim_mul(start, -1))
    return ctx.fresh()


def _slice(ctx) -> list[TensorType]:
    x = ctx.need_shape(0)
    if "starts" in ctx.attrs:
        starts, ends = ctx.attrs["starts"], ctx.attrs["ends"]
        axes, steps = ctx.attrs.get("axes"), ctx.attrs.get("steps")
    else:
        starts, ends, axes, steps = (ctx.value(i) if ctx.has(i) else None for i in range(1, 5))
        if starts is None or ends is None:
            return [TensorType(ctx.dtype(0), tuple(ctx.fresh() for _ in x))]
    axes = axes or tuple(range(len(starts)))
    steps = steps or (1,) * len(starts)
    out = list(x)
    for start, end, axis, step in zip(starts, ends, axes, steps, strict=True):
        axis = normalize_axis(int(axis), len(x), ctx.where)
        if not all(isinstance(v, int) for v in (start, end, step)):
            out[axis] = _symbolic_slice_dim(ctx, x[axis], start, end, step)
            continue
        out[axis] = _slice_dim(ctx, x[axis], start, end, step)
    return [TensorType(ctx.dtype(0), tuple(out))]


def _gather(ctx) -> list[TensorType]:
    x, indices = ctx.need_shape(0), ctx.need_shape(1)
    axis = normalize_axis(int(ctx.attrs.get("axis", 0)), len(x), ctx.where)
    return [TensorType(ctx.dtype(0), x[:axis] + indices + x[axis + 1:])]


def _gather_elements(ctx) -> list[TensorType]:
    return [TensorType(ctx.dtype(0), ctx.need_shape(1))]


def _axes_of(ctx, rank: int) -> tuple[int, ...] | None:
    axes = ctx.attrs.get("axes")
    if axes is None and ctx.has(1):
        axes = ctx.value(1)
        if axes is None:
            raise ctx.error("axes computed at run time are not supported by shape inference")
    if axes is None:
        return None
    return tuple(normalize_axis(int(a), rank, ctx.where) for a in axes)


def _runtime_axes_count(ctx) -> int | None:
    """How many axes a run-time axes input names (its static length), or None when the
    axes are known (an attribute, a tracked value, or absent). The dims they pick are not
    known, so the output gets fresh dims; an unknown length leaves the rank unknown."""
    if ctx.attrs.get("axes") is not None or not ctx.has(1) or ctx.value(1) is not None:
        return None
    length = ctx.need_shape(1)
    if len(length) != 1 or not isinstance(length[0], int):
        raise ctx.unknown()
    return length[0]


def _unsqueeze(ctx) -> list[TensorType]:
    x = ctx.need_shape(0)
    runtime = _runtime_axes_count(ctx)
    if runtime is not None:
        return [TensorType(ctx.dtype(0), tuple(ctx.fresh() for _ in range(len(x) + runtime)))]
    count = len(ctx.attrs.get("axes") or ctx.value(1) or ())
    axes = _axes_of(ctx, len(x) + count) or ()
    return [TensorType(ctx.dtype(0), _exact(ctx, shape_builtins.unsqueeze_shape, x, axes))]


def _squeeze(ctx) -> list[TensorType]:
    x = ctx.need_shape(0)
    runtime = _runtime_axes_count(ctx)
    if runtime is not None:
        return [TensorType(ctx.dtype(0), tuple(ctx.fresh() for _ in range(len(x) - runtime)))]
    axes = _axes_of(ctx, len(x))
    if axes is None:  # only static 1s are removed: a symbolic dim is never assumed to be 1
        if not ctx.assume_valid and not all(isinstance(d, int) for d in x):
            raise ctx.unknown()
        axes = tuple(i for i, d in enumerate(x) if d == 1)
    for axis in axes:
        if isinstance(x[axis], int) and x[axis] != 1:
            raise ctx.error(f"cannot squeeze axis {axis} of size {x[axis]}")
    return [TensorType(ctx.dtype(0), tuple(d for i, d in enumerate(x) if i not in axes))]


def _reduce(ctx) -> list[TensorType]:
    x = ctx.need_shape(0)
    runtime = _runtime_axes_count(ctx)
    if runtime:  # which dims shrink to 1 (or go) is known only at run time
        if ctx.attrs.get("keepdims", 1):
            return [TensorType(ctx.dtype(0), tuple(1 if d == 1 else ctx.fresh() for d in x))]
        return [TensorType(ctx.dtype(0), tuple(ctx.fresh() for _ in range(len(x) - runtime)))]
    axes = () if runtime == 0 else _axes_of(ctx, len(x))  # an empty run-time list: no axes
    if not axes and ctx.attrs.get("noop_with_empty_axes", 0):
        return [TensorType(ctx.dtype(0), x)]
    if not axes:
        axes = tuple(range(len(x)))
    keep = ctx.attrs.get("keepdims", 1)
    out = tuple((1 if keep else None) if i in axes else d for i, d in enumerate(x))
    return [TensorType(ctx.dtype(0), tuple(d for d in out if d is not None))]


def _argreduce(ctx) -> list[TensorType]:
    x = ctx.need_shape(0)
    axis = normalize_axis(int(ctx.attrs.get("axis", 0)), len(x), ctx.where)
    keep = ctx.attrs.get("keepdims", 1)
    out = tuple((1 if keep else None) if i == axis else d for i, d in enumerate(x))
    return [TensorType("int64", tuple(d for d in out if d is not None))]


def _shape(ctx) -> list[TensorType]:
    x = ctx.need_shape(0)
    start, end = int(ctx.attrs.get("start", 0)), ctx.attrs.get("end")
    dims = x[slice(start, None if end is None else int(end))]
    return [TensorType("int64", (len(dims),))]


def _size(ctx) -> list[TensorType]:
    return [TensorType("int64", ())]


def _constant_of_shape(ctx) -> list[TensorType]:
    value = ctx.attrs.get("value")
    if value is None or isinstance(value, (int, float)):  # the e-graph holds the fill as a number
        dtype = "int64" if isinstance(value, int) else "float32"
    else:
        dtype = value.dtype
    dims = ctx.value(0)
    if dims is None:
        length = ctx.need_shape(0)
        dims = tuple(ctx.fresh() for _ in range(length[0] if isinstance(length[0], int) else 0))
    return [TensorType(dtype, tuple(dims))]


def _range(ctx) -> list[TensorType]:
    start, limit, delta = (ctx.value(i) for i in range(3))
    if start is None or limit is None or delta is None:
        return [TensorType(ctx.dtype(0), (ctx.fresh(),))]
    s, lim, d = start[0], limit[0], delta[0]
    if all(isinstance(v, int) for v in (s, lim, d)):
        return [TensorType(ctx.dtype(0), (max(-(-(lim - s) // d), 0),))]
    if d == 1 and prove_le(s, lim, ctx.ranges):
        return [TensorType(ctx.dtype(0), (dim_add(lim, dim_mul(s, -1)),))]
    return [TensorType(ctx.dtype(0), (ctx.fresh(),))]


def _expand(ctx) -> list[TensorType]:
    x = ctx.need_shape(0)
    target = ctx.value(1)
    if target is None:
        length = ctx.need_shape(1)[0]
        target = tuple(ctx.fresh() for _ in range(length if isinstance(length, int) else 0))
    return [TensorType(ctx.dtype(0), ctx.broadcast([x, tuple(target)]))]


def _tile(ctx) -> list[TensorType]:
    x, repeats = ctx.need_shape(0), ctx.value(1)
    if repeats is None:
        return [TensorType(ctx.dtype(0), tuple(ctx.fresh() for _ in x))]
    return [TensorType(ctx.dtype(0), tuple(dim_mul(d, r) for d, r in zip(x, repeats, strict=True)))]


def _pad(ctx) -> list[TensorType]:
    x = ctx.need_shape(0)
    pads = ctx.attrs.get("pads")
    if pads is None:
        return [TensorType(ctx.dtype(0), tuple(ctx.fresh() for _ in x))]
    axes = ctx.attrs.get("axes") or tuple(range(len(x)))
    if len(pads) != 2 * len(axes):
        raise ctx.error(f"{len(pads)} pads for {len(axes)} axes (two per axis)")
    out = list(x)
    for i, axis in enumerate(axes):
        axis = normalize_axis(int(axis), len(x), ctx.where)
        out[axis] = dim_add(out[axis], pads[i] + pads[i + len(axes)])
    return [TensorType(ctx.dtype(0), tuple(out))]


def _resize(ctx) -> list[TensorType]:
    x = ctx.need_shape(0)
    sizes = ctx.value(3)
    axes = ctx.attrs.get("axes")  # opset 18: sizes or scales name only these axes
    if axes is not None or ctx.attrs.get("keep_aspect_ratio_policy", "stretch") != "stretch":
        picked = [normalize_axis(int(a), len(x), ctx.where) for a in (axes or range(len(x)))]
        policy = ctx.attrs.get("keep_aspect_ratio_policy", "stretch")
        if sizes is not None and policy == "stretch":
            given = dict(zip(picked, sizes, strict=True))
            return [TensorType(ctx.dtype(0), tuple(given.get(i, d) for i, d in enumerate(x)))]
        if sizes is not None and all(isinstance(x[a], int) for a in picked):
            # ONNX: one scale for the named axes, the smallest (not_larger) or largest
            # (not_smaller) size ratio, and round-half-up lengths
            ratios = [s / x[a] for a, s in zip(picked, sizes, strict=True)]
            scale = min(ratios) if policy == "not_larger" else max(ratios)
            return [TensorType(ctx.dtype(0), tuple(int(scale * d + 0.5) if i in picked else d
                                                   for i, d in enumerate(x)))]
        scales = ctx.const(2)
        if sizes is None and scales is not None:
            given = dict(zip(picked, scales.reshape(-1).tolist(), strict=True))
            return [TensorType(ctx.dtype(0), tuple(
                dim_floordiv(dim_mul(d, Fraction(given[i]).numerator), Fraction(given[i]).denominator)
                if i in given else d for i, d in enumerate(x)))]
        # scales of some axes, or sizes fitted keeping the aspect ratio: fresh dims there
        return [TensorType(ctx.dtype(0), tuple(ctx.fresh() if i in picked else d for i, d in enumerate(x)))]
    if sizes is not None:
        return [TensorType(ctx.dtype(0), tuple(sizes))]
    scales = ctx.const(2)
    if scales is None:
        return [TensorType(ctx.dtype(0), tuple(ctx.fresh() for _ in x))]
    out: list[Dim] = []
    for dim, scale in zip(x, scales.reshape(-1).tolist(), strict=True):
        ratio = Fraction(scale)  # floor(dim * scale), exactly
        out.append(dim_floordiv(dim_mul(dim, ratio.numerator), ratio.denominator))
    return [TensorType(ctx.dtype(0), tuple(out))]


def _layer_norm(ctx) -> list[TensorType]:
    x = ctx.need_shape(0)
    axis = normalize_axis(int(ctx.attrs.get("axis", -1)), len(x), ctx.where)
    stats = tuple(d if i < axis else 1 for i, d in enumerate(x))
    return [TensorType(ctx.dtype(0), x), TensorType("float32", stats), TensorType("float32", stats)][: len(ctx.node.outputs)]


def _topk(ctx) -> list[TensorType]:
    x, k = ctx.need_shape(0), ctx.value(1)
    axis = normalize_axis(int(ctx.attrs.get("axis", -1)), len(x), ctx.where)
    out = list(x)
    out[axis] = k[0] if k is not None else ctx.fresh()
    return [TensorType(ctx.dtype(0), tuple(out)), TensorType("int64", tuple(out))]


def _nonzero(ctx) -> list[TensorType]:
    return [TensorType("int64", (len(ctx.need_shape(0)), ctx.fresh()))]


def _depth_to_space(ctx) -> list[TensorType]:
    n, c, h, w = ctx.need_shape(0)
    block = int(ctx.attrs["blocksize"])
    return [TensorType(ctx.dtype(0), (n, dim_floordiv(c, block * block), dim_mul(h, block), dim_mul(w, block)))]


def _space_to_depth(ctx) -> list[TensorType]:
    n, c, h, w = ctx.need_shape(0)
    block = int(ctx.attrs["blocksize"])
    return [TensorType(ctx.dtype(0), (n, dim_mul(c, block * block), dim_floordiv(h, block), dim_floordiv(w, block)))]


def _einsum(ctx) -> list[TensorType]:
    equation = str(ctx.attrs["equation"]).replace(" ", "")
    if "..." in equation:
        raise ctx.error("Einsum with an ellipsis is not supported by shape inference")
    lhs, _, rhs = equation.partition("->")
    terms = lhs.split(",")
    sizes: dict[str, Dim] = {}
    for index, term in enumerate(terms):
        shape = ctx.need_shape(index)
        if len(term) != len(shape):
            raise ctx.error(f"Einsum term {term!r} does not match input rank {len(shape)}")
        for letter, dim in zip(term, shape, strict=True):
            if letter not in sizes or sizes[letter] == 1:
                sizes[letter] = dim
    if not _:
        counts = {c: lhs.count(c) for c in set(lhs) - {","}}
        rhs = "".join(sorted(c for c, n in counts.items() if n == 1))
    return [TensorType(ctx.dtype(0), tuple(sizes[c] for c in rhs))]


def _quantised(ctx) -> list[TensorType]:
    """An integer operator (`ops.quantised`): its float operator's shape over the value
    operands, the dtype of its output zero point (uint8 where absent)."""
    node = ctx.node
    float_op, y_zero = INTEGER_SIGNATURES[node.op][0], INTEGER_SIGNATURES[node.op][4][1]
    operands = tuple(node.inputs[i] if i < len(node.inputs) else "" for i in float_operands(node.op))
    as_float = type(ctx)(ctx.state, Node(float_op, operands, node.outputs[:1], node.attrs, node.name))
    return [TensorType(ctx.dtype(y_zero) if ctx.has(y_zero) else "uint8", rule_for(float_op)(as_float)[0].shape)]


def _dynamic_quantize(ctx) -> list[TensorType]:
    return [TensorType("uint8", ctx.shape(0)), TensorType("float32", ()), TensorType("uint8", ())]


# The operators whose shape rule is not one their declaration names: those no rule file
# declares, and the integer operators (their float operator's shape, `ops.quantised`).
RULES: dict[str, Rule] = {
    **{op: _same for op in _UNDECLARED_SAME}, **{op: _quantised for op in INTEGER_SIGNATURES},
}


def rule_for(op: str, info: ops.OpInfo | None = None) -> Rule | None:
    """The shape rule of ``op``: its own, else the shape its declaration (``info``, by default
    the active registry's) names or implies: ``same``, ``broadcast`` (an elementwise operator
    declared only in a rule file broadcasts) or ``builtin NAME``, in the declared dtype."""
    rule = RULES.get(op)
    if rule is not None:
        return rule
    info = info if info is not None else ops.current().get(op)
    kind = (info.shape if info is not None else None) or ""
    function = SHAPE_FUNCTIONS.get(kind.removeprefix("builtin "))
    if function is None or info is None or info.decl.dtype is None or not kind.startswith("builtin "):
        return function
    return lambda ctx: [TensorType(_declared_dtype(ctx) or t.dtype, t.shape) for t in function(ctx)]


# The shape functions an op declaration may name (`shape builtin NAME`, rules/README.md).
SHAPE_FUNCTIONS: dict[str, Rule] = {
    "same": _same, "broadcast": _broadcast, "matmul": _matmul, "gemm": _gemm, "conv": _conv,
    "pool": _pool, "global_pool": _global_pool, "reduce": _reduce, "argreduce": _argreduce,
    "flatten": _flatten, "transpose": _transpose, "concat": _concat, "gather": _gather,
    "unsqueeze": _unsqueeze, "squeeze": _squeeze, "expand": _expand, "tile": _tile, "pad": _pad,
    "reshape": _reshape, "split": _split, "slice": _slice, "gather_elements": _gather_elements,
    "shape": _shape, "size": _size, "constant_of_shape": _constant_of_shape, "range": _range,
    "resize": _resize, "layer_norm": _layer_norm, "topk": _topk, "nonzero": _nonzero,
    "depth_to_space": _depth_to_space, "space_to_depth": _space_to_depth,
    "dynamic_quantize_linear": _dynamic_quantize, "einsum": _einsum,
}


# The inputs whose *value* (a small int vector) a shape function computes the output shape
# from: without it the rule can only make fresh dims. Other inputs matter by their shapes.
_VALUE_INPUTS: dict[str, tuple[int, ...]] = {
    "reshape": (1,), "expand": (1,), "tile": (1,), "topk": (1,), "constant_of_shape": (0,),
    "range": (0, 1, 2), "col2im": (1, 2), "dft": (1,), "stft": (1, 3), "window": (0,), "mel_weight_matrix": (0, 1),
}


def value_inputs(op: str, info: ops.OpInfo | None = None) -> tuple[int, ...]:
    """The inputs of ``op`` (declared by ``info``, else in the active registry) whose value
    its shape function reads."""
    info = info if info is not None else ops.current().get(op)
    return _VALUE_INPUTS.get(((info.shape if info is not None else None) or "").removeprefix("builtin "), ())


# -- real-model operators (issue 17): appended as one block ---------------------------------
def _gather_nd(ctx) -> list[TensorType]:
    """ONNX GatherND: indices[..., :m] address data[b:b+m]; out = indices[:-1] + data[b+m:]."""
    data, indices = ctx.need_shape(0), ctx.need_shape(1)
    batch_dims = int(ctx.attrs.get("batch_dims", 0))
    depth = indices[-1] if indices else None
    if not isinstance(depth, int):
        raise ValueError("GatherND needs a static last dim of indices")
    if batch_dims + depth > len(data):
        raise ValueError(f"indices address {batch_dims + depth} axes of a rank-{len(data)} input")
    return [TensorType(ctx.dtype(0), tuple(indices[:-1]) + tuple(data[batch_dims + depth:]))]


SHAPE_FUNCTIONS["gather_nd"] = _gather_nd


# -- the operator shape functions of dsl/shape_builtins.py (issue 17) ---------------------------
def _operator_shape(function) -> Rule:
    """A `shape_builtins.OPERATOR_SHAPES` function as a rule: a dim it cannot tell becomes a
    fresh symbol; a ValueError is the model's error at this node."""
    def rule(ctx) -> list[TensorType]:
        try:
            outs = function(ctx)
        except ValueError as error:
            raise ctx.error(str(error)) from None
        return [TensorType(dtype, tuple(ctx.fresh() if d is None else d for d in shape))
                for dtype, shape in outs[:len(ctx.node.outputs)]]
    return rule


SHAPE_FUNCTIONS.update({name: _operator_shape(function)
                        for name, function in shape_builtins.OPERATOR_SHAPES.items()})
