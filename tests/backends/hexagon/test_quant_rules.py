"""rules/quant.dnnr: it loads, it declares the integer operators the backend lowers, and
the QDQ patterns of quantised models (squeezenet, the encoder, Gemm, pooling, Concat,
Softmax, Relu) reach the backend as rule-written operators that match onnxruntime."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import pytest

from egraph_compiler import pipeline
from egraph_compiler.backends.hexagon.lower import _INTEGER_SIGNATURES, lower_qdq
from egraph_compiler.dsl import check, load_rules
from egraph_compiler.ir.onnx_export import _QUANT_INTERNAL
from egraph_compiler.shapes.rules import RULES as SHAPE_RULES
from tests.modelzoo import light_model, randomize_weights, transformer_encoder_block

from .conftest import needs_toolchain
from .test_models import _compare, _quantise, _static

QUANT = Path(__file__).resolve().parents[3] / "rules" / "quant.dnnr"
HEXAGON = QUANT.parent / "targets" / "hexagon.dnnr"


def test_quant_rules_load_without_diagnostics():
    assert check([QUANT]) == []
    ruleset = load_rules([QUANT])
    assert ruleset is not None


def test_every_qdq_rule_names_an_integer_operator_the_backend_lowers():
    text = QUANT.read_text()
    for op in ("QConvInt", "QMatMulInt", "QAddInt", "QMulInt", "Requantize"):
        assert f"op {op}(" in text and f"=> {op}(" in text


def test_hexagon_target_runs_only_the_quant_rules():
    assert check([HEXAGON]) == []
    assert pipeline.target_rules("hexagon").resolve() == HEXAGON.resolve()
    rules = pipeline.load_rules(target="hexagon")
    assert [step.rulesets for step in rules.schedule] == [("quant",)]
    assert {r.ruleset for r in rules.rules} == {"quant"}
    assert pipeline.target_rules("opencl") is None  # other targets keep the shipped library


def _declared_integer_operators() -> list[str]:
    return re.findall(r"^op (\w+)\(", QUANT.read_text(), flags=re.MULTILINE)


def test_every_integer_operator_is_known_to_shapes_export_and_the_backend():
    declared = _declared_integer_operators()
    assert {"QGemmInt", "QAveragePoolInt", "QGlobalAveragePoolInt", "QConcatInt", "QSoftmaxInt", "QClipInt"} <= set(declared)
    for op in declared:
        assert op in _INTEGER_SIGNATURES, op
        assert op in SHAPE_RULES, op
        assert op in _QUANT_INTERNAL, op


def _rule_lowered(model: onnx.ModelProto, tmp_path) -> tuple[Counter, dict[str, int], Counter]:
    """The QDQ model's operator counts, the rules the hexagon schedule fired on it, and
    the float operators the backend still runs in the scalar fallback."""
    path = _quantise(model, tmp_path, seed=1)
    ops = Counter(n.op_type for n in onnx.load(path).graph.node)
    result = pipeline.compile_model(path, target="hexagon")
    lowered = lower_qdq(result.graph)
    return ops, result.report.rules_fired, Counter(op.spec.op for op in lowered.ops if op.kind == "float")


def test_squeezenet_pools_concats_and_softmax_are_rule_lowered(tmp_path):
    ops, fired, floats = _rule_lowered(randomize_weights(light_model("squeezenet"), 0), tmp_path)
    assert ops["Concat"] > 0 and ops["GlobalAveragePool"] > 0 and ops["Softmax"] > 0
    assert fired["qdq-concat"] == ops["Concat"]  # the fire modules' inputs have other scales than their output
    assert fired["qdq-gap"] == ops["GlobalAveragePool"]
    assert fired["qdq-softmax"] == ops["Softmax"]  # reached through DQ → Flatten (dq-sink-flatten)
    assert fired["qdq-maxpool"] == ops["MaxPool"]
    assert floats == Counter()  # every operator runs as an integer kernel


def test_encoder_gemms_and_softmax_are_rule_lowered(tmp_path):
    model = _static(transformer_encoder_block(d_model=64, heads=4, d_ff=128, seed=1), {"batch": 1, "seq": 16})
    ops, fired, floats = _rule_lowered(model, tmp_path)
    assert ops["Gemm"] > 0 and ops["Softmax"] > 0
    assert fired["qdq-gemm-bias-scale-1d"] == ops["Gemm"]
    # Q(DQ(x, s, z), s, z) around the heads' Reshapes is x: no identity Requantize is left
    assert fired["qdq-identity"] > 0
    graph = pipeline.compile_model(_quantise(model, tmp_path, seed=1), target="hexagon").graph
    assert not [n for n in graph.nodes if n.op == "Requantize" and n.inputs[1:3] == n.inputs[3:5]]
    assert fired["qdq-softmax"] == ops["Softmax"]
    # Gemm and Softmax run as integer kernels; the operators without one stay float
    assert not {"Gemm", "Softmax"} & set(floats)
    assert {"LayerNormalization", "Erf", "Div"} <= set(floats)


def _gemm_model(trans_b: int, bias: bool) -> onnx.ModelProto:
    """Gemm (transB, with or without C) in float, for quantize_static."""
    h, rng = onnx.helper, np.random.default_rng(3)
    w = rng.standard_normal((10, 24) if trans_b else (24, 10)).astype(np.float32) / 4
    b = rng.standard_normal(10).astype(np.float32) / 4
    nodes = [h.make_node("Gemm", ["x", "w", "b"] if bias else ["x", "w"], ["y"], transB=trans_b)]
    graph = h.make_graph(nodes, "gemm", [h.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [5, 24])],
                         [h.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [5, 10])],
                         [onnx.numpy_helper.from_array(w, "w")] + [onnx.numpy_helper.from_array(b, "b")] * bias)
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)], ir_version=8)


@needs_toolchain
@pytest.mark.parametrize(("trans_b", "bias", "rule", "integer_op"), [
    (0, True, "qdq-gemm-bias-scale-1d", "QGemmInt"), (1, True, "qdq-gemm-bias-scale-1d", "QGemmInt"),
    (0, False, "qdq-gemm-nobias", "QMatMulInt"), (1, False, "qdq-gemm-nobias-transb", "QMatMulInt")])
def test_quantised_gemm_lowers_by_rule_and_matches_onnxruntime(tmp_path, trans_b, bias, rule, integer_op):
    path = _quantise(_gemm_model(trans_b, bias), tmp_path, seed=2)
    result = pipeline.compile_model(path, target="hexagon")
    assert result.report.rules_fired.get(rule) == 1
    assert [n.op for n in result.graph.nodes].count(integer_op) == 1
    worst, equal = _compare(path, tmp_path, seed=3)
    assert worst <= 1, f"{worst} LSB"
    assert equal > 0.9


def _qdq_model(op: onnx.NodeProto, shape: list[int], y_shape: list[int], params: tuple[tuple[float, int], ...],
               y_params: tuple[float, int]) -> onnx.ModelProto:
    """x → QuantizeLinear(params[0]) → DequantizeLinear → d0, each further operand d_k
    requantised from d_(k-1) with params[k], ``op`` over d_0 … d_k → QuantizeLinear(y_params) →
    DequantizeLinear → y, with onnx.helper (uint8 activations). ``op``'s own inputs (Clip's
    bounds) follow the operands, as float constants of the values ``_BOUNDS`` gives them."""
    h = onnx.helper
    consts, nodes = {}, []
    for k, (scale, zero) in enumerate(params):
        consts |= {f"s{k}": np.float32(scale), f"z{k}": np.uint8(zero)}
        nodes += [h.make_node("QuantizeLinear", ["x" if k == 0 else f"d{k - 1}", f"s{k}", f"z{k}"], [f"q{k}"]),
                  h.make_node("DequantizeLinear", [f"q{k}", f"s{k}", f"z{k}"], [f"d{k}"])]
    consts |= {"sy": np.float32(y_params[0]), "zy": np.uint8(y_params[1])}
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in op.attribute}
    consts |= {name: np.float32(_BOUNDS[name]) for name in op.input}
    nodes += [h.make_node(op.op_type, [f"d{k}" for k in range(len(params))] + list(op.input), ["f"], **attrs),
              h.make_node("QuantizeLinear", ["f", "sy", "zy"], ["qy"]),
              h.make_node("DequantizeLinear", ["qy", "sy", "zy"], ["y"])]
    graph = h.make_graph(nodes, op.op_type, [h.make_tensor_value_info("x", onnx.TensorProto.FLOAT, shape)],
                         [h.make_tensor_value_info("y", onnx.TensorProto.FLOAT, y_shape)],
                         [onnx.numpy_helper.from_array(np.asarray(v), k) for k, v in consts.items()])
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)], ir_version=8)


_IMAGE = [1, 128, 6, 6]
_BOUNDS = {"clip_min": -0.7, "clip_max": 1.3}
# operator, input shape, output shape, each operand's (scale, zero point), the output's,
# the rule that fires and the operator it writes
_HAND_BUILT = {
    "avgpool": (onnx.helper.make_node("AveragePool", [], [], kernel_shape=[2, 2], strides=[2, 2]), _IMAGE,
                [1, 128, 3, 3], ((0.03, 0),), (0.02, 110), "qdq-avgpool", "QAveragePoolInt"),
    "gap": (onnx.helper.make_node("GlobalAveragePool", [], []), _IMAGE, [1, 128, 1, 1], ((0.03, 120),),
            (0.01, 128), "qdq-gap", "QGlobalAveragePoolInt"),
    "softmax": (onnx.helper.make_node("Softmax", [], [], axis=-1), [6, 20], [6, 20], ((0.05, 128),),
                (1 / 255, 0), "qdq-softmax", "QSoftmaxInt"),
    "concat": (onnx.helper.make_node("Concat", [], [], axis=1), _IMAGE, [1, 256, 6, 6],
               ((0.0313, 120), (0.0471, 100)), (0.0429, 110), "qdq-concat", "QConcatInt"),
    "concat3": (onnx.helper.make_node("Concat", [], [], axis=1), _IMAGE, [1, 384, 6, 6],
                ((0.0313, 120), (0.0471, 100), (0.0398, 131)), (0.0429, 110), "qdq-concat3", "Concat"),
    "concat-same": (onnx.helper.make_node("Concat", [], [], axis=1), _IMAGE, [1, 256, 6, 6],
                    ((0.03, 120), (0.03, 120)), (0.03, 120), "qdq-concat-same", "Concat"),
    "relu": (onnx.helper.make_node("Relu", [], []), _IMAGE, _IMAGE, ((0.03, 120),), (0.03, 120), "qdq-relu", "Max"),
    "clip": (onnx.helper.make_node("Clip", ["clip_min", "clip_max"], []), _IMAGE, _IMAGE, ((0.03, 120),), (0.03, 120),
             "qdq-clip", "QClipInt"),
}


@needs_toolchain
@pytest.mark.parametrize("case", sorted(_HAND_BUILT))
def test_hand_built_qdq_pattern_lowers_by_rule_and_matches_onnxruntime(tmp_path, case):
    op, shape, y_shape, params, y_params, rule, integer_op = _HAND_BUILT[case]
    onnx.save(_qdq_model(op, shape, y_shape, params, y_params), tmp_path / "model.onnx")
    result = pipeline.compile_model(str(tmp_path / "model.onnx"), target="hexagon")
    assert result.report.rules_fired.get(rule, 0) >= 1, result.report.rules_fired
    assert integer_op in [n.op for n in result.graph.nodes]
    assert op.op_type not in [n.op for n in result.graph.nodes if n.op != integer_op]  # no QDQ form left
    worst, equal = _compare(str(tmp_path / "model.onnx"), tmp_path, seed=3)
    assert worst <= 1, f"{worst} LSB"
    assert equal > 0.9
