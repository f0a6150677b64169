"""Constant folding: one operator evaluated on NumPy arrays.

`evaluate_node(op, attrs, inputs)` computes an operator with the IR's semantics: ONNX
opset 17, except that constant axes / split / slice bounds / pads / clip bounds are
attributes (see `Graph`). An operator with declared scalar semantics (``op … = expr`` in
rules/*.dnnr, the shipped library's or a rule file's) evaluates through `ops.scalar`, so
an operator declared only in a rule file folds too; `WHOLE_TENSOR` holds the operators
whose evaluation genuinely differs per operator (shape, indexing, reductions, built-in
semantics), registered by name here only. The importer folds with it (`ir.load_onnx`
receives this module as its folder), and so do the extractor, the fusion planner and the
Hexagon lowering. Unknown ops and inputs the op rejects raise `ModelError`, never a bare
NumPy exception; an absent optional input is ``None``.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

import numpy as np

from egraph_compiler.dsl import shape_builtins
from egraph_compiler.ir import onnx_import
from egraph_compiler.ir.errors import ModelError
from egraph_compiler.ir.graph import AttrValue, TensorAttr
from egraph_compiler.ir.onnx_types import dtype_from_onnx
from egraph_compiler.ops import scalar
from egraph_compiler.ops.registry import OpInfo, current

Array = np.ndarray
Attrs = Mapping[str, AttrValue]

# Kept as nodes even on constant inputs, by the importer and the extractor alike:
# quantized weights stay int8 for the backends (onnxruntime's constant folding keeps
# DequantizeLinear too), and random ops are not constants.
NEVER_FOLD = frozenset({"QuantizeLinear", "DequantizeLinear", "RandomNormal", "RandomUniform",
                        "RandomNormalLike", "RandomUniformLike", "Multinomial", "Bernoulli"})


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


def _selu(attrs: Attrs, x: Array) -> Array:
    alpha, gamma = attrs.get("alpha", 1.67326319217681884765625), attrs.get("gamma", 1.05070102214813232421875)
    return gamma * np.where(x > 0, x, alpha * (np.exp(x) - 1))


def _clip(attrs: Attrs, x: Array) -> Array:
    # the bounds are cast to x's dtype first, as onnxruntime does (min 0.5 of an int Clip is 0)
    low, high = attrs.get("min"), attrs.get("max")
    out = x
    if low is not None:
        out = np.maximum(out, np.asarray(low).astype(x.dtype))
    if high is not None:
        out = np.minimum(out, np.asarray(high).astype(x.dtype))
    return out


def _normalize_axis(axis: int, rank: int) -> int:
    if not -max(rank, 1) <= axis < max(rank, 1):
        raise ModelError(f"axis {axis} out of range for rank {rank}")
    return axis + rank if axis < 0 else axis


def _axes(attrs: Attrs, rank: int, key: str = "axes") -> tuple[int, ...] | None:
    axes = attrs.get(key)
    if axes is None:
        return None
    return tuple(_normalize_axis(int(a), rank) for a in axes)


def _extreme(dtype: np.dtype, sign: int) -> float | int | bool:
    """±inf for floats, the dtype's max/min for integers (booleans: True/False)."""
    if dtype.kind == "f":
        return sign * np.inf
    if dtype.kind == "b":
        return sign > 0
    info = np.iinfo(dtype)
    return info.max if sign > 0 else info.min


# ONNX's reductions as (x, axes, keepdims) -> result.
_REDUCERS: dict[str, Callable[[Array, tuple[int, ...], bool], Array]] = {
    "ReduceSum": lambda x, a, k: np.sum(x, axis=a, keepdims=k),
    "ReduceMean": lambda x, a, k: np.mean(x, axis=a, keepdims=k),
    # over an empty set ONNX gives the identity: the lowest (highest) value of the dtype
    "ReduceMax": lambda x, a, k: np.max(x, axis=a, keepdims=k, initial=_extreme(x.dtype, -1)),
    "ReduceMin": lambda x, a, k: np.min(x, axis=a, keepdims=k, initial=_extreme(x.dtype, 1)),
    "ReduceProd": lambda x, a, k: np.prod(x, axis=a, keepdims=k),
    "ReduceL1": lambda x, a, k: np.sum(np.abs(x), axis=a, keepdims=k),
    "ReduceL2": lambda x, a, k: np.sqrt(np.sum(x * x, axis=a, keepdims=k)),
    "ReduceSumSquare": lambda x, a, k: np.sum(x * x, axis=a, keepdims=k),
    "ReduceLogSum": lambda x, a, k: np.log(np.sum(x, axis=a, keepdims=k)),
    "ReduceLogSumExp": lambda x, a, k: np.log(np.sum(np.exp(x), axis=a, keepdims=k)),
}


