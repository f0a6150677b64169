"""IR-3 models: initializers listed among the graph inputs, or (as onnxruntime's
quantize_static writes them when it edits an old model) not, and both import."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from egraph_compiler.ir import load_onnx, to_onnx
from egraph_compiler.ir.errors import ModelError
from tests.modelzoo import assert_close, run_ort


def _ir3_model(list_initializers: bool, extra_node: onnx.NodeProto | None = None) -> onnx.ModelProto:
    w = numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(4, 3) / 10, "w")
    b = numpy_helper.from_array(np.asarray([0.5, -1.0, 2.0], dtype=np.float32), "b")
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])]
    if list_initializers:
        inputs += [helper.make_tensor_value_info("w", TensorProto.FLOAT, [4, 3]),
                   helper.make_tensor_value_info("b", TensorProto.FLOAT, [3])]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["t"]), helper.make_node("Add", ["t", "b"], ["y"])]
    graph = helper.make_graph(nodes + ([extra_node] if extra_node else []), "ir3", inputs,
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])], [w, b])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)])
    model.ir_version = 3
    return model


@pytest.mark.parametrize("list_initializers", [True, False])
def test_ir3_model_imports_and_keeps_its_meaning(list_initializers):
    model = _ir3_model(list_initializers)
    graph = load_onnx(model.SerializeToString())
    assert [v.name for v in graph.inputs] == ["x"]
    x = {"x": np.random.default_rng(0).standard_normal((2, 4)).astype(np.float32)}
    assert_close(run_ort(to_onnx(graph), x), run_ort(model, x), rtol=1e-6, atol=1e-6)


def test_ir3_model_is_still_checked():
    broken = _ir3_model(False, helper.make_node("Relu", ["missing"], ["z"]))
    with pytest.raises(ModelError, match="not a valid ONNX model"):
        load_onnx(broken)
