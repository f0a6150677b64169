"""Kernel-parameter search on the OpenCL device: Chameleon beside random search.

For every conv/matmul shape class of a small CNN (or, with ``--gpu``, of GPU-sized
classes), runs `kernel_search.chameleon_search` and `random_search` with each of
``--seeds`` seeds, each with ``--budget`` measurements (OpenCL profiling events; one
shared measurement cache, so an option is timed once). Prints both best-so-far
curves (median and quartiles over seeds) and, per seed, the ratio the issue asks
for: random search's measurements to reach its own best at the full budget over
Chameleon's to reach that same time (0 where it never does).

    PYTHONPATH=. python3 benchmarks/tune.py [--budget 24] [--seeds 20] [--gpu --device NVIDIA]
    ... --gpu --device NVIDIA --exhaustive DIR --jobs 14   # every option first: DIR/space.json
    ... --gpu --replay A/space.json B/space.json --seed-base 100 [--transfer others]
    ... --gpu --replay ... --fit KEY   # fit the knobs on KEY's class, report on the rest
    ... --convert-gpu-gemm LOG DIR OUT.json   # gpu_gemm.py run's log as a replay space

Replayed spaces: ``benchmarks/tune_spaces/h200_session{8,9}.json`` (five classes,
every option measured on an H200; the knobs were chosen on them),
``h200_gpu_gemm_session9.json`` (21 MatMul classes of `benchmarks/gpu_gemm.py`, every
``sgemm`` option; the ``sgemm`` cost model was fitted to these very times, so the prior
is in-sample there), ``h100_session12.json`` (`SESSION12`'s fifteen classes, every option
measured on an H100 by `benchmarks/tune_measure.py`: the out-of-sample spaces) and
``h100_session89.json`` (session 8/9's five classes again, on that H100).
``--random-from-default``: random search measures the compiler's default first too, so
the ratio shows what Chameleon's search adds beyond the default.

``--transfer``: ``order`` (default; as `dnnr tune`: each class starts from Chameleon's
measurements of the classes before it), ``others`` (replays: from every other class)
or ``none``. ``--gpu`` classes: ResNet's 3×3, stride-2 3×3 and 1×1 convs at batch 8,
BERT-base's FFN matmul at 8×128 tokens and MobileNetV2's depthwise 3×3 at batch 8,
from the ``gpu`` device class's defaults (the GPU machine needs no egglog, z3 or
onnxruntime).
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from egraph_compiler.backends.opencl import cost  # noqa: E402
from egraph_compiler.backends.opencl.kernel_search import (  # noqa: E402
    Anchor,
    Curve,
    Knobs,
    Measure,
    Measurer,
    Observation,
    _space,
    anchors,
    chameleon_search,
    observations,
    option_to_json,
    random_search,
    tile_space,
)
from egraph_compiler.backends.opencl.kernels import KernelParams, _sgemm_offered  # noqa: E402
from egraph_compiler.backends.opencl.runtime import CompiledModel  # noqa: E402
from egraph_compiler.backends.opencl.sgemm import VARIANT as SGEMM  # noqa: E402
from egraph_compiler.ir.graph import Graph  # noqa: E402
from tests.backends.opencl.helpers import static_graph  # noqa: E402


def small_cnn() -> onnx.ModelProto:
    """Four conv shape classes (3×3, strided 3×3, 1×1, depthwise) and a classifier."""
    rng = np.random.default_rng(0)
    inits, nodes = [], []

    def weight(name: str, shape: tuple[int, ...]) -> str:
        inits.append(numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32) * 0.1,
                                             name))
        return name

    nodes.append(helper.make_node("Conv", ["x", weight("w1", (32, 16, 3, 3))], ["c1"],
                                  pads=[1, 1, 1, 1]))
    nodes.append(helper.make_node("Conv", ["c1", weight("w2", (64, 32, 3, 3))], ["c2"],
                                  pads=[1, 1, 1, 1], strides=[2, 2]))
    nodes.append(helper.make_node("Conv", ["c2", weight("w3", (64, 1, 3, 3))], ["c3"],
                                  pads=[1, 1, 1, 1], group=64))
    nodes.append(helper.make_node("Conv", ["c3", weight("w4", (128, 64, 1, 1))], ["c4"]))
    nodes.append(helper.make_node("GlobalAveragePool", ["c4"], ["p"]))
    nodes.append(helper.make_node("Flatten", ["p"], ["f"]))
    nodes.append(helper.make_node("MatMul", ["f", weight("w5", (128, 100))], ["y"]))
    graph = helper.make_graph(
        nodes, "small_cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 32, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 100])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def gpu_classes() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """ResNet-18's 3×3 (64 ch, 56²), stride-2 3×3 (64→128) and a 1×1 (128→512) conv at
    batch 8, BERT-base's first FFN matmul (1024 tokens × 768 → 3072) and MobileNetV2's
    depthwise 3×3 (144 ch, 56²) at batch 8."""
    rng = np.random.default_rng(0)
    inits, nodes = [], []

    def weight(name: str, shape: tuple[int, ...]) -> str:
        fan_in = int(np.prod(shape[1:])) if len(shape) == 4 else shape[0]
        inits.append(numpy_helper.from_array(
            (rng.standard_normal(shape) / np.sqrt(fan_in)).astype(np.float32), name))
        return name

    nodes.append(helper.make_node("Conv", ["x", weight("w1", (64, 64, 3, 3))], ["c1"],
                                  pads=[1, 1, 1, 1]))
    nodes.append(helper.make_node("Conv", ["c1", weight("w2", (128, 64, 3, 3))], ["c2"],
                                  pads=[1, 1, 1, 1], strides=[2, 2]))
    nodes.append(helper.make_node("Conv", ["c2", weight("w3", (512, 128, 1, 1))], ["y"]))
    nodes.append(helper.make_node("MatMul", ["t", weight("w4", (768, 3072))], ["u"]))
    nodes.append(helper.make_node("Conv", ["d", weight("w5", (144, 1, 3, 3))], ["z"],
                                  pads=[1, 1, 1, 1], group=144))
    graph = helper.make_graph(
        nodes, "gpu_classes",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 64, 56, 56]),
         helper.make_tensor_value_info("t", TensorProto.FLOAT, [1024, 768]),
         helper.make_tensor_value_info("d", TensorProto.FLOAT, [8, 144, 56, 56])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8, 512, 28, 28]),
         helper.make_tensor_value_info("u", TensorProto.FLOAT, [1024, 3072]),
         helper.make_tensor_value_info("z", TensorProto.FLOAT, [8, 144, 56, 56])], inits)
    feeds = {"x": rng.standard_normal((8, 64, 56, 56)).astype(np.float32),
             "t": rng.standard_normal((1024, 768)).astype(np.float32),
             "d": rng.standard_normal((8, 144, 56, 56)).astype(np.float32)}
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), feeds


# session 12's out-of-sample classes (`session12_classes`), none in the session 8/9
# spaces the knobs were chosen on: name -> ("conv", batch, in, out, side, kernel, group)
# or ("matmul", batch, m, n, k, constant B)
SESSION12: dict[str, tuple[str, int, int, int, int, int | bool, int]] = {
    "gpt2_b1_qkv": ("matmul", 1, 512, 2304, 768, True, 0),
    "gpt2_b1_ffn2": ("matmul", 1, 512, 768, 3072, True, 0),
    "bert_b1_scores": ("matmul", 12, 512, 512, 64, False, 0),
    "convnext_b8_dw7": ("conv", 8, 96, 96, 56, 7, 96),
    "effnet_b8_expand": ("conv", 8, 40, 240, 28, 1, 1),
    "effnet_b8_project": ("conv", 8, 672, 112, 14, 1, 1),
    "effnet_b8_se": ("conv", 8, 240, 10, 1, 1, 1),
    "resnet50_b8_1x1": ("conv", 8, 256, 64, 56, 1, 1),
    "resnet50_b8_3x3": ("conv", 8, 256, 256, 14, 3, 1),
    # the second call's six
    "vit_b8_qkv": ("matmul", 1, 1576, 2304, 768, True, 0),
    "gpt2_b1_context": ("matmul", 12, 512, 64, 512, False, 0),
    "mobilenet_v2_b8_expand": ("conv", 8, 16, 96, 112, 1, 1),
    "effnet_b8_se_expand": ("conv", 8, 10, 240, 1, 1, 1),
    "resnet18_b1_3x3": ("conv", 1, 512, 512, 7, 3, 1),
    "mobilenet_v3_b1_1x1": ("conv", 1, 96, 576, 7, 1, 1),
}


def session12_classes(only: str = "") -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """`SESSION12`'s classes (those whose name contains one of ``only``'s comma-separated
    parts) as one graph of independent nodes: GPT-2's batch-1 QKV, second FFN and
    context matmuls (512 tokens, 12 heads), BERT's batch-1 attention scores, ViT-B's QKV
    at batch 8 (1576 tokens); at batch 8 ConvNeXt-T's 7×7 depthwise (96 ch, 56²),
    EfficientNet-B0's 1×1 expand (40→240, 28²), project (672→112, 14²) and
    squeeze-and-excitation reduce and expand (240↔10 on 1×1), ResNet-50's first 1×1
    (256→64, 56²) and a stage-3 3×3 (256 ch, 14²), MobileNetV2's first expand (16→96,
    112²); at batch 1 ResNet-18's last 3×3 (512 ch, 7²) and a MobileNetV3 1×1 (96→576,
    7²). Weights are constants, as in the models."""
    rng = np.random.default_rng(12)
    inits, nodes, inputs, outputs, feeds = [], [], [], [], {}

    def tensor(name: str, shape: tuple[int, ...], constant: bool) -> str:
        array = (rng.standard_normal(shape) / np.sqrt(shape[-2] if len(shape) == 2
                                                       else np.prod(shape[1:]))).astype(np.float32)
        if constant:
            inits.append(numpy_helper.from_array(array, name))
        else:
            inputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, list(shape)))
            feeds[name] = array
        return name

    for name, (kind, batch, a, b, c, d, group) in SESSION12.items():
        if only and not any(part in name for part in only.split(",")):
            continue
        if kind == "matmul":  # batch, m, n, k, constant B
            lead = (batch,) if batch > 1 else ()
            left = tensor(f"{name}_a", (*lead, a, c), False)
            right = tensor(f"{name}_b", (*lead, c, b), bool(d))
            nodes.append(helper.make_node("MatMul", [left, right], [f"{name}_y"]))
            shape = [*lead, a, b]
        else:  # batch, in, out, side, kernel, group
            x = tensor(f"{name}_x", (batch, a, c, c), False)
            w = tensor(f"{name}_w", (b, a // group, d, d), True)
            nodes.append(helper.make_node("Conv", [x, w], [f"{name}_y"], group=group,
                                          pads=[int(d) // 2] * 4))
            shape = [batch, b, c, c]
        outputs.append(helper.make_tensor_value_info(f"{name}_y", TensorProto.FLOAT, shape))
    graph = helper.make_graph(nodes, "session12_classes", inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), feeds


@dataclass
class ClassRun:
    """Both searches of one class, one curve each per seed."""

    key: str
    space: int
    chameleon: list[Curve]
    random: list[Curve]

    def ratios(self) -> list[float]:
        """Per seed: random search's measurements to reach its own best at the full
        budget over Chameleon's to reach that same time (0 where it never does)."""
        out = []
        for cham, rand in zip(self.chameleon, self.random, strict=True):
            best = min(rand.times)
            at = cham.reaches(best)
            out.append(rand.reaches(best) / at if at else 0.0)  # type: ignore[operator]
        return out


