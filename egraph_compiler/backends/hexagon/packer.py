"""Soft-dependency-aware VLIW packing (GCD² Algorithm 1, score of eq. 4.4).

Packets are built bottom-up: each new packet is seeded with the last unpacked
instruction of the current critical path, then filled with *free* instructions
(all their successors already packed, or in this packet through a soft or anti
edge) chosen by

    score = (order + pred) * w - |hi_lat - lat| * (1 - w) - p(i, packet)

where ``p`` charges the stall of each soft dependency satisfied inside the packet.
Modes: ``sda`` (the algorithm), ``soft-as-hard`` (soft edges forbid sharing a
packet), ``soft-as-none`` (soft edges share packets without penalty).

`pack_block` keeps the best estimate among a sweep of (w, p) settings and, on loop
bodies, a local search from clang's own packing (single-instruction moves between
neighbouring packets) and a packing of the loop body with its killed block-local values
renamed to free registers (`rename.rename_block`: fewer false WAR/WAW dependencies),
and on loop bodies forward list schedules aiming at a length (`schedule_by_deadline`)
compacted towards clang's packet count (`eliminate_packets`): where Algorithm 1's
greedy bottom-up packets stall on operands, a forward schedule by deadlines issues the
critical chain on time, and the compaction fills the packets it leaves half empty
(benchmarks/hexagon.py: 11.8 % fewer estimated cycles than clang). Loop bodies are compared
by their steady-state cycles (`estimate.estimate_steady`), then by one cold pass.
With ``guard`` it never returns more packets or more estimated cycles (cold or steady)
than clang's block, and before an alignment directive it keeps
clang's block unless ours saves a packet (llvm-mc's nop padding, see `pack_block`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from egraph_compiler.backends.hexagon.asm import (
    FRAME_REGISTERS,
    AsmFile,
    Block,
    Insn,
    Packet,
    analyse,
    stack_derived_registers,
)
from egraph_compiler.backends.hexagon.estimate import (
    estimate_block,
    estimate_packets,
    estimate_steady,
)
from egraph_compiler.backends.hexagon.idg import Edge, Idg, Node, build_idg
from egraph_compiler.backends.hexagon.machine import MachineModel
from egraph_compiler.backends.hexagon.rename import free_registers, rename_block

MODES = ("sda", "soft-as-hard", "soft-as-none")


@dataclass(frozen=True, slots=True)
class PackOptions:
    mode: str = "sda"
    w: float = 0.5  # weight of (order + pred) against latency similarity
    penalty_scale: float = 4.0  # p = penalty_scale * stall cycles of the soft edge
    # Our addition to eq. 4.4: charge the stall an instruction would cause because a
    # consumer already packed sits closer than the producer→consumer distance
    # (def cycle − read cycle from the itineraries).
    latency_weight: float = 2.0
    # Functions whose loads never alias their stores (our kernels use restrict pointers).
    restrict_functions: frozenset[str] = frozenset()
    # Also try these (w, penalty_scale) settings and keep the block's best estimate
    # (the paper tunes w and p empirically; we tune per block).
    # (w, penalty_scale, latency_weight); latency_weight ≥ 10 admits no stalling filler.
    sweep: tuple[tuple[float, float, float], ...] = ((0.5, 4.0, 2.0), (0.8, 1.0, 2.0), (0.5, 4.0, 10.0))
    # Never return a block with more packets or more estimated cycles than the input.
    guard: bool = True
    # On loop bodies, also try a local search from clang's own packing (`improve_by_moves`)
    # and keep the best.
    local_search: bool = True
    # On loop bodies, also pack a copy whose killed block-local values sit in free
    # registers (`rename.rename_block`: no false WAR/WAW dependencies) and keep the best.
    rename: bool = True
    # On loop bodies, also try `deadline_schedules` (forward list schedules aiming at a
    # length, compacted) and keep the best.
    deadline: bool = True


def _critical_heights(idg: Idg, remaining: set[int], mode: str) -> dict[int, int]:
    """Longest latency-weighted path from the block entry to each remaining node."""
    height: dict[int, int] = {}
    for index in idg.topo:
        node = idg.nodes[index]
        if node.index not in remaining:
            continue
        best = 0
        for edge in node.preds:
            if edge.src in remaining and edge.kind != "anti":
                weight = idg.nodes[edge.src].latency if (edge.kind == "hard" or mode == "soft-as-hard") else 0
                best = max(best, height[edge.src] + weight)
        height[node.index] = best
    return height


def _order_and_preds(idg: Idg) -> tuple[dict[int, int], dict[int, int]]:
    order: dict[int, int] = {}
    ancestors: dict[int, set[int]] = {}
    for index in idg.topo:
        node = idg.nodes[index]
        order[node.index] = max((order[e.src] + 1 for e in node.preds), default=0)
        seen: set[int] = set()
        for edge in node.preds:
            seen.add(edge.src)
            seen |= ancestors[edge.src]
        ancestors[node.index] = seen
    return order, {k: len(v) for k, v in ancestors.items()}


def _may_share(edge: Edge, mode: str) -> bool:
    if edge.kind == "anti":
        return True
    return edge.kind == "soft" and mode != "soft-as-hard"


def _is_free(node: Node, packed: set[int], current: set[int], mode: str) -> bool:
    for edge in node.succs:
        if edge.dst in packed:
            continue
        if edge.dst in current and _may_share(edge, mode):
            continue
        return False
    # A consumer already in this packet that reads us through a *hard* edge rules us out;
    # that is covered above. A producer must also not need to be *after* us: preds are
    # unpacked by construction (bottom-up), nothing more to check.
    return True


def _effective_insns(members: list[Node], idg: Idg) -> list[Insn]:
    """The packet's instructions with the classes they get once ``.cur``/``.new`` are applied."""
    inside = {m.index for m in members}
    out: list[Insn] = []
    for node in members:
        for insn in node.insns:
            cur = any(e.soft_kind == "cur_load" and e.dst in inside and idg.nodes[e.dst].insns and
                      insn in node.insns for e in node.succs)
            out.append(_with_new_store(_with_cur(insn, cur), node, inside))
    return out


