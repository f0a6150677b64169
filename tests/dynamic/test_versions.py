"""Issue 15 item 1: a symbolic artefact's versions are generated from the backend's path
conditions (`backends/opencl/versions.py`), one compile per path, not one per shape;
optional specialisations are decided over the dim ranges so they split nothing
(`symint.everywhere`), and a cost-model pick is part of the path (`symint.Choice`)."""

from __future__ import annotations

import itertools
from collections.abc import Mapping

from egraph_compiler.backends.opencl import versions
from egraph_compiler.fusion import index as ix
from egraph_compiler.ir.dims import DimExpr
from egraph_compiler.plan import memory
from egraph_compiler.shapes import prover, symint

ROWS, COLS = DimExpr.symbol("rows"), DimExpr.symbol("cols")
DIMS = ["cols", "rows"]
GRID = list(itertools.product(range(1, 7), range(1, 5)))  # (cols, rows)


def _backend(cols: int, rows: int) -> tuple:
    """A stand-in generator: its code depends on the dims only through comparisons
    (a row-serial threshold, a tile clamped to a short dim) and a float cost pick."""
    serial = rows * cols >= 8
    tile = 4 if cols >= 4 else symint.pinned(cols)
    items = rows * -(-cols // tile)
    cheap = "wide" if 1.5 * int(items) > 4.0 else "narrow"  # floating point: unseen

    def decide(env: Mapping[str, int]) -> str:
        value = symint.expr_of(items)
        value = value.evaluate(dict(env)) if isinstance(value, DimExpr) else int(value)
        return "wide" if 1.5 * value > 4.0 else "narrow"

    symint.note_choice(symint.Choice("anchor", cheap, decide, str(symint.expr_of(items))))
    return serial, tile, cheap


def _code_at(point: tuple[int, int]) -> tuple:
    return _backend(*point)


def test_one_compile_per_path_and_every_region_has_one_code() -> None:
    compiled: list[tuple[int, int]] = []

    def compile_at(point: tuple[int, int]) -> list:
        compiled.append(point)
        with symint.recording() as facts:
            _backend(symint.SymInt(point[0], COLS), symint.SymInt(point[1], ROWS))
        return facts

    regions = versions.Explorer(DIMS, GRID).explore(compile_at)
    covered = [p for r in regions for p in r.points]
    assert sorted(covered) == sorted(GRID)  # every shape in exactly one region
    assert len(compiled) == len(regions) < len(GRID) // 2
    for region in regions:  # the path condition is exact: the same code at every shape
        assert {_code_at(p) for p in region.points} == {_code_at(region.at)}
    codes = {_code_at(p) for p in GRID}
    assert len(regions) <= len(codes) + 2  # about one compile per distinct code
    # the conditions are the atoms that split the ranges, simplified by Z3
    ranges = {"cols": (1, 6), "rows": (1, 4)}
    top = versions.describe(regions[0], ranges)
    assert regions[0].at == (6, 4) and "cols >= 4" in top and "anchor runs wide" in top


def test_a_comparison_true_everywhere_splits_nothing() -> None:
    def compile_at(point: tuple[int, int]) -> list:
        with symint.recording() as facts:
            cols = symint.SymInt(point[0], COLS)
            assert cols >= 1 and cols <= 6  # noqa: PT018 - two recorded comparisons
        return facts

    assert len(versions.Explorer(DIMS, GRID).explore(compile_at)) == 1


def test_optional_simplifications_are_decided_over_the_ranges() -> None:
    cols = symint.SymInt(4, COLS)  # 4 here, 1..6 over the ranges
    with prover.using_ranges({"cols": (1, 6), "rows": (1, 4)}), symint.recording() as facts:
        assert symint.everywhere(">=", cols, 1)
        assert not symint.everywhere("<", cols - 1, 4)  # true here, not at cols = 6
        # so `i % cols` keeps its modulo although i < cols at this shape
        i = ix.IVar("i", 0, cols - 1)
        assert isinstance(ix.mod(i, cols), ix.IMod) or ix.mod(i, cols) == i
        assert ix.mod(ix.IVar("j", 0, 2), 4) == ix.IVar("j", 0, 2)  # plain: simplified
        assert ix.delinearize(ix.IVar("g", 0, cols - 1), (cols,))[0] != 0  # a dim of 1 only if always 1
    assert facts == []  # decided by the prover: no part of the path
    assert symint.everywhere("<", 3, 4) and not symint.everywhere("<", 5, 4)  # plain ints


def test_term_order_is_the_same_at_every_shape_of_a_symbolic_build() -> None:
    texts = set()
    for value in (9, 80):  # "80" < "9" as text: the order must not follow the digits
        size = symint.SymInt(value, COLS)
        with prover.using_ranges({"cols": (1, 100)}):
            expr = ix.add(ix.IVar("a", 0, size - 1), ix.IVar("b", 0, size * size - 1))
        texts.add(ix.render(expr))
    assert len(texts) == 1


def test_launch_order_is_chosen_once() -> None:
    calls = []

    class Scheduler(memory._Scheduler):
        def schedule(self, ids: list[int]) -> list[int]:
            calls.append(ids)
            return super().schedule(ids)

    from tests.plan.test_memory import _plan

    plan = _plan("residual", False).fusion
    original = memory._Scheduler
    memory._Scheduler = Scheduler  # type: ignore[misc]
    try:
        with memory.orders_chosen_once():
            first = memory.plan_arena(plan)
            second = memory.plan_arena(plan)
        memory.plan_arena(plan)
    finally:
        memory._Scheduler = original  # type: ignore[misc]
    assert first.order == second.order and len(calls) == 2  # once inside, once after


def test_fusion_structure_compares_shapes_by_proof_not_by_value() -> None:
    """`structure.forward_index` (an elementwise edge is one-to-one when the shapes are
    equal): a [batch, 4] operand against a [1, 4] result at batch = 1 is equal here
    but not at every shape of batch = 1..3, so it is not one-to-one (issue 15 item 5)."""
    from egraph_compiler.fusion.structure import forward_index
    from egraph_compiler.ir.graph import Node

    batch = DimExpr.symbol("batch")

    class View:
        def __init__(self, shapes: dict) -> None:
            self.shapes = shapes

        def shape(self, name: str) -> tuple:
            return self.shapes[name]

    node = Node("Relu", ("x",), ("y",))
    index = (ix.IVar("i0", 0, 0), ix.IVar("i1", 0, 3))
    one = symint.SymInt(1, batch)
    with prover.using_ranges({"batch": (1, 3)}):
        assert forward_index(View({"x": (one, 4), "y": (1, 4)}), node, "x", index) is None
        assert forward_index(View({"x": (one, 4), "y": (one, 4)}), node, "x", index) == index
    with prover.using_ranges({"batch": (1, 1)}):  # batch is 1 at every shape
        assert forward_index(View({"x": (one, 4), "y": (1, 4)}), node, "x", index) == index
