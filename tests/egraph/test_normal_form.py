"""The e-graph applies what `dnnr verify` proves (issue 12, item 1-2): one normal form of a
rule (`dsl/normalize.py`) for both. Each case compiles a model with one rule and
verifies the same rule; the two must agree."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from egraph_compiler import egraph, extract, verify
from egraph_compiler.dsl.normalize import RANK_LIMIT, WIDE_RANK_LIMIT, attribute_warnings
from tests.egraph.helpers import graph, rules_from_text, run


def _verdict(rules, tmp_path: Path) -> verify.Verdict:
    (v,) = verify.verify_rules(rules, jobs=1, cache_dir=tmp_path / "cache",
                               suggest_guards=False, machine_tiers=False)
    return v


def _compiled(g, rules):
    sat = egraph.saturate(g, rules)
    return sat, extract.extract(sat).graph


def test_a_left_out_right_hand_attribute_is_the_default_in_both(tmp_path):
    rules = rules_from_text(tmp_path, """
ruleset algebra
rule drop-alpha: Neg(Neg(LeakyRelu(?x, alpha=?a))) => LeakyRelu(?x)
""")
    x = np.array([-2.0, -0.5, 1.0, 3.0], dtype=np.float32)
    g = graph({"x": (4,)}, [("LeakyRelu", ["x"], ["l"], {"alpha": 0.5}), ("Neg", ["l"], ["n"], {}),
                            ("Neg", ["n"], ["y"], {})],
              ["y"], types={"l": (4,), "n": (4,), "y": (4,)})
    sat, out = _compiled(g, rules)
    assert sat.stats.rule_fires.get("drop-alpha", 0) >= 1
    # the compiler gives the right-hand LeakyRelu alpha's default, so the model changes ...
    assert not np.allclose(run(out, {"x": x})["y"], run(g, {"x": x})["y"])
    # ... and the verifier refutes the rule with a counterexample NumPy confirms
    v = _verdict(rules, tmp_path)
    assert v.status == "failed" and v.counterexample is not None
    assert v.counterexample.replay == "CONFIRMED"
    # and `dnnr check` warns about it
    (warning,) = attribute_warnings(rules)
    assert "drop-alpha" in warning and "`alpha`" in warning and "0.01" in warning


def test_a_repeated_left_hand_node_is_two_nodes_in_both(tmp_path):
    rules = rules_from_text(tmp_path, """
ruleset algebra
rule twin: Sub(LeakyRelu(?x), LeakyRelu(?x)) => Sub(?x, ?x)
""")
    x = np.array([-2.0, -1.0, 1.0, 2.0], dtype=np.float32)
    g = graph({"x": (4,)},
              [("LeakyRelu", ["x"], ["a"], {"alpha": 0.1}), ("LeakyRelu", ["x"], ["b"], {"alpha": 0.5}),
               ("Sub", ["a", "b"], ["y"], {})],
              ["y"], types={"a": (4,), "b": (4,), "y": (4,)})
    sat, out = _compiled(g, rules)
    assert sat.stats.rule_fires.get("twin", 0) >= 1  # the e-graph matches different alphas
    assert not np.allclose(run(out, {"x": x})["y"], run(g, {"x": x})["y"])
    v = _verdict(rules, tmp_path)
    assert v.status == "failed" and v.counterexample is not None
    assert v.counterexample.replay == "CONFIRMED"


def test_the_same_rule_with_its_attributes_bound_is_proved_and_kept(tmp_path):
    rules = rules_from_text(tmp_path, """
ruleset algebra
rule keep-alpha: LeakyRelu(Neg(?x), alpha=?a) => Neg(Neg(LeakyRelu(Neg(?x), alpha=?a)))
""")
    assert attribute_warnings(rules) == []
    assert _verdict(rules, tmp_path).ok


@pytest.mark.parametrize(("rank", "fires"), [(WIDE_RANK_LIMIT, True), (WIDE_RANK_LIMIT + 1, False)])
def test_a_perm_rule_is_verified_and_applied_to_rank_six(tmp_path, rank, fires):
    """Perms are symbolic from rank 3 on (`verify/perm.py`): one configuration covers
    the 720 perms of rank 6, so Transpose rules are verified, hence applied, there."""
    rules = rules_from_text(tmp_path, """
ruleset layout
rule transpose-fold: Transpose(Transpose(?x, perm=?p), perm=?q) => Transpose(?x, perm=compose(?p, ?q))
    when len(?p) > 0 and len(?q) > 0
""")
    v = _verdict(rules, tmp_path)
    assert v.ok and v.rank_guard == f"rank(?x) <= {WIDE_RANK_LIMIT}" and WIDE_RANK_LIMIT >= 6
    shape = tuple(range(2, 2 + rank))
    perm = tuple(range(1, rank)) + (0,)
    once = tuple(shape[p] for p in perm)
    g = graph({"x": shape},
              [("Transpose", ["x"], ["a"], {"perm": perm}), ("Transpose", ["a"], ["y"], {"perm": perm})],
              ["y"], types={"a": once, "y": tuple(once[p] for p in perm)})
    sat = egraph.saturate(g, rules)
    assert bool(sat.stats.rule_fires.get("transpose-fold", 0)) == fires


@pytest.mark.parametrize(("rank", "fires"), [(RANK_LIMIT - 1, True), (RANK_LIMIT, False)])
def test_an_axes_rule_applies_only_at_the_ranks_it_was_verified_for(tmp_path, rank, fires):
    """An axes list is still enumerated, up to RANK_LIMIT (the input of Unsqueeze has
    one axis less than its output)."""
    rules = rules_from_text(tmp_path, """
ruleset layout
rule unsqueeze-neg: Unsqueeze(Neg(?x), axes=?a) => Neg(Unsqueeze(?x, axes=?a))
""")
    v = _verdict(rules, tmp_path)
    assert v.ok and v.rank_guard == f"rank(?x) <= {RANK_LIMIT}"
    shape = tuple(range(2, 2 + rank + 1))
    g = graph({"x": shape},
              [("Neg", ["x"], ["a"], {}), ("Unsqueeze", ["a"], ["y"], {"axes": (0,)})],
              ["y"], types={"a": shape, "y": (1, *shape)})
    sat = egraph.saturate(g, rules)
    assert bool(sat.stats.rule_fires.get("unsqueeze-neg", 0)) == fires


def test_elementwise_only_rules_have_no_rank_guard(tmp_path):
    rules = rules_from_text(tmp_path, """
ruleset algebra
rule neg-neg: Neg(Neg(?x)) => ?x
""")
    assert _verdict(rules, tmp_path).rank_guard == ""


@pytest.mark.parametrize(("rank", "fires"), [(WIDE_RANK_LIMIT, True), (WIDE_RANK_LIMIT + 1, False)])
def test_a_rule_without_perms_or_axes_is_verified_and_applied_to_rank_six(tmp_path, rank, fires):
    rules = rules_from_text(tmp_path, """
ruleset layout
rule cat-one: Concat(?x, axis=?a) => ?x
""")
    v = _verdict(rules, tmp_path)
    assert v.ok and v.rank_guard == f"rank(?x) <= {WIDE_RANK_LIMIT}" and WIDE_RANK_LIMIT >= 6
    shape = tuple(range(2, 2 + rank))
    g = graph({"x": shape}, [("Concat", ["x"], ["y"], {"axis": 1})], ["y"], types={"y": shape})
    sat = egraph.saturate(g, rules)
    assert bool(sat.stats.rule_fires.get("cat-one", 0)) == fires
