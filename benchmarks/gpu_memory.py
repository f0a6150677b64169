"""The memory-bound kernels of `benchmarks/gpu.py run` logs as % of the card's memory
peak: their distribution per model class, and kernel by kernel between two logs.

    python3 benchmarks/gpu_memory.py LOG DIR [LOG2 DIR2]
    python3 benchmarks/gpu_memory.py probe     # on the GPU: empty kernel, copy curve
    python3 benchmarks/gpu_memory.py LOG DIR [LOG2 DIR2] --bound PROBE_LOG

``LOG`` is a ``gpu.py run`` output over the artefacts in ``DIR`` (``gpu.py prepare``).
The issue's target is on kernels moving at least 12 MB (below that the 4–5 µs
profiling-event floor caps what a kernel can show): two classes, the transformers of
the issue's memory benchmark (BERT-base and GPT-2 width, b8 × 512: `CLASSES`) and the
torchvision CNNs at batch 8, 224². A kernel's bytes come from the artefact's
``meta.json`` (what `gpu.py` divides by the time), matched to the log's lines in order,
so the time is exact to the printed GB/s.

What the sizes allow (`probe`, NVIDIA H200 through NVIDIA's OpenCL, profiling events,
median of 30): an empty kernel takes 5.6 µs (one work-group) to 6.3 µs (270k
work-items); the fastest plain copy of 12.6 / 25.2 / 50.3 / 100.7 MB moved takes 7.0
/ 9.5 / 16.5 / 27.8 µs, 37 / 55 / 63 / 75 % of the peak. ``--bound`` prints each
kernel's time against that copy's at its size. An event is not the kernel alone:
`gpu_peer.py` measured CUPTI's kernel time of the same L2-cold copies at 4.7 / 8.0 /
14.2 µs (55 / 66 / 74 %), about 2 µs less than CUDA's or OpenCL's events, and an empty
kernel at 0.58 µs against the event's 5.3 µs.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

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


# the bound the kernels are held to: an empty launch and a plain copy, timed with the
# same OpenCL profiling events (`probe`)
_PROBE_SOURCE = """
__kernel void empty(__global float* out) {}
__kernel void copy1(__global const float* in, __global float* out) {
  const int i = get_global_id(0); out[i] = in[i];
}
__kernel void copy4(__global const float4* in, __global float4* out) {
  const int i = get_global_id(0); out[i] = in[i];
}
__kernel void copy4x2(__global const float4* in, __global float4* out, const int t) {
  const int i = get_global_id(0); out[i] = in[i]; out[i + t] = in[i + t];
}
__kernel void copy4x4(__global const float4* in, __global float4* out, const int t) {
  const int i = get_global_id(0);
  const float4 a = in[i], b = in[i + t], c = in[i + 2 * t], d = in[i + 3 * t];
  out[i] = a; out[i + t] = b; out[i + 2 * t] = c; out[i + 3 * t] = d;
}
__kernel void scrub(__global float4* out) { out[get_global_id(0)] = (float4)(1.0f); }
"""
PROBE_MB = (3, 6, 12, 24, 48, 96, 192)  # bytes moved (half read, half written)


def probe(device: str, repeats: int) -> None:
    """Time an empty kernel and plain copies of 3–192 MB moved (median of ``repeats``
    profiling events): L2-warm (the copy repeated back to back: its 50 MB L2 holds the
    smaller ones) and L2-cold (a 256 MB write between repeats)."""
    import statistics

    import pyopencl as cl

    from benchmarks.gpu import _peaks
    from egraph_compiler.backends.opencl.runtime import _device

    card, _, peak = _peaks()
    dev = _device(device)
    ctx = cl.Context([dev])
    queue = cl.CommandQueue(ctx, properties=cl.command_queue_properties.PROFILING_ENABLE)
    program = cl.Program(ctx, _PROBE_SOURCE).build()
    k = {name: cl.Kernel(program, name)
         for name in ("empty", "copy1", "copy4", "copy4x2", "copy4x4", "scrub")}
    big = max(PROBE_MB) * (1 << 20) // 2
    src = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, big)
    dst = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, big)
    scrub = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, 256 << 20)
    cl.enqueue_fill_buffer(queue, src, np.float32(1), 0, big)

    def timed(launch: Any, cold: bool) -> float:
        samples = []
        for n in range(repeats + 3):
            if cold:
                k["scrub"](queue, ((256 << 20) // 16,), (256,), scrub)
            event = launch()
            event.wait()
            if n >= 3:
                samples.append((event.profile.end - event.profile.start) * 1e-9)
        return statistics.median(samples)

    print(f"probe: {card}, memory peak {peak:.0f} GB/s; OpenCL profiling events, median of "
          f"{repeats}")
    for items in (256, 256 * 1056):
        us = 1e6 * timed(lambda n=items: k["empty"](queue, (n,), (256,), dst), False)
        print(f"empty kernel, {items} work-items: {us:.2f} us")
    print("copy: MB moved | µs and % of peak: scalar, float4, 2 float4s, 4 float4s "
          "per work-item (L2-warm) | the same L2-cold")
    for mb in PROBE_MB:
        floats = mb * (1 << 20) // 8
        vec = floats // 4
        launches = [
            lambda n=floats: k["copy1"](queue, (n,), (256,), src, dst),
            lambda n=vec: k["copy4"](queue, (n,), (256,), src, dst),
            lambda n=vec // 2: k["copy4x2"](queue, (n,), (256,), src, dst, np.int32(n)),
            lambda n=vec // 4: k["copy4x4"](queue, (n,), (256,), src, dst, np.int32(n))]
        cells = []
        for cold in (False, True):
            for launch in launches:
                seconds = timed(launch, cold)
                cells.append(f"{1e6 * seconds:7.2f} {100 * floats * 8 / seconds / 1e9 / peak:5.1f}%")
            cells.append("|")
        print(f"{floats * 8 / 1e6:8.1f} MB | " + "  ".join(cells))


def main() -> None:
    if sys.argv[1:2] == ["probe"]:  # on the GPU machine: the empty-kernel and copy bound
        parser = argparse.ArgumentParser(description=probe.__doc__.splitlines()[0])
        parser.add_argument("step", choices=["probe"])
        parser.add_argument("--device", default="NVIDIA")
        parser.add_argument("--repeats", type=int, default=30)
        options = parser.parse_args()
        probe(options.device, options.repeats)
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", help="LOG DIR [LOG2 DIR2]")
    parser.add_argument("--bound", type=Path,
                        help="a `probe` log of the same card: each kernel against the "
                             "fastest copy of its size")
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
    if args.bound is not None:
        curve = copy_curve(args.bound)
        for label, targets in CLASSES.items():
            for k, rows in enumerate(runs):
                picked = [r for r in rows if r["target"] in targets and r["bytes"] >= FLOOR]
                if not picked:
                    continue
                ratios = np.array([_copy_seconds(curve, r["bytes"]) / r["seconds"]
                                   for r in picked])
                seconds = np.array([r["seconds"] for r in picked])
                print(f"{label} (run {k + 1}): kernel time of the fastest copy of its size "
                      f"÷ its time: min {100 * ratios.min():.0f}, quartiles "
                      + " / ".join(f"{100 * q:.0f}" for q in np.quantile(ratios, [.25, .5, .75]))
                      + f", max {100 * ratios.max():.0f}; time-weighted "
                      f"{100 * np.average(ratios, weights=seconds):.0f} %; the copy itself: "
                      f"time-weighted {100 * _copy_share(curve, picked):.1f} % of the peak")
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


def copy_curve(log: Path) -> list[tuple[float, float]]:
    """(bytes moved, seconds) of the fastest copy per size of a `probe` log (every
    form, L2-warm or cold)."""
    curve = []
    for line in log.read_text().splitlines():
        cells = line.split("|")
        if len(cells) >= 3 and cells[0].strip().endswith("MB"):
            times = [float(t) for t in " ".join(cells[1:]).split() if not t.endswith("%")]
            curve.append((float(cells[0].split()[0]) * 1e6, min(times) * 1e-6))
    if not curve:
        raise SystemExit(f"{log}: no copy lines (a `gpu_memory.py probe` log?)")
    return sorted(curve)


def _copy_seconds(curve: list[tuple[float, float]], nbytes: float) -> float:
    """The copy's time at ``nbytes`` moved, linear between the measured sizes."""
    sizes = [b for b, _ in curve]
    return float(np.interp(nbytes, sizes, [t for _, t in curve]))


def _copy_share(curve: list[tuple[float, float]], rows: list[dict]) -> float:
    """The copies of the kernels' sizes as % of the peak, time-weighted as `summary`
    weights the kernels (their bytes over their summed time)."""
    peak = rows[0]["gbs"] / rows[0]["share"]
    moved = sum(r["bytes"] for r in rows)
    return moved / sum(_copy_seconds(curve, r["bytes"]) for r in rows) / 1e9 / peak


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