def run_classes(found: list[Anchor], measures: list[Measure], budget: int, seeds: list[int],
                knobs: Knobs, transfer: str, random_from_default: bool = False
                ) -> list[ClassRun]:
    """Chameleon and random search with each seed on every class. ``transfer``:
    ``none``; ``order`` (a class's search starts from Chameleon's measurements on the
    classes before it, as `search_model` does); ``others`` (from every other class, for
    replays: each class in turn is the one searched last). ``random_from_default``:
    random search measures the compiler's default first, as Chameleon does."""
    runs = [ClassRun(a.key, len(a.space), [], []) for a in found]
    for seed in seeds:
        alone = [chameleon_search(a.space, a.default, m, budget, seed, knobs)
                 for a, m in zip(found, measures, strict=True)] if transfer == "others" else []
        history: list[Observation] = []
        for k, (anchor, measure) in enumerate(zip(found, measures, strict=True)):
            if transfer == "others":
                history = [o for j, c in enumerate(alone) if j != k for o in observations(c)]
            cham = chameleon_search(anchor.space, anchor.default, measure, budget, seed, knobs,
                                    history if transfer != "none" else [])
            if transfer == "order":
                history += observations(cham)
            runs[k].chameleon.append(cham)
            runs[k].random.append(random_search(
                anchor.space, measure, budget, seed,
                anchor.default if random_from_default else None))
    return runs


