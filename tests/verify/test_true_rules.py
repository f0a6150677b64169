"""True rules that are easy to get wrong (true_rules.dnnr, issue 12): every one is
proved -- attributes restated, rank guards, float-attribute guards, booleans,
transcendental facts, MatMul of rank 1. Each has a wrong sibling in mutations.dnnr."""

from __future__ import annotations

import pytest

from egraph_compiler import dsl, verify
from egraph_compiler.dsl.ast import RuleSet
from egraph_compiler.verify import Verdict

from .conftest import HERE


@pytest.fixture(scope="module")
def ruleset() -> RuleSet:
    return dsl.load_rules([str(HERE / "true_rules.dnnr")])


@pytest.fixture(scope="module")
def verdicts(ruleset: RuleSet, tmp_path_factory: pytest.TempPathFactory) -> list[Verdict]:
    result = verify.verify_rules(ruleset, jobs=2, cache_dir=tmp_path_factory.mktemp("c"),
                                 timeout_s=60, suggest_guards=False)
    print(verify.render_text([v for v in result if not v.ok]))
    return result


def test_at_least_forty_true_rules(ruleset: RuleSet) -> None:
    assert len(ruleset.rules) >= 40


def test_every_true_rule_is_proved(verdicts: list[Verdict]) -> None:
    failing = [v for v in verdicts if not v.ok]
    assert not failing, verify.render_text(failing)


def test_each_true_rule_has_no_dropped_attribute(ruleset: RuleSet) -> None:
    from egraph_compiler.dsl.normalize import attribute_warnings

    # t-default-alpha-written writes the default on the left: not a dropped attribute
    assert attribute_warnings(ruleset) == []
