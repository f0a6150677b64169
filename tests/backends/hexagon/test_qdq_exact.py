"""wav2vec2's feature-extractor forms on Hexagon (issue 14), each rewritten before the
lowering (`backends.hexagon.before_lowering`) and run in qemu against the exact integer
model (bit for bit) and onnxruntime: the raw input Unsqueezed before its quantisation, a
strided 1-D conv, a grouped (not depthwise) 1-D conv with padding, the Slice trimming
its output, and GroupNorm's InstanceNormalization (a float operator: onnxruntime only)."""

from __future__ import annotations

import numpy as np
import onnx
from onnxruntime.quantization import QuantFormat

from egraph_compiler import pipeline
from egraph_compiler.backends import hexagon
from egraph_compiler.backends.hexagon.before_lowering import before_lowering
from egraph_compiler.backends.hexagon.lower import lower_qdq
from tests.modelzoo import run_ort

from .conftest import needs_toolchain
from .integer_model import (
    assert_kernel_arithmetic,
    assert_qdq_kernel_arithmetic,
    operator_by_operator,
)
from .test_models import _activation_tensors, _quantise, _run_quantized
from .test_pad_concat import _model

h = onnx.helper


def feature_extractor_model() -> onnx.ModelProto:
    """x[1, 48] → Unsqueeze(1) → Conv1d(1→8, k 4, s 2) → Conv1d(8→8, k 3, group 2, pads 2)
    → Slice(drop the last two) → InstanceNormalization(ones, zeros) → Mul(scale per channel)."""
    rng = np.random.default_rng(21)
    constants = {"axes": np.array([1], np.int64),
                 "w1": (rng.standard_normal((8, 1, 4)) / 2).astype(np.float32),
                 "b1": (rng.standard_normal(8) / 4).astype(np.float32),
                 "w2": (rng.standard_normal((8, 4, 3)) / 3).astype(np.float32),
                 "b2": (rng.standard_normal(8) / 4).astype(np.float32),
                 "starts": np.array([0], np.int64), "ends": np.array([-2], np.int64), "slice_axes": np.array([2], np.int64),
                 "ones": np.ones(8, np.float32), "zeros": np.zeros(8, np.float32),
                 "gamma": (1 + rng.standard_normal((8, 1)) / 4).astype(np.float32)}
    nodes = [h.make_node("Unsqueeze", ["x", "axes"], ["u"]),
             h.make_node("Conv", ["u", "w1", "b1"], ["c1"], kernel_shape=[4], strides=[2]),
             h.make_node("Conv", ["c1", "w2", "b2"], ["c2"], kernel_shape=[3], group=2, pads=[2, 2]),
             h.make_node("Slice", ["c2", "starts", "ends", "slice_axes"], ["trimmed"]),
             h.make_node("InstanceNormalization", ["trimmed", "ones", "zeros"], ["n"]),
             h.make_node("Mul", ["n", "gamma"], ["y"])]
    return _model(nodes, [h.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 48])], ("y", [1, 8, 23]), constants)


def test_feature_extractor_forms_are_rewritten_for_the_lowering(tmp_path):
    path = _quantise(feature_extractor_model(), tmp_path, seed=2)
    graph = pipeline.compile_model(path, target="hexagon").graph
    assert [n.op for n in graph.nodes].count("QConvInt") == 2
    ops = [n.op for n in before_lowering(graph).nodes]
    assert "Slice" not in ops and "InstanceNormalization" not in ops and "LayerNormalization" in ops
    assert ops.count("QConvInt") == 3  # the grouped conv as one per group
    kinds = [op.kind for op in lower_qdq(graph).ops]
    assert kinds.count("gemm") == 3 and "float" in kinds, kinds  # the normalisation runs in the float fallback


@needs_toolchain
def test_feature_extractor_runs_on_the_integers(tmp_path):
    path = _quantise(feature_extractor_model(), tmp_path, seed=2)
    model = onnx.load(path)
    exposed = _activation_tensors(path)  # every quantised activation, each operator checked on its own
    for name, shape in exposed:
        model.graph.output.append(h.make_tensor_value_info(name, onnx.TensorProto.FLOAT, shape))
    onnx.save(model, tmp_path / "exposed.onnx")
    artefact = hexagon.build(pipeline.compile_model(str(tmp_path / "exposed.onnx"), target="hexagon").graph,
                             tmp_path / "artefact")
    x = {"x": np.random.default_rng(3).standard_normal((1, 48)).astype(np.float32)}
    ours = hexagon.load(artefact.out_dir).run(x)
    expected = run_ort(model, x)
    integer_part = {name: ours[name] for name in ("c1_DequantizeLinear_Output", "trimmed_DequantizeLinear_Output")}
    assert_qdq_kernel_arithmetic(integer_part, model, x, expected)
    rows = operator_by_operator(model, ours, x)
    assert sorted(row[0] for row in rows) == ["Conv", "Conv", "Mul", "Slice"] and not [r for r in rows if r[2]], rows
    y_scale = float(next(onnx.numpy_helper.to_array(i) for i in model.graph.initializer if i.name == "y_scale"))
    lsb = np.rint(np.abs(ours["y"].astype(np.float64) - expected["y"]) / y_scale)
    assert lsb.max() <= 1 and (lsb == 0).mean() > 0.9, (lsb.max(), (lsb == 0).mean())


@needs_toolchain
def test_grouped_1d_qlinearconv_is_exact(tmp_path):
    """The same two convs written as QLinearConv (QOperator, full-range int8 weights): the
    rewrites apply to ONNX's own integer operator too; bit-exact against the integer model."""
    rng = np.random.default_rng(22)
    constants = {"w1": (rng.standard_normal((8, 1, 4)) / 2).astype(np.float32),
                 "b1": (rng.standard_normal(8) / 4).astype(np.float32),
                 "w2": (rng.standard_normal((8, 4, 3)) / 3).astype(np.float32),
                 "b2": (rng.standard_normal(8) / 4).astype(np.float32)}
    nodes = [h.make_node("Conv", ["x", "w1", "b1"], ["c1"], kernel_shape=[4], strides=[2]),
             h.make_node("Conv", ["c1", "w2", "b2"], ["y"], kernel_shape=[3], group=2, pads=[2, 2])]
    float_model = _model(nodes, [h.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 1, 48])], ("y", [1, 8, 25]),
                         constants)
    path = _quantise(float_model, tmp_path, seed=2, quant_format=QuantFormat.QOperator)
    assert [n.op_type for n in onnx.load(path).graph.node].count("QLinearConv") == 2
    x = {"x": np.random.default_rng(3).standard_normal((1, 1, 48)).astype(np.float32)}
    ours = _run_quantized(path, tmp_path, x)
    assert_kernel_arithmetic(ours, onnx.load(path), x)
