"""The OpenCL backend's PBQP: each block's implementation × the dimension order of
every intermediate it stores.

One node per fusion block that has an implementation choice (a conv/matmul anchor's
kernel variants and their parameters, priced by the backend: `Pricing`), constants it
may read as ``image2d_t``, stores an intermediate another block reads, or reads one.
Its options are the implementation × buffers or images for those constants × the
combinations of the orders its stored intermediates may take
(`fusion.layout.layout_options`: the identity and each reduction consumer's
preferred order); an option's cost is the implementation's plus the producer's
writes (32-byte sector transactions, converted to the problem's unit). One edge per
producer→consumer tensor: the consumer's read cost given the order the producer's
option stores it in; where the consumer's kernel cannot read that order (the tiled
Conv/MatMul/pool kernels read their operands row-major), a conversion kernel's
launch plus its sectors (`conversions`), or ∞ when the backend has none.
Blocked NCHWc (`fusion.index.Blocked`, c = 4 / 8 / 16) is a candidate of every 4-D
intermediate a conv reads, and a conv's blocked kernels (`Pricing.blocked`: the
backend's NCHW{c}c and RGBA-image implementations) read their data input only in their
own layout: on those edges the matrix depends on the consumer's option too — the padded
read where the producer's option stores that layout, else a conversion kernel into it
(launch + sectors, `conversions.conversion_sectors` with a blocked target). A padded
NCHWc output is infeasible for a conv option other than a blocked one (only that
kernel writes the padded lanes zero). Elsewhere a consumer's lanes are fixed by its
kernel kind, so the matrices depend only on the producer's option and the solver folds
them.
"""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from egraph_compiler.fusion import (
    FusionPlan,
    LayoutChoice,
    TensorLayoutOptions,
    block_structures,
    layout_options,
    relayout,
)
from egraph_compiler.fusion.index import Blocked, stored_numel
from egraph_compiler.fusion.layout import describe, padded
from egraph_compiler.fusion.view import GraphView
from egraph_compiler.select.conversions import Conversion, conversion_sectors, insert_conversions
from egraph_compiler.select.problem import INFEASIBLE, Problem, Selection, edge, node
from egraph_compiler.select.solver import solve

MAX_COMBINATIONS = 64  # per block; further stored outputs keep row-major
MAX_OPTIONS = 512  # implementations × layouts per block: the cheapest implementations kept


@dataclass(frozen=True)
class Pricing:
    """What a backend adds to the sector-transaction model: the problem's ``unit``, the
    cost of one sector transaction in it, each block's implementation options
    (block id -> (label, cost)) and a conversion kernel's launch cost (None: the backend
    has no conversion kernel, so an order a consumer cannot read is infeasible)."""

    unit: str = "sector transactions"
    per_sector: float = 1.0
    implementations: Mapping[int, Sequence[tuple[str, float]]] = field(default_factory=dict)
    conversion_launch: float | None = None
    # blocks whose constant inputs may be read as image2d_t: block id -> (cost of those
    # reads from buffers, from images)
    images: Mapping[int, tuple[float, float]] = field(default_factory=dict)
    # conv implementations that read their data input in blocked NCHWc (from a buffer or an
    # RGBA image) and write the padded lanes of a blocked output zero: block id ->
    # {implementation label: the layout it reads its data input in}
    blocked: Mapping[int, Mapping[str, Blocked]] = field(default_factory=dict)
    # a forced policy: "nchwc" keeps only the blocked implementations reading buffers,
    # "images" only those reading RGBA images, where one applies ("": no forcing)
    force: str = ""


@dataclass(frozen=True)
class NodeColumns:
    """How a PBQP node's options decompose: per option, the implementation label and,
    per stored tensor, its candidate index."""

    block: int  # block id
    implementation: tuple[str, ...]
    images: tuple[bool | None, ...]  # constants as image2d_t (None: no such choice)
    stored: tuple[tuple[TensorLayoutOptions, tuple[int, ...]], ...]


