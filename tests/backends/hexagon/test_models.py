"""Whole quantised models under qemu: integer operators against an exact NumPy model of
their integer arithmetic (`integer_model`), QDQ graphs against onnxruntime running them in float.

Models are quantised with ``onnxruntime.quantization.quantize_static`` (QDQ or QOperator,
uint8 activations, symmetric int8 weights) on random calibration data, or built with
onnx.helper (QLinearMatMul, MatMulInteger/ConvInteger, Requantize). They compile as
`dnnr compile --target hexagon` does: the e-graph runs rules/quant.dnnr, the backend
lowers. onnxruntime runs the QDQ graph in float (dequantise → float op → quantise,
round half to even); we run integer kernels (round half up, 31-bit multipliers) and, for
operators without one, the scalar float fallback with onnxruntime's formulas. So outputs
agree to within one unit in the last place where the arithmetic differs; the tests
assert that and that most values are equal (measured: the encoder and the small blocks
bit-exact, SqueezeNet 98.6 % equal).

onnxruntime is an oracle here only where its kernels are exact on every CPU: QDQ graphs run
with graph optimisations off (dequantise → float operator → quantise: no integer kernel), and
explicit integer operators (QLinearMatMul, QLinearConv, MatMulInteger, ConvInteger) only with
reduced-range (7-bit) weights. With full-range int8 weights its u8×s8 kernels saturate 16-bit
pair sums on CPUs without AVX-512 VNNI, so those models are checked against the NumPy model only.
"""

from __future__ import annotations

import json
import os
import re

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

from egraph_compiler import pipeline
from egraph_compiler.backends import hexagon
from egraph_compiler.backends.hexagon import toolchain
from egraph_compiler.cli import main
from egraph_compiler.ir import load_onnx
from egraph_compiler.ir.errors import DnnrError
from egraph_compiler.ir.graph import Graph
from tests.modelzoo import (
    assert_close,
    depthwise_separable_block,
    light_model,
    randomize_weights,
    residual_block,
    run_ort,
    transformer_encoder_block,
)

from .conftest import needs_toolchain
from .integer_model import assert_kernel_arithmetic, assert_qdq_kernel_arithmetic


def _real_input(model: onnx.ModelProto) -> onnx.ValueInfoProto:
    initialisers = {i.name for i in model.graph.initializer}
    return next(v for v in model.graph.input if v.name not in initialisers)


def _static(model: onnx.ModelProto, shape: dict[str, int]) -> onnx.ModelProto:
    for value in [*model.graph.input, *model.graph.output]:
        for dim in value.type.tensor_type.shape.dim:
            if dim.dim_param:
                dim.dim_value = shape[dim.dim_param]
    return model


def _quantise(model: onnx.ModelProto, tmp, seed: int, quant_format: QuantFormat = QuantFormat.QDQ,
              per_channel: bool = False, reduce_range: bool = False,
              feeds: dict[str, np.ndarray] | None = None) -> str:
    """Fold BatchNormalization (onnxruntime basic optimisations), then quantize_static
    (``per_channel``: weights quantised per output channel; ``reduce_range``: 7-bit weights).
    Calibration feeds every graph input: ``feeds`` (e.g. a corpus model's input_ids and
    attention_mask) gives their shapes and its integer inputs as they are (token ids must
    stay in the vocabulary); float inputs get a fresh standard-normal sample per batch.
    Without ``feeds`` the model must have one real input."""
    raw = tmp / "float.onnx"
    onnx.save(model, raw)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    options.optimized_model_filepath = str(tmp / "folded.onnx")
    ort.InferenceSession(str(raw), options, providers=["CPUExecutionProvider"])
    folded = onnx.load(tmp / "folded.onnx")
    if feeds is None:
        info = _real_input(folded)
        feeds = {info.name: np.zeros([d.dim_value for d in info.type.tensor_type.shape.dim], np.float32)}
    rng = np.random.default_rng(seed)

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.left = 4

        def get_next(self):
            self.left -= 1
            if self.left < 0:
                return None
            return {name: rng.standard_normal(value.shape).astype(np.float32) if value.dtype.kind == "f" else value
                    for name, value in feeds.items()}

    out = tmp / ("qdq_reduced.onnx" if reduce_range else "qdq.onnx")
    quantize_static(str(tmp / "folded.onnx"), str(out), Reader(), quant_format=quant_format,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8, per_channel=per_channel,
                    reduce_range=reduce_range, nodes_to_exclude=_unbounded_nodes(folded))
    return str(out)


