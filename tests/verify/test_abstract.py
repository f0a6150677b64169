"""The uninterpreted-scalar pre-pass of the IEEE tiers (`AbstractDomain`): it proves
rules whose two sides are the same scalar function at the same (index-mapped)
elements, and never proves a rule that holds over the reals only."""

from __future__ import annotations

import pytest

from egraph_compiler import dsl
from egraph_compiler.dsl import ast
from egraph_compiler.dsl.ast import RuleSet
from egraph_compiler.verify.builtin_ops import load_semantics
from egraph_compiler.verify.check import check_tier
from egraph_compiler.verify.configs import guard_refuted
from egraph_compiler.verify.encode import SYMBOLIC_LIST, Config
from egraph_compiler.verify.normalize import canonical
from egraph_compiler.verify.rule_check import verify_rule

from .conftest import HERE, ROOT

# proved over the reals at once, but bit-blasting them in fp32 timed out
IEEE_TIMEOUTS = ["reshape-sink-sigmoid", "reshape-sink-gelu", "reshape-sink-sqrt",
                 "reshape-sink-clip", "reshape-sink-sub", "reshape-sink-sub-scalar"]


@pytest.fixture(scope="module")
def library() -> RuleSet:
    return dsl.load_rules([str(ROOT / "rules")])


@pytest.fixture(scope="module")
def mutations() -> RuleSet:
    return dsl.load_rules([str(HERE / "mutations.dnnr")])


def _abstract(ruleset: RuleSet, name: str, tier: str = "uf_fp32") -> str:
    rule = next(r for r in ruleset.rules if r.name == name)
    canon = canonical(rule, ruleset.ops)
    result = check_tier(canon, load_semantics(ruleset.ops), tier, canon.guard, 10.0,
                        use_fuzz=False, max_rank=1, check_shapes=False)
    assert result.counterexample is None  # the abstract tier never claims a refutation
    return result.status


@pytest.mark.parametrize("name", IEEE_TIMEOUTS)
def test_reshape_sinks_are_proved_in_every_ieee_tier(library: RuleSet, name: str) -> None:
    rule = next(r for r in library.rules if r.name == name)
    verdict = verify_rule(rule, load_semantics(library.ops), 30.0, suggest=False)
    assert verdict.ok and verdict.tiers == ("real", "bf16", "fp16", "fp32"), verdict


@pytest.mark.parametrize("name", ["m-add-zero", "m-add-zero-fp", "m-reshape-sink-add-zero",
                                  "m-reduce-sum-single", "m-distribute-fp"])
def test_real_only_identities_are_not_proved_abstractly(mutations: RuleSet, name: str) -> None:
    assert _abstract(mutations, name) != "proved"


def test_a_reshape_sink_is_proved_by_congruence(library: RuleSet) -> None:
    assert _abstract(library, "reshape-sink-gelu") == "proved"


def test_guard_prefilter_skips_only_configurations_it_refutes() -> None:
    # len(?sa) == 1 and (len(?st) == 0 or ?st == [1])
    guard = ast.BinOp("and", ast.BinOp("==", ast.Call("len", (ast.Var("sa"),)), ast.Num(1)),
                      ast.BinOp("or", ast.BinOp("==", ast.Call("len", (ast.Var("st"),)),
                                                ast.Num(0)),
                                ast.BinOp("==", ast.Var("st"), ast.ListLit((ast.Num(1),)))))
    ranks = (("x", 2),)
    two_axes = Config(ranks, (("e", SYMBOLIC_LIST), ("sa", [0, 1]), ("st", [])))
    one_axis = Config(ranks, (("e", SYMBOLIC_LIST), ("sa", [0]), ("st", SYMBOLIC_LIST)))
    assert guard_refuted(guard, two_axes)
    assert not guard_refuted(guard, one_axis)  # the symbolic steps are the solver's
