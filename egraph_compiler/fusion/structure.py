"""What makes a set of nodes one kernel: the anchor, its epilogue spine, its prologue.

A block is generated as one kernel whose work-items walk an *iteration space*:
the anchor's output (or, without an anchor, the block's outputs). Nodes
downstream of the anchor form the *spine*: each is one-to-one with the anchor
output, so it is computed from the anchor's value and stored at a forward index
(a Transpose/Reshape on the spine only changes the store address). Every other
node is *prologue*: evaluated lazily, through backward index maps, wherever the
anchor or the spine reads it — so it must not be needed outside the block.
`analyse` returns the structure or the reason the set cannot be one kernel; the
planner uses it as Listing 3.1's constraint check.

A *row group* is the one shape with several anchors: reductions over the same
rows (same input shape, same axes, keepdims) and elementwise operators on either
the full rows or the reduced ``[..., 1]`` values — LayerNorm as exporters write
it (ReduceMean, Sub, Pow, ReduceMean, Add, Sqrt, Div, Mul, Add) or a decomposed
Softmax. One work-group per row computes the reductions one after another in
local memory and everything else from them, so the row is never stored between
the phases (kind ``rowgroup``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from egraph_compiler import ops
from egraph_compiler.fusion import index as ix
from egraph_compiler.fusion.tables import anchor_kind, role_of
from egraph_compiler.fusion.view import GraphView
from egraph_compiler.ir.graph import Node
from egraph_compiler.shapes.symint import everywhere, proved_equal

# Limits standing in for register and work-group-memory pressure (Listing 3.1 step 2.2).
MAX_BLOCK_INPUTS = 40
MAX_BLOCK_NODES = 48
MAX_REUSED_PROLOGUE_OPS = 6
# Reductions a row group may chain (`ops.OpInfo.row_reduction`; each has a combine step
# in the kernel generator, so the shipped library's).
ROW_REDUCE_OPS = ops.shipped().where("row_reduction")


def _fact(op: str, fact: str) -> bool:
    """The active registry's boolean ``fact`` of ``op`` (False for an undeclared one)."""
    info = ops.current().get(op)
    return info is not None and bool(getattr(info, fact))


@dataclass(frozen=True)
class BlockStructure:
    anchor: int | None  # a row group: its first reduction
    kind: str  # pointwise | conv | matmul | pool | reduce | rownorm | rowgroup
    spine: tuple[int, ...]
    prologue: tuple[int, ...]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    iteration_shape: tuple[int, ...]
    forward: dict[str, tuple[ix.IExpr, ...]]  # spine value -> index in iteration vars
    # prologue values the kernel also stores (`stored_row_input`): a row kernel's input
    # needed outside the block, written where the kernel reads each element once
    stored: tuple[str, ...] = ()


def iteration_vars(shape: tuple[int, ...], prefix: str = "i") -> tuple[ix.IExpr, ...]:
    # a dim of 1 only where it is 1 at every shape a symbolic build serves (`everywhere`)
    return tuple(0 if everywhere("==", size, 1) else ix.IVar(f"{prefix}{k}", 0, max(size - 1, 0))
                 for k, size in enumerate(shape))


def forward_index(view: GraphView, node: Node, source: str,
                  index: tuple[ix.IExpr, ...]) -> tuple[ix.IExpr, ...] | None:
    """Index of ``node``'s output reached from its input ``source`` at ``index``,
    or None when the edge is not one-to-one (a broadcast, a reduction, …)."""
    out = node.outputs[0]
    in_shape, out_shape = view.shape(source), view.shape(out)
    if role_of(node.op) == "elementwise":
        if node.op == "BatchNormalization" and node.inputs[0] != source:
            return None
        # equal shapes at every shape of the dim ranges, not only at this one (the
        # prover, as fusion's mappings: `symint.proved_equal`)
        return index if len(in_shape) == len(out_shape) and all(
            proved_equal(a, b) for a, b in zip(in_shape, out_shape, strict=True)) else None
    if node.op == "Transpose":
        perm = node.attr("perm") or tuple(reversed(range(len(in_shape))))
        return tuple(index[p] for p in perm)  # type: ignore[union-attr]
    info = ops.current().get(node.op)
    if info is not None and info.cost[0] == "free":  # a view of a contiguous tensor: a reshape
        return ix.reshape_index(index, in_shape, out_shape)
    return None


