"""Corpus benchmark (issue 17): today's PyTorch exports through dnnr (prints; asserts nothing).

Per corpus model and exporter: nodes in; ours (the compiled graph, and the written
onnx-target model, which spells Gelu out again below opset 20); onnxruntime's
ORT_ENABLE_BASIC and ORT_ENABLE_ALL node counts; OpenCL kernels launched; the fusion rate
(nodes in / kernels: DNNFusion's original layer count over fused layer count); the units
the planner kept whole (`fusion.units`); the export folds applied (rules/exports.dnnr, and
layout.dnnr's shape-computation folds); compile seconds; PoCL latency against
onnxruntime CPU (ORT_ENABLE_ALL, same machine, same run) at the first stored shape; max
error of the OpenCL run relative to max |torch reference| over every stored shape (the
suite test checks the dynamo exports at one shape; this covers all three).

BERT-base (``bert_base2``, the bench set) is compared with DNNFusion's fusion of
BERT-base (seed 000 Table 3.5: 976 layers fused to 216 over 12 encoder layers, 4.5×).

    python3 benchmarks/corpus.py [--set suite|bench|all] [--only bert_sdpa,gpt2]
        [--exporters ts,dynamo] [--no-opencl] [--first-shape] [--repeat 5] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import onnx
import onnxruntime as ort

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from egraph_compiler import pipeline, runner  # noqa: E402
from tests.corpus import build, check  # noqa: E402


def ort_nodes(path: Path, level: ort.GraphOptimizationLevel) -> int:
    """Node count of the model onnxruntime writes after optimising at ``level``."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "optimised.onnx"
        options = ort.SessionOptions()
        options.graph_optimization_level = level
        options.optimized_model_filepath = str(out)
        ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        return len(onnx.load(str(out), load_external_data=False).graph.node)


def _median_seconds(run, repeat: int) -> float:
    run()  # warm-up (kernel builds, allocations)
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


# DNNFusion, seed 000 Table 3.5, BERT-base: layers before and after fusion, encoder layers
DNNFUSION_BERT_BASE = (976, 216, 12)
BERT_BASE = ("bert_base2", 2)  # the corpus model at BERT-base width and its encoder layers


def measure(model: check.CorpusModel, opencl: bool, repeat: int,
            all_shapes: bool = True) -> dict[str, object]:
    row: dict[str, object] = {"model": model.id}
    row["nodes_in"] = len(onnx.load(str(model.path), load_external_data=False).graph.node)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        written, result = check.compile_onnx(model, Path(tmp))
        row["compile_s"] = round(time.perf_counter() - start, 2)
        row["ours_graph"] = sum(result.report.nodes_after.values())
        row["ours_written"] = len(onnx.load(str(written)).graph.node)
        row["folds"] = _export_folds(result.report)
        row["onnx_err"] = max(check.ort_errors(written, model))
    row["ort_basic"] = ort_nodes(model.path, ort.GraphOptimizationLevel.ORT_ENABLE_BASIC)
    row["ort_all"] = ort_nodes(model.path, ort.GraphOptimizationLevel.ORT_ENABLE_ALL)
    if not opencl:
        return row
    feeds = model.feeds(0)
    with tempfile.TemporaryDirectory() as tmp:
        try:
            pipeline.write_artefact(result, "opencl", Path(tmp), bindings=check.bindings(model, 0))
            artefact = runner.load_artefact(Path(tmp))
            got = artefact.run(feeds)
        except Exception as error:  # a benchmark reports, it does not stop
            row["opencl"] = f"{type(error).__name__}: {str(error).splitlines()[0][:120]}"
            return row
        target = result.report.target or {}
        row["kernels"] = target.get("kernels")
        row["units"] = ",".join(f"{k}:{v}" for k, v in sorted(target.get("units", {}).items()))
        if row["kernels"]:
            row["rate"] = row["nodes_in"] / row["kernels"]  # type: ignore[operator]
        errors = [check.relative_error(got, model.expected(0))]
        row["pocl_ms"] = 1e3 * _median_seconds(lambda: artefact.run(feeds), repeat)
    for index in range(1, len(model.shapes) if all_shapes else 1):
        with tempfile.TemporaryDirectory() as tmp:
            got, _ = check.opencl_run(model, result, index, Path(tmp))
            errors.append(check.relative_error(got, model.expected(index)))
    row["opencl_err"] = max(errors)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    session = ort.InferenceSession(str(model.path), options, providers=["CPUExecutionProvider"])
    row["ort_ms"] = 1e3 * _median_seconds(lambda: session.run(None, feeds), repeat)
    return row


