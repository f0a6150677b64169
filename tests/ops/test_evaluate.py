"""Constant folding (`ops.evaluate`) against onnxruntime for operators whose NumPy form
comes from the declaration: IsInf's detect attributes, the bitwise built-ins."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from egraph_compiler.ops.evaluate import can_fold, evaluate_node


def _onnxruntime(op: str, attrs: dict, inputs: list[np.ndarray], out_type: int) -> np.ndarray:
    names = [f"x{i}" for i in range(len(inputs))]
    graph = helper.make_graph(
        [helper.make_node(op, names, ["y"], **attrs)], "one",
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(x.dtype), x.shape)
         for n, x in zip(names, inputs, strict=True)],
        [helper.make_tensor_value_info("y", out_type, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, dict(zip(names, inputs, strict=True)))[0]


@pytest.mark.parametrize("attrs", [{}, {"detect_negative": 0}, {"detect_positive": 0}])
def test_is_inf_folds_with_its_detect_attributes(attrs: dict) -> None:
    x = np.array([np.inf, -np.inf, 1.0, np.nan, -2.0], dtype=np.float32)
    (folded,) = evaluate_node("IsInf", attrs, [x])
    np.testing.assert_array_equal(folded, _onnxruntime("IsInf", attrs, [x], TensorProto.BOOL))


@pytest.mark.parametrize("op", ["BitwiseAnd", "BitwiseOr", "BitwiseXor", "BitwiseNot"])
def test_bitwise_operators_fold_from_their_declared_builtin(op: str) -> None:
    a = np.array([[5, -3, 0x7F], [12, 0, -1]], dtype=np.int32)
    b = np.array([3, 6, -16], dtype=np.int32)
    inputs = [a] if op == "BitwiseNot" else [a, b]
    assert can_fold(op)
    (folded,) = evaluate_node(op, {}, inputs)
    expected = _onnxruntime(op, {}, inputs, TensorProto.INT32)
    assert folded.dtype == expected.dtype
    np.testing.assert_array_equal(folded, expected)


