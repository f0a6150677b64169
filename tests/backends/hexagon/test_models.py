"""Whole quantised models under qemu against onnxruntime on the same QDQ model.

Models are quantised with ``onnxruntime.quantization.quantize_static`` (QDQ, uint8
activations, symmetric int8 weights) on random calibration data. onnxruntime runs the
QDQ graph in float (dequantise → float op → quantise, round half to even); we run
integer kernels (round half up, 31-bit multipliers), so outputs agree to within one
unit in the last place; the tests assert that and that most values are equal.
"""

from __future__ import annotations

import os

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

from egraph_compiler.backends import hexagon
from egraph_compiler.backends.hexagon import toolchain
from egraph_compiler.ir import load_onnx
from egraph_compiler.ir.errors import DnnrError
from tests.modelzoo import (
    depthwise_separable_block,
    light_model,
    randomize_weights,
    residual_block,
    run_ort,
)

from .conftest import needs_toolchain


def _real_input(model: onnx.ModelProto) -> onnx.ValueInfoProto:
    initialisers = {i.name for i in model.graph.initializer}
    return next(v for v in model.graph.input if v.name not in initialisers)


def _static(model: onnx.ModelProto, shape: dict[str, int]) -> onnx.ModelProto:
    for value in [*model.graph.input, *model.graph.output]:
        for dim in value.type.tensor_type.shape.dim:
            if dim.dim_param:
                dim.dim_value = shape[dim.dim_param]
    return model


def _quantise(model: onnx.ModelProto, tmp, seed: int) -> str:
    """Fold BatchNormalization (onnxruntime basic optimisations), then quantize_static."""
    raw = tmp / "float.onnx"
    onnx.save(model, raw)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    options.optimized_model_filepath = str(tmp / "folded.onnx")
    ort.InferenceSession(str(raw), options, providers=["CPUExecutionProvider"])
    folded = onnx.load(tmp / "folded.onnx")
    name = _real_input(folded).name
    shape = [d.dim_value for d in _real_input(folded).type.tensor_type.shape.dim]
    rng = np.random.default_rng(seed)

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.left = 4

        def get_next(self):
            self.left -= 1
            return {name: rng.standard_normal(shape).astype(np.float32)} if self.left >= 0 else None

    out = tmp / "qdq.onnx"
    quantize_static(str(tmp / "folded.onnx"), str(out), Reader(), quant_format=QuantFormat.QDQ,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
    qdq = onnx.load(out)
    qdq.ir_version = max(qdq.ir_version, 7)  # quantize_static keeps IR 3 of old models
    onnx.save(qdq, out)
    return str(out)


def _compare(path: str, tmp, seed: int, expose: tuple[tuple[str, list[int]], ...] = ()) -> tuple[int, float]:
    model = onnx.load(path)
    for value, shape in expose:  # also compare some intermediate quantised tensors
        model.graph.output.append(onnx.helper.make_tensor_value_info(value, onnx.TensorProto.FLOAT, shape))
    onnx.save(model, tmp / "compare.onnx")
    graph = load_onnx(str(tmp / "compare.onnx"))
    artefact = hexagon.build(graph, tmp / "artefact")
    assert artefact.elf is not None and "rejected" in artefact.report
    info = _real_input(model)
    x = {info.name: np.random.default_rng(seed).standard_normal(
        [d.dim_value for d in info.type.tensor_type.shape.dim]).astype(np.float32)}
    ours = hexagon.load(tmp / "artefact").run(x)
    expected = run_ort(model, x)
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
    worst, equal = _compare(path, tmp_path, seed=3)
    assert worst <= 1, f"{worst} LSB"
    assert equal > 0.9


@needs_toolchain
def test_quantised_squeezenet_matches_onnxruntime(tmp_path):
    model = randomize_weights(light_model("squeezenet"), 0)
    path = _quantise(model, tmp_path, seed=1)
    # The softmax output is mostly zeros: compare the pooled logits feeding it too.
    worst, equal = _compare(path, tmp_path, seed=5, expose=(("r65_DequantizeLinear_Output", [1, 1000, 1, 1]),))
    assert worst <= 1, f"{worst} LSB"
    assert equal > 0.9


def test_build_without_toolchain_writes_c_and_run_says_what_to_install(tmp_path, monkeypatch):
    model = _static(residual_block(channels=4, seed=1), {"batch": 1, "height": 5, "width": 5})
    path = _quantise(model, tmp_path, seed=2)
    monkeypatch.setattr(toolchain, "have_toolchain", lambda: False)
    artefact = hexagon.build(load_onnx(path), tmp_path / "artefact")
    assert artefact.elf is None and os.path.getsize(artefact.c_file) > 0
    assert "Q6_Vw_vrmpyacc" in artefact.c_file.read_text() or "Q6_W" in artefact.c_file.read_text()
    with pytest.raises(DnnrError, match="apt-get install clang lld qemu-user"):
        hexagon.load(tmp_path / "artefact")
