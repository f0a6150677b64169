"""Constant folding (`ops.evaluate`) against onnxruntime for operators whose NumPy form
comes from the declaration: IsInf's detect attributes, the bitwise built-ins."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from egraph_compiler.ir import ModelError
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




RNG = np.random.default_rng(0)
IMAGE = RNG.standard_normal((1, 4, 5, 5)).astype(np.float32)


@pytest.mark.parametrize(("op", "attrs", "inputs"), [
    ("Conv", {"pads": [1, 0, 1, 2], "strides": [2, 1], "group": 2},
     [IMAGE, RNG.standard_normal((4, 2, 3, 3)).astype(np.float32)]),
    ("CumSum", {"reverse": 1}, [IMAGE, np.asarray(2, np.int64)]),
    ("DepthToSpace", {"blocksize": 2, "mode": "CRD"}, [IMAGE]),
    ("Hardmax", {"axis": 1}, [IMAGE]),
])
def test_an_operator_onnx_defines_folds_by_its_reference_implementation(op: str, attrs: dict,
                                                                         inputs: list[np.ndarray]) -> None:
    """No Python evaluator of its own: ONNX's reference gives the value onnxruntime computes."""
    assert can_fold(op)
    (folded,) = evaluate_node(op, attrs, inputs)
    expected = _onnxruntime(op, attrs, inputs, TensorProto.FLOAT)
    assert folded.dtype == expected.dtype
    np.testing.assert_allclose(folded, expected, rtol=1e-5, atol=1e-5)


def test_attribute_held_operands_go_back_to_the_reference_as_inputs() -> None:
    """The IR holds constant pads / clip bounds / axes / split sizes as attributes; they reach
    the reference typed like the data (a Pad value, Clip bounds) or as int64, uneven Split
    keeps the last part smaller (opset 18) and integer division by zero is refused."""
    ints = np.arange(-4, 5, dtype=np.int32)
    (clipped,) = evaluate_node("Clip", {"min": -2.5, "max": 3.0}, [ints])
    np.testing.assert_array_equal(clipped, np.clip(ints, -2, 3))
    assert clipped.dtype == np.int32
    (padded,) = evaluate_node("Pad", {"pads": (1, 2), "axes": (1,), "value": 7.0}, [ints.reshape(3, 3)])
    assert padded.dtype == np.int32 and padded.tolist()[0] == [7, -4, -3, -2, 7, 7]
    (summed,) = evaluate_node("ReduceSum", {"axes": (0,), "keepdims": 0}, [ints.reshape(3, 3)])
    np.testing.assert_array_equal(summed, ints.reshape(3, 3).sum(axis=0))
    parts = evaluate_node("Split", {"axis": 0}, [np.arange(7)], num_outputs=3)
    assert [p.tolist() for p in parts] == [[0, 1, 2], [3, 4, 5], [6]]
    with pytest.raises(ModelError, match="integer division by zero"):
        evaluate_node("Mod", {}, [ints, np.zeros_like(ints)])


def test_sum_keeps_negative_zero_and_mean_broadcasts_its_first_operand() -> None:
    """Where ONNX's reference is not onnxruntime's answer, folding keeps a path of its own."""
    x = np.array([-0.0, -0.0], dtype=np.float32)
    (summed,) = evaluate_node("Sum", {}, [x])
    np.testing.assert_array_equal(np.signbit(summed), np.signbit(_onnxruntime("Sum", {}, [x], TensorProto.FLOAT)))
    small, large = np.ones(3, np.float32), np.arange(6, dtype=np.float32).reshape(2, 3)
    (mean,) = evaluate_node("Mean", {}, [small, large])
    np.testing.assert_array_equal(mean, _onnxruntime("Mean", {}, [small, large], TensorProto.FLOAT))


def test_gather_elements_folds_along_an_axis_longer_than_64() -> None:
    """ONNX's reference gathers with np.choose (at most 64 choices), which fails on BERT's
    position-id gather from 64 columns; folding keeps its own take_along_axis."""
    data = RNG.standard_normal((3, 70)).astype(np.float32)
    indices = RNG.integers(-70, 70, (3, 5)).astype(np.int64)
    (folded,) = evaluate_node("GatherElements", {"axis": 1}, [data, indices])
    np.testing.assert_array_equal(folded, _onnxruntime("GatherElements", {"axis": 1}, [data, indices],
                                                      TensorProto.FLOAT))
    with pytest.raises(ModelError, match="GatherElements"):
        evaluate_node("GatherElements", {"axis": 1}, [data, indices + 200])
