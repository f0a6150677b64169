"""Checks one corpus model against its torch reference (shared by tests and benchmarks).

``compile_onnx`` runs ``dnnr compile`` (onnx target) on an export; ``ort_errors`` runs the
written model in onnxruntime at every stored shape and returns the error relative to
max |reference| per shape; ``symbolic_inputs`` lists the written model's input dims.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

from egraph_compiler import pipeline


@dataclass(frozen=True)
class CorpusModel:
    """One export of one corpus architecture, with its reference outputs."""

    name: str
    exporter: str
    path: Path
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    shapes: tuple[dict[str, int], ...]
    reference: dict[str, np.ndarray]

    @property
    def id(self) -> str:
        return f"{self.name}.{self.exporter}"

    def feeds(self, index: int) -> dict[str, np.ndarray]:
        return {n: self.reference[f"{index}/{n}"] for n in self.inputs}

    def expected(self, index: int) -> dict[str, np.ndarray]:
        return {n: self.reference[f"{index}/{n}"] for n in self.outputs}


def load(folder: Path, name: str, exporter: str) -> CorpusModel:
    """A corpus model from a built folder; a clear error when that export failed."""
    entry = json.loads((folder / "manifest.json").read_text())[name]
    export = entry[exporter]
    if "error" in export:
        raise RuntimeError(f"{name}.{exporter}: the exporter failed: {export['error']}")
    with np.load(folder / f"{name}.ref.npz") as stored:
        reference = {k: stored[k] for k in stored.files}
    return CorpusModel(name, exporter, folder / export["file"], tuple(entry["inputs"]),
                       tuple(entry["outputs"]), tuple(entry["shapes"]), reference)


@functools.cache
def compiled(path: Path) -> pipeline.CompileResult:
    """``dnnr compile`` of a suite export, once per test process: the onnx-target and the
    OpenCL corpus tests compile the same 24 exports (the compile is most of their time)."""
    return pipeline.compile_model(path)


def compile_onnx(model: CorpusModel, out: Path, reuse: bool = False
                 ) -> tuple[Path, pipeline.CompileResult]:
    """``dnnr compile MODEL -o OUT`` (onnx target); returns the written model's path.
    ``reuse``: the process's earlier compile of the same export (`compiled`)."""
    result = compiled(model.path) if reuse else pipeline.compile_model(model.path)
    pipeline.write_artefact(result, "onnx", out)
    return out / "model.onnx", result


def relative_error(got: dict[str, np.ndarray], expected: dict[str, np.ndarray]) -> float:
    """Largest |got - expected| over all outputs, relative to that output's max |expected|."""
    worst = 0.0
    for name, ref in expected.items():
        value = np.asarray(got[name])
        if value.shape != ref.shape:
            raise AssertionError(f"output {name}: shape {value.shape} != reference {ref.shape}")
        scale = float(np.max(np.abs(ref))) or 1.0
        worst = max(worst, float(np.max(np.abs(value.astype(np.float64) - ref))) / scale)
    return worst


def ort_errors(written: Path, model: CorpusModel) -> list[float]:
    """onnxruntime (optimisations off) on ``written`` at every stored shape."""
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(str(written), options, providers=["CPUExecutionProvider"])
    errors = []
    for index in range(len(model.shapes)):
        got = session.run(list(model.outputs), model.feeds(index))
        errors.append(relative_error(dict(zip(model.outputs, got, strict=True)),
                                     model.expected(index)))
    return errors


def input_dims(path: Path) -> dict[str, list[int | str]]:
    """Each graph input's dims as written: an int or a symbolic name."""
    graph = onnx.load(str(path), load_external_data=False).graph
    inits = {i.name for i in graph.initializer}
    return {i.name: [d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim]
            for i in graph.input if i.name not in inits}


def opset_of(path: Path) -> int:
    model = onnx.load(str(path), load_external_data=False)
    return next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))


def bindings(model: CorpusModel, index: int) -> dict[str, int]:
    """Sizes of the export's symbolic input dims at stored shape ``index``."""
    feeds = model.feeds(index)
    bound: dict[str, int] = {}
    for name, dims in input_dims(model.path).items():
        for dim, size in zip(dims, feeds[name].shape, strict=True):
            if isinstance(dim, str):
                bound[dim] = int(size)
    return bound


def opencl_run(model: CorpusModel, result: pipeline.CompileResult, index: int,
               out: Path) -> tuple[dict[str, np.ndarray], dict]:
    """``--target opencl --bind ...`` at stored shape ``index``, run on PoCL: the outputs
    and the artefact's target report (kernel counts)."""
    from egraph_compiler import runner

    pipeline.write_artefact(result, "opencl", out, bindings=bindings(model, index))
    outputs = runner.load_artefact(out).run(model.feeds(index))
    return outputs, dict(result.report.target or {})
