"""Decide facts about symbolic dims: canonical form first, then interval bounds, then Z3
over the symbol ranges; Z3's answers are cached (the same question recurs across nodes,
rules and e-graph iterations).

Every ``prove_*`` answers True only when the fact is proved for all symbol values in
their ranges; ``False`` means "not proved" (false, or unknown, or Z3 timed out).
Symbols missing from ``ranges`` are only known to be non-negative. `decide` answers a
comparison three ways (proved / refuted / unknown) for the e-graph's guards, under the
ranges `using_ranges` makes active (the compiled graph's ``Graph.symbols``).
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Iterator, Mapping
from contextvars import ContextVar
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
    return _proved(lambda enc: enc(a) == enc(b), ranges, (a, b), "==")


def prove_le(a: Dim, b: Dim, ranges: Ranges) -> bool:
    """True when ``a <= b`` for every assignment of the symbols within their ranges."""
    diff = dim_add(a, dim_mul(b, -1))
    if isinstance(diff, int):
        return diff <= 0
    if _upper_is_nonpositive(diff, ranges):
        return True
    if _linear(diff):  # independent symbols: the interval bound is attained, no need for Z3
        return False
    return _proved(lambda enc: enc(a) <= enc(b), ranges, (a, b), "<=")


def prove_lt(a: Dim, b: Dim, ranges: Ranges) -> bool:
    return prove_le(dim_add(a, 1), b, ranges)


def prove_ne(a: Dim, b: Dim, ranges: Ranges) -> bool:
    """True when ``a != b`` for every assignment of the symbols within their ranges."""
    diff = dim_add(a, dim_mul(b, -1))
    if isinstance(diff, int):
        return diff != 0
    low, high = bounds(diff, ranges)
    if (low is not None and low > 0) or (high is not None and high < 0):
        return True
    if _linear(diff) and all(abs(c) == 1 for mono, c in diff.terms if mono):  # ±1 steps: every integer
        return False  # in the interval is attained, 0 among them
    return _proved(lambda enc: enc(a) != enc(b), ranges, (a, b), "!=")


_ACTIVE_RANGES: ContextVar[Ranges | None] = ContextVar("dnnr_dim_ranges", default=None)


@contextlib.contextmanager
def using_ranges(ranges: Ranges) -> Iterator[None]:
    """Make ``ranges`` (symbol -> (low, high)) the ones `decide` assumes."""
    token = _ACTIVE_RANGES.set(dict(ranges))
    try:
        yield
    finally:
        _ACTIVE_RANGES.reset(token)


def active_ranges() -> dict[str, tuple[int, int]]:
    """The ranges `using_ranges` made active (empty outside one)."""
    return dict(_ACTIVE_RANGES.get() or {})


def decide(op: str, a: object, b: object, ranges: Ranges | None = None) -> bool | None:
    """``a op b`` for dims (or tuples of dims, ``==``/``!=`` only): True when proved for every
    assignment in ``ranges`` (default: the active ones), False when refuted for every
    assignment, None when neither is established — a caller must never assume it."""
    ranges = _ACTIVE_RANGES.get() or {} if ranges is None else ranges
    if isinstance(a, tuple) or isinstance(b, tuple):
        if op not in ("==", "!=") or not (isinstance(a, tuple) and isinstance(b, tuple)):
            return None
        if len(a) != len(b):
            return op == "!="
        answers = [decide("==", x, y, ranges) for x, y in zip(a, b, strict=True)]
        equal = True if all(answers) else False if any(x is False for x in answers) else None
        return equal if op == "==" or equal is None else not equal
    if not all(isinstance(v, (int, DimExpr)) and not isinstance(v, bool) for v in (a, b)):
        return None
    x, y = a, b  # type: ignore[assignment]
    if op in (">", ">="):
        x, y, op = y, x, "<" if op == ">" else "<="
    if op == "==":
        return True if prove_eq(x, y, ranges) else False if prove_ne(x, y, ranges) else None
    if op == "!=":
        answer = decide("==", x, y, ranges)
        return None if answer is None else not answer
    if op == "<":
        return True if prove_lt(x, y, ranges) else False if prove_le(y, x, ranges) else None
    if op == "<=":
        return True if prove_le(x, y, ranges) else False if prove_lt(y, x, ranges) else None
    return None


def prove_divisible(a: Dim, divisor: Dim, ranges: Ranges) -> bool:
    """True when ``divisor`` divides ``a`` for every assignment (divisor must be positive)."""
    if isinstance(divisor, int):
        if divisor <= 0:
            return False
        return dim_mod(a, divisor) == 0 or _proved(lambda enc: enc(a) % divisor == 0, ranges, (a, divisor), "%")
    return _proved(lambda enc: z3.And(enc(divisor) > 0, enc(a) % enc(divisor) == 0), ranges, (a, divisor), "%")


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


def _linear(dim: Dim) -> bool:
    """Each term one symbol to the first power: its interval bounds are exact."""
    return isinstance(dim, DimExpr) and all(
        len(mono) <= 1 and all(isinstance(atom, str) and power == 1 for atom, power in mono)
        for mono, _ in dim.terms)


def _upper_is_nonpositive(diff: Dim, ranges: Ranges) -> bool:
    _, high = bounds(diff, ranges)
    return high is not None and high <= 0


_ANSWERS: dict[tuple, bool] = {}  # (question, dims, their symbols' ranges) -> proved
CACHE_LIMIT = 65536


def _proved(claim, ranges: Ranges, dims: tuple[Dim, ...], question: str) -> bool:
    """Z3: no assignment within the ranges falsifies ``claim``. Cached on the question's
    name, its dims and the ranges of the symbols they use."""
    symbols = sorted({s for d in dims if isinstance(d, DimExpr) for s in d.symbols()})
    key = (question, dims, tuple((s, *ranges[s]) if s in ranges else (s,) for s in symbols))
    answer = _ANSWERS.get(key)
    if answer is None:
        answer = _solve(claim, ranges)
        if len(_ANSWERS) >= CACHE_LIMIT:
            _ANSWERS.clear()
        _ANSWERS[key] = answer
    return answer


def cache_size() -> int:
    """How many Z3 answers are cached (tests check that a repeated question hits it)."""
    return len(_ANSWERS)


def _solve(claim, ranges: Ranges) -> bool:
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
