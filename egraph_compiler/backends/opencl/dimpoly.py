"""Integer quantities of a symbolic artefact as polynomials over its dim names.

A symbolic OpenCL artefact (`symbolic.py`) stores every size a launch passes, its
work-item count and its output shapes as a polynomial in the symbolic dims
(``"24*batch*seq + 9"``), valid over one box of the declared ranges. `fit` finds
the polynomial from the exact values at every point of the box and answers None
unless it reproduces each of them exactly; `evaluate` computes it at run time.
Expressions are plain text in ``plan.json``; the run-time reader accepts only
integers, dim names, ``+``, ``-``, ``*``, ``**``, exact ``/``, ``cdiv``, ``fdiv``,
``fmod`` and a divisor's ``magic_m``/``magic_s`` (`magicdiv.magic_argument`; never `eval`). Since the symbolic build DERIVES most quantities from the dims
(`shapes.symint`, written by `render`), `fit` is the fallback for the rest (a size the
generator computed through ``int()`` or NumPy) and the cross-check of nothing else.
"""

from __future__ import annotations

import ast
import itertools
from collections.abc import Mapping, Sequence
from fractions import Fraction

import numpy as np

from egraph_compiler.backends.opencl.magicdiv import magic_argument
from egraph_compiler.ir.dims import Dim

MAX_DEGREE = 2  # per dim: sizes are products of dims; attention's seq*seq is degree 2

Point = tuple[int, ...]


TILES = (2, 4, 8, 16, 32, 64, 128)  # tile sizes whose ceil-division a size may count


def fit(dims: Sequence[str], points: Sequence[Point], values: Sequence[int]) -> str | None:
    """An expression through every ``(point, value)``, as text: a polynomial (degree
    <= `MAX_DEGREE` in each dim), else one that may also count tiles (``cdiv(seq, 4)``,
    ``cdiv(batch*seq, 4)``, for one tile size); None when none with small rational
    coefficients reproduces every value exactly. The caller evaluates it only at
    these points' box, so exact at every point is correct everywhere it is used."""
    if len(set(values)) == 1:
        return str(int(values[0]))
    found = _fit(dims, [(name, {name: 1}, None) for name in dims], points, values)
    if found is not None:
        return found
    for tile in TILES:
        terms = [(name, {name: 1}, None) for name in dims]
        terms += [(f"cdiv({name}, {tile})", {name: 1}, tile) for name in dims]
        if len(dims) > 1:
            terms.append((f"cdiv({'*'.join(dims)}, {tile})", dict.fromkeys(dims, 1), tile))
        found = _fit(dims, terms, points, values)
        if found is not None:
            return found
    return None


