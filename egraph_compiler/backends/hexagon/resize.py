"""Resize of a quantised tensor on the integers (SegFormer's decode head upsamples its
feature maps with a bilinear Resize between DequantizeLinear and QuantizeLinear).

Source coordinates follow ONNX Resize (opset 11–19): ``coordinate_transformation_mode``
half_pixel, half_pixel_symmetric, pytorch_half_pixel, align_corners or asymmetric; the
output size from ``sizes`` or ``floor(in·scale)``; coordinates outside the input clamp to
its edge (what ONNX's edge padding of the two neighbours amounts to).

- ``nearest``: each output element is one input element (``nearest_mode`` rounding), a
  pure data move: the lowering emits the table `Gather`, exact.
- ``linear``: per resized axis the two neighbours ``x0 = ⌊x⌋`` and ``x0 + 1`` get the
  integer weights ``2^B − w`` and ``w = ⌊frac·2^B + ½⌋`` (B = `RESIZE_WEIGHT_BITS`); an
  output is ``Σ_taps (Π_axes w)·(x − z_x)``, requantised by ``s_x / (s_y·2^(B·axes))``
  with `quant.requant_from_scales` (rounding half up). The output keeps the input's
  quantisation (as Pad: QDQ quantisers give Resize one set of parameters; a following
  QuantizeLinear with others requantises). Weights are exact where ``frac·2^B`` is an
  integer (any power-of-two scale up to 2^B with half_pixel or asymmetric), otherwise
  within 2^−(B+1) of ONNX's, so the result stays within one unit of onnxruntime's.

An axis whose coordinates are the identity takes no weights, so up to `MAX_LINEAR_AXES`
axes (bilinear over H and W) keep the int32 sum exact: 4 taps · 2^(2B) · 255 < 2^31.
Cubic, antialiasing, ``tf_crop_and_resize``, ``axes`` and ``keep_aspect_ratio_policy`` are
refused by name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from egraph_compiler.backends.hexagon.kernels import _c_array, requant_c
from egraph_compiler.backends.hexagon.kinds import Kernel, register
from egraph_compiler.backends.hexagon.lower import IntOp
from egraph_compiler.backends.hexagon.quant import Requant, apply_requant, requant_from_scales
from egraph_compiler.ir.errors import ModelError
from egraph_compiler.ir.graph import Node

if TYPE_CHECKING:
    from egraph_compiler.backends.hexagon.lower import _Lowering

RESIZE_WEIGHT_BITS = 10
MAX_LINEAR_AXES = 2


@dataclass(frozen=True, slots=True)
class QResize:
    """``y[i] = rq(Σ_t weight[i, t]·(x[index[i, t]] − x_zero))`` over uint8 (linear Resize)."""

    index: np.ndarray  # int32 [outputs, taps]: device offset of each tap's input element
    weight: np.ndarray  # int32 [outputs, taps]; each row sums to 2^(B·axes)
    x_zero: int
    requant: Requant


@dataclass(frozen=True, slots=True)
class ResizePlan:
    out_shape: tuple[int, ...]
    index: np.ndarray  # int64 [*out_shape, taps]: logical flat input position of each tap
    weight: np.ndarray | None  # int64 like ``index`` (linear), None for nearest (one tap)
    linear_axes: int


def _attr(node: Node, name: str, default: object) -> object:
    value = node.attr(name, default)
    return value.decode() if isinstance(value, bytes) else value


def source_coordinates(mode: str, out_size: int, in_size: int, scale: float) -> np.ndarray:
    """ONNX Resize's ``x_original`` for every output index along one axis (float64)."""
    i = np.arange(out_size, dtype=np.float64)
    if mode == "half_pixel":
        return (i + 0.5) / scale - 0.5
    if mode == "half_pixel_symmetric":
        adjustment = out_size / (scale * in_size)
        offset = in_size / 2 * (1 - adjustment)
        return offset + (i + 0.5) / scale - 0.5
    if mode == "pytorch_half_pixel":
        return (i + 0.5) / scale - 0.5 if out_size > 1 else np.zeros(out_size)
    if mode == "align_corners":
        return i * (in_size - 1) / (out_size - 1) if out_size > 1 else np.zeros(out_size)
    if mode == "asymmetric":
        return i / scale
    raise ValueError(mode)


