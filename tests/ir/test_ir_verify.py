"""check_graph names every broken IR invariant."""

from __future__ import annotations

import numpy as np
import pytest

from egraph_compiler.ir import DnnrError, Graph, Node, TensorType, Value, check_graph

F = TensorType("float32", (2,))


def _graph(nodes: tuple[Node, ...], types: dict | None = None, outputs: tuple[str, ...] = ("y",)) -> Graph:
    return Graph("g", (Value("x", F),), tuple(Value(o, F) for o in outputs), nodes,
                 constants={"c": np.ones(2, np.float32)}, types=types or {})


def test_a_valid_graph_passes() -> None:
    graph = _graph((Node("Add", ("x", "c"), ("y",), name="add"),), {"x": F, "c": F, "y": F})
    check_graph(graph)


@pytest.mark.parametrize(("nodes", "message"), [
    ((Node("Relu", ("t",), ("y",), name="r"), Node("Relu", ("x",), ("t",), name="s")),
     r"node 'r' \(Relu\): input 't' is not defined before it is used"),
    ((Node("Relu", ("x",), ("y",), name="r"), Node("Relu", ("x",), ("y",), name="s")),
     r"node 's' \(Relu\): output 'y' is defined more than once"),
    ((Node("Relu", ("x",), ("y",), name="r"), Node("Relu", ("x",), ("z",), name="r")), "node name used twice"),
    ((Node("Relu", ("x",), ("y",)),), "a Relu node has no name"),
    ((Node("Relu", ("x",), ("z",), name="r"),), "graph output 'y' is never produced"),
])
def test_broken_invariants_are_named(nodes: tuple[Node, ...], message: str) -> None:
    with pytest.raises(DnnrError, match=message):
        check_graph(_graph(nodes), require_types=False)


def test_missing_types_are_reported_after_shapes() -> None:
    graph = _graph((Node("Relu", ("x",), ("y",), name="r"),), {"x": F})
    with pytest.raises(DnnrError, match="values have no type"):
        check_graph(graph)
    check_graph(graph, require_types=False)
