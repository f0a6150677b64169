"""Helpers for the verifier's tests: rules written inline against the shipped
operator declarations, verified with a fresh cache directory per test."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from egraph_compiler import dsl, verify
from egraph_compiler.dsl.ast import RuleSet

ROOT = Path(__file__).resolve().parents[2]
OPERATORS = ROOT / "rules" / "operators.dnnr"
HERE = Path(__file__).resolve().parent


def load_inline(text: str, directory: Path, name: str = "inline.dnnr") -> RuleSet:
    path = directory / name
    path.write_text(f'use "{OPERATORS}"\nruleset inline\n{text}\n')
    return dsl.load_rules([str(path)])


@pytest.fixture
def check(tmp_path: Path) -> Callable[..., list[verify.Verdict]]:
    """``check(rules_text, **options)`` -> verdicts, cache in a temporary directory."""
    def run(text: str, **options: object) -> list[verify.Verdict]:
        ruleset = load_inline(text, tmp_path)
        options.setdefault("cache_dir", tmp_path / "cache")
        return verify.verify_rules(ruleset, **options)  # type: ignore[arg-type]
    return run
