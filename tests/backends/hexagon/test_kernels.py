"""Every kernel × instruction family × shape (ragged ones included) is bit-exact
against the NumPy model of the same integer arithmetic, run under qemu-hexagon.

Several operators go into one program per test to keep the build count low."""

from __future__ import annotations

import numpy as np
import pytest

from egraph_compiler.backends.hexagon.eltwise import (
    QBinary,
    QClip,
    QConcat,
    QDepthwise,
    QPool,
    binary_c,
    binary_reference,
    clip_c,
    clip_reference,
    concat_c,
    depthwise_c,
    depthwise_reference,
    depthwise_scratch,
    pool_c,
    pool_reference,
)
from egraph_compiler.backends.hexagon.kernels import (
    FAMILIES,
    ConvGeometry,
    QGemm,
    gemm_c,
    gemm_reference,
    scratch_sizes,
)
from egraph_compiler.backends.hexagon.program import Step
from egraph_compiler.backends.hexagon.quant import ELEMENTWISE_SHIFT, requant_from_scales

from .conftest import needs_toolchain, run_steps

# (batch, H, W, C, kernel, stride, pad, N): 1×1, 3×3, strided, ragged everywhere.
GEMM_SHAPES = [
    (1, 1, 37, 61, 1, 1, 0, 19),     # MatMul-like: M=37, K=61, N=19 (no multiple of 4/32)
    (1, 6, 6, 8, 1, 1, 0, 5),        # 1×1 conv
    (1, 7, 9, 6, 3, 1, 1, 7),        # 3×3, pad 1
    (2, 9, 8, 3, 3, 2, 0, 4),        # strided, batch 2, K=27
    (1, 12, 12, 5, 1, 1, 0, 130),    # M=144 > 128 rows, N ragged over the unroll
]


