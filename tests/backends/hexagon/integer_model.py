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
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

import numpy as np
import onnx
from onnx import numpy_helper

from egraph_compiler.backends.hexagon.quant import apply_requant, requant_from_scales

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
                wc = w.astype(np.int64) - zw.astype(np.int64).reshape(-1, 1, 1, 1)
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
                b = b - (0 if zb is None else zb.astype(np.int64).reshape(-1, 1, 1, 1))
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
