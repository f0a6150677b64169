"""OpenCL backend benchmark on PoCL: kernels launched, latency, arena size.

    python benchmarks/opencl.py [--repeats N] [--models a,b,...] [--all]

Per model: kernels launched (ours, fusion off, onnxruntime ORT_ENABLE_ALL nodes),
latency min/median/max in ms (ours vs fusion off vs onnxruntime CPU), and arena
bytes vs a buffer per tensor vs the max-live lower bound. Prints; asserts nothing.
By default it runs the model-zoo blocks and the light models small enough to run
in a few minutes on 2 cores; ``--all`` adds the rest of the nine light models.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import onnx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from egraph_compiler.backends.opencl.bench import bench  # noqa: E402
from tests.modelzoo import BLOCKS, LIGHT_MODELS, light_model, randomize_weights  # noqa: E402

DEFAULT_LIGHT = ("squeezenet", "bvlc_alexnet", "shufflenet", "resnet50")
DIMS = {"batch": 4, "height": 28, "width": 28, "seq": 64}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--models", default="")
    parser.add_argument("--all", action="store_true")
    args = parser.parse_args()
    names = [m for m in args.models.split(",") if m] or [
        *BLOCKS, *(LIGHT_MODELS if args.all else DEFAULT_LIGHT)]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            if name in BLOCKS:
                model = BLOCKS[name]()
            else:
                model = randomize_weights(light_model(name), seed=0)
            path = Path(tmp) / f"{name}.onnx"
            onnx.save(model, str(path))
            result = bench(path, repeats=args.repeats, dims=DIMS)
            print(result.table(), flush=True)
            rows.append(result)
    print("\nmodel                  ops  ours  off  ort   ours ms   off ms   ort ms  arena/naive/lb KiB")
    for r in rows:
        print(f"{r.model:20s} {r.operators:5d} {r.kernels:5d} {r.kernels_unfused:4d} {r.ort_nodes:4d} "
              f"{r.ours.median_ms:9.2f} {r.unfused.median_ms:8.2f} {r.onnxruntime.median_ms:8.2f}  "
              f"{r.arena_bytes // 1024}/{r.naive_bytes // 1024}/{r.lower_bound_bytes // 1024}")


if __name__ == "__main__":
    main()
