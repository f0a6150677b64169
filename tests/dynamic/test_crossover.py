"""Issue 15 item 4: crossovers by Z3 over the cost model's own expressions
(`backends/opencl/crossover.py`), checked against the cost model at every value."""

from __future__ import annotations

from egraph_compiler.backends.opencl import cost, crossover
from egraph_compiler.ir.dims import DimExpr
from egraph_compiler.shapes.symint import SymInt, recording

SEQ = DimExpr.symbol("seq")
GPU = cost.DEVICES["gpu"]


def _traced_at(seq: int) -> crossover.TracedCosts | None:
    """A 768x768 projection of ``seq`` rows, as `kernels.anchor_shape` builds it: the
    direct kernel's row tile clamps to the rows, the GEMV side exists at one row."""
    rows = SymInt(seq, SEQ)
    with recording() as branches:
        tile = max(1, min(4, rows))
        shape = ({"m": rows, "n": 768, "k": 768, "batch": 1}, -(-rows // tile) * 192, True,
                 "m" if rows == 1 else None, False, 0)
    return crossover.trace_costs(GPU, shape, branches)


def test_solved_intervals_pick_the_cheapest_option_at_every_value() -> None:
    intervals = crossover.solve_intervals(_traced_at, "seq", 1, 20)
    assert intervals is not None and len(intervals) >= 2  # GEMV at one row, tiled beyond
    assert [(i.low, i.high) for i in intervals][0] == (1, 1) and "gemv" in intervals[0].variant
    assert intervals[-1].high == 20
    for interval in intervals:
        for seq in range(interval.low, interval.high + 1):
            traced = _traced_at(seq)
            assert traced is not None
            mine = traced.values[traced.labels.index(interval.variant)]
            assert mine <= min(traced.values) * (1 + 1e-12), seq


def test_a_variant_not_cheapest_everywhere_gets_the_crossover_shape() -> None:
    traced = _traced_at(2)
    assert traced is not None
    best = crossover.cheapest(traced)
    assert crossover.decide(traced, best, {"seq": (2, 3)}).proved
    worst = max(traced.labels, key=lambda label: traced.values[traced.labels.index(label)])
    verdict = crossover.decide(traced, worst, {"seq": (2, 3)})
    assert not verdict.proved and "crossover" in verdict.note and "seq=" in verdict.note
    # beyond the region its expressions were traced in, nothing is claimed
    assert not crossover.decide(traced, best, {"seq": (1, 3)}).proved