def report(runs: list[ClassRun], budget: int, device: str) -> list[float]:
    """Both best-so-far curves (median and quartiles over seeds) and the ratios."""
    ratios: list[float] = []
    for run in runs:
        print(f"{run.key}  (space {run.space}, {len(run.random)} seeds, {device})")
        print("  measurements     " + " ".join(f"{i + 1:6d}" for i in range(budget)))
        for name, curves in (("chameleon", run.chameleon), ("random", run.random)):
            table = np.array([c.best_so_far() + [c.best_so_far()[-1]] * (budget - len(c.times))
                              for c in curves])
            for q, label in ((25, "q1"), (50, "median"), (75, "q3")):
                print(f"  {name[:4]} {label:6s}    "
                      + " ".join(f"{t:6.1f}" for t in np.percentile(table, q, axis=0)))
        r = run.ratios()
        ratios += r
        print(f"  ratio random/chameleon: median {statistics.median(r):.2f}x, quartiles "
              f"{np.percentile(r, 25):.2f} / {np.percentile(r, 75):.2f}, never reached "
              f"{sum(x == 0 for x in r)} of {len(r)}", flush=True)
    if ratios:
        print(f"all classes: median ratio {statistics.median(ratios):.2f}x over {len(ratios)} "
              f"runs (quartiles {np.percentile(ratios, 25):.2f} / {np.percentile(ratios, 75):.2f})")
    return ratios


