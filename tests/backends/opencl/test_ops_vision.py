"""backends/opencl/ops_vision.py: the vision and indexing operators' kernels on PoCL.

onnx's node tests feed OneHot's depth, AffineGrid's size and CenterCropPad's shape at run
time (the output shape then is not static and OpenCL refuses them by name); real models
hold them as constants, which these cases do. MaxRoiPool has no node test at all. Each
case is compared with onnxruntime; one per operator also with an elementwise consumer
fused into its epilogue.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper

from egraph_compiler import ops
from egraph_compiler.backends.opencl import compile_graph, load, ops_vision
from tests.backends.opencl.helpers import static_graph

RNG = np.random.default_rng(11)


def _model(node: onnx.NodeProto, feeds: dict[str, np.ndarray], constants: dict[str, np.ndarray],
           opset: int, epilogue: bool) -> onnx.ModelProto:
    nodes, output = [node], node.output[0]
    if epilogue:
        nodes.append(helper.make_node("Neg", [output], ["negated"]))
        output = "negated"
    inputs = [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
              for k, v in feeds.items()]
    out_type = onnx.TensorProto.INT32 if node.op_type == "EyeLike" else onnx.TensorProto.FLOAT
    graph = helper.make_graph(nodes, "vision", inputs, [helper.make_tensor_value_info(output, out_type, None)],
                              [numpy_helper.from_array(v, k) for k, v in constants.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    return onnx.shape_inference.infer_shapes(model)  # the output's shape


def _image(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


_ROIS = np.asarray([[0.5, 1.0, 6.5, 5.0], [2.0, 0.0, 7.9, 7.9], [-1.0, 3.0, 4.0, 9.5]], np.float32)


def _max_pool_pair() -> tuple[np.ndarray, np.ndarray]:
    """MaxPool's values and indices on a small image (MaxUnpool's inputs)."""
    x = _image(1, 2, 4, 4)
    model = _model(helper.make_node("MaxPool", ["x"], ["y", "i"], kernel_shape=[2, 2], strides=[2, 2]),
                   {"x": x}, {}, 17, False)
    model.graph.output.append(helper.make_tensor_value_info("i", onnx.TensorProto.INT64, None))
    return tuple(ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
                 .run(None, {"x": x}))  # type: ignore[return-value]


_VALUES, _ARGMAX = _max_pool_pair()

CASES = [
    ("grid_sample_bilinear_zeros", 16, helper.make_node("GridSample", ["x", "grid"], ["y"]),
     {"x": _image(1, 2, 5, 6)}, {"grid": RNG.uniform(-1.3, 1.3, (1, 3, 4, 2)).astype(np.float32)}),
    ("grid_sample_bicubic_reflection_aligned", 16,
     helper.make_node("GridSample", ["x", "grid"], ["y"], mode="bicubic", padding_mode="reflection",
                      align_corners=1),
     {"x": _image(2, 1, 4, 5)}, {"grid": RNG.uniform(-2.5, 2.5, (2, 3, 3, 2)).astype(np.float32)}),
    ("grid_sample_nearest_border_3d", 20,
     helper.make_node("GridSample", ["x", "grid"], ["y"], mode="nearest", padding_mode="border"),
     {"x": _image(1, 2, 3, 4, 5)}, {"grid": RNG.uniform(-1.5, 1.5, (1, 2, 3, 2, 3)).astype(np.float32)}),
    ("eye_like_k1_int", 17, helper.make_node("EyeLike", ["x"], ["y"], k=1, dtype=onnx.TensorProto.INT32),
     {"x": _image(4, 5)}, {}),
    ("one_hot_axis1", 17, helper.make_node("OneHot", ["i", "depth", "values"], ["y"], axis=1),
     {"i": np.asarray([[1, -1, 4], [0, 7, -5]], np.int64)},
     {"depth": np.asarray(5, np.int64), "values": np.asarray([-2.0, 3.0], np.float32)}),
    ("affine_grid_2d", 20, helper.make_node("AffineGrid", ["theta", "size"], ["y"]),
     {"theta": _image(2, 2, 3)}, {"size": np.asarray([2, 3, 4, 5], np.int64)}),
    ("affine_grid_3d_aligned", 20, helper.make_node("AffineGrid", ["theta", "size"], ["y"], align_corners=1),
     {"theta": _image(1, 3, 4)}, {"size": np.asarray([1, 1, 2, 3, 4], np.int64)}),
    ("center_crop_pad", 18, helper.make_node("CenterCropPad", ["x", "shape"], ["y"], axes=[1, 2]),
     {"x": _image(2, 5, 4)}, {"shape": np.asarray([3, 7], np.int64)}),
    ("max_unpool", 17, helper.make_node("MaxUnpool", ["x", "i"], ["y"], kernel_shape=[2, 2], strides=[2, 2]),
     {"x": _VALUES}, {"i": _ARGMAX}),
    ("roi_align_avg", 16,
     helper.make_node("RoiAlign", ["x", "rois", "b"], ["y"], output_height=3, output_width=2,
                      spatial_scale=0.75, sampling_ratio=2),
     {"x": _image(2, 3, 8, 8)}, {"rois": _ROIS, "b": np.asarray([1, 0, 1], np.int64)}),
    ("roi_align_max_opset10", 10,
     helper.make_node("RoiAlign", ["x", "rois", "b"], ["y"], output_height=2, output_width=2, mode="max"),
     {"x": _image(2, 2, 8, 8)}, {"rois": _ROIS, "b": np.asarray([0, 1, 0], np.int64)}),
    ("max_roi_pool", 17, helper.make_node("MaxRoiPool", ["x", "rois"], ["y"], pooled_shape=[2, 3],
                                          spatial_scale=0.5),
     {"x": _image(2, 2, 6, 7)},
     {"rois": np.asarray([[0, 1, 2, 9, 8], [1, 0, 0, 13, 11], [1, 5, 5, 5, 5]], np.float32)}),
    ("deform_conv_mask_groups", 19,
     helper.make_node("DeformConv", ["x", "w", "offset", "b", "mask"], ["y"], kernel_shape=[2, 2],
                      pads=[1, 0, 1, 1], strides=[2, 1], group=2, offset_group=2),
     {"x": _image(1, 4, 4, 4)},
     {"w": _image(2, 2, 2, 2), "offset": RNG.uniform(-1.5, 1.5, (1, 16, 3, 4)).astype(np.float32),
      "b": _image(2), "mask": RNG.uniform(0, 1, (1, 8, 3, 4)).astype(np.float32)}),
]


def test_every_generator_is_an_indexed_operator_here() -> None:
    declared = {name for name, kind in ops.shipped().anchors().items() if kind == "indexed"}
    assert set(ops_vision.GENERATORS) <= declared
    assert {c[2].op_type for c in CASES} == set(ops_vision.GENERATORS)


@pytest.mark.parametrize(("name", "opset", "node", "feeds", "constants"), CASES, ids=[c[0] for c in CASES])
def test_vision_kernel_matches_onnxruntime(name: str, opset: int, node: onnx.NodeProto,
                                           feeds: dict[str, np.ndarray], constants: dict[str, np.ndarray],
                                           tmp_path: Path) -> None:
    epilogue = name in _EPILOGUE
    model = _model(node, feeds, constants, opset, epilogue)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    graph = static_graph(model, feeds)
    with ops.using(ops.shipped()):
        compile_graph(graph, tmp_path)
    got = load(tmp_path).run(feeds)[graph.outputs[0].name]
    assert got.shape == want.shape and got.dtype == want.dtype, name
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, err_msg=name)


# one case per sampling kernel with a fused consumer (the others' epilogues are ops_extra's path)
_EPILOGUE = {"grid_sample_bilinear_zeros", "roi_align_avg", "deform_conv_mask_groups"}


@pytest.mark.parametrize(("node", "scalar"), [
    (helper.make_node("Trilu", ["x", "k"], ["y"], upper=0), np.asarray(-1, np.int64)),
    (helper.make_node("CumSum", ["x", "k"], ["y"], reverse=1), np.asarray(-2, np.int32)),
    (helper.make_node("CumSum", ["x", "k"], ["y"], exclusive=1), np.asarray(2, np.int64)),
], ids=["trilu_k", "cumsum_axis_negative", "cumsum_axis_exclusive"])
def test_scalars_given_at_run_time_are_read_in_the_kernel(node: onnx.NodeProto, scalar: np.ndarray,
                                                          tmp_path: Path) -> None:
    """Trilu's k and CumSum's axis as graph inputs (as onnx's node tests give them)."""
    feeds = {"x": _image(2, 3, 4), "k": scalar}
    model = _model(node, feeds, {}, 17, False)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    graph = static_graph(model, feeds)
    with ops.using(ops.shipped()):
        compile_graph(graph, tmp_path)
    got = load(tmp_path).run(feeds)[graph.outputs[0].name]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
