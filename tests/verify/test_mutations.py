"""A suite of wrong rules (mutations.dnnr): every one is rejected with a
counterexample that NumPy confirms, by the fuzz and by the solver alone."""

from __future__ import annotations

import pytest

from egraph_compiler import dsl, verify
from egraph_compiler.dsl.ast import RuleSet
from egraph_compiler.verify import Verdict
from egraph_compiler.verify.builtin_ops import load_semantics
from egraph_compiler.verify.check import check_tier
from egraph_compiler.verify.normalize import canonical
from egraph_compiler.verify.rule_check import tiers_for

from .conftest import HERE

# Mutations whose flaw only the solver sees at small sizes are checked without fuzz too.
SOLVER_ONLY = ["m-sub-comm", "m-div-cancel", "m-square-sqrt", "m-transpose-fold-order",
               "m-reduce-broadcast-axis", "m-reduce-right-shift", "m-reduce-sum-add-scalar",
               "m-sqrt-square", "m-add-zero", "m-add-zero-fp", "m-transpose-id-absent",
               "m-concat-swap", "m-reshape-transposed", "m-flatten-infer-first",
               "m-scale-fold-gemm-c", "m-bn-fold-conv-eps", "m-scale-fold-conv-bias",
               "m-concat-conv-partition-slice", "m-concat-conv-partition-x1-twice"]


@pytest.fixture(scope="module")
def ruleset() -> RuleSet:
    return dsl.load_rules([str(HERE / "mutations.dnnr")])


@pytest.fixture(scope="module")
def verdicts(ruleset: RuleSet, tmp_path_factory: pytest.TempPathFactory) -> list[Verdict]:
    result = verify.verify_rules(ruleset, jobs=2, cache_dir=tmp_path_factory.mktemp("c"),
                                 timeout_s=60, suggest_guards=False)  # each fails in ~1 s; slack for a loaded CI
    print(verify.render_text(result))
    return result


def test_at_least_a_hundred_mutations(ruleset: RuleSet) -> None:
    assert len(ruleset.rules) >= 100


def test_every_mutation_is_rejected_with_a_confirmed_counterexample(
        verdicts: list[Verdict]) -> None:
    for v in verdicts:
        assert v.status == "failed", v
        assert v.counterexample is not None and v.counterexample.replay == "CONFIRMED", v
        assert v.counterexample.lhs is not None or v.counterexample.rhs is not None


def test_ieee_mutations_hold_over_the_reals(verdicts: list[Verdict]) -> None:
    by_name = {v.rule: v for v in verdicts}
    for name in ("m-add-zero", "m-add-zero-fp", "m-distribute-fp", "m-assoc-fp",
                 "m-reshape-sink-add-zero", "m-reduce-sum-single"):
        v = by_name[name]
        assert v.tiers == ("real",), v
        assert v.counterexample is not None and v.counterexample.tier in ("bf16", "fp16", "fp32")


@pytest.mark.parametrize("name", SOLVER_ONLY)
def test_the_solver_alone_finds_a_confirmed_counterexample(ruleset: RuleSet, name: str) -> None:
    rule = next(r for r in ruleset.rules if r.name == name)
    sems = load_semantics(ruleset.ops)
    canon = canonical(rule, ruleset.ops)
    exact, machine = tiers_for(rule, sems, canon.ops)
    tier = machine[-1] if name.startswith("m-add-zero") else exact
    result = check_tier(canon, sems, tier, canon.guard, 20.0, use_fuzz=False)
    assert result.status == "failed", result
    assert result.counterexample is not None
    assert result.counterexample.replay == "CONFIRMED", result.counterexample.render()


@pytest.mark.parametrize("name", ["m-add-zero", "m-add-zero-fp"])
def test_negative_zero_is_the_fp32_counterexample(ruleset: RuleSet, name: str) -> None:
    rule = next(r for r in ruleset.rules if r.name == name)
    sems = load_semantics(ruleset.ops)
    canon = canonical(rule, ruleset.ops)
    result = check_tier(canon, sems, "fp32", canon.guard, 20.0, use_fuzz=False)
    cex = result.counterexample
    assert cex is not None and cex.replay == "CONFIRMED"
    assert cex.lhs is not None and cex.rhs is not None
    # x + (x - x) differs from x: -0.0 + 0.0 is +0.0, or inf - inf is NaN
    import math
    pairs = list(zip(cex.lhs.values, cex.rhs.values, strict=True))
    assert any((a == 0 and b == 0 and math.copysign(1, a) != math.copysign(1, b))
               or (math.isnan(a) != math.isnan(b)) for a, b in pairs), cex.render()