def _unbounded_nodes(model: onnx.ModelProto) -> list[str]:
    """Nodes whose values reach ±inf: from a constant holding ±inf (a causal mask's −inf)
    through its readers up to the Softmax that turns them into probabilities. Calibrated,
    they get scale inf and their quantised values say nothing (GPT-2, LLaMA, BART); a user
    quantising these models leaves them in float, so do we."""
    infinite = {i.name for i in model.graph.initializer if _has_infinity(onnx.numpy_helper.to_array(i))}
    infinite |= {n.output[0] for n in model.graph.node if n.op_type == "Constant" and n.attribute
                 and n.attribute[0].type == onnx.AttributeProto.TENSOR
                 and _has_infinity(onnx.numpy_helper.to_array(n.attribute[0].t))}
    excluded: list[str] = []
    for node in model.graph.node:  # topological order: a reader comes after its writer
        if node.op_type not in ("Constant", "Shape") and any(i in infinite for i in node.input):
            excluded.append(node.name)
            if node.op_type != "Softmax":
                infinite.update(node.output)
    return excluded


def _has_infinity(values: np.ndarray) -> bool:
    return values.dtype.kind == "f" and bool(np.isinf(values).any())


def _through_quant_rules(path: str) -> Graph:
    """The graph `dnnr compile --target hexagon` hands the backend."""
    return pipeline.compile_model(path, target="hexagon").graph


def _compare(path: str, tmp, seed: int, expose: tuple[tuple[str, list[int]], ...] = (),
             via_cli: bool = False, exact: bool = False) -> tuple[int, float]:
    """Worst difference in output LSBs and the fraction of equal values, against
    onnxruntime. The model compiles as `dnnr compile --target hexagon` does (the e-graph
    runs rules/quant.dnnr, then the backend builds); ``via_cli`` goes through the CLI's
    `dnnr compile` and `dnnr run` themselves. ``exact``: the outputs must also equal the
    exact integer model (`integer_model.run_qdq_graph`) bit for bit."""
    model = onnx.load(path)
    for value, shape in expose:  # also compare some intermediate quantised tensors
        model.graph.output.append(onnx.helper.make_tensor_value_info(value, onnx.TensorProto.FLOAT, shape))
    onnx.save(model, tmp / "compare.onnx")
    info = _real_input(model)
    x = {info.name: np.random.default_rng(seed).standard_normal(
        [d.dim_value for d in info.type.tensor_type.shape.dim]).astype(np.float32)}
    if via_cli:
        np.save(tmp / "x.npy", x[info.name])
        assert main(["compile", str(tmp / "compare.onnx"), "--target", "hexagon", "-o", str(tmp / "artefact"), "-q"]) == 0
        assert main(["run", str(tmp / "artefact"), "--input", f"{info.name}={tmp / 'x.npy'}",
                     "--output-dir", str(tmp / "outputs")]) == 0
        ours = {o.name: np.load(tmp / "outputs" / f"{o.name}.npy") for o in model.graph.output}
    else:
        artefact = hexagon.build(_through_quant_rules(str(tmp / "compare.onnx")), tmp / "artefact")
        assert artefact.elf is not None and "rejected" in artefact.report
        ours = hexagon.load(tmp / "artefact").run(x)
    expected = run_ort(model, x)
    if exact:
        assert_qdq_kernel_arithmetic(ours, model, x, expected)
    worst, equal, total = 0, 0, 0
    scales = {n.output[0]: n.input[1] for n in model.graph.node if n.op_type == "DequantizeLinear"}
    inits = {i.name: onnx.numpy_helper.to_array(i) for i in model.graph.initializer}
    for name, got in ours.items():
        scale = float(inits[scales[name]])
        lsb = np.rint(np.abs(got.astype(np.float64) - expected[name]) / scale)
        worst = max(worst, int(lsb.max()))
        equal += int((lsb == 0).sum())
        total += lsb.size
    return worst, equal / total


