"""The OpenCL backend's PBQP: the dimension order of every intermediate tensor.

One node per fusion block that stores an intermediate another block reads (or that
reads one): its options are the combinations of the orders its stored
intermediates may take (`fusion.layout.layout_options`: the identity and each
reduction consumer's preferred order), costing the producer's write in 32-byte
sector transactions. One edge per producer→consumer tensor: the consumer's read cost
given the order the producer's option stores it in, ∞ where the consumer's kernel
cannot read that order (the tiled Conv/MatMul/pool kernels read their operands in
their own layout; no conversion kernel exists, so no finite conversion is offered).
Today a consumer's lanes are fixed by its kernel kind, so the matrices do not depend
on the consumer's option and the solver folds them; the problem still decides every
intermediate at once, including those the per-tensor rule skipped (read by a
reduction and by a pointwise kernel).
"""

from __future__ import annotations

import itertools
from collections import defaultdict

from egraph_compiler.fusion import (
    FusionPlan,
    LayoutChoice,
    TensorLayoutOptions,
    block_structures,
    layout_options,
    relayout,
)
from egraph_compiler.fusion.layout import describe
from egraph_compiler.fusion.view import GraphView
from egraph_compiler.select.problem import Problem, Selection, edge, node
from egraph_compiler.select.solver import solve

MAX_COMBINATIONS = 64  # per block; further stored outputs keep row-major


def layout_problem(plan: FusionPlan) -> tuple[Problem, dict[str, list[tuple[TensorLayoutOptions, list[int]]]]]:
    """The PBQP of ``plan``'s intermediates and, per node, each stored tensor's
    candidate index under each option."""
    structures = block_structures(plan)
    tensors = layout_options(GraphView(plan.graph), structures)
    stored: dict[int, list[TensorLayoutOptions]] = defaultdict(list)
    for t in tensors:
        stored[t.producer].append(t)
    blocks = sorted(set(stored) | {c for t in tensors for c, _ in t.reads})
    names = {b: f"block{b}:{structures[b][1].kind}" for b in blocks}
    nodes, columns = [], {}
    for b in blocks:
        ranges, count = [], 1
        for t in stored.get(b, []):
            ranges.append(range(len(t.candidates)) if count * len(t.candidates) <= MAX_COMBINATIONS
                          else range(1))
            count *= len(ranges[-1])
        combos = list(itertools.product(*ranges))
        outs = stored.get(b, [])
        labels = ["; ".join(f"{t.value} {list(t.candidates[k])}" for t, k in zip(outs, combo, strict=True))
                  or "reads only" for combo in combos]
        costs = [sum(t.write[k] for t, k in zip(outs, combo, strict=True)) for combo in combos]
        nodes.append(node(names[b], labels, costs))
        columns[names[b]] = [(t, [combo[i] for combo in combos]) for i, t in enumerate(outs)]
    option_count = {n.name: len(n.options) for n in nodes}
    edges = []
    for t in tensors:
        source = names[t.producer]
        pick_of = next(ks for s, ks in columns[source] if s is t)
        for c, reads in t.reads:
            edges.append(edge(source, names[c], [[reads[k]] * option_count[names[c]] for k in pick_of],
                              tensor=t.value))
    return Problem(tuple(nodes), tuple(edges), unit="sector transactions"), columns


def select_layouts(plan: FusionPlan, time_limit: float = 1.0, policy: str = "pbqp"
                   ) -> tuple[FusionPlan, Selection]:
    """``plan`` with every intermediate stored in the order the PBQP chose, and the
    selection; ``policy`` "local" or "chain-dp" applies that baseline's picks instead."""
    problem, columns = layout_problem(plan)
    selection = solve(problem, time_limit).apply(policy)
    picks = selection.chosen
    structures = block_structures(plan)
    choices = []
    for name, stored in columns.items():
        for t, ks in stored:
            k = ks[picks[name]]

            def cost(j: int, t: TensorLayoutOptions = t) -> float:
                return t.write[j] + sum(r[j] for _, r in t.reads)
            choices.append(LayoutChoice(t.value, t.candidates[k],
                                        describe(t, k, structures, cost) + f" ({policy}: {selection.solver})"))
    return relayout(plan, choices), selection
