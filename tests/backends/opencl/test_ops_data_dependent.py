"""Operators whose output size depends on their data (NonZero, Compress, Unique,
NonMaxSuppression) on OpenCL: segmented execution (`backends/opencl/segmented.py`,
`ops_data_dependent.py`), every output compared with onnxruntime on the same inputs,
on PoCL."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from egraph_compiler import ir, shapes
from egraph_compiler.backends import opencl
from egraph_compiler.backends.opencl.ops_data_dependent import DeviceOps
from egraph_compiler.backends.opencl.runtime import _device

FLOAT, INT64, BOOL = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch) -> None:  # noqa: ANN001
    """A deferred artefact makes its folder in the user's cache: each test has its own."""
    monkeypatch.setenv("DNNR_CACHE_DIR", str(tmp_path / "cache"))


def _model(nodes: list, inputs: list, outputs: list, initializers: list | None = None,
           opset: int = 13) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "data_dependent", inputs, outputs, initializers or [])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _value(name: str, dtype: int, shape: list) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, dtype, shape)


def _compile(model: onnx.ModelProto, tmp_path):  # noqa: ANN202
    graph = shapes.infer_shapes(ir.load_onnx(model))
    artefact = opencl.compile_graph(graph, tmp_path / "out")
    return artefact, opencl.load(tmp_path / "out")


