"""Per-channel (per-axis) weight quantisation, as ``quantize_static(per_channel=True)``
writes it: the weights' DequantizeLinear has an ``axis`` (0 for Conv, 1 for MatMul and
Gemm, 0 for the int32 bias) and a 1-D scale and zero point. rules/quant.dnnr's
per-channel rules turn those patterns into QConvInt / QLinearConv / QMatMulInt /
QGemmInt (proved by `dnnr verify`, tests/verify/test_library.py); the verifier models
the axis (a wrong one is refuted with a confirmed counterexample), and the backend
requantises with one multiplier per output channel. Models compare with onnxruntime
as in test_models.py (its helpers).

quantize_static upgrades an older model only to opset 11 but writes ``axis`` on
DequantizeLinear, which ONNX defines from opset 13 (onnxruntime itself refuses to load
that model): older models are converted to opset 13 before quantising."""

from __future__ import annotations

import json
import re
from dataclasses import replace

import onnx
import onnx.version_converter
import pytest

from egraph_compiler import dsl, verify
from tests.modelzoo import light_model, randomize_weights, transformer_encoder_block

from .conftest import needs_toolchain
from .test_models import (
    _activation_tensors,
    _compare,
    _quantise,
    _single_op_model,
    _static,
    check_single_op_rule,
)
from .test_quant_rules import QUANT

# A rule that reads the weights' scales along the wrong axis (x_scale·w_scale must follow
# Conv's output channels, axis 0; MatMul's columns, axis 1). Without is_const guards:
# the NumPy replay cannot see constness, and the flaw is the axis.
WRONG_AXIS = """
rule m-conv-per-channel-axis: QuantizeLinear(Conv(DequantizeLinear(?x, ?xs, ?xz), DequantizeLinear(?w, ?ws, ?wz, axis=1), DequantizeLinear(?b, ?bs, ?bz, axis=0), auto_pad="NOTSET", dilations=?d, group=?g, kernel_shape=?k, pads=?p, strides=?s), ?ys, ?yz) => QConvInt(?x, ?xs, ?xz, ?w, ?ws, ?wz, ?b, ?bs, ?bz, ?ys, ?yz, dilations=?d, group=?g, kernel_shape=?k, pads=?p, strides=?s) when rank(?xs) == 0 and rank(?xz) == 0 and rank(?ws) == 1 and rank(?wz) == 1 and rank(?bs) == 1 and rank(?bz) == 1 and rank(?ys) == 0 and rank(?yz) == 0
rule m-matmul-per-channel-axis: QuantizeLinear(MatMul(DequantizeLinear(?a, ?as, ?az), DequantizeLinear(?b, ?bs, ?bz, axis=0)), ?ys, ?yz) => QMatMulInt(?a, ?as, ?az, ?b, ?bs, ?bz, ?ys, ?yz) when rank(?b) == 2 and rank(?as) == 0 and rank(?az) == 0 and rank(?bs) == 1 and rank(?bz) == 1 and rank(?ys) == 0 and rank(?yz) == 0
"""


def test_a_wrong_axis_is_refuted_with_a_confirmed_counterexample(tmp_path):
    path = tmp_path / "wrong_axis.dnnr"
    path.write_text(f'use "{QUANT}"\nruleset wrong_axis\n{WRONG_AXIS}')
    ruleset = dsl.load_rules([str(path)])
    ruleset = replace(ruleset, rules=[r for r in ruleset.rules if r.ruleset == "wrong_axis"])
    verdicts = verify.verify_rules(ruleset, cache_dir=tmp_path / "cache", timeout_s=60, suggest_guards=False)
    stages = {}
    for v in verdicts:
        assert v.status == "failed", verify.render_text([v])
        assert v.counterexample is not None and v.counterexample.replay == "CONFIRMED", verify.render_text([v])
        stages[v.rule] = v.stage
    # One scale per index along the wrong axis: the right side is ill-formed where the
    # left one is not (the solver's witness, replayed in NumPy).
    assert stages == {"m-conv-per-channel-axis": "shape", "m-matmul-per-channel-axis": "shape"}


def _per_channel(model: onnx.ModelProto, tmp_path, seed: int) -> str:
    if next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx")) < 13:
        model = onnx.version_converter.convert_version(model, 13)
    path = _quantise(model, tmp_path, seed=seed, per_channel=True)
    axes = {a.i for n in onnx.load(path).graph.node if n.op_type == "DequantizeLinear" for a in n.attribute
            if a.name == "axis"}
    assert axes, "quantize_static wrote no per-axis DequantizeLinear"
    return path


@needs_toolchain
@pytest.mark.parametrize(("op", "rule", "integer_op"), [("Conv", "qdq-conv-nobias-per-channel", "QLinearConv"),
                                                        ("MatMul", "qdq-matmul-per-channel", "QMatMulInt")])
def test_per_channel_rule_lowers_and_matches_onnxruntime(tmp_path, op, rule, integer_op):
    check_single_op_rule(_per_channel(_single_op_model(op), tmp_path, seed=2), tmp_path, rule, integer_op)


@needs_toolchain
def test_per_channel_squeezenet_matches_onnxruntime(tmp_path):
    model = randomize_weights(light_model("squeezenet"), 0)
    path = _per_channel(model, tmp_path, seed=1)
    # The softmax output is mostly zeros: compare the pooled logits feeding it too.
    worst, equal = _compare(path, tmp_path, seed=5, expose=(("r65_DequantizeLinear_Output", [1, 1000, 1, 1]),))
    assert worst <= 1, f"{worst} LSB"
    assert equal > 0.97, f"{equal:.4f} of the values equal"  # measured 97.75 %
    # every convolution (a per-channel one becomes QConvInt only by qdq-conv-per-channel)
    assert (tmp_path / "artefact" / "report.txt").read_text().count("QConvInt") == 26


@needs_toolchain
def test_per_channel_encoder_matches_onnxruntime(tmp_path):
    """Gemm weights per column; the attention MatMuls of two activations in integer too."""
    model = _static(transformer_encoder_block(d_model=64, heads=4, d_ff=128, seed=1), {"batch": 1, "seq": 16})
    path = _per_channel(model, tmp_path, seed=2)
    gemms = sum(n.op_type == "Gemm" for n in onnx.load(path).graph.node)
    worst, equal = _compare(path, tmp_path, seed=3, expose=_activation_tensors(path), via_cli=True)
    assert worst <= 1, f"{worst} LSB"
    assert equal > 0.99, f"{equal:.4f} of the values equal"  # measured 100 %
    fired = json.loads((tmp_path / "artefact" / "report.json").read_text())["rules_fired"]
    assert fired["qdq-gemm-per-channel"] == gemms == 6
    report = (tmp_path / "artefact" / "report.txt").read_text()
    assert len(re.findall(r"QGemmInt\S* +gemm +-> (vrmpy|vmpa|vmpy|scalar) ", report)) == gemms
    assert len(re.findall(r" matmul_act -> (vrmpy|vmpa|vmpy|scalar) ", report)) == 2
    assert not re.search(r" (Gemm|MatMul) +-> scalar C float fallback", report)
