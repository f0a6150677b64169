"""Execution order and one arena for every intermediate tensor.

Order: SERENITY's dynamic programme (seed 002 Algorithm 2: the memo key is the
set of scheduled blocks, the value the best peak so far) on each region between
*cut points* — positions of a topological order where a single tensor is live,
the DAG analogue of articulation points — when the region is small; a greedy
"free the most memory first" list schedule otherwise.
Offsets: greedy by size (best fit into the lowest free gap), best of several
orderings. The max-live lower bound (largest sum of simultaneously live tensors
under the chosen order) is always reported next to the arena size.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass

from egraph_compiler.fusion import index as ix
from egraph_compiler.fusion.blocks import FusionPlan
from egraph_compiler.fusion.view import GraphView
from egraph_compiler.shapes.symint import unrecorded

ALIGN = 128  # bytes: CL_DEVICE_MEM_BASE_ADDR_ALIGN of common devices (sub-buffers)
DP_REGION_LIMIT = 14


@dataclass(frozen=True)
class ExecutionPlan:
    fusion: FusionPlan
    order: tuple[int, ...]  # block ids in launch order
    offsets: dict[str, int]  # intermediate value -> byte offset in the arena
    sizes: dict[str, int]  # intermediate value -> aligned byte size
    arena_bytes: int
    lower_bound_bytes: int  # max over steps of the live bytes under ``order``
    naive_bytes: int  # one buffer per intermediate


def _align(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def _intermediates(view: GraphView, plan: FusionPlan) -> dict[str, int]:
    sizes = {}
    # a blocked (NCHWc) layout stores its split axis padded to whole blocks
    padded = {c.value: ix.stored_numel(view.shape(c.value), c.perm) / max(view.numel(c.value), 1)
              for c in plan.layouts if isinstance(c.perm, ix.Blocked)}
    for block in plan.blocks:
        for value in block.outputs:
            if value not in view.graph_outputs:
                # (only a padded tensor is rescaled: `round` would drop the size's
                # derivation from the dims in a symbolic build)
                nbytes = round(view.nbytes(value) * padded[value]) if value in padded else view.nbytes(value)
                sizes[value] = _align(max(nbytes, 1))
    return sizes


class _Scheduler:
    def __init__(self, plan: FusionPlan, sizes: dict[str, int]) -> None:
        self.blocks = {b.id: b for b in plan.blocks}
        self.sizes = sizes
        producer = {v: b.id for b in plan.blocks for v in b.outputs}
        self.deps = {b.id: {producer[v] for v in b.inputs if v in producer} for b in plan.blocks}
        self.users: dict[str, set[int]] = {}
        for b in plan.blocks:
            for v in b.inputs:
                self.users.setdefault(v, set()).add(b.id)

    def live_after(self, scheduled: frozenset[int]) -> int:
        live = 0
        for b in scheduled:
            for v in self.blocks[b].outputs:
                if v in self.sizes and not self.users.get(v, set()) <= scheduled:
                    live += self.sizes[v]
        return live

    def step_peak(self, scheduled: frozenset[int], block: int) -> int:
        """Memory while ``block`` runs: what is live plus what it writes."""
        return self.live_after(scheduled) + sum(self.sizes.get(v, 0)
                                                for v in self.blocks[block].outputs)

    def ready(self, scheduled: frozenset[int], region: set[int]) -> list[int]:
        return sorted(b for b in region if b not in scheduled and self.deps[b] & region
                      <= scheduled)

    def dp(self, region: list[int], before: frozenset[int]) -> list[int]:
        """SERENITY: best peak over all topological orders of ``region``."""
        region_set = set(region)
        memo: dict[frozenset[int], tuple[int, list[int]]] = {frozenset(): (0, [])}
        frontier = [frozenset()]
        for _ in region:
            nxt: dict[frozenset[int], tuple[int, list[int]]] = {}
            for done in frontier:
                peak, order = memo[done]
                for b in self.ready(before | done, region_set):
                    key = done | {b}
                    cand = max(peak, self.step_peak(before | done, b))
                    if key not in nxt or cand < nxt[key][0]:
                        nxt[key] = (cand, [*order, b])
            memo.update(nxt)
            frontier = list(nxt)
        return memo[frozenset(region)][1]

    def greedy(self, region: list[int], before: frozenset[int]) -> list[int]:
        region_set, done, order = set(region), set(before), []
        while len(order) < len(region):
            ready = self.ready(frozenset(done), region_set)
            best = min(ready, key=lambda b: (self.live_after(frozenset(done | {b})), b))
            order.append(best)
            done.add(best)
        return order

    def schedule(self, topo: list[int]) -> list[int]:
        # cut points: positions after which at most one intermediate is live
        regions, current = [], []
        scheduled: set[int] = set()
        for b in topo:
            current.append(b)
            scheduled.add(b)
            live = [v for s in scheduled for v in self.blocks[s].outputs
                    if v in self.sizes and not self.users.get(v, set()) <= scheduled]
            if len(live) <= 1:
                regions.append(current)
                current = []
        if current:
            regions.append(current)
        order: list[int] = []
        for region in regions:
            before = frozenset(order)
            if len(region) <= DP_REGION_LIMIT:
                order += self.dp(region, before)
            else:
                order += self.greedy(region, before)
        return order


def _lifetimes(order: list[int], plan: FusionPlan, sizes: dict[str, int]
               ) -> dict[str, tuple[int, int]]:
    blocks = {b.id: b for b in plan.blocks}
    spans: dict[str, tuple[int, int]] = {}
    for step, b in enumerate(order):
        for v in blocks[b].outputs:
            if v in sizes:
                spans[v] = (step, step)
        for v in blocks[b].inputs:
            if v in spans:
                spans[v] = (spans[v][0], step)
    return spans


def _assign(spans: dict[str, tuple[int, int]], sizes: dict[str, int],
            key: object) -> tuple[int, dict[str, int]]:
    placed: list[tuple[int, int, int, int]] = []  # offset, size, start, end
    offsets: dict[str, int] = {}
    for value in sorted(spans, key=key):  # type: ignore[arg-type]
        start, end = spans[value]
        size = sizes[value]
        busy = sorted((o, o + s) for o, s, a, b in placed if not (b < start or end < a))
        best, best_gap, cursor = None, None, 0
        for lo, hi in busy:
            gap = lo - cursor
            if gap >= size and (best_gap is None or gap < best_gap):
                best, best_gap = cursor, gap
            cursor = max(cursor, hi)
        offset = best if best is not None else cursor
        offsets[value] = offset
        placed.append((offset, size, start, end))
    total = max((o + s for o, s, _, _ in placed), default=0)
    return total, offsets


# block structure -> launch order, while `orders_chosen_once` is active
_ORDERS: ContextVar[dict[tuple, tuple[int, ...]] | None] = ContextVar("dnnr_plan_orders",
                                                                      default=None)


@contextlib.contextmanager
def orders_chosen_once() -> Iterator[None]:
    """Inside, the launch order of a block structure (the blocks and their
    dependences) is chosen at its first plan and kept for every later one: the
    symbolic build (`backends/opencl/symbolic.py`) plans its first, largest shape
    first, and a topological order is valid at every shape, so the order is one
    decision for the whole dim ranges rather than one per shape. The arena offsets
    of each shape's plan are then proved over the dims per box (`plan.symbolic`)."""
    handle = _ORDERS.set({})
    try:
        yield
    finally:
        _ORDERS.reset(handle)


