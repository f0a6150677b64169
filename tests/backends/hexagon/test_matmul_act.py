"""MatMul of two activations (attention's Q·Kᵀ and P·V) in integer arithmetic: the
runtime-B kernel of every instruction family is bit-exact against its NumPy model over
a sweep of ragged shapes, and the quantised encoder runs both attention MatMuls with it."""

from __future__ import annotations

import re

import numpy as np
import onnx

from egraph_compiler.backends import hexagon
from egraph_compiler.backends.hexagon.kernels import (
    FAMILIES,
    QMatMulAct,
    matmul_act_c,
    matmul_act_reference,
    matmul_act_scratch,
)
from egraph_compiler.backends.hexagon.program import Step
from egraph_compiler.backends.hexagon.quant import requant_from_scales
from egraph_compiler.ir import load_onnx
from tests.modelzoo import run_ort

from .conftest import needs_toolchain, run_steps
from .integer_model import assert_kernel_arithmetic

# (batch, M, K, N): attention-like, and ragged in every dimension (no multiple of 4/32/128).
SHAPES = [
    (4, 16, 16, 16),
    (1, 37, 61, 19),
    (3, 5, 7, 130),
    (2, 130, 9, 3),
    (1, 1, 1, 1),
]


@needs_toolchain
def test_matmul_of_two_activations_matches_numpy(tmp_path):
    """Every family × shape, in one program (one build)."""
    rng = np.random.default_rng(0)
    steps, inputs, outputs, expected = [], {}, {}, {}
    pack = acc = 0
    for family in FAMILIES:
        for i, (batch, m, k, n) in enumerate(SHAPES):
            # zero points anywhere in [0, 255]: B's is neither 128 (its int8 shift) nor 0 in general
            za, zb = (int(z) for z in rng.integers(0, 256, 2))
            a = rng.integers(0, 256, (batch, m, k)).astype(np.uint8)
            b = rng.integers(0, 256, (batch, k, n)).astype(np.uint8)
            # an output scale that spreads this product over most of [0, 255] (so the sweep
            # checks the requantisation, not only saturation)
            product = (a.astype(np.int64) - za) @ (b.astype(np.int64) - zb)
            scale = rng.uniform(0.8, 1.2) * 250 / max(1, int(product.max() - product.min()))
            zy = int(np.clip(round(128 - scale * (product.max() + product.min()) / 2), 0, 255))
            op = QMatMulAct(batch, m, k, n, za, zb, requant_from_scales(np.array([scale]), zy), family)
            name = f"{family}{i}"
            defs, call = matmul_act_c(op, f"op{len(steps)}_{family}")  # named as the backend names kernels
            steps.append(Step(defs, call, {"a": f"a_{name}", "b": f"b_{name}", "y": f"y_{name}"}))
            inputs |= {f"a_{name}": a, f"b_{name}": b}
            ref = matmul_act_reference(op, a, b)
            outputs[f"y_{name}"] = ref.size
            expected[f"y_{name}"] = ref.reshape(-1)
            p, s = matmul_act_scratch(op)
            pack, acc = max(pack, p), max(acc, s)
    got = run_steps(tmp_path, inputs, outputs, steps, (pack, acc))
    for name, ref in expected.items():
        np.testing.assert_array_equal(got[name], ref, err_msg=name)
    # the sweep exercises the requantisation, not just saturation
    spread = np.concatenate(list(expected.values()))
    assert ((spread > 0) & (spread < 255)).mean() > 0.5


@needs_toolchain
def test_qlinear_matmul_of_two_inputs_with_broadcast_batch_matches_onnxruntime(tmp_path):
    """QLinearMatMul of two uint8 graph inputs, b's batch dims broadcast ([2, 3] against [3]),
    both zero points non-zero: a gather broadcasts b, then the runtime-B kernel."""
    h, rng = onnx.helper, np.random.default_rng(3)
    consts = {"a_scale": np.float32(0.05), "a_zero": np.uint8(100), "b_scale": np.float32(0.03),
              "b_zero": np.uint8(77), "y_scale": np.float32(0.6), "y_zero": np.uint8(120)}
    node = h.make_node("QLinearMatMul", ["a", "a_scale", "a_zero", "b", "b_scale", "b_zero", "y_scale", "y_zero"], ["y"])
    graph = h.make_graph([node], "matmul_act",
                         [h.make_tensor_value_info("a", onnx.TensorProto.UINT8, [2, 3, 5, 9]),
                          h.make_tensor_value_info("b", onnx.TensorProto.UINT8, [3, 9, 6])],
                         [h.make_tensor_value_info("y", onnx.TensorProto.UINT8, [2, 3, 5, 6])],
                         [onnx.numpy_helper.from_array(np.asarray(v), k) for k, v in consts.items()])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)], ir_version=8)
    artefact = hexagon.build(load_onnx(model), tmp_path / "artefact")
    assert artefact.elf is not None and re.search(r" matmul_act -> (vrmpy|vmpa|vmpy|scalar) ", artefact.report)
    x = {"a": rng.integers(0, 256, (2, 3, 5, 9)).astype(np.uint8), "b": rng.integers(0, 256, (3, 9, 6)).astype(np.uint8)}
    ours = hexagon.load(tmp_path / "artefact").run(x)["y"]
    assert_kernel_arithmetic({"y": ours}, model, x)  # the oracle: exact NumPy integer arithmetic
    # Second check: onnxruntime's u8×u8 kernels widen to 16 bits before multiplying, so they
    # cannot saturate (unlike its u8×s8 ones); they round half to even in float (≤ 1 LSB).
    difference = np.abs(ours.astype(np.int16) - run_ort(model, x)["y"])
    assert difference.max() <= 1 and (difference == 0).mean() > 0.9
