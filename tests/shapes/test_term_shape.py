"""`infer_term_shape`: the shapes stage's rules for terms no model vouches for (those
e-graph rewrites build). Where a model's node gets a fresh symbol or a dim assumed from
validity, a term gets None; model errors read as unknown, never as a traceback."""

from __future__ import annotations

import pytest

from egraph_compiler.ir import DimExpr, TensorType
from egraph_compiler.ir.errors import ModelError
from egraph_compiler.shapes import broadcast_shape, infer_node, infer_term_shape

N, S = DimExpr.symbol("N"), DimExpr.symbol("S")


def _node_shape(op: str, attrs: dict, shapes: list, **kwargs) -> tuple:
    (out, *_), _ = infer_node(op, attrs, [TensorType("float32", s) for s in shapes], **kwargs)
    return out.shape


def test_a_dim_a_model_node_gets_fresh_is_unknown_for_a_term() -> None:
    # Reshape to a run-time target of length 2: a node gets two fresh dims
    node = _node_shape("Reshape", {}, [(N, 4), (2,)])
    assert len(node) == 2 and all(isinstance(d, DimExpr) for d in node)
    assert infer_term_shape("Reshape", {}, [(N, 4), (2,)]) is None
    assert infer_term_shape("Reshape", {}, [(N, 4), (2,)], values={1: (-1, 2)}) == (N * 2, 2)
    # a -1 the product does not divide exactly
    assert infer_term_shape("Reshape", {}, [(N,), (3,)], values={1: (1, -1, 4)}) is None


@pytest.mark.parametrize(("a", "b", "node", "term"), [
    ((N, 4), (1, 4), (N, 4), (N, 4)),
    ((N, 1), (1, S), (N, S), (N, S)),
    ((N,), (4,), (4,), None),  # valid only if N is 1 or 4: a node may assume it, a term not
    ((N,), (S,), "fresh", None),
])
def test_broadcast_trusts_only_equal_dims_and_ones_for_a_term(a, b, node, term) -> None:
    got = _node_shape("Add", {}, [a, b])
    if node == "fresh":
        assert got[0] not in (N, S) and isinstance(got[0], DimExpr)
    else:
        assert got == node
    assert infer_term_shape("Add", {}, [a, b]) == term
    assert broadcast_shape([a, b]) == term


def test_model_errors_are_unknown_for_a_term() -> None:
    with pytest.raises(ModelError):
        _node_shape("Add", {}, [(3,), (4,)])
    assert infer_term_shape("Add", {}, [(3,), (4,)]) is None
    assert broadcast_shape([(3,), (4,)]) is None and broadcast_shape([(3,), None]) is None
    assert infer_term_shape("Transpose", {"perm": (0, 0)}, [(2, 3)]) is None
    assert infer_term_shape("Conv", {"group": 3}, [(1, 3, 8, 8), (8, 3, 3, 3)]) is None
    assert infer_term_shape("MaxPool", {}, [(1, 3, 8, 8)]) is None  # no kernel_shape
    assert infer_term_shape("Pad", {"pads": (0, 1, 0, 1)}, [(2, 3, 4)]) is None


def test_a_term_assumes_nothing_a_valid_node_would_imply() -> None:
    # a static dim on another Concat input pins a symbolic one only in a valid node
    assert _node_shape("Concat", {"axis": 1}, [(N, 2), (3, 2)]) == (3, 4)
    assert infer_term_shape("Concat", {"axis": 1}, [(N, 2), (3, 2)]) == (N, 4)
    # Squeeze without axes drops 1s; whether N is 1 is unknown
    assert infer_term_shape("Squeeze", {}, [(N, 1, 4)]) is None
    assert infer_term_shape("Squeeze", {}, [(2, 1, 4)]) == (2, 4)


def test_unknown_ops_broadcast_only_when_declared_elementwise() -> None:
    assert infer_term_shape("MyFusedEltwise", {}, [(N, 4), (4,)], elementwise=True) == (N, 4)
    assert infer_term_shape("MyFusedEltwise", {}, [(N, 4), (4,)]) is None


def test_outputs_and_values_by_input_index() -> None:
    assert infer_term_shape("Split", {"axis": 1, "split": (1, 3)}, [(N, 4)], num_outputs=2) == (N, 1)
    assert infer_term_shape("Expand", {}, [(4, 1), (2,)], values={1: (4, S)}) == (4, S)
    assert infer_term_shape("Conv", {"pads": (1, 1, 1, 1)}, [(N, 3, S, 8), (16, 3, 3, 3), None]) == (N, 16, S, 8)


def test_reduce_with_empty_axes_and_noop_keeps_the_shape() -> None:
    assert _node_shape("ReduceSum", {"noop_with_empty_axes": 1}, [(N, 4)]) == (N, 4)
    assert _node_shape("ReduceSum", {}, [(N, 4)]) == (1, 1)


def test_term_shapes_prove_dim_facts_under_the_active_ranges() -> None:
    """A term a rewrite built is typed with the ranges the e-graph's graph declares."""
    from egraph_compiler.ir import DimExpr
    from egraph_compiler.shapes import infer_term_shape, using_ranges

    b, s = DimExpr.symbol("B"), DimExpr.symbol("S")
    attrs = {"starts": (0,), "ends": (512,), "axes": (1,), "steps": (1,)}
    with using_ranges({"B": (1, 8), "S": (1, 512)}):
        assert infer_term_shape("Slice", attrs, [(b, s)]) == (b, s)
    assert infer_term_shape("Slice", attrs, [(b, s)]) is None  # S may exceed 512: not assumed


def test_constant_of_shape_term_whose_fill_the_egraph_holds_as_a_number() -> None:
    """The e-graph decodes ConstantOfShape's ``value`` as a number (a TorchScript BERT
    export crashed the compile here)."""
    from egraph_compiler.ir import DimExpr
    from egraph_compiler.shapes import infer_term_shape

    s = DimExpr.symbol("S")
    assert infer_term_shape("ConstantOfShape", {"value": 1}, [(2,)], values={0: (3, s)}) == (3, s)
    assert infer_term_shape("ConstantOfShape", {"value": 0.5}, [(1,)], values={0: (s,)}) == (s,)
