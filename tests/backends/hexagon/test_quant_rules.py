"""rules/quant.dnnr: it loads, and it declares the patterns the backend lowers."""

from __future__ import annotations

from pathlib import Path

from egraph_compiler import pipeline
from egraph_compiler.dsl import check, load_rules

QUANT = Path(__file__).resolve().parents[3] / "rules" / "quant.dnnr"
HEXAGON = QUANT.parent / "targets" / "hexagon.dnnr"


def test_quant_rules_load_without_diagnostics():
    assert check([QUANT]) == []
    ruleset = load_rules([QUANT])
    assert ruleset is not None


def test_every_qdq_rule_names_an_integer_operator_the_backend_lowers():
    text = QUANT.read_text()
    for op in ("QConvInt", "QMatMulInt", "QAddInt", "QMulInt", "Requantize"):
        assert f"op {op}(" in text and f"=> {op}(" in text


def test_hexagon_target_runs_only_the_quant_rules():
    assert check([HEXAGON]) == []
    assert pipeline.target_rules("hexagon").resolve() == HEXAGON.resolve()
    rules = pipeline.load_rules(target="hexagon")
    assert [step.rulesets for step in rules.schedule] == [("quant",)]
    assert {r.ruleset for r in rules.rules} == {"quant"}
    assert pipeline.target_rules("opencl") is None  # other targets keep the shipped library
