"""Decide facts about symbolic dims: canonical form first, then Z3 over the symbol ranges.

Every function answers True only when the fact is proved for all symbol values in
their ranges; ``False`` means "not proved" (false, or unknown, or Z3 timed out).
Symbols missing from ``ranges`` are only known to be non-negative.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from types import ModuleType

from egraph_compiler.ir.dims import Dim, DimExpr, dim_add, dim_mod, dim_mul


class _LazyModule:
    """Imports z3 on first use: most compiles decide every dim fact without it, and
    artefact runners on other machines need not install it."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._module: ModuleType | None = None

    def __getattr__(self, attr: str) -> object:
        if self._module is None:
            self._module = importlib.import_module(self._name)
        return getattr(self._module, attr)


z3 = _LazyModule("z3")


Ranges = Mapping[str, tuple[int, int]]
Z3_TIMEOUT_MS = 2000


def prove_eq(a: Dim, b: Dim, ranges: Ranges) -> bool:
    """True when ``a == b`` for every assignment of the symbols within their ranges."""
    diff = dim_add(a, dim_mul(b, -1))
    if isinstance(diff, int):
        return diff == 0
    return _proved(lambda enc: enc(a) == enc(b), ranges, (a, b))


def prove_le(a: Dim, b: Dim, ranges: Ranges) -> bool:
    """True when ``a <= b`` for every assignment of the symbols within their ranges."""
    diff = dim_add(a, dim_mul(b, -1))
    if isinstance(diff, int):
        return diff <= 0
    if _upper_is_nonpositive(diff, ranges):
        return True
    return _proved(lambda enc: enc(a) <= enc(b), ranges, (a, b))


def prove_lt(a: Dim, b: Dim, ranges: Ranges) -> bool:
    return prove_le(dim_add(a, 1), b, ranges)


def prove_divisible(a: Dim, divisor: Dim, ranges: Ranges) -> bool:
    """True when ``divisor`` divides ``a`` for every assignment (divisor must be positive)."""
    if isinstance(divisor, int):
        if divisor <= 0:
            return False
        return dim_mod(a, divisor) == 0 or _proved(lambda enc: enc(a) % divisor == 0, ranges, (a,))
    return _proved(lambda enc: z3.And(enc(divisor) > 0, enc(a) % enc(divisor) == 0), ranges, (a, divisor))


def bounds(dim: Dim, ranges: Ranges) -> tuple[int | None, int | None]:
    """Interval bounds of a polynomial with non-negative-power monomials (None = unbounded)."""
    if isinstance(dim, int):
        return dim, dim
    low_total: int | None = 0
    high_total: int | None = 0
    for mono, coeff in dim.terms:
        low, high = 1, 1
        for atom, power in mono:
            if not isinstance(atom, str):
                return None, None
            a_low, a_high = ranges.get(atom, (0, None))
            low = low * a_low**power
            high = None if high is None or a_high is None else high * a_high**power
        term_low, term_high = (coeff * low, None if high is None else coeff * high)
        if coeff < 0:
            term_low, term_high = (None if high is None else coeff * high), coeff * low
        low_total = None if low_total is None or term_low is None else low_total + term_low
        high_total = None if high_total is None or term_high is None else high_total + term_high
    return low_total, high_total


def _upper_is_nonpositive(diff: Dim, ranges: Ranges) -> bool:
    _, high = bounds(diff, ranges)
    return high is not None and high <= 0


def _proved(claim, ranges: Ranges, dims: tuple[Dim, ...]) -> bool:
    solver = z3.Solver()
    solver.set("timeout", Z3_TIMEOUT_MS)
    encoder = _Encoder(solver, ranges)
    try:
        solver.add(z3.Not(claim(encoder)))
    except z3.Z3Exception:
        return False
    return solver.check() == z3.unsat


class _Encoder:
    """DimExpr → z3 Int term; floor-div/mod atoms become constrained fresh ints."""

    def __init__(self, solver: z3.Solver, ranges: Ranges) -> None:
        self.solver = solver
        self.ranges = ranges
        self.vars: dict[str, z3.ArithRef] = {}
        self.atoms: dict[tuple, z3.ArithRef] = {}

    def __call__(self, dim: Dim) -> z3.ArithRef:
        if isinstance(dim, int):
            return z3.IntVal(dim)
        total: z3.ArithRef = z3.IntVal(0)
        for mono, coeff in dim.terms:
            term: z3.ArithRef = z3.IntVal(coeff)
            for atom, power in mono:
                base = self.atom(atom)
                for _ in range(power):
                    term = term * base
            total = total + term
        return total

    def atom(self, atom: str | tuple) -> z3.ArithRef:
        if isinstance(atom, str):
            if atom not in self.vars:
                var = z3.Int(atom)
                low, high = self.ranges.get(atom, (0, None))
                self.solver.add(var >= low)
                if high is not None:
                    self.solver.add(var <= high)
                self.vars[atom] = var
            return self.vars[atom]
        if atom not in self.atoms:
            kind, inner, divisor = atom
            value = self(inner) if isinstance(inner, DimExpr) else z3.IntVal(inner)
            quotient = z3.FreshInt("q")
            remainder = z3.FreshInt("r")
            self.solver.add(value == quotient * divisor + remainder, remainder >= 0, remainder < divisor)
            self.atoms[atom] = quotient if kind == "//" else remainder
        return self.atoms[atom]
