"""The memory plan over symbolic sizes (issue 15 item 5).

The symbolic OpenCL build plans memory at a shape whose dims are `shapes.symint.SymInt`s,
so every arena tensor's aligned size and every offset the greedy placement computes
(sums of sizes, `memory._assign`) arrive as dim expressions. `prove_placement` decides
whether those offsets are a valid placement for EVERY shape of a box of dim ranges:

- no two tensors whose lifetimes overlap (under the plan's order, the same at every
  shape of a version) share a byte: for each such pair the shapes prover
  (`shapes.prover.prove_le`: canonical form, interval bounds, then Z3 over the ranges)
  proves ``end(a) <= offset(b)`` or ``end(b) <= offset(a)``;
- every offset is proved non-negative;
- the arena the box needs is the largest end at the box's upper corner, with a proof
  that no end is larger anywhere in the box (``end <= its corner value``: monotone).

A placement the prover cannot establish is refused (None), never assumed: the caller
then uses a placement it checked another way (`symbolic._Partition`: the upper
corner's offsets, where no tensor outgrows its corner size).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from egraph_compiler.ir.dims import Dim, DimExpr, dim_add
from egraph_compiler.shapes.prover import prove_le


@dataclass(frozen=True)
class SymbolicPlacement:
    offsets: dict[str, Dim]  # arena tensor -> byte offset over the dims
    sizes: dict[str, Dim]  # arena tensor -> aligned byte size over the dims
    arena_bytes: int  # the box's peak (at its upper corner, proved the maximum)
    proofs: int  # disjointness and bound facts the prover established


def prove_placement(offsets: Mapping[str, Dim], sizes: Mapping[str, Dim],
                    spans: Mapping[str, tuple[int, int]],
                    box: Mapping[str, tuple[int, int]]) -> SymbolicPlacement | None:
    """``offsets`` proved a valid placement of ``sizes`` at every shape of ``box``
    (dim -> inclusive range), or None when some fact is not proved."""
    proofs = 0
    names = sorted(offsets)
    ends = {n: dim_add(offsets[n], sizes[n]) for n in names}
    for k, a in enumerate(names):
        if not prove_le(0, offsets[a], box):
            return None
        for b in names[k + 1:]:
            (a0, a1), (b0, b1) = spans[a], spans[b]
            if a1 < b0 or b1 < a0:
                continue  # never live together: they may share bytes
            if not (prove_le(ends[a], offsets[b], box) or prove_le(ends[b], offsets[a], box)):
                return None
            proofs += 1
    corner = {d: hi for d, (_, hi) in box.items()}
    peak = 0
    for name in names:
        at_corner = _value(ends[name], corner)
        if not prove_le(ends[name], at_corner, box):  # monotone: the corner is the peak
            return None
        peak = max(peak, at_corner)
        proofs += 2
    return SymbolicPlacement(dict(offsets), dict(sizes), peak, proofs)


def _value(dim: Dim, env: dict[str, int]) -> int:
    return dim.evaluate(env) if isinstance(dim, DimExpr) else int(dim)
