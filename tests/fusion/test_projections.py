"""Projections sharing an input merged into one MatMul (`fusion.projections`): found,
merged only where the plan launches fewer kernels, and the result matches onnxruntime."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from egraph_compiler.backends.opencl import compile_graph, load
from egraph_compiler.fusion import plan_fusion, planner
from egraph_compiler.fusion.planner import fold_compile_time
from egraph_compiler.fusion.projections import merge_projections
from tests.backends.opencl.helpers import static_graph

RNG = np.random.default_rng(3)
SEQ, WIDTH = 5, 12


def _model(bias: tuple[bool, ...], attention: bool = False) -> onnx.ModelProto:
    """Projections of one input (a bias on those ``bias`` marks). ``attention``: three
    of width 6 consumed as Q·Kᵀ then ·V; otherwise each consumed by its own Tanh."""
    nodes, init, widths, results = [], {}, [], []
    for k, has_bias in enumerate(bias):
        widths.append(6 if attention else WIDTH // 2 + k)
        init[f"w{k}"] = RNG.standard_normal((WIDTH, widths[k])).astype(np.float32)
        nodes.append(helper.make_node("MatMul", ["x", f"w{k}"], [f"p{k}"]))
        last = f"p{k}"
        if has_bias:
            init[f"b{k}"] = RNG.standard_normal(widths[k]).astype(np.float32)
            nodes.append(helper.make_node("Add", [f"p{k}", f"b{k}"], [f"a{k}"]))
            last = f"a{k}"
        results.append(last)
        if not attention:
            nodes.append(helper.make_node("Tanh", [last], [f"y{k}"]))
    outputs = [(f"y{k}", (2, SEQ, w)) for k, w in enumerate(widths)]
    if attention:
        q, k, v = results
        nodes += [helper.make_node("Transpose", [k], ["kt"], perm=[0, 2, 1]),
                  helper.make_node("MatMul", [q, "kt"], ["s"]),
                  helper.make_node("MatMul", ["s", v], ["y"])]
        outputs = [("y", (2, SEQ, 6))]
    graph = helper.make_graph(
        nodes, "projections", [helper.make_tensor_value_info("x", TensorProto.FLOAT, (2, SEQ, WIDTH))],
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, shape) for name, shape in outputs],
        [onnx.numpy_helper.from_array(a, n) for n, a in init.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _run(model: onnx.ModelProto, tmp_path: Path) -> int:
    feeds = {"x": RNG.standard_normal((2, SEQ, WIDTH)).astype(np.float32)}
    graph = static_graph(model, feeds)
    artefact = compile_graph(graph, tmp_path)
    got = load(tmp_path).run(feeds)
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, feeds)
    for info, expected in zip(model.graph.output, want, strict=True):
        np.testing.assert_allclose(got[info.name], expected, rtol=1e-5, atol=1e-5)
    return artefact.kernels


def test_projections_sharing_an_input_are_one_group() -> None:
    model = _model((True, True, True))
    feeds = {"x": np.zeros((2, SEQ, WIDTH), np.float32)}
    merged, groups = merge_projections(fold_compile_time(static_graph(model, feeds)))
    assert groups == [("p0", "p1", "p2")]
    ops = [n.op for n in merged.nodes]
    assert ops.count("MatMul") == 1 and ops.count("Add") == 1 and ops.count("Slice") == 3


def test_attention_projections_merge_into_fewer_kernels(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Q, K, V read through Slices in the attention MatMuls' kernels: one projection
    kernel instead of three, fewer kernels in all."""
    model = _model((True, True, True), attention=True)
    feeds = {"x": np.zeros((2, SEQ, WIDTH), np.float32)}
    plan = plan_fusion(static_graph(model, feeds))
    assert plan.unit_counts.get("qkv") == 1
    assert _run(model, tmp_path) == plan.kernel_count
    with monkeypatch.context() as patch:
        patch.setattr(planner, "merge_projections", lambda graph: (graph, []))
        apart = plan_fusion(static_graph(model, feeds)).kernel_count
    assert plan.kernel_count < apart


def test_merge_is_refused_where_it_does_not_pay(tmp_path: Path) -> None:
    """Each projection fused with its own consumer is already one kernel; merged, the
    Slices would need kernels of their own."""
    model = _model((True, True, True))
    feeds = {"x": np.zeros((2, SEQ, WIDTH), np.float32)}
    plan = plan_fusion(static_graph(model, feeds))
    assert "qkv" not in plan.unit_counts
    assert any(d.candidate.startswith("unit qkv") and "not merged" in d.reason
               for d in plan.decisions)
    assert _run(model, tmp_path) == 3


def test_mixed_biases_merge_the_matmuls_only(tmp_path: Path) -> None:
    model = _model((True, False, True))
    feeds = {"x": np.zeros((2, SEQ, WIDTH), np.float32)}
    merged, _ = merge_projections(fold_compile_time(static_graph(model, feeds)))
    assert [n.op for n in merged.nodes].count("Add") == 2  # the biases stay apart
    _run(model, tmp_path)
    attention = _model((True, False, True), attention=True)
    assert "qkv" in plan_fusion(static_graph(attention, feeds)).unit_counts
    _run(attention, tmp_path / "attention")


def test_a_single_projection_is_left_alone() -> None:
    model = _model((True,))
    feeds = {"x": np.zeros((2, SEQ, WIDTH), np.float32)}
    graph = fold_compile_time(static_graph(model, feeds))
    assert merge_projections(graph) == (graph, [])
