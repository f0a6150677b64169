"""Counterexamples a person can read, and where verdicts are cached (issue 10, item 5)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from egraph_compiler.verify import cache
from egraph_compiler.verify.verdict import Counterexample, TensorValue


def test_a_shrunk_counterexample_has_scalar_inputs(check) -> None:  # type: ignore[no-untyped-def]
    (v,) = check("rule m-sub-comm: Sub(?a, ?b) => Sub(?b, ?a)", suggest_guards=False)
    cex = v.counterexample
    assert v.status == "failed" and cex is not None and cex.replay == "CONFIRMED"
    assert [t.shape for t in cex.inputs] == [(), ()], cex.render()
    # small values: 0 and 1 (or -1, 2, 1/2) rather than random decimals
    assert all(abs(x) in (0.0, 0.5, 1.0, 2.0) for t in cex.inputs for x in t.values), cex.render()
    assert "differs at []" in cex.render()


def test_two_anonymous_attributes_are_told_apart(check) -> None:  # type: ignore[no-untyped-def]
    (v,) = check("rule twin: Sub(LeakyRelu(?x), LeakyRelu(?x)) => Sub(?x, ?x)",
                 suggest_guards=False)
    assert v.counterexample is not None
    names = [name for name, _ in v.counterexample.attrs]
    assert names == ["LeakyRelu#1.alpha", "LeakyRelu#2.alpha"], v.counterexample.render()


def test_values_print_rounded_and_the_difference_exactly() -> None:
    lhs = TensorValue("LHS", (2,), "float64", (-1.6099999999999999, 0.1 + 0.2))
    rhs = TensorValue("RHS", (2,), "float64", (-1.6099999999999999, 0.3))
    cex = Counterexample("real", (lhs,), (), lhs, rhs, "CONFIRMED", "differ")
    text = cex.render()
    assert "-1.61," in text and "1.6099999999999999" not in text
    assert "differs at [1]: LHS 0.30000000000000004, RHS 0.3" in text


def test_the_cache_lives_in_the_user_cache_directory(monkeypatch: pytest.MonkeyPatch,
                                                      tmp_path: Path) -> None:
    monkeypatch.delenv("DNNR_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache.default_cache_dir() == tmp_path / "xdg" / "dnnr" / "verify"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache.default_cache_dir() == tmp_path / "home" / ".cache" / "dnnr" / "verify"
    monkeypatch.setenv("DNNR_CACHE_DIR", str(tmp_path / "mine"))
    assert cache.default_cache_dir() == tmp_path / "mine" / "verify"


def test_a_change_to_the_verifier_source_changes_every_cache_key(tmp_path: Path) -> None:
    root = Path(cache.__file__).resolve().parent.parent
    for package in ("verify", "dsl"):
        shutil.copytree(root / package, tmp_path / package)
    assert cache.source_digest(tmp_path) == cache.VERIFIER_SOURCE
    check = tmp_path / "verify" / "check.py"
    check.write_text(check.read_text() + "\n# a changed verifier\n")
    assert cache.source_digest(tmp_path) != cache.VERIFIER_SOURCE
