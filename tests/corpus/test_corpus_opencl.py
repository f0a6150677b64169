"""Issue 17, item 3: every corpus model through ``--target opencl``, bound per stored shape,
run on PoCL: outputs within 1e-3 of max |torch reference|, and no more kernel launches
than onnxruntime's ORT_ENABLE_ALL graph has nodes.

Both exporters' exports of every suite architecture. The TorchScript ones (opset 17, the
exporter whose graphs carry the most shape computation) run at all three stored shapes;
the dynamo ones at one (the middle shape, neither the traced example nor the smallest),
which keeps the suite's time in bounds — `benchmarks/corpus.py` runs both exporters at
every shape.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import onnx
import onnxruntime as ort
import pytest

from tests.corpus import build, check

TOLERANCE = 1e-3  # of max |reference|, issue 17 item 3
# exporter -> the stored shapes it is checked at (None: all of them)
SHAPES: dict[str, tuple[int, ...] | None] = {"ts": None, "dynamo": (1,)}


def _ort_all_nodes(path: Path) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.optimized_model_filepath = str(Path(tmp) / "all.onnx")
        ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        return len(onnx.load(options.optimized_model_filepath).graph.node)


@pytest.fixture(scope="session")
def corpus() -> Path:
    return build.build(build.names_in("suite"), log=lambda _: None)


@pytest.mark.parametrize("exporter", list(SHAPES))
@pytest.mark.parametrize("name", build.names_in("suite"))
def test_opencl_matches_torch_at_every_shape(corpus: Path, tmp_path: Path, name: str,
                                             exporter: str) -> None:
    model = check.load(corpus, name, exporter)
    result = check.compiled(model.path)  # shared with test_corpus.py's onnx-target check
    ort_all = _ort_all_nodes(model.path)
    errors = []
    for index in SHAPES[exporter] or range(len(model.shapes)):
        outputs, target = check.opencl_run(model, result, index, tmp_path / str(index))
        errors.append(check.relative_error(outputs, model.expected(index)))
        assert target["kernels"] <= ort_all, \
            f"{model.id}: {target['kernels']} kernels > onnxruntime ORT_ENABLE_ALL's {ort_all} nodes"
    assert max(errors) <= TOLERANCE, f"{model.id}: relative errors per shape {errors}"
