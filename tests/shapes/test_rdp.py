"""SoD² RDP (seed 000 §5.4.1): the lattice, forward and backward transfers per dynamism
class of Table 5.2 (Shape / Add, Conv / Reshape, Range / NonZero), the fixpoint, Merge.

The classes come from the shipped ``rules/operators.dnnr`` (`declared_classes`); one
test re-declares an operator's class to show the transfer follows the declaration.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from egraph_compiler.dsl import load_rules, rules_dir
from egraph_compiler.ir import DimExpr, Graph, Node, TensorType, Value
from egraph_compiler.shapes import infer_shapes, rdp
from egraph_compiler.shapes.rdp import NAC, UNDEF, declared_classes, kind, meet, meet_fact, merge

CLASSES = declared_classes(load_rules([rules_dir()]).ops)
B, S = DimExpr.symbol("B"), DimExpr.symbol("S")


def _graph(inputs: dict[str, tuple | None], nodes: list[Node], outputs: dict[str, tuple | None],
           constants: dict[str, np.ndarray] | None = None) -> Graph:
    return Graph("g", tuple(Value(n, TensorType("float32", s)) for n, s in inputs.items()),
                 tuple(Value(n, TensorType("float32", s)) for n, s in outputs.items()), tuple(nodes),
                 constants=constants or {})


# ------------------------------------------------------------------ the lattice

def test_lattice_kinds_are_figure_5_2() -> None:
    assert kind(UNDEF) == "undef" and kind(NAC) == "nac"
    assert kind(7) == "known"
    assert kind(S) == "symbolic"
    assert kind(S * B) == "op-inferred" and kind((S - 1) // 2 + 1) == "op-inferred" and kind(2 * S) == "op-inferred"
    assert kind(DimExpr.symbol("d3")) == "nac"  # a fresh symbol: a dim no transfer could express


def test_meet_undef_is_top_and_nac_is_bottom() -> None:
    for element in (UNDEF, 3, S, S * B, NAC):
        assert meet(UNDEF, element) == element and meet(element, UNDEF) == element
        assert meet(element, NAC) is NAC and meet(NAC, element) is NAC
        assert meet(element, element) == element
    assert meet(3, 4) is NAC and meet(3, S) is NAC and meet(S, S * B) is NAC
    assert meet(S * B, B * S) == S * B  # canonical form: one op-inferred constant


def test_product_lattice_meets_dim_by_dim_and_rank_first() -> None:
    assert meet_fact((B, 3, S), (B, 4, S)) == (B, NAC, S)
    assert meet_fact((B, 3), (B, 3, 1)) is NAC  # ranks disagree: no constant rank
    assert meet_fact(UNDEF, (B, 3)) == (B, 3)
    assert meet_fact(NAC, UNDEF) is NAC


def test_merge_of_if_branches() -> None:
    """SoD² Merge: what either branch may produce."""
    then_branch, else_branch = (B, S, 64), (B, 1, 64)
    assert merge([then_branch, else_branch]) == (B, NAC, 64)
    assert merge([then_branch, then_branch]) == then_branch
    assert merge([then_branch, UNDEF]) == then_branch  # a branch not analysed yet adds nothing
    assert merge([(B, S), (B, S, 1)]) is NAC
    assert merge([]) is UNDEF


# ------------------------------------------------------------------ forward, per class

def _shape_chain() -> Graph:
    """Reshape(x, Concat(Shape(x)[0], [-1])): Shape is Input Shape Determined Output,
    Gather/Concat/Mul are Input Shape Determined Output Shape, Reshape is Shape & Value."""
    nodes = [
        Node("Shape", ("x",), ("s",), name="shape"),
        Node("Gather", ("s", "zero"), ("b",), (("axis", 0),), name="gather"),
        Node("Unsqueeze", ("b",), ("b1",), (("axes", (0,)),), name="unsq"),
        Node("Concat", ("b1", "minus_one"), ("target",), (("axis", 0),), name="concat"),
        Node("Reshape", ("x", "target"), ("y",), name="reshape"),
        Node("Relu", ("y",), ("z",), name="relu"),
    ]
    constants = {"zero": np.array(0, np.int64), "minus_one": np.array([-1], np.int64)}
    return _graph({"x": (B, S, 8)}, nodes, {"z": None}, constants)


def test_forward_shape_determined_output_gives_a_symbolic_value_map() -> None:
    typed = infer_shapes(_shape_chain(), dynamism=CLASSES)
    assert CLASSES["Shape"] == rdp.SHAPE_DETERMINED_OUTPUT
    assert typed.shape_values["s"] == (B, S, 8)  # Algorithm 2 line 23: the value map of Shape
    assert typed.shape_values["target"] == (B, -1)
    assert CLASSES["Reshape"] == rdp.SHAPE_VALUE_DETERMINED
    assert typed.types["y"].shape == (B, S * 8)  # op-inferred, from the value map
    assert kind(typed.types["y"].shape[1]) == "op-inferred"
    assert typed.types["z"].shape == (B, S * 8)


def test_forward_shape_value_determined_without_a_value_is_nac() -> None:
    nodes = [Node("Reshape", ("x", "t"), ("y",), name="reshape")]
    graph = _graph({"x": (B, 6), "t": (2,)}, nodes, {"y": None})
    typed = infer_shapes(graph, dynamism=CLASSES)
    assert [kind(d) for d in typed.types["y"].shape] == ["nac", "nac"]  # rank known, dims not


def test_forward_execution_determined_has_a_nac_value_map() -> None:
    assert CLASSES["NonZero"] == rdp.EXECUTION_DETERMINED
    nodes = [Node("NonZero", ("x",), ("idx",), name="nz")]
    typed = infer_shapes(_graph({"x": (5,)}, nodes, {"idx": None}), dynamism=CLASSES)
    assert typed.types["idx"].shape[0] == 1 and kind(typed.types["idx"].shape[1]) == "nac"
    assert "idx" not in typed.shape_values


# ------------------------------------------------------------------ backward, per class

def test_backward_shape_determined_inverts_one_to_one_shape_functions() -> None:
    """Relu (same), Unsqueeze (unit axis), Concat (the missing operand), Add (broadcast
    where no other operand supplies a dim): undef inputs get the shapes outputs imply."""
    nodes = [
        Node("Relu", ("a",), ("ra",), name="relu"),
        Node("Unsqueeze", ("ra",), ("ua",), (("axes", (1,)),), name="unsq"),
        Node("Concat", ("ua", "c"), ("cat",), (("axis", 1),), name="cat"),
        Node("Add", ("cat", "bias"), ("y",), name="add"),
    ]
    graph = _graph({"a": None, "c": None, "bias": (1, 1, 1)}, nodes, {"y": (B, S + 1, 4)})
    typed = infer_shapes(graph, dynamism=CLASSES)
    assert typed.types["cat"].shape == (B, S + 1, 4)
    # c is undef and ua too: Concat cannot split S+1 between them (two unknowns) ...
    assert typed.types["a"].shape is None and typed.types["c"].shape is None
    pinned = dataclasses.replace(graph, inputs=(Value("a", TensorType("float32", None)),
                                                Value("c", TensorType("float32", (B, S, 4))),
                                                Value("bias", TensorType("float32", (1, 1, 1)))))
    typed = infer_shapes(pinned, dynamism=CLASSES)  # ... one known operand pins the other
    assert typed.types["ua"].shape == (B, 1, 4)
    assert typed.types["a"].shape == (B, 4)  # through Unsqueeze and Relu


def test_backward_broadcast_leaves_an_ambiguous_operand_undef() -> None:
    """Add's operand may be 1 or the output dim where the other operand has the dim."""
    nodes = [Node("Add", ("a", "b"), ("y",), name="add")]
    typed = infer_shapes(_graph({"a": None, "b": (B, 4)}, nodes, {"y": (B, 4)}), dynamism=CLASSES)
    assert typed.types["a"].shape is None


