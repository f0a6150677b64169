"""DNNFusion's fusion plan exploration (seed 000 §3.4.3, Listing 3.1).

Step I picks a seed: the unfused One-to-One operator with the smallest
intermediate result (then Reorganize/Shuffle ones, then the rest — so layout
operators are eliminated into their neighbours, SmartMem Table 5, and no
operator is left without a block). Step II walks successors, Step III
predecessors; each candidate is checked against the fusion table (green fuses,
red stops, yellow asks the profile database or the cost model) and against the
constraint check (`structure.analyse`: one anchor, a one-to-one spine, register
and input limits, no cycle between blocks).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from egraph_compiler.fusion import index as ix
from egraph_compiler.fusion.blocks import Block, Decision, FusionPlan
from egraph_compiler.fusion.epilogues import left_to_anchor, stored_verdict
from egraph_compiler.fusion.layout import LayoutChoice, select_layouts
from egraph_compiler.fusion.profile_db import CostModel, ProfileDb, profile_key
from egraph_compiler.fusion.projections import merge_projections
from egraph_compiler.fusion.recompute import broadcast_verdict, merged_recompute
from egraph_compiler.fusion.splits import split_as_slices
from egraph_compiler.fusion.structure import ROW_REDUCE_OPS, BlockStructure, analyse
from egraph_compiler.fusion.tables import (
    BREAK,
    FUSE,
    MANY_TO_MANY,
    ONE_TO_MANY,
    ONE_TO_ONE,
    PROFILE,
    REORGANIZE,
    SHUFFLE,
    FusionTables,
    anchor_kind,
    compile_time,
    role_of,
)
from egraph_compiler.fusion.units import Unit, find_units
from egraph_compiler.fusion.view import GraphView
from egraph_compiler.ir.errors import ModelError
from egraph_compiler.ir.graph import Graph
from egraph_compiler.ops.evaluate import (
    NEVER_FOLD,
    can_evaluate,
    evaluate_node,
    with_constant_operands_as_attrs,
)
from egraph_compiler.shapes.symint import proved_equal


def fold_compile_time(graph: Graph) -> Graph:
    """Evaluate shape computations and constant-only nodes once, at compile time."""
    constants = dict(graph.constants)
    kept = []
    for node in graph.nodes:
        data = [v for v in node.inputs if v]
        shape_of = node.op in ("Shape", "Size") and data and _static(graph, data[0])
        if compile_time(node.op) or shape_of or (data and all(v in constants for v in data)):
            # a static shape is all Shape and Size read: a zero-stride stand-in of that shape
            args = [np.broadcast_to(np.uint8(0), graph.types[data[0]].shape)] if shape_of else [
                constants.get(v) if v else None for v in node.inputs]
            unknown = not can_evaluate(node.op) or node.op in NEVER_FOLD  # left to a kernel
            if unknown or any(a is None for a, v in zip(args, node.inputs, strict=False) if v):
                kept.append(node)
                continue
            values = evaluate_node(node.op, node.attrs, args, len(node.outputs))
            for name, value in zip(node.outputs, values, strict=False):
                if name:
                    constants[name] = np.asarray(value)
            continue
        kept.append(with_constant_operands_as_attrs(node, constants))
    return replace(graph, nodes=tuple(kept), constants=constants)


def _static(graph: Graph, value: str) -> bool:
    tensor_type = graph.types.get(value)
    return tensor_type is not None and tensor_type.shape is not None and all(
        isinstance(d, int) for d in tensor_type.shape)


class _Planner:
    def __init__(self, view: GraphView, tables: FusionTables, profile_db: ProfileDb | None,
                 cost: CostModel) -> None:
        self.view, self.tables, self.db, self.cost = view, tables, profile_db, cost
        self.block_of: dict[int, int] = {}
        self.decisions: list[Decision] = []
        self.units: list[Unit] = []

    # -- mapping types per edge ------------------------------------------------
    def node_mapping(self, n: int) -> str:
        node = self.view.nodes[n]
        mapping = self.tables.mapping_of(node.op)
        if mapping == ONE_TO_ONE and role_of(node.op) == "elementwise":
            out = self.view.numel(node.outputs[0])
            for v in self.view.data_inputs(node):
                # an equality of symbolic sizes counts only when proved for every shape
                if v not in self.view.constants and not proved_equal(self.view.numel(v), out):
                    return ONE_TO_MANY
        return mapping

    def edge_mapping(self, n: int, source: str) -> str:
        """Mapping type of node ``n`` seen from its input ``source`` (DNNFusion: an
        elementwise op is One-to-Many only for its broadcast operand)."""
        node = self.view.nodes[n]
        mapping = self.tables.mapping_of(node.op)
        if mapping in (ONE_TO_ONE, ONE_TO_MANY) and role_of(node.op) == "elementwise":
            same = proved_equal(self.view.numel(source), self.view.numel(node.outputs[0]))
            return ONE_TO_ONE if same else ONE_TO_MANY
        return mapping

    # -- Listing 3.1 -------------------------------------------------------------
    def seed_order(self, unfused: set[int]) -> int:
        def priority(n: int) -> tuple[int, int, int]:
            mapping = self.node_mapping(n)
            group = 0 if mapping == ONE_TO_ONE else 1 if mapping in (REORGANIZE, SHUFFLE) else 2
            return group, self.view.output_size(n), n
        return min(unfused, key=priority)

    def try_add(self, block: set[int], block_type: list[str], candidate: int, first: str,
                second: str, via: str, block_id: int, edge: tuple[int, int]) -> bool:
        result, verdict = self.tables.verdict(first, second)
        label = f"{self.view.nodes[candidate].op}:{candidate}"
        if verdict == BREAK or result is None:
            self.decisions.append(Decision(block_id, label, BREAK, f"{first} then {second}"))
            return False
        shape = self.structure(frozenset(block | {candidate}), self.block_of)
        if isinstance(shape, str):
            self.decisions.append(Decision(block_id, label, "constraint", shape))
            return False
        left = left_to_anchor(self.view, self.cost, candidate, via, block, self.block_of) \
            if shape.anchor is None and edge[1] == candidate else None
        if left is not None:  # a successor the MatMul/Conv's epilogue computes cheaper
            # (not a "profile" verdict: `dnnr tune` measures those pairs by key)
            self.decisions.append(Decision(block_id, label, "constraint", left))
            return False
        if verdict == FUSE and self.cost.prologue_reuse is not None and \
                self.prologue_of(block, candidate, shape):
            verdict = PROFILE  # the anchor's kernel re-evaluates it: fuse where it pays
        priced = broadcast_verdict(self.view, self.cost, self.db, block, candidate, via) \
            if verdict == FUSE and shape.anchor is None else None
        if priced is not None:  # a broadcast read re-evaluates the block per element
            verdict = PROFILE
        if verdict == PROFILE:
            key = self.profile_key(block, candidate, via, shape)
            fuse, source = priced or self.profitable(key, candidate, via, shape, block)
            reason = f"{first} then {second}: {source} says {'fuse' if fuse else 'not profitable'}"
            self.decisions.append(Decision(block_id, label, PROFILE, reason, key, edge))
            if not fuse:
                return False
        else:
            self.decisions.append(Decision(block_id, label, verdict, f"{first} then {second}"))
        block.add(candidate)
        block_type[0] = result
        return True

    def structure(self, members: frozenset[int], others: dict[int, int]) -> BlockStructure | str:
        """`structure.analyse`, and whether this backend stores a row input here
        (`fusion.epilogues`): a block the planner may form, or the reason not."""
        shape = analyse(self.view, members, others)
        if isinstance(shape, str):
            return shape
        refused = stored_verdict(self.view, self.cost, shape, members, self.block_of)
        return refused if refused is not None else shape

    def prologue_of(self, block: set[int], candidate: int, shape: BlockStructure) -> list[int]:
        """The prologue operators this step fuses into an anchor: the candidate when it
        joins a prologue, or the block's prologue when the candidate is the anchor."""
        if shape.anchor is None:
            return []
        if candidate in shape.prologue:
            return [candidate]
        if candidate == shape.anchor:
            return [n for n in shape.prologue if n in block]
        return []

    def profile_key(self, block: set[int], candidate: int, via: str,
                    shape: BlockStructure) -> str:
        anchor = shape.anchor
        reference = self.view.nodes[anchor if anchor is not None else max(block)].op
        fused = candidate
        if self.cost.prologue_reuse is not None and candidate == anchor and \
                self.prologue_of(block, candidate, shape):
            fused = self.view.producer_index.get(via, candidate)  # the prologue's last op
        return profile_key(self.view.nodes[fused].op, reference, self.view.numel(via))

    def profitable(self, key: str, candidate: int, via: str,
                   shape: BlockStructure, block: set[int] | None = None) -> tuple[bool, str]:
        """The yellow verdict and what decided it (``profile db`` or ``cost model``)."""
        if self.db is not None:
            known = self.db.lookup(key)
            if known is not None:
                return known, "profile db"
        anchor = shape.anchor
        numel = self.view.numel(via)
        prologue = self.prologue_of(block or set(), candidate, shape) \
            if self.cost.prologue_reuse is not None else \
            ([candidate] if anchor is not None and candidate in shape.prologue else [])
        work = prologue or [candidate]
        flops = sum(0.0 if role_of(self.view.nodes[n].op) == "layout" else
                    float(self.view.output_size(n)) for n in work)
        reuse = 1.0
        if anchor is not None and prologue:
            known = self.cost.prologue_reuse(self.view, anchor) \
                if self.cost.prologue_reuse is not None else None
            reuse = known if known is not None else _reuse_factor(self.view, anchor)
        nbytes = numel * 4
        return self.cost.fuse_is_profitable(nbytes, flops, reuse), "cost model"

    def fuse_neighbour(self, op: int, other: int, block: set[int], block_type: list[str],
                       unfused: set[int], block_id: int, forward: bool) -> None:
        """Add ``other``, a successor of ``op`` (``forward``) or a predecessor, to ``block``
        where the fusion table allows, then its own successors (predecessors) likewise."""
        if other in block or other not in unfused:
            return
        first, second = (op, other) if forward else (other, op)
        via = next(v for v in self.view.nodes[first].outputs if v in self.view.nodes[second].inputs)
        types = (block_type[0], self.edge_mapping(other, via)) if forward else (self.node_mapping(other), block_type[0])
        if not self.try_add(block, block_type, other, *types, via, block_id, (first, second)):
            return
        for nxt in (self.view.successors if forward else self.view.predecessors)(other):
            self.fuse_neighbour(other, nxt, block, block_type, unfused, block_id, forward)

    def merge_row_groups(self, blocks: list[set[int]]) -> list[set[int]]:
        """Merge neighbouring blocks whose union is a row group (`structure` docstring):
        Table 3.3 keeps Many-to-Many after Many-to-Many apart, but reductions over the
        same rows share one work-group, so LayerNorm written out as nine operators is
        one kernel again. Repeats until no pair merges."""
        eligible = [all(self.view.nodes[n].op in ROW_REDUCE_OPS or
                        role_of(self.view.nodes[n].op) == "elementwise" for n in b)
                    for b in blocks]
        merged = True
        while merged:
            merged = False
            owner = {n: k for k, b in enumerate(blocks) for n in b}
            for i, j in _neighbour_pairs(self.view, blocks, owner):
                if not (eligible[i] and eligible[j]):
                    continue
                union = frozenset(blocks[i] | blocks[j])
                others = {n: (k if k not in (i, j) else -1) for n, k in owner.items()}
                shape = analyse(self.view, union, others)
                if isinstance(shape, str) or shape.kind != "rowgroup":
                    continue
                ops = "+".join(self.view.nodes[n].op for n in sorted(blocks[j]))
                self.decisions.append(Decision(i, ops, FUSE, "row group: reductions over the "
                                               "same rows share one work-group"))
                blocks[i] = set(union)
                del blocks[j], eligible[j]
                merged = True
                break
        return blocks

    def fused_type(self, members: set[int]) -> str:
        """The fused mapping type of ``members`` (Table 3.3 folded in node order)."""
        ordered = sorted(members)
        fused = self.node_mapping(ordered[0])
        for n in ordered[1:]:
            result, _ = self.tables.verdict(fused, self.node_mapping(n))
            fused = result or MANY_TO_MANY
        return fused

    def grow(self, block: set[int], block_type: list[str], unfused: set[int],
             block_id: int) -> None:
        """Listing 3.1 steps II and III from every member of ``block``."""
        for member in sorted(block):
            for succ in self.view.successors(member):
                self.fuse_neighbour(member, succ, block, block_type, unfused, block_id, True)
        for member in sorted(block):
            for pred in self.view.predecessors(member):
                self.fuse_neighbour(member, pred, block, block_type, unfused, block_id, False)

    def seed_units(self, unfused: set[int], blocks: list[set[int]]) -> None:
        """Form each unit's block first (`fusion.units`), then grow it like any block."""
        self.units = find_units(self.view)
        for unit in self.units:
            block_id = len(blocks)
            shape = self.structure(unit.nodes, self.block_of)
            if not unit.nodes <= unfused or isinstance(shape, str):
                reason = shape if isinstance(shape, str) else "overlaps a block"
                self.decisions.append(Decision(block_id, f"unit {unit.kind}", "constraint",
                                               f"not kept as one kernel: {reason}"))
                continue
            block = set(unit.nodes)
            self.decisions.append(Decision(block_id, f"unit {unit.kind}", FUSE,
                                           f"{len(block)} operators kept as one kernel"))
            self.grow(block, [self.fused_type(block)], unfused - block, block_id)
            blocks.append(block)
            unfused -= block
            for n in block:
                self.block_of[n] = block_id

    def merge_layout_blocks(self, blocks: list[set[int]]) -> list[set[int]]:
        """Merge each pointwise block (layout and elementwise operators) into the one
        block that reads all it writes, where the structure allows and recomputing it
        there pays (`recompute_pays`): SmartMem Table 5 eliminates a layout operator
        into its neighbour, but Listing 3.1 forms the consumer first when it is seeded
        earlier (a MatMul takes one operand's Reshape/Transpose chain as it forms; the
        other operand's chain, seeded later, finds it taken)."""
        merged = True
        while merged:
            merged = False
            owner = {n: k for k, b in enumerate(blocks) for n in b}
            for i, block in enumerate(blocks):
                roles = {role_of(self.view.nodes[n].op) for n in block}
                if not roles <= {"layout", "elementwise"}:
                    continue
                readers = {owner[c] for n in block for o in self.view.nodes[n].outputs if o
                           for c in self.view.consumer_indices.get(o, [])} - {i}
                outputs = {o for n in block for o in self.view.nodes[n].outputs if o}
                if len(readers) != 1 or outputs & set(self.view.graph_outputs):
                    continue
                j = readers.pop()
                union = frozenset(blocks[i] | blocks[j])
                others = {n: (k if k not in (i, j) else -1) for n, k in owner.items()}
                shape = self.structure(union, others)
                if isinstance(shape, str) or not self.recompute_pays(block, shape, outputs):
                    continue
                ops = "+".join(self.view.nodes[n].op for n in sorted(block))
                self.decisions.append(Decision(j, ops, FUSE, "layout operators only: "
                                               "eliminated into the block that reads them"
                                               if roles == {"layout"} else
                                               "pointwise block read by one block: fused "
                                               "into it (cost model)"))
                blocks[j] = set(union)
                del blocks[i]
                merged = True
                break
        return blocks

    def recompute_pays(self, block: set[int], shape: BlockStructure, outputs: set[str]) -> bool:
        """Whether evaluating ``block`` inside its reader (recomputed wherever the reader
        reads it again, e.g. every output tile of a MatMul) beats storing its outputs:
        the cost model of the yellow verdicts. Index arithmetic alone always pays."""
        flops = float(sum(self.view.output_size(n) for n in block
                          if role_of(self.view.nodes[n].op) == "elementwise"))
        anchor = shape.anchor
        if self.db is not None and anchor is not None:  # a measured pair decides first
            for value in outputs:
                producer = self.view.producer_index.get(value)
                if producer is None:
                    continue
                known = self.db.lookup(profile_key(self.view.nodes[producer].op,
                                                   self.view.nodes[anchor].op,
                                                   self.view.numel(value)))
                if known is not None:
                    return known
        if not flops:
            return True
        extra = merged_recompute(self.view, block, outputs) if anchor is None and \
            self.cost.recompute_evals_per_us is not None else None
        if extra is not None:  # read broadcast: re-evaluated per element of the reader
            return self.cost.recompute_is_profitable(
                sum(self.view.numel(v) * 4 for v in outputs), extra)
        reuse = 1.0
        if anchor is not None:  # the backend's count for the option it will pick, if any
            known_reuse = self.cost.prologue_reuse(self.view, anchor) \
                if self.cost.prologue_reuse is not None else None
            reuse = known_reuse if known_reuse is not None else _reuse_factor(self.view, anchor)
        nbytes = sum(self.view.numel(v) * 4 for v in outputs)
        return self.cost.fuse_is_profitable(nbytes, flops, reuse)

    def run(self) -> list[set[int]]:
        unfused = set(range(len(self.view.nodes)))
        blocks: list[set[int]] = []
        self.seed_units(unfused, blocks)
        while unfused:
            seed = self.seed_order(unfused)
            block, block_type, block_id = {seed}, [self.node_mapping(seed)], len(blocks)
            for succ in self.view.successors(seed):
                self.fuse_neighbour(seed, succ, block, block_type, unfused, block_id, True)
            for pred in self.view.predecessors(seed):
                self.fuse_neighbour(seed, pred, block, block_type, unfused, block_id, False)
            blocks.append(block)
            unfused -= block
            for n in block:
                self.block_of[n] = block_id
        return self.merge_layout_blocks(self.merge_row_groups(blocks))