@needs_toolchain
@pytest.mark.parametrize("block", [residual_block, depthwise_separable_block])
def test_quantised_blocks_match_onnxruntime(tmp_path, block):
    model = _static(block(channels=8, seed=1), {"batch": 1, "height": 9, "width": 7})
    path = _quantise(model, tmp_path, seed=2)
    worst, equal = _compare(path, tmp_path, seed=3, exact=True)
    assert worst <= 1, f"{worst} LSB"
    assert equal > 0.9


@needs_toolchain
def test_quantised_squeezenet_matches_onnxruntime(tmp_path):
    model = randomize_weights(light_model("squeezenet"), 0)
    path = _quantise(model, tmp_path, seed=1)
    # quantize_static keeps the old model's IR 3 but adds initializers outside the graph
    # inputs (the IR-4 rule): the importer reads it unpatched.
    assert onnx.load(path).ir_version == 3
    # The softmax output is mostly zeros: compare the pooled logits feeding it too.
    worst, equal = _compare(path, tmp_path, seed=5, expose=(("r65_DequantizeLinear_Output", [1, 1000, 1, 1]),))
    assert worst <= 1, f"{worst} LSB"
    assert equal > 0.9
    assert (tmp_path / "artefact" / "report.txt").read_text().count("QConvInt") == 26  # qdq-conv fired on all


def test_build_without_toolchain_writes_c_and_run_says_what_to_install(tmp_path, monkeypatch):
    model = _static(residual_block(channels=4, seed=1), {"batch": 1, "height": 5, "width": 5})
    path = _quantise(model, tmp_path, seed=2)
    monkeypatch.setattr(toolchain, "have_toolchain", lambda: False)
    artefact = hexagon.build(_through_quant_rules(path), tmp_path / "artefact")
    assert artefact.elf is None and os.path.getsize(artefact.c_file) > 0
    assert "Q6_Vw_vrmpyacc" in artefact.c_file.read_text() or "Q6_W" in artefact.c_file.read_text()
    with pytest.raises(DnnrError, match="apt-get install clang lld qemu-user"):
        hexagon.load(tmp_path / "artefact")


def _activation_tensors(path: str) -> tuple[tuple[str, list[int]], ...]:
    """Every dequantised activation of a QDQ model (the DQ outputs of non-constant tensors)."""
    model = onnx.shape_inference.infer_shapes(onnx.load(path))
    constants = {i.name for i in model.graph.initializer}
    outputs = {o.name for o in model.graph.output}
    shapes = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim] for v in model.graph.value_info}
    return tuple((n.output[0], shapes[n.output[0]]) for n in model.graph.node
                 if n.op_type == "DequantizeLinear" and n.input[0] not in constants and n.output[0] not in outputs)


@needs_toolchain
def test_quantised_transformer_encoder_matches_onnxruntime(tmp_path):
    """MatMul/Gemm, Add, Mul and the MatMuls of two activations (Q·Kᵀ, P·V) run as integer
    kernels; LayerNormalization, Erf and Div run in the scalar float fallback. Every
    quantised tensor of the block (not just the output) is compared with onnxruntime."""
    model = _static(transformer_encoder_block(d_model=64, heads=4, d_ff=128, seed=1), {"batch": 1, "seq": 16})
    path = _quantise(model, tmp_path, seed=2)
    ops = {n.op_type for n in onnx.load(path).graph.node}
    assert {"LayerNormalization", "Erf", "Softmax", "MatMul", "Gemm", "Transpose"} <= ops
    exposed = _activation_tensors(path)
    assert len(exposed) > 30
    worst, equal = _compare(path, tmp_path, seed=3, expose=exposed, via_cli=True)
    assert worst <= 1, f"{worst} LSB"
    assert equal > 0.99, f"{equal:.4f} of the values equal"
    report = (tmp_path / "artefact" / "report.txt").read_text()
    for op in ("LayerNormalization", "Erf", "Div"):
        assert re.search(rf" {op} +-> scalar C float fallback", report), op
    assert not re.search(r" MatMul +-> scalar C float fallback", report)
    assert len(re.findall(r" matmul_act -> (vrmpy|vmpa|vmpy|scalar) ", report)) == 2  # the attention MatMuls
    # The e-graph turned the quantised Add/Mul into integer operators (rules/quant.dnnr) ...
    compile_report = json.loads((tmp_path / "artefact" / "report.json").read_text())
    assert compile_report["rules_fired"]["qdq-add"] == 3 and compile_report["rules_fired"]["qdq-mul"] == 2
    assert "QAddInt" in report and "QMulInt" in report
    # ... and the optimised model.onnx spells them in ONNX, with the QDQ model's results.
    exported = onnx.load(tmp_path / "artefact" / "model.onnx")
    onnx.checker.check_model(exported, full_check=True)
    x = {"x": np.random.default_rng(4).standard_normal((1, 16, 64)).astype(np.float32)}
    assert_close(run_ort(exported, x), run_ort(onnx.load(tmp_path / "compare.onnx"), x), rtol=0, atol=0)


