"""Corpus benchmark (issue 17): today's PyTorch exports through dnnr (prints; asserts nothing).

Per corpus model and exporter: nodes in; ours (the compiled graph, and the written
onnx-target model, which spells Gelu out again below opset 20); onnxruntime's
ORT_ENABLE_BASIC and ORT_ENABLE_ALL node counts; OpenCL kernels launched; compile seconds;
PoCL latency against onnxruntime CPU (ORT_ENABLE_ALL, same machine, same run) at the
first stored shape; max error of the OpenCL run relative to max |torch reference|.

    python3 benchmarks/corpus.py [--set suite|bench|all] [--only bert_sdpa,gpt2]
        [--exporters ts,dynamo] [--no-opencl] [--repeat 5] [--json out.json]
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


def measure(model: check.CorpusModel, opencl: bool, repeat: int) -> dict[str, object]:
    row: dict[str, object] = {"model": model.id}
    row["nodes_in"] = len(onnx.load(str(model.path), load_external_data=False).graph.node)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        written, result = check.compile_onnx(model, Path(tmp))
        row["compile_s"] = round(time.perf_counter() - start, 2)
        row["ours_graph"] = sum(result.report.nodes_after.values())
        row["ours_written"] = len(onnx.load(str(written)).graph.node)
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
        row["kernels"] = (result.report.target or {}).get("kernels")
        row["opencl_err"] = check.relative_error(got, model.expected(0))
        row["pocl_ms"] = 1e3 * _median_seconds(lambda: artefact.run(feeds), repeat)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    session = ort.InferenceSession(str(model.path), options, providers=["CPUExecutionProvider"])
    row["ort_ms"] = 1e3 * _median_seconds(lambda: session.run(None, feeds), repeat)
    return row


COLUMNS = ("model", "nodes_in", "ours_graph", "ours_written", "ort_basic", "ort_all", "kernels",
           "compile_s", "pocl_ms", "ort_ms", "onnx_err", "opencl_err")


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
                row = measure(check.load(folder, name, exporter), not args.no_opencl, args.repeat)
            except Exception as error:  # one failing model must not hide the others
                row = {"model": f"{name}.{exporter}",
                       "error": f"{type(error).__name__}: {str(error).splitlines()[0][:160]}"}
            rows.append(row)
            extra = row.get("error") or row.get("opencl") or ""
            print(" | ".join(_cell(row.get(c)) for c in COLUMNS) + (f" | {extra}" if extra else ""),
                  flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
