"""What the GPU micro-benchmarks (`gpu_conv.py`, `gpu_gemm.py`) share: timing each shape's
artefacts (``old``, ``model``, then every forced option) on the GPU machine, the summary
table, and reading a run's log back for their ``fit`` replays.

A shape's directory holds ``meta.json`` (its FLOPs) and one artefact per option; every
option's output is compared with the first one's (largest difference relative to the
largest value). Times: the median of ``repeats`` runs, OpenCL profiling events.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

# the fixed labels; every other directory of a shape is a forced option
OLD, MODEL = "old", "model"


@dataclass
class Measured:
    """One shape's run: median ms and the variant that ran, per label."""

    shape: str
    flops: int
    ms: dict[str, float] = field(default_factory=dict)
    variants: dict[str, str] = field(default_factory=dict)

    def fastest(self) -> str:
        """The fastest forced option's label (``model`` where none was forced)."""
        return min((k for k in self.ms if k not in (OLD, MODEL)), key=self.ms.get, default=MODEL)


def feeds_for(plan: dict, seed: int) -> dict[str, np.ndarray]:
    """Standard-normal inputs drawn in the plan's input order (the same on every machine)."""
    rng = np.random.default_rng(seed)
    return {name: rng.standard_normal(plan["tensors"][name]["shape"]).astype(np.float32)
            for name in plan["inputs"]}


def time_options(out: Path, device: str, repeats: int,
                 opened: Callable[[Path, Path], Path] = lambda artefact, _tmp: artefact
                 ) -> tuple[str, float, list[Measured]]:
    """Every shape directory of ``out``: each option timed and printed as a row (shape,
    label, ms, GFLOP/s, % of peak, difference; ``old`` and ``model`` with the variant
    they ran), a driver's refusal printed and passed over. ``opened(artefact, tmp)``: the
    directory to load (`gpu_conv` rebuilds its seeded weights under ``tmp``). Returns the
    card, its FP32 peak (GFLOP/s) and the shapes' results."""
    from benchmarks.gpu import _peaks
    from egraph_compiler.backends.opencl.runtime import CompiledModel

    card, peak_gflops, _ = _peaks()
    print(f"card: {card}; FP32 peak {peak_gflops / 1e3:.1f} TFLOP/s (nvidia-smi max clocks)")
    print(f"{'shape':<22}{'option':<52}{'ms':>8}{'GFLOP/s':>10}{'% peak':>8}{'rel diff':>10}")
    results = []
    for shape_dir in sorted(p for p in out.iterdir() if (p / "meta.json").exists()):
        measured = Measured(shape_dir.name, json.loads((shape_dir / "meta.json").read_text())["flops"])
        flops = measured.flops
        reference = None
        for label in [OLD, MODEL, *sorted(p.name for p in shape_dir.iterdir()
                                          if p.is_dir() and p.name not in (OLD, MODEL))]:
            with tempfile.TemporaryDirectory() as tmp:
                try:
                    compiled = CompiledModel(opened(shape_dir / label, Path(tmp)), device)
                except Exception as error:  # a kernel the driver refuses: say so, go on
                    print(f"{shape_dir.name:<22}{label:<52} failed: {str(error)[:200]}", flush=True)
                    continue
                result = compiled.run(feeds_for(compiled.plan, 0))["y"]
                seconds = [sum(compiled.time_launches(1)) for _ in range(repeats)]
                ms = statistics.median(seconds) * 1e3
                if reference is None:
                    reference = result
                diff = float(np.max(np.abs(result - reference)) /
                             max(float(np.max(np.abs(reference))), 1e-30))
                variant = compiled.plan["launches"][0]["variant"]
                measured.ms[label], measured.variants[label] = ms, variant
                print(row(shape_dir.name, label, variant, ms, flops, peak_gflops, diff), flush=True)
                del compiled
        results.append(measured)
    return card, peak_gflops, results


