"""Exact NumPy models of integer ONNX graphs: the oracle for dnnr's integer kernels.

onnxruntime is no oracle for integer kernels: its u8×s8 MatMulInteger / QLinearMatMul /
QLinearConv kernels saturate 16-bit pair sums with full-range int8 weights on x86 CPUs
without AVX-512 VNNI (measured with onnxruntime 1.32.0 on an AVX2-only CPU: off by up
to 34,613 in the int32 accumulator), so its answer depends on the machine running it.

`run_integer_graph` interprets a model made of QuantizeLinear, QLinearConv, QLinearMatMul,
MatMulInteger / ConvInteger → Cast → Mul → QuantizeLinear and DequantizeLinear in two modes:

- ``"kernel"``: the arithmetic dnnr's kernels implement — exact int64 accumulation, then
  the fixed-point requantisation of `backends.hexagon.quant` (31-bit multiplier, rounding
  half up). dnnr's outputs must equal it bit for bit.
- ``"spec"``: the operators' ONNX definitions — the same exact accumulation, then the real
  scale applied in float64 (QLinear*) or float32 (Cast → Mul → QuantizeLinear, as the
  graph spells it), rounding half to even. The kernel model must stay within one unit of
  it: that checks the integer arithmetic against the operators' meaning, CPU-independently.

Graph inputs are quantised as the Hexagon runner does (float64 ``x / scale``, ties to even).

`run_qdq_graph` interprets QDQ graphs (quantize_static's DequantizeLinear → float operator
→ QuantizeLinear) in the kernel arithmetic only: each float operator between
DequantizeLinear inputs and its QuantizeLinear is one integer operator, modelled from the
ONNX node and `backends.hexagon.quant` alone (never from the lowering's own NumPy
references, which would share its mistakes). Its ONNX definition is what onnxruntime
computes in float for a QDQ graph (exact on every CPU): `assert_qdq_kernel_arithmetic`
compares dnnr bit for bit with the model and the model within one unit of onnxruntime.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Literal

import numpy as np
import onnx
from onnx import numpy_helper
from onnx.reference import ReferenceEvaluator

from egraph_compiler.backends.hexagon.quant import (
    ELEMENTWISE_SHIFT,
    apply_requant,
    requant_from_scales,
)
from egraph_compiler.backends.hexagon.resize import RESIZE_WEIGHT_BITS

Mode = Literal["kernel", "spec"]


def quantize_input(x: np.ndarray, scale: float, zero_point: int, dtype: np.dtype) -> np.ndarray:
    """A float graph input quantised as the Hexagon runner does (ties to even)."""
    info = np.iinfo(dtype)
    q = np.rint(np.asarray(x, np.float64) / float(scale)) + int(zero_point)
    return np.clip(q, info.min, info.max).astype(dtype)


def conv_accumulate(x: np.ndarray, w: np.ndarray, attrs: Mapping[str, object],
                    bias: np.ndarray | None = None) -> np.ndarray:
    """Exact int64 NCHW convolution of zero-point-corrected operands (groups, pads, strides,
    dilations as ONNX Conv defines them)."""
    x, w = x.astype(np.int64), w.astype(np.int64)
    if x.ndim == 3:  # a 1-D convolution is the 2-D one over a map of height 1
        attrs = {k: ([0, v[0], 0, v[1]] if k == "pads" else [1, *v]) if k in ("pads", "strides", "dilations") else v
                 for k, v in attrs.items()}
        return conv_accumulate(x[:, :, None], w[:, :, None], attrs, bias)[:, :, 0]
    n, c, h, wd = x.shape
    m, cg, kh, kw = w.shape
    group = int(attrs.get("group", 1))
    pt, pl, pb, pr = (list(attrs.get("pads", [0, 0, 0, 0])) + [0, 0, 0, 0])[:4]
    sh, sw = list(attrs.get("strides", [1, 1]))
    dh, dw = list(attrs.get("dilations", [1, 1]))
    padded = np.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    oh = (h + pt + pb - dh * (kh - 1) - 1) // sh + 1
    ow = (wd + pl + pr - dw * (kw - 1) - 1) // sw + 1
    out = np.zeros((n, m, oh, ow), np.int64)
    per_group = m // group
    for g in range(group):
        xs = padded[:, g * cg:(g + 1) * cg]
        ws = w[g * per_group:(g + 1) * per_group]
        for ky in range(kh):
            for kx in range(kw):
                window = xs[:, :, ky * dh: ky * dh + sh * (oh - 1) + 1: sh, kx * dw: kx * dw + sw * (ow - 1) + 1: sw]
                out[:, g * per_group:(g + 1) * per_group] += np.einsum("nchw,mc->nmhw", window, ws[:, :, ky, kx])
    if bias is not None:
        out += bias.astype(np.int64).reshape(1, -1, 1, 1)
    return out


def requantize(acc: np.ndarray, real_scale: np.ndarray, zero_point: int, dtype: np.dtype,
               channel_axis: int, mode: Mode) -> np.ndarray:
    """``acc`` scaled by ``real_scale`` (one value or one per channel) plus ``zero_point``,
    saturated to ``dtype``."""
    info = np.iinfo(dtype)
    real = np.atleast_1d(np.asarray(real_scale, np.float64))
    if mode == "kernel":
        signed = info.min < 0  # the kernels work in uint8: an int8 tensor is stored +128
        offset = 128 if signed else 0
        rq = requant_from_scales(real, zero_point + offset, 0, 255)
        return (apply_requant(acc, rq, channel_axis).astype(np.int16) - offset).astype(dtype)
    shape = [1] * acc.ndim
    if real.size > 1:
        shape[channel_axis] = -1
    scaled = np.rint(acc.astype(np.float64) * real.reshape(shape)) + int(zero_point)
    return np.clip(scaled, info.min, info.max).astype(dtype)


def run_integer_graph(model: onnx.ModelProto, inputs: Mapping[str, np.ndarray], mode: Mode) -> dict[str, np.ndarray]:
    """Every graph output of ``model``, integer tensors as integers (DequantizeLinear outputs
    are returned as the quantised tensor they dequantise, so results compare exactly)."""
    values: dict[str, np.ndarray] = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    values.update({k: np.asarray(v) for k, v in inputs.items()})
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for node in model.graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    done: set[int] = set()  # ids of nodes modelled as part of an earlier chain

    def arg(node: onnx.NodeProto, index: int) -> np.ndarray | None:
        return values[node.input[index]] if len(node.input) > index and node.input[index] else None

    for node in model.graph.node:
        if id(node) in done:
            continue
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        op = node.op_type
        if op == "QuantizeLinear":
            x, scale, zero = arg(node, 0), arg(node, 1), arg(node, 2)
            values[node.output[0]] = quantize_input(x, float(scale), int(zero), zero.dtype)
        elif op == "DequantizeLinear":
            values[node.output[0]] = arg(node, 0)  # compared in the quantised domain
        elif op in ("QLinearConv", "QLinearMatMul"):
            x, sx, zx, w, sw, zw, sy, zy = (arg(node, i) for i in range(8))
            xc = x.astype(np.int64) - zx.astype(np.int64)
            if op == "QLinearConv":
                wc = w.astype(np.int64) - zw.astype(np.int64).reshape(-1, *[1] * (w.ndim - 1))
                acc, axis = conv_accumulate(xc, wc, attrs, arg(node, 8)), 1
            else:
                acc, axis = np.matmul(xc, w.astype(np.int64) - zw.astype(np.int64)), -1
            real = sx.astype(np.float64) * np.atleast_1d(sw).astype(np.float64) / float(sy)
            values[node.output[0]] = requantize(acc, real, int(zy), zy.dtype, axis, mode)
        elif op in ("MatMulInteger", "ConvInteger"):
            # Only as the chain → Cast(float) → Mul(constant c) → QuantizeLinear (what dnnr lowers).
            (cast,) = consumers[node.output[0]]
            (mul,) = consumers[cast.output[0]]
            (quant,) = consumers[mul.output[0]]
            a, b = arg(node, 0).astype(np.int64), arg(node, 1).astype(np.int64)
            za, zb = arg(node, 2), arg(node, 3)
            a = a - (0 if za is None else int(za))
            if op == "ConvInteger":
                b = b - (0 if zb is None else zb.astype(np.int64).reshape(-1, *[1] * (b.ndim - 1)))
                acc, axis = conv_accumulate(a, b, attrs), 1
            else:
                acc, axis = np.matmul(a, b - (0 if zb is None else zb.astype(np.int64))), -1
            c = next(values[i] for i in mul.input if i != cast.output[0])
            sy, zy = values[quant.input[1]], values[quant.input[2]]
            if mode == "kernel":
                real = np.asarray(c, np.float64).reshape(-1) / float(sy)
                out = requantize(acc, real, int(zy), zy.dtype, axis, mode)
            else:  # the graph as written: float32 Cast and Mul, QuantizeLinear's division
                y = acc.astype(np.float32) * np.asarray(c, np.float32)
                info = np.iinfo(zy.dtype)
                out = np.clip(np.rint(y / np.float32(sy)) + int(zy), info.min, info.max).astype(zy.dtype)
            values[quant.output[0]] = out
            done.update((id(cast), id(mul), id(quant)))
        else:
            raise NotImplementedError(f"integer model: no exact model of {op} ({node.name})")
    return {o.name: values[o.name] for o in model.graph.output}


def assert_kernel_arithmetic(ours: Mapping[str, np.ndarray], model: onnx.ModelProto,
                             inputs: Mapping[str, np.ndarray]) -> None:
    """``ours`` equals the kernel model bit for bit, and the kernel model stays within one
    unit of the operators' definition (most values equal)."""
    kernel = run_integer_graph(model, inputs, "kernel")
    spec = run_integer_graph(model, inputs, "spec")
    for name, expected in kernel.items():
        np.testing.assert_array_equal(ours[name], expected, err_msg=f"{name}: dnnr vs the exact integer model")
        difference = np.abs(expected.astype(np.int32) - spec[name].astype(np.int32))
        assert difference.max() <= 1, f"{name}: integer model {difference.max()} units from the ONNX definition"
        assert (difference == 0).mean() > 0.9
        # many distinct levels: the requantisation is exercised, not only saturation (or Relu's zero)
        assert np.unique(expected).size > 16, f"{name}: {np.unique(expected).size} levels prove little"


