"""`check_graph`: the IR's own verifier, run between stages in tests and under DNNR_CHECK=1.

It checks what every stage promises: unique value and node names, every input
defined before use (so nodes are in topological order), outputs produced, and,
once `shapes` has run (``require_types=True``), a type for every value.
"""

from __future__ import annotations

from egraph_compiler.ir.errors import DnnrError
from egraph_compiler.ir.graph import Graph


class GraphError(DnnrError):
    """The IR broke one of its invariants: a bug in the stage that produced it."""


def check_graph(graph: Graph, *, require_types: bool = True) -> None:
    """Raise `GraphError` listing every broken invariant of ``graph``."""
    problems: list[str] = []
    defined: set[str] = set()
    for value in graph.inputs:
        if value.name in defined:
            problems.append(f"graph input {value.name!r} is declared twice")
        defined.add(value.name)
    for name in graph.constants:
        if name in defined:
            problems.append(f"constant {name!r} is also a graph input")
        defined.add(name)
    node_names: set[str] = set()
    for node in graph.nodes:
        where = f"node '{node.name}' ({node.op})"
        if not node.name:
            problems.append(f"a {node.op} node has no name")
        elif node.name in node_names:
            problems.append(f"{where}: node name used twice")
        node_names.add(node.name)
        for name in node.inputs:
            if name and name not in defined:
                problems.append(f"{where}: input {name!r} is not defined before it is used")
        for name in node.outputs:
            if not name:
                continue
            if name in defined:
                problems.append(f"{where}: output {name!r} is defined more than once")
            defined.add(name)
    for value in graph.outputs:
        if value.name not in defined:
            problems.append(f"graph output {value.name!r} is never produced")
    if require_types:
        missing = sorted(name for name in defined if name not in graph.types)
        if missing:
            shown = ", ".join(repr(m) for m in missing[:5])
            problems.append(f"{len(missing)} values have no type (e.g. {shown})")
    if problems:
        listed = "\n".join(f"  - {p}" for p in problems)
        raise GraphError(f"invalid graph {graph.name!r}: {len(problems)} problem(s)\n{listed}")
