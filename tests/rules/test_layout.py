"""rules/layout.dnnr: layout operators meet and cancel, shape computations fold.

Each case is a chain an exporter or a model really emits; the test asserts that the
number of layout operators (Transpose, Reshape and its kin, shape computations) in
the case's cone strictly drops, to the count the rules imply, and that the rewritten
graph matches onnxruntime. One saturation serves all cases.
"""

from __future__ import annotations

import numpy as np
import pytest

from egraph_compiler.dsl import shape_builtins
from egraph_compiler.dsl.ast import Saturate
from egraph_compiler.ir.dims import DimExpr
from tests.modelzoo import assert_close, run_ort
from tests.rules.support import ModelBuilder, Optimised, cone, load, optimise, run_graph

LAYOUT_OPS = frozenset({
    "Transpose", "Reshape", "Squeeze", "Unsqueeze", "Flatten", "Shape", "Gather", "Concat",
    "Slice",
})

# case name -> (output shape, rule expected to fire, layout ops left after the rewrite)
CASES: dict[str, tuple[list[int | str], str, int]] = {}


def _case(name: str, shape: list[int | str], rule: str, left: int) -> str:
    CASES[name] = (shape, rule, left)
    return name


def _build() -> ModelBuilder:
    b = ModelBuilder()

    # Transpose(Transpose(X, [0, 2, 1]), [1, 0, 2]) = Transpose(X, [2, 0, 1]): one left.
    x = b.input("t_x", [2, 3, 4])
    b.node("Transpose", [x], "t_1", perm=[0, 2, 1])
    b.node("Transpose", ["t_1"], _case("compose", [4, 2, 3], "transpose-fold", 1), perm=[1, 0, 2])

    # Transpose(Transpose(X, [1, 2, 0]), [2, 0, 1]) = X: none left.
    x = b.input("c_x", [2, 3, 4])
    b.node("Transpose", [x], "c_1", perm=[1, 2, 0])
    b.node("Transpose", ["c_1"], _case("cancel", [2, 3, 4], "transpose-id", 0), perm=[2, 0, 1])

    # Transpose -> Relu -> Sigmoid -> inverse Transpose: sunk through both, then cancelled.
    x = b.input("u_x", [2, 3, 4, 5])
    b.node("Transpose", [x], "u_t", perm=[0, 2, 3, 1])
    b.node("Relu", ["u_t"], "u_r")
    b.node("Sigmoid", ["u_r"], "u_s")
    b.node("Transpose", ["u_s"], _case("unary_sink", [2, 3, 4, 5], "transpose-sink-sigmoid", 0),
           perm=[0, 3, 1, 2])

    # Transpose(A, p) + Transpose(B, p) = Transpose(A + B, p): two Transposes -> one.
    a, bb = b.input("a_a", [2, 3, 4]), b.input("a_b", [2, 3, 4])
    b.node("Transpose", [a], "a_ta", perm=[2, 0, 1])
    b.node("Transpose", [bb], "a_tb", perm=[2, 0, 1])
    b.node("Add", ["a_ta", "a_tb"], _case("binary_sink", [4, 2, 3], "transpose-sink-add", 1))

    # Reshape to the same shape is the input.
    x = b.input("i_x", [2, 3, 4])
    b.const("i_s", np.array([2, 3, 4]), np.int64)
    b.node("Reshape", [x, "i_s"], "i_r")
    b.node("Relu", ["i_r"], _case("reshape_id", [2, 3, 4], "reshape-id", 0))

    # Reshape(Reshape(X, [6, 4]), [2, 12]) = Reshape(X, [2, 12]).
    x = b.input("r_x", [2, 3, 4])
    b.const("r_s1", np.array([6, 4]), np.int64)
    b.const("r_s2", np.array([2, -1]), np.int64)
    b.node("Reshape", [x, "r_s1"], "r_1")
    b.node("Reshape", ["r_1", "r_s2"], _case("reshape_merge", [2, 12], "reshape-reshape", 1))

    # Unsqueeze(X, [0]) -> Flatten(axis=2): both canonicalised to Reshape, then merged.
    x = b.input("q_x", [3, 4, 5])
    b.const("q_axes", np.array([0]), np.int64)
    b.node("Unsqueeze", [x, "q_axes"], "q_u")
    b.node("Flatten", ["q_u"], _case("reorganize_chain", [3, 20], "unsqueeze-to-reshape", 1), axis=2)

    # Squeeze(Unsqueeze(X, [1]), [1]) = X.
    x = b.input("z_x", [3, 4])
    b.const("z_axes", np.array([1]), np.int64)
    b.node("Unsqueeze", [x, "z_axes"], "z_u")
    b.node("Squeeze", ["z_u", "z_axes"], "z_s")
    b.node("Relu", ["z_s"], _case("squeeze_unsqueeze", [3, 4], "squeeze-to-reshape", 0))

    # An exporter's run-time shape: Reshape(X, Concat(Unsqueeze(Gather(Shape(X), 0)), [12]))
    # with a symbolic batch. RDP knows the target is (batch, 12): one constant Reshape left.
    x = b.input("s_x", ["batch", 3, 4])
    b.const("s_zero", np.array(0), np.int64)
    b.const("s_axes", np.array([0]), np.int64)
    b.const("s_rest", np.array([12]), np.int64)
    b.node("Shape", [x], "s_shape")
    b.node("Gather", ["s_shape", "s_zero"], "s_batch", axis=0)
    b.node("Unsqueeze", ["s_batch", "s_axes"], "s_batch1")
    b.node("Concat", ["s_batch1", "s_rest"], "s_target", axis=0)
    b.node("Reshape", [x, "s_target"], _case("shape_fold", ["batch", 12], "reshape-const-target", 1))

    # Slice(Concat(A, B, axis=1), [0, 3) on axis 1) = A.
    a, bb = b.input("l_a", [2, 3, 4]), b.input("l_b", [2, 5, 4])
    b.const("l_starts", np.array([0]), np.int64)
    b.const("l_ends", np.array([3]), np.int64)
    b.const("l_axes", np.array([1]), np.int64)
    b.node("Concat", [a, bb], "l_cat", axis=1)
    b.node("Slice", ["l_cat", "l_starts", "l_ends", "l_axes"], "l_slice")
    b.node("Relu", ["l_slice"], _case("slice_concat", [2, 3, 4], "slice-concat-first", 0))

    for name, (shape, _, _) in CASES.items():
        b.output(name, shape)
    return b


