"""OpenCL code for the integer operators MatMulInteger, ConvInteger, QLinearMatMul,
QLinearConv, QuantizeLinear and DequantizeLinear (issue 17 item 6; rules/operators.dnnr, block "opsk"): ``anchor indexed``
generators in the style of `ops_extra`, one output element per work item;
`ops_extra.GENERATORS` takes them in.

The arithmetic is onnx's reference exactly: operands minus their zero points, products
accumulated in int32 (a padded Conv tap contributes nothing: the input is padded with its
zero point); the QLinear forms then multiply by ``a_scale * b_scale / y_scale`` (computed
in float32, as the reference's float32 arrays do) in double, add the output zero point,
round half to even (``rint``) and saturate to the output type. A zero point or scale is a
scalar or, per ONNX, one value per row of ``a`` / column of ``b`` / output channel.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from egraph_compiler.backends.opencl.emit import Scope, ctype
from egraph_compiler.backends.opencl.ops_nn import window_pad_begin, window_taps
from egraph_compiler.fusion import index as ix
from egraph_compiler.ir.errors import ModelError
from egraph_compiler.ir.graph import Node

Index = tuple[ix.IExpr, ...]
Generator = Callable[[Any, Scope, Node, Index], str]  # (the kernel generator, scope, node, out)

# the range each quantised output type saturates to
_LIMITS = {"uint8": (0, 255), "int8": (-128, 127), "uint16": (0, 65535), "int16": (-32768, 32767)}


def _input(node: Node, position: int) -> str:
    return node.inputs[position] if position < len(node.inputs) else ""


def _per_index(gen: Any, scope: Scope, node: Node, name: str, at: ix.IExpr, what: str) -> str:
    """The value of ``name`` (a zero point or scale): its only element, or element ``at`` of a
    1-D one (per row / column / channel); "0" when absent."""
    if not name:
        return "0"
    shape = gen.view.shape(name)
    if int(np.prod(shape)) == 1:
        return gen.em.value(scope, name, tuple(0 for _ in shape))
    if len(shape) != 1:
        raise ModelError(f"node '{node.name}' ({node.op}): {what} '{name}' of shape {list(shape)} "
                         "(a scalar or a 1-D tensor is supported by the OpenCL backend)")
    return gen.em.value(scope, name, (at,))


def _batch_index(batch: Index, shape: tuple[int, ...]) -> Index:
    """The index into an operand's leading (batch) dims ``shape`` of the output batch index
    ``batch`` (numpy broadcasting: right-aligned, size-1 dims read 0)."""
    offset = len(batch) - len(shape)
    return tuple(0 if size == 1 else batch[offset + d] for d, size in enumerate(shape))


def _matmul_sum(gen: Any, scope: Scope, node: Node, out: Index, a: str, b: str,
                a_zero: str, b_zero: str) -> str:
    """int acc = Σ_k (a[.., i, k] - a_zero) * (b[.., k, j] - b_zero)."""
    a_shape, b_shape = gen.view.shape(a), gen.view.shape(b)
    if len(a_shape) < 2 or len(b_shape) < 2:
        raise ModelError(f"node '{node.name}' ({node.op}): 1-D operands are not supported by the "
                         "OpenCL backend\n  hint: Unsqueeze them to matrices")
    em = gen.em
    batch, i, j = out[:-2], out[-2], out[-1]
    depth = a_shape[-1]
    a_at = _per_index(gen, scope, node, a_zero, i, "a_zero_point")
    b_at = _per_index(gen, scope, node, b_zero, j, "b_zero_point")
    a_offset, b_offset, acc, k = em.fresh("az"), em.fresh("bz"), em.fresh("acc"), em.fresh("k")
    scope.emit(f"const int {a_offset} = (int){a_at}; const int {b_offset} = (int){b_at}; int {acc} = 0;")
    body = scope.child()
    inner = ix.IVar(k, 0, depth - 1) if depth > 1 else 0
    av = em.value(body, a, (*_batch_index(batch, a_shape[:-2]), i if a_shape[-2] > 1 else 0, inner))
    bv = em.value(body, b, (*_batch_index(batch, b_shape[:-2]), inner, j if b_shape[-1] > 1 else 0))
    body.emit(f"{acc} += ((int){av} - {a_offset}) * ((int){bv} - {b_offset});")
    scope.nest(f"for (int {k} = 0; {k} < {depth}; ++{k})", body)
    return acc


def _ints(node: Node, name: str, default: list[int]) -> list[int]:
    given = node.attr(name)
    return [int(v) for v in given] if given else default  # type: ignore[union-attr]


def _conv_sum(gen: Any, scope: Scope, node: Node, out: Index, x: str, w: str,
              x_zero: str, w_zero: str) -> str:
    """int acc = Σ over the group's input channels and the taps inside the input of
    (x - x_zero) * (w - w_zero[oc])."""
    shape, w_shape = gen.view.shape(x), gen.view.shape(w)
    dims = len(shape) - 2
    group = int(node.attr("group", 1))
    per_group_in, per_group_out = w_shape[1], w_shape[0] // group
    kernel = list(w_shape[2:])
    strides = _ints(node, "strides", [1] * dims)
    dilations = _ints(node, "dilations", [1] * dims)
    begin = window_pad_begin(node, list(shape[2:]), kernel, strides, dilations)
    em = gen.em
    n, oc = out[0], out[1]
    x_offset, w_offset, acc, first = em.fresh("xz"), em.fresh("wz"), em.fresh("acc"), em.fresh("ic0")
    scope.emit(f"const int {x_offset} = (int){_per_index(gen, scope, node, x_zero, 0, 'x_zero_point')}; "
               f"const int {w_offset} = (int){_per_index(gen, scope, node, w_zero, oc, 'w_zero_point')}; "
               f"int {acc} = 0; const int {first} = (({ix.render(oc)}) / {per_group_out}) * {per_group_in};")
    taps = int(np.prod(kernel))
    tap, channel = em.fresh("tap"), em.fresh("icg")
    body = scope.child()
    offsets = ix.delinearize(ix.IVar(tap, 0, taps - 1) if taps > 1 else 0, tuple(kernel))
    conditions, positions = window_taps(em, body, out, shape, offsets, strides, begin, dilations)
    inside = body.child()
    input_channel = em.fresh("ic")
    inside.emit(f"const int {input_channel} = {first} + {channel};")
    xv = em.value(inside, x, (n, ix.IVar(input_channel, 0, shape[1] - 1), *positions))
    wv = em.value(inside, w, (oc, ix.IVar(channel, 0, per_group_in - 1) if per_group_in > 1 else 0,
                              *offsets))
    inside.emit(f"{acc} += ((int){xv} - {x_offset}) * ((int){wv} - {w_offset});")
    # the tap's position is decided once; only a tap inside x walks the channels
    channels = body.child()
    channels.nest(f"for (int {channel} = 0; {channel} < {per_group_in}; ++{channel})", inside)
    body.nest(f"if ({' && '.join(conditions)})", channels)
    scope.nest(f"for (int {tap} = 0; {tap} < {taps}; ++{tap})", body)
    return acc


def _requantize(gen: Any, scope: Scope, node: Node, acc: str, scale: str, zero: str) -> str:
    """saturate(rint((double)acc * scale + zero)) in the output's type."""
    dtype = gen.view.dtype(node.outputs[0])
    if dtype not in _LIMITS:
        raise ModelError(f"node '{node.name}' ({node.op}): output type {dtype} is not a quantised "
                         "integer type the OpenCL backend supports")
    low, high = _LIMITS[dtype]
    zero_value = _per_index(gen, scope, node, zero, 0, "y_zero_point")
    rounded = gen.em.fresh("q")
    scope.emit(f"const double {rounded} = clamp(rint((double){acc} * (double)({scale}) + "
               f"(double){zero_value}), {float(low)!r}, {float(high)!r});")
    return gen.em.assign(scope, dtype, f"({ctype(dtype)}){rounded}")