def _neighbour_pairs(view: GraphView, blocks: list[set[int]], owner: dict[int, int]
                     ) -> list[tuple[int, int]]:
    """(producer block, consumer block) for every data edge between two blocks."""
    pairs: list[tuple[int, int]] = []
    for i, block in enumerate(blocks):
        for n in sorted(block):
            for succ in view.successors(n):
                j = owner[succ]
                if j != i and (i, j) not in pairs:
                    pairs.append((i, j))
    return pairs


def _reuse_factor(view: GraphView, anchor: int) -> float:
    node = view.nodes[anchor]
    out_shape = view.shape(node.outputs[0])
    kind = anchor_kind(node.op)
    if kind == "conv":
        kernel = view.shape(node.inputs[1])
        return max(out_shape[1] / 8.0, 1.0) * float(np.prod(kernel[2:]))
    if kind == "matmul":
        return max(out_shape[-1] / 4.0, 1.0)
    if kind == "pool":  # LRN has no kernel_shape: 1
        return float(np.prod(node.attr("kernel_shape", (1,))))
    return 1.0


def _order_blocks(view: GraphView, blocks: list[set[int]]) -> list[set[int]]:
    """Topological order of the block graph (ties: smallest node index first)."""
    owner = {n: b for b, members in enumerate(blocks) for n in members}
    deps = {b: {owner[p] for n in members for p in view.predecessors(n)} - {b}
            for b, members in enumerate(blocks)}
    done: list[int] = []
    ready = sorted((b for b in deps if not deps[b]), key=lambda b: min(blocks[b]))
    placed: set[int] = set()
    while ready:
        b = ready.pop(0)
        done.append(b)
        placed.add(b)
        for other, needs in deps.items():
            if other not in placed and other not in ready and needs <= placed:
                ready.append(other)
        ready.sort(key=lambda x: min(blocks[x]))
    if len(done) != len(blocks):
        raise ModelError("internal error: the fusion blocks form a cycle")
    return [blocks[b] for b in done]


