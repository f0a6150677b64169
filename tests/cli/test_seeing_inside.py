"""Issue 10 item 4: dumps after each stage, rule bisection, --version, help on every option."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from egraph_compiler import __version__
from egraph_compiler.cli import build_parser, main
from egraph_compiler.dump import STAGES


def test_dump_after_every_front_end_stage(abs_model: Path, user_rules: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    stages = ["import", "shapes", "saturate", "extract"]
    args = [a for s in stages for a in ("--dump-after", s)]
    assert main(["compile", str(abs_model), "--add-rules", str(user_rules), "-q", *args]) == 0
    err = capsys.readouterr().err
    for stage in stages:
        assert f"after {stage} -----" in err
    imported, rest = err.split("after shapes -----")
    assert "Abs(a)  # abs_outer" in imported  # the import: two Abs, named
    saturated = rest.split("after saturate -----")[1].split("after extract -----")[0]
    assert "# by my-abs-abs" in saturated and "Abs(c" in saturated
    extracted = rest.split("after extract -----")[1]
    assert "= Abs(x)  # abs_inner" in extracted and "abs_outer" not in extracted


def test_dump_after_fusion_and_plan_on_opencl(abs_model: Path, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compile", str(abs_model), "--target", "opencl", "--bind", "n=2", "-o", str(tmp_path / "o"),
                 "-q", "--dump-after", "fusion", "--dump-after", "plan"]) == 0
    err = capsys.readouterr().err
    assert "fusion plan: 1 block(s)" in err and "execution plan: arena" in err


def test_dump_after_fusion_without_opencl_is_an_error(abs_model: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compile", str(abs_model), "--dump-after", "fusion"]) == 1
    assert "--target opencl" in capsys.readouterr().err


def test_dump_egraph_writes_egglog_json(abs_model: Path, tmp_path: Path) -> None:
    path = tmp_path / "egraph.json"
    assert main(["compile", str(abs_model), "-q", "--dump-egraph", str(path)]) == 0
    data = json.loads(path.read_text())
    ops = {node["op"] for node in data["nodes"].values()}
    assert any("Abs" in op for op in ops)


def test_disable_rule_and_only_ruleset_bisect(abs_model: Path, user_rules: Path, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    base = [str(abs_model), "--add-rules", str(user_rules), "-q"]
    assert main(["compile", *base, "-o", str(tmp_path / "a"), "--disable-rule", "my-abs-abs"]) == 0
    assert json.loads((tmp_path / "a" / "report.json").read_text())["rules_fired"] == {}
    assert main(["compile", *base, "-o", str(tmp_path / "b"), "--only-ruleset", "layout"]) == 0
    report = json.loads((tmp_path / "b" / "report.json").read_text())
    assert "my-abs-abs" not in report["rules_fired"] and "my-abs-abs" not in report["rule_sources"]
    assert main(["compile", *base, "-o", str(tmp_path / "c"), "--only-ruleset", "mine"]) == 0
    assert json.loads((tmp_path / "c" / "report.json").read_text())["rules_fired"] == {"my-abs-abs": 1}
    assert main(["compile", *base, "--disable-rule", "no-such-rule"]) == 1
    assert "no rule named 'no-such-rule'" in capsys.readouterr().err


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        main(["--version"])
    assert stop.value.code == 0 and capsys.readouterr().out.strip() == f"dnnr {__version__}"


def test_every_option_and_positional_has_help() -> None:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    missing = []
    for name, command in sub.choices.items():
        for action in command._actions:
            if not isinstance(action, argparse._HelpAction) and not action.help:
                missing.append(f"{name} {action.dest}")
    assert not missing, missing
    assert set(STAGES) == {"import", "shapes", "saturate", "extract", "fusion", "plan"}


def test_bench_error_speaks_of_bind(abs_model: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", str(abs_model), "--repeats", "1"]) == 1
    err = capsys.readouterr().err
    assert "--bind n=1" in err and "dims=" not in err


def test_bench_bind_of_an_unknown_dim_is_an_error(abs_model: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", str(abs_model), "--bind", "zz=1"]) == 1
    assert "cannot bind zz" in capsys.readouterr().err
