"""Constant folding: one operator evaluated on NumPy arrays.

`evaluate_node(op, attrs, inputs)` computes an operator with the IR's semantics: ONNX
opset 17, except that constant axes / split / slice bounds / pads / clip bounds are
attributes (see `Graph`). An operator ONNX defines evaluates by ONNX's reference
implementation (`onnx.reference`, the spec's own definition), the attribute-held operands
given back as inputs; one declared only in rules/*.dnnr (``op … = expr``, the shipped
library's or a rule file's) evaluates its declared scalar semantics through `ops.scalar`;
`BY_HAND` holds the few operators the reference does not serve (each says why). The
importer folds with it (`ir.load_onnx` receives this module as its folder), and so do the
extractor, the fusion planner and the Hexagon lowering. Unknown ops and inputs the op
rejects raise `ModelError`, never a bare NumPy exception; an absent optional input is ``None``."""

from __future__ import annotations

import contextlib
import math
import sys
from collections.abc import Callable, Mapping, Sequence
from functools import cache
from typing import Any

import numpy as np
import onnx
from onnx import helper
from onnx.reference import ReferenceEvaluator
from onnx.reference.ops import load_op

from egraph_compiler.ir import onnx_import
from egraph_compiler.ir.convert import operands_as_attrs
from egraph_compiler.ir.errors import ModelError
from egraph_compiler.ir.graph import AttrValue, Node, TensorAttr
from egraph_compiler.ir.onnx_types import dtype_from_onnx, make_attribute
from egraph_compiler.ops import scalar
from egraph_compiler.ops.registry import OpInfo, current

Array = np.ndarray
Attrs = Mapping[str, AttrValue]

# Kept as nodes even on constant inputs, by the importer and the extractor alike:
# quantized weights stay int8 for the backends (onnxruntime's constant folding keeps
# DequantizeLinear too), and random ops are not constants.
NEVER_FOLD = frozenset({"QuantizeLinear", "DequantizeLinear", "RandomNormal", "RandomUniform",
                        "RandomNormalLike", "RandomUniformLike", "Multinomial", "Bernoulli"})


def _constant_of_shape(attrs: Attrs, shape: Array) -> Array:
    value = attrs.get("value")
    fill = value.to_numpy().reshape(-1)[0] if isinstance(value, TensorAttr) else np.float32(0)
    dims = tuple(int(d) for d in shape.reshape(-1))
    if any(d < 0 for d in dims):
        raise ModelError(f"ConstantOfShape with negative dims {dims}")
    # A read-only broadcast view: large weight fills cost no memory (the reference
    # allocates them), and the exporter writes them back as ConstantOfShape.
    return np.broadcast_to(np.asarray(fill), dims)


def _range(start: Array, limit: Array, delta: Array) -> Array:
    if delta.reshape(-1)[0] == 0:
        raise ModelError("Range delta is 0")
    count = max(math.ceil((limit.item() - start.item()) / delta.item()), 0)
    if count > 1 << 26:  # the reference would try to allocate it
        raise ModelError(f"Range of {count} elements is too large to fold")
    return (start.item() + np.arange(count) * delta.item()).astype(start.dtype)


def _log_softmax(attrs: Attrs, x: Array) -> Array:
    """x - max - log(sum(exp(x - max))), as onnxruntime computes it; the reference's
    log(softmax(x)) gives -inf where the softmax underflows."""
    shifted = x - np.max(x, axis=int(attrs.get("axis", -1)), keepdims=True)
    return (shifted - np.log(np.sum(np.exp(shifted), axis=int(attrs.get("axis", -1)), keepdims=True))).astype(x.dtype)


def _sum(xs: list[Array | None], mean: bool = False) -> Array:
    """Sum / Mean added from the first operand on: the reference's Sum starts from +0 (a sum
    of -0 comes out +0, where onnxruntime keeps -0), its Mean adds in place (a first operand
    the others broadcast fails)."""
    parts = [x for x in xs if x is not None]
    out = parts[0]
    for x in parts[1:]:
        out = out + x
    return np.asarray(out / len(parts) if mean else out).astype(parts[0].dtype)