def _with_new_store(insn: Insn, node: Node, inside: set[int]) -> Insn:
    """A store as `_render_insn` will write it: ``.new`` exactly when its value's producer
    shares the packet. The forms differ in resources (an HVX ``.new`` store takes no VA
    unit; a scalar one only slot 0), so the packet is checked in the rendered form."""
    match = _NEW_STORE.search(insn.text)
    if not match or not insn.text.lstrip().startswith(("vmem", "mem", "if")):
        return insn
    reg = match.group(2)
    new = any(e.kind == "soft" and e.soft_kind == "new_store" and e.register == reg and e.src in inside
              for e in node.preds) or (reg in insn.new_uses and any(reg in other.defs for other in node.insns
                                                                      if other is not insn))
    text = insn.text[: match.start()] + match.group(1) + reg + (".new" if new else "")
    return insn if text == insn.text else replace(insn, text=text)


def _with_cur(insn: Insn, cur: bool) -> Insn:
    text = _set_cur(insn.text, cur)
    return insn if text == insn.text else replace(insn, text=text)


_CUR_LOAD = re.compile(r"^(v\d+)(\.cur)?(\s*=\s*vmem)")


def _set_cur(text: str, cur: bool) -> str:
    if not _CUR_LOAD.match(text):
        return text
    return _CUR_LOAD.sub(lambda m: m.group(1) + (".cur" if cur else "") + m.group(3), text)


def _reads_old_vector_of_a_load(members: list[Node], idg: Idg) -> bool:
    """A vector load that becomes ``.cur`` (a reader of its new value shares the packet)
    forwards its value to every reader in the packet: a reader that wants the register's
    old value must not share that packet. A plain load's value is seen one packet later."""
    inside = {m.index for m in members}
    for node in members:
        for edge in node.succs:
            if edge.kind == "anti" and edge.dst in inside and edge.register.startswith("v"):
                load = idg.nodes[edge.dst]
                if not any(i.klass.name in ("hvx_load", "hvx_load_cur") for i in load.insns):
                    continue
                if any(i.cur_def for i in load.insns) or any(
                        e.soft_kind == "cur_load" and e.dst in inside for e in load.succs):
                    return True
    return False


def _fits(members: list[Node], idg: Idg, model: MachineModel) -> bool:
    if _reads_old_vector_of_a_load(members, idg):
        return False
    insns = _effective_insns(members, idg)
    classes = [model.classify(i.text) for i in insns]
    if any(i.barrier for i in insns) and len(members) > 1:
        return False
    return model.packet_fits(classes, sum(i.extenders for i in insns))


def _soft_stall(node: Node, current: set[int], idg: Idg, model: MachineModel) -> int:
    stall = 0
    for edge in node.succs:
        if edge.kind == "soft" and edge.dst in current:
            stall += model.soft_penalty.get(edge.soft_kind, 1)
    for edge in node.preds:
        if edge.kind == "soft" and edge.src in current:
            stall += model.soft_penalty.get(edge.soft_kind, 1)
    return stall


def _slots_used(members: list[Node]) -> int:
    return sum(1 + insn.extenders for node in members for insn in node.insns)