def _term_value(term: tuple[str, dict[str, int], int | None], dims: Sequence[str],
                point: Point) -> int:
    _, powers, tile = term
    value = 1
    for name, e in powers.items():
        value *= point[list(dims).index(name)] ** e
    return value if tile is None else -(-value // tile)


def _fit(dims: Sequence[str], terms: list[tuple[str, dict[str, int], int | None]],
         points: Sequence[Point], values: Sequence[int]) -> str | None:
    varying = [len({p[k] for p in points}) > 1 for k in range(len(dims))]
    terms = [t for t in terms if all(varying[list(dims).index(n)] for n in t[1])]
    kept, columns = [], []
    for t in terms:  # a term constant over the box, or equal to another, only adds noise
        column = [_term_value(t, dims, p) for p in points]
        if len(set(column)) > 1 and column not in columns:
            kept.append(t)
            columns.append(column)
    terms = kept
    every = []
    for exps in itertools.product(*(range(MAX_DEGREE + 1) for _ in terms)):
        per_dim = dict.fromkeys(dims, 0)
        for t, e in zip(terms, exps, strict=True):
            for name, power in t[1].items():
                per_dim[name] += power * e
        if sum(exps) <= MAX_DEGREE + 1 and all(v <= MAX_DEGREE for v in per_dim.values()):
            every.append(exps)
    for degree in range(1, MAX_DEGREE + 2):  # the fewest terms first: least ill-conditioned
        monomials = [m for m in every if sum(m) <= degree]
        if len(monomials) > len(points):
            return None
        matrix = [[_product(columns, m, i) for m in monomials] for i in range(len(points))]
        solution, *_ = np.linalg.lstsq(np.array(matrix, dtype=float),
                                       np.array(values, dtype=float), rcond=None)
        coefficients = [Fraction(float(c)).limit_denominator(64) for c in solution]
        if all(sum((c * x for c, x in zip(coefficients, row, strict=True) if c), Fraction(0)) == value
               for row, value in zip(matrix, values, strict=True)):
            return _render([t[0] for t in terms], monomials, coefficients)
    return None


def _product(columns: list[list[int]], exps: tuple[int, ...], row: int) -> int:
    value = 1
    for column, e in zip(columns, exps, strict=True):
        value *= column[row] ** e
    return value


def _render(dims: Sequence[str], monomials: Sequence[tuple[int, ...]],
            coefficients: Sequence[Fraction]) -> str:
    denominator = int(np.lcm.reduce([c.denominator for c in coefficients])) if coefficients else 1
    terms = []
    for exps, c in sorted(zip(monomials, coefficients, strict=True), key=lambda t: (-sum(t[0]), t[0])):
        numerator = int(c * denominator)
        if not numerator:
            continue
        factors = [name if e == 1 else f"{name}**{e}" for name, e in zip(dims, exps, strict=True) if e]
        if not factors:
            terms.append(str(numerator))
        elif numerator == 1:
            terms.append("*".join(factors))
        elif numerator == -1:
            terms.append("-" + "*".join(factors))
        else:
            terms.append(f"{numerator}*" + "*".join(factors))
    text = " + ".join(terms).replace("+ -", "- ") or "0"
    return text if denominator == 1 else f"({text}) / {denominator}"


def render(dim: Dim) -> str:
    """A dim expression derived by the symbolic build (`shapes.symint`) as text that
    `evaluate` reads: floor division and remainder by a constant are ``fdiv(x, d)``
    and ``fmod(x, d)``."""
    if isinstance(dim, int):
        return str(int(dim))
    terms = []
    for mono, coeff in dim.terms:
        factors = []
        for atom, power in mono:
            if isinstance(atom, str):
                text = atom
            else:
                kind, inner, divisor = atom
                text = f"{'fdiv' if kind == '//' else 'fmod'}({render(inner)}, {divisor})"
            factors.append(text if power == 1 else f"{text}**{power}")
        body = "*".join(factors)
        terms.append(str(coeff) if not body else body if coeff == 1 else
                     f"-{body}" if coeff == -1 else f"{coeff}*{body}")
    return (" + ".join(terms).replace("+ -", "- ")) or "0"


def evaluate(expression: str, dims: Mapping[str, int]) -> int:
    """``expression`` (as `fit` writes it) at ``dims``; ValueError when the result is
    not an integer or the text holds anything else."""
    value = _eval(ast.parse(expression, mode="eval").body, dims)
    if value.denominator != 1:
        raise ValueError(f"size expression {expression!r} is not an integer at {dict(dims)}")
    return int(value)


def _eval(node: ast.AST, dims: Mapping[str, int]) -> Fraction:
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return Fraction(node.value)
    if isinstance(node, ast.Name) and node.id in dims:
        return Fraction(dims[node.id])
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id in ("cdiv", "fdiv", "fmod") and len(node.args) == 2
            and not node.keywords):
        num, den = (_eval(a, dims) for a in node.args)
        if den > 0 and num.denominator == 1 and den.denominator == 1:
            return Fraction({"cdiv": -(-num // den), "fdiv": num // den,
                             "fmod": num % den}[node.func.id])
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id in ("magic_m", "magic_s") and len(node.args) == 1
            and not node.keywords):
        divisor = _eval(node.args[0], dims)
        if divisor.denominator == 1 and divisor >= 0:
            return Fraction(magic_argument(int(divisor), node.func.id[-1]))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_eval(node.operand, dims)
    if isinstance(node, ast.BinOp):
        left, right = _eval(node.left, dims), _eval(node.right, dims)
        if isinstance(node.op, ast.Add):
            return left + right
        if isinstance(node.op, ast.Sub):
            return left - right
        if isinstance(node.op, ast.Mult):
            return left * right
        if isinstance(node.op, ast.Div) and right:
            return left / right
        if isinstance(node.op, ast.Pow) and right.denominator == 1 and 0 <= right <= 8:
            return left ** int(right)
    raise ValueError(f"not a size expression: {ast.unparse(node)!r}")
