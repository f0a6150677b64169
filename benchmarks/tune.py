"""Kernel-parameter search on the OpenCL device: Chameleon beside random search.

For every conv/matmul shape class of a small CNN (or of ``--model``), runs
`kernel_search.chameleon_search` once and `random_search` with ``--seeds`` seeds, each
with ``--budget`` measurements (OpenCL profiling events; one shared measurement cache,
so an option is timed once). Prints both best-so-far curves (random: the median over
seeds) and, per class, how many measurements Chameleon needed to reach random
search's best and how many random search needed.

    PYTHONPATH=. python3 benchmarks/tune.py [--budget 24] [--seeds 5] [--gpu --device NVIDIA]

``--gpu`` searches GPU-sized shape classes (ResNet's 3×3, stride-2 3×3 and 1×1 convs at
batch 8, BERT-base's FFN matmul at 8×128 tokens) from the ``gpu`` device class's
defaults, on the GPU machine (it needs no egglog, z3 or onnxruntime).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from egraph_compiler.backends.opencl.kernel_search import (  # noqa: E402
    Knobs,
    Measurer,
    anchors,
    chameleon_search,
    option_to_json,
    random_search,
)
from egraph_compiler.backends.opencl.kernels import KernelParams  # noqa: E402
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
    batch 8, and BERT-base's first FFN matmul (1024 tokens × 768 → 3072)."""
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
    graph = helper.make_graph(
        nodes, "gpu_classes",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 64, 56, 56]),
         helper.make_tensor_value_info("t", TensorProto.FLOAT, [1024, 768])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8, 512, 28, 28]),
         helper.make_tensor_value_info("u", TensorProto.FLOAT, [1024, 3072])], inits)
    feeds = {"x": rng.standard_normal((8, 64, 56, 56)).astype(np.float32),
             "t": rng.standard_normal((1024, 768)).astype(np.float32)}
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), feeds


def replay(path: Path, budget: int, seeds: int, knobs: Knobs, params: KernelParams,
           graph: object) -> list[float]:
    """Chameleon and random search replayed on a whole measured space (``--exhaustive``'s
    space.json): per class and random seed, random search's measurements to its best
    over Chameleon's to reach it (0 where Chameleon never does)."""
    table = json.loads(path.read_text())
    ratios = []
    with tempfile.TemporaryDirectory(prefix="dnnr-bench-tune-") as tmp:
        for anchor in anchors(graph, params, Path(tmp)):  # type: ignore[arg-type]
            if anchor.key not in table:
                continue
            times = {json.dumps(o, sort_keys=True): t for o, t in table[anchor.key]}

            def measure(option: object, times: dict[str, float] = times) -> float:
                return times[json.dumps(option_to_json(option), sort_keys=True)]  # type: ignore[arg-type]

            cham = chameleon_search(anchor.space, anchor.default, measure, budget, 0, knobs)
            for s in range(seeds):
                r = random_search(anchor.space, measure, budget, s)
                c_at = cham.reaches(min(r.times))
                ratios.append(r.reaches(min(r.times)) / c_at if c_at else 0.0)
    return ratios


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=int, default=24)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default=None)
    parser.add_argument("--gpu", action="store_true", help="GPU-sized classes, gpu defaults")
    parser.add_argument("--exhaustive", metavar="DIR",
                        help="measure every option of each class instead; write DIR/space.json")
    parser.add_argument("--only", default="", help="classes whose key contains this")
    parser.add_argument("--replay", metavar="JSON",
                        help="replay the searches on an --exhaustive space.json (no device)")
    args = parser.parse_args()
    if args.gpu:
        model, feeds = gpu_classes()
        graph = static_graph(model, feeds)
        params = KernelParams.for_device("gpu")
    else:
        x = np.random.default_rng(1).standard_normal((1, 16, 32, 32)).astype(np.float32)
        graph = static_graph(small_cnn(), {"x": x})
        params = KernelParams()
    if args.replay:
        ratios = replay(Path(args.replay), args.budget, args.seeds, Knobs(), params, graph)
        print(f"replayed: random/chameleon measurements to random's best: median "
              f"{statistics.median(ratios):.2f}x over {len(ratios)} runs: "
              + " ".join(f"{r:.1f}" for r in ratios))
        return 0
    ratios = []
    with tempfile.TemporaryDirectory(prefix="dnnr-bench-tune-") as tmp:
        table: dict[str, list[tuple[dict[str, object], float]]] = {}
        for k, anchor in enumerate(anchors(graph, params, Path(tmp) / "probe")):
            if args.only not in anchor.key:
                continue
            measure = Measurer(anchor, params, Path(tmp) / f"a{k}", None, args.device,
                               args.repeats)
            if args.exhaustive:  # the whole space, for replaying searches offline
                table[anchor.key] = [(option_to_json(o), measure(o)) for o in anchor.space]
                best = min(t for _, t in table[anchor.key])
                print(f"{anchor.key}: {len(anchor.space)} options, best {best:.1f} us", flush=True)
                Path(args.exhaustive, "space.json").write_text(json.dumps(table))
                continue
            default_us = measure(anchor.default)
            cham = chameleon_search(anchor.space, anchor.default, measure, args.budget, 0)
            rands = [random_search(anchor.space, measure, args.budget, s)
                     for s in range(args.seeds)]
            print(f"{anchor.key}  (space {len(anchor.space)}, default "
                  f"{anchor.default.describe()} {default_us:.1f} us, {measure.device_name})")
            print("  step        " + " ".join(f"{i + 1:7d}" for i in range(args.budget)))
            print("  chameleon   " + " ".join(f"{t:7.1f}" for t in cham.best_so_far()))
            curves = np.array([r.best_so_far() for r in rands])
            print("  random(med) " + " ".join(f"{t:7.1f}" for t in np.median(curves, 0)))
            print("  chameleon options: " + ", ".join(o.describe() for o in cham.options))
            for s, r in enumerate(rands):
                r_best = min(r.times)
                r_at = r.reaches(r_best)
                c_at = cham.reaches(r_best)
                ratio = (r_at / c_at) if c_at else 0.0
                ratios.append(ratio)
                print(f"  seed {s}: random best {r_best:7.1f} us after {r_at:2d}; chameleon "
                      f"reached it after {c_at if c_at else 'never'}"
                      + (f" ({ratio:.1f}x fewer)" if c_at else ""))
            c_best, c_opt = cham.best
            print(f"  chameleon best {c_best:.1f} us ({c_opt.describe()}) after "
                  f"{cham.reaches(c_best)}; measured options {len(measure.cache)}")
    if args.exhaustive:
        return 0
    print(f"measurements ratio random/chameleon to random's best: median "
          f"{statistics.median(ratios):.2f}x, min {min(ratios):.2f}x over {len(ratios)} runs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
