"""Data only: a PBQP instance (seed 000 §4.4.1, eq. 4.1) and its solution.

A `Problem` has one `Node` per fusion block / anchor operator whose options are
implementation × layout, each with its own cost (cycles, sector transactions, …:
one unit per problem), and one `Edge` per producer→consumer tensor whose matrix
gives the cost of bringing the producer's output (as its option writes it) into the
layout the consumer's option reads. ``INFEASIBLE`` (∞) marks an option or a pair no
kernel implements.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from egraph_compiler.ir.errors import DnnrError

INFEASIBLE = math.inf


class SelectError(DnnrError, ValueError):
    """A malformed or infeasible selection problem (a backend's cost model is wrong)."""


@dataclass(frozen=True, slots=True)
class Node:
    name: str
    options: tuple[str, ...]  # labels, e.g. "vrmpy>vmpa" or "perm [0, 2, 3, 1]"
    costs: tuple[float, ...]  # one per option

    def __post_init__(self) -> None:
        if len(self.options) != len(self.costs) or not self.options:
            raise SelectError(f"select: node {self.name!r} needs one cost per option "
                             f"({len(self.options)} options, {len(self.costs)} costs)")


@dataclass(frozen=True, slots=True)
class Edge:
    source: str  # the producer
    target: str  # the consumer
    costs: tuple[tuple[float, ...], ...]  # [source option][target option]
    tensor: str = ""


@dataclass(frozen=True, slots=True)
class Problem:
    nodes: tuple[Node, ...]
    edges: tuple[Edge, ...] = ()
    unit: str = "cost"

    def __post_init__(self) -> None:
        sizes = {n.name: len(n.options) for n in self.nodes}
        if len(sizes) != len(self.nodes):
            raise SelectError("select: two nodes share a name")
        for e in self.edges:
            if e.source not in sizes or e.target not in sizes:
                raise SelectError(f"select: edge {e.source}->{e.target} names an unknown node")
            if e.source == e.target:
                raise SelectError(f"select: edge {e.source}->{e.target} is a self-loop")
            if len(e.costs) != sizes[e.source] or any(len(r) != sizes[e.target] for r in e.costs):
                raise SelectError(f"select: edge {e.source}->{e.target}: matrix is not "
                                 f"{sizes[e.source]}x{sizes[e.target]}")

    def evaluate(self, picks: Mapping[str, int]) -> float:
        """Eq. 4.1: the operators' costs plus every edge's conversion cost."""
        total = sum(n.costs[picks[n.name]] for n in self.nodes)
        return total + sum(e.costs[picks[e.source]][picks[e.target]] for e in self.edges)


@dataclass(frozen=True)
class Selection:
    """The chosen option per node and the certificate: ``lower_bound`` ≤ the optimum ≤
    ``objective``; ``gap`` = objective − lower_bound (0: proved optimal)."""

    problem: Problem
    picks: dict[str, int]
    objective: float
    lower_bound: float
    solver: str
    seconds: float
    local_objective: float  # each node's cheapest option alone, conversions paid
    chain_objective: float | None  # eq. 4.2 along maximal chains (None: no edge)
    reductions: dict[str, int] = field(default_factory=dict)  # R0/R1/R2/RN/core counts
    policy: str = "pbqp"  # whose picks the backend applied (`applied`)
    applied: dict[str, int] | None = None  # None: the PBQP's own picks
    # verdicts of the nodes whose costs depend on symbolic dims (`symbolic.Dominance`)
    symbolic: tuple[Any, ...] = ()

    def with_symbolic(self, nodes: Sequence[Any], ranges: Mapping[str, tuple[int, int]]) -> Selection:
        """This selection with the verdict of every `symbolic.SymbolicNode` in ``nodes``."""
        from egraph_compiler.select.symbolic import analyse

        options = {n.name: n.options for n in self.problem.nodes}
        return replace(self, symbolic=analyse(options, nodes, ranges))

    @property
    def multi_version(self) -> tuple[str, ...]:
        """The nodes no single option is cheapest for over the declared dim ranges."""
        return tuple(d.node for d in self.symbolic if d.multi_version)

    def apply(self, policy: str) -> Selection:
        """This selection with ``policy``'s picks applied (see `policy_picks`)."""
        return replace(self, policy=policy, applied=self.policy_picks(policy))

    @property
    def chosen(self) -> dict[str, int]:
        return self.applied if self.applied is not None else self.picks

    @property
    def gap(self) -> float:
        return max(0.0, self.objective - self.lower_bound)

    def policy_picks(self, policy: str) -> dict[str, int]:
        """The picks of ``policy``: "pbqp" (this solution), "local" or "chain-dp" (the
        baselines, for measuring what the global choice gains); an infeasible one is an error."""
        from egraph_compiler.select.baselines import chain_dp_picks, local_picks

        table = {"pbqp": lambda: self.picks, "local": lambda: local_picks(self.problem),
                 "chain-dp": lambda: chain_dp_picks(self.problem)}
        if policy not in table:
            raise SelectError(f"select: unknown policy {policy!r} (choose one of {', '.join(table)})")
        picks = table[policy]()
        if math.isinf(self.problem.evaluate(picks)):
            raise SelectError(f"select: the {policy} choice is infeasible on this problem")
        return picks

    def label(self, node: str) -> str:
        n = next(n for n in self.problem.nodes if n.name == node)
        return n.options[self.chosen[node]]

    def to_json(self, decisions: bool = True) -> dict[str, Any]:
        """The report's ``select`` object."""
        def num(x: float | None) -> float | None | str:
            if x is None:
                return None
            return "infeasible" if math.isinf(x) else round(x, 3)

        doc: dict[str, Any] = {
            "solver": self.solver, "unit": self.problem.unit,
            "nodes": len(self.problem.nodes), "edges": len(self.problem.edges),
            "options": sum(len(n.options) for n in self.problem.nodes),
            "objective": num(self.objective), "lower_bound": num(self.lower_bound),
            "gap": num(self.gap), "local_objective": num(self.local_objective),
            "chain_dp_objective": num(self.chain_objective),
            "reductions": dict(self.reductions), "seconds": round(self.seconds, 4),
        }
        if self.symbolic:
            doc["multi_version"] = [
                {"node": d.node, "multi_version": d.multi_version,
                 "best": None if d.best is None else d.options[d.best],
                 "candidates": [d.options[i] for i in d.candidates], "reason": d.reason}
                for d in self.symbolic]
        if self.policy != "pbqp":
            doc["policy"] = self.policy
            doc["applied_objective"] = num(self.problem.evaluate(self.chosen))
        if decisions:
            doc["decisions"] = {n.name: {"option": n.options[self.chosen[n.name]],
                                         "cost": num(n.costs[self.chosen[n.name]])}
                                for n in self.problem.nodes}
        return doc


def edge(source: str, target: str, matrix: Sequence[Sequence[float]], tensor: str = "") -> Edge:
    return Edge(source, target, tuple(tuple(float(x) for x in row) for row in matrix), tensor)


def node(name: str, options: Sequence[str], costs: Sequence[float]) -> Node:
    return Node(name, tuple(options), tuple(float(c) for c in costs))