def pack_idg(idg: Idg, model: MachineModel, options: PackOptions, last_packet_slots: int = 4) -> list[list[Node]]:
    """Algorithm 1 on one block's IDG; returns packets in execution order. The last
    packet (built first) uses at most ``last_packet_slots`` slots (see `pack_block`)."""
    mode = options.mode
    if mode not in MODES:
        raise ValueError(f"unknown packing mode {mode!r}; expected one of {MODES}")
    remaining = {n.index for n in idg.nodes}
    packed: set[int] = set()
    order, preds = _order_and_preds(idg)
    built: list[list[Node]] = []
    placed_at: dict[int, int] = {}  # packet index counted from the block's end

    def stall(node: Node, now: int) -> int:
        worst = 0
        for edge in node.succs:
            if edge.kind == "anti" or edge.dst not in placed_at or placed_at[edge.dst] == now:
                continue
            consumer = idg.nodes[edge.dst]
            need = max(model.distance(p.klass, c.klass) for p in node.insns for c in consumer.insns)
            worst = max(worst, need - (now - placed_at[edge.dst]))
        return worst

    while remaining:
        heights = _critical_heights(idg, remaining, mode)
        controls = [idg.nodes[i] for i in sorted(remaining) if idg.nodes[i].control]
        if not built and controls:
            current_nodes = list(controls)  # branches end the block: they seed the last packet
        else:
            sinks = [i for i in remaining if _is_free(idg.nodes[i], packed, set(), mode)]
            now = len(built)
            seed = max(sinks, key=lambda i: (-stall(idg.nodes[i], now), heights[i] + idg.nodes[i].latency, i))
            current_nodes = [idg.nodes[seed]]
        current = {n.index for n in current_nodes}
        slot_limit = last_packet_slots if not built else 4
        while len(current_nodes) < 4 and not any(n.barrier for n in current_nodes):
            hi_lat = max(n.latency for n in current_nodes)
            best: tuple[float, int] | None = None
            for i in sorted(remaining - current):
                node = idg.nodes[i]
                if node.barrier or not _is_free(node, packed, current, mode):
                    continue
                if not _fits(current_nodes + [node], idg, model):
                    continue
                if _slots_used(current_nodes + [node]) > slot_limit:
                    continue
                if options.latency_weight >= 10 and stall(node, len(built)) > 0:
                    continue
                score = (order[i] + preds[i]) * options.w - abs(hi_lat - node.latency) * (1 - options.w)
                score -= options.latency_weight * stall(node, len(built))
                if mode == "sda":
                    score -= options.penalty_scale * _soft_stall(node, current, idg, model)
                if best is None or score > best[0]:
                    best = (score, i)
            if best is None:
                break
            current_nodes.append(idg.nodes[best[1]])
            current.add(best[1])
        for index in current:
            placed_at[index] = len(built)
        built.append(current_nodes)
        remaining -= current
        packed |= current
    built.reverse()
    return built


def estimate_schedule(packets: list[list[Node]], idg: Idg, model: MachineModel) -> int:
    """Estimated cycles of a packing, rendered first (its ``.new``/``.cur`` forms)."""
    rendered = render_block(packets, idg)
    return estimate_packets([Packet([analyse(i.text, model) for i in p.insns], p.endloop, p.mem_noshuf) for p in rendered], model)


def _mergeable(first: list[Node], second: list[Node], idg: Idg, model: MachineModel, options: PackOptions) -> bool:
    inside = {n.index for n in first}
    blocked = any(e.src in inside and (e.kind == "hard" or (e.kind == "soft" and options.mode == "soft-as-hard"))
                  for n in second for e in n.preds)
    merged = first + second
    return (not blocked and _slots_used(merged) <= 4 and not any(n.barrier for n in merged)
            and _fits(merged, idg, model))


def _movable(node: Node, source: list[Node], target: list[Node], earlier: bool, options: PackOptions) -> bool:
    """Whether ``node`` may move from ``source`` to the neighbouring packet ``target``."""
    if node.control or node.barrier or any(n.barrier for n in target):
        return False
    here = {n.index for n in source}
    there = {n.index for n in target}
    hard_soft = ("hard", "soft") if options.mode == "soft-as-hard" else ("hard",)
    if earlier:  # producers must stay at or before the new packet
        return not any(e.src in here or (e.src in there and e.kind in hard_soft) for e in node.preds)
    return not any(e.dst in here or (e.dst in there and e.kind in hard_soft) for e in node.succs)