def layout_problem(plan: FusionPlan, pricing: Pricing | None = None
                   ) -> tuple[Problem, dict[str, NodeColumns]]:
    """The PBQP of ``plan``'s blocks (implementation × the orders of the intermediates
    they store) and, per node, how its options decompose."""
    pricing = pricing or Pricing()
    structures = block_structures(plan)
    view = GraphView(plan.graph)
    tensors = layout_options(view, structures, blocked=bool(pricing.blocked))
    stored: dict[int, list[TensorLayoutOptions]] = defaultdict(list)
    read_as_data = {(c, t.value) for t in tensors for c, _ in t.reads
                    if _data_input(view, structures[c][1]) == t.value}
    for t in tensors:
        stored[t.producer].append(t)
    position = {b.id: k for k, b in enumerate(plan.blocks)}
    with_choice = {position[i] for i, impls in pricing.implementations.items() if impls} | \
        {position[i] for i in pricing.images}
    blocks = sorted(set(stored) | {c for t in tensors for c, _ in t.reads} | with_choice)
    names = {b: f"block{plan.blocks[b].id}:{structures[b][1].kind}" for b in blocks}
    nodes, columns = [], {}
    for b in blocks:
        ranges, count = [], 1
        for t in stored.get(b, []):
            ranges.append(range(len(t.candidates)) if count * len(t.candidates) <= MAX_COMBINATIONS
                          else range(1))
            count *= len(ranges[-1])
        combos = list(itertools.product(*ranges))
        outs = stored.get(b, [])
        block_id = plan.blocks[b].id
        storage: list[tuple[bool | None, float]] = [(None, 0.0)]
        if block_id in pricing.images:
            storage = [(False, pricing.images[block_id][0]), (True, pricing.images[block_id][1])]
        blocked = pricing.blocked.get(block_id, {})
        # a blocked conv needs its data input to be an intermediate the selection lays out
        impls = sorted((o for o in pricing.implementations.get(block_id, ())
                        if o[0] not in blocked or (b, _data_input(view, structures[b][1])) in read_as_data),
                       key=lambda o: o[1])
        forced = [o for o in impls if o[0] in blocked and blocked[o[0]].image == (pricing.force == "images")]
        if pricing.force and forced:
            impls = forced
        impls = impls[:max(1, MAX_OPTIONS // (len(combos) * len(storage)))] or [("", 0.0)]
        labels, costs, picked, layout_of, images = [], [], [], [], []
        for (label, impl_cost), (image, read_cost) in itertools.product(impls, storage):
            for combo in combos:
                layout = "; ".join(f"{t.value} {list(t.candidates[k])}"
                                   for t, k in zip(outs, combo, strict=True)) or "reads only"
                parts = [label] if label else []
                parts += [] if image is None else ["constants as image2d_t" if image else "constants as buffers"]
                labels.append(" | ".join([*parts, layout]))
                # a padded NCHWc output: its lanes past the channels are zero only where
                # the kernel writes them (a conv through its blocked kernel)
                # and an RGBA image output only where the kernel writes whole texels (a
                # blocked conv of block 4)
                unwritten = structures[b][1].kind == "conv" and any(
                    (label not in blocked and padded(view.shape(t.value), t.candidates[k])) or
                    (getattr(t.candidates[k], "image", False) and
                     (label not in blocked or blocked[label].block != 4))
                    for t, k in zip(outs, combo, strict=True))
                costs.append(INFEASIBLE if unwritten else impl_cost + read_cost + pricing.per_sector *
                             sum(t.write[k] for t, k in zip(outs, combo, strict=True)))
                picked.append(label)
                images.append(image)
                layout_of.append(combo)
        # an option no kernel can run (a padded or image output its kernel would not
        # write) never wins: dropped, so the edge matrices stay small
        keep = [j for j, c in enumerate(costs) if not math.isinf(c)] or list(range(len(costs)))
        labels, costs = [labels[j] for j in keep], [costs[j] for j in keep]
        picked, images = [picked[j] for j in keep], [images[j] for j in keep]
        layout_of = [layout_of[j] for j in keep]
        nodes.append(node(names[b], labels, costs))
        columns[names[b]] = NodeColumns(block_id, tuple(picked), tuple(images), tuple(
            (t, tuple(combo[i] for combo in layout_of)) for i, t in enumerate(outs)))
    edges = []
    for t in tensors:
        source = names[t.producer]
        pick_of = next(ks for s, ks in columns[source].stored if s is t)
        shape = view.shape(t.value)
        for c, reads in t.reads:
            target = names[c]
            blocked = pricing.blocked.get(plan.blocks[c].id, {})
            # the layout the consumer reads t in per option (None: it reads like its kind)
            wants = [blocked.get(label) if (c, t.value) in read_as_data else None
                     for label in columns[target].implementation]
            rows = {want: [_read_cost(t, shape, reads, k, pricing, want) for k in range(len(t.candidates))]
                    for want in set(wants)}
            edges.append(edge(source, target, [[rows[want][k] for want in wants] for k in pick_of],
                              tensor=t.value))
    return Problem(tuple(nodes), tuple(edges), unit=pricing.unit), columns


def _data_input(view: GraphView, structure) -> str | None:
    """The data input of a conv block's anchor (what its blocked kernel reads as NCHWc)."""
    if structure.kind != "conv" or structure.anchor is None:
        return None
    return view.nodes[structure.anchor].inputs[0]


def _read_cost(t: TensorLayoutOptions, shape: tuple[int, ...], reads: tuple[float, ...], k: int,
               pricing: Pricing, wanted: Blocked | None = None) -> float:
    """A consumer's cost of reading ``t`` stored as candidate ``k``: its own read, or
    where its kernel cannot read that order, a conversion kernel (launch, its reads and
    writes) and the consumer's row-major read. ``wanted``: the consumer is a blocked conv
    reading ``t`` as its data input in that layout only (NCHW{b}c, or an RGBA image):
    one contiguous read of the padded tensor (an image's price is the implementation's),
    or a conversion into that layout first."""
    if getattr(t.candidates[k], "image", False) and t.candidates[k] != wanted:
        return INFEASIBLE  # an image is read only by a kernel taking that image (no conversion out)
    if wanted is not None:
        layout = wanted
        stored = float(stored_numel(shape, layout))
        if t.candidates[k] == layout:
            return pricing.per_sector * stored
        if pricing.conversion_launch is None:
            return INFEASIBLE
        sectors = conversion_sectors(shape, t.candidates[k], layout) + stored
        return pricing.conversion_launch + pricing.per_sector * sectors
    if not math.isinf(reads[k]):
        return pricing.per_sector * reads[k]
    if pricing.conversion_launch is None:
        return INFEASIBLE
    sectors = conversion_sectors(shape, t.candidates[k]) + reads[0]
    return pricing.conversion_launch + pricing.per_sector * sectors


def select_layouts(plan: FusionPlan, time_limit: float = 1.0, policy: str = "pbqp",
                   pricing: Pricing | None = None) -> tuple[FusionPlan, Selection]:
    """``plan`` with every intermediate stored in the order the PBQP chose, each block's
    chosen implementation (`Block.implementation`), and a conversion block wherever a
    consumer cannot read the chosen order; and the selection. ``policy`` "local" or
    "chain-dp" applies that baseline's picks instead."""
    problem, columns = layout_problem(plan, pricing)
    selection = solve(problem, time_limit).apply(policy)
    picks = selection.chosen
    structures = block_structures(plan)
    choices, conversions = [], []
    implementation: dict[int, str] = {}
    images: dict[int, bool | None] = {}
    for name, cols in columns.items():
        implementation[cols.block] = cols.implementation[picks[name]]
        images[cols.block] = cols.images[picks[name]]
    view = GraphView(plan.graph)
    for name, cols in columns.items():
        for t, ks in cols.stored:
            k = ks[picks[name]]

            def cost(j: int, t: TensorLayoutOptions = t) -> float:
                return t.write[j] + sum(r[j] for _, r in t.reads)
            choices.append(LayoutChoice(t.value, t.candidates[k],
                                        describe(t, k, structures, cost) + f" ({policy}: {selection.solver})"))
            for c, reads in t.reads:
                consumer = plan.blocks[c].id
                target = (pricing.blocked.get(consumer, {}).get(implementation.get(consumer, ""))
                          if pricing is not None and _data_input(view, structures[c][1]) == t.value
                          else None)
                if target is not None:  # a blocked conv reads its data input in NCHW{b}c
                    if t.candidates[k] != target:
                        conversions.append(Conversion(t.value, t.candidates[k], consumer, target=target))
                elif math.isinf(reads[k]):
                    conversions.append(Conversion(t.value, t.candidates[k], consumer))
    plan = replace(plan, blocks=tuple(replace(b, implementation=implementation.get(b.id, ""),
                                              images=images.get(b.id)) for b in plan.blocks))
    plan, named = insert_conversions(plan, conversions)
    choices += [LayoutChoice(c.copy, c.target, f"conversion of {c.value} ({list(c.perm)}) into "
                             f"{list(c.target)} for block {c.consumer}'s blocked conv ({policy})")
                for c in named if c.target is not None]
    return relayout(plan, choices), selection