# ---- QDQ graphs ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class QTensor:
    """A quantised tensor as the device holds it: uint8-domain values (an int8 tensor is
    stored +128, its zero point with it), the real scale (one per channel for weights) and
    whether the ONNX tensor is int8."""

    values: np.ndarray  # int64
    scale: np.ndarray  # float64, one value or one per channel along ``axis``
    zero: np.ndarray  # int64 device-domain zero point(s)
    signed: bool
    axis: int = 1

    @property
    def scalar_scale(self) -> float:
        if self.scale.size != 1:
            raise NotImplementedError("integer model: a per-channel quantised tensor used as an activation")
        return float(self.scale.reshape(-1)[0])

    @property
    def scalar_zero(self) -> int:
        return int(self.zero.reshape(-1)[0])

    def centred(self) -> np.ndarray:
        """``values − zero`` (per channel along ``axis`` where the zero point is per channel)."""
        if self.zero.size == 1:
            return self.values - self.scalar_zero
        shape = [1] * self.values.ndim
        shape[self.axis % self.values.ndim] = -1
        return self.values - self.zero.reshape(shape)

    def onnx_values(self) -> np.ndarray:
        return (self.values - 128).astype(np.int8) if self.signed else self.values.astype(np.uint8)


def _quantised(data: np.ndarray, scale: np.ndarray, zero: np.ndarray | None, axis: int = 1) -> QTensor:
    signed = zero is not None and zero.dtype == np.int8 or data.dtype == np.int8
    offset = 128 if signed else 0
    zero_values = np.zeros(1, np.int64) if zero is None else zero.astype(np.int64).reshape(-1)
    return QTensor(data.astype(np.int64) + offset, np.asarray(scale, np.float64).reshape(-1), zero_values + offset,
                   signed, axis)