def plan_blocks(graph: Graph, tables: FusionTables, profile_db: ProfileDb | None = None,
                cost: CostModel | None = None, fuse: bool = True,
                layouts: bool = True) -> FusionPlan:
    graph = fold_compile_time(graph)
    plan = _plan(graph, [], tables, profile_db, cost, fuse, layouts)
    if not fuse:
        return plan
    sliced = split_as_slices(graph) if cost is not None and cost.split_as_slices else graph
    if sliced is not graph:  # kept where its pieces fuse into their readers (`fusion.splits`)
        candidate = _plan(sliced, [], tables, profile_db, cost, fuse, layouts)
        if candidate.kernel_count < plan.kernel_count:
            graph, plan = sliced, candidate
    # horizontal fusion of projections sharing an input (`fusion.projections`), kept
    # where it pays: fewer kernel launches than the plan without it
    merged_graph, merged = merge_projections(graph)
    if not merged:
        return plan
    candidate = _plan(merged_graph, merged, tables, profile_db, cost, fuse, layouts)
    if candidate.kernel_count < plan.kernel_count:
        return candidate
    verdict = Decision(-1, f"unit qkv: {len(merged)} groups of projections", "constraint",
                       f"not merged: {candidate.kernel_count} kernels merged, "
                       f"{plan.kernel_count} apart")
    return replace(plan, decisions=(*plan.decisions, verdict))


