"""The instruction dependency graph (IDG) of one basic block, with hard and soft edges.

Edge kinds between a program-earlier node ``src`` and a later node ``dst``:
- ``hard``: ``dst`` must go in a strictly later packet (read-after-write without a
  same-packet form, any double write, ordered memory accesses);
- ``soft``: a read-after-write that may share a packet through ``.new`` stores,
  ``.cur`` loads or ``.new`` predicates (GCD² §4.4.3); sharing costs a stall;
- ``anti``: ``dst`` overwrites what ``src`` reads; a packet reads before it writes,
  so ``src`` may share ``dst``'s packet but must not come after it.

A node is one instruction, or several that must stay in one packet (a ``.tmp`` load
with its users, a swap of registers, a barrier's packet).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from egraph_compiler.backends.hexagon.asm import (
    FRAME_REGISTERS,
    Block,
    Insn,
    address_registers,
    stack_derived_registers,
)


@dataclass(frozen=True, slots=True)
class Edge:
    src: int
    dst: int
    kind: str  # "hard" | "soft" | "anti"
    soft_kind: str = ""
    register: str = ""


@dataclass(slots=True)
class Node:
    index: int
    insns: list[Insn]
    packet: int  # index of the packet it came from
    control: bool = False
    barrier: bool = False
    succs: list[Edge] = field(default_factory=list)
    preds: list[Edge] = field(default_factory=list)
    # Summaries of ``insns``, filled once by `_summarise`.
    latency: int = 1
    defs: frozenset[str] = frozenset()
    uses: frozenset[str] = frozenset()
    loads: bool = False
    stores: bool = False
    stack: bool = False
    # A memory access through a register that may hold a stack address (not r29/r30
    # itself, see `asm.stack_derived_registers`): it may alias anything.
    unknown_region: bool = False
    mem_noshuf: bool = False  # the whole of a ``:mem_noshuf`` input packet


def _summarise(node: Node, stack_registers: frozenset[str] = frozenset()) -> Node:
    insns = node.insns
    node.latency = max(i.latency for i in insns)
    node.defs = frozenset().union(*(i.defs for i in insns))
    node.uses = frozenset().union(*(i.uses for i in insns))
    node.loads = any(i.loads for i in insns)
    node.stores = any(i.stores for i in insns)
    node.stack = any(i.stack for i in insns)
    node.unknown_region = any(i.memory and not i.stack and address_registers(i) & stack_registers for i in insns)
    node.control = any(i.control for i in insns)
    node.barrier = any(i.barrier for i in insns)
    return node


@dataclass(slots=True)
class Idg:
    nodes: list[Node]
    edges: list[Edge]
    endloop: str
    topo: list[int] = field(default_factory=list)  # a topological order of the nodes


def _is_vector_load(insn: Insn) -> bool:
    return insn.klass.name in ("hvx_load", "hvx_load_cur") and not insn.tmp_def


def _is_vector_store(insn: Insn) -> bool:
    return insn.klass.name in ("hvx_store", "hvx_store_new")


def _stored_value(insn: Insn) -> str:
    value = insn.text.rsplit("=", 1)[1].strip().removesuffix(".new")
    return value


def soft_kind(producer: Insn, consumer: Insn, reg: str) -> str:
    """The same-packet form through which ``consumer`` may read ``reg`` from ``producer``."""
    if _is_vector_load(producer) and reg.startswith("v") and consumer.klass.is_hvx \
            and not consumer.stores and not consumer.loads:
        return "cur_load"
    if _is_vector_store(consumer) and _stored_value(consumer) == reg and producer.klass.is_hvx \
            and not producer.loads and not producer.stores and len([d for d in producer.defs if d.startswith("v")]) == 1:
        return "new_store"
    if reg.startswith("p") and consumer.text.startswith("if") and ";" not in consumer.text \
            and producer.klass.name.startswith("scalar_") and not producer.loads and not producer.stores \
            and producer.defs == {reg} and not producer.klass.is_hvx:
        return "new_pred"
    return ""


def _reads_in_packet(producer: Insn, consumer: Insn, reg: str) -> bool:
    """Within one input packet, does ``consumer`` see ``producer``'s new value of ``reg``?"""
    return reg in consumer.new_uses or (producer.cur_def and reg.startswith("v"))