def _reaches_block(view: GraphView, nodes: frozenset[int], block_of: dict[int, int]) -> bool:
    """True when some path leaves ``nodes`` and comes back (through other nodes or
    through an already formed block): fusing would create a cycle between blocks
    (TVM's and DNNFusion's reachability check on the block graph)."""
    members: dict[int, list[int]] = {}
    for node, block in block_of.items():
        if node not in nodes:
            members.setdefault(block, []).append(node)
    limit = _descent_bound(max(nodes), members.values())
    seen: set[int] = set()
    frontier = [s for n in nodes for s in view.successors(n) if s not in nodes]
    while frontier:
        current = frontier.pop()
        if current in seen:
            continue
        seen.add(current)
        group = members.get(block_of[current], [current]) if current in block_of else [current]
        for member in group:
            seen.add(member)
            for succ in view.successors(member):
                if succ in nodes:
                    return True
                if succ not in seen and succ <= limit:
                    frontier.append(succ)
    return False


def _descent_bound(highest: int, blocks: Iterable[list[int]]) -> int:
    """The node index above which no path can come back to a node at or below ``highest``.

    Node indices are topological, so an edge only climbs; a path descends only by
    entering a formed block at one member and leaving it from a lower one. Pruning
    at ``highest`` alone missed a path that climbs past it into a block spanning
    back below it (a bidirectional recurrence whose two directions share a mask:
    the mask's block holds the first step of one direction and the last of the
    other). The bound grows over every block that starts at or below it (interval
    chaining), so a node above it reaches only nodes and blocks above it."""
    bound = highest
    for low, high in sorted((min(b), max(b)) for b in blocks):
        if low > bound:
            break
        bound = max(bound, high)
    return bound


def analyse(view: GraphView, nodes: frozenset[int],
            block_of: dict[int, int] | None = None) -> BlockStructure | str:
    ordered = sorted(nodes)
    anchors = [n for n in ordered if anchor_kind(view.nodes[n].op)]
    if any(role_of(view.nodes[n].op) == "unsupported" for n in ordered):
        return "unsupported operator"
    if len(anchors) > 1 and not all(view.nodes[n].op in ROW_REDUCE_OPS for n in anchors):
        return "two anchors"
    if len(ordered) > MAX_BLOCK_NODES:
        return "too many nodes"
    produced = {v for n in ordered for v in view.nodes[n].outputs if v}
    inputs: list[str] = []
    for n in ordered:
        for v in view.data_inputs(view.nodes[n]):
            if v not in produced and v not in inputs:
                inputs.append(v)
    if len(inputs) > MAX_BLOCK_INPUTS:
        return "too many inputs"
    outputs = [v for n in ordered for v in view.nodes[n].outputs if v and (
        v in view.graph_outputs or any(u not in nodes for u in view.consumer_indices.get(v, [])))]
    if len(nodes) > 1 and _reaches_block(view, nodes, block_of or {}):
        return "cycle between blocks"
    if not anchors:
        shape = view.shape(max(outputs, key=view.numel)) if outputs else ()
        return BlockStructure(None, "pointwise", (), tuple(ordered), tuple(inputs),
                              tuple(outputs), shape, {})
    reason = "two anchors"
    if len(anchors) == 1:
        single = _anchored(view, ordered, anchors[0], inputs, outputs)
        if not isinstance(single, str):
            return single
        reason = single
    rows = _row_group(view, ordered, anchors, inputs, outputs)
    return rows if rows is not None else reason


def reduce_axes(view: GraphView, node: Node) -> tuple[tuple[int, ...], bool]:
    """The sorted axes a Reduce* node reduces over and its keepdims."""
    rank = len(view.shape(node.inputs[0]))
    keep = bool(node.attr("keepdims", 1))
    given = node.attr("axes")
    if given is None and len(node.inputs) > 1 and node.inputs[1] in view.constants:
        given = tuple(int(a) for a in view.constants[node.inputs[1]].reshape(-1))
    if given is None or len(given) == 0:  # type: ignore[arg-type]
        return (() if node.attr("noop_with_empty_axes", 0) else tuple(range(rank))), keep
    return tuple(sorted(int(a) % rank for a in given)), keep  # type: ignore[union-attr]


