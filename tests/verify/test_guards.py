"""Rules that need a guard: proved with it, refuted without it, and the guard search
proposes it as DSL text; degenerate guards ("dim == 1") are never proposed."""

from __future__ import annotations

from pathlib import Path

import pytest

from egraph_compiler.dsl import ast
from egraph_compiler.verify.builtin_ops import load_semantics
from egraph_compiler.verify.normalize import canonical
from egraph_compiler.verify.preconditions import degenerate

from .conftest import load_inline

CASES = [
    # (left => right, the guard it needs, the stage that fails without it)
    ("Mul(Div(?a, ?b), ?b) => ?a when same_shape(?a, ?b)", "nonzero(?b)", "definedness"),
    ("Square(Sqrt(?a)) => ?a", "nonneg(?a)", "definedness"),
    ("Exp(Log(?a)) => ?a", "positive(?a)", "definedness"),
    # one non-negative operand suffices: a = 0 leaves both sides undefined
    ("Add(Log(?a), Log(?b)) => Log(Mul(?a, ?b))", "nonneg(?a)", "definedness"),
]


def _with(rule: str, guard: str) -> str:
    return f"{rule} and {guard}" if " when " in rule else f"{rule} when {guard}"


@pytest.mark.parametrize(("rule", "guard", "stage"), CASES)
def test_guard_is_needed_and_found(check, rule: str, guard: str, stage: str) -> None:  # type: ignore[no-untyped-def]
    without, with_guard = check(f"rule without: {rule}\nrule with: {_with(rule, guard)}")
    assert without.status == "failed" and without.stage == stage, without
    assert without.counterexample is not None
    assert without.counterexample.replay == "CONFIRMED"
    assert without.suggested_guard == guard, without
    assert with_guard.status == "proved", with_guard


def test_broadcast_agreement_on_the_reduced_axis(check) -> None:  # type: ignore[no-untyped-def]
    rule = ("ReduceSum(Mul(?a, ?c), axes=[0], keepdims=1)"
            " => Mul(ReduceSum(?a, axes=[0], keepdims=1), ?c) when rank(?a) == rank(?c)")
    without, with_guard = check(f"rule without: {rule}\n"
                                f"rule with: {rule} and dim(?c, 0) == 1", jobs=2)
    assert with_guard.status == "proved", with_guard
    assert without.status == "failed" and without.counterexample is not None
    assert without.counterexample.replay == "CONFIRMED"
    # the proposal constrains ?c (scalar, or size 1 on the reduced axis) and proves it
    proposal = without.suggested_guard
    assert "?c" in proposal, without
    (again,) = check(f"rule again: {rule} and {proposal}")
    assert again.status == "proved", again


def test_degenerate_guard_is_not_proposed(check, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    # true only when the reduced axis has length 1: no honest guard exists
    text = "rule sum-is-id: ReduceSum(?x, axes=[0], keepdims=1) => ?x"
    (verdict,) = check(text)
    assert verdict.status == "failed", verdict
    assert verdict.suggested_guard == "" and verdict.wrong, verdict
    ruleset = load_inline(text, tmp_path, "again.dnnr")
    sems = load_semantics(ruleset.ops)
    canon = canonical(ruleset.rules[0], ruleset.ops)
    dim_one = ast.BinOp("==", ast.Call("dim", (ast.Var("x"), ast.Num(0))), ast.Num(1))
    assert degenerate(canon, sems, "real", dim_one)
    assert not degenerate(canon, sems, "real", ast.Call("nonzero", (ast.Var("x"),)))