def _plan(graph: Graph, merged: list[tuple[str, ...]], tables: FusionTables,
          profile_db: ProfileDb | None, cost: CostModel | None, fuse: bool,
          layouts: bool) -> FusionPlan:
    """One plan of ``graph`` (folded); ``merged``: its merged projection groups."""
    view = GraphView(graph)
    for node in graph.nodes:
        if role_of(node.op) == "unsupported":
            raise ModelError(f"operator {node.op} (node '{node.name}') is not supported by "
                             "the fusion planner and code generators: no OpenCL kernel exists "
                             "for it\n  hint: compile with --target onnx, or declare an OpenCL "
                             "kernel for it (rules/README.md, \"How to add an operator\")")
    planner = _Planner(view, tables, profile_db, cost or CostModel())
    groups = planner.run() if fuse else [{n} for n in range(len(graph.nodes))]
    for group in merged:  # each merged MatMul is a "qkv" unit of the report
        merged_node = view.producer_index[f"{group[0]}/merged_projections"]
        planner.units.append(Unit("qkv", frozenset({merged_node})))
        planner.decisions.append(Decision(planner.block_of.get(merged_node, -1),
                                          f"unit qkv: MatMul×{len(group)}", FUSE,
                                          "projections sharing an input merged into one MatMul"))
    structures: list[tuple[frozenset[int], BlockStructure]] = []
    for members in _order_blocks(view, groups):
        shape = analyse(view, frozenset(members))
        if isinstance(shape, str):
            raise ModelError(f"cannot generate code for {sorted(graph.nodes[n].op for n in members)}"
                             f": {shape}")
        structures.append((frozenset(members), shape))
    choices = select_layouts(view, structures) if layouts else []
    perms = {c.value: c.perm for c in choices if c.perm != tuple(range(len(c.perm)))}
    blocks = [_make_block(view, planner, block_id, set(members), shape, perms)
              for block_id, (members, shape) in enumerate(structures)]
    return FusionPlan(graph, tuple(blocks), tuple(planner.decisions), tuple(choices))


