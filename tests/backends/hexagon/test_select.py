"""Instruction/layout choice: the chain DP (GCD² eq. 4.2) is optimal for eq. 4.1."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from egraph_compiler.backends.hexagon.select import Option, choose, choose_chain, gemm_options

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


def test_choose_reports_every_operator():
    ops = [("a", gemm_options(100, 27, 16)), ("b", gemm_options(100, 16, 16)), ("c", gemm_options(100, 16, 3))]
    chosen = choose(ops, [("a", "b"), ("b", "c")])
    assert set(chosen) == {"a", "b", "c"}
    for name, options in ops:
        assert chosen[name].option.cycles == min(o.cycles for o in options)
        assert "chain of 3" in chosen[name].reason