def improve_by_moves(packets: list[list[Node]], cycles: int, idg: Idg, model: MachineModel, options: PackOptions,
                  target_packets: int, rounds: int = 4) -> list[list[Node]]:
    """Move single instructions between neighbouring packets (or merge two) while that
    lowers (packets above ``target_packets``, estimated cycles)."""
    def key(candidate: list[list[Node]], estimate: int) -> tuple[int, int]:
        return max(0, len(candidate) - target_packets), estimate

    current = key(packets, cycles)
    for _ in range(rounds):
        best: tuple[tuple[int, int], list[list[Node]]] | None = None
        for k in range(len(packets) - 1):
            options_here: list[list[list[Node]]] = []
            if _mergeable(packets[k], packets[k + 1], idg, model, options):
                options_here.append(packets[:k] + [packets[k] + packets[k + 1]] + packets[k + 2:])
            for src, dst, earlier in ((k + 1, k, True), (k, k + 1, False)):
                for node in packets[src]:
                    moved = packets[dst] + [node]
                    if not _movable(node, packets[src], packets[dst], earlier, options):
                        continue
                    if _slots_used(moved) > 4 or not _fits(moved, idg, model):
                        continue
                    rest = [n for n in packets[src] if n is not node]
                    candidate = list(packets)
                    candidate[dst] = moved if earlier else [node] + packets[dst]
                    candidate[src] = rest
                    options_here.append([p for p in candidate if p])
            for candidate in options_here:
                score = key(candidate, estimate_schedule(candidate, idg, model))
                if best is None or score < best[0]:
                    best = (score, candidate)
        if best is None or best[0] >= current:
            break
        current, packets = best
    return packets


def _edge_distance(edge: Edge, idg: Idg, model: MachineModel) -> int:
    """Packets from ``edge.src``'s issue to ``edge.dst``'s for the read not to stall."""
    src, dst = idg.nodes[edge.src], idg.nodes[edge.dst]
    if edge.kind == "anti":
        return 0
    if not edge.register:
        return 1
    return max((model.distance(p.klass, c.klass) for p in src.insns if edge.register in p.defs
                for c in dst.insns if edge.register in c.uses), default=1)


def _distances_and_tails(idg: Idg, model: MachineModel, mode: str) -> tuple[dict[tuple[int, int], int], dict[int, int]]:
    """Each edge's distance across packets, and each node's tail: the fewest cycles from
    its issue to the block's end (a soft edge may share the packet for its penalty, an
    anti edge for nothing)."""
    distance = {(e.src, e.dst): _edge_distance(e, idg, model) for e in idg.edges}
    shared = {(e.src, e.dst): (0 if e.kind == "anti" else model.soft_penalty.get(e.soft_kind, 1))
              for e in idg.edges if not _must_follow(e, mode)}
    tail: dict[int, int] = {}
    for index in reversed(idg.topo):
        node = idg.nodes[index]
        tail[index] = max([1] + [min(distance[e.src, e.dst], shared.get((e.src, e.dst), 1 << 20)) + tail[e.dst]
                                 for e in node.succs])
    return distance, tail


def deadline_schedules(idg: Idg, model: MachineModel, options: PackOptions, target_packets: int,
                       last_packet_slots: int = 4) -> list[list[list[Node]]]:
    """`schedule_by_deadline` for lengths from the critical path up (doubling the slack,
    then bisecting down to the shortest that fits in ``target_packets``); per packet count
    near the target, the one with fewest estimated cycles, compacted by `eliminate_packets`."""
    if not idg.nodes:
        return []
    distance, tail = _distances_and_tails(idg, model, options.mode)
    critical = max(tail.values())
    fits_cache: dict[frozenset[int], bool] = {}
    tried: dict[int, list[list[Node]]] = {}

    def packets_at(slack: int) -> int:
        if slack not in tried:
            tried[slack] = schedule_by_deadline(idg, model, options, critical + slack, (distance, tail), fits_cache)
        return len(tried[slack])

    below = -1
    for slack in (0, 1, 2, 4, 8, 16, 32, 64):
        if packets_at(slack) <= target_packets:
            while slack - below > 1:  # the shortest length that fits, if it grows monotonically
                middle = (below + slack) // 2
                below, slack = (below, middle) if packets_at(middle) <= target_packets else (middle, slack)
            break
        below = slack
    best_at: dict[int, tuple[int, list[list[Node]]]] = {}
    for schedule in tried.values():
        if len(schedule) <= target_packets + 4:
            cycles = estimate_schedule(schedule, idg, model)
            if len(schedule) not in best_at or cycles < best_at[len(schedule)][0]:
                best_at[len(schedule)] = (cycles, schedule)
    results = [eliminate_packets(schedule, idg, model, options, target_packets, last_packet_slots, fits_cache)
               for _, schedule in best_at.values()]
    return [r for r in results if _slots_used(r[-1]) <= last_packet_slots]