def _make_block(view: GraphView, planner: _Planner, block_id: int, members: set[int],
                shape: BlockStructure, perms: dict[str, tuple[int, ...]]) -> Block:
    ordered = tuple(sorted(members))
    fused = planner.node_mapping(ordered[0])
    for n in ordered[1:]:
        result, _ = planner.tables.verdict(fused, planner.node_mapping(n))
        fused = result or MANY_TO_MANY
    if shape.anchor is not None:
        fused = MANY_TO_MANY if anchor_kind(view.nodes[shape.anchor].op) else fused
    maps, used = _store_maps(view, shape, perms)
    units = tuple(u.kind for u in planner.units if u.nodes <= members)
    return Block(block_id, ordered, tuple(view.nodes[n].op for n in ordered), fused, shape.kind,
                 shape.anchor, shape.inputs, shape.outputs, shape.iteration_shape, maps, used,
                 units=units)


def _store_maps(view: GraphView, shape: BlockStructure, perms: dict[str, tuple[int, ...]]
                ) -> tuple[tuple[tuple[str, str], ...], tuple[tuple[str, tuple[int, ...]], ...]]:
    maps = []
    for value in shape.outputs:
        index = shape.forward.get(value)
        text = ix.render(ix.physical_offset(index, view.shape(value), perms.get(value))) \
            if index is not None else "gid"
        maps.append((value, text))
    used = tuple((v, perms[v]) for v in (*shape.inputs, *shape.outputs) if v in perms)
    return tuple(maps), used


def block_structures(plan: FusionPlan) -> list[tuple[frozenset[int], BlockStructure]]:
    """Each block's members and structure, in block order (what `layout.layout_options` takes)."""
    view = GraphView(plan.graph)
    result = []
    for block in plan.blocks:
        shape = analyse(view, frozenset(block.nodes))
        if isinstance(shape, str):
            raise ModelError(f"internal error: block {block.id} no longer analyses: {shape}")
        result.append((frozenset(block.nodes), shape))
    return result


def relayout(plan: FusionPlan, choices: Sequence[LayoutChoice]) -> FusionPlan:
    """``plan`` with the intermediates stored in the dimension orders ``choices`` give
    (every block's store maps and layouts redone; the grouping is unchanged)."""
    view = GraphView(plan.graph)
    perms = {c.value: c.perm for c in choices if c.perm != tuple(range(len(c.perm)))}
    blocks = []
    for block, (_, shape) in zip(plan.blocks, block_structures(plan), strict=True):
        maps, used = _store_maps(view, shape, perms)
        blocks.append(replace(block, store_maps=maps, layouts=used))
    return replace(plan, blocks=tuple(blocks), layouts=tuple(choices))
