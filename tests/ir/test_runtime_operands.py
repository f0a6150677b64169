"""Issue 17 item 7: axes, sizes, pads and scales given at run time, and the vision and
indexing operators whose output size depends on values (rules/operators.dnnr, block
"opsb"), on the onnx target.

Each model is imported, shape-inferred and written back, then run by onnxruntime and
compared with onnxruntime on the original model. The value-dependent dims are fresh
symbols of the right rank; the OpenCL backend refuses the data-dependent operators by
name.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from egraph_compiler import ir, ops, shapes
from egraph_compiler.ir.dims import DimExpr

RNG = np.random.default_rng(5)
F, I64 = TensorProto.FLOAT, TensorProto.INT64


def _model(node: onnx.NodeProto, inputs: dict[str, np.ndarray], outputs: list[tuple[str, int]],
           opset: int, dims: list[tuple[int | None, ...]]) -> onnx.ModelProto:
    """The one-node model; an output dim that depends on a value is declared symbolic."""
    graph = helper.make_graph(
        [node], "runtime",
        [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
         for k, v in inputs.items()],
        [helper.make_tensor_value_info(name, dtype, [f"{name}{k}" if d is None else d for k, d in enumerate(shape)])
         for (name, dtype), shape in zip(outputs, dims, strict=True)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def _x(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def _ints(*values: int) -> np.ndarray:
    return np.asarray(values, np.int64)


CASES = [
    ("reduce_mean_keepdims", 18, helper.make_node("ReduceMean", ["x", "axes"], ["y"]),
     {"x": _x(2, 1, 4), "axes": _ints(0, 2)}, [("y", F)], [(None, 1, None)]),
    ("reduce_l2_drop", 18, helper.make_node("ReduceL2", ["x", "axes"], ["y"], keepdims=0),
     {"x": _x(2, 3, 4), "axes": _ints(-1)}, [("y", F)], [(None, None)]),
    ("reduce_sum_noop_empty", 13, helper.make_node("ReduceSum", ["x", "axes"], ["y"], noop_with_empty_axes=1),
     {"x": _x(2, 3), "axes": _ints()}, [("y", F)], [(2, 3)]),
    ("squeeze", 13, helper.make_node("Squeeze", ["x", "axes"], ["y"]),
     {"x": _x(2, 1, 3, 1), "axes": _ints(1, 3)}, [("y", F)], [(None, None)]),
    ("unsqueeze", 13, helper.make_node("Unsqueeze", ["x", "axes"], ["y"]),
     {"x": _x(2, 3), "axes": _ints(0, 3)}, [("y", F)], [(None, None, None, None)]),
    ("split_sizes", 13, helper.make_node("Split", ["x", "split"], ["a", "b"], axis=1),
     {"x": _x(2, 5), "split": _ints(2, 3)}, [("a", F), ("b", F)], [(2, None), (2, None)]),
    ("pad_all_inputs", 18, helper.make_node("Pad", ["x", "pads", "value", "axes"], ["y"]),
     {"x": _x(2, 3), "pads": _ints(1, 0, 2, 1), "value": np.asarray(1.5, np.float32), "axes": _ints(0, 1)},
     [("y", F)], [(None, None)]),
    ("upsample_scales", 9, helper.make_node("Upsample", ["x", "scales"], ["y"]),
     {"x": _x(1, 1, 2, 3), "scales": np.asarray([1, 1, 2, 3], np.float32)}, [("y", F)], [(None,) * 4]),
    ("non_max_suppression", 11,
     helper.make_node("NonMaxSuppression", ["boxes", "scores", "most", "iou"], ["selected"]),
     {"boxes": np.asarray([[[0, 0, 1, 1], [0, 0.1, 1, 1.1], [0, 3, 1, 4], [0, 10, 1, 11]]], np.float32),
      "scores": np.asarray([[[0.9, 0.75, 0.6, 0.95]]], np.float32), "most": _ints(3),
      "iou": np.asarray([0.5], np.float32)}, [("selected", I64)], [(None, 3)]),
    ("unique_axis", 11, helper.make_node("Unique", ["x"], ["y", "first", "inverse", "counts"], axis=0),
     {"x": np.asarray([[1, 2], [3, 4], [1, 2]], np.float32)},
     [("y", F), ("first", I64), ("inverse", I64), ("counts", I64)], [(None, 2), (None,), (3,), (None,)]),
    ("compress_flat", 11, helper.make_node("Compress", ["x", "keep"], ["y"]),
     {"x": _x(2, 3), "keep": np.asarray([True, False, True, True], bool)}, [("y", F)], [(None,)]),
    ("one_hot_runtime_depth", 11, helper.make_node("OneHot", ["i", "depth", "values"], ["y"], axis=0),
     {"i": _ints(0, 2, -1), "depth": np.asarray([4.0], np.float32), "values": np.asarray([0, 5], np.float32)},
     [("y", F)], [(None, 3)]),
    # import conversions of the static vision operators (their OpenCL kernels: test_ops_vision.py)
    ("grid_sample_default_mode_opset16", 16, helper.make_node("GridSample", ["x", "grid"], ["y"]),
     {"x": _x(1, 2, 3, 4), "grid": RNG.uniform(-1, 1, (1, 2, 2, 2)).astype(np.float32)}, [("y", F)],
     [(1, 2, 2, 2)]),
    ("roi_align_opset10", 10, helper.make_node("RoiAlign", ["x", "rois", "b"], ["y"], output_height=2),
     {"x": _x(1, 1, 5, 5), "rois": np.asarray([[0.2, 0.5, 3.1, 4.0]], np.float32), "b": _ints(0)},
     [("y", F)], [(1, 1, 2, 1)]),
    ("max_roi_pool", 9, helper.make_node("MaxRoiPool", ["x", "rois"], ["y"], pooled_shape=[2, 2]),
     {"x": _x(1, 1, 5, 5), "rois": np.asarray([[0, 1, 0, 4, 3]], np.float32)}, [("y", F)], [(1, 1, 2, 2)]),
    ("center_crop_pad_runtime_shape", 18, helper.make_node("CenterCropPad", ["x", "shape"], ["y"]),
     {"x": _x(3, 6), "shape": _ints(5, 2)}, [("y", F)], [(None, None)]),
]


@pytest.mark.parametrize(("name", "opset", "node", "feeds", "outputs", "dims"), CASES, ids=[c[0] for c in CASES])
def test_runtime_operand_round_trips_through_the_onnx_target(
        name: str, opset: int, node: onnx.NodeProto, feeds: dict[str, np.ndarray],
        outputs: list[tuple[str, int]], dims: list[tuple[int | None, ...]]) -> None:
    model = _model(node, feeds, outputs, opset, dims)
    with ops.using(ops.shipped()):
        graph = shapes.infer_shapes(ir.load_onnx(model))
    for (out, _), want in zip(outputs, dims, strict=True):
        got = graph.types[out].shape
        assert got is not None and len(got) == len(want), (name, out, got)
        for dim, expected in zip(got, want, strict=True):  # None: a value-dependent (fresh) dim
            assert isinstance(dim, DimExpr) if expected is None else dim == expected, (name, out, got)
    for got, want in zip(_run(ir.to_onnx(graph), feeds), _run(model, feeds), strict=True):
        assert got.shape == want.shape and got.dtype == want.dtype, name
        np.testing.assert_allclose(got, want, rtol=1e-6, err_msg=name)


def test_noop_with_empty_axes_at_run_time_is_refused_but_on_reduce_sum() -> None:
    """The IR declares noop_with_empty_axes on ReduceSum only (the other reductions' rules
    are verified without it), so a run-time axes list with the flag set is refused by name."""
    node = helper.make_node("ReduceMax", ["x", "axes"], ["y"], noop_with_empty_axes=1, name="max_0")
    model = _model(node, {"x": _x(2, 3), "axes": _ints()}, [("y", F)], 18, [(2, 3)])
    with pytest.raises(ir.DnnrError, match=r"node 'max_0' \(ReduceMax, opset 18\).*noop_with_empty_axes"):
        ir.load_onnx(model)


@pytest.mark.parametrize("name", ["non_max_suppression", "unique_axis", "compress_flat"])
def test_opencl_runs_value_dependent_operators_in_segments(name: str, tmp_path: Path) -> None:
    """Output sizes from the data: the artefact is cut at the node (`opencl.segmented`)."""
    from egraph_compiler.backends.opencl import compile_graph, load
    from tests.backends.opencl.helpers import static_graph

    _, opset, node, feeds, outputs, dims = next(c for c in CASES if c[0] == name)
    model = _model(node, feeds, outputs, opset, dims)
    graph = static_graph(model, feeds)
    with ops.using(ops.shipped()):
        artefact = compile_graph(graph, tmp_path)
        assert node.op_type in str(artefact.specialised["data_dependent"])
        got = load(tmp_path).run(feeds)
    for (out, _), want in zip(outputs, _run(model, feeds), strict=True):
        assert got[out].shape == want.shape and got[out].dtype == want.dtype, name
        np.testing.assert_allclose(got[out], want, rtol=1e-6, err_msg=name)


@pytest.mark.parametrize("axis", [None, 1])
def test_compress_by_a_constant_condition_is_a_gather(axis: int | None, tmp_path: Path) -> None:
    """Static output size, so OpenCL runs it too (a Gather of the kept positions)."""
    from egraph_compiler.backends.opencl import compile_graph, load
    from tests.backends.opencl.helpers import static_graph

    x = _x(3, 4)
    node = helper.make_node("Compress", ["x", "keep"], ["y"], **({} if axis is None else {"axis": axis}))
    keep = helper.make_tensor("keep", TensorProto.BOOL, [3], [True, False, True])
    model = _model(node, {"x": x}, [("y", F)], 11, [(None,) if axis is None else (3, None)])
    model.graph.initializer.append(keep)
    want = _run(model, {"x": x})[0]
    graph = static_graph(model, {"x": x})
    assert "Compress" not in {n.op for n in graph.nodes}
    assert graph.types[graph.outputs[0].name].shape == want.shape
    with ops.using(ops.shipped()):
        compile_graph(graph, tmp_path)
    np.testing.assert_array_equal(load(tmp_path).run({"x": x})[graph.outputs[0].name], want)