def _run_quantized(path: str, tmp, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Our outputs as the integer tensors the model's last QuantizeLinear / QLinear* produced."""
    artefact = hexagon.build(_through_quant_rules(path), tmp / "artefact")
    assert artefact.elf is not None
    return hexagon.load(tmp / "artefact").run_quantized(inputs)


@needs_toolchain
def test_qoperator_model_from_quantize_static_is_exact(tmp_path):
    """quantize_static's QOperator format: QLinearConv (depthwise with Relu folded, then 1×1),
    full-range int8 weights: bit-exact against the NumPy integer model."""
    model = _static(depthwise_separable_block(channels=8, seed=1), {"batch": 1, "height": 9, "width": 7})
    path = _quantise(model, tmp_path, seed=2, quant_format=QuantFormat.QOperator)
    assert [n.op_type for n in onnx.load(path).graph.node].count("QLinearConv") == 2
    x = {"x": np.random.default_rng(3).standard_normal((1, 8, 9, 7)).astype(np.float32)}
    assert_kernel_arithmetic(_run_quantized(path, tmp_path, x), onnx.load(path), x)


@needs_toolchain
def test_qoperator_model_with_reduced_range_weights_matches_onnxruntime(tmp_path):
    """Second oracle: with 7-bit weights onnxruntime's u8×s8 QLinearConv cannot saturate on
    any CPU, so it is exact up to its rounding (half to even in float: ≤ 1 LSB)."""
    model = _static(depthwise_separable_block(channels=8, seed=1), {"batch": 1, "height": 9, "width": 7})
    path = _quantise(model, tmp_path, seed=2, quant_format=QuantFormat.QOperator, reduce_range=True)
    worst, equal = _compare(path, tmp_path, seed=3)
    assert worst <= 1, f"{worst} LSB"
    assert equal > 0.9


def _qlinear_matmul_model(rng: np.random.Generator, weight_bound: int = 128) -> onnx.ModelProto:
    """uint8 [16, 40] × int8 [40, 24] (per-column scales) → uint8, built with onnx.helper;
    weights drawn from [-weight_bound + 1, weight_bound)."""
    h, numpy_helper = onnx.helper, onnx.numpy_helper
    consts = {
        "a_scale": np.float32(0.04), "a_zero": np.uint8(120),
        "b": rng.integers(1 - weight_bound, weight_bound, (40, 24)).astype(np.int8),
        "b_scale": rng.uniform(0.002, 0.01, 24).astype(np.float32), "b_zero": np.zeros(24, np.int8),
        "y_scale": np.float32(0.3 * weight_bound / 128), "y_zero": np.uint8(131),
    }
    node = h.make_node("QLinearMatMul", ["a", "a_scale", "a_zero", "b", "b_scale", "b_zero", "y_scale", "y_zero"], ["y"])
    graph = h.make_graph([node], "qlinear_matmul", [h.make_tensor_value_info("a", onnx.TensorProto.UINT8, [16, 40])],
                         [h.make_tensor_value_info("y", onnx.TensorProto.UINT8, [16, 24])],
                         [numpy_helper.from_array(np.asarray(v), k) for k, v in consts.items()])
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)], ir_version=8)


@needs_toolchain
def test_qlinear_matmul_with_integer_io_is_exact(tmp_path):
    """Full-range int8 weights: bit-exact against the NumPy integer model (onnxruntime is
    no oracle here: its u8×s8 kernel saturates on CPUs without AVX-512 VNNI)."""
    rng = np.random.default_rng(7)
    model = _qlinear_matmul_model(rng)
    artefact = hexagon.build(load_onnx(model), tmp_path / "artefact")
    assert artefact.elf is not None
    a = {"a": rng.integers(0, 256, (16, 40)).astype(np.uint8)}
    ours = hexagon.load(tmp_path / "artefact").run(a)
    assert ours["y"].dtype == np.uint8
    assert_kernel_arithmetic(ours, model, a)