def _atomic_groups(block: Block) -> list[tuple[int, list[Insn]]]:
    """Split each input packet into nodes; keep together what cannot be separated."""
    groups: list[tuple[int, list[Insn]]] = []
    for p, packet in enumerate(block.packets):
        insns = packet.insns
        keep_whole = packet.mem_noshuf or any(i.tmp_def or i.barrier for i in insns)
        for a in insns:
            for b in insns:
                for reg in a.defs & b.uses:
                    # A same-packet read we cannot rewrite (a new-value jump, say) pins the packet.
                    if a is not b and _reads_in_packet(a, b, reg) and not soft_kind(a, b, reg):
                        keep_whole = True
        if not keep_whole:
            for a in insns:
                for b in insns:
                    if a is not b and a.defs & b.defs:
                        keep_whole = True  # complementary predicated writes
        if keep_whole:
            groups.append((p, list(insns)))
        else:
            groups.extend((p, [insn]) for insn in insns)
    return groups


def _edges_between(a: Node, b: Node, restrict: bool) -> list[Edge]:
    """Edges between node ``a`` and a node ``b`` from the same or a later input packet."""
    edges: list[Edge] = []
    same_packet = a.packet == b.packet
    if same_packet:
        for x, y in ((a, b), (b, a)):
            for px in x.insns:
                for cy in y.insns:
                    for reg in sorted(px.defs & cy.uses):
                        if _reads_in_packet(px, cy, reg):
                            kind = soft_kind(px, cy, reg)
                            edges.append(Edge(x.index, y.index, "soft" if kind else "hard", kind, reg))
                        else:
                            edges.append(Edge(y.index, x.index, "anti", register=reg))
        if a.loads and b.stores:
            edges.append(Edge(a.index, b.index, "anti"))
        if b.loads and a.stores:
            edges.append(Edge(b.index, a.index, "anti"))
        if b.control and not a.control:
            edges.append(Edge(a.index, b.index, "anti"))
        if a.control and not b.control:
            edges.append(Edge(b.index, a.index, "anti"))
        return edges
    if a.barrier or b.barrier:
        return [Edge(a.index, b.index, "hard")]
    for pa in a.insns:
        for cb in b.insns:
            for reg in sorted(pa.defs & cb.uses):
                kind = soft_kind(pa, cb, reg)
                edges.append(Edge(a.index, b.index, "soft" if kind else "hard", kind, reg))
            if pa.defs & cb.defs:
                edges.append(Edge(a.index, b.index, "hard"))
            for reg in sorted(pa.uses & cb.defs):
                edges.append(Edge(a.index, b.index, "anti", register=reg))
    # Under ``restrict`` only stack slots (spills) can alias: other pointers are distinct
    # buffers, and a spill slot is never one of them. An access that may be either (a
    # spill through a register holding r29 + offset) is ordered against every other.
    unknown = a.unknown_region or b.unknown_region
    may_alias = not restrict or unknown or (a.stack and b.stack)
    if restrict and a.stack != b.stack and not unknown:
        pass
    elif a.stores and (b.stores or (b.loads and may_alias)):
        edges.append(Edge(a.index, b.index, "hard"))
    elif a.loads and b.stores and may_alias:
        edges.append(Edge(a.index, b.index, "hard"))
    if b.control:
        edges.append(Edge(a.index, b.index, "anti"))
    return edges


