"""Models onnxruntime rejects are refused at import with onnx's message (issue 16, item 5)."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from egraph_compiler.ir import load_onnx
from egraph_compiler.ir.errors import ModelError


def _model(nodes, outputs, initializers=()):  # type: ignore[no-untyped-def]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    graph = helper.make_graph(nodes, "g", [x], outputs, list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8).SerializeToString()


def test_float_matmul_with_int64_weight_is_refused_like_onnxruntime() -> None:
    w = numpy_helper.from_array(np.ones((3, 2), np.int64), "w")
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 2])
    model = _model([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], [y], [w])
    with pytest.raises(Exception, match="Type Error"):
        ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    with pytest.raises(ModelError, match=r"not a valid ONNX model: <model>: .*MatMul.*inconsistent type tensor\(int64\)"):
        load_onnx(model)


def test_graph_without_outputs_is_refused() -> None:
    with pytest.raises(ModelError, match="the graph has no outputs"):
        load_onnx(_model([helper.make_node("Relu", ["x"], ["z"])], []))