@needs_toolchain
def test_qlinear_matmul_with_reduced_range_weights_matches_onnxruntime(tmp_path):
    """Second oracle: with 7-bit weights (|w| ≤ 63) no u8×s8 pair sum can saturate, so
    onnxruntime is exact on every CPU up to its rounding (≤ 1 LSB)."""
    rng = np.random.default_rng(7)
    model = _qlinear_matmul_model(rng, weight_bound=64)
    hexagon.build(load_onnx(model), tmp_path / "artefact")
    a = {"a": rng.integers(0, 256, (16, 40)).astype(np.uint8)}
    ours = hexagon.load(tmp_path / "artefact").run(a)["y"]
    assert_kernel_arithmetic({"y": ours}, model, a)
    difference = np.abs(ours.astype(np.int16) - run_ort(model, a)["y"])
    assert difference.max() <= 1 and (difference == 0).mean() > 0.9


def _single_op_model(op: str) -> onnx.ModelProto:
    """A bias-less Conv or a MatMul by a constant matrix, in float, for quantize_static."""
    h, rng = onnx.helper, np.random.default_rng(11)
    if op == "Conv":
        w = onnx.numpy_helper.from_array(rng.standard_normal((8, 4, 3, 3)).astype(np.float32) / 6, "w")
        node = h.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1])
        x_shape, y_shape = [1, 4, 6, 5], [1, 8, 6, 5]
    else:
        w = onnx.numpy_helper.from_array(rng.standard_normal((12, 7)).astype(np.float32) / 3, "w")
        node = h.make_node("MatMul", ["x", "w"], ["y"])
        x_shape, y_shape = [1, 5, 12], [1, 5, 7]
    graph = h.make_graph([node], op, [h.make_tensor_value_info("x", onnx.TensorProto.FLOAT, x_shape)],
                         [h.make_tensor_value_info("y", onnx.TensorProto.FLOAT, y_shape)], [w])
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)], ir_version=8)


@needs_toolchain
@pytest.mark.parametrize(("op", "rule", "integer_op"), [("Conv", "qdq-conv-nobias", "QLinearConv"),
                                                        ("MatMul", "qdq-matmul", "QMatMulInt")])
def test_quant_rule_lowers_and_matches_onnxruntime(tmp_path, op, rule, integer_op):
    check_single_op_rule(_quantise(_single_op_model(op), tmp_path, seed=2), tmp_path, rule, integer_op)


def check_single_op_rule(path: str, tmp_path, rule: str, integer_op: str) -> None:
    """The QDQ single-operator model at ``path`` is rewritten by ``rule`` alone into
    ``integer_op`` and runs in qemu within 1 LSB of onnxruntime."""
    result = pipeline.compile_model(path, target="hexagon")
    assert result.report.rules_fired == {rule: 1}
    assert [n.op for n in result.graph.nodes if n.op not in ("QuantizeLinear", "DequantizeLinear")] == [integer_op]
    worst, equal = _compare(path, tmp_path, seed=3)
    assert worst <= 1, f"{worst} LSB"
    assert equal > 0.9


@needs_toolchain
def test_requantize_rule_lowers_and_matches_onnxruntime(tmp_path):
    """Q(DQ(x)) into another scale and zero point (qdq-requantize → Requantize)."""
    h = onnx.helper
    consts = {"s1": np.float32(0.05), "z1": np.uint8(100), "s2": np.float32(0.13), "z2": np.uint8(30)}
    nodes = [h.make_node("QuantizeLinear", ["x", "s1", "z1"], ["q1"]),
             h.make_node("DequantizeLinear", ["q1", "s1", "z1"], ["d1"]),
             h.make_node("QuantizeLinear", ["d1", "s2", "z2"], ["q2"]),
             h.make_node("DequantizeLinear", ["q2", "s2", "z2"], ["y"])]
    graph = h.make_graph(nodes, "requantize", [h.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [3, 50])],
                         [h.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [3, 50])],
                         [onnx.numpy_helper.from_array(np.asarray(v), k) for k, v in consts.items()])
    onnx.save(h.make_model(graph, opset_imports=[h.make_opsetid("", 17)], ir_version=8), tmp_path / "model.onnx")
    assert pipeline.compile_model(str(tmp_path / "model.onnx"), target="hexagon").report.rules_fired == \
        {"qdq-requantize": 1}
    worst, equal = _compare(str(tmp_path / "model.onnx"), tmp_path, seed=3)
    assert worst <= 1, f"{worst} LSB"
    assert equal > 0.9


