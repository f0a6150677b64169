"""`dnnr compile` / `dnnr explain` on the bundled example, and pipeline-level fuzzing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from egraph_compiler import pipeline
from egraph_compiler.cli import main
from egraph_compiler.ir.errors import DnnrError
from tests.modelzoo import assert_close, run_ort

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def encoder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("example") / "encoder.onnx"
    subprocess.run([sys.executable, str(ROOT / "examples/make_example.py"), "--out", str(path)],
                   check=True, capture_output=True)
    return path


def test_compile_writes_model_and_report(encoder: Path, tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    assert main(["compile", str(encoder), "-o", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "before" in printed and "after" in printed and "seconds" in printed
    report = json.loads((out / "report.json").read_text())
    for key in ("nodes_before", "nodes_after", "rules_fired", "egraph", "seconds", "limits_hit"):
        assert key in report
    assert sum(report["nodes_after"].values()) < sum(report["nodes_before"].values())
    optimised = onnx.load(str(out / "model.onnx"))
    onnx.checker.check_model(optimised, full_check=True)
    # The symbolic dims survive: the output keeps dim_params, not one concrete size.
    dims = optimised.graph.output[0].type.tensor_type.shape.dim
    assert dims[0].dim_param and dims[1].dim_param
    original = onnx.load(str(encoder))
    for batch, seq in [(1, 3), (2, 9), (4, 16)]:
        x = np.random.default_rng(batch).standard_normal((batch, seq, 64)).astype(np.float32)
        expected = run_ort(original, {"x": x})
        actual = run_ort(optimised, {"x": x})
        assert_close(actual["y"], expected["y"], rtol=1e-4, atol=1e-5)

    assert main(["explain", str(out)]) == 0
    explained = capsys.readouterr().out
    assert report["rules_fired"], "the encoder should be rewritten by some rule"
    fired_rule = next(iter(report["provenance"].values()))[0]
    assert fired_rule in explained and ".dnnr:" in explained


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_mutated_protobufs_give_a_graph_or_a_clear_error(encoder: Path, data: st.DataObject) -> None:
    blob = bytearray(encoder.read_bytes())
    for _ in range(data.draw(st.integers(1, 8))):
        index = data.draw(st.integers(0, len(blob) - 1))
        blob[index] = data.draw(st.integers(0, 255))
    if data.draw(st.booleans()):
        blob = blob[: data.draw(st.integers(0, len(blob)))]
    try:
        pipeline.compile_model(bytes(blob), limits=None)
    except DnnrError as error:
        assert str(error).strip()


def test_opencl_target_compiles_runs_and_matches(encoder: Path, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """`dnnr compile --target opencl --bind ...` then `dnnr run` writes outputs that match;
    without --bind, one artefact covers the --dim ranges (issue 15) and runs the same."""
    symbolic = tmp_path / "symbolic"
    assert main(["compile", str(encoder), "--target", "opencl", "--dim", "batch=1..2",
                 "--dim", "seq=4..5", "-q", "-o", str(symbolic)]) == 0
    out = tmp_path / "ocl"
    assert main(["compile", str(encoder), "--target", "opencl", "--bind", "batch=2,seq=5",
                 "-q", "-o", str(out)]) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["target"]["name"] == "opencl"
    assert 0 < report["target"]["kernels"] < sum(report["nodes_after"].values())
    x = np.random.default_rng(3).standard_normal((2, 5, 64)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    assert main(["run", str(out), "--input", f"x={tmp_path / 'x.npy'}",
                 "--output-dir", str(tmp_path / "y")]) == 0
    expected = run_ort(onnx.load(str(encoder)), {"x": x})["y"]
    assert_close(np.load(tmp_path / "y" / "y.npy"), expected, rtol=1e-3, atol=1e-4)
    assert main(["run", str(symbolic), "--input", f"x={tmp_path / 'x.npy'}",
                 "--output-dir", str(tmp_path / "z")]) == 0
    assert_close(np.load(tmp_path / "z" / "y.npy"), expected, rtol=1e-3, atol=1e-4)