_build()  # registers CASES


@pytest.fixture(scope="module")
def cases() -> tuple[ModelBuilder, Optimised]:
    builder = _build()
    return builder, optimise(builder.model(), load(["layout.dnnr"], (Saturate(("layout",)),)))


def _layout_ops(result_graph, name: str) -> int:  # noqa: ANN001 - a Graph
    return sum(1 for n in cone(result_graph, name).nodes if n.op in LAYOUT_OPS)


@pytest.mark.parametrize("name", list(CASES))
def test_layout_operators_drop(cases: tuple[ModelBuilder, Optimised], name: str) -> None:
    _, result = cases
    _, rule, left = CASES[name]
    assert result.fired(rule) > 0, f"{rule} did not fire"
    before, after = _layout_ops(result.before, name), _layout_ops(result.after, name)
    assert after < before, f"{name}: {before} -> {after} layout operators"
    assert after == left, f"{name}: {after} layout operators left, expected {left}"


def test_rewritten_graph_matches_onnxruntime(cases: tuple[ModelBuilder, Optimised]) -> None:
    builder, result = cases
    expected = run_ort(builder.model(), builder.feeds)
    actual = run_graph(result.after, builder.feeds)
    assert_close(actual, expected, rtol=1e-6, atol=1e-7)


# ---- the shape built-ins the layout rules compute targets with (dsl/shape_builtins.py)


def test_shape_builtins_handle_symbolic_dims() -> None:
    batch = DimExpr.symbol("batch")
    assert shape_builtins.reshape_shape((batch, 3, 4), (0, -1)) == (batch, 12)
    assert shape_builtins.reshape_target((batch, 3, 4), (batch, 12)) == (0, 12)
    assert shape_builtins.unsqueeze_shape((batch, 3), (0, -1)) == (1, batch, 3, 1)
    assert shape_builtins.squeeze_shape((batch, 1, 3), (1,)) == (batch, 3)
    assert shape_builtins.flatten_shape((batch, 3, 4), 1) == (batch, 12)
    assert shape_builtins.reshape_target((batch, 3), (3, batch)) == (3, -1)
    # two symbolic dims that move cannot both be written as -1
    seq = DimExpr.symbol("seq")
    with pytest.raises(ValueError):
        shape_builtins.reshape_target((batch, seq), (seq, batch))
    with pytest.raises(ValueError):
        shape_builtins.reshape_shape((2, 3), (4, -1))
    with pytest.raises(ValueError):
        shape_builtins.squeeze_shape((2, 3), (0,))
