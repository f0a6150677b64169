"""rules/algebra.dnnr: every Table 3.4 family fires on a graph built for it, lowers
#FLOPS by exactly what the identity implies, and matches onnxruntime.

All cases live in one model (one saturation per schedule: loading the rules costs
seconds); each case has its own inputs and one output, and its #FLOPS are measured
on that output's cone. Shapes: m = 4 rows, n = 8 columns.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto

from egraph_compiler import extract
from egraph_compiler.dsl.ast import RunTimes, Saturate
from egraph_compiler.extract.cost import CostModel
from egraph_compiler.ir.graph import Graph
from tests.modelzoo import assert_close, run_ort
from tests.rules.support import (
    ModelBuilder,
    Optimised,
    cone,
    flops,
    load,
    op_count,
    optimise,
    run_graph,
)

M, N, K = 4, 8, 6
MN = M * N

# case name -> (rule expected to fire, #FLOPS the rewrite saves)
CASES: dict[str, tuple[str, int]] = {}


def _case(name: str, rule: str, saved: int) -> str:
    CASES[name] = (rule, saved)
    return name


def _build() -> ModelBuilder:
    b = ModelBuilder()
    mn = [M, N]

    # Recip(A) ⊙ Recip(A ⊙ B) -> Recip(Square(A) ⊙ B): 4mn -> 3mn (Table 3.4 row 1).
    a, bb = b.input("ra", mn, 0.5, 2.0), b.input("rb", mn, 0.5, 2.0)
    b.node("Reciprocal", [a], "ra_r")
    b.node("Mul", [a, bb], "rab")
    b.node("Reciprocal", ["rab"], "rab_r")
    b.node("Mul", ["ra_r", "rab_r"], _case("recip", "recip-assoc", MN))

    # (A ⊙ √B) ⊙ (√B ⊙ C) -> (A ⊙ B) ⊙ C with B = Relu(.) >= 0: Relu + √ + 3 Mul -> Relu + 2 Mul.
    a, bb, c = b.input("sa", mn), b.input("sb", mn), b.input("sc", mn)
    b.node("Relu", [bb], "sb_pos")
    b.node("Sqrt", ["sb_pos"], "sb_sqrt")
    b.node("Mul", [a, "sb_sqrt"], "s_left")
    b.node("Mul", ["sb_sqrt", c], "s_right")
    b.node("Mul", ["s_left", "s_right"], _case("sqrt", "sqrt-assoc", 2 * MN))

    # Abs(A) ⊙ B ⊙ Abs(C) -> Abs(A ⊙ C) ⊙ B: 4mn -> 3mn (row 3).
    a, bb, c = b.input("aa", mn), b.input("ab", mn), b.input("ac", mn)
    b.node("Abs", [a], "aa_abs")
    b.node("Abs", [c], "ac_abs")
    b.node("Mul", ["aa_abs", bb], "a_left")
    b.node("Mul", ["a_left", "ac_abs"], _case("abs", "abs-assoc", MN))

    # The † case: (B ⊙ Abs(A)) ⊙ Abs(C) needs the commute pass first, then row 3.
    a, bb, c = b.input("da", mn), b.input("db", mn), b.input("dc", mn)
    b.node("Abs", [a], "da_abs")
    b.node("Abs", [c], "dc_abs")
    b.node("Mul", [bb, "da_abs"], "d_left")
    b.node("Mul", ["d_left", "dc_abs"], _case("abs_commuted", "abs-assoc", MN))

    # (A ⊙ R) ⊙ (R ⊙ C), R = ReduceSum(B) of shape [m, 1] -> A ⊙ Square(R) ⊙ C:
    # 3mn -> 2mn + m (row 4; R shared).
    a, bb, c = b.input("qa", mn), b.input("qb", mn), b.input("qc", mn)
    b.const("q_axes", np.array([1]), np.int64)
    b.node("ReduceSum", [bb, "q_axes"], "q_r", keepdims=1)
    b.node("Mul", [a, "q_r"], "q_left")
    b.node("Mul", ["q_r", c], "q_right")
    b.node("Mul", ["q_left", "q_right"], _case("square", "square-assoc", MN - M))

    # A ⊙ C + A ⊙ B -> A ⊙ (C + B): 3mn -> 2mn (row 5).
    a, bb, c = b.input("ma", mn), b.input("mb", mn), b.input("mc", mn)
    b.node("Mul", [a, c], "m_ac")
    b.node("Mul", [a, bb], "m_ab")
    b.node("Add", ["m_ac", "m_ab"], _case("distribute", "mul-distribute", MN))

    # A + A ⊙ B -> A ⊙ (B + 1) with B of shape [1, n]: mn + mn -> n + mn (row 6).
    a, bb = b.input("fa", mn), b.input("fb", [1, N])
    b.node("Mul", [a, bb], "f_ab")
    b.node("Add", [a, "f_ab"], _case("factor", "factor-self", MN - N))

    # Pow(A + B, 2) - (A + B) ⊙ C -> (A + B) ⊙ (A + B - C): 4mn -> 3mn (row 7, via Square).
    a, bb, c = b.input("pa", mn), b.input("pb", mn), b.input("pc", mn)
    b.const("two", 2.0)
    b.node("Add", [a, bb], "p_sum")
    b.node("Pow", ["p_sum", "two"], "p_sq")
    b.node("Mul", ["p_sum", c], "p_prod")
    b.node("Sub", ["p_sq", "p_prod"], _case("square_sub", "square-sub", MN))

    # ReduceProd(Exp(A)) -> Exp(ReduceSum(A)) along the last axis: 2mn -> mn + m (row 10).
    a = b.input("ea", mn)
    b.node("Exp", [a], "e_exp")
    b.node("ReduceProd", ["e_exp"], _case("prod_exp", "reduce-prod-exp", MN - M), axes=[1], keepdims=1)

    # ReduceSum(A ⊙ c) -> ReduceSum(A) ⊙ c for a scalar constant c: 2mn -> mn + m.
    a = b.input("ka", mn)
    b.const("k_c", 0.75)
    b.const("k_axes", np.array([1]), np.int64)
    b.node("Mul", [a, "k_c"], "k_scaled")
    b.node("ReduceSum", ["k_scaled", "k_axes"], _case("reduce_scale", "reduce-sum-scale", MN - M), keepdims=1)

    # Exp(A) ⊙ Exp(B) -> Exp(A + B): 3mn -> 2mn.
    a, bb = b.input("xa", mn), b.input("xb", mn)
    b.node("Exp", [a], "xa_e")
    b.node("Exp", [bb], "xb_e")
    b.node("Mul", ["xa_e", "xb_e"], _case("exp_mul", "exp-mul", MN))

    # MatMul(A, W) + MatMul(B, W) -> MatMul(A + B, W): 2·2mkn + mn -> mk + 2mkn.
    a, bb, w = b.input("la", [M, K]), b.input("lb", [M, K]), b.input("lw", [K, N])
    b.node("MatMul", [a, w], "l_aw")
    b.node("MatMul", [bb, w], "l_bw")
    b.node("Add", ["l_aw", "l_bw"], _case("matmul_linear", "matmul-add-left", 2 * M * K * N + MN - M * K))

    # ReduceSum(BitShift(A, 3, LEFT)) -> BitShift(ReduceSum(A), 3, LEFT) on uint32:
    # 2mn -> mn + m (row 9; onnxruntime has no unsigned ReduceSum: NumPy checks it).
    a = b.input("ba", mn, 0, 1000, dtype=TensorProto.UINT32)
    b.const("b_s", 3, np.uint32)
    b.const("b_axes", np.array([1]), np.int64)
    b.node("BitShift", [a, "b_s"], "b_shifted", direction="LEFT")
    b.node("ReduceSum", ["b_shifted", "b_axes"], _case("bitshift", "reduce-sum-bitshift", MN - M), keepdims=1)

    # Sum(A, B) -> Add(A, B): same #FLOPS, the canonical operator (the extractor may
    # keep either; the rule must fire).
    a, bb = b.input("ua", mn), b.input("ub", mn)
    b.node("Sum", [a, bb], _case("sum", "sum-two", 0))

    # Conv -> BatchNormalization -> Relu: BN (2 FLOPs per output element) folds into the
    # Conv's weights and bias.
    x = b.input("cx", [1, 3, 8, 8])
    _conv_bn(b, "c1", x, bias=True)
    b.node("Relu", ["c1_bn"], _case("conv_bn_relu", "bn-fold-conv", 2 * CONV_OUT))

    # DenseNet's block: Conv (no bias) -> BN -> Mul(per-channel) -> Add(per-channel) -> Relu:
    # BN, Mul and Add (4 FLOPs per output element) all fold into the Conv.
    x = b.input("dx", [1, 3, 8, 8])
    _conv_bn(b, "c2", x, bias=False)
    b.random_const("c2_s", [4, 1, 1], 0.5, 1.5)
    b.random_const("c2_t", [4, 1, 1])
    b.node("Mul", ["c2_bn", "c2_s"], "c2_scaled")
    b.node("Add", ["c2_scaled", "c2_t"], "c2_shifted")
    b.node("Relu", ["c2_shifted"], _case("conv_bn_scale_relu", "scale-fold-conv", 4 * CONV_OUT))

    # Gemm(X, W, b) ⊙ s for a per-column constant s: the scale folds into W and b (mn).
    x = b.input("gx", [M, K])
    b.random_const("g_w", [K, N])
    b.random_const("g_b", [N])
    b.random_const("g_s", [N], 0.5, 1.5)
    b.node("Gemm", [x, "g_w", "g_b"], "g_y")
    b.node("Mul", ["g_y", "g_s"], _case("gemm_scale", "scale-fold-gemm", MN))

    # Gemm -> BatchNormalization (2-D): BN folds into the Gemm's B and C (2mn).
    x = b.input("gbx", [M, K])
    b.random_const("gb_w", [K, N])
    b.random_const("gb_b", [N])
    b.node("Gemm", [x, "gb_w", "gb_b"], "gb_y")
    stats = [b.random_const(f"gb_{k}", [N], lo, hi)
             for k, lo, hi in (("scale", 0.5, 1.5), ("shift", -1, 1), ("mean", -1, 1), ("var", 0.5, 2))]
    b.node("BatchNormalization", ["gb_y", *stats], _case("gemm_bn", "bn-fold-gemm", 2 * MN))

    # MatMul -> BatchNormalization (2-D): BN becomes a bias Add after MatMul(A, B ⊙ s):
    # 2mn -> mn.
    x = b.input("mbx", [M, K])
    b.random_const("mb_w", [K, N])
    b.node("MatMul", [x, "mb_w"], "mb_y")
    stats = [b.random_const(f"mb_{k}", [N], lo, hi)
             for k, lo, hi in (("scale", 0.5, 1.5), ("shift", -1, 1), ("mean", -1, 1), ("var", 0.5, 2))]
    b.node("BatchNormalization", ["mb_y", *stats], _case("matmul_bn", "bn-fold-matmul", MN))

    # MatMul(Transpose(B), Transpose(A)) -> Transpose(MatMul(A, B)): no #FLOPS, one
    # Transpose fewer ((AB)ᵀ = BᵀAᵀ).
    a, bb = b.input("ta", [M, K]), b.input("tb", [K, N])
    b.node("Transpose", [bb], "tb_t", perm=[1, 0])
    b.node("Transpose", [a], "ta_t", perm=[1, 0])
    b.node("MatMul", ["tb_t", "ta_t"], _case("matmul_transposes", "matmul-transposes", 0))

    # SERENITY: Conv(Concat(X1, X2)) -> Conv(X1, W1) + Conv(X2, W2); more #FLOPS (the
    # Add), fewer bytes: checked with a bytes-only cost below, not in CASES.
    x1, x2 = b.input("px1", [1, 6, 5, 5]), b.input("px2", [1, 6, 5, 5])
    b.node("Concat", [x1, x2], "p_cat", axis=1)
    b.random_const("p_w", [2, 12, 1, 1])
    b.random_const("p_b", [2])
    b.node("Conv", ["p_cat", "p_w", "p_b"], "partition", kernel_shape=[1, 1])
    b.output("partition", [1, 2, 5, 5])

    for name in CASES:
        shape = {"prod_exp": [M, 1], "reduce_scale": [M, 1], "matmul_transposes": [N, M],
                 "bitshift": [M, 1]}.get(name, [1, 4, 6, 6] if name.startswith("conv") else [M, N])
        b.output(name, shape, TensorProto.UINT32 if name == "bitshift" else TensorProto.FLOAT)
    return b



CONV_OUT = 4 * 6 * 6  # output elements of the 3x3 Conv of [1, 3, 8, 8] to 4 channels


def _conv_bn(b: ModelBuilder, prefix: str, x: str, bias: bool) -> None:
    b.random_const(f"{prefix}_w", [4, 3, 3, 3])
    inputs = [x, f"{prefix}_w"]
    if bias:
        inputs.append(b.random_const(f"{prefix}_b", [4]))
    b.node("Conv", inputs, f"{prefix}_y", kernel_shape=[3, 3])
    stats = [b.random_const(f"{prefix}_{k}", [4], lo, hi)
             for k, lo, hi in (("scale", 0.5, 1.5), ("shift", -1, 1), ("mean", -1, 1), ("var", 0.5, 2))]
    b.node("BatchNormalization", [f"{prefix}_y", *stats], f"{prefix}_bn", epsilon=1e-5)


_build()  # registers CASES, so the tests below can be parametrised by case


SCHEDULE = (
    Saturate(("fold",)),
    RunTimes(("commute",), 1),
    RunTimes(("algebra",), 1),
    Saturate(("fold",)),
    RunTimes(("algebra",), 1),
    Saturate(("fold",)),
    RunTimes(("partition",), 1),
)


@pytest.fixture(scope="module")
def cases() -> tuple[ModelBuilder, Optimised]:
    builder = _build()
    return builder, optimise(builder.model(), load(["algebra.dnnr"], SCHEDULE))


@pytest.mark.parametrize("name", list(CASES))
def test_family_fires_and_saves_flops(cases: tuple[ModelBuilder, Optimised], name: str) -> None:
    _, result = cases
    rule, saved = CASES[name]
    assert result.fired(rule) > 0, f"{rule} did not fire"
    before, after = flops(result.before, name), flops(result.after, name)
    assert before - after == saved, f"{name}: {before} -> {after}, expected to save {saved}"


def test_rewritten_graph_matches_onnxruntime(cases: tuple[ModelBuilder, Optimised]) -> None:
    builder, result = cases
    floats = [name for name in CASES if name != "bitshift"]
    model = builder.model(only=floats)
    expected = run_ort(model, builder.feeds_for(model))
    actual = run_graph(cone(result.after, *floats), builder.feeds_for(model))
    assert_close(actual, expected, rtol=1e-4, atol=1e-5)


def _run_integer(graph: Graph, feeds: dict[str, np.ndarray]) -> np.ndarray:
    """NumPy semantics of the unsigned BitShift/ReduceSum cone (ONNX: wrapping)."""
    values: dict[str, np.ndarray] = {**{k: np.asarray(v) for k, v in graph.constants.items()}, **feeds}
    for node in graph.nodes:
        x = values[node.inputs[0]]
        if node.op == "BitShift":
            shift = values[node.inputs[1]].astype(x.dtype)
            left = node.attr("direction") == "LEFT"
            values[node.outputs[0]] = np.left_shift(x, shift) if left else np.right_shift(x, shift)
        elif node.op == "ReduceSum":
            axes = tuple(node.attr("axes") or range(x.ndim))
            keep = bool(node.attr("keepdims", 1))
            values[node.outputs[0]] = np.sum(x, axis=axes, keepdims=keep, dtype=x.dtype)
        else:
            raise AssertionError(f"unexpected {node.op} in the BitShift case")
    return values[graph.outputs[0].name]


def test_bitshift_commutes_with_reduce_sum_numerically(cases: tuple[ModelBuilder, Optimised]) -> None:
    builder, result = cases
    feeds = {"ba": builder.feeds["ba"]}
    expected = np.sum(np.left_shift(feeds["ba"], np.uint32(3)), axis=1, keepdims=True, dtype=np.uint32)
    assert np.array_equal(_run_integer(cone(result.before, "bitshift"), feeds), expected)
    assert np.array_equal(_run_integer(cone(result.after, "bitshift"), feeds), expected)


def test_matmul_transposes_drop_a_transpose(cases: tuple[ModelBuilder, Optimised]) -> None:
    _, result = cases
    assert op_count(result.before, "matmul_transposes", "Transpose") == 2
    assert op_count(result.after, "matmul_transposes", "Transpose") == 1


def test_bn_and_scales_fold_into_the_conv(cases: tuple[ModelBuilder, Optimised]) -> None:
    _, result = cases
    for name in ("conv_bn_relu", "conv_bn_scale_relu"):
        ops = sorted(n.op for n in cone(result.after, name).nodes)
        assert ops == ["Conv", "Relu"], f"{name}: {ops}"


# Peak memory as bytes moved, nothing else (no #FLOPS, no per-kernel launch cost).
BYTES_ONLY = CostModel(flop_weight=0.0, byte_weight=1.0, launch_cost=0.0)


def test_serenity_partition_is_chosen_by_bytes_and_matches(cases: tuple[ModelBuilder, Optimised]) -> None:
    builder, result = cases
    assert result.fired("concat-conv-partition") > 0
    by_bytes = extract.extract(result.saturation, cost_model=BYTES_ONLY)
    ops = sorted(n.op for n in cone(by_bytes.graph, "partition").nodes)
    assert ops == ["Add", "Conv", "Conv"], ops
    model = builder.model(only=["partition"])
    expected = run_ort(model, builder.feeds_for(model))
    actual = run_graph(cone(by_bytes.graph, "partition"), builder.feeds_for(model))
    assert_close(actual, expected, rtol=1e-4, atol=1e-5)
