"""Units the planner keeps together (`fusion.units`): RoPE, RMSNorm and written-out
LayerNorm, found by structure, each one kernel on OpenCL and matching onnxruntime."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from egraph_compiler.backends.opencl import compile_graph, load
from egraph_compiler.fusion import plan_fusion, planner
from egraph_compiler.fusion.units import find_units
from egraph_compiler.fusion.view import GraphView
from egraph_compiler.ir import Graph
from tests.backends.opencl.helpers import static_graph

RNG = np.random.default_rng(5)
BATCH, SEQ, HEADS, DIM = 2, 6, 2, 8


def _model(nodes: list[onnx.NodeProto], x_shape: tuple[int, ...],
           init: dict[str, np.ndarray]) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes, "units", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [onnx.numpy_helper.from_array(a, n) for n, a in init.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.graph.output[0].CopyFrom(onnx.shape_inference.infer_shapes(model).graph.output[0])
    return model


def rope_model() -> onnx.ModelProto:
    """A projection then LLaMA's rotary embedding, as the TorchScript exporter writes it:
    x·cos + Concat(-x[..., h:], x[..., :h])·sin on the [B, H, S, D] heads."""
    half = DIM // 2
    init = {"w": RNG.standard_normal((HEADS * DIM, HEADS * DIM)).astype(np.float32),
            "heads": np.array([BATCH, SEQ, HEADS, DIM], np.int64),
            "cos": np.cos(RNG.standard_normal((SEQ, DIM))).astype(np.float32),
            "sin": np.sin(RNG.standard_normal((SEQ, DIM))).astype(np.float32),
            "s0": np.array([0], np.int64), "sh": np.array([half], np.int64),
            "send": np.array([2**62], np.int64), "ax": np.array([3], np.int64)}
    nodes = [helper.make_node("MatMul", ["x", "w"], ["p"]),
             helper.make_node("Reshape", ["p", "heads"], ["r"]),
             helper.make_node("Transpose", ["r"], ["q"], perm=[0, 2, 1, 3]),
             helper.make_node("Slice", ["q", "s0", "sh", "ax"], ["low"]),
             helper.make_node("Slice", ["q", "sh", "send", "ax"], ["high"]),
             helper.make_node("Neg", ["high"], ["neg"]),
             helper.make_node("Concat", ["neg", "low"], ["rot"], axis=-1),
             helper.make_node("Mul", ["q", "cos"], ["a"]),
             helper.make_node("Mul", ["rot", "sin"], ["b"]),
             helper.make_node("Add", ["a", "b"], ["y"])]
    return _model(nodes, (BATCH, SEQ, HEADS * DIM), init)


def norm_model(kind: str) -> onnx.ModelProto:
    """LLaMA's RMSNorm (Pow, ReduceMean, Add, Sqrt, Reciprocal, Mul, Mul) or a LayerNorm
    written out (ReduceMean, Sub, Pow, ReduceMean, Add, Sqrt, Div, Mul, Add); a Tanh
    after it so the unit has a consumer to fuse with."""
    init = {"two": np.array(2.0, np.float32), "eps": np.array(1e-6, np.float32),
            "gamma": RNG.standard_normal(DIM).astype(np.float32),
            "beta": RNG.standard_normal(DIM).astype(np.float32)}
    if kind == "rmsnorm":
        nodes = [helper.make_node("Pow", ["x", "two"], ["sq"]),
                 helper.make_node("ReduceMean", ["sq"], ["ms"], axes=[-1]),
                 helper.make_node("Add", ["ms", "eps"], ["e"]),
                 helper.make_node("Sqrt", ["e"], ["rt"]),
                 helper.make_node("Reciprocal", ["rt"], ["inv"]),
                 helper.make_node("Mul", ["x", "inv"], ["n"]),
                 helper.make_node("Mul", ["n", "gamma"], ["g"])]
    else:
        nodes = [helper.make_node("ReduceMean", ["x"], ["m"], axes=[-1]),
                 helper.make_node("Sub", ["x", "m"], ["d"]),
                 helper.make_node("Pow", ["d", "two"], ["sq"]),
                 helper.make_node("ReduceMean", ["sq"], ["v"], axes=[-1]),
                 helper.make_node("Add", ["v", "eps"], ["e"]),
                 helper.make_node("Sqrt", ["e"], ["rt"]),
                 helper.make_node("Div", ["d", "rt"], ["n"]),
                 helper.make_node("Mul", ["n", "gamma"], ["s"]),
                 helper.make_node("Add", ["s", "beta"], ["g"])]
    nodes.append(helper.make_node("Tanh", ["g"], ["y"]))
    return _model(nodes, (BATCH, SEQ, DIM), init)


MODELS = {"rope": rope_model, "rmsnorm": lambda: norm_model("rmsnorm"),
          "layernorm": lambda: norm_model("layernorm")}


def _graph(kind: str) -> tuple[onnx.ModelProto, dict[str, np.ndarray], Graph]:
    model = MODELS[kind]()
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    feeds = {"x": RNG.standard_normal(shape).astype(np.float32)}
    return model, feeds, static_graph(model, feeds)


@pytest.mark.parametrize("kind", sorted(MODELS))
def test_unit_is_found_by_structure(kind: str) -> None:
    _, _, graph = _graph(kind)
    units = find_units(GraphView(planner.fold_compile_time(graph)))
    assert [u.kind for u in units] == [kind]
    ops = sorted(graph.nodes[n].op for n in units[0].nodes)
    expected = {"rope": ["Add", "Concat", "Mul", "Mul", "Neg", "Reshape", "Slice", "Slice",
                         "Transpose"],
                "rmsnorm": ["Add", "Mul", "Pow", "Reciprocal", "ReduceMean", "Sqrt"],
                "layernorm": ["Add", "Div", "Pow", "ReduceMean", "ReduceMean", "Sqrt", "Sub"]}
    assert ops == expected[kind]


@pytest.mark.parametrize("kind", sorted(MODELS))
def test_unit_is_one_kernel_and_matches_onnxruntime(kind: str, tmp_path: Path) -> None:
    model, feeds, graph = _graph(kind)
    plan = plan_fusion(graph)
    holding = [b for b in plan.blocks if kind in b.units]
    assert len(holding) == 1 and plan.unit_counts == {kind: 1}
    artefact = compile_graph(graph, tmp_path)
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    np.testing.assert_allclose(load(tmp_path).run(feeds)["y"], want, rtol=1e-5, atol=1e-5)
    # RoPE: the projection and the unit; the norms: the unit and its Tanh consumer
    assert artefact.kernels == {"rope": 2, "rmsnorm": 1, "layernorm": 1}[kind]


def test_rope_is_split_without_the_unit(monkeypatch: pytest.MonkeyPatch) -> None:
    """Why units exist: DNNFusion's seed order alone splits the RoPE of this export
    (the shared heads tensor pulls its pieces into different seeds' blocks); without
    the unit only the later clean-up pass (`merge_layout_blocks`) could join them."""
    _, _, graph = _graph("rope")
    monkeypatch.setattr(planner._Planner, "merge_layout_blocks", lambda self, blocks: blocks)
    with_units = plan_fusion(graph).kernel_count
    monkeypatch.setattr(planner, "find_units", lambda view: [])
    assert plan_fusion(graph).kernel_count > with_units