def schedule_by_deadline(idg: Idg, model: MachineModel, options: PackOptions, length: int,
                         distances_and_tails: tuple[dict[tuple[int, int], int], dict[int, int]] | None = None,
                         fits_cache: dict[frozenset[int], bool] | None = None) -> list[list[Node]]:
    """A forward list schedule that aims at ``length`` cycles and opens as few packets as
    that allows (our complement to Algorithm 1, which packs bottom-up).

    Each node has a deadline: ``length`` minus its tail (the fewest cycles from its issue
    to the block's end, `_distances_and_tails`). Packets are built in execution order: a
    packet is seeded with the ready node of earliest deadline and issues when its operands
    are (the machine model's distances); then it takes ready nodes that do not delay it,
    by deadline, and nodes that delay it only while no member becomes late. An in-order
    core stalls on a not-ready operand anyway: nodes with slack wait and ride in packets
    opened for critical ones, so the packets are fewer and fuller for the same cycles.
    A longer ``length`` trades cycles for packets."""
    mode = options.mode
    distance, tail = distances_and_tails or _distances_and_tails(idg, model, mode)
    cache = {} if fits_cache is None else fits_cache
    deadline = {i: length - tail[i] for i in tail}
    issued_at: dict[int, int] = {}  # node -> cycle of its packet
    packets: list[list[Node]] = []
    unplaced = set(tail)
    clock = -1  # cycle of the last packet
    others = {i for i in unplaced if not idg.nodes[i].control}

    def earliest(node: Node, members: set[int]) -> int | None:
        """Cycle from which ``node`` can issue, or None while a producer is unplaced."""
        at = clock + 1
        for edge in node.preds:
            if edge.src in members and not _must_follow(edge, mode):
                continue
            if edge.src not in issued_at:
                return None
            at = max(at, issued_at[edge.src] + distance[edge.src, edge.dst])
        return at

    def fits(members: frozenset[int], nodes: list[Node]) -> bool:
        if members not in cache:
            cache[members] = _slots_used(nodes) <= 4 and _fits(nodes, idg, model)
        return cache[members]

    while unplaced:
        pending = (unplaced & others) or unplaced  # branches go last, all together
        ready = {i: t for i in pending if (t := earliest(idg.nodes[i], set())) is not None}
        if not ready:  # a node waits for a branch: let the branches go now
            pending = unplaced
            ready = {i: t for i in pending if (t := earliest(idg.nodes[i], set())) is not None}
        seed = min(ready, key=lambda i: (deadline[i], ready[i], i))
        current, members = [idg.nodes[seed]], {seed}
        issue, limit = ready[seed], deadline[seed]
        waiting = {e.dst for e in idg.nodes[seed].succs} & pending  # may now join through a soft/anti edge
        while not idg.nodes[seed].barrier:
            ranked: list[tuple[tuple[int, int, int], int]] = []
            for i in (set(ready) | waiting) - members:
                node = idg.nodes[i]
                at = ready.get(i)
                if at is None:
                    at = earliest(node, members)
                if at is None or node.barrier:
                    continue
                at = max(at, issue)
                if at > issue and at > min(limit, deadline[i]):
                    continue  # waiting for it would make a member late
                ranked.append(((at - issue, deadline[i], i), at))
            ranked.sort()
            chosen = next(((i, at) for (_, _, i), at in ranked
                           if fits(frozenset(members | {i}), current + [idg.nodes[i]])), None)
            if chosen is None:
                break
            index, issue = chosen
            current.append(idg.nodes[index])
            members.add(index)
            waiting |= {e.dst for e in idg.nodes[index].succs} & pending
            limit = min(limit, deadline[index])
        for node in current:
            issued_at[node.index] = issue
        unplaced -= members
        packets.append(current)
        clock = issue
    return packets


def _must_follow(edge: Edge, mode: str) -> bool:
    """Whether ``edge.dst`` needs a strictly later packet than ``edge.src``."""
    return edge.kind == "hard" or (edge.kind == "soft" and mode == "soft-as-hard")


def _window(node: Node, where: dict[int, int], mode: str) -> tuple[int, int]:
    """Packets ``node`` may occupy given where its placed neighbours are (``where``)."""
    low, high = 0, 1 << 30
    for edge in node.preds:
        if edge.src in where:
            low = max(low, where[edge.src] + (1 if _must_follow(edge, mode) else 0))
    for edge in node.succs:
        if edge.dst in where:
            high = min(high, where[edge.dst] - (1 if _must_follow(edge, mode) else 0))
    return low, high