def replayed(paths: list[str], graph: Graph, params: KernelParams, tmp: Path
             ) -> tuple[list[Anchor], list[Measure]]:
    """The classes that ``--exhaustive`` space.json files (and `convert_gpu_gemm`'s)
    measured, with a measure that looks each option up: ``graph``'s classes first, then
    any other MatMul class of the files (priced from its key, as `anchors` prices a
    MatMul). A class is replayed on the options of today's space that were measured;
    today's options may go unmeasured only where their whole variant was not measured
    (``sgemm`` joined the MatMul space after session 8's measurements, ``conv-gemm``
    the stride-2 conv's after session 9's; gpu_gemm.py measured only ``sgemm``), and then the default is the compiler's pick among the
    measured variants. Any other gap means the space changed: an
    error (measure it again)."""
    table: dict[str, list[tuple[dict[str, object], float]]] = {}
    for path in paths:  # a `tune_measure.py` space also names its card and its failures
        table.update({key: rows for key, rows in json.loads(Path(path).read_text()).items()
                      if key not in ("card", "failed")})
    classes = anchors(graph, params, tmp)
    if any(key not in {a.key for a in classes} for key in table):  # session 12's classes
        extra_model, extra_feeds = session12_classes()
        classes += anchors(static_graph(extra_model, extra_feeds), params, tmp / "s12")
    known = {a.key for a in classes}
    for key in table:
        if key not in known and key.startswith("MatMul") and "gemv" not in key:
            priced_with = {"op": "MatMul", "sgemm": _sgemm_offered(params, "matmul")}
            default, space = _space(key, params=params, tiles=tile_space(), **priced_with)
            classes.append(Anchor(key, graph, default, space, tuple(priced_with.items())))
    found, measures = [], []
    for anchor in classes:
        if anchor.key not in table:
            continue
        times = {json.dumps(o, sort_keys=True): t for o, t in table[anchor.key]}
        kept = tuple(o for o in anchor.space
                     if json.dumps(option_to_json(o), sort_keys=True) in times)
        measured_variants = {o.variant for o in kept}
        gaps = [o.describe() for o in anchor.space
                if o not in kept and o.variant in measured_variants]
        if gaps or not kept:
            raise SystemExit(f"error: {anchor.key}: the replayed space lacks {len(gaps)} "
                             f"options of today's space (e.g. {gaps[0] if gaps else 'all'}); "
                             "measure it again")
        if len(kept) < len(anchor.space):
            unmeasured = sorted({o.variant for o in anchor.space} - measured_variants)
            print(f"{anchor.key}: replayed on its {len(kept)} measured options of "
                  f"{len(anchor.space)} (unmeasured variants: {', '.join(unmeasured)})")
            default = anchor.default
            if default not in kept:  # the compiler's pick among the measured variants
                default = _space(anchor.key, params=params, tiles=tile_space(),
                                 **dict(anchor.priced_with),
                                 variants=frozenset(measured_variants))[0]
            anchor = Anchor(anchor.key, anchor.graph, default, kept, anchor.priced_with)

        def measure(option: cost.Option, times: dict[str, float] = times) -> float:
            return times[json.dumps(option_to_json(option), sort_keys=True)]

        found.append(anchor)
        measures.append(measure)
    return found, measures