def _reduce(op: str, attrs: Attrs, x: Array) -> Array:
    axes = _axes(attrs, x.ndim)
    if not axes:
        if attrs.get("noop_with_empty_axes", 0):
            return x
        axes = tuple(range(x.ndim))
    with np.errstate(all="ignore"):
        out = _REDUCERS[op](x, axes, bool(attrs.get("keepdims", 1)))
    return np.asarray(out).astype(x.dtype)


def _reshape(attrs: Attrs, x: Array, shape: Array) -> Array:
    target = [int(d) for d in shape.reshape(-1)]
    return x.reshape(target if attrs.get("allowzero", 0) else shape_builtins.reshape_shape(x.shape, target))


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


def _along_axis(attrs: Attrs, x: Array, scale: Array, zero: Array | None) -> tuple[Array, Array | int]:
    """The scale and the zero point (int32) broadcastable against ``x``: per tensor, or
    along ``axis`` where the scale is 1-D."""
    shape = [1] * x.ndim
    if scale.ndim:
        shape[_normalize_axis(int(attrs.get("axis", 1)), x.ndim)] = -1
    return scale.reshape(shape), zero.reshape(shape).astype(np.int32) if zero is not None else 0


def _quantize(attrs: Attrs, x: Array, scale: Array, zero: Array | None) -> Array:
    info = np.iinfo(zero.dtype if zero is not None else np.dtype("uint8"))
    s, z = _along_axis(attrs, x, scale, zero)
    return np.clip(np.round(x / s) + z, info.min, info.max).astype(info.dtype)


def _dequantize(attrs: Attrs, x: Array, scale: Array, zero: Array | None) -> Array:
    s, z = _along_axis(attrs, x, scale, zero)
    return ((x.astype(np.int32) - z) * s).astype(scale.dtype)


Evaluator = Callable[[Attrs, list[Array | None]], Array]


def _elementwise(fn: Callable[[Array], Array]) -> Evaluator:
    return lambda attrs, xs: _same_dtype(fn)(xs[0])


def _variadic(combine: Callable[[Array, Array], Array], mean: bool = False) -> Evaluator:
    def run(attrs: Attrs, xs: list[Array | None]) -> Array:
        out = xs[0]
        for x in xs[1:]:
            out = combine(out, x)
        return np.asarray(out / len(xs) if mean else out).astype(xs[0].dtype)

    return run


def _reducer(op: str) -> Evaluator:
    return lambda attrs, xs: _reduce(op, attrs, xs[0])


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


def with_constant_operands_as_attrs(node, constants: dict) -> object:
    """``node`` with its run-time operands (Slice bounds, axes, Clip bounds) moved to the
    IR's attributes once they are all known constants (a bound shape made them so); the
    node unchanged otherwise. Backends read these operands from the attributes only."""
    operands = node.inputs[1:]
    if not _operand_attributes(node.op) or not any(operands) or not all(v in constants for v in operands if v):
        return node
    attrs = dict(node.attrs)
    xs = [None] + [np.asarray(constants[v]) if v else None for v in operands]
    _inputs_to_attrs(node.op, attrs, xs)
    return replace(node, inputs=node.inputs[:1], attrs=tuple(sorted(attrs.items())))


def _operand_attributes(op: str) -> tuple[tuple[int, str, str], ...]:
    info = current().get(op)
    return info.operand_attributes if info is not None else ()


def _inputs_to_attrs(op: str, attrs: dict, xs: list[Array | None]) -> None:
    """Read the operands the IR holds as attributes when constant (convert.py keeps them as
    inputs when computed at run time); once known, ignoring one would evaluate the
    operator without its bounds."""
    found = _operand_attributes(op)
    if not found:
        return
    for position, name, kind in found:
        value = xs[position] if position < len(xs) else None
        if value is None or (name == "axes" and value.size == 0):
            continue  # absent (empty axes: the attribute's "absent" meaning)
        attrs[name] = tuple(int(v) for v in value.reshape(-1)) if kind == "ints" else value.item()
    del xs[1:]


def _evaluate(op: str, attrs: dict, xs: list[Array | None], num_outputs: int) -> list[Array]:
    if op in MULTI_OUTPUT:
        return MULTI_OUTPUT[op](attrs, xs[0], num_outputs)
    whole = WHOLE_TENSOR.get(op)
    if whole is not None:
        return [whole(attrs, xs)]
    info = current().get(op)
    if info is not None and (info.semantics is not None or info.decl.builtin in scalar.NUMPY_FUNCTIONS):
        return [_declared(info, attrs, [x for x in xs if x is not None])]
    raise ModelError(f"constant folding does not know op {op!r}")


