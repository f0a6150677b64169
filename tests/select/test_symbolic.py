"""Option costs over symbolic dims: a dominating option is proved over the declared range,
or the block is a multi-version candidate; checked against every value of the range."""

from __future__ import annotations

import pytest

from egraph_compiler.backends.hexagon.select import FAMILIES, family_dominance, gemm_options
from egraph_compiler.ir.dims import DimExpr
from egraph_compiler.select.symbolic import dominance

S = DimExpr.symbol("S")
M = DimExpr.symbol("M")


@pytest.mark.parametrize("low, high, best", [(1, 20, None), (10, 20, 1), (1, 9, 0)])
def test_linear_costs(low: int, high: int, best: int | None) -> None:
    result = dominance("block", ["a", "b"], [S * 2, S + 10], {"S": (low, high)})
    assert result.best == best and result.multi_version == (best is None)
    if best is None:
        assert result.candidates == (0, 1) and "multi-version candidate" in result.reason


def _argmins(m: int, k: int, n: int) -> set[str]:
    costs = {o.family: o.cycles + o.pack for o in gemm_options(m, k, n) if o.writes == "nhwc"}
    low = min(costs.values())
    return {f for f, c in costs.items() if c == low}


@pytest.mark.parametrize("low, high", [(96, 128), (1, 32), (1, 300)])
def test_hexagon_gemm_family_over_a_symbolic_row_count(low: int, high: int) -> None:
    """The symbolic cost is the static cost model's (same function) at every M; the
    verdict agrees with evaluating each M of the range."""
    result = family_dominance("gemm", M, 64, 32, {"M": (low, high)})
    winners = [_argmins(m, 64, 32) for m in range(low, high + 1)]
    if result.best is not None:
        assert all(FAMILIES[result.best] in w for w in winners)
    else:
        assert not set.intersection(*winners)  # really no single best family
        assert set.union(*winners) <= {FAMILIES[i] for i in result.candidates}