def _check(model: onnx.ModelProto, loaded, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:  # noqa: ANN001
    got = loaded.run(feeds)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for info, want in zip(model.graph.output, session.run(None, feeds), strict=True):
        assert got[info.name].shape == want.shape, (info.name, got[info.name].shape, want.shape)
        assert got[info.name].dtype == want.dtype, info.name
        np.testing.assert_allclose(got[info.name], want, rtol=1e-5, atol=1e-6, err_msg=info.name)
    return got


# NonZero of a computed tensor feeding a Gather: the column index of every positive
# element picks a row of a table, then a Sigmoid runs on the gathered rows.
NONZERO_GATHER = _model(
    [helper.make_node("Relu", ["x"], ["r"]),
     helper.make_node("NonZero", ["r"], ["nz"]),
     helper.make_node("Gather", ["nz", "one"], ["columns"], axis=0),
     helper.make_node("Gather", ["table", "columns"], ["rows"], axis=0),
     helper.make_node("Sigmoid", ["rows"], ["y"])],
    [_value("x", FLOAT, [4, 5]), _value("table", FLOAT, [5, 3])],
    [_value("y", FLOAT, ["n", 3]), _value("nz", INT64, [2, "n"])],
    [helper.make_tensor("one", INT64, [], [1])])


def test_nonzero_feeding_a_gather_runs_in_segments(tmp_path) -> None:  # noqa: ANN001
    artefact, loaded = _compile(NONZERO_GATHER, tmp_path)
    plan = json.loads((tmp_path / "out" / "plan.json").read_text())
    assert plan["data_dependent"] == {"NonZero_1": "NonZero (device)"}
    assert artefact.specialised["data_dependent"] == plan["data_dependent"]
    rng = np.random.default_rng(0)
    table = rng.standard_normal((5, 3)).astype(np.float32)
    x = rng.standard_normal((4, 5)).astype(np.float32)
    counts = []
    for feeds in ({"x": x, "table": table}, {"x": -x, "table": table},
                  {"x": np.abs(x) + 1, "table": table}, {"x": -np.abs(x), "table": table}):
        counts.append(_check(NONZERO_GATHER, loaded, feeds)["nz"].shape[1])
    assert counts[2] == 20 and counts[3] == 0  # every element, then none
    compiled = len(loaded.specialisations)
    # the same count again: the segments sized by it are reused, nothing compiled
    _check(NONZERO_GATHER, loaded, {"x": x[::-1].copy(), "table": table})
    assert len(loaded.specialisations) == compiled


def test_nonzero_of_several_dtypes_on_the_device() -> None:
    import pyopencl as cl

    context = cl.Context([_device(None)])
    device_ops = DeviceOps(context, cl.CommandQueue(context))
    rng = np.random.default_rng(1)
    for array in (rng.integers(-1, 2, (3, 4, 5)).astype(np.int32), rng.random((700,)) > 0.5,
                  np.array([0.0, -0.0, 1.5, np.nan], np.float16), rng.integers(0, 2, (9, 70)).astype(np.int8),
                  np.zeros((2, 3), np.float32)):
        got = device_ops.host(device_ops.nonzero(array))
        np.testing.assert_array_equal(got, np.asarray(np.nonzero(array)), err_msg=str(array.dtype))


# Compress by a condition the device computes (rows whose sum is positive), along an
# axis, flattened, and with a condition shorter than the axis.
COMPRESS = _model(
    [helper.make_node("ReduceSum", ["x", "axes"], ["sums"], keepdims=0),
     helper.make_node("Greater", ["sums", "zero"], ["keep"]),
     helper.make_node("Compress", ["x", "keep"], ["rows"], axis=0),
     helper.make_node("Mul", ["rows", "two"], ["y"]),
     helper.make_node("Compress", ["x", "mask"], ["flat"]),
     helper.make_node("Compress", ["x", "short"], ["columns"], axis=-1)],
    [_value("x", FLOAT, [6, 4]), _value("mask", BOOL, [24]), _value("short", BOOL, [3])],
    [_value("y", FLOAT, ["k", 4]), _value("flat", FLOAT, ["m"]), _value("columns", FLOAT, [6, "c"])],
    [helper.make_tensor("axes", INT64, [1], [1]), helper.make_tensor("zero", FLOAT, [], [0.0]),
     helper.make_tensor("two", FLOAT, [], [2.0])])


def test_compress_by_a_computed_condition(tmp_path) -> None:  # noqa: ANN001
    _, loaded = _compile(COMPRESS, tmp_path)
    rng = np.random.default_rng(2)
    for _ in range(2):
        feeds = {"x": rng.standard_normal((6, 4)).astype(np.float32), "mask": rng.random(24) > 0.5,
                 "short": rng.random(3) > 0.5}
        _check(COMPRESS, loaded, feeds)


UNIQUE = _model(
    [helper.make_node("Abs", ["x"], ["a"]),
     helper.make_node("Unique", ["a"], ["y", "first", "inverse", "counts"], sorted=1),
     helper.make_node("Unique", ["a"], ["u", "u_first", "u_inverse", "u_counts"], sorted=0),
     helper.make_node("Unique", ["rows"], ["r", "r_first", "r_inverse", "r_counts"], axis=0),
     helper.make_node("Neg", ["y"], ["neg"])],
    [_value("x", FLOAT, [3, 4]), _value("rows", INT64, [5, 2])],
    [_value(n, FLOAT, ["n"]) for n in ("y", "u", "neg")]
    + [_value(n, INT64, ["n"]) for n in ("first", "inverse", "counts", "u_first", "u_inverse", "u_counts")]
    + [_value("r", INT64, ["k", 2])] + [_value(n, INT64, ["k"]) for n in ("r_first", "r_inverse", "r_counts")],
    opset=11)


def test_unique_sorted_unsorted_and_along_an_axis(tmp_path) -> None:  # noqa: ANN001
    artefact, loaded = _compile(UNIQUE, tmp_path)
    assert set(artefact.specialised["data_dependent"].values()) == {"Unique (host)"}
    rng = np.random.default_rng(3)
    for _ in range(2):
        feeds = {"x": rng.integers(-3, 4, (3, 4)).astype(np.float32),
                 "rows": rng.integers(0, 2, (5, 2)).astype(np.int64)}
        _check(UNIQUE, loaded, feeds)


NMS = _model(
    [helper.make_node("Sigmoid", ["logits"], ["scores"]),
     helper.make_node("NonMaxSuppression", ["boxes", "scores", "limit", "iou", "floor"], ["kept"]),
     helper.make_node("NonMaxSuppression", ["centres", "scores", "limit", "iou"], ["kept_c"],
                      center_point_box=1),
     helper.make_node("Gather", ["kept", "two"], ["box_index"], axis=1)],
    [_value("boxes", FLOAT, [2, 6, 4]), _value("centres", FLOAT, [2, 6, 4]),
     _value("logits", FLOAT, [2, 3, 6])],
    [_value("kept", INT64, ["k", 3]), _value("kept_c", INT64, ["j", 3]), _value("box_index", INT64, ["k"])],
    [helper.make_tensor("limit", INT64, [1], [3]), helper.make_tensor("iou", FLOAT, [1], [0.4]),
     helper.make_tensor("floor", FLOAT, [1], [0.3]), helper.make_tensor("two", INT64, [], [2])])


def test_non_max_suppression_of_computed_scores(tmp_path) -> None:  # noqa: ANN001
    _, loaded = _compile(NMS, tmp_path)
    rng = np.random.default_rng(4)
    for _ in range(2):
        corners = rng.random((2, 6, 2)).astype(np.float32)
        boxes = np.concatenate([corners, corners + rng.random((2, 6, 2)).astype(np.float32) * 0.6], axis=2)
        centres = rng.random((2, 6, 4)).astype(np.float32)
        _check(NMS, loaded, {"boxes": boxes, "centres": centres,
                             "logits": rng.standard_normal((2, 3, 6)).astype(np.float32)})
