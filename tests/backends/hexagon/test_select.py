"""Instruction/layout choice as a PBQP (GCD² eq. 4.1): the `select` stage's optimum on the
HVX cost model, never worse than the local choice or the chain DP (eq. 4.2)."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from egraph_compiler.backends.hexagon.select import INFEASIBLE, choose, gemm_options

FAMILIES = ("vrmpy", "vmpa", "vmpy")


def test_padding_shows_in_the_cost_model():
    # 33 rows: one row past a 32-row panel costs vrmpy a whole extra panel, not vmpy (128 rows).
    by_family = {o.family: o for o in gemm_options(33, 64, 8)}
    assert "padding" in by_family["vrmpy"].detail
    per_row = {f: by_family[f].cycles for f in FAMILIES}
    exact = {o.family: o.cycles for o in gemm_options(32, 64, 8)}
    assert per_row["vrmpy"] - exact["vrmpy"] > per_row["vmpy"] - exact["vmpy"]


def _brute_force(problem):
    names = [n.name for n in problem.nodes]
    return min(problem.evaluate(dict(zip(names, p, strict=True)))
               for p in itertools.product(*(range(len(n.options)) for n in problem.nodes)))


def _chain_uses(names):
    return [(a, b, 0) for a, b in itertools.pairwise(names)] + [(names[-1], None, 0)]


def test_choose_reports_every_operator():
    ops = [("a", gemm_options(100, 27, 16)), ("b", gemm_options(100, 16, 16)), ("c", gemm_options(100, 16, 3))]
    chosen, selection = choose(ops, _chain_uses(["a", "b", "c"]))
    assert set(chosen) == {"a", "b", "c"}
    assert selection.objective == _brute_force(selection.problem) == selection.lower_bound
    for name, _ in ops:
        assert "PBQP reductions" in chosen[name].reason and "vrmpy=" in chosen[name].reason


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 300), st.lists(st.integers(1, 200), min_size=3, max_size=5))
def test_layout_aware_choice_is_optimal_and_never_worse_than_local_or_chain_dp(m, widths):
    """Chains of 1×1 GEMMs (one M, K of each = N of the previous) whose producers may
    write their consumer's packed layout: the PBQP's total (operators + layout
    conversions, padding included) is the brute-force minimum."""
    ops = []
    for i, (k, n) in enumerate(itertools.pairwise(widths)):
        consumer = (m, n, widths[i + 2]) if i + 2 < len(widths) else None
        ops.append((f"g{i}", gemm_options(m, k, n, packed_consumer=consumer)))
    _, selection = choose(ops, _chain_uses([name for name, _ in ops]))
    assert selection.objective == _brute_force(selection.problem) < INFEASIBLE
    assert selection.objective <= selection.local_objective
    assert selection.objective == selection.chain_objective  # on a chain, eq. 4.2 is exact


def test_global_choice_beats_local_by_agreeing_on_layouts():
    """MatMul 100×64×48 then a 1×1 MatMul 100×48×40: the local choice takes the cheapest
    producer alone (writing NHWC) and the consumer then packs its input; the PBQP has the
    producer write the consumer's panels instead."""
    ops = [("p", gemm_options(100, 64, 48, packed_consumer=(100, 48, 40))), ("c", gemm_options(100, 48, 40))]
    chosen, selection = choose(ops, _chain_uses(["p", "c"]))
    assert chosen["p"].option.writes == f"packed:{chosen['c'].option.family}"
    assert selection.objective < selection.local_objective


def test_fork_and_join_are_one_problem():
    """A residual shape: a → (b, c) → d (d reads b at input 0 and c at input 1). The chain
    DP cut this into four chains; the PBQP solves it whole, with a certificate."""
    ops = [(n, gemm_options(64, k, 32)) for n, k in (("a", 16), ("b", 32), ("c", 32), ("d", 32))]
    uses = [("a", "b", 0), ("a", "c", 0), ("b", "d", 0), ("c", "d", 1), ("d", None, 0)]
    chosen, selection = choose(ops, uses)
    assert selection.objective == _brute_force(selection.problem) and selection.gap == 0
    assert selection.objective <= min(selection.local_objective, selection.chain_objective)
    # d's packed input comes from b (a chosen producer): the edge pays the packing, not d
    d = next(n for n in selection.problem.nodes if n.name == "d")
    assert d.costs[0] == gemm_options(64, 32, 32)[0].cycles
