"""The public entry point: semantics from the DSL, tiers, unknown as failure, the
cache, --jobs and the JSON and text renderings."""

from __future__ import annotations

import json
from pathlib import Path

from egraph_compiler import verify

from .conftest import load_inline


def test_new_elementwise_op_needs_no_python(check) -> None:  # type: ignore[no-untyped-def]
    text = ("op Halve(x) : one_to_one ili_variable shape_determined = x / 2\n"
            "op Softsign2(x) : one_to_one ili_variable shape_determined = x / (1 + abs(x))\n"
            "rule halve-double: Halve(Add(?a, ?a)) => ?a\n"
            "rule softsign-odd: Softsign2(Neg(?a)) => Neg(Softsign2(?a))\n"
            "rule softsign-wrong: Softsign2(Add(?a, ?b)) => Add(Softsign2(?a), Softsign2(?b))")
    halve, odd, wrong = check(text)
    assert halve.status == "proved" and odd.status == "proved", (halve, odd)
    assert wrong.status == "failed" and wrong.counterexample is not None
    assert wrong.counterexample.replay == "CONFIRMED"


def test_exact_rules_get_ieee_tiers_and_others_a_note(check) -> None:  # type: ignore[no-untyped-def]
    exact, fast = check("rule neg-neg [exact]: Neg(Neg(?a)) => ?a\n"
                        "rule assoc: Add(Add(?a, ?b), ?c) => Add(?a, Add(?b, ?c))")
    assert exact.tiers == ("real", "bf16", "fp16", "fp32"), exact
    assert fast.tiers == ("real",) and fast.ok
    assert "exact over the reals, not bit-exact in fp32" in fast.notes[0]


def test_layout_rules_are_checked_at_rank_three(check) -> None:  # type: ignore[no-untyped-def]
    fold = ("Transpose(Transpose(?x, perm=?p), perm=?q) => Transpose(?x, perm={})"
            " when len(?p) == rank(?x) and len(?q) == rank(?x)")
    right, wrong = check(f"rule right [exact]: {fold.format('compose(?p, ?q)')}\n"
                         f"rule wrong: {fold.format('compose(?q, ?p)')}", jobs=2)
    assert right.status == "proved", right
    assert right.tiers == ("real", "bf16", "fp16", "fp32")
    # the two orders of composition agree up to rank 2: the counterexample has rank 3 or
    # more (perms are drawn at random from rank 3 on, where they are symbolic)
    assert wrong.status == "failed" and wrong.counterexample is not None
    assert wrong.counterexample.replay == "CONFIRMED"
    assert len(wrong.counterexample.inputs[0].shape) >= 3


def test_absent_perms_make_the_unguarded_fold_wrong(check) -> None:  # type: ignore[no-untyped-def]
    # an absent perm binds [] (reversed axes): compose([], []) == [] reverses once,
    # the two Transposes reverse twice
    (v,) = check("rule fold: Transpose(Transpose(?x, perm=?p), perm=?q)"
                 " => Transpose(?x, perm=compose(?p, ?q))", suggest_guards=False)
    assert v.status == "failed" and v.counterexample is not None
    assert v.counterexample.replay == "CONFIRMED"
    assert dict(v.counterexample.attrs)["?p"] == "[]"


def test_unknown_is_a_failure_with_the_time_spent(check) -> None:  # type: ignore[no-untyped-def]
    (v,) = check("rule slow: ReduceSum(Mul(?a, ?c), axes=?ax, keepdims=?k, noop_with_empty_axes=?n)"
                 " => Mul(ReduceSum(?a, axes=?ax, keepdims=?k, noop_with_empty_axes=?n), ?c)"
                 " when rank(?c) == 0",
                 timeout_s=0.01)
    assert v.status == "unknown" and not v.ok, v
    assert "timeout after" in v.message and " s" in v.message


def test_cache_is_keyed_by_rule_and_semantics(tmp_path: Path) -> None:
    text = "rule r: Mul(Neg(?a), Neg(?b)) => Mul(?a, ?b)"
    ruleset = load_inline(text, tmp_path)
    cache = tmp_path / "cache"
    first = verify.verify_rules(ruleset, cache_dir=cache)
    second = verify.verify_rules(ruleset, cache_dir=cache)
    assert not first[0].cached and second[0].cached
    assert (first[0].status, first[0].tiers) == (second[0].status, second[0].tiers)
    # a changed operator semantics is a different key: re-checked, and now refuted
    changed = ('op Neg2(x) : one_to_one ili_variable shape_determined = x\n'
               "rule r: Mul(Neg2(?a), Neg2(?b)) => Mul(?a, ?b)")
    other = verify.verify_rules(load_inline(changed, tmp_path, "b.dnnr"), cache_dir=cache)
    assert not other[0].cached
    assert len(list(cache.glob("*.json"))) == 2


def test_jobs_json_and_text(tmp_path: Path) -> None:
    text = ("rule good: Add(?a, Neg(?b)) => Sub(?a, ?b)\n"
            "rule bad: Sub(?a, ?b) => Sub(?b, ?a)\n"
            "rule good2: Neg(Neg(?a)) => ?a")
    ruleset = load_inline(text, tmp_path)
    serial = verify.verify_rules(ruleset, use_cache=False)
    parallel = verify.verify_rules(ruleset, jobs=2, cache_dir=tmp_path / "c")
    assert [v.status for v in serial] == [v.status for v in parallel] == [
        "proved", "failed", "proved"]
    data = json.loads(verify.render_json(parallel))
    assert data["summary"] == {"rules": 3, "proved": 2, "failed": 1, "unknown": 0}
    bad = data["verdicts"][1]
    assert bad["ok"] is False and bad["stage"] == "value"
    assert bad["counterexample"]["replay"] == "CONFIRMED"
    text_out = verify.render_text(parallel)
    assert "FAILED   bad at value" in text_out and "CONFIRMED" in text_out
    assert "LHS = " in text_out and "RHS = " in text_out and "?a:" in text_out


def test_an_unknown_from_the_solver_gets_a_second_attempt_with_other_seeds(monkeypatch, tmp_path) -> None:
    """A rule the solver leaves unknown (a spent budget on an unlucky search order) is
    checked once more with other Z3 seeds; the second verdict is kept, with a note."""
    from egraph_compiler.verify import check as check_module

    real_verify_rule = verify.verify_rule
    offsets: list[int] = []

    def unlucky_first(rule, sems, timeout_s, suggest, machine):  # type: ignore[no-untyped-def]
        offsets.append(check_module.SEED_OFFSET)
        verdict = real_verify_rule(rule, sems, timeout_s, suggest, machine)
        if check_module.SEED_OFFSET == 0:
            return verify.Verdict(rule.name, verdict.location, "unknown", "value", (), "Z3 returned unknown")
        return verdict

    monkeypatch.setattr(verify, "verify_rule", unlucky_first)
    ruleset = load_inline("rule neg-neg: Neg(Neg(?a)) => ?a", tmp_path)
    (verdict,) = verify.verify_rules(ruleset, cache_dir=tmp_path / "cache", suggest_guards=False, machine_tiers=False)
    assert offsets == [0, verify.RETRY_SEED_OFFSET]
    assert verdict.status == "proved" and "second attempt" in verdict.notes[-1], verdict
    assert check_module.SEED_OFFSET == 0  # the in-process attempt leaves no offset behind
