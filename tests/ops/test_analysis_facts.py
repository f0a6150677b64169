"""E-graph analysis facts derived from the declarations (`egraph.facts`), for an operator
declared only in a rule file: sign propagation from ``a + b`` / ``a * b`` semantics, the
shape rule of a declared ``shape builtin``."""

from __future__ import annotations

from pathlib import Path

from egraph_compiler import dsl
from egraph_compiler.egraph.facts import analysis_program
from egraph_compiler.egraph.schema import schemas

DECLS = """
op Plus2(a, b)  : one_to_one ili_variable shape_determined = a + b
op Minus2(a, b) : one_to_one ili_variable shape_determined = a - b
op Swap2(a, b)  : one_to_one ili_variable shape_determined = b * a
op Lookup2(x, idx) : one_to_many ili_fixed shape_determined = builtin gather_elements  shape builtin gather_elements
"""


def _program(tmp: Path) -> tuple[str, dict]:
    (tmp / "ops.dnnr").write_text(DECLS)
    rules = dsl.load_rules([tmp / "ops.dnnr"])
    return analysis_program(schemas(rules.ops))


def test_sign_facts_follow_additive_and_multiplicative_semantics(tmp_path: Path) -> None:
    text, _ = _program(tmp_path)
    for op, preserves in (("Plus2", True), ("Swap2", True), ("Minus2", False)):
        rule = f"(rule ((= e (Op_{op} x0 x1)) (positive x0) (positive x1)) ((positive e))"
        assert (rule in text) is preserves, op


def test_a_declared_shape_builtin_gets_a_shape_oracle_not_a_broadcast(tmp_path: Path) -> None:
    text, oracles = _program(tmp_path)
    assert "Lookup2" in oracles and "Plus2" in oracles
    assert "(rule ((= e (Op_Lookup2 x0 x1)) (= s (shape x0)) (= s (shape x1)))" not in text
