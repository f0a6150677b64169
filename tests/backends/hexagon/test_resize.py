"""Integer Resize on Hexagon (issue 14: SegFormer's decode head upsamples bilinearly
between DequantizeLinear and QuantizeLinear). The plan's taps and weights against ONNX's
reference Resize; quantised models in qemu against the exact integer model (bit for bit)
and onnxruntime (within 1 LSB)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx.reference import ReferenceEvaluator

from egraph_compiler.backends.hexagon.resize import RESIZE_WEIGHT_BITS, resize_plan
from egraph_compiler.ir.errors import ModelError
from egraph_compiler.ir.graph import Node

from .conftest import needs_toolchain
from .test_models import _compare, _quantise
from .test_pad_concat import _kinds, _model

h = onnx.helper

# (mode, coordinate_transformation_mode, nearest_mode, input shape, scales or None, sizes or None, exact)
PLAN_CASES = [
    ("linear", "half_pixel", "", (1, 3, 4, 5), None, (1, 3, 8, 10), True),
    ("linear", "align_corners", "", (1, 2, 3, 3), None, (1, 2, 5, 5), True),
    ("linear", "asymmetric", "", (1, 2, 4, 3), (1.0, 1.0, 2.0, 4.0), None, True),
    ("linear", "pytorch_half_pixel", "", (1, 2, 6, 6), None, (1, 2, 3, 3), True),
    ("linear", "half_pixel", "", (1, 1, 5, 7), None, (1, 1, 3, 4), False),  # weights rounded to 2^-B
    ("linear", "half_pixel_symmetric", "", (1, 1, 4, 4), None, (1, 1, 6, 6), False),
    ("nearest", "asymmetric", "floor", (1, 2, 4, 4), (1.0, 1.0, 2.0, 2.0), None, True),
    ("nearest", "half_pixel", "round_prefer_ceil", (1, 2, 3, 5), None, (1, 2, 7, 4), True),
    ("nearest", "align_corners", "round_prefer_floor", (1, 2, 4, 4), None, (1, 2, 6, 6), True),
    ("nearest", "half_pixel", "ceil", (2, 3, 5), (1.0, 1.0, 0.6), None, True),
]


def _resize_node(mode: str, coordinates: str, nearest: str, with_scales: bool) -> tuple[Node, onnx.NodeProto]:
    attrs = {"mode": mode, "coordinate_transformation_mode": coordinates, **({"nearest_mode": nearest} if nearest else {})}
    inputs = ["x", "", "scales"] if with_scales else ["x", "", "", "sizes"]
    return Node("Resize", tuple(inputs), ("y",), tuple(sorted(attrs.items())), "resize"), \
        h.make_node("Resize", inputs, ["y"], **attrs)


@pytest.mark.parametrize(("mode", "coordinates", "nearest", "shape", "scales", "sizes", "exact"), PLAN_CASES)
def test_resize_plan_matches_the_onnx_reference(mode, coordinates, nearest, shape, scales, sizes, exact):
    """The taps (and weights) the kernel uses reproduce ONNX's reference Resize on integer
    values: exactly where the weights are multiples of 2^-B, else within 2^-(B+1) per axis."""
    node, proto = _resize_node(mode, coordinates, nearest, scales is not None)
    operands = {2: np.asarray(scales, np.float32)} if scales is not None else {3: np.asarray(sizes, np.int64)}
    plan = resize_plan(node, shape, operands)
    x = np.random.default_rng(5).integers(0, 256, shape).astype(np.float64)
    feeds = {"x": x.astype(np.float32), **({"scales": operands[2]} if scales is not None else {"sizes": operands[3]})}
    expected = ReferenceEvaluator(proto).run(None, feeds)[0].astype(np.float64)
    taps = x.reshape(-1)[plan.index]
    if plan.weight is None:
        got = taps[..., 0]
    else:
        assert (plan.weight.sum(axis=-1) == 2 ** (RESIZE_WEIGHT_BITS * plan.linear_axes)).all()
        got = (taps * plan.weight).sum(axis=-1) / 2 ** (RESIZE_WEIGHT_BITS * plan.linear_axes)
    assert got.shape == expected.shape
    if exact:
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-4)  # the reference computes in float32
    else:
        assert np.abs(got - expected).max() <= 255 * plan.linear_axes * 2.0 ** -(RESIZE_WEIGHT_BITS + 1) + 1e-4
        assert np.abs(got - expected).max() > 0  # the case does exercise rounded weights


@pytest.mark.parametrize(("attrs", "message"), [({"mode": "cubic"}, "mode cubic"),
                                                ({"coordinate_transformation_mode": "tf_crop_and_resize"},
                                                 "tf_crop_and_resize")])
def test_unsupported_resize_is_refused_by_name(attrs, message):
    node = Node("Resize", ("x", "", "", "sizes"), ("y",), tuple(sorted(attrs.items())), "up")
    with pytest.raises(ModelError, match=f"Resize up: .*{message}"):
        resize_plan(node, (1, 2, 3, 3), {3: np.array([1, 2, 6, 6])})


def resize_model(mode: str, coordinates: str, sizes: tuple[int, ...] | None, scales: tuple[float, ...] | None
                 ) -> onnx.ModelProto:
    """x → Conv 1×1 (so the Resize reads an NHWC device tensor) → Resize. (Nothing after it:
    a bilinear ×2 lands on exact ties, which we round half up and onnxruntime half to
    even, and an operator after it may add its own tie to that unit: 2 LSB, measured.)"""
    rng = np.random.default_rng(11)
    constants = {"w": (rng.standard_normal((6, 4, 1, 1)) / 2).astype(np.float32),
                 "b": (rng.standard_normal(6) / 4).astype(np.float32)}
    if sizes is not None:
        constants["sizes"] = np.asarray(sizes, np.int64)
        resize_inputs, out = ["c", "", "", "sizes"], list(sizes)
    else:
        constants["scales"] = np.asarray(scales, np.float32)
        resize_inputs, out = ["c", "", "scales"], [int(d * s) for d, s in zip((1, 6, 4, 5), scales, strict=True)]
    nodes = [h.make_node("Conv", ["x", "w", "b"], ["c"], kernel_shape=[1, 1]),
             h.make_node("Resize", resize_inputs, ["y"], mode=mode, coordinate_transformation_mode=coordinates)]
    return _model(nodes, [h.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 4, 4, 5])], ("y", out), constants)


@needs_toolchain
@pytest.mark.parametrize(("mode", "coordinates", "sizes", "scales", "kind"), [
    ("linear", "half_pixel", (1, 6, 8, 10), None, "resize"),
    ("nearest", "asymmetric", None, (1.0, 1.0, 2.0, 2.0), "gather"),
])
def test_resize_runs_on_the_integers(tmp_path, mode, coordinates, sizes, scales, kind):
    path = _quantise(resize_model(mode, coordinates, sizes, scales), tmp_path, seed=2)
    kinds = _kinds(path)
    assert kind in kinds and "float" not in kinds, kinds
    worst, equal = _compare(path, tmp_path, seed=3, exact=True, expose=(("c_DequantizeLinear_Output", [1, 6, 4, 5]),))
    assert worst <= 1, f"{worst} LSB"
    assert equal > 0.9