def test_backward_shape_determined_output_value_to_shape() -> None:
    """ConstantOfShape's output shape is its input's value map (F^bv); that value map is
    Shape(x)'s, so it is x's shape (F^bs of Input Shape Determined Output); then the
    forward transfers type Relu(x) — the fixpoint needs both directions."""
    nodes = [
        Node("Shape", ("x",), ("s",), name="shape"),
        Node("ConstantOfShape", ("s",), ("zeros",), name="cos"),
        Node("Relu", ("x",), ("r",), name="relu"),
    ]
    graph = _graph({"x": None}, nodes, {"zeros": (B, 3), "r": None})
    typed = infer_shapes(graph, dynamism=CLASSES)
    assert typed.shape_values["s"] == (B, 3)
    assert typed.types["x"].shape == (B, 3)
    assert typed.types["r"].shape == (B, 3)


def test_backward_shape_value_determined_has_no_inverse() -> None:
    nodes = [Node("Reshape", ("x", "t"), ("y",), name="reshape")]
    graph = _graph({"x": None}, nodes, {"y": (B, 6)}, {"t": np.array([0, 6], np.int64)})
    assert infer_shapes(graph, dynamism=CLASSES).types["x"].shape is None


def test_the_declared_class_chooses_the_transfer() -> None:
    """Re-declaring Relu execution_determined (a rule file may) removes its backward
    transfer: the classes are read from the declarations, not from a table of our own."""
    nodes = [Node("Relu", ("x",), ("y",), name="relu")]
    graph = _graph({"x": None}, nodes, {"y": (B, 3)})
    assert infer_shapes(graph, dynamism=CLASSES).types["x"].shape == (B, 3)
    redeclared = {**CLASSES, "Relu": rdp.EXECUTION_DETERMINED}
    assert infer_shapes(graph, dynamism=redeclared).types["x"].shape is None


