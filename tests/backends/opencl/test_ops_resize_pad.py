"""The OpenCL Pad modes and Resize filters the first backend refused (issue 17 item 6):
Pad ``edge``/``reflect``/``wrap`` and Resize ``cubic``, ``antialias``,
``exclude_outside``, ``tf_crop_and_resize``, ``axes`` and ``keep_aspect_ratio_policy``
(`backends/opencl/ops_models.py`) — each against onnxruntime on PoCL, fused between a
pointwise producer (read at every tap) and a pointwise consumer."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from egraph_compiler.backends.opencl import compile_graph, load
from tests.backends.opencl.helpers import static_graph

RNG = np.random.default_rng(6)


def _fused_model(node: onnx.NodeProto, data: np.ndarray, initializers: dict[str, np.ndarray],
                 opset: int = 19) -> onnx.ModelProto:
    """Sigmoid -> ``node`` (reading ``s``, writing ``r``) -> Mul(r, r)."""
    graph = helper.make_graph(
        [helper.make_node("Sigmoid", ["x"], ["s"]), node, helper.make_node("Mul", ["r", "r"], ["y"])],
        "resize_pad", [helper.make_tensor_value_info("x", TensorProto.FLOAT, data.shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [onnx.numpy_helper.from_array(a, n) for n, a in initializers.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    inferred = onnx.shape_inference.infer_shapes(model, data_prop=True)  # the output's type
    model.graph.output[0].CopyFrom(inferred.graph.output[0])
    return model


def _check(model: onnx.ModelProto, data: np.ndarray, tmp_path: Path) -> None:
    feeds = {"x": data}
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    compile_graph(static_graph(model, feeds), tmp_path)
    got = load(tmp_path).run(feeds)["y"]
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("mode", "pads", "axes"), [
    ("edge", [0, 1, 2, 0, 0, 2, 1, 3], None),
    ("reflect", [0, 0, 2, 3, 0, 0, 3, 1], None),  # up to length - 1 each side
    ("wrap", [0, 1, 3, 2, 0, 2, 1, 4], None),
    ("reflect", [1, 2, 3, 1], [2, -1]),  # opset 18's axes input
])
def test_pad_modes_match_onnxruntime(tmp_path: Path, mode: str, pads: list[int],
                                     axes: list[int] | None) -> None:
    data = RNG.standard_normal((1, 3, 4, 5)).astype(np.float32)
    initializers = {"pads": np.array(pads, dtype=np.int64)}
    inputs = ["s", "pads"]
    if axes is not None:
        initializers["axes"] = np.array(axes, dtype=np.int64)
        inputs += ["", "axes"]
    node = helper.make_node("Pad", inputs, ["r"], mode=mode)
    _check(_fused_model(node, data, initializers), data, tmp_path)


@pytest.mark.parametrize(("attributes", "in_shape", "out_shape"), [
    ({"mode": "cubic"}, (1, 2, 4, 5), (1, 2, 9, 7)),  # upsample, half_pixel, A = -0.75
    ({"mode": "cubic"}, (1, 2, 9, 8), (1, 2, 4, 5)),  # downsample
    ({"mode": "cubic", "cubic_coeff_a": -0.5, "exclude_outside": 1}, (1, 1, 5, 6), (1, 1, 8, 4)),
    ({"mode": "cubic", "coordinate_transformation_mode": "align_corners"}, (2, 1, 4, 4), (2, 1, 7, 5)),
    ({"mode": "cubic", "coordinate_transformation_mode": "asymmetric"}, (1, 3, 4, 4), (1, 3, 4, 10)),
    ({"mode": "linear", "antialias": 1}, (1, 2, 9, 10), (1, 2, 4, 3)),  # kernel widened 1/scale
    ({"mode": "cubic", "antialias": 1}, (1, 1, 8, 9), (1, 1, 5, 4)),
    ({"mode": "linear", "antialias": 1}, (1, 2, 4, 4), (1, 2, 7, 3)),  # up one axis, down the other
])
def test_resize_filters_match_onnxruntime(tmp_path: Path, attributes: dict, in_shape: tuple[int, ...],
                                          out_shape: tuple[int, ...]) -> None:
    data = RNG.standard_normal(in_shape).astype(np.float32)
    node = helper.make_node("Resize", ["s", "", "", "sizes"], ["r"], **attributes)
    _check(_fused_model(node, data, {"sizes": np.array(out_shape, dtype=np.int64)}), data, tmp_path)


@pytest.mark.parametrize(("mode", "roi", "axes", "sizes"), [
    ("linear", [0, 0, 0.2, 0.1, 1, 1, 0.9, 0.7], None, [1, 2, 5, 4]),
    # outside the input: extrapolation. (Lengths change on every roi axis: onnxruntime
    # skips an axis whose length is kept, even when its roi crops it; the ONNX reference
    # and dnnr do not.)
    ("nearest", [0.4, -0.3, 1.3, 0.8], [2, 3], [5, 4]),
    ("cubic", [0, 0, 0.1, 0.3, 1, 1, 1.2, 0.6], None, [1, 2, 1, 6]),  # one output row
])
def test_resize_tf_crop_and_resize_matches_onnxruntime(tmp_path: Path, mode: str, roi: list[float],
                                                       axes: list[int] | None, sizes: list[int]) -> None:
    data = RNG.standard_normal((1, 2, 6, 7)).astype(np.float32)
    extra = {} if axes is None else {"axes": axes}
    node = helper.make_node("Resize", ["s", "roi", "", "sizes"], ["r"], mode=mode,
                            coordinate_transformation_mode="tf_crop_and_resize",
                            extrapolation_value=-2.5, **extra)
    initializers = {"roi": np.array(roi, dtype=np.float32), "sizes": np.array(sizes, dtype=np.int64)}
    _check(_fused_model(node, data, initializers), data, tmp_path)


@pytest.mark.parametrize(("given", "values", "axes", "policy"), [
    ("scales", [2.5, 0.6], [3, 2], "stretch"),  # scales naming two axes, out of order
    ("sizes", [7, 3], [2, 3], "stretch"),
    ("sizes", [9, 9], [2, 3], "not_larger"),  # one scale for both axes: the smaller ratio
    ("sizes", [9, 9], [3, 2], "not_smaller"),
    ("sizes", [3, 8], [2, 3], "not_larger"),
])
def test_resize_axes_and_aspect_ratio_match_onnxruntime(tmp_path: Path, given: str, values: list,
                                                        axes: list[int] | None, policy: str) -> None:
    data = RNG.standard_normal((1, 2, 5, 6)).astype(np.float32)
    constant = np.array(values, dtype=np.float32 if given == "scales" else np.int64)
    inputs = ["s", "", "scales", ""] if given == "scales" else ["s", "", "", "sizes"]
    extra = {} if axes is None else {"axes": axes}
    node = helper.make_node("Resize", inputs, ["r"], mode="linear", keep_aspect_ratio_policy=policy,
                            **extra)
    _check(_fused_model(node, data, {given: constant}), data, tmp_path)
