"""Dim arithmetic the shape rules need beyond `ir.dims`: exact division, products, broadcasting."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from egraph_compiler.ir.dims import Dim, DimExpr, dim_add, dim_floordiv, dim_mul
from egraph_compiler.ir.errors import ModelError
from egraph_compiler.shapes.prover import prove_eq, prove_le

Ranges = Mapping[str, tuple[int, int]]


def product(dims: Sequence[Dim]) -> Dim:
    total: Dim = 1
    for dim in dims:
        total = dim_mul(total, dim)
    return total


def _mono_div(mono: tuple, by: tuple) -> tuple | None:
    powers = dict(mono)
    for atom, power in by:
        if powers.get(atom, 0) < power:
            return None
        powers[atom] -= power
    return tuple(sorted(((a, p) for a, p in powers.items() if p), key=lambda ap: repr(ap[0])))


def exact_div(num: Dim, den: Dim) -> Dim | None:
    """``num / den`` when it is an exact polynomial quotient, else None."""
    if den == 0:
        return None
    if isinstance(den, int):
        if isinstance(num, int):
            return num // den if num % den == 0 else None
        if all(c % den == 0 for _, c in num.terms):
            return dim_floordiv(num, den) if den > 0 else dim_mul(dim_floordiv(num, -den), -1)
        return None
    if isinstance(num, int):
        return None
    # Polynomial division: try each numerator term against the denominator's first term.
    lead_mono, lead_coeff = den.terms[0]
    for mono, coeff in num.terms:
        quotient_mono = _mono_div(mono, lead_mono)
        if quotient_mono is None or coeff % lead_coeff:
            continue
        candidate = DimExpr._make({quotient_mono: coeff // lead_coeff})
        if dim_mul(candidate, den) == num:
            return candidate
    return None


def cancel_div(num_factors: Sequence[Dim], den_factors: Sequence[Dim]) -> Dim | None:
    """product(num) / product(den), cancelling equal factors first (keeps quotients exact)."""
    remaining = list(num_factors)
    leftover: list[Dim] = []
    for factor in den_factors:
        if factor in remaining:
            remaining.remove(factor)
        else:
            leftover.append(factor)
    return exact_div(product(remaining), product(leftover))


def ceil_div(num: Dim, den: int) -> Dim:
    return dim_floordiv(dim_add(num, den - 1), den)


def broadcast(shapes: Sequence[tuple[Dim, ...]], ranges: Ranges, fresh: Callable[[], Dim], where: str,
              *, assume_valid: bool = True) -> tuple[Dim, ...]:
    """Multidirectional (NumPy) broadcasting of symbolic shapes.

    Two dims agree when equal or one is 1. A symbolic dim against an int n > 1 gives n
    (the model is only valid if the symbol is 1 or n, and both give n). Two different
    symbols give a fresh symbol unless one is proved equal or provably > 1.
    ``assume_valid=False`` (shapes not known to broadcast, e.g. a term a rewrite built)
    trusts only equal dims and 1s: any other pair asks ``fresh``.
    """
    rank = max((len(s) for s in shapes), default=0)
    out: list[Dim] = []
    for axis in range(rank):
        dims = [s[len(s) - rank + axis] for s in shapes if len(s) - rank + axis >= 0]
        result: Dim = 1
        for dim in dims:
            result = _broadcast_dim(result, dim, ranges, fresh, where, assume_valid)
        out.append(result)
    return tuple(out)


def _broadcast_dim(a: Dim, b: Dim, ranges: Ranges, fresh: Callable[[], Dim], where: str, assume_valid: bool) -> Dim:
    if a == b or b == 1:
        return a
    if a == 1:
        return b
    if isinstance(a, int) and isinstance(b, int):
        raise ModelError(f"{where}: cannot broadcast dims {a} and {b}")
    if not assume_valid:
        return fresh()
    if isinstance(b, int):
        return b
    if isinstance(a, int):
        return a
    if prove_eq(a, b, ranges):
        return a
    if prove_le(2, a, ranges):
        return a
    if prove_le(2, b, ranges):
        return b
    return fresh()


def normalize_axis(axis: int, rank: int, where: str) -> int:
    if not -rank <= axis < max(rank, 1):
        raise ModelError(f"{where}: axis {axis} is out of range for rank {rank}")
    return axis + rank if axis < 0 else axis
