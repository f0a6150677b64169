"""The memory-bound kernels of `benchmarks/gpu.py run` logs as % of the card's memory
peak: their distribution per model class, and kernel by kernel between two logs.

    python3 benchmarks/gpu_memory.py LOG DIR [LOG2 DIR2]

``LOG`` is a ``gpu.py run`` output over the artefacts in ``DIR`` (``gpu.py prepare``).
The issue's target is on kernels moving at least 12 MB (below that the 4–5 µs
profiling-event floor caps what a kernel can show): two classes, the transformers of
the issue's memory benchmark (BERT-base and GPT-2 width, b8 × 512: `CLASSES`) and the
torchvision CNNs at batch 8, 224². A kernel's bytes come from the artefact's
``meta.json`` (what `gpu.py` divides by the time), matched to the log's lines in order,
so the time is exact to the printed GB/s.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

FLOOR = 12_000_000  # bytes
CLASSES = {"transformers": ("bert_base2_b8", "gpt2_2_b8"),
           "CNNs b8": ("resnet18_b8", "resnet50_b8", "efficientnet_b0_b8", "mobilenet_v2_b8",
                       "mobilenet_v3_small_b8", "convnext_tiny_b8")}
_LINE = re.compile(r"(\S+)\s+(.+?)\s{2,}(\w+)\s+([\d.]+)\s+(\d+)\s+([\d.]+)%$")


def kernels(log: Path, artefacts: Path) -> list[dict]:
    """Every memory-bound line of ``log``: target, what, kind, GB/s, share of the peak,
    bytes (from meta.json) and seconds."""
    text = log.read_text()
    peak = float(re.search(r"memory peak (\d+) GB/s", text).group(1))  # type: ignore[union-attr]
    section = text.split("memory-bound kernels (no conv/matmul) moving 1 MiB or more")[1]
    by_target: dict[str, list[tuple[str, str, float]]] = {}
    for line in section.splitlines()[1:]:
        m = _LINE.match(line.strip())
        if m is None:
            continue
        target, what, kind, _, gbs, _ = m.groups()
        by_target.setdefault(target, []).append((what, kind, float(gbs)))
    result = []
    for target, lines in by_target.items():
        if not (artefacts / target / "meta.json").exists():  # a model not prepared there
            continue
        meta = json.loads((artefacts / target / "meta.json").read_text())
        plan = json.loads((artefacts / target / "fused" / "plan.json").read_text())
        blocks = meta["fused"]["blocks"]
        seen: list[int] = []
        for launch in plan["launches"]:
            block = int(launch["block"])
            if block not in seen:
                seen.append(block)
        moved = [blocks[str(b)]["bytes"] for b in seen
                 if not blocks[str(b)]["flops"] and blocks[str(b)]["bytes"] >= (1 << 20)]
        if len(moved) != len(lines):
            raise SystemExit(f"{log}: {target} has {len(lines)} memory lines, its plan "
                             f"{len(moved)} memory-bound blocks")
        for (what, kind, gbs), nbytes in zip(lines, moved, strict=True):
            result.append({"target": target, "what": what, "kind": kind, "gbs": gbs,
                           "share": gbs / peak, "bytes": nbytes, "seconds": nbytes / gbs / 1e9})
    return result


def summary(rows: list[dict]) -> str:
    shares = np.array([r["share"] for r in rows])
    seconds = np.array([r["seconds"] for r in rows])
    quartiles = " / ".join(f"{100 * q:.0f}" for q in np.quantile(shares, [0.25, 0.5, 0.75]))
    return (f"{len(rows)} kernels, {1e3 * seconds.sum():.3f} ms; % of memory peak: min "
            f"{100 * shares.min():.0f}, quartiles {quartiles}, max {100 * shares.max():.0f}; "
            f"time-weighted {100 * np.average(shares, weights=seconds):.1f}; at 60 % or more: "
            f"{int((shares >= 0.6).sum())}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", help="LOG DIR [LOG2 DIR2]")
    args = parser.parse_args()
    if len(args.runs) not in (2, 4):
        parser.error("give LOG DIR, or LOG DIR LOG2 DIR2")
    runs = [kernels(Path(args.runs[k]), Path(args.runs[k + 1]))
            for k in range(0, len(args.runs), 2)]
    for label, targets in CLASSES.items():
        for k, rows in enumerate(runs):
            picked = [r for r in rows if r["target"] in targets and r["bytes"] >= FLOOR]
            if picked:
                print(f"{label} (run {k + 1}, ≥ 12 MB): {summary(picked)}")
    if len(runs) == 2:
        print("\nkernel by kernel (≥ 12 MB in either run): MB, run 1 ms / % → run 2 ms / %")
        old = {(r["target"], n): r for n, r in _numbered(runs[0])}
        for n, new in _numbered(runs[1]):
            before = old.get((new["target"], n))
            if before is None or max(before["bytes"], new["bytes"]) < FLOOR:
                continue
            print(f"{new['target']:<20}{new['what'][:36]:<38}{new['bytes'] / 1e6:7.1f}  "
                  f"{1e3 * before['seconds']:7.3f} {100 * before['share']:5.1f}% → "
                  f"{1e3 * new['seconds']:7.3f} {100 * new['share']:5.1f}%")


def _numbered(rows: list[dict]) -> list[tuple[int, dict]]:
    """Each row with its position among its target's rows."""
    counts: dict[str, int] = {}
    result = []
    for row in rows:
        n = counts.get(row["target"], 0)
        counts[row["target"]] = n + 1
        result.append((n, row))
    return result


if __name__ == "__main__":
    main()
