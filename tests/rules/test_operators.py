"""rules/operators.dnnr: the vocabulary is complete, its facts match the seed tables and
ONNX, and every elementwise operator's scalar semantics agrees with onnxruntime."""

from __future__ import annotations

import math
import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from egraph_compiler import dsl
from egraph_compiler.dsl.ast import BinOp, Call, Expr, Name, Num, OpDecl, UnOp
from egraph_compiler.ir.convert import IR_ONLY_ATTRS, LATER_OPSET_ATTRS
from tests.modelzoo import LIGHT_DIR, LIGHT_MODELS, assert_close, run_ort
from tests.rules.support import RULES

OPS: dict[str, OpDecl] = dsl.load_rules([RULES / "operators.dnnr"]).ops

LIGHT_MODEL_OPS = (
    "Conv BatchNormalization Relu Unsqueeze Mul Add Concat Reshape MaxPool Sum AveragePool "
    "Transpose Gemm Softmax LRN GlobalAveragePool Flatten Dropout Identity ConstantOfShape"
).split()
TRANSFORMER_OPS = (
    "MatMul Div Sub Pow Sqrt Erf ReduceMean ReduceSum ReduceProd ReduceMax Shape Gather Slice "
    "Split Squeeze Expand Where Cast Tanh Sigmoid Exp Log Neg Reciprocal Abs Square "
    "LayerNormalization Gelu Range Equal"
).split()
QUANT_OPS = "QuantizeLinear DequantizeLinear QLinearConv QLinearMatMul MatMulInteger ConvInteger BitShift".split()
ELEMENTWISE_ONNX_OPS = (
    "Min Max Clip LeakyRelu PRelu Elu Selu HardSigmoid Softplus Ceil Floor Round Sign Sin Cos "
    "Not And Or Greater Less Mean Pad Resize DepthToSpace SpaceToDepth Tile ConvTranspose "
    "InstanceNormalization LogSoftmax CumSum Einsum"
).split()


def test_file_is_clean() -> None:
    assert dsl.check([RULES / "operators.dnnr"]) == []


def test_every_light_model_operator_is_declared() -> None:
    used = set()
    for name in LIGHT_MODELS:
        model = onnx.load(os.path.join(LIGHT_DIR, f"light_{name}.onnx"))
        used |= {node.op_type for node in model.graph.node}
    assert used
    assert sorted(used - set(OPS)) == []


@pytest.mark.parametrize("group", [LIGHT_MODEL_OPS, TRANSFORMER_OPS, QUANT_OPS, ELEMENTWISE_ONNX_OPS])
def test_operator_groups_are_declared(group: list[str]) -> None:
    assert sorted(set(group) - set(OPS)) == []


# Seed 000 Table 3.2 (mapping types), as printed.
TABLE_3_2 = {
    "one_to_one": "Add BatchNormalization Cast Ceil Clip Concat Cos Erf Exp Greater Where LeakyRelu "
                  "Log Not PRelu Reciprocal Relu Round Sigmoid Sin Slice Split Sqrt Tanh Asin",
    "one_to_many": "Expand Gather Resize",
    "many_to_many": "AveragePool Conv ConvTranspose CumSum Einsum Gemm InstanceNormalization "
                    "MaxPool ReduceProd ReduceMean Softmax",
    "reorganize": "Flatten Reshape Squeeze Unsqueeze",
    "shuffle": "DepthToSpace SpaceToDepth Transpose",
}
# Seed 001 Table 3 (layout classes), as printed (Unary = Relu, Exp here).
SMARTMEM_TABLE_3 = {
    "ild_variable": "Conv MatMul LayerNormalization Softmax",
    "ild_fixed": "Reshape Transpose DepthToSpace SpaceToDepth",
    "ili_variable": "Add Relu Exp",
    "ili_fixed": "Gather Slice",
}
# Seed 000 Table 5.2 (dynamism), the operators whose class does not depend on dnnr's
# attribute-held constants (Slice moves to shape_determined there; ConstantOfShape's
# output shape is its input's value: see operators.dnnr).
TABLE_5_2 = {
    "shape_determined_output": "Shape",
    "shape_determined": "Add AveragePool Cast Concat Conv Gather MatMul MaxPool ReduceSum Relu "
                        "Round Sigmoid Softmax",
    "shape_value_determined": "Expand Range Reshape Resize TopK",
    "execution_determined": "NonZero",
}


@pytest.mark.parametrize(("table", "field"), [
    (TABLE_3_2, "mapping"), (SMARTMEM_TABLE_3, "layout"), (TABLE_5_2, "dynamism"),
])
def test_classes_follow_the_seed_tables(table: dict[str, str], field: str) -> None:
    wrong = {op: getattr(OPS[op], field) for cls, ops in table.items() for op in ops.split()
             if getattr(OPS[op], field) != cls}
    assert wrong == {}


def _onnx_default(attr: onnx.defs.OpSchema.Attribute) -> object:
    if not attr.default_value.name:
        return None
    value = helper.get_attribute_value(attr.default_value)
    return value.decode() if isinstance(value, bytes) else value


def _declared_default(expr: Expr | None) -> object:
    if isinstance(expr, Num):
        return expr.value
    if isinstance(expr, UnOp) and isinstance(expr.operand, (Num, Name)):
        inner = _declared_default(expr.operand)
        return -inner  # type: ignore[operator]
    if isinstance(expr, Name) and expr.name == "inf":
        return math.inf
    return getattr(expr, "value", None)


INTERNAL = ("Square", "Gelu", "GeluTanh", "TopKIndices", "MaxPoolIndices")  # rules/README.md, "Internal operators"