def test_fixpoint_rounds_are_bounded_and_stop_when_nothing_changes() -> None:
    from egraph_compiler.shapes.infer import _State

    graph = _shape_chain()
    state = _State(graph, {})
    state.seed()
    stats = rdp.solve(state, graph.nodes, CLASSES)
    assert 1 <= stats.rounds <= len(graph.nodes) + 2
    assert stats.backward == 0  # every shape was known forward
    again = rdp.solve(state, graph.nodes, CLASSES)  # a solved state is a fixpoint
    assert again.forward == 0 and again.backward == 0 and again.rounds == 1


def test_census_counts_lattice_kinds_and_classes_after_constant_values() -> None:
    """SoD² §5.3: Reshape (Input Shape & Value Determined) whose target's value map is
    known acts as Input Shape Determined Output Shape; with a nac target it does not."""
    typed = infer_shapes(_shape_chain(), dynamism=CLASSES)
    found = rdp.census(typed, CLASSES)
    assert found["declared"][rdp.SHAPE_VALUE_DETERMINED] == 1
    assert rdp.SHAPE_VALUE_DETERMINED not in found["acting"]
    assert found["dims"]["op-inferred"] >= 2 and found["dims"]["nac"] == 0
    opaque = infer_shapes(_graph({"x": (B, 6), "t": (2,)}, [Node("Reshape", ("x", "t"), ("y",), name="r")],
                                 {"y": None}), dynamism=CLASSES)
    found = rdp.census(opaque, CLASSES)
    assert found["acting"] == {rdp.SHAPE_VALUE_DETERMINED: 1} and found["dims"]["nac"] == 2


def test_a_slice_to_a_shape_value_is_symbolic_under_the_dim_range() -> None:
    """BERT's ``position_ids[:, :seq]`` (a (1, 512) table sliced to Shape(x)[1]) has seq
    columns only if seq <= 512: with ``--dim seq=1..512`` RDP proves it, by default the
    dim is nac (min(seq, 512) is no polynomial). Measured on a TorchScript BERT export:
    44 nac dims by default, 0 under the range."""
    nodes = [
        Node("Shape", ("x",), ("s",), name="shape"),
        Node("Gather", ("s", "one"), ("n",), (("axis", 0),), name="gather"),
        Node("Unsqueeze", ("n",), ("end",), (("axes", (0,)),), name="unsq"),
        Node("Slice", ("table", "zero", "end", "one1", "one1"), ("pos",), name="slice"),
        Node("Unsqueeze", ("pos",), ("pos3",), (("axes", (2,)),), name="unsq2"),
        Node("Add", ("x", "pos3"), ("y",), name="add"),
    ]
    constants = {"one": np.array(1, np.int64), "zero": np.array([0], np.int64), "one1": np.array([1], np.int64),
                 "table": np.zeros((1, 512), np.float32)}
    graph = _graph({"x": (B, S, 1)}, nodes, {"y": None}, constants)
    ranged = infer_shapes(graph, dynamism=CLASSES, symbols={"S": (1, 512)})
    assert ranged.types["pos"].shape == (1, S) and ranged.types["y"].shape == (B, S, 1)
    default = infer_shapes(graph, dynamism=CLASSES)
    assert kind(default.types["pos"].shape[1]) == "nac"