COLUMNS = ("model", "nodes_in", "ours_graph", "ours_written", "ort_basic", "ort_all", "kernels",
           "rate", "units", "compile_s", "pocl_ms", "ort_ms", "onnx_err", "opencl_err", "folds")


def _cell(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.1e}" if value < 0.01 else f"{value:.2f}"
    return "-" if value is None else str(value)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--set", default="suite", choices=("suite", "bench", "all"))
    parser.add_argument("--only", default="")
    parser.add_argument("--exporters", default=",".join(build.EXPORTERS))
    parser.add_argument("--no-opencl", action="store_true")
    parser.add_argument("--first-shape", action="store_true",
                        help="check the OpenCL run at the first stored shape only")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--json", default="")
    args = parser.parse_args(argv)
    names = args.only.split(",") if args.only else (
        list(build.ARCHITECTURES) if args.set == "all" else build.names_in(args.set))
    folder = build.build(names)
    rows = []
    print(" | ".join(COLUMNS))
    for name in names:
        for exporter in args.exporters.split(","):
            try:
                row = measure(check.load(folder, name, exporter), not args.no_opencl, args.repeat,
                              not args.first_shape)
            except Exception as error:  # one failing model must not hide the others
                row = {"model": f"{name}.{exporter}",
                       "error": f"{type(error).__name__}: {str(error).splitlines()[0][:160]}"}
            rows.append(row)
            extra = row.get("error") or row.get("opencl") or ""
            print(" | ".join(_cell(row.get(c)) for c in COLUMNS) + (f" | {extra}" if extra else ""),
                  flush=True)
    _compare_bert_base(rows)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


def _export_folds(report: object) -> str:
    """Applications of the rules of rules/exports.dnnr and of layout.dnnr's shape-
    computation folds (e-classes rewritten), as ``rule:count``."""
    fired: dict[str, int] = getattr(report, "rules_fired", {})
    sources: dict[str, str] = getattr(report, "rule_sources", {})
    shape_folds = ("reshape-const-target", "expand-const-shape", "constant-of-shape-fold")
    picked = [(name, count) for name, count in sorted(fired.items())
              if "exports.dnnr" in sources.get(name, "") or name in shape_folds]
    return ",".join(f"{name}:{count}" for name, count in picked)


def _compare_bert_base(rows: list[dict[str, object]]) -> None:
    """BERT-base's kernels per encoder layer against DNNFusion's (issue 17 item 3)."""
    before, after, layers = DNNFUSION_BERT_BASE
    name, ours_layers = BERT_BASE
    for row in rows:
        if not str(row["model"]).startswith(name + ".") or not row.get("kernels"):
            continue
        kernels, nodes = int(row["kernels"]), int(row["nodes_in"])  # type: ignore[call-overload]
        print(f"{row['model']}: {nodes} nodes -> {kernels} kernels over {ours_layers} encoder "
              f"layers (embeddings and pooler included): {kernels / ours_layers:.1f} kernels "
              f"and {nodes / ours_layers:.1f} nodes per layer, fusion rate "
              f"{nodes / kernels:.1f}x; DNNFusion BERT-base: {before} -> {after} over {layers} "
              f"layers, {after / layers:.1f} kernels and {before / layers:.1f} layers per "
              f"layer, {before / after:.1f}x")


if __name__ == "__main__":
    sys.exit(main())
