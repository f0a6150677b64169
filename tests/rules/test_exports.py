"""rules/exports.dnnr: the exporters' spelled-out GELU folds back into one operator.

Each case is the node sequence torch 2.13's TorchScript exporter writes (constants as
float32 initializers, in the exporter's operand order), with a symbolic batch; the
compiled graph must hold the folded operator, and the written model (opset 17: spelled
out again; opset 20: Gelu) must match onnxruntime on the original.
"""

from __future__ import annotations

import math

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from egraph_compiler import ir, pipeline

F32 = TensorProto.FLOAT


def _scalar(name: str, value: float) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(value, dtype=np.float32), name)


def _gelu_erf() -> tuple[list[onnx.NodeProto], list[onnx.TensorProto]]:
    nodes = [helper.make_node("Div", ["x", "sqrt2"], ["d"]), helper.make_node("Erf", ["d"], ["e"]),
             helper.make_node("Add", ["e", "one"], ["a"]), helper.make_node("Mul", ["x", "a"], ["m"]),
             helper.make_node("Mul", ["m", "half"], ["y"])]
    return nodes, [_scalar("sqrt2", math.sqrt(2)), _scalar("one", 1), _scalar("half", 0.5)]


def _gelu_tanh() -> tuple[list[onnx.NodeProto], list[onnx.TensorProto]]:
    nodes = [helper.make_node("Mul", ["x", "half"], ["h"]), helper.make_node("Pow", ["x", "three"], ["p"]),
             helper.make_node("Mul", ["p", "c"], ["pc"]), helper.make_node("Add", ["x", "pc"], ["s"]),
             helper.make_node("Mul", ["s", "k"], ["sk"]), helper.make_node("Tanh", ["sk"], ["t"]),
             helper.make_node("Add", ["t", "one"], ["a"]), helper.make_node("Mul", ["h", "a"], ["y"])]
    return nodes, [_scalar("half", 0.5), _scalar("three", 3), _scalar("c", 0.044715),
                   _scalar("k", math.sqrt(2 / math.pi)), _scalar("one", 1)]


@pytest.mark.parametrize("opset", [17, 20])
@pytest.mark.parametrize(("spelled", "folded", "rule"), [
    (_gelu_erf, "Gelu", "gelu-erf-fold"), (_gelu_tanh, "GeluTanh", "gelu-tanh-fold")])
def test_gelu_spelled_out_folds(spelled, folded: str, rule: str, opset: int) -> None:
    nodes, inits = spelled()
    graph = helper.make_graph(nodes, "gelu", [helper.make_tensor_value_info("x", F32, ["batch", 16])],
                              [helper.make_tensor_value_info("y", F32, ["batch", 16])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    result = pipeline.compile_model(model.SerializeToString())
    assert [n.op for n in result.graph.nodes] == [folded]
    assert result.report.rules_fired.get(rule) == 1
    written = ir.to_onnx(result.graph)
    assert written.opset_import[0].version == opset
    assert ("Gelu" in [n.op_type for n in written.graph.node]) == (opset >= 20)
    x = {"x": np.random.default_rng(0).standard_normal((3, 16)).astype(np.float32) * 3}
    run = lambda m: ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, x)[0]  # noqa: E731
    np.testing.assert_allclose(run(written), run(model), rtol=1e-5, atol=1e-6)
