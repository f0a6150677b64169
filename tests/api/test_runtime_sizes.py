"""``compile(..., target="opencl")`` and ``dnnr run`` on a model whose sizes depend on an
input's value and on a symbolic dim (issue 17 item 6): the artefact is specialised at run
time, for the dims and values given, and matches onnxruntime."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from egraph_compiler import compile
from egraph_compiler.ir import DnnrError
from tests.modelzoo import assert_close, run_ort


def _reshape_by_input() -> onnx.ModelProto:
    """x[batch, 12] → Reshape(x, shape) → Softmax: the target comes at run time."""
    graph = helper.make_graph(
        [helper.make_node("Reshape", ["x", "shape"], ["r"]),
         helper.make_node("Softmax", ["r"], ["y"], axis=-1)],
        "reshape_by_input",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 12]),
         helper.make_tensor_value_info("shape", TensorProto.INT64, [3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["a", "b", "c"])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_symbolic_dim_and_value_input_specialise_at_run_time(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    """API and `dnnr run` on one artefact (one compile: saturation is the slow part)."""
    monkeypatch.setenv("DNNR_CACHE_DIR", str(tmp_path / "cache"))  # its own on-disk cache
    model = _reshape_by_input()
    compiled = compile(model, target="opencl", out_dir=tmp_path / "out", dims={"batch": (1, 4)})
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert list(report["target"]["specialised"]["value_inputs"]) == ["shape"]
    rng = np.random.default_rng(0)
    for batch, shape in ((2, [4, 3, 2]), (3, [-1, 6, 2]), (2, [4, 3, 2])):
        feeds = {"x": rng.standard_normal((batch, 12)).astype(np.float32),
                 "shape": np.array(shape, np.int64)}
        assert_close(compiled.run(feeds), run_ort(model, feeds), rtol=1e-4, atol=1e-5)
    assert len(compiled.specialisations) == 2  # the third run reuses the first compile
    x = rng.standard_normal((5, 12)).astype(np.float32)  # batch outside --dim's range
    with pytest.raises(DnnrError, match=r"\(batch\) is 5, outside the compiled range batch=1\.\.4"):
        compiled.run({"x": x, "shape": np.array([5, 12, 1], np.int64)})
    # `dnnr run` on the same artefact: a fresh process specialises (these values are new) and says so
    feeds = {"x": np.ones((2, 12), np.float32), "shape": np.array([2, 2, 6], np.int64)}
    for name, array in feeds.items():
        np.save(tmp_path / f"{name}.npy", array)
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-m", "egraph_compiler.cli", "run", str(tmp_path / "out"),
         "--input", f"x={tmp_path / 'x.npy'}", "--input", f"shape={tmp_path / 'shape.npy'}",
         "--output-dir", str(tmp_path / "res")],
        cwd=root, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(root)})
    assert done.returncode == 0, done.stderr
    assert "specialised for shape=[2, 2, 6]" in done.stdout
    assert_close({"y": np.load(tmp_path / "res" / "y.npy")}, run_ort(model, feeds), rtol=1e-4, atol=1e-5)
