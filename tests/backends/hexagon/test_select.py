"""Instruction/layout choice: the chain DP (GCD² eq. 4.2) is optimal for eq. 4.1."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from egraph_compiler.backends.hexagon.select import (
    INFEASIBLE,
    Option,
    chain_cost,
    choose,
    choose_chain,
    choose_greedy,
    gemm_options,
)

FAMILIES = ("vrmpy", "vmpa", "vmpy")


def _tc(a: Option, b: Option) -> int:
    # A layout change costs more between families whose panels differ more.
    return 0 if a.family == b.family else 37 * abs(FAMILIES.index(a.family) - FAMILIES.index(b.family))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.integers(0, 100), min_size=3, max_size=3), min_size=1, max_size=6))
def test_chain_dp_matches_brute_force(costs):
    options = [[Option(f, c, "") for f, c in zip(FAMILIES, row, strict=True)] for row in costs]

    def total(picks):
        return sum(options[i][p].cycles for i, p in enumerate(picks)) + sum(
            _tc(options[i - 1][picks[i - 1]], options[i][picks[i]]) for i in range(1, len(picks)))

    best = min(total(p) for p in itertools.product(range(3), repeat=len(options)))
    assert total(choose_chain(options, _tc)) == best


def test_padding_shows_in_the_cost_model():
    # 33 rows: one row past a 32-row panel costs vrmpy a whole extra panel, not vmpy (128 rows).
    by_family = {o.family: o for o in gemm_options(33, 64, 8)}
    assert "padding" in by_family["vrmpy"].detail
    per_row = {f: by_family[f].cycles for f in FAMILIES}
    exact = {o.family: o.cycles for o in gemm_options(32, 64, 8)}
    assert per_row["vrmpy"] - exact["vrmpy"] > per_row["vmpy"] - exact["vmpy"]


def _brute_force(options):
    return min(chain_cost(options, list(p)) for p in itertools.product(*(range(len(o)) for o in options)))


def test_choose_reports_every_operator():
    ops = [("a", gemm_options(100, 27, 16)), ("b", gemm_options(100, 16, 16)), ("c", gemm_options(100, 16, 3))]
    chosen = choose(ops, [("a", "b"), ("b", "c")])
    assert set(chosen) == {"a", "b", "c"}
    options = [o for _, o in ops]
    picks = [options[i].index(chosen[name].option) for i, (name, _) in enumerate(ops)]
    assert chain_cost(options, picks) == _brute_force(options)
    for name, _ in ops:
        assert "chain of 3" in chosen[name].reason and "vrmpy=" in chosen[name].reason


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 300), st.lists(st.integers(1, 200), min_size=3, max_size=5))
def test_layout_aware_dp_is_optimal_and_never_worse_than_greedy(m, widths):
    """Chains of 1×1 GEMMs (one M, K of each = N of the previous) whose producers may
    write their consumer's packed layout: the DP's total (operators + layout
    conversions, padding included) is the brute-force minimum."""
    options = []
    for i, (k, n) in enumerate(zip(widths, widths[1:], strict=False)):
        consumer = (m, n, widths[i + 2]) if i + 2 < len(widths) else None
        options.append(gemm_options(m, k, n, packed_consumer=consumer))
    dp = chain_cost(options, choose_chain(options))
    assert dp == _brute_force(options) < INFEASIBLE
    assert dp <= chain_cost(options, choose_greedy(options))


def test_dp_beats_greedy_by_agreeing_on_layouts():
    """MatMul 100×64×48 then a 1×1 MatMul 100×48×40: greedy takes the cheapest producer
    alone (writing NHWC) and the consumer then packs its input; the DP has the producer
    write the consumer's panels instead, and picks a different option for it."""
    options = [gemm_options(100, 64, 48, packed_consumer=(100, 48, 40)), gemm_options(100, 48, 40)]
    dp, greedy = choose_chain(options), choose_greedy(options)
    assert options[0][greedy[0]].writes == "nhwc"
    assert options[0][dp[0]].writes == f"packed:{options[1][dp[1]].family}"
    assert chain_cost(options, dp) < chain_cost(options, greedy)
    chosen = choose([("p", options[0]), ("c", options[1])], [("p", "c")])
    assert "greedy" in chosen["p"].reason and chosen["p"].option == options[0][dp[0]]