def _structure(plan: FusionPlan) -> tuple:
    return tuple((b.id, b.kind, tuple(b.inputs), tuple(b.outputs)) for b in plan.blocks)


def plan_arena(plan: FusionPlan) -> ExecutionPlan:
    # sizes decide the order and the placement, not the code: a symbolic build's
    # paths (`symint.recording`) leave them out, and prove the placement per box
    with unrecorded():
        return _plan_arena(plan)


def _plan_arena(plan: FusionPlan) -> ExecutionPlan:
    view = GraphView(plan.graph)
    sizes = _intermediates(view, plan)
    scheduler = _Scheduler(plan, sizes)
    orders = _ORDERS.get()
    key = _structure(plan) if orders is not None else ()
    if orders is not None and key in orders:
        order = list(orders[key])
    else:
        order = scheduler.schedule([b.id for b in plan.blocks])
        if orders is not None:
            orders[key] = tuple(order)
    spans = _lifetimes(order, plan, sizes)
    lower = 0
    for step in range(len(order)):
        lower = max(lower, sum(sizes[v] for v, (a, b) in spans.items() if a <= step <= b))
    orderings = [
        lambda v: (-sizes[v], spans[v][0], v),
        lambda v: (spans[v][0], -sizes[v], v),
        lambda v: (-(spans[v][1] - spans[v][0]), -sizes[v], v),
        lambda v: (-sizes[v] * (spans[v][1] - spans[v][0] + 1), v),
    ]
    best_total, best_offsets = None, {}
    for key in orderings:
        total, offsets = _assign(spans, sizes, key)
        if best_total is None or total < best_total:
            best_total, best_offsets = total, offsets
    return ExecutionPlan(plan, tuple(order), best_offsets, sizes, best_total or 0, lower,
                         sum(sizes.values()))


def lifetimes(plan: ExecutionPlan) -> dict[str, tuple[int, int]]:
    """Each arena tensor's first and last step (positions in ``plan.order``)."""
    return _lifetimes(list(plan.order), plan.fusion, plan.sizes)
