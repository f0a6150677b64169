"""Choose one e-node per needed e-class: a per-class fixpoint, then a DAG-aware
improvement pass.

The fixpoint gives every class the cheapest tree cost (a shared subterm counted
per use) and never follows a cycle: a class gets a finite cost only through
children that already have one. The improvement pass then tries each
alternative of each used class and keeps a switch when the DAG cost — the sum
of the own costs of the distinct classes reachable from the roots — goes down.
Reference counts make each trial cost the size of the region that changes; only
an improving switch is checked for cycles.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable

from egraph_compiler.extract.view import EGraphView, ENode

CAP = 1e300  # tree costs of deep DAGs explode; keep them finite and ordered


def fixpoint(
    view: EGraphView, own: Callable[[ENode], float], prefer: Callable[[ENode], int],
    costs: dict[int, float] | None = None,
) -> dict[int, ENode]:
    """Knuth's generalisation of Dijkstra to e-graphs: a class is settled when it
    leaves the heap, and a node is only priced once all its children are settled,
    so every choice points at classes settled earlier: no cycles, even when costs
    tie or saturate at `CAP`."""
    parents: dict[int, list[ENode]] = {}
    for node in view.nodes:
        for child in set(node.children):
            parents.setdefault(child, []).append(node)
    cost: dict[int, float] = {}
    best: dict[int, ENode] = {}
    settled: set[int] = set()
    queue: list[tuple[float, int, int, int]] = []

    def offer(node: ENode) -> None:
        if node.eclass in settled or any(child not in settled for child in node.children):
            return
        value = own(node)
        for child in node.children:
            value += cost[child]
        value = min(value, CAP)
        current = best.get(node.eclass)
        if current is None or (value, prefer(node), node.index) < (cost[node.eclass], prefer(current), current.index):
            cost[node.eclass] = value
            best[node.eclass] = node
            heapq.heappush(queue, (value, prefer(node), node.index, node.eclass))

    for node in view.nodes:
        if not node.children:
            offer(node)
    while queue:
        value, _, index, eclass = heapq.heappop(queue)
        if eclass in settled or best[eclass].index != index:
            continue
        settled.add(eclass)
        for parent in parents.get(eclass, []):
            offer(parent)
    if costs is not None:
        costs.update(cost)
    return best


class DagImprover:
    def __init__(self, view: EGraphView, choice: dict[int, ENode], own: Callable[[ENode], float],
                 roots: list[int], free: set[int] | None = None):
        self.view, self.choice, self.own, self.roots = view, choice, own, roots
        self.free = free or set()  # classes whose chosen subterm costs nothing: no switch helps
        self.refs: dict[int, int] = {}
        for root in roots:
            self._add(root, [])
        self._order()

    def _add(self, eclass: int, added: list[int]) -> None:
        stack = [eclass]
        while stack:
            c = stack.pop()
            self.refs[c] = self.refs.get(c, 0) + 1
            if self.refs[c] == 1:
                added.append(c)
                stack.extend(self.choice[c].children)

    def _remove(self, eclass: int, removed: list[int]) -> None:
        stack = [eclass]
        while stack:
            c = stack.pop()
            self.refs[c] -= 1
            if self.refs[c] == 0:
                removed.append(c)
                stack.extend(self.choice[c].children)

    def _order(self) -> None:
        """Post-order of the live classes (children first)."""
        order: list[int] = []
        seen: set[int] = set()
        for root in self.roots:
            stack = [(root, False)]
            while stack:
                c, done = stack.pop()
                if done:
                    order.append(c)
                    continue
                if c in seen:
                    continue
                seen.add(c)
                stack.append((c, True))
                stack.extend((child, False) for child in self.choice[c].children)
        self.order = order

    def _reaches(self, start: tuple[int, ...], target: int) -> bool:
        stack = list(start)
        seen: set[int] = set()
        while stack:
            c = stack.pop()
            if c == target:
                return True
            if c in seen or c not in self.choice:
                continue
            seen.add(c)
            stack.extend(self.choice[c].children)
        return False

    def total(self) -> float:
        return sum(self.own(self.choice[c]) for c, n in self.refs.items() if n > 0)

    def improve(self, rounds: int = 3, seconds: float = 10.0) -> bool:
        """Run up to ``rounds`` passes within ``seconds``; False when time ran out
        (the choice is then still valid, only less improved)."""
        deadline = time.perf_counter() + seconds
        for _ in range(rounds):
            improved = False
            for eclass in list(reversed(self.order)):
                if self.refs.get(eclass, 0) <= 0 or eclass in self.free:
                    continue
                if time.perf_counter() > deadline:
                    return False
                for alternative in self.view.classes.get(eclass, []):
                    if self._try(eclass, alternative):
                        improved = True
            if not improved:
                return True
            self._order()
        return True

    def _try(self, eclass: int, alternative: ENode) -> bool:
        current = self.choice[eclass]
        if alternative is current or any(ch not in self.choice for ch in alternative.children):
            return False
        if sorted(alternative.children) == sorted(current.children):
            # same operands (a commuted twin, another attribute): only the op differs
            if self.own(alternative) < self.own(current) - 1e-9:
                self.choice[eclass] = alternative
                return True
            return False
        # Price the switch first: with reference counts this is safe even when the
        # alternative would close a cycle (the class is live, so adding it again
        # does not recurse); only an improving switch pays for the cycle check.
        removed: list[int] = []
        added: list[int] = []
        for child in current.children:
            self._remove(child, removed)
        self.choice[eclass] = alternative
        for child in alternative.children:
            self._add(child, added)
        gone, new = set(removed), set(added)
        delta = self.own(alternative) - self.own(current)
        delta += sum(self.own(self.choice[c]) for c in new - gone)
        delta -= sum(self.own(self.choice[c]) for c in gone - new)
        if delta < -1e-9 and not self._reaches(alternative.children, eclass):
            return True
        scratch: list[int] = []
        for child in alternative.children:
            self._remove(child, scratch)
        self.choice[eclass] = current
        for child in current.children:
            self._add(child, scratch)
        return False
