"""Lowering a Graph and rules to egglog: attribute kinds, guards, bidirectional rules,
undeclared operators."""

from __future__ import annotations

import numpy as np
import pytest

from egraph_compiler import egraph, extract
from egraph_compiler.extract.view import read
from egraph_compiler.ir.errors import ModelError
from egraph_compiler.ir.graph import TensorAttr
from tests.egraph.helpers import graph, rules_from_text, run

KINDS = """
op Probe(x) [i: int = 7, l: ints, f: float = 0.5, fs: floats, s: string = "abc", ss: strings,
             t: tensor] : one_to_one ili_variable shape_determined = x
ruleset kinds
"""


def _output_class_ops(saturation, name: str) -> set[str]:
    view = read(saturation)
    handle = int(saturation.outputs[name][3:-1])
    return {n.op for n in view.classes[view.value_class[handle]]}


def test_every_attribute_kind_round_trips(tmp_path):
    tensor = TensorAttr.from_numpy(np.arange(6, dtype=np.float32).reshape(2, 3))
    attrs = {"i": -3, "l": (4, -5, 6), "f": 2.25, "fs": (1.5, -0.125), "s": "hello world",
             "ss": ("a", "bc"), "t": tensor}
    g = graph({"x": (2, 3)}, [("Probe", ["x"], ["y"], attrs, "probe")], ["y"], types={"y": (2, 3)})
    sat = egraph.saturate(g, rules_from_text(tmp_path, KINDS))
    node = extract.extract(sat).graph.nodes[0]
    assert node.name == "probe"
    assert node.attr_dict == attrs


def test_absent_attributes_take_declared_defaults_or_stay_absent(tmp_path):
    g = graph({"x": (2, 3)}, [("Probe", ["x"], ["y"], {})], ["y"], types={"y": (2, 3)})
    node = extract.extract(egraph.saturate(g, rules_from_text(tmp_path, KINDS))).graph.nodes[0]
    # declared defaults are filled in; attributes without a default stay absent
    assert node.attr_dict == {"i": 7, "f": 0.5, "s": "abc"}


@pytest.mark.parametrize(
    ("pattern", "matching"),
    [("i=2", "int"), ("l=[1, 2]", "ints"), ("f=1.5", "float"), ('s="yes"', "string")],
)
def test_literal_attribute_patterns_match_only_equal_values(tmp_path, pattern, matching):
    text = KINDS + f"rule probe-literal: Probe(?x, {pattern}) => ?x\n"
    rules = rules_from_text(tmp_path, text)
    hits = {"int": {"i": 2}, "ints": {"l": (1, 2)}, "float": {"f": 1.5}, "string": {"s": "yes"}}
    misses = {"int": {"i": 3}, "ints": {"l": (2, 1)}, "float": {"f": 1.25}, "string": {"s": "no"}}
    for attrs, expected in ((hits[matching], 1), (misses[matching], 0)):
        g = graph({"x": (4,)}, [("Probe", ["x"], ["y"], attrs)], ["y"], types={"y": (4,)})
        sat = egraph.saturate(g, rules)
        assert bool(sat.stats.rule_fires.get("probe-literal", 0)) == bool(expected), attrs
        assert ("Input" in _output_class_ops(sat, "y")) == bool(expected)


def test_guard_fires_only_when_it_holds(tmp_path):
    rules = rules_from_text(tmp_path, """
ruleset layout
# test-only: drop a Transpose when its perm is the identity of the operand's rank
rule transpose-id: Transpose(?x, perm=?p) => ?x when len(?p) == rank(?x) and is_identity(?p)
""")
    g = graph(
        {"x": (2, 3, 4)},
        [("Transpose", ["x"], ["a"], {"perm": (0, 1, 2)}, "keep_me_not"),
         ("Transpose", ["a"], ["b"], {"perm": (2, 0, 1)}, "keep_me")],
        ["b"], types={"a": (2, 3, 4), "b": (4, 2, 3)},
    )
    sat = egraph.saturate(g, rules)
    # both Transposes match the left-hand side; the guard holds for one
    assert sat.stats.rule_matches["transpose-id"] >= 2
    assert sat.stats.rule_fires["transpose-id"] >= 1
    out = extract.extract(sat).graph
    assert [(n.name, n.attr("perm")) for n in out.nodes] == [("keep_me", (2, 0, 1))]
    x = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)
    np.testing.assert_array_equal(run(out, {"x": x})["b"], x.transpose(2, 0, 1))


def test_guard_on_an_unknown_fact_is_false(tmp_path):
    rules = rules_from_text(tmp_path, """
ruleset layout
rule relu-rank: Relu(?x) => ?x when rank(?x) == 2
""")
    # the input's shape is unknown: the guard must not assume anything
    g = graph({"x": (2, 2)}, [("Relu", ["x"], ["y"], {})], ["y"])
    g = type(g)(**{**{f: getattr(g, f) for f in g.__dataclass_fields__}, "types": {}})
    sat = egraph.saturate(g, rules)
    assert sat.stats.rule_fires.get("relu-rank", 0) == 0


def test_bidirectional_rule_rewrites_both_ways(tmp_path):
    rules = rules_from_text(tmp_path, """
ruleset algebra
rule double: Add(?a, ?a) <=> Mul(?a, 2)
""")
    two = np.array(2.0, dtype=np.float32)
    forward = graph({"x": (3,)}, [("Add", ["x", "x"], ["y"], {})], ["y"], types={"y": (3,)})
    backward = graph({"x": (3,)}, [("Mul", ["x", "two"], ["y"], {})], ["y"],
                     constants={"two": two}, types={"y": (3,)})
    for g in (forward, backward):
        sat = egraph.saturate(g, rules)
        assert {"Add", "Mul"} <= _output_class_ops(sat, "y")


def test_undeclared_operator_is_a_model_error(tmp_path):
    g = graph({"x": (2,)}, [("Foo", ["x"], ["y"], {}, "conv1")], ["y"])
    with pytest.raises(ModelError) as error:
        egraph.saturate(g, rules_from_text(tmp_path, ""))
    assert str(error.value) == (
        "node 'conv1' uses operator 'Foo' which no rule file declares "
        "(declare it in rules/operators.dnnr)"
    )


@pytest.mark.parametrize(
    ("guard", "fires"),
    [("dim(?x, 1) == 4", True), ("dim(?x, 0) == 1", False), ("dim(?x, 0) != 1", False),
     ("dim(?x, 0) == dim(?x, 0)", True), ("numel(?x) == 4 * dim(?x, 0)", True),
     ("dim(?x, 0) + 1 > dim(?x, 0)", True)],
)
def test_guards_over_symbolic_dims_are_conservative(tmp_path, guard, fires):
    from egraph_compiler.ir.dims import DimExpr

    # test-only rules: whether they fire is the point, not what they rewrite to
    rules = rules_from_text(tmp_path, f"ruleset layout\nrule probe: Relu(?x) => ?x when {guard}\n")
    batch = DimExpr.symbol("B")
    g = graph({"x": (batch, 4)}, [("Relu", ["x"], ["y"], {})], ["y"], types={"y": (batch, 4)})
    sat = egraph.saturate(g, rules)
    assert bool(sat.stats.rule_fires.get("probe", 0)) == fires