def _requantised(values: np.ndarray, source: QTensor, scale: float, zero: int, signed: bool) -> QTensor:
    """``values`` (in ``source``'s quantisation) written in (scale, zero): the elementwise
    fixed-point path, ``((x − z)·round(s/s_y·2^S) + 2^(S−1)) >> S`` (S = ELEMENTWISE_SHIFT),
    an identity where the parameters agree."""
    multiplier = round(source.scalar_scale / scale * 2**ELEMENTWISE_SHIFT)
    shifted = ((values - source.scalar_zero) * multiplier + (1 << (ELEMENTWISE_SHIFT - 1))) >> ELEMENTWISE_SHIFT
    return QTensor(np.clip(shifted + zero, 0, 255), np.array([scale]), np.array([zero]), signed)


def _elementwise(kind: str, a: QTensor, b: QTensor, scale: float, zero: int) -> np.ndarray:
    """Add: ``(a−za)·ma + (b−zb)·mb``; Mul: ``(a−za)·(b−zb)·m``; each multiplier the real
    ratio times 2^S rounded; then ``+ 2^(S−1) >> S``, the output zero point, saturation."""
    one = 2**ELEMENTWISE_SHIFT
    if kind == "Add":
        acc = a.centred() * round(a.scalar_scale / scale * one) + b.centred() * round(b.scalar_scale / scale * one)
    else:
        acc = a.centred() * b.centred() * round(a.scalar_scale * b.scalar_scale / scale * one)
    return np.clip(((acc + (1 << (ELEMENTWISE_SHIFT - 1))) >> ELEMENTWISE_SHIFT) + zero, 0, 255)