def _merge_edges(edges: list[Edge]) -> list[Edge]:
    """One edge per ordered pair, the strongest kind winning (hard > soft > anti)."""
    rank = {"hard": 2, "soft": 1, "anti": 0}
    best: dict[tuple[int, int], Edge] = {}
    extra: list[Edge] = []
    for edge in edges:
        key = (edge.src, edge.dst)
        old = best.get(key)
        if old is None or rank[edge.kind] > rank[old.kind]:
            best[key] = edge
        elif edge.kind == "soft" and old.kind == "soft":
            extra.append(edge)  # a second register read through the same-packet form
    return sorted(best.values(), key=lambda e: (e.src, e.dst)) + extra


def _sccs(count: int, edges: list[Edge]) -> list[list[int]]:
    """Tarjan's strongly connected components (iterative), in index order."""
    succ: list[list[int]] = [[] for _ in range(count)]
    for edge in edges:
        succ[edge.src].append(edge.dst)
    index: dict[int, int] = {}
    low: dict[int, int] = {}
    stack: list[int] = []
    on_stack: set[int] = set()
    result: list[list[int]] = []
    counter = 0
    for root in range(count):
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            node, child = work.pop()
            if child == 0:
                index[node] = low[node] = counter
                counter += 1
                stack.append(node)
                on_stack.add(node)
            if child < len(succ[node]):
                work.append((node, child + 1))
                nxt = succ[node][child]
                if nxt not in index:
                    work.append((nxt, 0))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            if low[node] == index[node]:
                component = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    component.append(top)
                    if top == node:
                        break
                result.append(sorted(component))
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
    return sorted(result)


def build_idg(block: Block, restrict: bool = False, stack_registers: frozenset[str] = FRAME_REGISTERS) -> Idg:
    """Dependency graph of ``block``; ``restrict``: loads never alias stores (C ``restrict``)
    except on the stack. ``stack_registers``: registers that may hold a stack address
    on entry (`asm.stack_derived_registers` over the whole function), to which the
    block's own derivations are added."""
    groups = _atomic_groups(block)
    maybe_stack = stack_derived_registers([i for p in block.packets for i in p.insns], stack_registers | FRAME_REGISTERS)
    while True:
        nodes = [_summarise(Node(i, insns, packet, mem_noshuf=block.packets[packet].mem_noshuf), maybe_stack)
                 for i, (packet, insns) in enumerate(groups)]
        edges: list[Edge] = []
        for i, a in enumerate(nodes):
            for b in nodes[i + 1:]:
                edges.extend(_edges_between(a, b, restrict))
        edges = _merge_edges(edges)
        components = [c for c in _sccs(len(nodes), edges) if len(c) > 1]
        if not components:
            break
        # A cycle can only join nodes of one input packet (reads-before-writes both ways):
        # those must stay in one packet, so fuse them and rebuild.
        fused: dict[int, int] = {m: c[0] for c in components for m in c}
        merged: dict[int, tuple[int, list[Insn]]] = {}
        for i, (packet, insns) in enumerate(groups):
            head = fused.get(i, i)
            if head in merged:
                merged[head][1].extend(insns)
            else:
                merged[head] = (packet, list(insns))
        groups = [merged[k] for k in sorted(merged)]
    for edge in edges:
        nodes[edge.src].succs.append(edge)
        nodes[edge.dst].preds.append(edge)
    endloop = block.packets[-1].endloop if block.packets else ""
    return Idg(nodes, edges, endloop, _topological(nodes))


def _topological(nodes: list[Node]) -> list[int]:
    indegree = {n.index: len({e.src for e in n.preds}) for n in nodes}
    ready = sorted(i for i, d in indegree.items() if d == 0)
    order: list[int] = []
    while ready:
        i = ready.pop(0)
        order.append(i)
        for dst in sorted({e.dst for e in nodes[i].succs}):
            indegree[dst] -= 1
            if indegree[dst] == 0:
                ready.append(dst)
    assert len(order) == len(nodes), "the IDG has a cycle"
    return order
