"""Guard arithmetic that stays bounded, and the check that refuses constants that overflow.

A guard such as ``2 ** 2 ** 2 ** 2 ** 2 ** 2 > 1`` grew to 3 GB in Python's big
integers, and ``10 ** 10 ** 8`` ran past 180 s. Guards compute with dims, ranks and
attribute values, all of which fit 64-bit integers; so:

- `check_bounds` (``dnnr check``, every load) folds each guard's constant
  sub-expressions and reports one whose value leaves the signed 64-bit range, or a
  power whose result would, without computing it;
- `bounded_pow` is the ``**`` the guard evaluator uses at saturation time: a result
  outside that range (or a float overflow) is a `ValueError`, which makes the guard
  false, as for any guard the e-graph cannot decide.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from egraph_compiler.dsl import ast
from egraph_compiler.dsl.diagnostics import Diagnostic, MisuseError, SourceLines

INT64_MAX = 2**63 - 1
_FOLDABLE = ("+", "-", "*", "//", "%", "**")


def bounded_pow(base: object, exponent: object) -> object:
    """``base ** exponent``, refused (`ValueError`) when the result leaves int64 or
    overflows a float; never computed when it would."""
    if isinstance(base, bool) or isinstance(exponent, bool):
        raise ValueError("** of a boolean")
    if isinstance(base, int) and isinstance(exponent, int):
        if exponent >= 0 and abs(base) > 1 and exponent * math.log2(abs(base)) > 63:
            raise ValueError(f"{base} ** {exponent} overflows 64-bit integers")
        result = base ** exponent
        if isinstance(result, int) and abs(result) > INT64_MAX:
            raise ValueError(f"{base} ** {exponent} overflows 64-bit integers")
        return result
    try:
        return base ** exponent  # type: ignore[operator]
    except OverflowError:
        raise ValueError(f"{base} ** {exponent} overflows") from None


def check_bounds(files: Sequence[object], lines: SourceLines) -> list[Diagnostic]:
    """A diagnostic for every guard constant whose value leaves the signed 64-bit range."""
    diagnostics: list[Diagnostic] = []
    for parsed in files:
        for item in parsed.source.items:  # type: ignore[attr-defined]
            if isinstance(item, ast.Rule) and item.guard is not None:
                _fold(item.guard, item.name, lines, diagnostics)
    return diagnostics


def _fold(expr: ast.Expr, rule: str, lines: SourceLines, out: list[Diagnostic]) -> int | float | None:
    """The constant value of ``expr`` when it has one (None otherwise); reports an
    overflow once, at the smallest sub-expression that overflows."""
    values = [_fold(sub, rule, lines, out) for sub in ast.sub_expressions(expr)]
    if isinstance(expr, ast.Num):
        value = expr.value
    elif isinstance(expr, ast.UnOp) and expr.op == "-" and values[0] is not None:
        value = -values[0]
    elif isinstance(expr, ast.BinOp) and expr.op in _FOLDABLE and None not in values:
        lhs, rhs = values
        try:
            if expr.op == "**":
                value = bounded_pow(lhs, rhs)  # type: ignore[assignment]
            else:
                value = {"+": lambda: lhs + rhs, "-": lambda: lhs - rhs, "*": lambda: lhs * rhs,  # type: ignore[operator]
                         "//": lambda: lhs // rhs, "%": lambda: lhs % rhs}[expr.op]()  # type: ignore[operator]
        except ValueError as error:
            out.append(_overflow(expr, rule, str(error), lines))
            return None
        except (ZeroDivisionError, OverflowError):
            return None
    else:
        return None
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > INT64_MAX:
        out.append(_overflow(expr, rule, f"{value:.3e} overflows 64-bit integers" if abs(value) < 10**300
                             else "the value overflows 64-bit integers", lines))
        return None
    return value


def _overflow(expr: ast.Expr, rule: str, why: str, lines: SourceLines) -> Diagnostic:
    return lines.diagnostic(MisuseError, f"rule '{rule}': guard constant out of range: {why}",
                            expr.span, "guards compute with 64-bit integers (dims, ranks, attributes)")
