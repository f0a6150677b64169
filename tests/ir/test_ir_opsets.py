"""Opset conversions keep meaning: old-opset models import to opset-17 IR that matches onnxruntime.

Each case is a tiny model written at the old opset; the exported opset-17 model must
agree with onnxruntime running the original, and the IR must hold the canonical form.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from egraph_compiler.ir import Graph, load_onnx, to_onnx
from tests.modelzoo import assert_close, random_inputs, run_ort


def _model(opset: int, nodes: list[onnx.NodeProto], x_shape: list[int], inits: dict[str, np.ndarray] | None = None,
           outputs: tuple[str, ...] = ("y",)) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes, "case", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
        [numpy_helper.from_array(v, k) for k, v in (inits or {}).items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 7
    # The checker wants graph outputs shaped: take the shapes from an onnxruntime run.
    results = run_ort(model, random_inputs(model, seed=0))
    for output in model.graph.output:
        output.CopyFrom(helper.make_tensor_value_info(output.name, TensorProto.FLOAT, list(results[output.name].shape)))
    onnx.checker.check_model(model)
    return model


def _same_meaning(model: onnx.ModelProto) -> Graph:
    graph = load_onnx(model)
    exported = to_onnx(graph)
    onnx.checker.check_model(exported, full_check=True)
    inputs = random_inputs(model, seed=2)
    assert_close(run_ort(exported, inputs), run_ort(model, inputs), rtol=1e-5, atol=1e-6)
    return graph


def _i64(*values: int) -> np.ndarray:
    return np.asarray(values, dtype=np.int64)


@pytest.mark.parametrize("shape", [[2, 3, 4], [2, 3, 2, 5]])
@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax", "Hardmax"])
def test_softmax_before_13_normalises_over_the_flattened_tail(op: str, shape: list[int]) -> None:
    graph = _same_meaning(_model(9 if op != "LogSoftmax" else 11, [helper.make_node(op, ["x"], ["y"], axis=1)], shape))
    assert graph.op_counts()[op] == 1
    assert {"Flatten", "Reshape"} <= set(graph.op_counts()), "rank > 2 with axis=1 needs the flatten form"


def test_softmax_before_13_on_the_last_axis_stays_one_node() -> None:
    graph = _same_meaning(_model(9, [helper.make_node("Softmax", ["x"], ["y"], axis=2)], [2, 3, 4]))
    assert graph.op_counts() == {"Softmax": 1}
    assert graph.nodes[0].attr("axis") == -1


@pytest.mark.parametrize("opset", [11, 13])
def test_unsqueeze_axes_become_an_attribute(opset: int) -> None:
    if opset == 11:
        nodes = [helper.make_node("Unsqueeze", ["x"], ["y"], axes=[0, 3])]
        inits = {}
    else:
        nodes = [helper.make_node("Unsqueeze", ["x", "axes"], ["y"])]
        inits = {"axes": _i64(0, 3)}
    graph = _same_meaning(_model(opset, nodes, [2, 3], inits))
    (node,) = graph.nodes
    assert node.inputs == ("x",) and node.attr("axes") == (0, 3)


@pytest.mark.parametrize("opset", [13, 18])
@pytest.mark.parametrize("keepdims", [0, 1])
def test_reduce_mean_axes_become_an_attribute(opset: int, keepdims: int) -> None:
    if opset == 13:
        nodes = [helper.make_node("ReduceMean", ["x"], ["y"], axes=[1, -1], keepdims=keepdims)]
        inits = {}
    else:
        nodes = [helper.make_node("ReduceMean", ["x", "axes"], ["y"], keepdims=keepdims)]
        inits = {"axes": _i64(1, -1)}
    graph = _same_meaning(_model(opset, nodes, [2, 3, 4], inits))
    (node,) = graph.nodes
    assert node.inputs == ("x",) and node.attr("axes") == (1, -1)


def _bn_inits(stats_shape: tuple[int, ...]) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {"scale": rng.uniform(0.5, 1.5, stats_shape).astype(np.float32),
            "bias": rng.standard_normal(stats_shape).astype(np.float32),
            "mean": rng.standard_normal(stats_shape).astype(np.float32),
            "var": rng.uniform(0.5, 1.5, stats_shape).astype(np.float32)}


def test_batchnorm_7_spatial_keeps_meaning() -> None:
    node = helper.make_node("BatchNormalization", ["x", "scale", "bias", "mean", "var"], ["y"], epsilon=1e-3, spatial=1)
    graph = _same_meaning(_model(7, [node], [2, 3, 4, 4], _bn_inits((3,))))
    assert graph.nodes[0].attr("spatial") is None and graph.nodes[0].attr("epsilon") == pytest.approx(1e-3)


def test_batchnorm_7_non_spatial_becomes_broadcast_arithmetic() -> None:
    """spatial=0: statistics per (C, H, W) element; checked against the formula in NumPy."""
    inits = _bn_inits((3, 4, 4))
    node = helper.make_node("BatchNormalization", ["x", "scale", "bias", "mean", "var"], ["y"], epsilon=1e-3, spatial=0)
    model = _model(7, [node], [2, 3, 4, 4], inits)
    graph = load_onnx(model)
    assert "BatchNormalization" not in graph.op_counts()
    exported = to_onnx(graph)
    onnx.checker.check_model(exported, full_check=True)
    x = random_inputs(model, seed=4)["x"]
    expected = (x - inits["mean"]) / np.sqrt(inits["var"] + np.float32(1e-3)) * inits["scale"] + inits["bias"]
    assert_close(run_ort(exported, {"x": x})["y"], expected, rtol=1e-5, atol=1e-5)


CASES = {
    "clip-6": (6 + 1, [helper.make_node("Clip", ["x"], ["y"], min=-0.5, max=0.7)], {}),
    "clip-13": (13, [helper.make_node("Clip", ["x", "lo", "hi"], ["y"])],
                {"lo": np.asarray(-0.5, np.float32), "hi": np.asarray(0.7, np.float32)}),
    "slice-9": (9, [helper.make_node("Slice", ["x"], ["y"], starts=[1, 0], ends=[3, -1], axes=[0, 2])], {}),
    "slice-13": (13, [helper.make_node("Slice", ["x", "s", "e", "a", "st"], ["y"])],
                 {"s": _i64(3, 0), "e": _i64(0, 100), "a": _i64(0, 2), "st": _i64(-1, 2)}),
    "pad-7": (7, [helper.make_node("Pad", ["x"], ["y"], pads=[0, 1, 0, 0, 2, 1], value=1.5)], {}),
    "pad-13": (13, [helper.make_node("Pad", ["x", "p", "v"], ["y"])],
               {"p": _i64(0, 1, 0, 0, 2, 1), "v": np.asarray(1.5, np.float32)}),
    "split-11": (11, [helper.make_node("Split", ["x"], ["y", "z"], axis=2, split=[1, 3])], {}),
    "split-13": (13, [helper.make_node("Split", ["x", "sp"], ["y", "z"], axis=2)], {"sp": _i64(1, 3)}),
    "squeeze-13": (13, [helper.make_node("Unsqueeze", ["x", "a"], ["u"]), helper.make_node("Squeeze", ["u", "a"], ["y"])],
                   {"a": _i64(1)}),
    "upsample-9": (9, [helper.make_node("Upsample", ["x", "sc"], ["y"], mode="nearest")],
                   {"sc": np.asarray([1, 1, 2, 3], np.float32)}),
    "resize-10": (10, [helper.make_node("Resize", ["x", "sc"], ["y"], mode="linear")],
                  {"sc": np.asarray([1, 1, 2, 3], np.float32)}),
    "dropout-identity-7": (7, [helper.make_node("Dropout", ["x"], ["d"], ratio=0.3), helper.make_node("Identity", ["d"], ["i"]),
                               helper.make_node("Relu", ["i"], ["y"])], {}),
    "constant-of-shape-9": (9, [helper.make_node("ConstantOfShape", ["shape"], ["c"], value=numpy_helper.from_array(np.asarray([2.5], np.float32))),
                                helper.make_node("Add", ["x", "c"], ["y"])], {"shape": _i64(3, 4)}),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_old_opset_constant_inputs_keep_meaning(case: str) -> None:
    opset, nodes, inits = CASES[case]
    outputs = ("y", "z") if case.startswith("split") else ("y",)
    shape = [2, 1, 4, 4] if case.startswith(("upsample", "resize")) else [4, 3, 4]
    graph = _same_meaning(_model(opset, nodes, shape, inits, outputs))
    for node in graph.nodes:
        produced = {o for n in graph.nodes for o in n.outputs}
        assert all(i in ("x", "") or i in graph.constants or i in produced for i in node.inputs)
        if node.op in ("Clip", "Slice", "Pad", "Split", "Squeeze", "Unsqueeze"):
            assert len(node.inputs) == 1, f"{node.op} should hold its constant inputs as attributes"
    assert not {"Dropout", "Identity", "ConstantOfShape", "Upsample"} & set(graph.op_counts())


def test_resize_10_reads_run_time_scales_as_upsample_9_does() -> None:
    """Resize-10 is Upsample-9 renamed: asymmetric, floor, scales read as they come."""
    infos = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 1, 4, 4]),
             helper.make_tensor_value_info("sc", TensorProto.FLOAT, [4])]
    graph = helper.make_graph([helper.make_node("Resize", ["x", "sc"], ["y"])], "case", infos,
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 1, None, None])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 10)])
    model.ir_version = 7
    feeds = {"x": random_inputs(model, seed=3)["x"], "sc": np.asarray([1, 1, 2, 3], np.float32)}
    assert_close(run_ort(to_onnx(load_onnx(model)), feeds), run_ort(model, feeds), rtol=1e-6, atol=0)


def test_split_18_uneven_num_outputs_exports_explicit_sizes() -> None:
    """Opset 18 lets the last chunk be smaller; opset 17 needs the sizes spelled out."""
    from egraph_compiler.shapes import infer_shapes

    node = helper.make_node("Split", ["x"], ["y", "z", "w"], axis=1, num_outputs=3)
    model = _model(18, [node], [2, 7], outputs=("y", "z", "w"))
    graph = infer_shapes(load_onnx(model))
    assert [graph.types[o].shape for o in ("y", "z", "w")] == [(2, 3), (2, 3), (2, 1)]
    exported = to_onnx(graph)
    onnx.checker.check_model(exported, full_check=True)
    inputs = random_inputs(model, seed=0)
    assert_close(run_ort(exported, inputs), run_ort(model, inputs))