def _matmul_integer(gen: Any, scope: Scope, node: Node, out: Index) -> str:
    acc = _matmul_sum(gen, scope, node, out, node.inputs[0], node.inputs[1], _input(node, 2), _input(node, 3))
    return gen.em.assign(scope, "int32", acc)


def _conv_integer(gen: Any, scope: Scope, node: Node, out: Index) -> str:
    acc = _conv_sum(gen, scope, node, out, node.inputs[0], node.inputs[1], _input(node, 2), _input(node, 3))
    return gen.em.assign(scope, "int32", acc)


def _qlinear_matmul(gen: Any, scope: Scope, node: Node, out: Index) -> str:
    a, a_scale, a_zero, b, b_scale, b_zero, y_scale, y_zero = (_input(node, k) for k in range(8))
    acc = _matmul_sum(gen, scope, node, out, a, b, a_zero, b_zero)
    scale = (f"((float){_per_index(gen, scope, node, a_scale, out[-2], 'a_scale')} * "
             f"(float){_per_index(gen, scope, node, b_scale, out[-1], 'b_scale')} / "
             f"(float){_per_index(gen, scope, node, y_scale, 0, 'y_scale')})")
    return _requantize(gen, scope, node, acc, scale, y_zero)


def _qlinear_conv(gen: Any, scope: Scope, node: Node, out: Index) -> str:
    x, x_scale, x_zero, w, w_scale, w_zero, y_scale, y_zero, bias = (_input(node, k) for k in range(9))
    acc = _conv_sum(gen, scope, node, out, x, w, x_zero, w_zero)
    if bias:
        scope.emit(f"{acc} += (int){gen.em.value(scope, bias, (out[1],))};")
    scale = (f"((float){_per_index(gen, scope, node, x_scale, 0, 'x_scale')} * "
             f"(float){_per_index(gen, scope, node, w_scale, out[1], 'w_scale')} / "
             f"(float){_per_index(gen, scope, node, y_scale, 0, 'y_scale')})")
    return _requantize(gen, scope, node, acc, scale, y_zero)