_NEAREST = {"round_prefer_floor": lambda x: np.ceil(x - 0.5), "round_prefer_ceil": lambda x: np.floor(x + 0.5),
            "floor": np.floor, "ceil": np.ceil}
_COORDINATES = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric")


def resize_plan(node: Node, in_shape: tuple[int, ...], operands: dict[int, np.ndarray]) -> ResizePlan:
    """Output shape and per-output taps of ``node`` (operands: its constant inputs by position)."""
    where = f"hexagon backend: Resize {node.name}"
    mode = str(_attr(node, "mode", "nearest"))
    coordinates = str(_attr(node, "coordinate_transformation_mode", "half_pixel"))
    nearest = str(_attr(node, "nearest_mode", "round_prefer_floor"))
    if mode not in ("nearest", "linear"):
        raise ModelError(f"{where}: mode {mode} is not supported (nearest and linear are)")
    if coordinates not in _COORDINATES:
        raise ModelError(f"{where}: coordinate_transformation_mode {coordinates} is not supported")
    if mode == "nearest" and nearest not in _NEAREST:
        raise ModelError(f"{where}: nearest_mode {nearest} is not supported")
    if node.attr("axes", None) is not None or str(_attr(node, "keep_aspect_ratio_policy", "stretch")) != "stretch":
        raise ModelError(f"{where}: axes / keep_aspect_ratio_policy are not supported")
    scales = operands.get(2, np.zeros(0)).astype(np.float64).reshape(-1)
    sizes = operands.get(3, np.zeros(0)).astype(np.int64).reshape(-1)
    rank = len(in_shape)
    if sizes.size == rank:
        out_shape = tuple(int(s) for s in sizes)
        scales = np.asarray(out_shape, np.float64) / np.asarray(in_shape, np.float64)
    elif scales.size == rank:
        out_shape = tuple(int(np.floor(d * s)) for d, s in zip(in_shape, scales, strict=True))
    else:
        raise ModelError(f"{where}: needs constant scales or sizes for each of the {rank} axes")
    if int(_attr(node, "antialias", 0)) and mode == "linear" and np.any(scales < 1):  # type: ignore[call-overload]
        raise ModelError(f"{where}: an antialiased downscale is not supported")
    strides = np.cumprod((1, *in_shape[:0:-1]))[::-1]  # row-major strides of the logical input
    index = np.zeros((1,) * (2 * rank), np.int64)  # [*out, *taps per axis], built axis by axis
    weight = np.ones((1,) * (2 * rank), np.int64)
    linear_axes = 0
    for axis, (size_in, size_out, scale) in enumerate(zip(in_shape, out_shape, scales, strict=True)):
        x = source_coordinates(coordinates, size_out, size_in, float(scale))
        weights = None
        if size_in == size_out and np.array_equal(x, np.arange(size_out)):
            taps = np.arange(size_out)[:, None]  # the identity: no weights
        elif mode == "nearest":
            taps = np.clip(_NEAREST[nearest](x), 0, size_in - 1).astype(np.int64)[:, None]
        else:
            x = np.clip(x, 0, size_in - 1)
            low = np.floor(x).astype(np.int64)
            w = np.floor((x - low) * 2**RESIZE_WEIGHT_BITS + 0.5).astype(np.int64)
            taps = np.stack([low, np.minimum(low + 1, size_in - 1)], 1)
            weights = np.stack([2**RESIZE_WEIGHT_BITS - w, w], 1)
            linear_axes += 1
        grid = [1] * (2 * rank)
        grid[axis], grid[rank + axis] = taps.shape
        index = index + taps.reshape(grid) * int(strides[axis])
        if weights is not None:
            weight = weight * weights.reshape(grid)
    if linear_axes > MAX_LINEAR_AXES:
        raise ModelError(f"{where}: linear over {linear_axes} axes (at most {MAX_LINEAR_AXES} keep the sum in int32)")
    full = (*out_shape, *index.shape[rank:])
    index = np.broadcast_to(index, full).reshape(*out_shape, -1)
    if linear_axes == 0:
        return ResizePlan(out_shape, index, None, 0)
    weight = np.broadcast_to(weight, full).reshape(*out_shape, -1)
    return ResizePlan(out_shape, index, weight, linear_axes)


