"""A block of layout operators only is eliminated into the block that reads it
(`planner._Planner.merge_layout_blocks`): both operands of an attention-style MatMul
reach it through Reshape/Transpose chains, and both chains end up in its kernel."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from egraph_compiler.backends.opencl import compile_graph, load
from egraph_compiler.fusion import plan_fusion, planner
from tests.backends.opencl.helpers import static_graph


def _model() -> onnx.ModelProto:
    init = {"heads": np.array([2, 5, 3, 4], np.int64)}
    nodes = [helper.make_node("Reshape", ["a", "heads"], ["ra"]),
             helper.make_node("Transpose", ["ra"], ["ta"], perm=[0, 2, 1, 3]),
             helper.make_node("Reshape", ["b", "heads"], ["rb"]),
             helper.make_node("Transpose", ["rb"], ["tb"], perm=[0, 2, 3, 1]),
             helper.make_node("MatMul", ["ta", "tb"], ["y"])]
    graph = helper.make_graph(
        nodes, "layout_merge",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, (2, 5, 12)) for n in "ab"],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, (2, 3, 5, 5))],
        [onnx.numpy_helper.from_array(a, n) for n, a in init.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_both_operand_chains_join_the_matmul(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(0)
    feeds = {n: rng.standard_normal((2, 5, 12)).astype(np.float32) for n in "ab"}
    model = _model()
    graph = static_graph(model, feeds)
    plan = plan_fusion(graph)
    assert [b.kind for b in plan.blocks] == ["matmul"]
    assert any("eliminated into the block that reads them" in d.reason for d in plan.decisions)
    artefact = compile_graph(graph, tmp_path)
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    np.testing.assert_allclose(load(tmp_path).run(feeds)["y"], want, rtol=1e-5, atol=1e-5)
    assert artefact.kernels == 1
    monkeypatch.setattr(planner._Planner, "merge_layout_blocks", lambda self, blocks: blocks)
    assert plan_fusion(graph).kernel_count == 2  # the greedy walk alone leaves one chain out