def test_float_model_gets_a_clear_error(tmp_path):
    model = _static(residual_block(channels=4, seed=1), {"batch": 1, "height": 5, "width": 5})
    onnx.save(model, tmp_path / "float.onnx")
    with pytest.raises(DnnrError, match="not quantised"):
        hexagon.build(_through_quant_rules(str(tmp_path / "float.onnx")), tmp_path / "artefact")


def _integer_accumulation_model(op: str, weight_bound: int = 128) -> onnx.ModelProto:
    """x → QuantizeLinear → MatMulInteger/ConvInteger → Cast → Mul(s_x·s_w) → QuantizeLinear →
    DequantizeLinear: an int32 accumulation with the scales applied by hand (onnx.helper);
    weights drawn from [-weight_bound + 1, weight_bound)."""
    h, rng = onnx.helper, np.random.default_rng(5)
    if op == "MatMulInteger":
        w = rng.integers(1 - weight_bound, weight_bound, (20, 12)).astype(np.int8)
        x_shape, y_shape, w_scale, attrs = [8, 20], [8, 12], rng.uniform(0.004, 0.01, 12), {}
        scale = (0.02 * w_scale).astype(np.float32)
    else:
        w = rng.integers(1 - weight_bound, weight_bound, (5, 3, 3, 3)).astype(np.int8)
        x_shape, y_shape, w_scale, attrs = [1, 3, 7, 6], [1, 5, 7, 6], rng.uniform(0.004, 0.01, 5), {"pads": [1, 1, 1, 1]}
        scale = (0.02 * w_scale).astype(np.float32).reshape(1, 5, 1, 1)
    consts = {"sx": np.float32(0.02), "zx": np.uint8(128), "w": w, "scale": scale,
              "sy": np.float32(0.1 * weight_bound / 128), "zy": np.uint8(120)}
    nodes = [h.make_node("QuantizeLinear", ["x", "sx", "zx"], ["xq"]),
             h.make_node(op, ["xq", "w", "zx"], ["acc"], **attrs),
             h.make_node("Cast", ["acc"], ["acc_f"], to=onnx.TensorProto.FLOAT),
             h.make_node("Mul", ["acc_f", "scale"], ["y_f"]),
             h.make_node("QuantizeLinear", ["y_f", "sy", "zy"], ["yq"]),
             h.make_node("DequantizeLinear", ["yq", "sy", "zy"], ["y"])]
    graph = h.make_graph(nodes, op, [h.make_tensor_value_info("x", onnx.TensorProto.FLOAT, x_shape)],
                         [h.make_tensor_value_info("y", onnx.TensorProto.FLOAT, y_shape)],
                         [onnx.numpy_helper.from_array(np.asarray(v), k) for k, v in consts.items()])
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)], ir_version=8)


@needs_toolchain
@pytest.mark.parametrize("op", ["MatMulInteger", "ConvInteger"])
def test_integer_accumulation_lowers_and_is_exact(tmp_path, op):
    """Full-range int8 weights: bit-exact against the NumPy integer model."""
    model = _integer_accumulation_model(op)
    onnx.save(model, tmp_path / "model.onnx")
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    x = {"x": np.random.default_rng(3).standard_normal(shape).astype(np.float32) * 2}
    assert_kernel_arithmetic(_run_quantized(str(tmp_path / "model.onnx"), tmp_path, x), model, x)
    assert "gemm" in (tmp_path / "artefact" / "report.txt").read_text()


@needs_toolchain
@pytest.mark.parametrize("op", ["MatMulInteger", "ConvInteger"])
def test_integer_accumulation_with_reduced_range_weights_matches_onnxruntime(tmp_path, op):
    """Second oracle: 7-bit weights keep onnxruntime's u8×s8 kernels exact on every CPU."""
    onnx.save(_integer_accumulation_model(op, weight_bound=64), tmp_path / "model.onnx")
    worst, equal = _compare(str(tmp_path / "model.onnx"), tmp_path, seed=3)
    assert worst <= 1, f"{worst} LSB"
    assert equal > 0.9