def _geometry(b, h, w, c, k, s, p):
    oh, ow = (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1
    return ConvGeometry(b, h, w, c, (k, k), (s, s), (p, p), (1, 1), (oh, ow))


def _gemm_case(rng, shape, family, per_channel):
    b, h, w, c, k, s, p, n = shape
    g = _geometry(b, h, w, c, k, s, p)
    weights = rng.integers(-128, 128, (g.depth, n)).astype(np.int8)
    bias = rng.integers(-20000, 20000, n).astype(np.int32)
    scales = rng.uniform(2e-5, 4e-4, n if per_channel else 1)
    op = QGemm(g, weights, bias, requant_from_scales(scales, int(rng.integers(0, 255))), int(rng.integers(0, 255)), family)
    x = rng.integers(0, 256, (b, h, w, c)).astype(np.uint8)
    return op, x


@needs_toolchain
@pytest.mark.parametrize("family", FAMILIES)
def test_gemm_family_matches_numpy(tmp_path, family):
    rng = np.random.default_rng(hash(family) % 1000)
    steps, inputs, outputs, expected = [], {}, {}, {}
    pack = acc = 0
    for i, shape in enumerate(GEMM_SHAPES):
        op, x = _gemm_case(rng, shape, family, per_channel=i % 2 == 0)
        defs, call = gemm_c(op, f"op{i}")
        steps.append(Step(defs, call, {"x": f"x{i}", "y": f"y{i}"}))
        inputs[f"x{i}"] = x
        ref = gemm_reference(op, x)
        outputs[f"y{i}"] = ref.size
        expected[f"y{i}"] = ref.reshape(-1)
        p, a = scratch_sizes(op)
        pack, acc = max(pack, p, op.geometry.rows * op.geometry.depth), max(acc, a)
    got = run_steps(tmp_path, inputs, outputs, steps, (pack, acc))
    for name, ref in expected.items():
        np.testing.assert_array_equal(got[name], ref, err_msg=f"{family} {name}")


@needs_toolchain
def test_other_kernels_match_numpy(tmp_path):
    rng = np.random.default_rng(7)
    steps, inputs, outputs, expected = [], {}, {}, {}
    pack = acc = 0

    def add(name, defs_call, buffers, ref):
        defs, call = defs_call
        steps.append(Step(defs, call, buffers))
        outputs[name] = ref.size
        expected[name] = ref.reshape(-1)

    # Depthwise 3×3 (ragged channel counts, stride 1 and 2) in both families.
    for i, (c, s) in enumerate([(5, 1), (130, 2)]):
        g = _geometry(1, 7, 6, c, 3, s, 1)
        x = rng.integers(0, 256, (1, 7, 6, c)).astype(np.uint8)
        inputs[f"dx{i}"] = x
        for family in ("vmpy", "scalar"):
            op = QDepthwise(g, rng.integers(-128, 128, (9, c)).astype(np.int8), rng.integers(-999, 999, c).astype(np.int32),
                            requant_from_scales(rng.uniform(1e-3, 5e-3, c), 100), 17, family)
            add(f"d{i}{family}", depthwise_c(op, f"dw{i}{family}"), {"x": f"dx{i}", "y": f"d{i}{family}"},
                depthwise_reference(op, x))
            p, a = depthwise_scratch(op)
            pack, acc = max(pack, p), max(acc, a)
    # Add / Mul with broadcasting and a fused Relu range.
    a = rng.integers(0, 256, (2, 3, 5)).astype(np.uint8)
    b = rng.integers(0, 256, (3, 1)).astype(np.uint8)
    inputs["a"], inputs["b"] = a, b
    ms = [round(0.7 * 2**ELEMENTWISE_SHIFT), round(1.3 * 2**ELEMENTWISE_SHIFT)]
    add_op = QBinary("Add", a.shape, b.shape, (2, 3, 5), 120, 30, tuple(ms), 128, 128, 255)
    mul_op = QBinary("Mul", a.shape, b.shape, (2, 3, 5), 120, 30, (round(0.01 * 2**ELEMENTWISE_SHIFT),), 60)
    add("add", binary_c(add_op, "add0"), {"a": "a", "b": "b", "y": "add"}, binary_reference(add_op, a, b))
    add("mul", binary_c(mul_op, "mul0"), {"a": "a", "b": "b", "y": "mul"}, binary_reference(mul_op, a, b))
    # Clip over a ragged length (vector part + tail).
    clip = QClip(a.size * 10, 40, 200)
    inputs["cx"] = rng.integers(0, 256, clip.size).astype(np.uint8)
    add("clip", clip_c(clip, "clip0"), {"x": "cx", "y": "clip"}, clip_reference(clip, inputs["cx"]))
    # Pooling: max 3×3 stride 2 with padding, global average.
    px = rng.integers(0, 256, (1, 9, 7, 6)).astype(np.uint8)
    inputs["px"] = px
    mp = QPool("MaxPool", _geometry(1, 9, 7, 6, 3, 2, 1))
    add("mp", pool_c(mp, "mp0"), {"x": "px", "y": "mp"}, pool_reference(mp, px))
    gap_geom = ConvGeometry(1, 9, 7, 6, (9, 7), (1, 1), (0, 0), (1, 1), (1, 1))
    gap = QPool("AveragePool", gap_geom, requant_from_scales(np.array([0.9 / 63]), 9), x_zero=31)
    add("gap", pool_c(gap, "gap0"), {"x": "px", "y": "gap"}, pool_reference(gap, px))
    # Concat along channels.
    c1 = rng.integers(0, 256, (4, 3)).astype(np.uint8)
    c2 = rng.integers(0, 256, (4, 5)).astype(np.uint8)
    inputs["c1"], inputs["c2"] = c1, c2
    add("cat", concat_c(QConcat(4, (3, 5)), "cat0"), {"x0": "c1", "x1": "c2", "y": "cat"}, np.concatenate([c1, c2], 1))

    got = run_steps(tmp_path, inputs, outputs, steps, (pack, acc))
    for name, ref in expected.items():
        np.testing.assert_array_equal(got[name], ref, err_msg=name)