def test_internal_operators_are_not_onnx_17() -> None:
    for name in INTERNAL:
        assert name in OPS
        assert not onnx.defs.has(name, max_inclusive_version=17), name


@pytest.mark.parametrize("name", sorted(set(OPS) - set(INTERNAL)))
def test_attributes_match_onnx_opset_17(name: str) -> None:
    # the IR is opset-17 ONNX; an operator added later (Mish, opset 18) keeps its first form
    schema = onnx.defs.get_schema(name, 17) if onnx.defs.has(name, 17) else \
        onnx.defs.get_schema(name, 21)
    allowed = set(schema.attributes) | IR_ONLY_ATTRS.get(name, frozenset()) | LATER_OPSET_ATTRS.get(name, frozenset())
    for attr in OPS[name].attrs:
        assert attr.name in allowed, f"{name}.{attr.name} is not an ONNX or IR attribute"
        if attr.name in schema.attributes and attr.default is not None:
            expected = _onnx_default(schema.attributes[attr.name])
            actual = _declared_default(attr.default)
            if isinstance(expected, float):
                assert actual == pytest.approx(expected, rel=1e-6), f"{name}.{attr.name}"
            else:
                assert actual == expected, f"{name}.{attr.name}"
    required = {a for a, s in schema.attributes.items() if s.required}
    assert required <= {a.name for a in OPS[name].attrs}


# ---- scalar semantics against onnxruntime

_FUNCS = {
    "exp": np.exp, "log": np.log, "sqrt": np.sqrt, "abs": np.abs, "tanh": np.tanh,
    "erf": np.vectorize(math.erf), "sin": np.sin, "cos": np.cos, "floor": np.floor,
    "ceil": np.ceil, "round": np.round, "sign": np.sign, "min": np.minimum, "max": np.maximum,
    "select": np.where,
}
_BINOPS = {
    "+": np.add, "-": np.subtract, "*": np.multiply, "/": np.divide, "==": np.equal,
    "!=": np.not_equal, "<": np.less, "<=": np.less_equal, ">": np.greater,
    ">=": np.greater_equal, "and": np.logical_and, "or": np.logical_or,
}


def evaluate(expr: Expr, env: dict[str, object]) -> object:
    """NumPy value of a declared scalar semantics (the test's own reading of it)."""
    if isinstance(expr, Num):
        return expr.value
    if isinstance(expr, Name):
        return math.inf if expr.name == "inf" else env[expr.name]
    if isinstance(expr, UnOp):
        inner = evaluate(expr.operand, env)
        return np.logical_not(inner) if expr.op == "not" else np.negative(inner)
    if isinstance(expr, BinOp):
        return _BINOPS[expr.op](evaluate(expr.lhs, env), evaluate(expr.rhs, env))
    if isinstance(expr, Call):
        return _FUNCS[expr.func](*[evaluate(a, env) for a in expr.args])
    raise AssertionError(f"unexpected {expr!r} in semantics")


_LOGIC = {"Not", "And", "Or", "Xor"}
_POSITIVE = {"Log", "Sqrt"}
_NONZERO = {"Reciprocal", "Div"}


def _sample(op: str, param: str, rng: np.random.Generator) -> np.ndarray:
    shape = (3, 5)
    if op in _LOGIC or (op == "Where" and param == "cond"):
        return rng.integers(0, 2, shape).astype(bool)
    if op in _POSITIVE:
        return rng.uniform(0.1, 3.0, shape).astype(np.float32)
    if op in _NONZERO and param in ("x", "b"):
        return (rng.uniform(0.5, 2.0, shape) * rng.choice([-1, 1], shape)).astype(np.float32)
    if op in ("Round", "Equal", "Greater", "Less", "GreaterOrEqual", "LessOrEqual"):
        return (rng.integers(-6, 7, shape) / 2).astype(np.float32)  # halves: ties to even
    return rng.uniform(-3.0, 3.0, shape).astype(np.float32)


ELEMENTWISE = sorted(
    name for name, op in OPS.items()
    if op.semantics is not None and name not in INTERNAL
)


def test_scalar_semantics_match_onnxruntime() -> None:
    rng = np.random.default_rng(5)
    nodes, inputs, outputs, feeds, expected = [], [], [], {}, {}
    for name in ELEMENTWISE:
        op = OPS[name]
        env: dict[str, object] = {a.name: _declared_default(a.default) for a in op.attrs}
        args = []
        for param in op.params:
            if param.optional:
                continue
            value = _sample(name, param.name, rng)
            arg = f"{name}_{param.name}"
            feeds[arg], env[param.name] = value, value
            dtype = TensorProto.BOOL if value.dtype == bool else TensorProto.FLOAT
            inputs.append(helper.make_tensor_value_info(arg, dtype, list(value.shape)))
            args.append(arg)
        result = np.asarray(evaluate(op.semantics, env))  # type: ignore[arg-type]
        expected[f"{name}_out"] = result.astype(bool if result.dtype == bool else np.float32)
        out_dtype = TensorProto.BOOL if result.dtype == bool else TensorProto.FLOAT
        nodes.append(helper.make_node(name, args, [f"{name}_out"]))
        outputs.append(helper.make_tensor_value_info(f"{name}_out", out_dtype, list(result.shape)))
    graph = helper.make_graph(nodes, "semantics", inputs, outputs)
    # opset 18: no elementwise op changed from 17, and Mish (18) is declared too
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=8)
    actual = run_ort(model, feeds)
    assert len(ELEMENTWISE) >= 40
    assert_close({k: v.astype(np.float32) for k, v in expected.items()},
                 {k: v.astype(np.float32) for k, v in actual.items()}, rtol=1e-5, atol=1e-6)
