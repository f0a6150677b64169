"""Small models and one compile shared by the fault-injection tests."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def add_relu_model(offset: float = 0.0, shape: tuple[int, ...] = (2, 3)) -> onnx.ModelProto:
    """y = Relu(x + w), w = arange + offset: two models with different offsets differ in output."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, list(shape))
    w = numpy_helper.from_array(np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape) + offset, "w")
    graph = helper.make_graph([helper.make_node("Add", ["x", "w"], ["s"], name="add"),
                               helper.make_node("Relu", ["s"], ["y"], name="relu")], "g", [x], [y], [w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def expected(offset: float, x: np.ndarray) -> np.ndarray:
    return np.maximum(x + np.arange(x.size, dtype=np.float32).reshape(x.shape) + offset, 0)