def _explicit_pads(attrs: Mapping[str, object], spatial: tuple[int, ...], kernel: tuple[int, ...]) -> list[int]:
    """ONNX's pads for ``auto_pad`` (SAME_*: total max((⌈in/s⌉−1)·s + (k−1)·d + 1 − in, 0),
    the odd one at the end for SAME_UPPER; VALID: none), or the ``pads`` attribute."""
    mode = attrs.get("auto_pad", b"NOTSET")
    mode = mode.decode() if isinstance(mode, bytes) else str(mode)
    n = len(spatial)
    if mode == "NOTSET":
        return list(attrs.get("pads", [0] * 2 * n))  # type: ignore[arg-type]
    if mode == "VALID":
        return [0] * 2 * n
    strides = list(attrs.get("strides", [1] * n))  # type: ignore[arg-type]
    dilations = list(attrs.get("dilations", [1] * n))  # type: ignore[arg-type]
    begins, ends = [], []
    for size, k, s, d in zip(spatial, kernel, strides, dilations, strict=True):
        total = max((-(-size // s) - 1) * s + (k - 1) * d + 1 - size, 0)
        begins.append(total // 2 if mode == "SAME_UPPER" else total - total // 2)
        ends.append(total - begins[-1])
    return begins + ends


def _pool_windows(shape: tuple[int, ...], attrs: Mapping[str, object], global_pool: bool
                  ) -> tuple[tuple[int, ...], list[tuple[tuple[int, ...], tuple[slice, ...]]]]:
    """Output spatial shape and, per output position, its index and the input slices its
    window covers (clipped to the input: ONNX pools ignore padding unless told otherwise)."""
    spatial = tuple(shape[2:])
    if global_pool:
        kernel, strides, pads, ceil = spatial, (1,) * len(spatial), [0] * 2 * len(spatial), 0
    else:
        kernel = tuple(attrs["kernel_shape"])  # type: ignore[arg-type]
        strides = tuple(attrs.get("strides", (1,) * len(spatial)))  # type: ignore[arg-type]
        pads = _explicit_pads(attrs, spatial, kernel)
        ceil = int(attrs.get("ceil_mode", 0))  # type: ignore[call-overload]
        if any(int(d) != 1 for d in attrs.get("dilations", (1,) * len(spatial))):  # type: ignore[union-attr]
            raise NotImplementedError("integer model: dilated pooling")
    n = len(spatial)
    out = []
    for size, k, s, b, e in zip(spatial, kernel, strides, pads[:n], pads[n:], strict=True):
        span = size + b + e - k
        count = (-(-span // s) if ceil else span // s) + 1
        if ceil and (count - 1) * s >= size + b:  # ONNX: the last window must start inside the input or left pad
            count -= 1
        out.append(count)
    windows = []
    for index in np.ndindex(*out):
        slices = tuple(slice(max(i * s - b, 0), min(i * s - b + k, size))
                       for i, s, b, k, size in zip(index, strides, pads[:n], kernel, spatial, strict=True))
        windows.append((index, slices))
    return tuple(out), windows


class _QdqModel:
    """One pass over a QDQ graph in node order (see `run_qdq_graph`)."""

    def __init__(self, model: onnx.ModelProto, inputs: Mapping[str, np.ndarray]) -> None:
        self.model = model
        self.plain: dict[str, np.ndarray] = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
        self.plain.update({k: np.asarray(v) for k, v in inputs.items()})
        self.quantised: dict[str, QTensor] = {}  # QuantizeLinear outputs (and quantised constants by use)
        self.dequantised: dict[str, QTensor] = {}  # DequantizeLinear output -> the tensor it dequantises
        self.consumers: dict[str, list[onnx.NodeProto]] = {}
        for node in model.graph.node:
            for name in node.input:
                self.consumers.setdefault(name, []).append(node)
        self.done: set[int] = set()
        self.unmodelled: dict[str, str] = {}  # value -> why the model cannot compute it (a float operator)

    def run(self, wanted: set[str] | None = None) -> dict[str, QTensor]:
        for node in self.model.graph.node:
            if id(node) in self.done:
                continue
            if reason := next((self.unmodelled[i] for i in node.input if i in self.unmodelled), None):
                self.unmodelled.update(dict.fromkeys(node.output, reason))
            elif node.op_type == "QuantizeLinear":
                self.quantize(node)
            elif node.op_type == "DequantizeLinear":
                self.dequantize(node)
            elif all(i in self.plain for i in node.input if i):
                self.evaluate_plain(node)
            else:
                try:
                    self.float_operator(node)
                except NotImplementedError as error:  # an error only if an output asked for depends on it
                    self.unmodelled.update(dict.fromkeys(node.output, str(error)))
        result = {}
        for output in self.model.graph.output:
            if wanted is not None and output.name not in wanted:
                continue
            if output.name in self.unmodelled:
                raise NotImplementedError(f"{output.name}: {self.unmodelled[output.name]}")
            if output.name not in self.dequantised:
                raise NotImplementedError(f"integer model: graph output {output.name} is not a DequantizeLinear's")
            result[output.name] = self.dequantised[output.name]
        return result

    def quantize(self, node: onnx.NodeProto) -> None:
        x, scale, zero = node.input[0], self.plain[node.input[1]], self.plain[node.input[2]]
        if x in self.dequantised:  # Q(DQ(t)): t requantised to the new parameters
            target = _quantised(np.zeros(0, np.int64), scale, zero)
            self.quantised[node.output[0]] = _requantised(self.dequantised[x].values, self.dequantised[x],
                                                          target.scalar_scale, target.scalar_zero, target.signed)
        elif x in self.plain:  # a graph input (or a float constant): quantised as the runner does
            data = quantize_input(self.plain[x], float(scale), int(zero), zero.dtype)
            self.quantised[node.output[0]] = _quantised(data, scale, zero)
        else:
            raise NotImplementedError(f"integer model: QuantizeLinear {node.name} of {x}, not computed here")

    def dequantize(self, node: onnx.NodeProto) -> None:
        x = node.input[0]
        zero = self.plain[node.input[2]] if len(node.input) > 2 and node.input[2] else None
        axis = next((a.i for a in node.attribute if a.name == "axis"), 1)
        if x in self.quantised:
            self.dequantised[node.output[0]] = self.quantised[x]
        elif x in self.plain:
            self.dequantised[node.output[0]] = _quantised(self.plain[x], self.plain[node.input[1]], zero, axis)
        else:
            raise NotImplementedError(f"integer model: DequantizeLinear {node.name} of {x}, not computed here")

    def evaluate_plain(self, node: onnx.NodeProto) -> None:
        """Compile-time values (shapes, indices): ONNX's reference implementation."""
        results = ReferenceEvaluator(node).run(None, {i: self.plain[i] for i in node.input if i})
        self.plain.update(zip(node.output, (np.asarray(r) for r in results), strict=False))

    def output_quantisation(self, node: onnx.NodeProto) -> tuple[float, int, bool, list[onnx.NodeProto]]:
        """The parameters of the QuantizeLinear(s) reading the operator's output."""
        readers = self.consumers.get(node.output[0], [])
        if not readers or any(r.op_type != "QuantizeLinear" for r in readers):
            raise NotImplementedError(f"integer model: {node.op_type} {node.name} is not followed by QuantizeLinear "
                                      "(a float operator runs in the scalar fallback, not modelled here)")
        params = {(float(self.plain[r.input[1]]), int(self.plain[r.input[2]]), self.plain[r.input[2]].dtype.name)
                  for r in readers}
        if len(params) != 1:
            raise NotImplementedError(f"integer model: {node.name} is quantised with several parameters")
        target = _quantised(np.zeros(0, np.int64), self.plain[readers[0].input[1]], self.plain[readers[0].input[2]])
        return target.scalar_scale, target.scalar_zero, target.signed, readers

    def operand(self, node: onnx.NodeProto, index: int) -> QTensor:
        name = node.input[index]
        if name not in self.dequantised:
            raise NotImplementedError(f"integer model: {node.op_type} {node.name} reads {name}, which is not "
                                      "a DequantizeLinear's output")
        return self.dequantised[name]

    def float_operator(self, node: onnx.NodeProto) -> None:
        scale, zero, signed, readers = self.output_quantisation(node)
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        op = node.op_type
        if op in ("Conv", "MatMul", "Gemm"):
            values = self.accumulating(node, attrs, scale, zero)
        elif op in ("Add", "Mul"):
            values = _elementwise(op, self.operand(node, 0), self.operand(node, 1), scale, zero)
        elif op == "Concat":
            parts = [_requantised(x.values, x, scale, zero, signed).values
                     for x in (self.operand(node, i) for i in range(len(node.input)))]
            values = np.concatenate(parts, axis=int(attrs.get("axis", 0)))
        elif op in _MOVES:
            x = self.operand(node, 0)
            moved = _MOVES[op](self, node, attrs, x)
            values = _requantised(moved, x, scale, zero, signed).values
        elif op in ("AveragePool", "GlobalAveragePool"):
            values = self.average_pool(node, attrs, scale, zero)
        else:
            raise NotImplementedError(f"integer model: no exact model of {op} ({node.name})")
        for reader in readers:
            self.quantised[reader.output[0]] = QTensor(np.asarray(values, np.int64), np.array([scale]),
                                                       np.array([zero]), signed)
            self.done.add(id(reader))

    def accumulating(self, node: onnx.NodeProto, attrs: dict, scale: float, zero: int) -> np.ndarray:
        """Conv / MatMul / Gemm: exact accumulation of the centred operands plus the bias in
        accumulator units, requantised by `quant.requant_from_scales(s_x·s_w / s_y)`."""
        x, w = self.operand(node, 0), self.operand(node, 1)
        op = node.op_type
        if op == "Conv":
            w_values = w.centred()
            kernel = tuple(w_values.shape[2:])
            conv_attrs = {**attrs, "pads": _explicit_pads(attrs, tuple(x.values.shape[2:]), kernel)}
            acc, axis = conv_accumulate(x.centred(), w_values, conv_attrs), 1
        else:
            if op == "Gemm" and (attrs.get("transA", 0) or attrs.get("alpha", 1.0) != 1.0 or attrs.get("beta", 1.0) != 1.0):
                raise NotImplementedError(f"integer model: Gemm {node.name} with transA/alpha/beta")
            w_values = w.centred().T if op == "Gemm" and attrs.get("transB", 0) else w.centred()
            acc, axis = np.matmul(x.centred(), w_values), -1
        acc_scale = x.scalar_scale * w.scale
        if len(node.input) > 2 and node.input[2]:
            acc = acc + self.bias(node.input[2], acc_scale, acc.shape[axis]).reshape(
                [-1 if k == axis % acc.ndim else 1 for k in range(acc.ndim)])
        rq = requant_from_scales(acc_scale / scale, zero)
        return apply_requant(acc, rq, axis).astype(np.int64)

    def bias(self, name: str, acc_scale: np.ndarray, channels: int) -> np.ndarray:
        """The bias in accumulator units: an int32 tensor quantised with s_x·s_w as it is, any
        other (or a float constant) rounded to the nearest unit."""
        if name in self.dequantised:
            b = self.dequantised[name]
            raw = b.centred().reshape(-1)
            if np.allclose(b.scale, acc_scale, rtol=1e-6, atol=0.0):
                return raw * np.ones(channels, np.int64)
            real = raw * b.scale
        else:
            real = self.plain[name].astype(np.float64).reshape(-1)
        return np.rint(real / acc_scale).astype(np.int64) * np.ones(channels, np.int64)

    def average_pool(self, node: onnx.NodeProto, attrs: dict, scale: float, zero: int) -> np.ndarray:
        """Σ window − count·z_x, requantised by s_x / (s_y·count), count the window's input
        elements (count_include_pad = 0)."""
        x = self.operand(node, 0)
        if int(attrs.get("count_include_pad", 0)):
            raise NotImplementedError(f"integer model: AveragePool {node.name} with count_include_pad")
        out_spatial, windows = _pool_windows(x.values.shape, attrs, node.op_type == "GlobalAveragePool")
        y = np.zeros((*x.values.shape[:2], *out_spatial), np.int64)
        for index, slices in windows:
            window = x.values[(slice(None), slice(None), *slices)]
            count = int(np.prod(window.shape[2:]))
            acc = window.reshape(*window.shape[:2], -1).sum(axis=2) - count * x.scalar_zero
            rq = requant_from_scales(np.array([x.scalar_scale / (scale * count)]), zero)
            y[(slice(None), slice(None), *index)] = apply_requant(acc, rq)
        return y


def _max_pool(model: _QdqModel, node: onnx.NodeProto, attrs: dict, x: QTensor) -> np.ndarray:
    out_spatial, windows = _pool_windows(x.values.shape, attrs, False)
    y = np.zeros((*x.values.shape[:2], *out_spatial), np.int64)
    for index, slices in windows:
        window = x.values[(slice(None), slice(None), *slices)]
        y[(slice(None), slice(None), *index)] = window.reshape(*window.shape[:2], -1).max(axis=2)
    return y


def _pad(model: _QdqModel, node: onnx.NodeProto, attrs: dict, x: QTensor) -> np.ndarray:
    """A data move; the constant mode fills with the pad value quantised with x's parameters."""
    pads = model.plain[node.input[1]].reshape(-1)
    axes = [int(a) % x.values.ndim for a in model.plain[node.input[3]].reshape(-1)] \
        if len(node.input) > 3 and node.input[3] else list(range(x.values.ndim))
    widths = [(0, 0)] * x.values.ndim
    for k, axis in enumerate(axes):
        widths[axis] = (int(pads[k]), int(pads[k + len(axes)]))
    mode = attrs.get("mode", b"constant")
    mode = mode.decode() if isinstance(mode, bytes) else str(mode)
    if mode != "constant":
        return np.pad(x.values, widths, mode=mode)
    fill = x.scalar_zero
    if len(node.input) > 2 and node.input[2]:
        name = node.input[2]
        value = model.dequantised[name].centred() * model.dequantised[name].scalar_scale \
            if name in model.dequantised else model.plain[name]
        fill = int(np.rint(float(np.asarray(value).reshape(-1)[0]) / x.scalar_scale)) + x.scalar_zero
    return np.pad(x.values, widths, mode="constant", constant_values=fill)


def _moved_by_onnx(model: _QdqModel, node: onnx.NodeProto, attrs: dict, x: QTensor) -> np.ndarray:
    """Layout operators move elements: ONNX's reference implementation on the integers."""
    feeds = {name: (x.values if k == 0 else model.plain[name]) for k, name in enumerate(node.input) if name}
    return np.asarray(ReferenceEvaluator(node).run(None, feeds)[0])


def _resize(model: _QdqModel, node: onnx.NodeProto, attrs: dict, x: QTensor) -> np.ndarray:
    """Nearest: ONNX's reference Resize on the integers (it only picks elements). Linear:
    per axis the weights ONNX's reference gives (its Resize of the identity matrix), as
    integers of `RESIZE_WEIGHT_BITS` bits rounded half up (1 on an axis it leaves alone),
    contracted with ``x − z_x`` axis by axis, then `quant.apply_requant` by 2^−(bits·axes):
    the output keeps x's quantisation."""
    mode = attrs.get("mode", b"nearest")
    if (mode.decode() if isinstance(mode, bytes) else mode) == "nearest":
        feeds = {name: (x.values.astype(np.float64) if k == 0 else model.plain[name])
                 for k, name in enumerate(node.input) if name}
        return np.asarray(ReferenceEvaluator(node).run(None, feeds)[0]).astype(np.int64)
    sizes = model.plain[node.input[3]] if len(node.input) > 3 and node.input[3] else None
    scales = model.plain[node.input[2]].astype(np.float64) if sizes is None else sizes / np.asarray(x.values.shape)
    acc, moved = x.centred(), 0
    for axis, size_in in enumerate(x.values.shape):
        size_out = int(sizes[axis]) if sizes is not None else int(np.floor(size_in * scales[axis]))
        if sizes is not None:  # the identity matrix resized along its second axis alone
            unit = onnx.helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], **attrs)
            shape = {"sizes": np.array([size_in, size_out], np.int64)}
        else:
            unit = onnx.helper.make_node("Resize", ["x", "", "scales"], ["y"], **attrs)
            shape = {"scales": np.array([1.0, scales[axis]], np.float32)}
        weights = ReferenceEvaluator(unit).run(None, {"x": np.eye(size_in, dtype=np.float32), **shape})[0]
        if weights.shape == (size_in, size_in) and np.array_equal(weights, np.eye(size_in)):
            continue
        integer = np.floor(weights.astype(np.float64) * 2**RESIZE_WEIGHT_BITS + 0.5).astype(np.int64)
        assert (integer.sum(axis=0) == 2**RESIZE_WEIGHT_BITS).all(), f"{node.name}: weights of axis {axis}"
        acc = np.moveaxis(np.tensordot(acc, integer, axes=([axis], [0])), -1, axis)
        moved += 1
    rq = requant_from_scales(np.array([2.0 ** -(RESIZE_WEIGHT_BITS * moved)]), x.scalar_zero)
    return apply_requant(acc, rq).astype(np.int64)


def _relu(model: _QdqModel, node: onnx.NodeProto, attrs: dict, x: QTensor) -> np.ndarray:
    return np.maximum(x.values, x.scalar_zero)  # Q is monotone: relu is a clip at the zero point


# Operators that only select, move or clip the quantised values (then requantised to the
# output's parameters, an identity where they agree).
_MOVES: dict[str, Callable[[_QdqModel, onnx.NodeProto, dict, QTensor], np.ndarray]] = {
    "MaxPool": _max_pool, "Pad": _pad, "Relu": _relu, "Resize": _resize,
    **{op: _moved_by_onnx for op in ("Reshape", "Transpose", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Gather",
                                    "Slice")},
}


def run_qdq_graph(model: onnx.ModelProto, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Every graph output of a QDQ ``model`` as the quantised tensor its DequantizeLinear
    reads (ONNX dtype), computed in the kernels' integer arithmetic."""
    return {name: tensor.onnx_values() for name, tensor in _QdqModel(model, inputs).run().items()}


def assert_qdq_kernel_arithmetic(ours: Mapping[str, np.ndarray], model: onnx.ModelProto,
                                 inputs: Mapping[str, np.ndarray], onnxruntime: Mapping[str, np.ndarray]) -> None:
    """dnnr's dequantised outputs ``ours`` (all or some of the graph's) are the integer
    model's bit for bit, and the integer model stays within one unit of onnxruntime's
    float QDQ run (most values equal)."""
    exact = _QdqModel(model, inputs).run(set(ours))
    for name, expected in exact.items():
        scale, zero = np.float32(expected.scalar_scale), expected.scalar_zero
        got = np.rint(np.asarray(ours[name], np.float64) / float(scale)).astype(np.int64) + zero
        # the runner dequantises as (q − z)·s in float32: the integers are recovered exactly
        np.testing.assert_array_equal(((got - zero).astype(np.float32) * scale).astype(np.float32), ours[name])
        wrong = got != expected.values
        assert not wrong.any(), (f"{name}: dnnr differs from the exact integer model at {int(wrong.sum())} of "
                                 f"{wrong.size} values (at most {int(np.abs(got - expected.values).max())} LSB; "
                                 f"first at {np.argwhere(wrong)[0].tolist()})")
        reference = np.rint(np.asarray(onnxruntime[name], np.float64) / float(scale)).astype(np.int64) + zero
        difference = np.abs(expected.values - reference)
        assert difference.max() <= 1, f"{name}: integer model {difference.max()} units from onnxruntime"
        assert (difference == 0).mean() > 0.9, f"{name}: only {(difference == 0).mean():.1%} equal to onnxruntime"


def operator_by_operator(model: onnx.ModelProto, dequantised: Mapping[str, np.ndarray],
                         inputs: Mapping[str, np.ndarray]) -> list[tuple[str, str, int, int]]:
    """Each integer operator of a QDQ ``model`` modelled from dnnr's own values of its
    inputs (``dequantised``: DequantizeLinear outputs as dnnr's runner returned them), so a
    difference upstream (a float-fallback operator rounding otherwise than onnxruntime)
    does not hide or cause one here. One row per operator whose inputs and output are all
    in ``dequantised``: (operator, node name, values that differ, largest difference)."""
    state = _QdqModel(model, inputs)
    params: dict[str, QTensor] = {}
    for node in model.graph.node:  # every DequantizeLinear's parameters (constants dequantised as they are)
        if node.op_type == "DequantizeLinear":
            if node.input[0] in state.plain:
                state.dequantize(node)
            else:
                zero = state.plain[node.input[2]]
                params[node.output[0]] = _quantised(np.zeros(0, np.int64), state.plain[node.input[1]], zero)
    for name, values in dequantised.items():
        if name in params:
            p = params[name]
            q = np.rint(np.asarray(values, np.float64) / float(np.float32(p.scalar_scale))).astype(np.int64)
            state.dequantised[name] = replace(p, values=q + p.scalar_zero)
    rows = []
    for node in model.graph.node:
        if node.op_type in ("QuantizeLinear", "DequantizeLinear") or not all(
                i in state.dequantised or i in state.plain for i in node.input if i) \
                or all(i in state.plain for i in node.input if i):
            continue
        readers = state.consumers.get(node.output[0], [])
        outputs = [d.output[0] for r in readers for d in state.consumers.get(r.output[0], [])
                   if d.op_type == "DequantizeLinear" and r.op_type == "QuantizeLinear"]
        if not outputs or outputs[0] not in state.dequantised:
            continue
        try:
            state.float_operator(node)
        except NotImplementedError:
            continue  # a float operator (the scalar fallback's), not an integer kernel
        expected = state.quantised[readers[0].output[0]].values
        got = state.dequantised[outputs[0]].values
        wrong = expected != got
        rows.append((node.op_type, node.name, int(wrong.sum()), int(np.abs(expected - got).max(initial=0))))
    return rows
