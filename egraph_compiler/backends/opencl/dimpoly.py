"""Integer quantities of a symbolic artefact as polynomials over its dim names.

A symbolic OpenCL artefact (`symbolic.py`) stores every size a launch passes, its
work-item count and its output shapes as a polynomial in the symbolic dims
(``"24*batch*seq + 9"``), valid over one box of the declared ranges. `fit` finds
the polynomial from the exact values at every point of the box and answers None
unless it reproduces each of them exactly; `evaluate` computes it at run time.
Expressions are plain text in ``plan.json``; the run-time reader accepts only
integers, dim names, ``+``, ``-``, ``*``, ``**`` and exact ``/`` (never `eval`).
"""

from __future__ import annotations

import ast
import itertools
from collections.abc import Mapping, Sequence
from fractions import Fraction

import numpy as np

MAX_DEGREE = 2  # per dim: sizes are products of dims; attention's seq*seq is degree 2

Point = tuple[int, ...]


def fit(dims: Sequence[str], points: Sequence[Point], values: Sequence[int]) -> str | None:
    """The polynomial (degree <= `MAX_DEGREE` in each dim) through every
    ``(point, value)``, as text; None when no such polynomial with small rational
    coefficients reproduces every value exactly."""
    if len(set(values)) == 1:
        return str(int(values[0]))
    degrees = [min(MAX_DEGREE, len({p[k] for p in points}) - 1) for k in range(len(dims))]
    monomials = list(itertools.product(*(range(d + 1) for d in degrees)))
    if len(monomials) > len(points):
        return None
    matrix = np.array([[float(np.prod([float(p[k]) ** e[k] for k in range(len(dims))]))
                        for e in monomials] for p in points])
    solution, *_ = np.linalg.lstsq(matrix, np.array(values, dtype=float), rcond=None)
    coefficients = [Fraction(float(c)).limit_denominator(64) for c in solution]
    for point, value in zip(points, values, strict=True):
        if _value(monomials, coefficients, point) != value:
            return None
    return _render(dims, monomials, coefficients)


def _value(monomials: Sequence[tuple[int, ...]], coefficients: Sequence[Fraction],
           point: Point) -> Fraction:
    total = Fraction(0)
    for exps, c in zip(monomials, coefficients, strict=True):
        if c:
            term = c
            for x, e in zip(point, exps, strict=True):
                term *= x ** e
            total += term
    return total


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
