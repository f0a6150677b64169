"""Seed 000 Table 3.4, every row as printed (table_3_4.dnnr): each gets its verdict."""

from __future__ import annotations

from pathlib import Path

import pytest

from egraph_compiler import dsl, verify
from egraph_compiler.verify import Verdict

from .conftest import HERE


@pytest.fixture(scope="module")
def verdicts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Verdict]:
    ruleset = dsl.load_rules([str(HERE / "table_3_4.dnnr")])
    cache = tmp_path_factory.mktemp("cache")
    result = verify.verify_rules(ruleset, jobs=2, cache_dir=cache, timeout_s=30)
    print(verify.render_text(result))
    return {v.rule: v for v in result}


def _refuted(v: Verdict, *stages: str) -> None:
    assert v.status == "failed", v
    assert v.stage in stages, v
    assert v.counterexample is not None and v.counterexample.replay == "CONFIRMED", v


def test_recip_row_is_wrong_as_printed(verdicts: dict[str, Verdict]) -> None:
    # 1/A * 1/(A*B) = 1/(A^2 B), not B/A^2; no guard from the search fixes it (the
    # shrunk witness may be B = 0, where only the left side divides by zero)
    v = verdicts["t34-assoc-recip"]
    _refuted(v, "value", "definedness")
    assert v.wrong and not v.suggested_guard


def test_sqrt_row_needs_nonneg(verdicts: dict[str, Verdict]) -> None:
    # for B < 0 the left side is undefined (NaN) and the right side is not
    v = verdicts["t34-assoc-sqrt"]
    _refuted(v, "definedness")
    assert v.suggested_guard == "nonneg(?b)"


def test_reducesum_row_as_printed_has_two_reductions(verdicts: dict[str, Verdict],
                                                    check) -> None:  # type: ignore[no-untyped-def]
    # As printed, the two ReduceSum(B) leave their attributes out: each matches any axes,
    # so they may be two different reductions (the e-graph matches them so), and the row
    # is not proved. With the attributes bound once, it is.
    assert not verdicts["t34-assoc-reducesum"].ok
    (v,) = check("rule bound: Mul(Mul(?a, ReduceSum(?b, axes=?ax, keepdims=?k, noop_with_empty_axes=?n)),"
                 " Mul(ReduceSum(?b, axes=?ax, keepdims=?k, noop_with_empty_axes=?n), ?c))"
                 " => Mul(Mul(?a, Square(ReduceSum(?b, axes=?ax, keepdims=?k, noop_with_empty_axes=?n))), ?c)",
                 suggest_guards=False, machine_tiers=False)
    assert v.ok, v


@pytest.mark.parametrize("name", ["t34-assoc-abs", "t34-dist-self",
                                  "t34-dist-square", "t34-comm-mul", "t34-comm-exp"])
def test_true_rows_are_proved(verdicts: dict[str, Verdict], name: str) -> None:
    v = verdicts[name]
    assert v.status == "proved", v
    assert v.tiers == ("real",)
    assert any("not bit-exact" in note for note in v.notes)


def test_distributive_row_is_wrong_as_printed(verdicts: dict[str, Verdict]) -> None:
    # A*C + A*B = A*(B + C); the table prints (A + B)*C
    v = verdicts["t34-dist-factor"]
    _refuted(v, "value")
    assert not v.suggested_guard


def test_bitshift_row_is_wrong(verdicts: dict[str, Verdict]) -> None:
    v = verdicts["t34-comm-bitshift"]
    assert v.status == "failed" and v.counterexample is not None
    assert v.counterexample.replay == "CONFIRMED"
    assert v.counterexample.tier == "int"


def test_bitshift_row_holds_only_for_a_left_shift_by_a_scalar(check) -> None:  # type: ignore[no-untyped-def]
    rule = ("rule {name}: ReduceSum(BitShift(?a, ?s, direction=?d), axes=?ax, keepdims=?k,"
            " noop_with_empty_axes=?n)"
            " => BitShift(ReduceSum(?a, axes=?ax, keepdims=?k, noop_with_empty_axes=?n), ?s,"
            " direction=?d)"
            ' when rank(?s) == 0 and ?d == "{d}"')
    left, right = check(rule.format(name="left", d="LEFT") + "\n"
                        + rule.format(name="right", d="RIGHT"), suggest_guards=False,
                        jobs=2)
    assert left.status == "proved", left
    assert left.tiers == ("int", "bv8", "bv16", "bv32")
    _refuted(right, "value")
    values = [t.values for t in right.counterexample.inputs]  # type: ignore[union-attr]
    assert values, right


def test_table_file_is_verbatim() -> None:
    text = (HERE / "table_3_4.dnnr").read_text()
    assert Path(HERE / "table_3_4.dnnr").exists()
    assert text.count("\nrule ") == 10