def _order_holds(packets: list[list[Node]], moved: list[Node], mode: str) -> bool:
    """Every edge of the ``moved`` nodes still points forward (or within a packet where allowed)."""
    where = {n.index: k for k, packet in enumerate(packets) for n in packet}
    return all(where[e.dst] > where[e.src] if _must_follow(e, mode) else where[e.dst] >= where[e.src]
               for node in moved for e in (*node.preds, *node.succs))


def _dissolve(packets: list[list[Node]], doomed: int, idg: Idg, model: MachineModel, mode: str,
              last_packet_slots: int, prefer_later: bool,
              fits_cache: dict[frozenset[int], bool]) -> list[list[Node]] | None:
    """Move every instruction of packet ``doomed`` into another packet its dependencies
    allow (the nearest that fits), or None where one has nowhere to go."""
    if any(n.control or n.barrier for n in packets[doomed]):
        return None
    result = [list(p) for p in packets]
    movers = sorted(result[doomed], key=lambda n: idg.topo.index(n.index))
    result[doomed] = []
    where = {n.index: k for k, packet in enumerate(result) for n in packet}
    moved = list(movers)

    def takes(k: int, nodes: list[Node]) -> bool:
        limit = last_packet_slots if k == len(result) - 1 else 4
        if any(n.barrier for n in nodes) or _slots_used(nodes) > limit:
            return False
        members = frozenset(n.index for n in nodes)
        if members not in fits_cache:
            fits_cache[members] = _fits(nodes, idg, model)
        return fits_cache[members]

    def targets(node: Node, avoid: set[int]) -> list[int]:
        low, high = _window(node, where, mode)
        found = [k for k in range(max(low, 0), min(high, len(result) - 1) + 1) if k not in avoid and result[k]]
        return sorted(found, key=lambda k: (abs(k - doomed), -k if prefer_later else k))

    def place(node: Node, k: int) -> None:
        result[k].append(node)
        where[node.index] = k

    for node in movers if not prefer_later else reversed(movers):
        spots = targets(node, {doomed})
        direct = next((k for k in spots if takes(k, result[k] + [node])), None)
        if direct is not None:
            place(node, direct)
            continue
        # No room: make some by moving one instruction of a target packet on (one step
        # of an ejection chain), where its own dependencies allow.
        for k in spots:
            for other in result[k]:
                if other.control or other.barrier or other in moved:
                    continue
                rest = [n for n in result[k] if n is not other]
                if not takes(k, rest + [node]):
                    continue
                del where[other.index]
                onward = next((j for j in targets(other, {doomed, k}) if takes(j, result[j] + [other])), None)
                if onward is None:
                    where[other.index] = k
                    continue
                result[k] = rest
                place(other, onward)
                place(node, k)
                moved.append(other)
                break
            else:
                continue
            break
        else:
            return None
    compacted = [p for p in result if p]
    if _slots_used(compacted[-1]) > last_packet_slots or not _order_holds(compacted, moved, mode):
        return None
    return compacted


def eliminate_packets(packets: list[list[Node]], idg: Idg, model: MachineModel, options: PackOptions,
                      target_packets: int, last_packet_slots: int = 4,
                      fits_cache: dict[frozenset[int], bool] | None = None) -> list[list[Node]]:
    """Compaction after scheduling: repeatedly dissolve the packet whose instructions fit
    elsewhere at the least estimated cost, while that lowers (packets above
    ``target_packets``, estimated cycles, packets). A latency-driven schedule leaves
    half-empty packets where it waits for operands; an in-order core stalls there anyway,
    so filling them often costs no cycle and saves the executed packets."""
    seen: dict[tuple[tuple[int, ...], ...], int] = {}
    cache = {} if fits_cache is None else fits_cache

    def key(candidate: list[list[Node]]) -> tuple[int, int, int]:
        signature = tuple(tuple(n.index for n in packet) for packet in candidate)
        if signature not in seen:
            seen[signature] = estimate_schedule(candidate, idg, model)
        return max(0, len(candidate) - target_packets), seen[signature], len(candidate)

    current = key(packets)
    while len(packets) > 1:
        best: tuple[tuple[int, int, int], list[list[Node]]] | None = None
        for doomed in range(len(packets)):
            for prefer_later in (False, True):
                candidate = _dissolve(packets, doomed, idg, model, options.mode, last_packet_slots, prefer_later,
                                      cache)
                if candidate is not None and (best is None or key(candidate) < best[0]):
                    best = (key(candidate), candidate)
        if best is None or best[0] >= current:
            break
        current, packets = best
    return packets


# ---- rendering ---------------------------------------------------------------------

_NEW_STORE = re.compile(r"(=\s*)([vr]\d+)(\.new)?$")
_NEW_PRED = re.compile(r"^if\s*\((!?)(p\d)(\.new)?\)")