# Where ONNX's reference implementation does not serve constant folding (each says why).
BY_HAND: dict[str, Callable[[Attrs, list[Array | None]], Array]] = {
    "Sum": lambda a, xs: _sum(xs),
    "Mean": lambda a, xs: _sum(xs, mean=True),
    "ConstantOfShape": lambda a, xs: _constant_of_shape(a, xs[0]),
    "Range": lambda a, xs: _range(xs[0], xs[1], xs[2]),
    "LogSoftmax": lambda a, xs: _log_softmax(a, xs[0]),
    # the reference gathers with np.choose, which takes at most 64 choices: an axis
    # longer than 64 fails (BERT's position ids are a 5-column gather from 64)
    "GatherElements": lambda a, xs: _gather_elements(a, xs[0], xs[1]),
}


def _gather_elements(attrs: Attrs, data: Array, indices: Array) -> Array:
    axis = int(attrs.get("axis", 0)) % max(data.ndim, 1)
    size = data.shape[axis]
    if np.any((indices < -size) | (indices >= size)):
        raise ModelError(f"GatherElements: an index is outside [-{size}, {size})")
    return np.take_along_axis(data, np.where(indices < 0, indices + size, indices), axis)


def evaluate_node(op: str, attrs: Attrs | tuple, inputs: Sequence[Array | None], num_outputs: int = 1) -> list[Array]:
    """Evaluate one op on NumPy inputs; return its outputs as arrays.

    ``num_outputs`` matters only for Split without explicit sizes.
    """
    names = tuple("" if x is None else f"x{k}" for k, x in enumerate(inputs))
    try:  # operands the IR holds as attributes (Slice bounds, axes) are read as those attributes
        node = with_constant_operands_as_attrs(Node(op, names, (), tuple(sorted(dict(attrs).items()))),
                                               dict(zip(names, inputs, strict=True)))
        xs = [np.asarray(inputs[names.index(v)]) if v else None for v in node.inputs]
        return [np.asarray(out) for out in _evaluate(op, node.attr_dict, xs, num_outputs)]
    except ModelError:
        raise
    except (ValueError, TypeError, IndexError, OverflowError, ZeroDivisionError, MemoryError,
            RuntimeError, KeyError, AttributeError) as error:
        raise ModelError(f"cannot evaluate {op} on constant inputs: {error}") from None


def with_constant_operands_as_attrs(node: Node, constants: Mapping[str, object]) -> Node:
    """``node`` with its run-time operands (Slice bounds, axes, Clip bounds) moved to the
    IR's attributes once they are all known constants (a bound shape made them so); the
    node unchanged otherwise. Backends read these operands from the attributes only."""
    moved = {k: (name, kind) for k, name, kind in _operand_attributes(node.op)}
    return operands_as_attrs(node, moved, lambda v: np.asarray(constants[v]) if v in constants else None)


def _operand_attributes(op: str) -> tuple[tuple[int, str, str], ...]:
    info = current().get(op)
    return info.operand_attributes if info is not None else ()


def _evaluate(op: str, attrs: dict, xs: list[Array | None], num_outputs: int) -> list[Array]:
    by_hand = BY_HAND.get(op)
    if by_hand is not None:
        return [by_hand(attrs, xs)]
    if _reference(op) is not None:
        return _by_the_reference(op, attrs, xs, num_outputs)
    info = current().get(op)
    if info is not None and (info.semantics is not None or info.decl.builtin in scalar.NUMPY_FUNCTIONS):
        return [_declared(info, attrs, [x for x in xs if x is not None])]
    raise ModelError(f"constant folding does not know op {op!r}")


