"""Helpers for the CLI (`dnnr verify`, `dnnr compile --verified-only`); the CLI itself
lives in `egraph_compiler/cli.py`."""

from __future__ import annotations

from collections.abc import Sequence

from egraph_compiler.dsl import ast
from egraph_compiler.verify import render_json, render_text, verify_rules
from egraph_compiler.verify.verdict import Verdict


def run_verify(ruleset: ast.RuleSet, *, jobs: int = 1, as_json: bool = False,
               timeout_s: float = 60.0) -> tuple[str, int]:
    """What `dnnr verify` prints and its exit status (1 when any rule is not proved)."""
    verdicts = verify_rules(ruleset, jobs=jobs, timeout_s=timeout_s)
    text = render_json(verdicts) if as_json else render_text(verdicts)
    return text, 0 if all(v.ok for v in verdicts) else 1


def unproved(verdicts: Sequence[Verdict]) -> list[str]:
    """``rule (file:line): why`` for every rule `--verified-only` must refuse."""
    return [f"{v.rule} ({v.location}): {v.status}"
            + (f" at {v.stage}" if v.stage else "") for v in verdicts if not v.ok]