def _render_insn(insn: Insn, node: Node, placement: dict[int, int], idg: Idg) -> str:
    here = placement[node.index]
    text = insn.text
    if ";" in text:
        return text  # compound compare-and-jump: self-contained
    cur = any(e.soft_kind == "cur_load" and placement[e.dst] == here for e in node.succs)
    # Inside an unsplittable group the input's .cur forwarding stays (e.g. a spill store
    # of a just-loaded vector, which has no same-packet form we could rewrite).
    cur = cur or (insn.cur_def and any(d in other.uses for other in node.insns if other is not insn
                                       for d in insn.defs if d.startswith("v")))
    text = _set_cur(text, cur)
    shared = {e.register for e in node.preds if e.kind == "soft" and placement[e.src] == here
              and e.soft_kind in ("new_store", "new_pred")}
    internal = {r for r in insn.new_uses if any(r in other.defs for other in node.insns if other is not insn)}
    if _NEW_STORE.search(text) and text.lstrip().startswith(("vmem", "mem", "if")):
        match = _NEW_STORE.search(text)
        assert match is not None
        reg = match.group(2)
        new = reg in shared or reg in internal
        text = text[: match.start()] + match.group(1) + reg + (".new" if new else "")
    pred = _NEW_PRED.match(text)
    if pred:
        reg = pred.group(2)
        new = reg in shared or reg in internal
        rest = text[pred.end():]
        if not new:  # branch hints belong to the .new forms (llvm-mc rejects dealloc_return:t on p0)
            rest = re.sub(r":(t|nt)\b", "", rest)
        elif not re.search(r":(t|nt)\b", rest):  # ... and the .new forms of branches need one
            rest = re.sub(r"(dealloc_return\(r30\))(:raw)", r"\1:nt\2", rest)
            rest = re.sub(r"\b(jumpr|jump)(\s)", r"\1:nt\2", rest)
        text = f"if ({pred.group(1)}{reg}{'.new' if new else ''})" + rest
    return text


def render_block(packets: list[list[Node]], idg: Idg) -> list[Packet]:
    placement = {node.index: k for k, packet in enumerate(packets) for node in packet}
    out: list[Packet] = []
    for k, packet in enumerate(packets):
        insns = [_retext(insn, _render_insn(insn, node, placement, idg)) for node in packet for insn in node.insns]
        # A ``:mem_noshuf`` input packet is one node (`idg._atomic_groups`); its load must
        # keep seeing its store's value, so the packet that holds it keeps the flag.
        out.append(Packet(insns, endloop=idg.endloop if k == len(packets) - 1 else "",
                          mem_noshuf=any(node.mem_noshuf for node in packet)))
    return out


def _retext(insn: Insn, text: str) -> Insn:
    return insn if text == insn.text else replace(insn, text=text)


def _packet_slots(packet: Packet) -> int:
    return sum(1 + insn.extenders for insn in packet.insns)


def pack_block(block: Block, model: MachineModel, options: PackOptions, restrict: bool,
               aligned_next: bool = False, free: frozenset[str] = frozenset(),
               stack_registers: frozenset[str] = FRAME_REGISTERS) -> Block:
    """Re-pack one block. ``aligned_next``: an alignment directive follows the block;
    llvm-mc pads up to it with nops placed in the block's *last* packet, or in a new
    packet when that one does not take them (a packet executed on every pass). How many
    nops depends on encoded sizes, which duplex pairing (two sub-instructions in one
    word) changes, so such a block keeps clang's packing unless ours saves a packet, and
    our last packet keeps at least the free slots of clang's. ``free``: registers the
    block's function never names (for `rename_block`). ``stack_registers``: registers
    that may hold a stack address anywhere in the function (`build_idg`)."""
    if len(block.packets) < 2 and options.guard:
        return block  # one packet: nothing to gain
    last_packet_slots = _packet_slots(block.packets[-1]) if aligned_next else 4
    variants = [block]
    if options.rename and block.packets[-1].endloop:  # loop bodies: worth packing twice
        renamed = rename_block(block, free, model)
        if renamed is not block:
            variants.append(renamed)
    baseline = _cycles(block, model)
    best: tuple[tuple[bool, bool, tuple[int, int], int], Block] | None = None
    for variant in variants:
        for candidate in _candidates(variant, model, options, restrict, last_packet_slots, stack_registers):
            # Fewest estimated cycles among packings with no more packets than the input
            # (with the guard: and no more cycles, cold or steady, than the input).
            cycles = _cycles(candidate, model)
            more = len(candidate.packets) > len(block.packets)
            worse = options.guard and (more or any(c > b for c, b in zip(cycles, baseline, strict=True)))
            key = (worse, more, cycles, len(candidate.packets))
            if best is None or key < best[0]:
                best = (key, candidate)
    assert best is not None
    if options.guard:
        worse, _, _, packets = best[0]
        if worse or (aligned_next and packets == len(block.packets)):
            return block
    return best[1]


