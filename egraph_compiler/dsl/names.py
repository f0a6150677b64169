"""Helpers of the checker: "did you mean" suggestions, AST walks, operand counts."""

from __future__ import annotations

import difflib
import os
from collections.abc import Iterable, Iterator

from egraph_compiler.dsl import ast


def edit_distance(a: str, b: str) -> int:
    """Levenshtein distance, counting a swap of neighbours as one edit."""
    rows = [list(range(len(b) + 1))]
    for i, ca in enumerate(a, 1):
        row = [i]
        for j, cb in enumerate(b, 1):
            best = min(rows[-1][j] + 1, row[j - 1] + 1, rows[-1][j - 1] + (ca != cb))
            if i > 1 and j > 1 and ca == b[j - 2] and a[i - 2] == cb:
                best = min(best, rows[-2][j - 2] + 1)
            row.append(best)
        rows.append(row)
    return rows[-1][-1]


def _plausible(name: str, candidate: str) -> bool:
    # difflib alone pairs unrelated words that share letters (Frobnicate ~ Concat).
    common_prefix = len(os.path.commonprefix([name.lower(), candidate.lower()]))
    return common_prefix >= 3 or edit_distance(name, candidate) <= max(2, len(name) // 3)


def suggest(name: str, candidates: Iterable[str], prefix: str = "") -> str:
    """``did you mean X?`` for the closest plausible candidate, or ""."""
    pool = sorted(set(candidates))
    folded = [c for c in pool if c.lower() == name.lower()]
    close = folded or [
        c for c in difflib.get_close_matches(name, pool, n=3, cutoff=0.6) if _plausible(name, c)
    ]
    return f"did you mean {prefix}{close[0]}?" if close else ""


def name_span(span: ast.Span, name: str) -> ast.Span:
    """The span of a name written at the start of ``span`` (an op or a call)."""
    return ast.Span(span.file, span.line, span.col, span.line, span.col + len(name))


def walk_expr(expr: ast.Expr) -> Iterator[ast.Expr]:
    yield expr
    children: tuple[ast.Expr, ...] = ()
    if isinstance(expr, ast.ListLit):
        children = expr.items
    elif isinstance(expr, ast.Call):
        children = expr.args
    elif isinstance(expr, ast.BinOp):
        children = (expr.lhs, expr.rhs)
    elif isinstance(expr, ast.UnOp):
        children = (expr.operand,)
    elif isinstance(expr, ast.Index):
        children = (expr.base, expr.index)
    for child in children:
        yield from walk_expr(child)


def is_literal(expr: ast.Expr) -> bool:
    if isinstance(expr, (ast.Num, ast.Str, ast.Name)):
        return True
    if isinstance(expr, ast.ListLit):
        return all(is_literal(item) for item in expr.items)
    return isinstance(expr, ast.UnOp) and expr.op == "-" and is_literal(expr.operand)


def arity_range(op: ast.OpDecl) -> tuple[int, int | None]:
    """(fewest, most) operands; most is None for a variadic op."""
    required = [i for i, p in enumerate(op.params) if not p.optional and not p.variadic]
    fewest = required[-1] + 1 if required else 0
    most = None if any(p.variadic for p in op.params) else len(op.params)
    return fewest, most


def _operands(n: int) -> str:
    return f"{n} operand" + ("" if n == 1 else "s")


def describe_arity(op: ast.OpDecl) -> str:
    fewest, most = arity_range(op)
    if most is None:
        return f"at least {_operands(fewest)}"
    if fewest == most:
        return _operands(fewest)
    return f"{fewest} to {_operands(most)}"
