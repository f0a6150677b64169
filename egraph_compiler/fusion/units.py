"""Units: operator patterns of today's transformer exports that are one kernel each.

Exporters spell a few building blocks out as chains of small operators. Each is one
computation over the same rows or elements, so splitting it stores and reloads a
whole activation tensor for nothing; DNNFusion's greedy exploration (seed order by
output size) can split them, because a shared input pulls the pieces into different
seeds' blocks. The planner therefore finds these units first and forms each one's
block before any other seed (`planner._Planner.run`), then grows it like any block:

- ``rope`` — rotary position embedding (LLaMA): ``x·cos + rotate_half(x)·sin`` with
  ``rotate_half(x) = Concat(-x[..., h:], x[..., :h])``: Mul, Slice, Slice, Neg, Concat,
  Mul, Add, plus the Reshape/Transpose that only feed it. One pointwise kernel reading
  ``x`` at two indices per element (it was three kernels on the LLaMA export);
- ``rmsnorm`` — ``y / sqrt(mean(y²) + eps)`` (LLaMA's RMSNorm: Pow or Square,
  ReduceMean, Add, Sqrt, then Div or Reciprocal and Mul): a row group;
- ``layernorm`` — LayerNorm written out (ReduceMean, Sub, Pow, ReduceMean, Add, Sqrt,
  Div): a row group, where the e-graph did not fold it to LayerNormalization.

Patterns are matched on the graph's structure (operators and operand identity), so a
unit is found whatever the exporter named its nodes.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from egraph_compiler.fusion.tables import role_of
from egraph_compiler.fusion.view import GraphView
from egraph_compiler.ir.graph import Node

UNIT_KINDS = ("rope", "rmsnorm", "layernorm", "qkv")  # qkv: `fusion.projections`


@dataclass(frozen=True)
class Unit:
    kind: str  # one of UNIT_KINDS
    nodes: frozenset[int]


class _Match:
    """Small helpers over a `GraphView` for structural patterns."""

    def __init__(self, view: GraphView) -> None:
        self.view = view

    def producer(self, value: str, op: str | tuple[str, ...]) -> int | None:
        """The node producing ``value`` when its operator is ``op`` (or one of them)."""
        n = self.view.producer_index.get(value)
        if n is None:
            return None
        ops = (op,) if isinstance(op, str) else op
        return n if self.view.nodes[n].op in ops else None

    def node(self, n: int) -> Node:
        return self.view.nodes[n]

    def constant_equal(self, value: str, number: float) -> bool:
        constant = self.view.constants.get(value)
        return constant is not None and np.size(constant) > 0 and bool(
            np.all(np.asarray(constant) == number))

    def is_constant(self, value: str) -> bool:
        return value in self.view.constants

    def square_of(self, value: str) -> tuple[int, str] | None:
        """(node, base) when ``value`` is base² (Pow by 2, Square, or Mul of a value by itself)."""
        n = self.producer(value, ("Pow", "Square", "Mul"))
        if n is None:
            return None
        node = self.node(n)
        if node.op == "Square":
            return n, node.inputs[0]
        if node.op == "Pow" and self.constant_equal(node.inputs[1], 2.0):
            return n, node.inputs[0]
        if node.op == "Mul" and node.inputs[0] == node.inputs[1]:
            return n, node.inputs[0]
        return None

    def consumers(self, value: str) -> list[int]:
        return list(self.view.consumer_indices.get(value, []))

    def normalised_by(self, root: str) -> list[int] | None:
        """The nodes of ``y / root`` or ``y * Reciprocal(root)`` for the one consumer chain
        of ``root`` (a Sqrt output): [Div] or [Reciprocal, Mul]."""
        users = self.consumers(root)
        if len(users) != 1:
            return None
        user = self.node(users[0])
        if user.op == "Div" and user.inputs[1] == root:
            return [users[0]]
        if user.op == "Reciprocal":
            after = self.consumers(user.outputs[0])
            if len(after) == 1 and self.node(after[0]).op == "Mul":
                return [users[0], after[0]]
        return None


def _norm_units(m: _Match) -> Iterator[Unit]:
    """rmsnorm and layernorm: from each ReduceMean of a square, up to the division."""
    for n, node in enumerate(m.view.nodes):
        if node.op != "ReduceMean" or node.attr("keepdims", 1) == 0:
            continue
        square = m.square_of(node.inputs[0])
        if square is None:
            continue
        square_node, base = square
        adds = m.consumers(node.outputs[0])
        if len(adds) != 1 or m.node(adds[0]).op != "Add":
            continue
        add = m.node(adds[0])
        eps = add.inputs[1] if add.inputs[0] == node.outputs[0] else add.inputs[0]
        roots = m.consumers(add.outputs[0])
        if not m.is_constant(eps) or len(roots) != 1 or m.node(roots[0]).op != "Sqrt":
            continue
        tail = m.normalised_by(m.node(roots[0]).outputs[0])
        if tail is None:
            continue
        members = {square_node, n, adds[0], roots[0], *tail}
        centre = m.producer(base, "Sub")
        if centre is not None:
            mean = m.producer(m.node(centre).inputs[1], "ReduceMean")
            if mean is not None and m.node(mean).inputs[0] == m.node(centre).inputs[0]:
                yield Unit("layernorm", frozenset({mean, centre, *members}))
                continue
        yield Unit("rmsnorm", frozenset(members))


def _rope_units(m: _Match) -> Iterator[Unit]:
    """x·cos + Concat(-x[..., h:], x[..., :h])·sin, in either operand order."""
    for n, node in enumerate(m.view.nodes):
        if node.op != "Add":
            continue
        muls = [m.producer(v, "Mul") for v in node.inputs]
        if None in muls or muls[0] == muls[1]:
            continue
        for plain, rotated in ((muls[0], muls[1]), (muls[1], muls[0])):
            found = _rotate_half(m, m.node(rotated))  # type: ignore[arg-type]
            if found is None:
                continue
            x, pieces = found
            if x not in m.node(plain).inputs:  # type: ignore[arg-type]
                continue
            members = {n, plain, rotated, *pieces}  # type: ignore[arg-type]
            yield Unit("rope", frozenset(members | _feeding_layout(m, x, members)))
            break


def _rotate_half(m: _Match, mul: Node) -> tuple[str, set[int]] | None:
    """(x, nodes) when an operand of ``mul`` is Concat(Neg(Slice(x)), Slice(x))."""
    for operand in mul.inputs:
        concat = m.producer(operand, "Concat")
        if concat is None or len(m.node(concat).inputs) != 2:
            continue
        first, second = m.node(concat).inputs
        neg = m.producer(first, "Neg")
        low = m.producer(second, "Slice")
        high = m.producer(m.node(neg).inputs[0], "Slice") if neg is not None else None
        if neg is None or low is None or high is None:
            continue
        x = m.node(low).inputs[0]
        if m.node(high).inputs[0] == x:
            return x, {concat, neg, low, high}
    return None


def _feeding_layout(m: _Match, value: str, members: set[int]) -> set[int]:
    """The layout operators (Reshape, Transpose, …) that produce ``value`` and feed only
    the unit: index arithmetic in its kernel instead of a stored copy."""
    added: set[int] = set()
    while True:
        n = m.view.producer_index.get(value)
        if n is None or role_of(m.node(n).op) != "layout":
            return added
        if any(c not in members | added for c in m.consumers(value)):
            return added
        added.add(n)
        value = m.view.data_inputs(m.node(n))[0]


def find_units(view: GraphView) -> list[Unit]:
    """Every unit of ``view``'s graph, disjoint, in graph order."""
    m = _Match(view)
    units: list[Unit] = []
    taken: set[int] = set()
    for unit in sorted([*_norm_units(m), *_rope_units(m)], key=lambda u: min(u.nodes)):
        if not unit.nodes & taken:
            units.append(unit)
            taken |= unit.nodes
    return units
