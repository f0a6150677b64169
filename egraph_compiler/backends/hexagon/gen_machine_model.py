"""Regenerate ``machine_v67.json`` from the hand-written excerpt ``sched_excerpt.txt``.

Run ``python -m egraph_compiler.backends.hexagon.gen_machine_model`` after editing the
excerpt; the JSON is checked in so CI needs no network. The excerpt holds numbers
read from LLVM's public Hexagon scheduling descriptions (HexagonDepIICHVX.td) and the
Hexagon programmer's references, with citations in its header.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).parent
EXCERPT = HERE / "sched_excerpt.txt"
OUTPUT = HERE / "machine_v67.json"
VERSION = 1

# Stall cycles charged when a soft dependency is satisfied inside one packet
# (GCD² §4.4.3, Fig. 4.4: co-packed producer/consumer run in 4 cycles instead of 3).
SOFT_PENALTY = {"new_store": 1, "cur_load": 1, "new_pred": 0}


TYPICAL_HVX_READ = 5


def _fields(parts: list[str]) -> dict[str, str]:
    return dict(part.split("=", 1) for part in parts if "=" in part)


def parse_excerpt(text: str) -> dict[str, object]:
    itins: dict[str, dict[str, object]] = {}
    classes: list[dict[str, object]] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        words = line.split()
        if words[0] == "itin":
            fields = _fields(words[3:])
            cycles = [int(c) for c in fields["cycles"].split(",")]
            slots_field = fields["slots"]
            # "0+1" means the instruction needs slot 0 and also blocks slot 1.
            if "+" in slots_field:
                slots = [int(slots_field.split("+")[0])]
                blocks = [int(s) for s in slots_field.split("+")[1:]]
            else:
                slots = [int(s) for s in slots_field.split(",")]
                blocks = []
            units = [] if fields["units"] == "-" else [
                sorted(alt.split("+")) for alt in fields["units"].split("|")
            ]
            itins[words[1]] = {
                "comment": words[2],
                "slots": slots,
                "blocks_slots": blocks,
                "unit_alternatives": units,
                "cycles": cycles,
                # Operand cycles as LLVM lists them: [def, use, use, ...].
                "def_cycle": cycles[0],
                "read_cycle": max(cycles[1:] or [1]),
                # Packets until a typical consumer issues without stalling: HVX
                # multiplies read their vector operands at cycle 5, scalar ops at 1.
                "latency": max(1, cycles[0] - (TYPICAL_HVX_READ if words[1].startswith("tc_") else 1)),
            }
        elif words[0] == "class":
            name, itin = words[1], words[2]
            regex = line.split(None, 3)[3]
            if itin not in itins:
                raise ValueError(f"class {name}: unknown itinerary {itin}")
            classes.append({"name": name, "itinerary": itin, "regex": regex})
    return {
        "version": VERSION,
        "cpu": "hexagonv67",
        "hvx_bytes": 128,
        "slots": 4,
        "source": "sched_excerpt.txt (LLVM HexagonDepIICHVX.td + Hexagon PRMs)",
        "soft_penalty": SOFT_PENALTY,
        "itineraries": dict(sorted(itins.items())),
        "classes": classes,
    }


def main(argv: list[str] | None = None) -> int:
    model = parse_excerpt(EXCERPT.read_text())
    out = Path(argv[0]) if argv else OUTPUT
    out.write_text(json.dumps(model, indent=1) + "\n")
    print(f"wrote {out}: {len(model['classes'])} classes, {len(model['itineraries'])} itineraries")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
