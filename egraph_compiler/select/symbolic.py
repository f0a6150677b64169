"""Options whose costs depend on symbolic dims: compare them over the declared ranges.

An option dominates when the shapes prover (canonical form, then Z3 over the symbol
ranges) proves its cost ≤ every other option's for all values of the symbols. Where
none does, no single choice is right for every shape: the block is a multi-version
candidate, and `Dominance` says which options are cheapest somewhere (each one not
proved ≥ some other everywhere) so a dispatcher can keep only those.

`analyse` gives the verdict of every node a backend marks symbolic (`SymbolicNode`):
Dim-valued costs go to the prover (Z3 over the ranges); a cost model that is a function
of the symbols' values (the OpenCL one, which counts whole waves) is evaluated at every
assignment within the ranges. The verdicts are plain data in `Selection.multi_version`
and the report's ``select.multi_version``; the static choice at the compiled shape is
still the PBQP's.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from egraph_compiler.ir.dims import Dim, DimExpr, dim_str
from egraph_compiler.ir.graph import Graph
from egraph_compiler.shapes.prover import prove_le


@dataclass(frozen=True)
class Dominance:
    node: str
    options: tuple[str, ...]
    best: int | None  # the option proved cheapest for every shape; None: none is
    candidates: tuple[int, ...]  # options that no other option is proved to beat everywhere
    reason: str

    @property
    def multi_version(self) -> bool:
        return self.best is None


def dominance(node: str, options: Sequence[str], costs: Sequence[Dim],
              ranges: Mapping[str, tuple[int, int]]) -> Dominance:
    """Which of ``options`` (costs over symbols in ``ranges``) is cheapest for every shape."""
    k = len(options)
    le = [[i == j or prove_le(costs[i], costs[j], ranges) for j in range(k)] for i in range(k)]
    best = next((i for i in range(k) if all(le[i])), None)
    # i is beaten everywhere when some j is proved ≤ i and not proved equal to it
    beaten = {i for i in range(k) for j in range(k) if j != i and le[j][i] and not le[i][j]}
    candidates = (best,) if best is not None else tuple(i for i in range(k) if i not in beaten)
    span = ", ".join(f"{s} in [{lo}, {hi}]" for s, (lo, hi) in sorted(ranges.items()))
    if best is not None:
        reason = f"{options[best]} ({dim_str(costs[best])}) is cheapest for every {span}"
    else:
        names = ", ".join(f"{options[i]} ({dim_str(costs[i])})" for i in candidates)
        reason = f"no option is cheapest for every {span}: multi-version candidate over {names}"
    return Dominance(node, tuple(options), best, candidates, reason)


@dataclass(frozen=True)
class SymbolicNode:
    """A PBQP node whose option costs depend on symbolic dims: ``costs`` (Dims, one per
    option, in the node's order; Z3 compares them) or ``cost_at`` (the backend's cost
    model evaluated at one assignment of the symbols; compared at every point of the
    ranges, which is a proof over integer ranges), with the note what the costs cover."""

    node: str
    costs: tuple[Dim, ...] = ()
    cost_at: Callable[[dict[str, int]], Any] | None = None
    symbols: tuple[str, ...] = ()  # what ``cost_at`` depends on
    # ``cost_at`` returns {option label: cost} of options of its own (an anchor's kernel
    # variants, which differ per shape), not costs of the PBQP node's options
    labelled: bool = False


MAX_POINTS = 4096  # assignments enumerated for a `cost_at` node; more: undecided


def enumerated_dominance(node: str, options: Sequence[str],
                         cost_at: Callable[[dict[str, int]], Sequence[float]],
                         ranges: Mapping[str, tuple[int, int]]) -> Dominance:
    """`dominance` for a cost model that is a black box of the symbols: evaluated at
    every assignment within ``ranges`` (exact over the integers); past ``MAX_POINTS``
    assignments nothing is proved and every option stays a candidate."""
    names = sorted(ranges)
    points = _points(ranges)
    span = ", ".join(f"{s} in [{lo}, {hi}]" for s, (lo, hi) in sorted(ranges.items()))
    k = len(options)
    if points > MAX_POINTS:
        return Dominance(node, tuple(options), None, tuple(range(k)),
                         f"{points} assignments of {span}: too many to compare, multi-version candidate "
                         "over every option")
    winners: set[int] = set()
    always = set(range(k))
    for values in itertools.product(*(range(ranges[s][0], ranges[s][1] + 1) for s in names)):
        costs = list(cost_at(dict(zip(names, values, strict=True))))
        low = min(costs)
        best_here = {i for i, c in enumerate(costs) if c <= low * (1 + 1e-12)}
        winners |= {min(best_here)}
        always &= best_here
    if always:
        best = min(always)
        return Dominance(node, tuple(options), best, (best,),
                         f"{options[best]} is cheapest for every {span} (all {points} evaluated)")
    candidates = tuple(sorted(winners))
    names_text = ", ".join(options[i] for i in candidates)
    return Dominance(node, tuple(options), None, candidates,
                     f"no option is cheapest for every {span} (all {points} evaluated): "
                     f"multi-version candidate over {names_text}")


def _points(ranges: Mapping[str, tuple[int, int]]) -> int:
    count = 1
    for low, high in ranges.values():
        count *= high - low + 1
    return count


def _labelled_dominance(s: SymbolicNode, ranges: Mapping[str, tuple[int, int]]) -> Dominance:
    """`enumerated_dominance` over the union of the labels ``s.cost_at`` returns (an option
    missing at some assignment costs ∞ there)."""
    assert s.cost_at is not None
    if _points(ranges) > MAX_POINTS:  # the labels at one corner, all left undecided
        corner = s.cost_at({n: lo for n, (lo, _) in ranges.items()})
        return enumerated_dominance(s.node, list(corner), lambda _: [], ranges)
    names = sorted(ranges)
    table = {values: s.cost_at(dict(zip(names, values, strict=True)))
             for values in itertools.product(*(range(lo, hi + 1) for lo, hi in
                                               (ranges[n] for n in names)))}
    labels: list[str] = []
    for costs in table.values():
        labels += [label for label in costs if label not in labels]
    return enumerated_dominance(
        s.node, labels, lambda env: [table[tuple(env[n] for n in names)].get(label, math.inf)
                                     for label in labels], ranges)


def analyse(problem_nodes: Mapping[str, Sequence[str]], symbolic: Sequence[SymbolicNode],
            ranges: Mapping[str, tuple[int, int]]) -> tuple[Dominance, ...]:
    """The verdict of every symbolic node (``problem_nodes``: node -> option labels)."""
    result = []
    for s in symbolic:
        options = problem_nodes[s.node]
        used = {name: ranges[name] for name in sorted(ranges)
                if any(name in getattr(c, "symbols", lambda: set())() for c in s.costs)} \
            if s.costs else {name: ranges[name] for name in s.symbols}
        if s.costs:
            if any(set(getattr(c, "symbols", lambda: set())()) - set(ranges) for c in s.costs):
                continue  # a cost over a dim without a declared range: nothing to compare over
            result.append(dominance(s.node, options, s.costs, used))
        elif s.cost_at is not None and s.labelled:
            result.append(_labelled_dominance(s, used))
        elif s.cost_at is not None:
            result.append(enumerated_dominance(s.node, options, s.cost_at, used))
    return tuple(result)


def binding(static: Graph, symbolic: Graph) -> dict[str, int]:
    """The symbol values ``static`` was bound with (read off the graphs' input dims)."""
    env: dict[str, int] = {}
    for s_value, b_value in zip(symbolic.inputs, static.inputs, strict=False):
        for dim, bound in zip(s_value.type.shape or (), b_value.type.shape or (), strict=False):
            if isinstance(dim, DimExpr) and isinstance(bound, int) and str(dim) in dim.symbols():
                env[str(dim)] = bound
    return env