def resize_reference(spec: QResize, x: np.ndarray) -> np.ndarray:
    taps = x.reshape(-1).astype(np.int64)[spec.index] - spec.x_zero
    return apply_requant((taps * spec.weight).sum(axis=1), spec.requant)


def resize_c(spec: QResize, prefix: str) -> tuple[str, str]:
    outputs, taps = spec.index.shape
    rq = spec.requant
    code = (_c_array(f"{prefix}_index", "i32", spec.index.astype(np.int64))
            + _c_array(f"{prefix}_weight", "i32", spec.weight.astype(np.int64))
            + _c_array(f"{prefix}_mult", "i32", np.asarray(rq.multiplier, dtype=np.int64))
            + _c_array(f"{prefix}_shift", "i32", np.asarray(rq.shift, dtype=np.int64))
            + f"""
static void __attribute__((noinline)) {prefix}(const u8 *restrict x, u8 *restrict out) {{
  for (int i = 0; i < {outputs}; i++) {{
    i32 a = 0;
    for (int t = 0; t < {taps}; t++) a += {prefix}_weight[i * {taps} + t] * ((i32)x[{prefix}_index[i * {taps} + t]] - {spec.x_zero});
    u8 y; {requant_c(prefix + "_mult", prefix + "_shift", "0", rq, "a")}
    out[i] = y;
  }}
}}
""")
    return code, f"{prefix}({{x}}, {{y}});"


@register
class ResizeKernel(Kernel):
    """Linear Resize of a uint8 tensor (`QResize`); nearest lowers to the Gather kernel."""

    kind, spec_type = "resize", QResize
    emit = staticmethod(resize_c)

    def reference(self, spec: QResize, *inputs: np.ndarray) -> np.ndarray:
        return resize_reference(spec, inputs[0])

    def describe(self, spec: QResize) -> str:
        return f"scalar C (resize: {spec.index.shape[1]} weighted taps per output, {RESIZE_WEIGHT_BITS}-bit weights)"


def lower_resize(low: _Lowering, node: Node) -> None:
    """DQ → Resize → Q (or Resize on the integers): scales/sizes must be known at compile
    time; the output is row-major in the input's quantisation."""
    x, y = node.inputs[0], node.outputs[0]
    source = low.device_source(node, x)
    q = low.out.qparams[source]
    operands = {}
    for position, value in enumerate(node.inputs):
        if position and value:
            if value not in low.known:
                raise ModelError(f"hexagon backend: Resize {node.name}: {value} must be known at compile time")
            operands[position] = np.asarray(low.known[value])
    plan = resize_plan(node, low.out.shapes[source], operands)
    device_index = low.physical_index(source).reshape(-1)[plan.index]
    if plan.weight is None:  # nearest (or the identity): a data move
        result = low.gather(node.name, source, device_index[..., 0], plan.out_shape, False)
    else:
        rq = requant_from_scales(np.array([2.0 ** -(RESIZE_WEIGHT_BITS * plan.linear_axes)]), q.zero_point)
        spec = QResize(device_index.reshape(-1, plan.index.shape[-1]).astype(np.int32),
                       plan.weight.reshape(-1, plan.index.shape[-1]).astype(np.int32), q.zero_point, rq)
        result = low.new_tensor(f"{y}_resize", plan.out_shape, q)
        low.out.ops.append(IntOp(node.name, "resize", spec, (source,), result))
    (low.alias if x in low.alias else low.quantised)[y] = result
