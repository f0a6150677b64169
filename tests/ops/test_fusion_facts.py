"""The fusion planner's operator facts come from declarations: an operator declared only
in a rule file is expensive (kept out of a Conv / MatMul prologue) when its expression
divides or calls a transcendental function, and a row reduction when it is an
``anchor reduce`` with ``axes`` and ``keepdims``."""

from __future__ import annotations

from egraph_compiler import dsl, ops
from egraph_compiler.fusion import structure, tables

RULES = """
op TestRatio(a, b) : one_to_one ili_variable shape_determined = a / (1 + b)
op TestWave(x) : one_to_one ili_variable shape_determined = x * sin(x)
op TestTwice(x) : one_to_one ili_variable shape_determined = max(x + x, 0)
op TestRowSum(x) [axes: ints, keepdims: int = 1] : many_to_many ild_variable shape_determined = builtin reduce_sum  cost reduce anchor reduce
op TestAll(x) : many_to_many ild_variable shape_determined = builtin global_average_pool  cost reduce anchor reduce
op TestView(x) : reorganize ili_fixed shape_determined = builtin reshape  cost free
"""


def test_fusion_facts_are_derived_from_a_rule_file(tmp_path) -> None:
    (tmp_path / "t.dnnr").write_text(RULES)
    with ops.using(dsl.load_rules([tmp_path / "t.dnnr"])) as registry:
        assert {n for n in registry.where("expensive") if n.startswith("Test")} == {"TestRatio", "TestWave"}
        assert {n for n in registry.where("row_reduction") if n.startswith("Test")} == {"TestRowSum"}
        assert structure._fact("TestRatio", "expensive") and not structure._fact("TestTwice", "expensive")
        assert not structure._fact("NoSuchOperator", "expensive")
        # a `cost free` operator is reached through by reshape index arithmetic
        assert registry.ops["TestView"].cost[0] == "free"


def test_compile_time_operators_are_the_per_element_zero_ones() -> None:
    shipped = ops.shipped()
    assert tables.COMPILE_TIME_OPS == {n for n, i in shipped.ops.items() if i.cost == ("per_element", 0.0)}
    # NonZero reads every value: not a compile-time shape computation
    assert "NonZero" not in tables.COMPILE_TIME_OPS and "Shape" in tables.COMPILE_TIME_OPS
