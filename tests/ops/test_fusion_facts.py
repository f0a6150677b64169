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
    compile_time = {n for n in shipped.ops if tables.compile_time(n)}
    assert compile_time == {n for n, i in shipped.ops.items() if i.cost == ("per_element", 0.0)}
    # NonZero reads every value: not a compile-time shape computation
    assert "NonZero" not in compile_time and "Shape" in compile_time


ANCHOR_RULES = """
op TestMatMul(a, b) : many_to_many ild_variable shape_determined = builtin matmul  shape builtin matmul  cost mac  anchor matmul
"""


def test_an_anchor_declared_in_a_rule_file_plans_as_an_anchor(tmp_path) -> None:
    """The planner reads anchors from the active registry, not the shipped library's: a
    rule file's matmul-class operator anchors a block with its elementwise epilogue."""
    from egraph_compiler.fusion import plan_fusion
    from egraph_compiler.ir.graph import Graph, Node, TensorType, Value

    (tmp_path / "anchor.dnnr").write_text(ANCHOR_RULES)
    f32 = lambda *shape: TensorType("float32", shape)  # noqa: E731
    graph = Graph(name="t", nodes=(Node("TestMatMul", ("x", "w"), ("m",)), Node("Relu", ("m",), ("y",))),
                  inputs=(Value("x", f32(4, 8)), Value("w", f32(8, 16))), outputs=(Value("y", f32(4, 16)),),
                  types={"m": f32(4, 16), "y": f32(4, 16)})
    assert tables.anchor_kind("TestMatMul") is None  # unknown to the shipped library
    with ops.using(dsl.load_rules([tmp_path / "anchor.dnnr"])):
        assert tables.anchor_kind("TestMatMul") == "matmul"
        plan = plan_fusion(graph)
    assert [block.ops for block in plan.blocks] == [("TestMatMul", "Relu")]
    assert plan.blocks[0].anchor == 0 and plan.blocks[0].kind == "matmul"
