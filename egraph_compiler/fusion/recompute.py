"""What fusing a broadcast consumer into a pointwise block costs: re-evaluation.

Table 3.3 fuses One-to-Many after One-to-Many unconditionally (green), but a kernel
has one work-item per output element: when the block's value ``via`` is read by a
consumer with more elements (a broadcast), the fused kernel evaluates every
operator upstream of ``via`` once per consumer element instead of once per element
of its own. BERT's attention mask (Gather, Cast, And, Where over 64×64) fused into
the 4×64×64 score Add ran 0.055 ms on PoCL against 0.011 ms for the Add alone and
a few µs for the mask (per-kernel profiling events): the pair was faster. So such
a step is a yellow verdict: the cost model weighs the extra evaluations against
the launch and the intermediate's round trip it saves (`CostModel.recompute_is_profitable`).
"""

from __future__ import annotations

from egraph_compiler.fusion.profile_db import CostModel, ProfileDb, profile_key
from egraph_compiler.fusion.view import GraphView
from egraph_compiler.ops import current


def broadcast_verdict(view: GraphView, cost: CostModel, db: ProfileDb | None, block: set[int],
                      candidate: int, via: str) -> tuple[bool, str] | None:
    """Whether ``candidate`` joining pointwise ``block`` through ``via`` pays, and what
    said so (the profile database's entry for the step first, then the cost model);
    None when nothing is read broadcast or the cost model does not price it."""
    if cost.recompute_evals_per_us is None:
        return None
    extra = broadcast_recompute(view, block, candidate, via)
    if extra is None:
        return None
    reference = view.nodes[max(block)].op
    known = db.lookup(profile_key(view.nodes[candidate].op, reference, view.numel(via))) \
        if db is not None else None
    if known is not None:
        return known, "profile db"
    return cost.recompute_is_profitable(view.numel(via) * 4, extra), \
        f"cost model ({extra} re-evaluations)"


def broadcast_recompute(view: GraphView, block: set[int], candidate: int,
                        via: str) -> int | None:
    """Operator evaluations the fused kernel adds when ``candidate`` joins ``block``
    through ``via`` and one side reads ``via`` broadcast; None when no element of
    ``via`` is read more than once (or a size is symbolic: the step stays as the
    table says)."""
    producer = view.producer_index.get(via)
    if producer is None:
        return None
    if producer == candidate:  # a predecessor: the block's readers of via re-evaluate it
        return extra_evaluations(view, {candidate}, via,
                                 [n for n in block if via in view.nodes[n].inputs])
    # a successor: it re-evaluates everything in the block upstream of via
    return extra_evaluations(view, upstream_in(view, block, producer), via, [candidate])


def merged_recompute(view: GraphView, block: set[int], outputs: set[str]) -> int | None:
    """The evaluations added when pointwise ``block`` is merged into the one block that
    reads its ``outputs`` (`planner.merge_layout_blocks`); None when nothing is read
    broadcast."""
    added = [extra_evaluations(view, upstream_in(view, block, view.producer_index[v]), v,
                               [c for c in view.consumer_indices.get(v, []) if c not in block])
             for v in sorted(outputs) if v in view.producer_index]
    known = [a for a in added if a is not None]
    return sum(known) if known else None


def extra_evaluations(view: GraphView, upstream: set[int], via: str,
                      readers: list[int]) -> int | None:
    """Each elementwise one of ``readers`` evaluates ``upstream`` (the operators
    computing ``via``) once per element of its own output: the evaluations beyond
    computing each once. Other readers (Concat, Slice, ...) read each element once."""
    width = [view.output_size(n) for n in readers if _elementwise(view.nodes[n].op)]
    if not width or not all(isinstance(w, int) for w in width):
        return None
    spread = max(width)
    sizes = [view.output_size(n) for n in upstream if not _index_only(view.nodes[n].op)]
    if not all(isinstance(s, int) for s in sizes) or \
            not isinstance(view.numel(via), int) or spread <= view.numel(via):
        return None
    return sum(max(spread - size, 0) for size in sizes)


def upstream_in(view: GraphView, block: set[int], node: int) -> set[int]:
    """``node`` and its ancestors inside ``block``."""
    found, todo = {node}, [node]
    while todo:
        for pred in view.predecessors(todo.pop()):
            if pred in block and pred not in found:
                found.add(pred)
                todo.append(pred)
    return found


def _index_only(op: str) -> bool:
    """An operator that only renames indices (Reshape, Flatten: ``cost free``) adds no
    evaluation of its own."""
    info = current().get(op)
    return info is not None and info.cost[0] == "free"


def _elementwise(op: str) -> bool:
    """An operator that broadcasts its operands (the registry's elementwise role): an
    output larger than an operand reads that operand's elements more than once."""
    info = current().get(op)
    return info is not None and info.role == "elementwise"
