"""OpenCL for graphs whose sizes depend on the values of graph inputs (issue 17 item 6,
`backends/opencl/specialise.py`): the artefact keeps the graph, the first run with a set of
values compiles the backend for them and caches it; results are compared with onnxruntime
on the same inputs, on PoCL."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from egraph_compiler import ir, shapes
from egraph_compiler.backends import opencl
from egraph_compiler.backends.opencl.specialise import SpecialisingModel, compile_for_values

FLOAT, INT64 = TensorProto.FLOAT, TensorProto.INT64


def _out(name: str, rank: int, dtype: int = FLOAT) -> onnx.ValueInfoProto:
    """An output of ``rank`` whose dims nobody knows before the run."""
    return helper.make_tensor_value_info(name, dtype, [f"{name}{k}" for k in range(rank)])


def _model(nodes: list, inputs: list, outputs: list, opset: int = 18) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "runtime_sizes", inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _onnxruntime(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def _compile(model: onnx.ModelProto, tmp_path, name: str = "out"):  # noqa: ANN202
    graph = shapes.infer_shapes(ir.load_onnx(model))
    artefact = opencl.compile_graph(graph, tmp_path / name)
    return artefact, opencl.load(tmp_path / name), [v.name for v in graph.outputs]


def _check(model: onnx.ModelProto, loaded, outputs: list[str], feeds: dict[str, np.ndarray]) -> None:  # noqa: ANN001
    got = loaded.run(feeds)
    for name, want in zip(outputs, _onnxruntime(model, feeds), strict=True):
        assert got[name].shape == want.shape, name
        np.testing.assert_allclose(got[name], want, rtol=1e-5, atol=1e-6, err_msg=name)


SHAPE_OPS = _model(
    [helper.make_node("Reshape", ["x", "shape"], ["r"]),
     helper.make_node("Slice", ["r", "starts", "ends", "axes"], ["s"]),
     helper.make_node("Relu", ["s"], ["y"]),
     helper.make_node("Pad", ["x", "pads"], ["p"]),
     helper.make_node("ReduceSum", ["x", "raxes"], ["q"], keepdims=0)],
    [helper.make_tensor_value_info("x", FLOAT, [2, 3, 4]),
     helper.make_tensor_value_info("shape", INT64, [2]),
     helper.make_tensor_value_info("starts", INT64, [1]),
     helper.make_tensor_value_info("ends", INT64, [1]),
     helper.make_tensor_value_info("axes", INT64, [1]),
     helper.make_tensor_value_info("pads", INT64, [6]),
     helper.make_tensor_value_info("raxes", INT64, [1])],
    [_out("y", 2), _out("p", 3), _out("q", 2)])


def _feeds(shape: list[int], start: int, end: int, pads: list[int], axis: int) -> dict[str, np.ndarray]:
    x = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)
    return {"x": x, "shape": np.array(shape, np.int64), "starts": np.array([start], np.int64),
            "ends": np.array([end], np.int64), "axes": np.array([1], np.int64),
            "pads": np.array(pads, np.int64), "raxes": np.array([axis], np.int64)}


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch) -> None:  # noqa: ANN001
    """Specialisations are cached on disk across processes: each test has its own cache."""
    monkeypatch.setenv("DNNR_CACHE_DIR", str(tmp_path / "cache"))


def test_sizes_from_input_values_run_on_opencl_and_match_onnxruntime(tmp_path) -> None:
    artefact, loaded, outputs = _compile(SHAPE_OPS, tmp_path)
    # the data input is not specialised on; every input that decides a size is, with its node
    assert set(artefact.specialised["value_inputs"]) == {"shape", "starts", "ends", "axes", "pads",
                                                          "raxes"}
    assert "Reshape" in artefact.specialised["value_inputs"]["shape"]
    assert json.loads((tmp_path / "out" / "plan.json").read_text())["version"] == 4
    assert isinstance(loaded, SpecialisingModel) and artefact.kernels == 0
    # what the first run compiles, without a device (a refusal shows before any run)
    assert compile_for_values(tmp_path / "out", _feeds([4, 6], 1, 5, [0, 1, 0, 0, 2, 1], 2),
                              tmp_path / "probe") > 0
    with pytest.raises(ir.DnnrError, match="Reshape"):  # 24 elements do not make 5 x 5
        compile_for_values(tmp_path / "out", _feeds([5, 5], 1, 5, [0] * 6, 2), tmp_path / "bad")
    first = _feeds([4, 6], 1, 5, [0, 1, 0, 0, 2, 1], 2)
    _check(SHAPE_OPS, loaded, outputs, first)
    assert len(loaded.specialisations) == 1 and loaded.specialisations[0]["launches"] > 0
    assert loaded.kernel_names  # the specialisation's own kernels ran on the device
    second = _feeds([6, 4], 0, -1, [1, 0, 0, 0, 0, 2], 0)
    _check(SHAPE_OPS, loaded, outputs, second)
    _check(SHAPE_OPS, loaded, outputs, first)  # the first values again: the cached compile
    assert len(loaded.specialisations) == 2
    # the data's values are not part of the key: new data, same values, no compile
    _check(SHAPE_OPS, loaded, outputs, {**first, "x": -first["x"]})
    assert len(loaded.specialisations) == 2
    assert not any(done["cached"] for done in loaded.specialisations)
    # a new load (another process) finds the compile in the on-disk cache
    again = opencl.load(tmp_path / "out")
    _check(SHAPE_OPS, again, outputs, second)
    assert again.specialisations[0]["cached"] and again.specialisations[0]["launches"] > 0


def test_window_onehot_and_resize_sizes_from_inputs(tmp_path) -> None:
    model = _model(
        [helper.make_node("HannWindow", ["size"], ["window"]),
         helper.make_node("Mul", ["window", "gain"], ["w"]),
         helper.make_node("OneHot", ["indices", "depth", "values"], ["o"], axis=1),
         helper.make_node("Resize", ["img", "", "scales"], ["z"], mode="linear")],
        [helper.make_tensor_value_info("size", INT64, []),
         helper.make_tensor_value_info("gain", FLOAT, [1, 1]),
         helper.make_tensor_value_info("indices", INT64, [2, 3]),
         helper.make_tensor_value_info("depth", INT64, [1]),
         helper.make_tensor_value_info("values", FLOAT, [2]),
         helper.make_tensor_value_info("img", FLOAT, [1, 1, 3, 4]),
         helper.make_tensor_value_info("scales", FLOAT, [4])],
        [_out("w", 2), _out("o", 3), _out("z", 4)])
    artefact, loaded, outputs = _compile(model, tmp_path)
    needed = set(artefact.specialised["value_inputs"])
    assert {"size", "depth", "scales"} <= needed and not needed & {"indices", "img", "gain"}
    rng = np.random.default_rng(1)
    for size, depth, scales in ((10, 5, [1, 1, 2, 1.5]), (7, 3, [1, 1, 0.5, 0.75])):
        _check(model, loaded, outputs, {
            "size": np.array(size, np.int64), "gain": np.full((1, 1), 1.5, np.float32), "indices": rng.integers(-depth, depth, (2, 3)),
            "depth": np.array([depth], np.int64), "values": np.array([0.5, 2.0], np.float32),
            "img": rng.standard_normal((1, 1, 3, 4)).astype(np.float32),
            "scales": np.array(scales, np.float32)})
    assert len(loaded.specialisations) == 2


@pytest.mark.parametrize("noop", [0, 1])
def test_empty_axes_input_folds_at_compile_time(tmp_path, noop: int) -> None:
    """A run-time axes input of length 0 has one value whatever is fed: no specialisation,
    the static artefact reduces over every axis (or, noop_with_empty_axes, none)."""
    from egraph_compiler.backends.static_checks import prepare_static_graph

    model = _model([helper.make_node("ReduceSum", ["x", "axes"], ["y"], noop_with_empty_axes=noop)],
                   [helper.make_tensor_value_info("x", FLOAT, [3, 2, 2]),
                    helper.make_tensor_value_info("axes", INT64, [0])],
                   [_out("y", 3)])
    graph = prepare_static_graph(shapes.infer_shapes(ir.load_onnx(model)), "opencl")
    artefact = opencl.compile_graph(graph, tmp_path / "out")
    assert artefact.specialised is None and artefact.kernels > 0
    feeds = {"x": np.arange(12, dtype=np.float32).reshape(3, 2, 2), "axes": np.zeros(0, np.int64)}
    _check(model, opencl.load(tmp_path / "out"), ["y"], feeds)


def test_size_from_a_tensors_contents_is_not_specialised_on(tmp_path) -> None:
    """NonZero's count comes from its data, not from an input's value: its operand (a
    small 1-D one too, which could be a size vector) is not a value input; the graph
    runs in segments (`segmented`)."""
    model = _model([helper.make_node("NonZero", ["x"], ["i"]),
                    helper.make_node("Reshape", ["i", "flat"], ["f"]),
                    helper.make_node("Gather", ["table", "f"], ["y"])],
                   [helper.make_tensor_value_info("x", FLOAT, [4]),
                    helper.make_tensor_value_info("table", FLOAT, [4, 2])], [_out("y", 2)])
    model.graph.initializer.append(helper.make_tensor("flat", INT64, [1], [-1]))
    artefact, loaded, outputs = _compile(model, tmp_path)
    assert artefact.specialised["value_inputs"] == {}
    assert artefact.specialised["data_dependent"] == {"NonZero_0": "NonZero (device)"}
    table = np.arange(8, dtype=np.float32).reshape(4, 2)
    for x in ([0, 2, 0, 3], [1, 1, 1, 1]):
        _check(model, loaded, outputs, {"x": np.array(x, np.float32), "table": table})


def test_an_output_that_folds_to_a_constant_is_served_from_the_weights(tmp_path) -> None:
    """A window that is itself the output is a constant once its length is known: the
    specialised artefact serves it from its weights (as a static model's constant output),
    one specialisation per length, and it is the onnxruntime answer."""
    model = _model([helper.make_node("HannWindow", ["size"], ["w"])],
                   [helper.make_tensor_value_info("size", INT64, [])], [_out("w", 1)])
    _, loaded, outputs = _compile(model, tmp_path)
    for size in (8, 5):
        _check(model, loaded, outputs, {"size": np.array(size, np.int64)})


def test_reductions_over_an_empty_set_give_the_identity(tmp_path) -> None:
    """ONNX: a reduction over a zero-length axis is its identity (0, 1, -inf, +inf...),
    with the axes a constant or a run-time input; the onnxruntime answer is the check."""
    model = _model(
        [helper.make_node("ReduceMax", ["x", "raxes"], ["high"], keepdims=1),
         helper.make_node("ReduceMin", ["n", "raxes"], ["low"], keepdims=0),
         helper.make_node("ReduceProd", ["x", "one"], ["prod"], keepdims=0),
         helper.make_node("ReduceLogSumExp", ["x", "raxes"], ["lse"], keepdims=0),
         helper.make_node("Abs", ["x"], ["a"]),
         helper.make_node("ReduceSum", ["a", "one"], ["s"], keepdims=1),
         helper.make_node("Sqrt", ["s"], ["l2"]),
         helper.make_node("Relu", ["y"], ["r"])],
        [helper.make_tensor_value_info("x", FLOAT, [2, 0, 3]),
         helper.make_tensor_value_info("n", INT64, [0, 4]),
         helper.make_tensor_value_info("raxes", INT64, [1]),
         helper.make_tensor_value_info("y", FLOAT, [2, 3])],
        [_out("high", 3), _out("low", 1, INT64), _out("prod", 2), _out("lse", 2), _out("l2", 3), _out("r", 2)])
    model.graph.initializer.append(helper.make_tensor("one", INT64, [1], [1]))
    _, loaded, outputs = _compile(model, tmp_path)
    y = np.random.default_rng(2).standard_normal((2, 3)).astype(np.float32)
    for axis in (1, 0):
        _check(model, loaded, outputs, {"x": np.zeros((2, 0, 3), np.float32), "n": np.zeros((0, 4), np.int64),
                                        "raxes": np.array([axis], np.int64), "y": y})