def convert_gpu_gemm(log: Path, micro: Path) -> dict[str, list[tuple[dict[str, object], float]]]:
    """`benchmarks/gpu_gemm.py run`'s log (every ``sgemm`` option of each shape, ms) as
    a replay space (µs), keyed by the shape class its artefacts in ``micro``
    (`gpu_gemm.py prepare`'s directory) were compiled for. ``old`` (the ``tiled`` pick)
    is left out: one option of a variant whose other options went unmeasured would
    leave the replay unable to tell a measured space from a changed one."""
    import re

    sgemms = {tile.describe().replace(" ", "_"): tile for tile in cost.SGEMMS}
    table: dict[str, list[tuple[dict[str, object], float]]] = {}
    for line in log.read_text().splitlines():
        found = re.match(r"(\S+)\s+(sgemm_\S+)\s+([\d.]+)\s", line)
        if not found:
            continue
        shape, label, ms = found.group(1), found.group(2), float(found.group(3))
        plan = micro / shape / label / "plan.json"
        if not plan.exists():
            raise SystemExit(f"error: {plan}: no artefact for {shape} {label} of {log}")
        launch = next(la for la in json.loads(plan.read_text())["launches"]
                      if la.get("shape_key"))
        option = cost.Option(SGEMM, sgemms[label], 0.0)
        table.setdefault(launch["shape_key"], []).append((option_to_json(option), 1e3 * ms))
    return table


GRID = {"length": (1.5, 2.5), "noise": (0.05, 0.3), "trend_ridge": (1.0, 4.0, 16.0, None),
        "trend_after": (2, 3), "first": (1, 2, 3), "batch": (1, 2),
        "nearest_centroid": (True, False), "confidence": (None, 0.5)}


def fit(found: list[Anchor], measures: list[Measure], budget: int, seeds: list[int],
        transfer: str) -> Knobs:
    """The knob setting of `GRID` with the highest median ratio on these classes/seeds."""
    best: tuple[float, Knobs] = (-1.0, Knobs())
    names = list(GRID)
    for values in itertools.product(*GRID.values()):
        knobs = Knobs(**dict(zip(names, values, strict=True)))  # type: ignore[arg-type]
        runs = run_classes(found, measures, budget, seeds, knobs, transfer)
        score = statistics.median([r for run in runs for r in run.ratios()])
        if score > best[0]:
            best = (score, knobs)
    print(f"fitted on {', '.join(a.key for a in found)} (seeds {seeds[0]}..{seeds[-1]}): "
          f"median {best[0]:.2f}x with {best[1]}")
    return best[1]


def prebuild(anchor: Anchor, params: KernelParams, device: str | None, jobs: int) -> None:
    """Compile every option's artefact and build its OpenCL program in ``jobs`` processes
    first: pyopencl keeps built binaries on disk, keyed by source, so the measuring
    process, which times one option at a time, finds them built."""
    if jobs <= 1:
        return
    import multiprocessing

    chunks = [anchor.space[k::jobs] for k in range(jobs)]
    with multiprocessing.get_context("spawn").Pool(jobs) as pool:
        pool.starmap(_build_options, [(anchor, c, params, device) for c in chunks])


