"""`dnnr compile --dim NAME=LO..HI`: the ranges shape inference and guards assume, listed in
the report; malformed or unknown names are one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from egraph_compiler import ir
from egraph_compiler.cli import main
from egraph_compiler.ir import DimExpr
from tests.egraph.helpers import graph

S = DimExpr.symbol("seq")


@pytest.fixture()
def model(tmp_path: Path) -> Path:
    g = graph({"x": (2, S)}, [
        ("Slice", ["x"], ["y"], {"starts": (0,), "ends": (512,), "axes": (1,), "steps": (1,)}),
        ("Relu", ["y"], ["z"], {}),
    ], ["z"])
    path = tmp_path / "m.onnx"
    path.write_bytes(ir.to_onnx(g).SerializeToString())
    return path


def test_dim_ranges_reach_the_report(model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    assert main(["compile", str(model), "-o", str(out), "--dim", "seq=1..512"]) == 0
    assert "dims: seq=1..512" in capsys.readouterr().out
    report = json.loads((out / "report.json").read_text())
    assert report["dims"] == {"seq": {"low": 1, "high": 512, "given": True}}
    written = ir.load_onnx(out / "model.onnx")
    assert [n.op for n in written.nodes] == ["Relu"]  # with seq <= 512 the Slice keeps everything
    assert main(["compile", str(model), "-o", str(tmp_path / "d")]) == 0
    assert "dims: seq=1..2147483647 (default)" in capsys.readouterr().out


@pytest.mark.parametrize(("spec", "message"), [
    ("seq=512", "--dim expects NAME=LO..HI"),
    ("seq=a..b", "--dim expects NAME=LO..HI"),
    ("batch=1..4", "cannot constrain batch: the model's symbolic input dims are seq"),
    ("seq=9..3", "is empty"),
])
def test_bad_dim_ranges_are_errors(model: Path, spec: str, message: str,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compile", str(model), "--dim", spec]) != 0
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) <= 2


def test_binding_outside_the_compiled_range_is_an_error(model: Path, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """Rewrites may have relied on the range (the Slice above was removed for seq <= 512)."""
    assert main(["compile", str(model), "-o", str(tmp_path / "a"), "--dim", "seq=1..512", "--bind", "seq=600"]) != 0
    assert "cannot bind seq=600: the model was compiled for seq in 1..512" in capsys.readouterr().err
    assert main(["compile", str(model), "-o", str(tmp_path / "b"), "--dim", "seq=1..512", "--bind", "seq=512"]) == 0