def _row_group(view: GraphView, ordered: list[int], anchors: list[int], inputs: list[str],
               outputs: list[str]) -> BlockStructure | None:
    """The row-group structure (module docstring) of ``ordered``, or None."""
    if not anchors or any(view.nodes[n].op not in ROW_REDUCE_OPS for n in anchors):
        return None
    first = view.nodes[anchors[0]]
    full = view.shape(first.inputs[0])
    axes, keep = reduce_axes(view, first)
    if not keep or not axes:
        return None
    row = tuple(1 if a in axes else size for a, size in enumerate(full))
    if row == full:
        return None
    for n in anchors:
        node = view.nodes[n]
        if view.shape(node.inputs[0]) != full or reduce_axes(view, node) != (axes, True):
            return None
    row_values: set[str] = set()
    for n in ordered:
        node = view.nodes[n]
        if n not in anchors and role_of(node.op) != "elementwise":
            return None
        produced = [o for o in node.outputs if o]
        if len(produced) != 1 or view.dtype(produced[0]) != "float32":
            return None
        shape = view.shape(produced[0])
        if shape == row:
            row_values.add(produced[0])
        elif shape != full:
            return None
    for n in ordered:  # a row value is computed once per row: never from a full-row value
        node = view.nodes[n]
        if node.outputs[0] in row_values and n not in anchors and any(
                view.producer_index.get(v) in ordered and v not in row_values
                for v in view.data_inputs(node)):
            return None
    others = tuple(n for n in ordered if n not in anchors)
    return BlockStructure(anchors[0], "rowgroup", (), others, tuple(inputs), tuple(outputs),
                          full, {})


def _anchored(view: GraphView, ordered: list[int], anchor: int, inputs: list[str],
              outputs: list[str]) -> BlockStructure | str:
    """The structure of a block built around one anchor (module docstring)."""
    anchor_value = view.nodes[anchor].outputs[0]
    space = view.shape(anchor_value)
    forward: dict[str, tuple[ix.IExpr, ...]] = {anchor_value: iteration_vars(space)}
    spine: list[int] = []
    for n in ordered:
        if n <= anchor:
            continue
        node = view.nodes[n]
        spine_inputs = [v for v in view.data_inputs(node) if v in forward]
        if not spine_inputs:
            continue
        targets = {forward_index(view, node, v, forward[v]) for v in spine_inputs}
        if len(targets) != 1 or None in targets or len([o for o in node.outputs if o]) != 1:
            return f"{node.op} after the anchor is not one-to-one with it"
        forward[node.outputs[0]] = targets.pop()  # type: ignore[assignment]
        spine.append(n)
    prologue = [n for n in ordered if n != anchor and n not in spine]
    spine_values = set(forward)
    kind = anchor_kind(view.nodes[anchor].op)
    stored = []
    for v in outputs:
        if v not in spine_values:
            if not stored_row_input(view, anchor, kind, v):
                return "a prologue value is needed outside the block"
            stored.append(v)
            forward[v] = forward[anchor_value]  # same shape: the element the kernel normalises
    if kind in ("conv", "matmul", "pool"):
        reused = [n for n in prologue if role_of(view.nodes[n].op) == "elementwise"]
        if len(reused) > MAX_REUSED_PROLOGUE_OPS:
            return "prologue too long for a reused operand"
        # transcendental or dividing (`ops.OpInfo.expensive`): recomputing it for every
        # output tile that re-reads the operand costs more than storing it once
        if any(_fact(view.nodes[n].op, "expensive") for n in reused):
            return "expensive prologue would be recomputed for every output tile"
    if view.dtype(anchor_value) not in ("float32",) and kind not in ("reduce", "indexed"):
        return "anchors are generated for float32 only"
    return BlockStructure(anchor, kind, tuple(spine), tuple(prologue), tuple(inputs),
                          tuple(outputs), space, forward, tuple(stored))


def stored_row_input(view: GraphView, anchor: int, kind: str, value: str) -> bool:
    """Whether a row kernel (``rownorm``: LayerNorm, Softmax, …) can store ``value``, a
    prologue value also needed outside its block: only the anchor's own input, computed
    in the block (a residual sum ``h = h + f(x)`` that feeds a pre-LN LayerNorm and the
    next residual), of the anchor output's shape and float32. The kernel visits each
    element once when it writes the normalised output and stores the sum there too; the
    sum's other consumers read the stored tensor like any block output. Whether a
    planner forms such a block is its (and its backend's) choice."""
    node = view.nodes[anchor]
    return kind == "rownorm" and value == node.inputs[0] and \
        view.shape(value) == view.shape(node.outputs[0]) and view.dtype(value) == "float32" \
        and value in view.producer_index
