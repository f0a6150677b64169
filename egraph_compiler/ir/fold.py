"""A NumPy reference evaluator for constant folding.

`evaluate_node(op, attrs, inputs)` computes one operator on NumPy arrays with the
IR's semantics: ONNX opset 17, except that constant axes / split / slice bounds /
pads / clip bounds are attributes (see `Graph`). The importer folds constant
subgraphs with it and the e-graph extractor folds constant subterms created by
rewrites. An absent optional input is ``None``. Unknown ops and inputs the op
rejects raise `ModelError`, never a bare NumPy exception.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

import numpy as np

from egraph_compiler.ir.errors import ModelError
from egraph_compiler.ir.graph import AttrValue, TensorAttr
from egraph_compiler.ir.onnx_types import dtype_from_onnx

Array = np.ndarray
Attrs = Mapping[str, AttrValue]

# Kept as nodes even on constant inputs, by the importer and the extractor alike:
# quantized weights stay int8 for the backends (onnxruntime's constant folding keeps
# DequantizeLinear too), and random ops are not constants.
NEVER_FOLD = frozenset({"QuantizeLinear", "DequantizeLinear", "RandomNormal", "RandomUniform",
                        "RandomNormalLike", "RandomUniformLike", "Multinomial", "Bernoulli"})

_erf = np.frompyfunc(math.erf, 1, 1)


def _int_div(a: Array, b: Array) -> Array:
    # ONNX integer Div truncates toward zero (C semantics), NumPy floors.
    if np.any(b == 0):
        raise ModelError("integer division by zero")
    quotient = np.abs(a) // np.abs(b)
    return np.where((a < 0) != (b < 0), -quotient, quotient).astype(np.result_type(a, b))


def _div(a: Array, b: Array) -> Array:
    if np.issubdtype(a.dtype, np.integer):
        return _int_div(a, b)
    with np.errstate(divide="ignore", invalid="ignore"):
        return (a / b).astype(a.dtype)


def _mod(attrs: Attrs, a: Array, b: Array) -> Array:
    if np.issubdtype(a.dtype, np.integer) and np.any(b == 0):
        raise ModelError("integer modulo by zero")
    if attrs.get("fmod", 0):
        return np.fmod(a, b)
    return np.mod(a, b)


def _same_dtype(fn: Callable[..., Array]) -> Callable[..., Array]:
    def run(*args: Array) -> Array:
        with np.errstate(all="ignore"):
            return np.asarray(fn(*args)).astype(args[0].dtype)

    return run


_BINARY: dict[str, Callable[[Array, Array], Array]] = {
    "Add": _same_dtype(np.add),
    "Sub": _same_dtype(np.subtract),
    "Mul": _same_dtype(np.multiply),
    "Div": _div,
    "Pow": _same_dtype(np.power),
    "Equal": np.equal,
    "Less": np.less,
    "LessOrEqual": np.less_equal,
    "Greater": np.greater,
    "GreaterOrEqual": np.greater_equal,
    "And": np.logical_and,
    "Or": np.logical_or,
    "Xor": np.logical_xor,
    "BitwiseAnd": np.bitwise_and,
    "BitwiseOr": np.bitwise_or,
    "BitwiseXor": np.bitwise_xor,
}

_UNARY: dict[str, Callable[[Array], Array]] = {
    "Neg": np.negative,
    "Abs": np.abs,
    "Exp": np.exp,
    "Log": np.log,
    "Sqrt": np.sqrt,
    "Reciprocal": np.reciprocal,
    "Floor": np.floor,
    "Ceil": np.ceil,
    "Round": np.round,  # half to even, like ONNX
    "Sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x)),
    "Tanh": np.tanh,
    "Relu": lambda x: np.maximum(x, 0),
    "Erf": lambda x: _erf(x.astype(np.float64)),
    "Sin": np.sin,
    "Cos": np.cos,
    "Tan": np.tan,
    "Asin": np.arcsin,
    "Acos": np.arccos,
    "Atan": np.arctan,
    "Sinh": np.sinh,
    "Cosh": np.cosh,
    "Asinh": np.arcsinh,
    "Acosh": np.arccosh,
    "Atanh": np.arctanh,
    "Sign": np.sign,
    "Softplus": lambda x: np.log1p(np.exp(x)),
    "Softsign": lambda x: x / (1 + np.abs(x)),
    "Square": lambda x: x * x,  # not ONNX: rewrites create it (rules/operators.dnnr)
    "Identity": lambda x: x,
    "Dropout": lambda x: x,
}


def _unary_attr(op: str, attrs: Attrs, x: Array) -> Array:
    if op == "LeakyRelu":
        return np.where(x >= 0, x, x * attrs.get("alpha", 0.01))
    if op == "Elu":
        return np.where(x >= 0, x, attrs.get("alpha", 1.0) * (np.exp(x) - 1))
    if op == "Selu":
        alpha, gamma = attrs.get("alpha", 1.67326319217681884765625), attrs.get("gamma", 1.05070102214813232421875)
        return gamma * np.where(x > 0, x, alpha * (np.exp(x) - 1))
    if op == "HardSigmoid":
        return np.clip(attrs.get("alpha", 0.2) * x + attrs.get("beta", 0.5), 0, 1)
    if op == "HardSwish":
        return x * np.clip(x / 6 + 0.5, 0, 1)
    if op == "Clip":
        low, high = attrs.get("min"), attrs.get("max")
        out = x
        if low is not None:
            out = np.maximum(out, np.asarray(low).astype(x.dtype))
        if high is not None:
            out = np.minimum(out, np.asarray(high).astype(x.dtype))
        return out
    raise KeyError(op)


def _normalize_axis(axis: int, rank: int) -> int:
    if not -max(rank, 1) <= axis < max(rank, 1):
        raise ModelError(f"axis {axis} out of range for rank {rank}")
    return axis + rank if axis < 0 else axis


def _axes(attrs: Attrs, rank: int, key: str = "axes") -> tuple[int, ...] | None:
    axes = attrs.get(key)
    if axes is None:
        return None
    return tuple(_normalize_axis(int(a), rank) for a in axes)


def _reduce(op: str, attrs: Attrs, x: Array) -> Array:
    axes = _axes(attrs, x.ndim)
    if not axes:
        if attrs.get("noop_with_empty_axes", 0):
            return x
        axes = tuple(range(x.ndim))
    keep = bool(attrs.get("keepdims", 1))
    with np.errstate(all="ignore"):
        if op == "ReduceSum":
            out = np.sum(x, axis=axes, keepdims=keep)
        elif op == "ReduceMean":
            out = np.mean(x, axis=axes, keepdims=keep)
        elif op == "ReduceMax":
            out = np.max(x, axis=axes, keepdims=keep)
        elif op == "ReduceMin":
            out = np.min(x, axis=axes, keepdims=keep)
        elif op == "ReduceProd":
            out = np.prod(x, axis=axes, keepdims=keep)
        elif op == "ReduceL1":
            out = np.sum(np.abs(x), axis=axes, keepdims=keep)
        elif op == "ReduceL2":
            out = np.sqrt(np.sum(x * x, axis=axes, keepdims=keep))
        elif op == "ReduceSumSquare":
            out = np.sum(x * x, axis=axes, keepdims=keep)
        elif op == "ReduceLogSum":
            out = np.log(np.sum(x, axis=axes, keepdims=keep))
        else:  # ReduceLogSumExp
            out = np.log(np.sum(np.exp(x), axis=axes, keepdims=keep))
    return np.asarray(out).astype(x.dtype)


def _reshape(attrs: Attrs, x: Array, shape: Array) -> Array:
    target = [int(d) for d in shape.reshape(-1)]
    if not attrs.get("allowzero", 0):
        target = [x.shape[i] if d == 0 and i < x.ndim else d for i, d in enumerate(target)]
    return x.reshape(target)


def _slice(attrs: Attrs, x: Array) -> Array:
    starts, ends = attrs.get("starts", ()), attrs.get("ends", ())
    axes = _axes(attrs, x.ndim) or tuple(range(len(starts)))
    steps = attrs.get("steps") or (1,) * len(starts)
    index: list[slice] = [slice(None)] * x.ndim
    for start, end, axis, step in zip(starts, ends, axes, steps, strict=True):
        if step == 0:
            raise ModelError("Slice step is 0")
        index[axis] = slice(*_clamp_slice(int(start), int(end), int(step), x.shape[axis]))
    return x[tuple(index)]


def _clamp_slice(start: int, end: int, step: int, dim: int) -> tuple[int, int | None, int]:
    """ONNX Slice bounds as a Python slice (ONNX clamps huge values, Python does too)."""
    if start < 0:
        start += dim
    if end < 0:
        end += dim
    if step > 0:
        start, end = min(max(start, 0), dim), min(max(end, 0), dim)
        return start, end, step
    start = min(max(start, -1), dim - 1)
    end = min(max(end, -1), dim - 1)
    return start, (None if end < 0 else end), step


def _split(attrs: Attrs, x: Array, count: int) -> list[Array]:
    axis = _normalize_axis(int(attrs.get("axis", 0)), x.ndim)
    sizes = attrs.get("split")
    if not sizes:
        chunk = -(-x.shape[axis] // count)
        sizes = [min(chunk, max(x.shape[axis] - i * chunk, 0)) for i in range(count)]
    if sum(sizes) != x.shape[axis]:
        raise ModelError(f"Split sizes {tuple(sizes)} do not add up to {x.shape[axis]}")
    return np.split(x, np.cumsum(sizes)[:-1], axis=axis)


def _gemm(attrs: Attrs, a: Array, b: Array, c: Array | None) -> Array:
    if attrs.get("transA", 0):
        a = a.T
    if attrs.get("transB", 0):
        b = b.T
    out = attrs.get("alpha", 1.0) * (a @ b)
    if c is not None:
        out = out + attrs.get("beta", 1.0) * c
    return out.astype(a.dtype)


def _pad(attrs: Attrs, x: Array) -> Array:
    pads = list(attrs.get("pads", ()))
    axes = _axes(attrs, x.ndim) or tuple(range(x.ndim))
    width = [(0, 0)] * x.ndim
    for i, axis in enumerate(axes):
        width[axis] = (pads[i], pads[i + len(axes)])
    if any(p < 0 for pair in width for p in pair):
        raise ModelError("negative pads are not supported in constant folding")
    mode = attrs.get("mode", "constant")
    if mode == "constant":
        return np.pad(x, width, constant_values=np.asarray(attrs.get("value", 0)).astype(x.dtype))
    return np.pad(x, width, mode={"reflect": "reflect", "edge": "edge"}[str(mode)])


def _softmax(x: Array, axis: int, log: bool) -> Array:
    shifted = x - np.max(x, axis=axis, keepdims=True)
    exp = np.exp(shifted)
    total = np.sum(exp, axis=axis, keepdims=True)
    return (shifted - np.log(total) if log else exp / total).astype(x.dtype)


def _constant_of_shape(attrs: Attrs, shape: Array) -> Array:
    value = attrs.get("value")
    fill = value.to_numpy().reshape(-1)[0] if isinstance(value, TensorAttr) else np.float32(0)
    dims = tuple(int(d) for d in shape.reshape(-1))
    if any(d < 0 for d in dims):
        raise ModelError(f"ConstantOfShape with negative dims {dims}")
    # A read-only broadcast view: large weight fills cost no memory.
    return np.broadcast_to(np.asarray(fill), dims)


def _range(start: Array, limit: Array, delta: Array) -> Array:
    if delta.reshape(-1)[0] == 0:
        raise ModelError("Range delta is 0")
    count = max(math.ceil((limit.item() - start.item()) / delta.item()), 0)
    if count > 1 << 26:
        raise ModelError(f"Range of {count} elements is too large to fold")
    return (start.item() + np.arange(count) * delta.item()).astype(start.dtype)


def _quantize(attrs: Attrs, x: Array, scale: Array, zero: Array | None) -> Array:
    axis = _normalize_axis(int(attrs.get("axis", 1)), x.ndim) if scale.ndim else 0
    shape = [1] * x.ndim
    if scale.ndim:
        shape[axis] = -1
    dtype = zero.dtype if zero is not None else np.dtype("uint8")
    z = zero.reshape(shape).astype(np.int32) if zero is not None else 0
    info = np.iinfo(dtype)
    q = np.round(x / scale.reshape(shape)) + z
    return np.clip(q, info.min, info.max).astype(dtype)


def _dequantize(attrs: Attrs, x: Array, scale: Array, zero: Array | None) -> Array:
    axis = _normalize_axis(int(attrs.get("axis", 1)), x.ndim) if scale.ndim else 0
    shape = [1] * x.ndim
    if scale.ndim:
        shape[axis] = -1
    z = zero.reshape(shape).astype(np.int32) if zero is not None else 0
    return ((x.astype(np.int32) - z) * scale.reshape(shape)).astype(scale.dtype)


def _variadic(op: str, xs: Sequence[Array]) -> Array:
    out = xs[0]
    for x in xs[1:]:
        out = {"Sum": np.add, "Mean": np.add, "Max": np.maximum, "Min": np.minimum}[op](out, x)
    if op == "Mean":
        out = out / len(xs)
    return np.asarray(out).astype(xs[0].dtype)


def evaluate_node(op: str, attrs: Attrs | tuple, inputs: Sequence[Array | None], num_outputs: int = 1) -> list[Array]:
    """Evaluate one op on NumPy inputs; return its outputs as arrays.

    ``num_outputs`` matters only for Split without explicit sizes.
    """
    attrs = dict(attrs)
    xs = [None if x is None else np.asarray(x) for x in inputs]
    _inputs_to_attrs(op, attrs, xs)
    try:
        return [np.asarray(out) for out in _evaluate(op, attrs, xs, num_outputs)]
    except ModelError:
        raise
    except (ValueError, TypeError, IndexError, OverflowError, ZeroDivisionError, MemoryError) as error:
        raise ModelError(f"cannot evaluate {op} on constant inputs: {error}") from None


# Operands the IR holds as attributes when constant but keeps as inputs when computed at run
# time (convert.py); once such an input is a known constant (a bound shape), it is read
# here — ignoring it would evaluate the operator without its bounds.
_INPUT_ATTRS: dict[str, tuple[str, ...]] = {
    "Slice": ("starts", "ends", "axes", "steps"), "Unsqueeze": ("axes",), "Squeeze": ("axes",),
    "ReduceSum": ("axes",), "Clip": ("min", "max"),
}


def with_constant_operands_as_attrs(node, constants: dict) -> object:
    """``node`` with its run-time operands (Slice bounds, axes, Clip bounds) moved to the
    IR's attributes once they are all known constants (a bound shape made them so); the
    node unchanged otherwise. Backends read these operands from the attributes only."""
    names = _INPUT_ATTRS.get(node.op)
    operands = node.inputs[1:]
    if names is None or not any(operands) or not all(v in constants for v in operands if v):
        return node
    attrs = dict(node.attrs)
    xs = [None] + [np.asarray(constants[v]) if v else None for v in operands]
    _inputs_to_attrs(node.op, attrs, xs)
    return replace(node, inputs=node.inputs[:1], attrs=tuple(sorted(attrs.items())))


def _inputs_to_attrs(op: str, attrs: dict, xs: list[Array | None]) -> None:
    names = _INPUT_ATTRS.get(op)
    if names is None:
        return
    for position, name in enumerate(names, start=1):
        value = xs[position] if position < len(xs) else None
        if value is None or (name == "axes" and value.size == 0):
            continue  # absent (empty axes: the attribute's "absent" meaning)
        attrs[name] = value.item() if op == "Clip" else tuple(int(v) for v in value.reshape(-1))
    del xs[1:]


def _evaluate(op: str, attrs: dict, xs: list[Array | None], num_outputs: int) -> list[Array]:
    x = xs[0] if xs else None
    if op in _BINARY:
        return [_BINARY[op](xs[0], xs[1])]
    if op in _UNARY:
        with np.errstate(all="ignore"):
            return [np.asarray(_UNARY[op](x)).astype(x.dtype)]
    if op in ("LeakyRelu", "Elu", "Selu", "HardSigmoid", "HardSwish", "Clip"):
        with np.errstate(all="ignore"):
            return [np.asarray(_unary_attr(op, attrs, x)).astype(x.dtype)]
    if op in ("Sum", "Mean", "Max", "Min"):
        return [_variadic(op, xs)]
    if op.startswith("Reduce"):
        return [_reduce(op, attrs, x)]
    simple = _SIMPLE.get(op)
    if simple is not None:
        return [simple(attrs, xs)]
    if op == "Split":
        return _split(attrs, x, num_outputs)
    raise ModelError(f"constant folding does not know op {op!r}")


def _cast(attrs: Attrs, x: Array) -> Array:
    return x.astype(dtype_from_onnx(int(attrs["to"]), "Cast"))


def _shape(attrs: Attrs, x: Array) -> Array:
    dims = x.shape
    start, end = int(attrs.get("start", 0)), attrs.get("end")
    stop = len(dims) if end is None else int(end)
    return np.asarray(dims[slice(*_clamp_slice(start, stop, 1, len(dims))[:2])], dtype=np.int64)


def _unsqueeze(attrs: Attrs, x: Array) -> Array:
    rank = x.ndim + len(attrs["axes"])
    axes = sorted(_normalize_axis(int(a), rank) for a in attrs["axes"])
    return np.expand_dims(x, tuple(axes))


def _squeeze(attrs: Attrs, x: Array) -> Array:
    axes = _axes(attrs, x.ndim)
    if axes is None:
        axes = tuple(i for i, d in enumerate(x.shape) if d == 1)
    return np.squeeze(x, axis=axes)


def _gather(attrs: Attrs, x: Array, indices: Array) -> Array:
    axis = _normalize_axis(int(attrs.get("axis", 0)), x.ndim)
    dim = x.shape[axis]
    if np.any(indices < -dim) or np.any(indices >= dim):
        raise ModelError(f"Gather index out of range for dim {dim}")
    return np.take(x, np.where(indices < 0, indices + dim, indices), axis=axis)


def _expand(x: Array, shape: Array) -> Array:
    target = tuple(int(d) for d in shape.reshape(-1))
    out_shape = np.broadcast_shapes(x.shape, target)
    return np.broadcast_to(x, out_shape).copy()


def _flatten(attrs: Attrs, x: Array) -> Array:
    axis = int(attrs.get("axis", 1))
    axis = axis + x.ndim if axis < 0 else axis
    return x.reshape(int(np.prod(x.shape[:axis])), -1)


def _where(cond: Array, a: Array, b: Array) -> Array:
    return np.where(cond, a, b).astype(np.result_type(a, b))


def _transpose(attrs: Attrs, x: Array) -> Array:
    perm = attrs.get("perm")
    return np.transpose(x, None if perm is None else tuple(perm))


def _matmul(a: Array, b: Array) -> Array:
    return np.matmul(a, b).astype(a.dtype)


def _matmul_integer(a: Array, b: Array, za: Array | None, zb: Array | None) -> Array:
    a32 = a.astype(np.int32) - (0 if za is None else za.astype(np.int32))
    b32 = b.astype(np.int32) - (0 if zb is None else zb.astype(np.int32))
    return np.matmul(a32, b32)


def _argminmax(attrs: Attrs, x: Array, largest: bool) -> Array:
    axis = _normalize_axis(int(attrs.get("axis", 0)), x.ndim)
    if attrs.get("select_last_index", 0):
        flipped = np.flip(x, axis)
        idx = x.shape[axis] - 1 - (np.argmax(flipped, axis) if largest else np.argmin(flipped, axis))
    else:
        idx = np.argmax(x, axis) if largest else np.argmin(x, axis)
    if attrs.get("keepdims", 1):
        idx = np.expand_dims(idx, axis)
    return idx.astype(np.int64)


def _tile(x: Array, repeats: Array) -> Array:
    return np.tile(x, tuple(int(r) for r in repeats.reshape(-1)))


def _concat(attrs: Attrs, xs: list[Array | None]) -> Array:
    parts = [x for x in xs if x is not None]
    return np.concatenate(parts, axis=_normalize_axis(int(attrs["axis"]), parts[0].ndim))


def _not_none(xs: list[Array | None], index: int) -> Array | None:
    return xs[index] if len(xs) > index else None


_SIMPLE: dict[str, Callable[[Attrs, list[Array | None]], Array]] = {
    "Cast": lambda a, xs: _cast(a, xs[0]),
    "CastLike": lambda a, xs: xs[0].astype(xs[1].dtype),
    "Not": lambda a, xs: np.logical_not(xs[0]),
    "IsNaN": lambda a, xs: np.isnan(xs[0]),
    "IsInf": lambda a, xs: np.isinf(xs[0]),
    "Mod": lambda a, xs: _mod(a, xs[0], xs[1]),
    "Shape": lambda a, xs: _shape(a, xs[0]),
    "Size": lambda a, xs: np.asarray(xs[0].size, dtype=np.int64),
    "Gather": lambda a, xs: _gather(a, xs[0], xs[1]),
    "Concat": _concat,
    "Reshape": lambda a, xs: _reshape(a, xs[0], xs[1]),
    "Unsqueeze": lambda a, xs: _unsqueeze(a, xs[0]),
    "Squeeze": lambda a, xs: _squeeze(a, xs[0]),
    "Transpose": lambda a, xs: _transpose(a, xs[0]),
    "Slice": lambda a, xs: _slice(a, xs[0]),
    "ConstantOfShape": lambda a, xs: _constant_of_shape(a, xs[0]),
    "Range": lambda a, xs: _range(xs[0], xs[1], xs[2]),
    "Expand": lambda a, xs: _expand(xs[0], xs[1]),
    "Tile": lambda a, xs: _tile(xs[0], xs[1]),
    "Flatten": lambda a, xs: _flatten(a, xs[0]),
    "Where": lambda a, xs: _where(xs[0], xs[1], xs[2]),
    "MatMul": lambda a, xs: _matmul(xs[0], xs[1]),
    "MatMulInteger": lambda a, xs: _matmul_integer(xs[0], xs[1], _not_none(xs, 2), _not_none(xs, 3)),
    "Gemm": lambda a, xs: _gemm(a, xs[0], xs[1], _not_none(xs, 2)),
    "Pad": lambda a, xs: _pad(a, xs[0]),
    "Softmax": lambda a, xs: _softmax(xs[0], _normalize_axis(int(a.get("axis", -1)), xs[0].ndim), False),
    "LogSoftmax": lambda a, xs: _softmax(xs[0], _normalize_axis(int(a.get("axis", -1)), xs[0].ndim), True),
    "Einsum": lambda a, xs: np.einsum(str(a["equation"]), *xs).astype(xs[0].dtype),
    "ArgMax": lambda a, xs: _argminmax(a, xs[0], True),
    "ArgMin": lambda a, xs: _argminmax(a, xs[0], False),
    "NonZero": lambda a, xs: np.asarray(np.nonzero(xs[0]), dtype=np.int64),
    "QuantizeLinear": lambda a, xs: _quantize(a, xs[0], xs[1], _not_none(xs, 2)),
    "DequantizeLinear": lambda a, xs: _dequantize(a, xs[0], xs[1], _not_none(xs, 2)),
    # Real-model operators (issue 17): BERT's token-type buffer is a GatherElements of constants.
    "GatherElements": lambda a, xs: _gather_elements(a, xs[0], xs[1]),
}


def _gather_elements(attrs: Attrs, x: Array, indices: Array) -> Array:
    axis = _normalize_axis(int(attrs.get("axis", 0)), x.ndim)
    indices = np.where(indices < 0, indices + x.shape[axis], indices)
    if indices.size and (indices.min() < 0 or indices.max() >= x.shape[axis]):
        raise ModelError(f"GatherElements index out of range for axis {axis} of size {x.shape[axis]}")
    return np.take_along_axis(x, indices.astype(np.int64), axis=axis)

KNOWN_OPS: frozenset[str] = frozenset(
    set(_BINARY) | set(_UNARY) | set(_SIMPLE) | {"LeakyRelu", "Elu", "Selu", "HardSigmoid", "HardSwish", "Clip", "Sum", "Mean", "Max", "Min", "Split"}
    | {f"Reduce{k}" for k in ("Sum", "Mean", "Max", "Min", "Prod", "L1", "L2", "SumSquare", "LogSum", "LogSumExp")}
)
