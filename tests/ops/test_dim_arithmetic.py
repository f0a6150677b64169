"""Shape values (Shape → Gather → arithmetic → Reshape) are evaluated through the operators'
declared scalar semantics on symbolic dims (`ops.scalar.evaluate_in`, `shapes.values`), so
an operator declared only in a rule file computes shape values too, and the library's
arithmetic operators need no per-operator code in shape inference."""

from __future__ import annotations

import numpy as np
import pytest

from egraph_compiler import dsl, ops
from egraph_compiler.ir import DimExpr, Graph, Node, TensorType, Value
from egraph_compiler.shapes import infer_shapes

B, S = DimExpr.symbol("B"), DimExpr.symbol("S")
# Built at run time, so no Python file holds the operator's name as a literal.
NAME = "Tw" + "iceplusone"


def _graph(nodes: list[Node], constants: dict[str, np.ndarray]) -> Graph:
    x = Value("x", TensorType("float32", (B, S, 8)))
    return Graph("g", (x,), (Value("y", TensorType("float32", None)),), tuple(nodes), constants=constants,
                 symbols={"B": (1, 64), "S": (1, 512)})


def _seq_arith(op: str, extra: tuple[str, ...] = (), attrs: tuple = ()) -> list[Node]:
    """Shape(x)[1] (= S) through ``op`` (with constant operands ``extra``) into ``v``, and a Reshape
    of x to [B, v, -1] that needs ``v``'s value."""
    return [
        Node("Shape", ("x",), ("s",), name="shape"),
        Node("Gather", ("s", "one"), ("seq",), (("axis", 0),), name="gather_seq"),
        Node("Gather", ("s", "zero"), ("batch",), (("axis", 0),), name="gather_batch"),
        Node(op, ("seq", *extra), ("v",), attrs, name="arith"),
        Node("Unsqueeze", ("v",), ("v1",), (("axes", (0,)),), name="unsq"),
        Node("Unsqueeze", ("batch",), ("b1",), (("axes", (0,)),), name="unsq_b"),
        Node("Concat", ("b1", "v1", "minus_one"), ("target",), (("axis", 0),), name="concat"),
        Node("Reshape", ("x", "target"), ("y",), name="reshape"),
    ]


CONSTANTS = {"zero": np.array(0, np.int64), "one": np.array(1, np.int64), "two": np.array(2, np.int64),
             "minus_one": np.array([-1], np.int64), "eight": np.array(8, np.int64)}


@pytest.mark.parametrize(("op", "extra", "value"), [
    ("Mul", ("two",), 2 * S), ("Add", ("eight",), S + 8), ("Sub", ("two",), S - 2),
    ("Div", ("two",), S // 2), ("Max", ("eight",), None), ("Max", ("one",), S), ("Min", ("one",), 1),
    ("Neg", (), S * -1), ("Abs", (), S), ("Identity", (), S), ("Relu", (), S),
    ("Where", (), None),  # a non-boolean condition: not evaluated
])
def test_library_arithmetic_is_the_declared_semantics_on_dims(op: str, extra: tuple[str, ...], value) -> None:
    nodes = _seq_arith(op, extra)
    if op == "Where":
        nodes[3] = Node("Where", ("seq", "one", "two"), ("v",), name="arith")
    typed = infer_shapes(_graph(nodes, CONSTANTS))
    assert typed.shape_values.get("v") == (None if value is None else (value,))


def test_comparisons_are_decided_by_the_prover() -> None:
    # S ∈ [1, 512]: S >= 1 always, S > 1 not decidable, S < 1024 always
    nodes = _seq_arith("GreaterOrEqual", ("one",))
    assert infer_shapes(_graph(nodes, CONSTANTS)).shape_values.get("v") == (1,)
    nodes = _seq_arith("Greater", ("one",))
    assert "v" not in infer_shapes(_graph(nodes, CONSTANTS)).shape_values
    nodes = _seq_arith("Less", ("big",))
    assert infer_shapes(_graph(nodes, CONSTANTS | {"big": np.array(1024, np.int64)})).shape_values.get("v") == (1,)


def test_an_operator_declared_in_a_rule_file_computes_shape_values(tmp_path) -> None:
    rules_file = tmp_path / "twice.dnnr"
    rules_file.write_text(f"op {NAME}(a) : one_to_one ili_variable shape_determined = 2 * a + 1\n")
    rules = dsl.load_rules([rules_file])
    with ops.using(rules):
        typed = infer_shapes(_graph(_seq_arith(NAME), CONSTANTS))
    assert typed.shape_values["v"] == (2 * S + 1,)
    assert typed.types["y"].shape[:2] == (B, 2 * S + 1)


def test_a_function_outside_the_dim_domain_gives_no_value() -> None:
    nodes = _seq_arith("Sqrt")
    assert "v" not in infer_shapes(_graph(nodes, CONSTANTS)).shape_values
