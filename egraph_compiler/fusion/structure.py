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
"""

from __future__ import annotations

from dataclasses import dataclass

from egraph_compiler.fusion import index as ix
from egraph_compiler.fusion.tables import ANCHOR_OPS, role_of
from egraph_compiler.fusion.view import GraphView
from egraph_compiler.ir.graph import Node

FORWARD_LAYOUT = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose"})
# Limits standing in for register and work-group-memory pressure (Listing 3.1 step 2.2).
MAX_BLOCK_INPUTS = 40
MAX_BLOCK_NODES = 48
MAX_REUSED_PROLOGUE_OPS = 6
# Transcendental (or division-heavy) operators: recomputing them for every output tile
# that re-reads an operand (Conv, MatMul, pooling) costs more than storing the result.
EXPENSIVE_OPS = frozenset({
    "Erf", "Exp", "Log", "Tanh", "Sigmoid", "Pow", "Sqrt", "Div", "Reciprocal", "Sin", "Cos",
    "Tan", "Softplus", "Gelu", "Mish", "Elu", "Selu", "Celu", "Asin", "Acos", "Atan", "Sinh",
    "Cosh", "Asinh", "Acosh", "Atanh", "HardSwish", "LRN",
})


@dataclass(frozen=True)
class BlockStructure:
    anchor: int | None
    kind: str  # pointwise | conv | matmul | pool | reduce | rownorm
    spine: tuple[int, ...]
    prologue: tuple[int, ...]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    iteration_shape: tuple[int, ...]
    forward: dict[str, tuple[ix.IExpr, ...]]  # spine value -> index in iteration vars


def iteration_vars(shape: tuple[int, ...], prefix: str = "i") -> tuple[ix.IExpr, ...]:
    return tuple(ix.IVar(f"{prefix}{k}", 0, max(size - 1, 0)) if size != 1 else 0
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
        return index if in_shape == out_shape else None
    if node.op == "Transpose":
        perm = node.attr("perm") or tuple(reversed(range(len(in_shape))))
        return tuple(index[p] for p in perm)  # type: ignore[union-attr]
    if node.op in FORWARD_LAYOUT:
        return ix.reshape_index(index, in_shape, out_shape)
    return None


def _reaches_block(view: GraphView, nodes: frozenset[int], block_of: dict[int, int]) -> bool:
    """True when some path leaves ``nodes`` and comes back (through other nodes or
    through an already formed block): fusing would create a cycle between blocks."""
    limit = max(nodes)
    members: dict[int, list[int]] = {}
    for node, block in block_of.items():
        members.setdefault(block, []).append(node)
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


def analyse(view: GraphView, nodes: frozenset[int],
            block_of: dict[int, int] | None = None) -> BlockStructure | str:
    ordered = sorted(nodes)
    anchors = [n for n in ordered if view.nodes[n].op in ANCHOR_OPS]
    if any(role_of(view.nodes[n].op) == "unsupported" for n in ordered):
        return "unsupported operator"
    if len(anchors) > 1:
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
    anchor = anchors[0]
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
    for v in outputs:
        if v not in spine_values:
            return "a prologue value is needed outside the block"
    kind = ANCHOR_OPS[view.nodes[anchor].op]
    if kind in ("conv", "matmul", "pool"):
        reused = [n for n in prologue if role_of(view.nodes[n].op) == "elementwise"]
        if len(reused) > MAX_REUSED_PROLOGUE_OPS:
            return "prologue too long for a reused operand"
        if any(view.nodes[n].op in EXPENSIVE_OPS for n in reused):
            return "expensive prologue would be recomputed for every output tile"
    if view.dtype(anchor_value) not in ("float32",) and kind != "reduce":
        return "anchors are generated for float32 only"
    return BlockStructure(anchor, kind, tuple(spine), tuple(prologue), tuple(inputs),
                          tuple(outputs), space, forward)