# ONNX's definitions at opset 18 are the IR's: opset 17's, with the constant axes of every
# reduction, uneven Split and Pad's axes that the IR accepts (an operator new after 18 is
# evaluated at its newest opset).
_IR_OPSET = 18


@cache
def _reference(op: str) -> tuple[Any, type] | None:
    """ONNX's schema of ``op`` and its reference implementation (the spec's own NumPy
    definition; the first newer one where the reference has none at that opset), or None
    where ONNX has neither (a rule file's operator) or where the operator runs subgraphs
    (control flow is never folded here)."""
    if not onnx.defs.has(op):
        return None
    schema = onnx.defs.get_schema(op, _IR_OPSET) if onnx.defs.has(op, _IR_OPSET) else onnx.defs.get_schema(op)
    if any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in schema.attributes.values()):
        return None
    for version in (schema.since_version, None):
        with contextlib.suppress(RuntimeError):
            return schema, load_op("", op, version, evaluator_cls=ReferenceEvaluator)
    return None


def _by_the_reference(op: str, attrs: dict, xs: list[Array | None], num_outputs: int) -> list[Array]:
    """``op`` by ONNX's reference implementation, the IR's attribute-held operands given
    back as the inputs ONNX takes (element-typed where ONNX types them like the data,
    int64 otherwise), an operand ONNX takes as int64 only (a shape, repeats) made int64,
    an absent (None) or empty attribute left out (both mean "absent" in the IR).
    Integer division by zero, which ONNX leaves undefined, is refused."""
    schema, implementation = _reference(op)
    inputs = list(xs)
    for position, name, _ in _operand_attributes(op):
        if name in attrs and name not in schema.attributes and _given(value := attrs.pop(name)):
            like_data = schema.inputs[position].type_str == schema.inputs[0].type_str
            value = np.asarray(value, dtype=xs[0].dtype if like_data else np.int64)
            inputs = (inputs + [None] * position)[:position] + [value] + inputs[position + 1:]
    allowed = {c.type_param_str: c.allowed_type_strs for c in schema.type_constraints}
    for k, formal in enumerate(schema.inputs[:len(inputs)]):
        if inputs[k] is not None and allowed.get(formal.type_str, [formal.type_str]) == ["tensor(int64)"]:
            inputs[k] = inputs[k].astype(np.int64)
    names = [f"x{k}" if x is not None else "" for k, x in enumerate(inputs)]
    node = helper.make_node(op, names, [f"y{k}" for k in range(num_outputs)])
    node.attribute.extend(make_attribute(op, key, tuple(value) if isinstance(value, list) else value)
                          for key, value in sorted(attrs.items()) if _given(value))
    integers = any(x is not None and x.dtype.kind in "iu" for x in inputs)
    with np.errstate(all="ignore", divide="raise" if integers else "ignore"):
        try:
            outputs = implementation(node, _RUN_PARAMS).run(*inputs)
        except FloatingPointError:
            raise ModelError(f"{op}: integer division by zero") from None
    return list(outputs)


def _given(value: object) -> bool:
    return value is not None and not (isinstance(value, (list, tuple)) and not value)


_RUN_PARAMS = {"log": lambda *args: None, "opsets": {"": onnx.defs.onnx_opset_version()}, "verbose": 0,
               "new_ops": None, "existing_functions": {}, "evaluator_cls": ReferenceEvaluator}


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


def can_evaluate(op: str) -> bool:
    """Whether `evaluate_node` knows ``op`` (by hand, by ONNX's reference, or by its
    declared semantics)."""
    info = current().get(op)
    return op in BY_HAND or _reference(op) is not None or (info is not None and (
        info.semantics is not None or info.decl.builtin in scalar.NUMPY_FUNCTIONS))


def can_fold(op: str) -> bool:
    """Whether constant folding may replace ``op`` on constant inputs by its value (the
    importer's question to its folder)."""
    return op not in NEVER_FOLD and can_evaluate(op)


onnx_import.install_folder(sys.modules[__name__])  # type: ignore[arg-type]
