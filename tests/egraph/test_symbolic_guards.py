"""Guards over symbolic dims are decided by the shapes stage's prover under the dim ranges
(issue 15 item 2): a guard the ranges establish fires, one they do not stays false."""

from __future__ import annotations

from egraph_compiler import pipeline
from egraph_compiler.ir import DimExpr
from tests.egraph.helpers import graph, rules_from_text

B, S = DimExpr.symbol("B"), DimExpr.symbol("S")
# Slicing [0, e) of an axis no longer than e keeps the whole axis.
RULES = """
ruleset test
rule slice-whole-axis: Slice(?x, starts=[0], ends=?e, axes=[1], steps=[1]) => ?x
    when len(?e) == 1 and ?e[0] >= dim(?x, 1)
schedule { saturate test }
"""


def _model():
    return graph({"x": (B, S)}, [
        ("Slice", ["x"], ["y"], {"starts": (0,), "ends": (512,), "axes": (1,), "steps": (1,)}),
        ("Relu", ["y"], ["z"], {}),
    ], ["z"])


def test_a_guard_the_ranges_establish_fires(tmp_path) -> None:
    rules = rules_from_text(tmp_path, RULES)
    optimised, report = pipeline.optimize(_model(), rules, dims={"S": (1, 512)})
    assert report.rules_fired.get("slice-whole-axis") == 1
    assert [n.op for n in optimised.nodes] == ["Relu"]
    assert report.dims["S"] == {"low": 1, "high": 512, "given": True}
    assert report.dims["B"]["given"] is False


def test_a_guard_the_ranges_do_not_establish_stays_false(tmp_path) -> None:
    rules = rules_from_text(tmp_path, RULES)
    optimised, report = pipeline.optimize(_model(), rules)  # S may exceed 512
    assert "slice-whole-axis" not in report.rules_fired
    assert "slice-whole-axis" in report.guard_failed
    assert [n.op for n in optimised.nodes] == ["Slice", "Relu"]
