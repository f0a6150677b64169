"""Pad and a non-channel Concat on the integers (issue 14: EfficientNet's stem Pad and
ViT's class-token Concat stopped the corpus models before selection). Each QDQ model runs
in qemu against the exact integer model (bit for bit, `integer_model.run_qdq_graph`) and
onnxruntime (within 1 LSB, as `test_models`)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnxruntime.quantization import QuantFormat

from egraph_compiler import pipeline
from egraph_compiler.backends.hexagon.kinds import kernel
from egraph_compiler.backends.hexagon.lower import lower_qdq

from .conftest import needs_toolchain
from .integer_model import assert_kernel_arithmetic
from .test_models import _compare, _quantise, _run_quantized

h = onnx.helper


def _model(nodes: list, inputs: list, output: tuple[str, list[int]], constants: dict[str, np.ndarray]
           ) -> onnx.ModelProto:
    graph = h.make_graph(nodes, "m", inputs, [h.make_tensor_value_info(output[0], onnx.TensorProto.FLOAT, output[1])],
                         [onnx.numpy_helper.from_array(v, k) for k, v in constants.items()])
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)], ir_version=8)


def pad_add_model(mode: str) -> onnx.ModelProto:
    """x → Pad(mode; pads differ per side) → Add(constant): not a Conv, which takes a
    constant Pad into its own pads (rules/algebra.dnnr)."""
    rng = np.random.default_rng(7)
    constants = {"pads": np.array([0, 0, 1, 0, 0, 0, 2, 1], np.int64),
                 "bias": (rng.standard_normal((1, 4, 1, 1)) / 4).astype(np.float32)}
    nodes = [h.make_node("Pad", ["x", "pads"], ["p"], mode=mode),
             h.make_node("Add", ["p", "bias"], ["y"])]
    return _model(nodes, [h.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 4, 6, 5])],
                  ("y", [1, 4, 9, 6]), constants)


def token_concat_model() -> onnx.ModelProto:
    """x → MatMul → Concat(class token, ·, axis=1) → Add(position): ViT's embedding."""
    rng = np.random.default_rng(8)
    constants = {"w": (rng.standard_normal((8, 8)) / 3).astype(np.float32),
                 "cls": rng.standard_normal((1, 1, 8)).astype(np.float32),
                 "pos": (rng.standard_normal((1, 4, 8)) / 2).astype(np.float32)}
    nodes = [h.make_node("MatMul", ["x", "w"], ["m"]),
             h.make_node("Concat", ["cls", "m"], ["c"], axis=1),
             h.make_node("Add", ["c", "pos"], ["y"])]
    return _model(nodes, [h.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 3, 8])],
                  ("y", [1, 4, 8]), constants)


def _kinds(path: str) -> list[str]:
    return [op.kind for op in lower_qdq(pipeline.compile_model(path, target="hexagon").graph).ops]


@needs_toolchain
def test_pad_runs_on_the_integers(tmp_path):
    path = _quantise(pad_add_model("constant"), tmp_path, seed=2)
    kinds = _kinds(path)
    assert "pad" in kinds and "float" not in kinds, kinds
    worst, equal = _compare(path, tmp_path, seed=3, exact=True)
    assert worst <= 1, f"{worst} LSB"
    assert equal > 0.9


@pytest.mark.parametrize("mode", ["reflect", "edge"])
def test_pad_table_moves_the_elements_onnx_says(tmp_path, mode):
    """The Pad kernel's table (its NumPy reference, which the C kernel mirrors: the
    constant mode runs in qemu above) against numpy.pad on the device's integers."""
    path = _quantise(pad_add_model(mode), tmp_path, seed=2)
    lowered = lower_qdq(pipeline.compile_model(path, target="hexagon").graph)
    (op,) = [o for o in lowered.ops if o.kind == "pad"]
    x_shape = lowered.shapes[op.inputs[0]]
    x = np.random.default_rng(4).integers(0, 256, x_shape).astype(np.uint8)
    if op.inputs[0] in lowered.nhwc:  # the device holds it NHWC; the table reads that order
        got = kernel(op).reference(op.spec, x.transpose(0, 2, 3, 1)).reshape(lowered.shapes[op.output])
    else:
        got = kernel(op).reference(op.spec, x).reshape(lowered.shapes[op.output])
    expected = np.pad(x, [(0, 0), (0, 0), (1, 2), (0, 1)], mode=mode)
    np.testing.assert_array_equal(got, expected)


@needs_toolchain
def test_token_concat_runs_on_the_integers(tmp_path):
    path = _quantise(token_concat_model(), tmp_path, seed=2)
    kinds = _kinds(path)
    assert "concat" in kinds and "float" not in kinds, kinds
    worst, equal = _compare(path, tmp_path, seed=3, exact=True)
    assert worst <= 1, f"{worst} LSB"
    assert equal > 0.9