def row(shape: str, label: str, variant: str, ms: float, flops: int, peak_gflops: float,
        diff: float) -> str:
    """One option's line of a run log (`read_log` reads it back): ``old`` and ``model``
    with the variant they ran."""
    shown = label if label not in (OLD, MODEL) else f"{label}: {variant}"
    return (f"{shape:<22}{shown:<52}{ms:8.3f}{flops / ms / 1e6:10.0f}"
            f"{100 * flops / ms / 1e6 / peak_gflops:7.1f}%{diff:10.1e}")


def summary(card: str, peak_gflops: float, results: list[Measured], what: str) -> None:
    """The markdown table: per shape ``old``, ``model`` (new) and the fastest forced option,
    ms and % of FP32 peak; ``what`` says what old and new are."""
    print(f"\n{card}: {what}; ms and % of FP32 peak")
    print("| shape | old | ms | % | new | ms | % | fastest | ms | % |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for m in results:
        if OLD not in m.ms or MODEL not in m.ms:
            continue

        def pct(ms: float, flops: int = m.flops) -> float:
            return 100 * flops / ms / 1e6 / peak_gflops

        best = m.fastest()
        print(f"| {m.shape} | {m.variants[OLD]} | {m.ms[OLD]:.3f} | {pct(m.ms[OLD]):.1f} | "
              f"{m.variants[MODEL]} | {m.ms[MODEL]:.3f} | {pct(m.ms[MODEL]):.1f} | {best} | "
              f"{m.ms[best]:.3f} | {pct(m.ms[best]):.1f} |")


def read_log(log: Path, shapes: dict, options: str) -> dict[str, dict[str, float]]:
    """A run log's ms per shape and label: ``old`` and the forced options whose labels
    match the regular expression ``options`` (a long shape name may fill its column)."""
    row = re.compile(rf"(\S+?)\s*({OLD}|{options})(?::.*?)?\s+([\d.]+)\s+\d+\s")
    measured: dict[str, dict[str, float]] = {}
    for line in log.read_text().splitlines():
        found = row.match(line)
        if found and found.group(1) in shapes:
            measured.setdefault(found.group(1), {})[found.group(2)] = float(found.group(3))
    return measured


def replay(measured: dict[str, dict[str, float]], picks: dict[str, str], old: str) -> None:
    """The cost model's picks (a label per shape: a forced option's, or ``old`` where it
    keeps the earlier option) against a log's times: per shape the pick, the fastest
    forced option and ``old``; then the sums (``old``: what the old column is)."""
    totals = [0.0, 0.0, 0.0]
    for name, label in picks.items():
        times = measured[name]
        best = min(v for key, v in times.items() if key != OLD)
        chosen = times.get(label, float("nan"))
        for i, value in enumerate((chosen, best, times[OLD])):
            totals[i] += value
        print(f"{name:<22} pick {label:<50}{chosen:8.3f}  fastest {best:.3f}  old {times[OLD]:.3f}"
              f"{'  MISS' if chosen > 1.05 * best else ''}")
    print(f"sum of picks {totals[0]:.3f} ms, of the fastest {totals[1]:.3f}, of old ({old}) "
          f"{totals[2]:.3f}")


def main(doc: str, prepare: Callable[[Path, str | None, str | None], None],
         run: Callable[[Path, str, int], None], fit: Callable[[Path], None], repeats: int) -> None:
    """A micro-benchmark's command line: ``prepare DIR`` here, ``run DIR`` on the GPU
    machine, ``fit LOG`` (a run's log) anywhere."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("step", choices=["prepare", "run", "fit"])
    parser.add_argument("dir")
    parser.add_argument("--device", default="NVIDIA")
    parser.add_argument("--repeats", type=int, default=repeats)
    parser.add_argument("--only", help="shape names, comma-separated")
    parser.add_argument("--options", help="prepare: only the forced options whose labels match "
                        "this regular expression (old and model always)")
    args = parser.parse_args()
    if args.step == "fit":  # DIR: a `run` log
        fit(Path(args.dir))
    elif args.step == "prepare":
        prepare(Path(args.dir), args.only, args.options)
    else:
        run(Path(args.dir), args.device, args.repeats)
