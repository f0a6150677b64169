"""Compile once, run at any shape (issue 15): one symbolic OpenCL artefact (no --bind,
dims over their --dim ranges) against one --bind compile per shape (prints; asserts nothing).

Per corpus model (TorchScript export): the whole compile time once (e-graph + the
symbolic backend, which compiles once per path of the backend over the ranges, plus a
check per region: `backends/opencl/versions.py`) against N whole compiles
with --bind (one per shape measured); per shape (the stored ones inside the ranges plus
one not stored) the PoCL latency of both artefacts (median wall time of `run`, and the
sum of the launches' device times from profiling events) and the error of each against
the torch reference (onnxruntime on the export for the unstored shape).

    PYTHONPATH=. python3 benchmarks/dynamic.py [--only bert_sdpa,gpt2] [--repeat 20]
        [--dims batch=1..2,height=32..48:16,width=32..40:8 --unstored batch=1,height=48,width=32]
        [--no-magic] [--no-shift-mask] [--kernels 5]

Device times are the median and the minimum over ``--repeat`` runs of the plan of the
summed launch times (profiling events), the two artefacts' launches taken in turn
(`paired_launch_times`); the ratios are of the minima (the machine's load adds time,
never removes it) and of the medians. ``--no-magic`` divides by size arguments with ``/``
and ``%`` (`symbolic.MAGIC_DIVISION` off); ``--kernels N`` prints, per shape, the N
launches whose symbolic device time exceeds the bound one's most.

``--dims``/``--unstored`` replace the table's ranges and unstored shape for every model
of ``--only`` (a smaller grid: the symbolic build compiles once per path over it).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from egraph_compiler import pipeline, runner  # noqa: E402
from egraph_compiler.backends.opencl import symbolic as symbolic_build  # noqa: E402
from tests.corpus import build, check  # noqa: E402

# per model: the --dim ranges (every stored shape inside them) and one shape not stored
# (a third number is the step: --dim height=32..64:8)
MODELS: dict[str, tuple[dict[str, tuple[int, ...]], dict[str, int]]] = {
    "bert_sdpa": ({"batch": (1, 3), "seq": (1, 16)}, {"batch": 2, "seq": 13}),
    "gpt2": ({"batch": (1, 3), "seq": (1, 16)}, {"batch": 3, "seq": 7}),
    "llama": ({"batch": (1, 3), "seq": (1, 16)}, {"batch": 1, "seq": 11}),
    "vit": ({"batch": (1, 4)}, {"batch": 4}),
    "mobilenet_v2": ({"batch": (1, 3), "height": (32, 64, 8), "width": (32, 64, 8)},
                     {"batch": 2, "height": 56, "width": 32}),
    "resnet50": ({"batch": (1, 3), "height": (32, 64, 8), "width": (32, 64, 8)},
                 {"batch": 1, "height": 40, "width": 56}),
    "convnext": ({"batch": (1, 3), "height": (32, 64, 8), "width": (32, 64, 8)},
                 {"batch": 3, "height": 48, "width": 64}),
}


def feeds_at(model: check.CorpusModel, shape: dict[str, int]) -> dict[str, np.ndarray]:
    """Inputs of ``shape`` like the stored ones (token ids < 50, a full mask; pixels)."""
    rng = np.random.default_rng(sum(shape.values()))
    stored = model.feeds(0)
    feeds = {}
    for name, array in stored.items():
        if "seq" in shape:
            dims = [shape["batch"], shape["seq"]]
        elif "height" in shape:
            dims = [shape["batch"], array.shape[1], shape["height"], shape["width"]]
        else:
            dims = [shape["batch"], *array.shape[1:]]
        if array.dtype == np.int64 and "mask" in name:
            feeds[name] = np.ones(dims, np.int64)
        elif array.dtype == np.int64:
            feeds[name] = rng.integers(0, 50, dims).astype(np.int64)
        else:
            feeds[name] = rng.standard_normal(dims).astype(array.dtype)
    return feeds


def latency(models: list[runner.CheckedModel], feeds: dict[str, np.ndarray],
            repeat: int) -> list[tuple[float, float, float, list[float], list[float]]]:
    """Per model: the median wall ms of `run`, the median and the minimum over the
    repeats of its launches' summed device ms, and each launch's minimum and median
    device ms. The models run in turn within each repeat (symbolic, bound, symbolic,
    ...), launch by launch where their plans have as many launches
    (`paired_launch_times`), so load from other processes on the machine falls on all
    of them alike."""
    walls: list[list[float]] = [[] for _ in models]
    for model in models:
        model.run(feeds)
    for _ in range(repeat):
        for k, model in enumerate(models):
            start = time.perf_counter()
            model.run(feeds)
            walls[k].append((time.perf_counter() - start) * 1e3)
    for model in models:
        model.run(feeds)  # the launches are timed on the data `run` left
    runs: list[list[list[float]]] = [[] for _ in models]
    paired = len({len(model.launches) for model in models}) == 1
    for _ in range(repeat):
        if paired:
            for k, times in enumerate(paired_launch_times(models)):
                runs[k].append(times)
            continue
        for k, model in enumerate(models):
            runs[k].append([t * 1e3 for t in model.time_launches(1)])
    return [(statistics.median(w), statistics.median(sum(r) for r in per_run),
             min(sum(r) for r in per_run), [min(ts) for ts in zip(*per_run, strict=True)],
             [statistics.median(ts) for ts in zip(*per_run, strict=True)])
            for w, per_run in zip(walls, runs, strict=True)]


def paired_launch_times(models: list[runner.CheckedModel]) -> list[list[float]]:
    """Per model, the device ms of each launch of one run of its plan, the models'
    launches taken in turn (launch 0 of each, then launch 1, ...), each waited for: a
    burst of load from the other processes on the machine (PoCL's threads share its
    cores) then falls on the same launch of every model, not on one model's whole run
    (GPT-2 at 1x5, 74 µs a run: the median ratio read 1.35 with whole runs in turn,
    its minimum 1.08)."""
    import pyopencl as cl

    times: list[list[float]] = [[] for _ in models]
    for j in range(len(models[0].launches)):
        for k, model in enumerate(models):
            kernel, global_size, local_size = model.launches[j]
            event = cl.enqueue_nd_range_kernel(model.profiling_queue, kernel, global_size,
                                               local_size)
            event.wait()
            times[k].append((event.profile.end - event.profile.start) * 1e-6)
    return times


def launched_kernels(model: object) -> list[str]:
    """The kernel of each launch of a symbolic artefact at the shape it last ran (its
    box's version)."""
    plan, dims = model.plan, model.dims
    box = next(b for b in plan["boxes"]
               if all(lo <= dims[n] <= hi for n, (lo, hi) in b["box"].items()))
    return [la["kernel"] for la in plan["versions"][box["version"]]["launches"]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default=",".join(MODELS))
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--dims", help="NAME=LO..HI[:STEP],... for every model of --only")
    parser.add_argument("--unstored", help="NAME=VALUE,... a shape inside --dims")
    parser.add_argument("--no-magic", action="store_true",
                        help="divide by size arguments with / and % (no magic numbers)")
    parser.add_argument("--no-shift-mask", action="store_true",
                        help="no kernel copies dividing by powers of two with shifts and masks")
    parser.add_argument("--kernels", type=int, default=0,
                        help="per shape, the N launches the symbolic artefact loses most on")
    args = parser.parse_args()
    symbolic_build.MAGIC_DIVISION = not args.no_magic
    symbolic_build.SHIFT_MASK_VERSIONS = not args.no_shift_mask
    if bool(args.dims) != bool(args.unstored):
        parser.error("--dims and --unstored go together")
    if args.dims:
        ranges = {}
        for item in args.dims.split(","):
            name, _, text = item.partition("=")
            span, _, step = text.partition(":")
            low, _, high = span.partition("..")
            ranges[name] = (int(low), int(high), *((int(step),) if step else ()))
        shape = {n: int(v) for n, _, v in (i.partition("=") for i in args.unstored.split(","))}
        for name in args.only.split(","):
            MODELS[name] = (ranges, shape)
    names = args.only.split(",")
    corpus = build.build(names, log=lambda _: None)
    print(f"load average {os.getloadavg()[0]:.2f}; device ms: median / min of {args.repeat}")
    print("| model | shape | symbolic wall ms | bound wall ms | symbolic device ms | "
          "bound device ms | device ratio min / median | err symbolic | err bound |")
    print("|---|---|---|---|---|---|---|---|---|")
    ratios: list[tuple[float, float]] = []
    summary = []
    for name in names:
        ranges, unstored = MODELS[name]
        model = check.load(corpus, name, "ts")
        with tempfile.TemporaryDirectory() as tmp:
            start, cpu = time.perf_counter(), time.process_time()
            spans = {d: (r[0], r[1]) for d, r in ranges.items()}
            steps = {d: r[2] for d, r in ranges.items() if len(r) > 2}
            result = pipeline.compile_model(model.path, dims=spans)
            pipeline.write_artefact(result, "opencl", Path(tmp) / "sym", dim_steps=steps)
            once, once_cpu = time.perf_counter() - start, time.process_time() - cpu
            symbolic = runner.load_artefact(Path(tmp) / "sym")
            shapes = [(s, model.feeds(i), model.expected(i)) for i, s in enumerate(model.shapes)
                      if all(ranges[d][0] <= v <= ranges[d][1] and (v - ranges[d][0]) % steps.get(d, 1) == 0
                             for d, v in s.items() if d in ranges)]
            feeds = feeds_at(model, unstored)
            session = ort.InferenceSession(str(model.path), providers=["CPUExecutionProvider"])
            shapes.append((unstored, feeds, dict(zip(model.outputs, session.run(
                list(model.outputs), feeds), strict=True))))
            n_times = n_cpu = 0.0
            for k, (shape, feed, expected) in enumerate(shapes):
                start, cpu = time.perf_counter(), time.process_time()
                bound_result = pipeline.compile_model(model.path, dims=spans)
                out = Path(tmp) / f"bound{k}"
                pipeline.write_artefact(bound_result, "opencl", out,
                                        bindings={d: v for d, v in shape.items() if d in ranges})
                n_times += time.perf_counter() - start
                n_cpu += time.process_time() - cpu
                bound = runner.load_artefact(out)
                (sym_wall, sym_med, sym_dev, sym_each, sym_each_med), \
                    (bound_wall, bound_med, bound_dev, bound_each, bound_each_med) = latency(
                        [symbolic, bound], feed, args.repeat)
                ratios.append((sym_dev / bound_dev, sym_med / bound_med))
                err_s = check.relative_error(symbolic.run(feed), expected)
                err_b = check.relative_error(bound.run(feed), expected)
                tag = "" if k < len(shapes) - 1 else " (not stored)"
                print(f"| {name} | {shape}{tag} | {sym_wall:.3f} | {bound_wall:.3f} | "
                      f"{sym_med:.3f} / {sym_dev:.3f} | {bound_med:.3f} / {bound_dev:.3f} | "
                      f"{sym_dev / bound_dev:.2f} / {sym_med / bound_med:.2f} | "
                      f"{err_s:.1e} | {err_b:.1e} |")
                if args.kernels and len(sym_each) == len(bound_each):
                    worst = sorted(range(len(sym_each)),
                                   key=lambda j: bound_each[j] - sym_each[j])[:args.kernels]
                    kinds = [la["kind"] for la in bound.plan["launches"]]
                    names = launched_kernels(symbolic.model)
                    print("  slowest against bound (launch kind kernel: symbolic / bound µs, "
                          "min; ratio of medians): " +
                          ", ".join(f"{j} {kinds[j]} {names[j]}: {sym_each[j] * 1e3:.1f} / "
                                    f"{bound_each[j] * 1e3:.1f}; "
                                    f"{sym_each_med[j] / bound_each_med[j]:.2f}" for j in worst))
            dynamic = result.report.target["dynamic"]
            regions = dynamic["regions"]
            summary.append(f"{name}: compile once {once:.1f} s wall / {once_cpu:.1f} s CPU "
                           f"({dynamic['shapes_compiled']} compiles for {dynamic['shapes']} "
                           f"shapes: {regions['paths']} paths + {regions['checked']} checks, "
                           f"{regions['compiled_every_shape']} regions compiled at every "
                           f"shape; {len(dynamic['versions'])} versions, {dynamic['boxes']} "
                           f"boxes, arena peak {dynamic['arena_bytes_peak']} B; expressions "
                           f"{dynamic['expressions']['derived']} derived / "
                           f"{dynamic['expressions']['fitted']} fitted; memory plans over the "
                           f"dims in {dynamic['memory_plan']['boxes_over_the_dims']} boxes) vs "
                           f"{len(shapes)} bound compiles {n_times:.1f} s wall / "
                           f"{n_cpu:.1f} s CPU")
    if ratios:
        print(f"worst ratio over every shape: min {max(r for r, _ in ratios):.2f}, "
              f"median {max(m for _, m in ratios):.2f}")
    print()
    print("\n".join(summary))


if __name__ == "__main__":
    main()
