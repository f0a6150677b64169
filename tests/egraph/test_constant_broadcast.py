"""Pattern constants never let a rewrite drop a broadcast (regression, rules README)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from egraph_compiler import ir, pipeline
from tests.modelzoo import assert_close, run_ort

RULES = pipeline.load_rules()


def model(op: str, x_shape: list[int], const: np.ndarray):  # type: ignore[no-untyped-def]
    node = helper.make_node(op, ["x", "c"], ["y"], name="n")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT,
                                                             list(np.broadcast_shapes(tuple(x_shape), const.shape)))],
                              [numpy_helper.from_array(const, "c")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize(("op", "x_shape", "const", "rewritable"), [
    ("Pow", [3], np.full((4, 1), 2.0, np.float32), False),
    ("Add", [3], np.zeros((2, 3), np.float32), False),
    ("Mul", [1, 3], np.ones((5, 1), np.float32), False),
    ("Add", [2, 3], np.zeros((), np.float32), True),
    ("Mul", [2, 3], np.ones((1,), np.float32), True),
])
def test_broadcasting_constant_keeps_the_output_shape(op: str, x_shape: list[int], const: np.ndarray,
                                                      rewritable: bool) -> None:
    onnx_model = model(op, x_shape, const)
    optimised, _ = pipeline.optimize(ir.load_onnx(onnx_model), RULES)
    x = np.random.default_rng(0).standard_normal(x_shape).astype(np.float32)
    expected = run_ort(onnx_model, {"x": x})["y"]
    actual = run_ort(ir.to_onnx(optimised), {"x": x})["y"]
    assert actual.shape == expected.shape
    assert_close(actual, expected, rtol=1e-6, atol=1e-6)
    if rewritable:  # x + 0 and x * 1 of a non-broadcasting scalar fold away entirely
        assert op not in optimised.op_counts()
