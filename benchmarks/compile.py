"""Compile benchmark over the onnx wheel's light models (prints; asserts nothing).

Per model: nodes in; compute nodes out (constants folded away); the node count of
onnxruntime's ORT_ENABLE_BASIC optimised model; e-graph size; compile seconds; and
the ratio of our node count to onnxruntime-basic's (target: <= 1.00 everywhere;
densenet121 under 10 s on a 2-core machine).

    python benchmarks/compile.py [--models resnet50,densenet121] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import onnx
import onnxruntime as ort

from egraph_compiler import pipeline

LIGHT = Path(os.path.dirname(onnx.__file__)) / "backend/test/data/light"
MODELS = ["bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50",
          "shufflenet", "squeezenet", "vgg19", "zfnet512"]


def ort_basic_nodes(path: Path) -> int:
    """Node count of the model onnxruntime writes after ORT_ENABLE_BASIC."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "basic.onnx"
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
        options.optimized_model_filepath = str(out)
        ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        return len(onnx.load(str(out)).graph.node)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--json", help="also write the rows as JSON here")
    args = parser.parse_args()
    rows = []
    header = (f"{'model':<14}{'nodes in':>9}{'ours':>7}{'ort-basic':>10}{'ratio':>7}"
              f"{'e-nodes':>9}{'e-classes':>10}{'iters':>6}{'seconds':>9}  stop")
    print(header)
    print("-" * len(header))
    for name in args.models.split(","):
        path = LIGHT / f"light_{name}.onnx"
        nodes_in = len(onnx.load(str(path)).graph.node)
        start = time.perf_counter()
        result = pipeline.compile_model(path, rule_paths=None)
        seconds = time.perf_counter() - start
        ours = len(result.graph.nodes)
        basic = ort_basic_nodes(path)
        eg = result.report.egraph
        row = {"model": name, "nodes_in": nodes_in, "nodes_out": ours, "ort_basic": basic,
               "ratio": ours / basic, "enodes": eg.get("enodes"), "eclasses": eg.get("eclasses"),
               "iterations": eg.get("iterations"), "seconds": seconds,
               "stop": eg.get("stop_reason"), "limits_hit": result.report.limits_hit}
        rows.append(row)
        print(f"{name:<14}{nodes_in:>9}{ours:>7}{basic:>10}{ours / basic:>7.2f}"
              f"{row['enodes']!s:>9}{row['eclasses']!s:>10}{row['iterations']!s:>6}"
              f"{seconds:>9.2f}  {row['stop']}")
        sys.stdout.flush()
    worst = max(rows, key=lambda r: r["ratio"])
    print(f"\nworst ratio ours/ort-basic: {worst['ratio']:.2f} ({worst['model']})")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
