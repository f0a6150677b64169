"""Estimated cycles of a sequence of packets under the machine model.

In-order issue, one packet a cycle at best: a packet waits until every register it
reads the old way is ready (producer's def cycle − consumer's read cycle, from the
itineraries), and pays the soft-dependency stall of each ``.new``/``.cur`` pair it holds
(overlapping with the operand wait: both are cycles the packet sits in the pipeline).

`estimate_block` counts one pass from a cold start (every register ready). A loop body
also waits, in the steady state, for values its previous iteration defined late:
`estimate_steady` is the cycles of one pass run after other passes of the same body.
"""

from __future__ import annotations

from egraph_compiler.backends.hexagon.asm import Block, Packet
from egraph_compiler.backends.hexagon.machine import InsnClass, MachineModel


def estimate_packets(packets: list[Packet], model: MachineModel) -> int:
    ready: dict[str, tuple[int, InsnClass]] = {}
    clock = -1
    for packet in packets:
        issue = clock + 1
        stall = 0
        defs_here = {r for insn in packet.insns for r in insn.defs}
        cur_here = {r for insn in packet.insns if insn.cur_def for r in insn.defs if r.startswith("v")}
        for insn in packet.insns:
            for reg in insn.uses:
                if reg in cur_here and not insn.cur_def:
                    continue  # read from the .cur load in this packet (its stall is counted below)
                if reg in insn.new_uses and reg in defs_here:
                    stall += model.soft_penalty["new_pred" if reg.startswith("p") else "new_store"]
                    continue
                if reg in ready:
                    at, producer = ready[reg]
                    issue = max(issue, at + model.distance(producer, insn.klass))
            if insn.cur_def and any(
                d in other.uses for d in insn.defs if d.startswith("v") for other in packet.insns if other is not insn
            ):
                stall += model.soft_penalty["cur_load"]
        # A same-packet (.new/.cur) stall overlaps with waiting for older operands.
        clock = max(issue, clock + 1 + stall)
        for insn in packet.insns:
            for reg in insn.defs:
                ready[reg] = (clock, insn.klass)
    return clock + 1


def estimate_block(block: Block, model: MachineModel) -> int:
    return estimate_packets(block.packets, model)


def estimate_steady(packets: list[Packet], model: MachineModel, passes: int = 3) -> int:
    """Cycles of the last of ``passes`` back-to-back passes over a loop body: loop-carried
    latencies included (a value defined late in one iteration and read early in the next)."""
    return estimate_packets(packets * passes, model) - estimate_packets(packets * (passes - 1), model)