def _declared(info: OpInfo, attrs: Attrs, arrays: list[Array]) -> Array:
    """``info``'s scalar semantics over the operands (broadcast), in its declared output dtype."""
    env: dict[str, object] = {name: info.attr(attrs, name) for name in info.defaults}
    env.update({p.name: a for p, a in zip(info.decl.params, arrays, strict=False)})
    with np.errstate(all="ignore"):
        out = np.asarray(scalar.evaluate(info.semantics, env) if info.semantics is not None
                         else scalar.NUMPY_FUNCTIONS[info.decl.builtin](*arrays))
    shape = np.broadcast_shapes(*(a.shape for a in arrays))
    dtype = info.output_dtype([str(a.dtype) for a in arrays], attrs, lambda code: dtype_from_onnx(code, info.name))
    return np.broadcast_to(out, shape).astype(dtype or arrays[0].dtype)


def _cast(attrs: Attrs, x: Array) -> Array:
    return x.astype(dtype_from_onnx(int(attrs["to"]), "Cast"))


def _shape(attrs: Attrs, x: Array) -> Array:
    dims = x.shape
    start, end = int(attrs.get("start", 0)), attrs.get("end")
    stop = len(dims) if end is None else int(end)
    return np.asarray(dims[slice(*_clamp_slice(start, stop, 1, len(dims))[:2])], dtype=np.int64)


def _unsqueeze(attrs: Attrs, x: Array) -> Array:
    return x.reshape(shape_builtins.unsqueeze_shape(x.shape, attrs["axes"]))


def _squeeze(attrs: Attrs, x: Array) -> Array:
    return x.reshape(shape_builtins.squeeze_shape(x.shape, attrs.get("axes") or ()))


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
    return x.reshape(shape_builtins.flatten_shape(x.shape, int(attrs.get("axis", 1))))


def _transpose(attrs: Attrs, x: Array) -> Array:
    perm = attrs.get("perm")  # absent or empty: the axes reversed
    return np.transpose(x, tuple(perm) if perm else None)


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


# Operators without declared scalar semantics, or whose NumPy form here is exact where the
# declared expression rounds differently (Softplus' log1p, Selu's order, integer Div and
# Mod, Clip's bounds in x's dtype): each evaluated on (attributes, operands).
WHOLE_TENSOR: dict[str, Evaluator] = {
    "Div": lambda a, xs: _div(xs[0], xs[1]),
    "Pow": lambda a, xs: _same_dtype(np.power)(xs[0], xs[1]),
    "Softplus": _elementwise(lambda x: np.log1p(np.exp(x))),
    "Selu": lambda a, xs: _same_dtype(lambda x: _selu(a, x))(xs[0]),
    "Clip": lambda a, xs: _same_dtype(lambda x: _clip(a, x))(xs[0]),
    "Sum": _variadic(np.add), "Mean": _variadic(np.add, mean=True),
    "Max": _variadic(np.maximum), "Min": _variadic(np.minimum),
    **{op: _reducer(op) for op in _REDUCERS},
    "Cast": lambda a, xs: _cast(a, xs[0]),
    "IsInf": lambda a, xs: np.isinf(xs[0]) & np.where(xs[0] > 0, bool(a.get("detect_positive", 1)),
                                                      bool(a.get("detect_negative", 1))),
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


# Operators of several outputs: (attributes, the operand, how many outputs) -> outputs.
MULTI_OUTPUT: dict[str, Callable[[Attrs, Array, int], list[Array]]] = {"Split": _split}


def _gather_elements(attrs: Attrs, x: Array, indices: Array) -> Array:
    axis = _normalize_axis(int(attrs.get("axis", 0)), x.ndim)
    indices = np.where(indices < 0, indices + x.shape[axis], indices)
    if indices.size and (indices.min() < 0 or indices.max() >= x.shape[axis]):
        raise ModelError(f"GatherElements index out of range for axis {axis} of size {x.shape[axis]}")
    return np.take_along_axis(x, indices.astype(np.int64), axis=axis)


def can_evaluate(op: str) -> bool:
    """Whether `evaluate_node` knows ``op`` (a whole-tensor evaluator, or declared semantics)."""
    info = current().get(op)
    return op in WHOLE_TENSOR or op in MULTI_OUTPUT or (info is not None and (
        info.semantics is not None or info.decl.builtin in scalar.NUMPY_FUNCTIONS))


def can_fold(op: str) -> bool:
    """Whether constant folding may replace ``op`` on constant inputs by its value (the
    importer's question to its folder)."""
    return op not in NEVER_FOLD and can_evaluate(op)


onnx_import.install_folder(sys.modules[__name__])  # type: ignore[arg-type]