def _build_options(anchor: Anchor, options: tuple[cost.Option, ...], params: KernelParams,
                   device: str | None) -> None:
    from egraph_compiler.backends.opencl.kernel_search import _launches

    with tempfile.TemporaryDirectory(prefix="dnnr-prebuild-") as tmp:
        for k, option in enumerate(options):
            out = Path(tmp) / f"o{k}"
            _launches(anchor.graph, replace(params, tuned=((anchor.key, option),)), out, None)
            CompiledModel(out, device)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=int, default=24)
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--seed-base", type=int, default=0,
                        help="first seed (report on seeds the knobs were not fitted on)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default=None)
    parser.add_argument("--gpu", action="store_true", help="GPU-sized classes, gpu defaults")
    parser.add_argument("--exhaustive", metavar="DIR",
                        help="measure every option of each class first; write DIR/space.json")
    parser.add_argument("--jobs", type=int, default=1,
                        help="--exhaustive: build the options' programs in this many processes")
    parser.add_argument("--only", default="", help="classes whose key contains this")
    parser.add_argument("--replay", metavar="JSON", nargs="+",
                        help="replay the searches on --exhaustive space.json files (no device)")
    parser.add_argument("--transfer", choices=("none", "order", "others"), default="order",
                        help="what a class's search starts from (run_classes)")
    parser.add_argument("--fit", metavar="KEY", default=None,
                        help="--replay: fit the knobs on the classes whose key contains KEY "
                             "(seeds 1000.., --fit-seeds of them) and report on the others")
    parser.add_argument("--fit-seeds", type=int, default=30)
    parser.add_argument("--random-from-default", action="store_true",
                        help="--replay: random search measures the compiler's default first, "
                             "as Chameleon does (what the search adds beyond the default)")
    parser.add_argument("--convert-gpu-gemm", nargs=3, metavar=("LOG", "DIR", "OUT"),
                        help="write gpu_gemm.py run's LOG (artefacts in DIR) as a replay "
                             "space OUT")
    args = parser.parse_args()
    if args.convert_gpu_gemm:
        log, micro, out = (Path(p) for p in args.convert_gpu_gemm)
        table = convert_gpu_gemm(log, micro)
        out.write_text(json.dumps(table))
        print(f"{out}: {len(table)} classes, {sum(map(len, table.values()))} options")
        return 0
    if args.gpu:
        model, feeds = gpu_classes()
        graph = static_graph(model, feeds)
        params = KernelParams.for_device("gpu")
    else:
        x = np.random.default_rng(1).standard_normal((1, 16, 32, 32)).astype(np.float32)
        graph = static_graph(small_cnn(), {"x": x})
        params = KernelParams()
    seeds = list(range(args.seed_base, args.seed_base + args.seeds))
    with tempfile.TemporaryDirectory(prefix="dnnr-bench-tune-") as tmp:
        if args.replay:
            found, measures = replayed(args.replay, graph, params, Path(tmp))
            keep = [k for k, a in enumerate(found) if args.only in a.key]
            found, measures = [found[k] for k in keep], [measures[k] for k in keep]
            knobs = Knobs()
            if args.fit is not None:
                fitted = [k for k, a in enumerate(found) if args.fit in a.key]
                knobs = fit([found[k] for k in fitted], [measures[k] for k in fitted],
                            args.budget, list(range(1000, 1000 + args.fit_seeds)), args.transfer)
                found = [a for k, a in enumerate(found) if k not in fitted]
                measures = [m for k, m in enumerate(measures) if k not in fitted]
            report(run_classes(found, measures, args.budget, seeds, knobs, args.transfer,
                               args.random_from_default),
                   args.budget, "replayed")
            return 0
        found = [a for a in anchors(graph, params, Path(tmp) / "probe") if args.only in a.key]
        measurers = [Measurer(a, params, Path(tmp) / f"a{k}", None, args.device, args.repeats)
                     for k, a in enumerate(found)]
        if args.exhaustive:  # the whole space, then the searches over it
            table: dict[str, list[tuple[dict[str, object], float]]] = {}
            for anchor, measure in zip(found, measurers, strict=True):
                start = time.perf_counter()
                prebuild(anchor, params, args.device, args.jobs)
                built = time.perf_counter() - start
                table[anchor.key] = [(option_to_json(o), measure(o)) for o in anchor.space]
                best = min(t for _, t in table[anchor.key])
                print(f"{anchor.key}: {len(anchor.space)} options, best {best:.1f} us "
                      f"({built:.0f} s building, {time.perf_counter() - start - built:.0f} s "
                      f"measuring, {measure.device_name})", flush=True)
                Path(args.exhaustive, "space.json").write_text(json.dumps(table))
        runs = run_classes(found, list(measurers), args.budget, seeds, Knobs(), args.transfer)
        ratios = report(runs, args.budget, measurers[0].device_name if measurers else "")
        print(f"measured options per class: {[len(m.cache) for m in measurers]}")
    return 0 if ratios else 1


if __name__ == "__main__":
    sys.exit(main())
