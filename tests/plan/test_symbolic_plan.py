"""Issue 15 item 5: a memory plan over symbolic sizes, proved on a box of dim ranges."""

from __future__ import annotations

from egraph_compiler.ir.dims import DimExpr
from egraph_compiler.plan.symbolic import prove_placement

S = DimExpr.symbol("seq")
BOX = {"seq": (1, 64)}


def test_sums_of_sizes_are_a_proved_placement_and_the_corner_is_the_peak() -> None:
    sizes = {"a": S * 128, "b": S * S * 4, "c": S * 128}
    offsets = {"a": 0, "b": S * 128, "c": 0}  # c reuses a's bytes: a is dead by then
    spans = {"a": (0, 1), "b": (1, 2), "c": (2, 3)}
    placed = prove_placement(offsets, sizes, spans, BOX)
    assert placed is not None and placed.arena_bytes == 64 * 128 + 64 * 64 * 4


def test_an_overlap_at_some_shape_is_refused() -> None:
    sizes = {"a": S * 128, "b": S * 4}
    # b placed after a's bytes only while 128*seq <= 4096, i.e. seq <= 32
    offsets = {"a": 0, "b": 4096}
    assert prove_placement(offsets, sizes, {"a": (0, 1), "b": (1, 2)}, BOX) is None
    assert prove_placement(offsets, sizes, {"a": (0, 1), "b": (1, 2)}, {"seq": (1, 32)})


def test_an_end_larger_inside_the_box_than_at_its_corner_is_refused() -> None:
    sizes = {"a": (S * -4) + 512}  # shrinks as seq grows: the corner is not the peak
    assert prove_placement({"a": 0}, sizes, {"a": (0, 0)}, BOX) is None
