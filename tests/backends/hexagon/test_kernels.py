"""Every kernel × instruction family × shape (ragged ones included) is bit-exact
against the NumPy model of the same integer arithmetic, run under qemu-hexagon.

Several operators go into one program per test to keep the build count low."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from egraph_compiler.backends.hexagon.eltwise import (
    QBinary,
    QClip,
    QDepthwise,
    QPool,
    binary_c,
    binary_hvx_applies,
    binary_reference,
    clip_c,
    clip_reference,
    concat_rq_c,
    concat_rq_reference,
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
    writes_packed_input_of,
)
from egraph_compiler.backends.hexagon.lower import QConcatRq
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
    add("cat", concat_rq_c(QConcatRq(4, (3, 5), (0, 0), (1 << ELEMENTWISE_SHIFT,) * 2, 0), "cat0"), {"x0": "c1", "x1": "c2", "y": "cat"}, np.concatenate([c1, c2], 1))

    got = run_steps(tmp_path, inputs, outputs, steps, (pack, acc))
    for name, ref in expected.items():
        np.testing.assert_array_equal(got[name], ref, err_msg=name)


def _requant_cases(rng):
    """(zero points, multipliers) pairs: typical, near the 2^30 limit, tiny, identity."""
    one = 1 << ELEMENTWISE_SHIFT
    return [((120, 30), (round(0.7 * one), round(1.3 * one))),
            ((0, 255), ((1 << 30) - 1, 1)),
            ((int(rng.integers(0, 256)), int(rng.integers(0, 256))), (int(rng.integers(0, 1 << 30)), one))]


@needs_toolchain
@pytest.mark.parametrize("family", ["hvx", "scalar"])
def test_elementwise_kernels_ragged_sweep(tmp_path, family):
    """Add/Mul, requantising Concat, Clip and pooling over ragged sizes (not multiples of
    128/64/32/4), in their HVX and scalar forms, bit-exact against the NumPy models."""
    rng = np.random.default_rng(11)
    steps, inputs, outputs, expected = [], {}, {}, {}

    def add(name, defs_call, buffers, ref):
        defs, call = defs_call
        steps.append(Step(defs, call, buffers))
        outputs[name] = ref.size
        expected[name] = ref.reshape(-1)

    def tensor(name, shape):
        inputs[name] = rng.integers(0, 256, shape).astype(np.uint8)
        return inputs[name]

    for i, size in enumerate([1, 77, 128, 301, 1037]):
        a, b = tensor(f"a{i}", (size,)), tensor(f"b{i}", (size,))
        for j, (zps, ms) in enumerate(_requant_cases(rng)):
            lo, hi = (0, 255) if j != 1 else (30, 201)  # a fused Relu6-like range
            op = QBinary("Add", (size,), (size,), (size,), zps[0], zps[1], ms, int(rng.integers(0, 256)), lo, hi, family)
            assert family == "scalar" or binary_hvx_applies(op)
            add(f"add{i}{j}", binary_c(op, f"k_add{i}{j}"), {"a": f"a{i}", "b": f"b{i}", "y": f"add{i}{j}"},
                binary_reference(op, a, b))
            mul = QBinary("Mul", (size,), (size,), (size,), zps[0], zps[1], (ms[j % 2] >> 8,),
                          int(rng.integers(0, 256)), lo, hi, family)
            add(f"mul{i}{j}", binary_c(mul, f"k_mul{i}{j}"), {"a": f"a{i}", "b": f"b{i}", "y": f"mul{i}{j}"},
                binary_reference(mul, a, b))
    # One operand a single element (broadcast by splatting).
    s1 = tensor("s1", (1,))
    op = QBinary("Mul", (301,), (1,), (301,), 3, 250, (1 << 21,), 0, family=family)
    add("muls", binary_c(op, "k_muls"), {"a": "a3", "b": "s1", "y": "muls"}, binary_reference(op, inputs["a3"], s1))
    op = QBinary("Add", (301,), (1,), (301,), 3, 250, (1 << 23, 1 << 25), 9, family=family)
    add("adds", binary_c(op, "k_adds"), {"a": "a3", "b": "s1", "y": "adds"}, binary_reference(op, inputs["a3"], s1))
    # Clip over ragged lengths.
    for i, size in enumerate([5, 129, 300]):
        clip = QClip(size, 17, 222)
        add(f"clip{i}", clip_c(clip, f"k_clip{i}"), {"x": f"a{i + 1}", "y": f"clip{i}"},
            clip_reference(clip, inputs[f"a{i + 1}"][:size]))
    # Requantising channel concat: identity, rescaled and copied inputs, ragged channels.
    for i, (rows, chans) in enumerate([(7, (3, 130)), (5, (64, 200, 5)), (3, (1,))]):
        parts = [tensor(f"cat{i}_{j}", (rows, ch)) for j, ch in enumerate(chans)]
        zps = tuple(int(rng.integers(0, 256)) for _ in chans)
        y_zero = int(rng.integers(0, 256))
        mults = tuple(int(rng.integers(1 << 22, 1 << 26)) for _ in chans)
        if len(chans) > 1:  # one input already at the output's scale: a plain copy
            zps, mults = (y_zero, *zps[1:]), (1 << ELEMENTWISE_SHIFT, *mults[1:])
        op = QConcatRq(rows, chans, zps, mults, y_zero)
        add(f"cat{i}", concat_rq_c(op, f"k_cat{i}", family),
            {f"x{j}": f"cat{i}_{j}" for j in range(len(chans))} | {"y": f"cat{i}"}, concat_rq_reference(op, parts))
    add("catplain", concat_rq_c(QConcatRq(7, (3, 130), (0, 0), (1 << ELEMENTWISE_SHIFT,) * 2, 0), "k_catplain"), {"x0": "cat0_0", "x1": "cat0_1", "y": "catplain"},
        np.concatenate([inputs["cat0_0"], inputs["cat0_1"]], 1))
    # Pooling: max with padding and stride over ragged channels; average incl. a global
    # pool of 13×13 = 169 taps (more than one 16-bit chunk of 128 taps).
    for i, (h, w, c, k, s, p) in enumerate([(9, 7, 5, 3, 2, 1), (6, 5, 130, 2, 2, 0), (4, 4, 256, 3, 1, 1)]):
        x = tensor(f"px{i}", (1, h, w, c))
        mp = QPool("MaxPool", _geometry(1, h, w, c, k, s, p), family=family)
        add(f"mp{i}", pool_c(mp, f"k_mp{i}"), {"x": f"px{i}", "y": f"mp{i}"}, pool_reference(mp, x))
    for i, (h, w, c, k) in enumerate([(13, 13, 200, 13), (7, 6, 7, 3)]):
        x = tensor(f"ax{i}", (2, h, w, c))
        g = ConvGeometry(2, h, w, c, (k, k), (1, 1), (0, 0), (1, 1), (h - k + 1, w - k + 1))
        ap = QPool("AveragePool", g, requant_from_scales(np.array([0.7 / (k * k)]), 11), x_zero=int(rng.integers(0, 256)),
                   family=family)
        add(f"ap{i}", pool_c(ap, f"k_ap{i}"), {"x": f"ax{i}", "y": f"ap{i}"}, pool_reference(ap, x))

    got = run_steps(tmp_path, inputs, outputs, steps)
    for name, ref in expected.items():
        np.testing.assert_array_equal(got[name], ref, err_msg=f"{family} {name}")


@needs_toolchain
def test_gemm_writes_its_consumers_packed_input(tmp_path):
    """A producer's requantisation stores straight into the packed layout of a 1×1
    consumer (no packing step in between), for every pair of HVX families; ragged M, K, N."""
    rng = np.random.default_rng(5)
    steps, inputs, outputs, expected = [], {}, {}, {}
    pack = acc = 0
    hvx = [f for f in FAMILIES if f != "scalar"]
    for i, (producer_family, consumer_family) in enumerate(zip(hvx, hvx[1:] + hvx[:1], strict=True)):
        producer, x = _gemm_case(rng, (1, 9, 7, 5, 3, 1, 1, 19), producer_family, per_channel=True)
        g = producer.geometry
        cg = ConvGeometry(1, g.out_hw[0], g.out_hw[1], 19, (1, 1), out_hw=g.out_hw)
        consumer = QGemm(cg, rng.integers(-128, 128, (19, 7)).astype(np.int8), rng.integers(-999, 999, 7).astype(np.int32),
                         requant_from_scales(rng.uniform(1e-4, 1e-3, 1), 3), 0, consumer_family)
        assert writes_packed_input_of(producer, consumer)
        inputs[f"x{i}"] = x
        defs, call = gemm_c(replace(producer, into=consumer), f"k_prod{i}")
        steps.append(Step(defs, call, {"x": f"x{i}", "y": f"y{i}"}))
        defs, call = gemm_c(replace(consumer, packed_input=True), f"k_cons{i}")
        steps.append(Step(defs, call, {"x": f"x{i}", "y": f"y{i}"}))
        middle = gemm_reference(producer, x).reshape(1, *g.out_hw, 19)
        ref = gemm_reference(consumer, middle)
        outputs[f"y{i}"], expected[f"y{i}"] = ref.size, ref.reshape(-1)
        for op in (producer, consumer):
            p, a = scratch_sizes(op)
            pack, acc = max(pack, p), max(acc, a)
    got = run_steps(tmp_path, inputs, outputs, steps, (pack, acc))
    for name, ref in expected.items():
        np.testing.assert_array_equal(got[name], ref, err_msg=name)
