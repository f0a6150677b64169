"""rules/quant.dnnr: it loads, and it declares the patterns the backend lowers."""

from __future__ import annotations

from pathlib import Path

from egraph_compiler.dsl import check, load_rules

QUANT = Path(__file__).resolve().parents[3] / "rules" / "quant.dnnr"


def test_quant_rules_load_without_diagnostics():
    assert check([QUANT]) == []
    ruleset = load_rules([QUANT])
    assert ruleset is not None


def test_every_qdq_rule_names_an_integer_operator_the_backend_lowers():
    text = QUANT.read_text()
    for op in ("QConvInt", "QMatMulInt", "QAddInt", "QMulInt", "Requantize"):
        assert f"op {op}(" in text and f"=> {op}(" in text
