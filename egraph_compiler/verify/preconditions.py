"""When a rule fails: search for the missing guard, as DSL text to paste.

Candidates, simplest first: element facts of one variable (``nonzero(?b)``,
``nonneg(?b)``, ``positive(?b)``), ``same_shape(?a, ?b)``, ``rank(?c) == 0``,
``dim(?c, k) == 1`` (broadcast along a reduced axis), equalities of string
attributes, then conjunctions of two. A candidate must prove the rule; it is
*degenerate* (dropped) when it forces a dim of some left-hand-side operator's
result, or a reduced length, to be 1 (or every such result to be a scalar) where
the original rule did not: such a guard makes the rule trivial ("dim == 1")
rather than correct.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable

import z3

from egraph_compiler.dsl import ast
from egraph_compiler.dsl.format import expr_text
from egraph_compiler.verify.configs import enumerate_configs
from egraph_compiler.verify.fuzz import fuzz
from egraph_compiler.verify.normalize import CanonRule, subpatterns
from egraph_compiler.verify.semantics import OpSemantics


def candidates(canon: CanonRule, sems: dict[str, OpSemantics]) -> list[ast.Expr]:
    names = [v for v in canon.tensor_vars if not v.startswith("#")]
    out: list[ast.Expr] = []
    for kind in ("nonzero", "nonneg", "positive"):
        out += [ast.Call(kind, (ast.Var(v),)) for v in names]
    out += [ast.Call("same_shape", (ast.Var(a), ast.Var(b)))
            for a, b in itertools.combinations(names, 2)]
    out += [ast.BinOp("==", ast.Call("rank", (ast.Var(v),)), ast.Num(0)) for v in names]
    for v in names:
        out += [ast.BinOp("==", ast.Call("dim", (ast.Var(v), ast.Num(k))), ast.Num(1))
                for k in range(3)]
    for p in subpatterns(canon.lhs):
        if isinstance(p, ast.POp):
            builtin = sems[p.op].builtin
            for attr, expr in p.attrs:
                if isinstance(expr, ast.Var) and not expr.name.startswith("_") and builtin:
                    for value in builtin.attr_domain(attr, [0, 0]) or []:
                        if isinstance(value, str):
                            out.append(ast.BinOp("==", expr, ast.Str(value)))
    return out


def _and(a: ast.Expr | None, b: ast.Expr) -> ast.Expr:
    return b if a is None else ast.BinOp("and", a, b)


def search(canon: CanonRule, sems: dict[str, OpSemantics], tier: str,
           prove: Callable[[ast.Expr], bool | None], deadline: float) -> tuple[str, bool]:
    """The first non-degenerate guard that proves the rule, as DSL text, and whether
    the search was complete (every candidate refuted, none left untried)."""
    singles = candidates(canon, sems)
    configs = [c for c, _ in enumerate_configs(canon, sems)]

    def survives_fuzz(extra: ast.Expr) -> bool:
        return fuzz(canon, sems, tier, configs, _and(canon.guard, extra), budget=24) is None

    pairs = (ast.BinOp("and", a, b) for a, b in itertools.combinations(singles, 2))
    complete = True
    for candidate in itertools.chain(singles, itertools.islice(pairs, 150)):
        if time.monotonic() > deadline:
            return "", False
        if not survives_fuzz(candidate):
            continue
        proved = prove(_and(canon.guard, candidate))
        if proved is None:
            complete = False
        if not proved:
            continue
        if degenerate(canon, sems, tier, candidate):
            continue
        return expr_text(candidate), True
    return "", complete


def degenerate(canon: CanonRule, sems: dict[str, OpSemantics], tier: str,
               candidate: ast.Expr) -> bool:
    """True when the rule can match with every operator dim >= 2, but not under
    ``candidate``."""
    return _nontrivial(canon, sems, tier, canon.guard) and not _nontrivial(
        canon, sems, tier, _and(canon.guard, candidate))


def _nontrivial(canon: CanonRule, sems: dict[str, OpSemantics], tier: str,
                guard: ast.Expr | None) -> bool:
    from egraph_compiler.verify.check import _build

    for config, _ in enumerate_configs(canon, sems, guard=guard):
        sides = _build(canon, sems, tier, config, guard)
        if sides is None:
            continue
        sides.enc.value_of(canon.lhs, [z3.Int(f"i{k}") for k in range(len(sides.lhs_dims))])
        dims = [d for p in subpatterns(canon.lhs) if isinstance(p, ast.POp)
                for d in sides.enc.shape_of(p)[0] if not isinstance(d, int)]
        dims += [e for e in sides.enc.extents if not isinstance(e, int)]
        if not dims:
            continue  # all scalars: nothing to rewrite in a layout or reduction sense
        solver = z3.Solver()
        solver.set("timeout", 2000)
        solver.add(*sides.enc.background(), *sides.wf_lhs, sides.guard, *[d >= 2 for d in dims])
        if solver.check() == z3.sat:
            return True
    return False
