"""The Hexagon v67 machine model, loaded from ``machine_v67.json`` (data, not code).

`MachineModel.classify` maps one instruction's text to its class: issue slots, HVX
unit alternatives and latency. `MachineModel.packet_fits` decides whether a set of
instructions respects the slot and HVX-unit limits of one packet.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import cache
from itertools import product
from pathlib import Path

MODEL_PATH = Path(__file__).with_name("machine_v67.json")
_SCALAR_STORES = ("scalar_store", "scalar_nv_store")
_CLASSIFIED: dict[tuple[int, str], InsnClass] = {}


@dataclass(frozen=True, slots=True)
class InsnClass:
    name: str
    itinerary: str
    slots: tuple[int, ...]
    blocks_slots: tuple[int, ...]
    unit_alternatives: tuple[tuple[str, ...], ...]
    latency: int
    is_hvx: bool
    def_cycle: int = 2
    read_cycle: int = 1


@dataclass(frozen=True, slots=True)
class MachineModel:
    version: int
    classes: tuple[tuple[re.Pattern[str], InsnClass], ...]
    soft_penalty: dict[str, int]
    slot_count: int

    def classify(self, text: str) -> InsnClass:
        key = (id(self), text)
        found = _CLASSIFIED.get(key)
        if found is None:
            found = next(klass for pattern, klass in self.classes if pattern.search(text))
            _CLASSIFIED[key] = found
        return found

    @staticmethod
    def distance(producer: InsnClass, consumer: InsnClass) -> int:
        """Packets from producer to consumer for the consumer not to stall (def − read cycle)."""
        return max(1, producer.def_cycle - consumer.read_cycle)

    def packet_fits(self, members: list[InsnClass], extenders: int = 0) -> bool:
        """Slots (with immediate extenders taking a slot each) and HVX units."""
        return _packet_fits(self.slot_count, tuple(sorted(members, key=lambda m: m.name)), extenders)


@cache
def _packet_fits(slot_count: int, members: tuple[InsnClass, ...], extenders: int) -> bool:
    if len(members) + extenders > slot_count:
        return False
    needs = tuple(sorted((m.slots, m.blocks_slots, m.name in _SCALAR_STORES) for m in members))
    if not _slots_assignable(needs, extenders):
        return False
    hvx = [m.unit_alternatives for m in members if m.unit_alternatives]
    return _units_assignable(tuple(sorted(hvx)))


@cache
def _slots_assignable(needs: tuple[tuple[tuple[int, ...], tuple[int, ...], bool], ...], extenders: int) -> bool:
    used: dict[int, bool] = {}  # slot -> holds a store

    def place(i: int) -> bool:
        if i == len(needs):
            # A store may use slot 1 only next to a store in slot 0 (dual stores).
            return not used.get(1, False) or used.get(0, False)
        slots, blocks, is_store = needs[i]
        for slot in slots:
            taken = {slot, *blocks}
            if taken & used.keys():
                continue
            for t in taken:
                used[t] = is_store and t == slot
            if place(i + 1):
                return True
            for t in taken:
                del used[t]
        return False

    # Extenders take any free slot: it is enough that the others fit and leave room.
    return place(0) and len(used) + extenders <= 4


@cache
def _units_assignable(alternatives: tuple[tuple[tuple[str, ...], ...], ...]) -> bool:
    for choice in product(*alternatives):
        units = [u for alt in choice for u in alt]
        if len(units) == len(set(units)):
            return True
    return False


@cache
def load_machine_model(path: str = str(MODEL_PATH)) -> MachineModel:
    data = json.loads(Path(path).read_text())
    itins = data["itineraries"]
    classes = []
    for entry in data["classes"]:
        itin = itins[entry["itinerary"]]
        klass = InsnClass(
            name=entry["name"],
            itinerary=entry["itinerary"],
            slots=tuple(itin["slots"]),
            blocks_slots=tuple(itin["blocks_slots"]),
            unit_alternatives=tuple(tuple(alt) for alt in itin["unit_alternatives"]),
            latency=int(itin["latency"]),
            is_hvx=entry["name"].startswith("hvx"),
            def_cycle=int(itin["def_cycle"]),
            read_cycle=int(itin["read_cycle"]),
        )
        classes.append((re.compile(entry["regex"]), klass))
    return MachineModel(data["version"], tuple(classes), dict(data["soft_penalty"]), data["slots"])
