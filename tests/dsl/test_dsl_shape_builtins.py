"""``shape builtin NAME`` on an op declaration: `dnnr check` knows the names the shape
stage implements and reports any other at its place (tests/dsl/fail/shape_builtins.dnnr
pins the diagnostics; this file pins the command's output and the name list)."""

from __future__ import annotations

from pathlib import Path

import pytest

from egraph_compiler import cli
from egraph_compiler.dsl.shape_builtins import shape_builtin_names
from egraph_compiler.shapes.rules import SHAPE_FUNCTIONS


def test_the_names_check_accepts_are_the_shape_functions_the_shape_stage_has() -> None:
    assert sorted(shape_builtin_names()) == sorted(SHAPE_FUNCTIONS)


def test_dnnr_check_names_file_line_and_the_unknown_builtin(tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "ops.dnnr"
    path.write_text("op Fine(x) : one_to_one ili_variable shape_determined = x\n"
                    "op Odd(x) : many_to_many ild_variable shape_determined  shape builtin no_such_shape\n",
                    encoding="utf-8")
    code = cli.main(["check", str(path)])
    out = capsys.readouterr()
    text = out.out + out.err
    assert code != 0
    assert f"{path}:2:" in text and "unknown shape builtin 'no_such_shape'" in text
    assert "known shape builtins: " + ", ".join(shape_builtin_names()) in text
    assert "Traceback" not in text
