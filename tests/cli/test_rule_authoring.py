"""Issue 10 item 2: a rule author adds rules to the library from a folder of their own."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from egraph_compiler.cli import main

ROOT = Path(__file__).resolve().parents[2]


def _compile(args: list[str], out: Path) -> dict:
    assert main(["compile", *args, "-o", str(out), "-q"]) == 0
    return json.loads((out / "report.json").read_text())


def test_added_rule_file_fires_next_to_the_shipped_library(abs_model: Path, user_rules: Path,
                                                           tmp_path: Path) -> None:
    report = _compile([str(abs_model), "--add-rules", str(user_rules)], tmp_path / "out")
    assert report["rules_fired"].get("my-abs-abs") == 1
    assert report["nodes_after"] == {"Abs": 1}
    # in addition to the library: its rules are loaded too
    assert "add-comm" in report["rule_sources"] and "my-abs-abs" in report["rule_sources"]


def test_add_rules_takes_a_folder(abs_model: Path, user_rules: Path, tmp_path: Path) -> None:
    report = _compile([str(abs_model), "--add-rules", str(user_rules.parent)], tmp_path / "out")
    assert report["rules_fired"].get("my-abs-abs") == 1


def test_rules_means_instead_of_the_library(abs_model: Path, user_rules: Path, tmp_path: Path) -> None:
    report = _compile([str(abs_model), "--rules", str(user_rules)], tmp_path / "out")
    assert set(report["rule_sources"]) == {"my-abs-abs"}
    assert report["rules_fired"] == {"my-abs-abs": 1}


def test_use_of_a_library_file_resolves_from_anywhere(user_rules: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", str(user_rules)]) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith("ok:") and "error" not in captured.err


def test_rules_path_is_searched_before_the_library(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "myops.dnnr").write_text('use "operators.dnnr"\n\n# x + x = 2x.\n'
                                       'rule twice: Add(?x, ?x) => Mul(?x, 2)\n')
    user = tmp_path / "project" / "main.dnnr"
    user.parent.mkdir()
    user.write_text('use "myops.dnnr"\n')
    assert main(["check", str(user)]) == 1
    err = capsys.readouterr().err
    assert "cannot read" in err and "--rules-path" in err
    assert main(["check", str(user), "--rules-path", str(shared)]) == 0
    assert "1 rules" in capsys.readouterr().out


def test_a_ruleset_the_schedule_never_runs_is_a_warning_naming_it(abs_model: Path, tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    rules = tmp_path / "lonely.dnnr"
    rules.write_text('use "operators.dnnr"\n\nruleset lonely_set\n\n# |(|x|)| = |x|.\n'
                     'rule lonely-abs [exact]: Abs(Abs(?x)) => Abs(?x)\n')
    assert main(["check", "--add-rules", str(rules)]) == 0
    assert "warning: ruleset 'lonely_set' is never run by the schedule" in capsys.readouterr().err
    report = _compile([str(abs_model), "--add-rules", str(rules)], tmp_path / "out")
    assert "warning: ruleset 'lonely_set'" in capsys.readouterr().err
    assert "lonely-abs" not in report["rules_fired"]


def test_the_shipped_library_warns_of_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", str(ROOT / "rules")]) == 0
    assert "warning" not in capsys.readouterr().err


def test_check_of_library_and_target_files_together_is_clean(capsys: pytest.CaptureFixture[str]) -> None:
    """A target file replaces the library's schedule, so it is checked as a load of its own."""
    files = sorted(str(p) for p in (ROOT / "rules").glob("*.dnnr"))
    targets = sorted(str(p) for p in (ROOT / "rules" / "targets").glob("*.dnnr"))
    assert main(["check", *files, *targets]) == 0
    captured = capsys.readouterr()
    assert "second" not in captured.err and captured.out.count("ok:") == 2


def test_verify_add_rules_proves_the_added_rules(user_rules: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["verify", "--add-rules", str(user_rules), "--json"]) == 0
    verdicts = json.loads(capsys.readouterr().out)
    rows = verdicts if isinstance(verdicts, list) else verdicts.get("verdicts", verdicts)
    assert [v["rule"] for v in rows] == ["my-abs-abs"]