def _per_axis(gen: Any, scope: Scope, node: Node, name: str, out: Index, what: str) -> str:
    """A scale or zero point of Quantize/DequantizeLinear: a scalar, a 1-D tensor along
    ``axis`` (per channel), or with ``block_size`` (opset 21) x's rank with one value per
    block of ``block_size`` elements along ``axis``; "0" when absent."""
    if not name or gen.view.numel(name) == 1:  # per tensor: the axis plays no part
        return _per_index(gen, scope, node, name, 0, what)
    rank = len(gen.view.shape(node.inputs[0]))
    axis = int(node.attr("axis", 1))
    if not -rank <= axis < rank:
        raise ModelError(f"node '{node.name}' ({node.op}): axis {axis} is out of range for rank {rank}")
    axis %= rank
    block = int(node.attr("block_size", 0) or 0)
    if block > 0:
        if len(gen.view.shape(name)) != rank:
            raise ModelError(f"node '{node.name}' ({node.op}): blocked {what} '{name}' must have "
                             f"x's rank {rank}")
        return gen.em.value(scope, name, tuple(ix.floordiv(v, block) if k == axis else v
                                               for k, v in enumerate(out)))
    return _per_index(gen, scope, node, name, out[axis], what)


def _quantize_linear(gen: Any, scope: Scope, node: Node, out: Index) -> str:
    """QuantizeLinear: saturate(rint(x / y_scale) + y_zero_point), the reference's float32
    division and half-to-even rounding."""
    x, scale, zero = node.inputs[0], _input(node, 1), _input(node, 2)
    dtype = gen.view.dtype(node.outputs[0])
    if dtype not in _LIMITS:
        raise ModelError(f"node '{node.name}' (QuantizeLinear): output type {dtype} is not a "
                         "quantised integer type the OpenCL backend supports")
    low, high = _LIMITS[dtype]
    value = gen.em.value(scope, x, out)
    shifted = (f"rint((float){value} / (float){_per_axis(gen, scope, node, scale, out, 'y_scale')}) + "
               f"(float){_per_axis(gen, scope, node, zero, out, 'y_zero_point')}")
    return gen.em.assign(scope, dtype, f"({ctype(dtype)})clamp({shifted}, {float(low)!r}f, {float(high)!r}f)")


def _dequantize_linear(gen: Any, scope: Scope, node: Node, out: Index) -> str:
    """DequantizeLinear: (x - x_zero_point) * x_scale in float32."""
    x, scale, zero = node.inputs[0], _input(node, 1), _input(node, 2)
    dtype = gen.view.dtype(node.outputs[0])
    if dtype != "float32":
        raise ModelError(f"node '{node.name}' (DequantizeLinear): a {dtype} scale is not supported "
                         "by the OpenCL backend (float32 is)")
    value = gen.em.value(scope, x, out)
    return gen.em.assign(scope, dtype, f"((float){value} - (float){_per_axis(gen, scope, node, zero, out, 'x_zero_point')})"
                         f" * (float){_per_axis(gen, scope, node, scale, out, 'x_scale')}")


GENERATORS: dict[str, Generator] = {
    "QuantizeLinear": _quantize_linear,
    "DequantizeLinear": _dequantize_linear,
    "MatMulInteger": _matmul_integer,
    "ConvInteger": _conv_integer,
    "QLinearMatMul": _qlinear_matmul,
    "QLinearConv": _qlinear_conv,
}