def auto_pad_model() -> onnx.ModelProto:
    """Conv(SAME_UPPER, stride 2; odd total pad) → Conv(VALID) → AveragePool(kernel larger
    than the map, ceil_mode): EfficientNet's TF-style padding and its pooler."""
    rng = np.random.default_rng(9)
    constants = {"w1": (rng.standard_normal((6, 3, 3, 3)) / 4).astype(np.float32),
                 "b1": (rng.standard_normal(6) / 4).astype(np.float32),
                 "w2": (rng.standard_normal((5, 6, 2, 2)) / 4).astype(np.float32),
                 "b2": (rng.standard_normal(5) / 4).astype(np.float32)}
    nodes = [h.make_node("Conv", ["x", "w1", "b1"], ["c1"], kernel_shape=[3, 3], strides=[2, 2], auto_pad="SAME_UPPER"),
             h.make_node("Conv", ["c1", "w2", "b2"], ["c2"], kernel_shape=[2, 2], auto_pad="VALID"),
             h.make_node("AveragePool", ["c2"], ["y"], kernel_shape=[8, 8], strides=[8, 8], ceil_mode=1)]
    return _model(nodes, [h.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 3, 10, 9])],
                  ("y", [1, 5, 1, 1]), constants)


@needs_toolchain
def test_auto_pad_convs_and_whole_map_ceil_pool_run_on_the_integers(tmp_path):
    path = _quantise(auto_pad_model(), tmp_path, seed=2)
    graph = pipeline.compile_model(path, target="hexagon").graph
    assert sum(n.op == "QConvInt" for n in graph.nodes) == 2  # qdq-conv matched both: explicit pads
    kinds = [op.kind for op in lower_qdq(graph).ops]
    assert "float" not in kinds and "pool" in kinds, kinds
    worst, equal = _compare(path, tmp_path, seed=3, expose=(("c1_DequantizeLinear_Output", [1, 6, 5, 5]),),
                            exact=True)
    assert worst <= 1, f"{worst} LSB"
    assert equal > 0.9


def depthwise_model(channels: int, size: int = 2, stride: int = 1, pads: tuple[int, int, int, int] = (1, 1, 1, 1)
                    ) -> onnx.ModelProto:
    """One 3×3 depthwise Conv over a ``size``×``size`` map (ONNX pads: top, left, bottom, right)."""
    rng = np.random.default_rng(1)
    constants = {"w": (rng.standard_normal((channels, 1, 3, 3)) / 3).astype(np.float32),
                 "b": (rng.standard_normal(channels) / 4).astype(np.float32)}
    out = (size + pads[0] + pads[2] - 3) // stride + 1
    nodes = [h.make_node("Conv", ["x", "w", "b"], ["y"], kernel_shape=[3, 3], group=channels, pads=list(pads),
                         strides=[stride, stride])]
    return _model(nodes, [h.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, channels, size, size])],
                  ("y", [1, channels, out, out]), constants)


# Found by EfficientNet (144 channels): the vmpy kernel's requantisation loop spilled a
# value and reloaded it in one `:mem_noshuf` packet (the load sees the store), and our
# packer wrote the packet back without the flag, so the reload read the stale slot:
# channels 0-3 of every pixel after the first were off by up to 92 LSB (the packer fix:
# test_packer.test_mem_noshuf_packets_keep_their_flag). 136 and 200: one full vector and
# a ragged one, stride 2 with TF-style (bottom/right only) and symmetric pads.
DEPTHWISE_CASES = [(144, 2, 1, (1, 1, 1, 1)), (136, 5, 2, (0, 0, 1, 1)), (200, 4, 2, (1, 1, 1, 1))]


@needs_toolchain
@pytest.mark.parametrize(("channels", "size", "stride", "pads"), DEPTHWISE_CASES)
def test_depthwise_vmpy_beyond_one_vector_matches_onnxruntime(tmp_path, channels, size, stride, pads):
    path = _quantise(depthwise_model(channels, size, stride, pads), tmp_path, seed=2)
    assert _kinds(path) == ["depthwise"]
    artefact_report = tmp_path / "artefact" / "report.txt"
    worst, equal = _compare(path, tmp_path, seed=3, exact=True)
    assert "depthwise -> vmpy" in artefact_report.read_text()
    assert worst <= 1, f"{worst} LSB"
    assert equal > 0.9


@needs_toolchain
def test_depthwise_vmpy_of_200_channels_is_exact(tmp_path):
    """QOperator (QLinearConv, full-range int8 weights): bit-exact against the NumPy
    integer model, stride 2 with padding on the bottom and right only."""
    path = _quantise(depthwise_model(200, 5, 2, (0, 0, 1, 1)), tmp_path, seed=2, quant_format=QuantFormat.QOperator)
    assert [n.op_type for n in onnx.load(path).graph.node].count("QLinearConv") == 1
    x = {"x": np.random.default_rng(3).standard_normal((1, 200, 5, 5)).astype(np.float32)}
    ours = _run_quantized(path, tmp_path, x)
    assert "depthwise -> vmpy" in (tmp_path / "artefact" / "report.txt").read_text()
    assert_kernel_arithmetic(ours, onnx.load(path), x)
