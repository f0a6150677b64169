"""Saturation: computed attributes checked against NumPy, the schedule's limits."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from egraph_compiler import egraph, extract
from egraph_compiler.dsl.ast import Limits
from tests.egraph.helpers import graph, rules_from_text, run

LAYOUT = """
ruleset layout
rule transpose-fold: Transpose(Transpose(?x, perm=?p), perm=?q) => Transpose(?x, perm=compose(?p, ?q))
rule transpose-id: Transpose(?x, perm=?p) => ?x when len(?p) == rank(?x) and is_identity(?p)
schedule { saturate layout }
"""


def _perm_pairs(rank: int, count: int, seed: int) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    perms = list(itertools.permutations(range(rank)))
    rng = np.random.default_rng(seed)
    picks = rng.choice(len(perms) ** 2, size=count, replace=False)
    pairs = [(perms[i // len(perms)], perms[i % len(perms)]) for i in picks]
    # always include an inverse pair, which must vanish entirely
    p = perms[-1]
    inverse = tuple(int(i) for i in np.argsort(p))
    return pairs + [(p, inverse)]


@pytest.mark.parametrize("rank", [3, 4])
def test_transpose_composition_matches_numpy(tmp_path, rank):
    rules = rules_from_text(tmp_path, LAYOUT)
    dims = (2, 3, 4, 5)[:rank]
    x = np.random.default_rng(rank).standard_normal(dims).astype(np.float32)
    for p, q in _perm_pairs(rank, 4, seed=rank):
        mid = tuple(dims[i] for i in p)
        out = tuple(mid[i] for i in q)
        g = graph({"x": dims},
                  [("Transpose", ["x"], ["t"], {"perm": p}), ("Transpose", ["t"], ["y"], {"perm": q})],
                  ["y"], types={"t": mid, "y": out})
        result = extract.extract(egraph.saturate(g, rules))
        ops = [n.op for n in result.graph.nodes]
        assert ops.count("Transpose") <= 1, (p, q, ops)
        expected = x.transpose(p).transpose(q)
        np.testing.assert_array_equal(run(result.graph, {"x": x})["y"], expected)
        identity = tuple(range(rank))
        for node in result.graph.nodes:
            # a composed Transpose names the rule that built it and keeps the name of
            # the input-model node it replaces (the outer one, n1: same value); where
            # one perm was the identity, the other original node is kept, by name
            if node.op == "Transpose" and identity not in (p, q):
                assert (node.name, result.provenance[node.name]) == ("n1", ("transpose-fold",))
            elif node.op == "Transpose":
                assert node.name == ("n1" if p == identity else "n0")
            else:
                assert result.provenance[node.name] == ()


def test_associativity_and_commutativity_stop_at_the_node_limit(tmp_path):
    rules = rules_from_text(tmp_path, """
ruleset algebra
rule add-comm: Add(?a, ?b) => Add(?b, ?a)
rule add-assoc: Add(Add(?a, ?b), ?c) => Add(?a, Add(?b, ?c))
""")
    nodes = [("Add", ["x", "w0"], ["s0"], {})]
    nodes += [("Add", [f"s{i - 1}", f"w{i}"], [f"s{i}"], {}) for i in range(1, 200)]
    inputs = {"x": (4,)} | {f"w{i}": (4,) for i in range(200)}
    g = graph(inputs, nodes, ["s199"], types={f"s{i}": (4,) for i in range(200)})
    messages: list[str] = []
    sat = egraph.saturate(g, rules, limits=Limits(nodes=2000, iterations=100, seconds=60),
                          progress=messages.append)
    assert sat.stats.stop_reason == "limit:nodes"
    assert sat.stats.limit == 2000
    assert sat.stats.e_nodes > 2000
    assert "stopped by the nodes limit (2000)" in sat.stats.describe()
    assert "stopped by the nodes limit (2000)" in messages[-1]
    # the run is still usable: extraction gives back an equivalent sum
    result = extract.extract(sat)
    rng = np.random.default_rng(1)
    feeds = {name: rng.standard_normal(4).astype(np.float32) for name in inputs}
    np.testing.assert_allclose(run(result.graph, feeds)["s199"], sum(feeds.values()), rtol=1e-4)


def test_iteration_limit_is_reported(tmp_path):
    rules = rules_from_text(tmp_path, """
ruleset algebra
rule add-comm: Add(?a, ?b) => Add(?b, ?a)
rule add-assoc: Add(Add(?a, ?b), ?c) => Add(?a, Add(?b, ?c))
""")
    nodes = [("Add", [f"x{i}", f"x{i + 1}"] if i == 0 else [f"s{i - 1}", f"x{i + 1}"], [f"s{i}"], {})
             for i in range(6)]
    g = graph({f"x{i}": (2,) for i in range(7)}, nodes, ["s5"], types={f"s{i}": (2,) for i in range(6)})
    sat = egraph.saturate(g, rules, limits=Limits(nodes=10**9, iterations=2, seconds=60))
    assert (sat.stats.stop_reason, sat.stats.limit) == ("limit:iterations", 2)
    assert len(sat.stats.iterations) == 2
    for iteration in sat.stats.iterations:
        assert iteration.ruleset == "algebra"
        assert 0 < iteration.e_classes <= iteration.e_nodes


def test_rewrite_created_classes_get_shape_facts(tmp_path):
    # flatten-and-restore is an identity; the intermediate class is new, and a guard
    # on it (rank 1) can only hold if its shape was propagated through the oracle
    rules = rules_from_text(tmp_path, """
ruleset layout
rule flat: Neg(?x) => Mul(Reshape(Reshape(?x, vector([-1])), vector(shape(?x))), -1)
rule flat-seen: Reshape(?f, ?s) => Identity(Reshape(?f, ?s)) when rank(?f) == 1 and numel(?f) == 24
""")
    from egraph_compiler.extract.view import read

    g = graph({"x": (2, 3, 4)}, [("Neg", ["x"], ["y"], {})], ["y"], types={"y": (2, 3, 4)})
    sat = egraph.saturate(g, rules)
    view = read(sat)
    reshapes = [n for n in view.nodes if n.op == "Reshape"]
    assert {view.shape[n.eclass] for n in reshapes} == {(2, 3, 4), (24,)}
    assert sat.stats.rule_fires.get("flat-seen", 0) >= 1
    x = np.random.default_rng(2).standard_normal((2, 3, 4)).astype(np.float32)
    np.testing.assert_array_equal(run(extract.extract(sat).graph, {"x": x})["y"], -x)


def test_a_declared_elementwise_op_without_a_shape_rule_broadcasts(tmp_path):
    # AddTwice has no Python shape rule: being one_to_one, its new class gets the
    # broadcast of its operands' shapes through the oracle, and the rank guard holds
    rules = rules_from_text(tmp_path, """
op AddTwice(a, b) : one_to_one ili_variable shape_determined = a + b + b
ruleset algebra
rule twice: Add(?x, ?b) => Sub(AddTwice(?x, ?b), ?b)
rule seen: Sub(?t, ?b) => Identity(Sub(?t, ?b)) when rank(?t) == 2
""")
    from egraph_compiler.extract.view import read

    g = graph({"x": (2, 3), "b": (3,)}, [("Add", ["x", "b"], ["y"], {})], ["y"], types={"y": (2, 3)})
    sat = egraph.saturate(g, rules)
    view = read(sat)
    assert {view.shape[n.eclass] for n in view.nodes if n.op == "AddTwice"} == {(2, 3)}
    assert sat.stats.rule_fires.get("seen", 0) >= 1