def _cycles(block: Block, model: MachineModel) -> tuple[int, int]:
    """What the packer minimises: for a loop body its steady-state cycles per iteration
    (`estimate_steady`), then one cold pass; for other blocks one pass."""
    cold = estimate_block(block, model)
    if block.packets and block.packets[-1].endloop:
        return estimate_steady(block.packets, model), cold
    return cold, cold


def _candidates(block: Block, model: MachineModel, options: PackOptions, restrict: bool,
                last_packet_slots: int, stack_registers: frozenset[str] = FRAME_REGISTERS) -> list[Block]:
    """Our packings of ``block``: one per sweep setting, and on loop bodies the local search."""
    idg = build_idg(block, restrict=restrict, stack_registers=stack_registers)
    settings = [(options.w, options.penalty_scale, options.latency_weight)]
    if options.sweep:
        settings += [s for s in options.sweep if s not in settings]
    schedules = [pack_idg(idg, model, replace(options, w=w, penalty_scale=scale, latency_weight=latency_weight),
                          last_packet_slots) for w, scale, latency_weight in settings]
    if options.local_search and idg.endloop:  # loop bodies: worth the search's time
        as_input = [[n for n in idg.nodes if n.packet == k] for k in range(len(block.packets))]
        as_input = [p for p in as_input if p]
        improved = improve_by_moves(as_input, estimate_schedule(as_input, idg, model), idg, model, options,
                                    len(block.packets))
        if _slots_used(improved[-1]) <= last_packet_slots:
            schedules.append(improved)
    if options.deadline and idg.endloop:
        schedules += deadline_schedules(idg, model, options, len(block.packets), last_packet_slots)
    return [Block([Packet([analyse(i.text, model) for i in p.insns], p.endloop, p.mem_noshuf)
                   for p in render_block(s, idg)])
            for s in schedules]


def format_asm(asm: AsmFile) -> str:
    lines: list[str] = []
    for item in asm.items:
        if isinstance(item, str):
            lines.append(item)
            continue
        for packet in item.packets:
            lines.append("\t{")
            lines.extend(f"\t\t{insn.text}" for insn in packet.insns)
            # ``:mem_noshuf``: the packet's load sees its store (same address); without it
            # the load reads the old value, so dropping it silently changes the program.
            tail = " ".join(t for t in (packet.endloop, ":mem_noshuf" if packet.mem_noshuf else "") if t)
            lines.append("\t}" + (f" {tail}" if tail else ""))
    return "\n".join(lines) + "\n"


_FUNCTION_LABEL = re.compile(r"^([A-Za-z_]\w*):")


def pack_asm(asm: AsmFile, model: MachineModel, options: PackOptions) -> AsmFile:
    """Re-pack every block of a parsed file; lines other than packets are kept."""
    items: list[str | Block] = []
    function = ""
    free = free_registers(asm) if options.rename else {}
    stack_registers = _stack_registers_per_function(asm)
    for position, item in enumerate(asm.items):
        if isinstance(item, str):
            match = _FUNCTION_LABEL.match(item)
            if match:
                function = match.group(1)
            items.append(item)
        else:
            items.append(pack_block(item, model, options, function in options.restrict_functions,
                                    _alignment_follows(asm.items, position), free.get(position, frozenset()),
                                    stack_registers.get(function, FRAME_REGISTERS)))
    return AsmFile(items)


def _stack_registers_per_function(asm: AsmFile) -> dict[str, frozenset[str]]:
    """Per function, the registers that may hold a stack address in any of its blocks."""
    insns: dict[str, list[Insn]] = {}
    function = ""
    for item in asm.items:
        if isinstance(item, str):
            match = _FUNCTION_LABEL.match(item)
            if match:
                function = match.group(1)
        else:
            insns.setdefault(function, []).extend(i for p in item.packets for i in p.insns)
    return {name: stack_derived_registers(found) for name, found in insns.items()}


_ALIGN = re.compile(r"^\s*\.(p2align|balign|align)\b")


def _alignment_follows(items: list[str | Block], position: int) -> bool:
    """An alignment directive between block ``position`` and the next block."""
    for index in range(position + 1, len(items)):
        item = items[index]
        if isinstance(item, Block):
            return False
        if _ALIGN.match(item):
            return True
    return False
