"""evaluate_node agrees with onnxruntime on every op constant folding relies on.

Each case is one opset-17 node; the IR node comes from load_onnx (so attribute-form
axes/splits/bounds are exercised) and evaluate_node runs it on the same inputs.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from egraph_compiler.ir import ModelError, load_onnx
from egraph_compiler.ops.evaluate import evaluate_node
from tests.modelzoo import assert_close, run_ort

rng = np.random.default_rng(0)
F = rng.standard_normal((2, 3, 4)).astype(np.float32)
P = rng.uniform(0.1, 2.0, (2, 3, 4)).astype(np.float32)
INTS = np.asarray([-7, -3, 0, 5, 9], dtype=np.int64)
J = np.asarray([2, -2, 3, 3, -4], dtype=np.int64)


def _i64(*values: int) -> np.ndarray:
    return np.asarray(values, dtype=np.int64)


# name: (op, runtime inputs, constant inputs, attributes)
CASES: dict[str, tuple[str, list[np.ndarray], list[np.ndarray], dict]] = {
    "add-broadcast": ("Add", [F, F[0, :, :1]], [], {}),
    "div-int-truncates": ("Div", [INTS, J], [], {}),
    "mod-int": ("Mod", [INTS, J], [], {}),
    "sub": ("Sub", [F, P], [], {}),
    "mul": ("Mul", [F, P], [], {}),
    "pow": ("Pow", [P, F], [], {}),
    "equal": ("Equal", [INTS, J], [], {}),
    "where": ("Where", [F > 0, F, P], [], {}),
    "sqrt": ("Sqrt", [P], [], {}),
    "erf": ("Erf", [F], [], {}),
    "exp": ("Exp", [F], [], {}),
    "sigmoid": ("Sigmoid", [F], [], {}),
    "tanh": ("Tanh", [F], [], {}),
    "reciprocal": ("Reciprocal", [P], [], {}),
    "neg": ("Neg", [INTS], [], {}),
    "shape-slice": ("Shape", [F], [], {"start": 1, "end": -1}),
    "gather-negative": ("Gather", [F, _i64(-1, 0)], [], {"axis": 1}),
    "concat": ("Concat", [F, P], [], {"axis": -1}),
    "reshape-zero-minus-one": ("Reshape", [F], [_i64(0, -1, 2)], {}),
    "unsqueeze": ("Unsqueeze", [F], [_i64(-1, 1)], {}),
    "squeeze": ("Squeeze", [F[:, :1]], [_i64(1)], {}),
    "transpose": ("Transpose", [F], [], {"perm": [2, 0, 1]}),
    "slice-negative-step": ("Slice", [F], [_i64(-1, 3), _i64(-100, 0), _i64(2, 1), _i64(-2, -1)], {}),
    "cast": ("Cast", [F * 10], [], {"to": onnx.TensorProto.INT32}),
    "constant-of-shape": ("ConstantOfShape", [_i64(2, 3)], [], {"value": numpy_helper.from_array(np.asarray([7], np.int64))}),
    "range": ("Range", [np.asarray(2, np.int64), np.asarray(11, np.int64), np.asarray(3, np.int64)], [], {}),
    "expand": ("Expand", [F[:, :1, :]], [_i64(3, 2, 1, 4)], {}),
    "tile": ("Tile", [F], [_i64(1, 2, 1)], {}),
    "reduce-mean": ("ReduceMean", [F], [], {"axes": [0, -1], "keepdims": 0}),
    "reduce-sum": ("ReduceSum", [F], [_i64(1)], {"keepdims": 1}),
    "reduce-max": ("ReduceMax", [F], [], {"axes": [2]}),
    "reduce-prod": ("ReduceProd", [P], [], {"keepdims": 0}),
    "matmul-batch": ("MatMul", [F, rng.standard_normal((1, 4, 5)).astype(np.float32)], [], {}),
    "gemm": ("Gemm", [F[0], F[1]], [np.ones(3, np.float32)], {"transB": 1, "alpha": 0.5, "beta": 2.0}),
    "softmax": ("Softmax", [F], [], {"axis": 1}),
    "clip": ("Clip", [F], [np.asarray(-0.3, np.float32), np.asarray(0.4, np.float32)], {}),
    "pad": ("Pad", [F], [_i64(0, 1, 2, 1, 0, 0), np.asarray(0.5, np.float32)], {}),
    "pad-reflect": ("Pad", [F], [_i64(0, 0, 2, 0, 0, 1)], {"mode": "reflect"}),
    "flatten": ("Flatten", [F], [], {"axis": 2}),
    "argmax": ("ArgMax", [F], [], {"axis": 1, "keepdims": 0}),
    "leaky-relu": ("LeakyRelu", [F], [], {"alpha": 0.2}),
    "max": ("Max", [F, P, F[0]], [], {}),
    "einsum": ("Einsum", [F, P[0].T.copy()], [], {"equation": "bij,jk->bik"}),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_evaluate_node_matches_onnxruntime(case: str) -> None:
    op, runtime, constants, attrs = CASES[case]
    names = [f"in{i}" for i in range(len(runtime))]
    const_names = [f"c{i}" for i in range(len(constants))]
    outputs = ["y"]
    node = helper.make_node(op, names + const_names, outputs, **attrs)
    graph = helper.make_graph(
        [node], case,
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), list(a.shape)) for n, a in zip(names, runtime, strict=True)],
        [helper.make_empty_tensor_value_info("y")],
        [numpy_helper.from_array(a, n) for n, a in zip(const_names, constants, strict=True)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    feeds = dict(zip(names, runtime, strict=True))
    expected = run_ort(model, feeds)["y"]
    imported = load_onnx_without_checker(model, expected)
    (ir_node,) = imported.nodes
    args = [feeds.get(i, imported.constants.get(i)) for i in ir_node.inputs]
    (actual,) = evaluate_node(ir_node.op, ir_node.attrs, args)
    assert actual.dtype == expected.dtype
    assert_close(actual, expected, rtol=1e-5, atol=1e-6)


def load_onnx_without_checker(model: onnx.ModelProto, expected: np.ndarray):
    """Give the output its real type first: the checker wants graph outputs typed."""
    model.graph.output[0].CopyFrom(helper.make_tensor_value_info(
        "y", helper.np_dtype_to_tensor_dtype(expected.dtype), list(expected.shape)))
    return load_onnx(model)


def test_unknown_op_is_a_model_error() -> None:
    with pytest.raises(ModelError, match="does not know op 'NoSuchOperator'"):
        evaluate_node("NoSuchOperator", {}, [np.zeros(1)])


def test_integer_division_by_zero_is_a_model_error() -> None:
    with pytest.raises(ModelError, match="division by zero"):
        evaluate_node("Div", {}, [_i64(1), _i64(0)])


def test_square_folds_and_exports_as_mul() -> None:
    """Square is a rule-language op (rules/operators.dnnr) with no ONNX twin: x * x."""
    from egraph_compiler.ir import Graph, Node, TensorType, Value, to_onnx

    graph = Graph("sq", (Value("x", TensorType("float32", (3, 4))),), (Value("y", TensorType("float32", (3, 4))),),
                  (Node("Square", ("x",), ("y",), name="sq"),), types={"x": TensorType("float32", (3, 4)), "y": TensorType("float32", (3, 4))})
    exported = to_onnx(graph)
    onnx.checker.check_model(exported, full_check=True)
    x = F[0]
    (folded,) = evaluate_node("Square", {}, [x])
    assert_close(run_ort(exported, {"x": x})["y"], folded)
    assert_close(folded, x.astype(np.float64) ** 2, rtol=1e-6, atol=0)
