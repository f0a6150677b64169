"""The finite part of a rule's meaning, enumerated: a rank for each tensor variable
(0..RANK_LIMIT, or to WIDE_RANK_LIMIT: `dsl.normalize.rank_limit`) and a value for each
attribute variable bound to axes or flags. Dims, element values and float attributes
stay symbolic, and so does a Transpose's perm from rank 3 on (one symbolic permutation
per rank, `perm.py`); below that its perms are enumerated (at most 2, and the absent
``[]``), which is exhaustive and cheaper at those ranks.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator
from typing import Any

import z3

from egraph_compiler.dsl import ast
from egraph_compiler.dsl.names import walk_expr
from egraph_compiler.dsl.normalize import (
    MAX_RANK_COMBINATIONS,
    RANK_LIMIT,
    pinned_ranks,
    rank_sensitive_vars,
)
from egraph_compiler.verify import evalexpr
from egraph_compiler.verify.encode import (
    SYMBOLIC_LIST,
    Config,
    Illformed,
    Unsupported,
    target_length,
)
from egraph_compiler.verify.normalize import CanonRule, subpatterns
from egraph_compiler.verify.semantics import OpSemantics

RANKS = tuple(range(RANK_LIMIT + 1))


class _RankFacts:
    """What ranks and enumerated attributes alone say: dims are placeholders (so list
    lengths such as ``len(flatten_shape(shape(?x), 1))`` are known), element facts
    are not known."""

    def __init__(self, ranks: dict[str, int], attrs: dict[str, Any] | None = None) -> None:
        self.ranks = ranks
        self.attrs = attrs or {}

    def rank(self, var: str) -> int:
        return self.ranks[var]

    def shape(self, var: str) -> list[Any]:
        return [z3.Int(f"d_{var}_{k}") for k in range(self.ranks[var])]

    def values(self, var: str) -> list[Any]:
        length = target_length(self.attrs, var)
        if length is None:
            raise evalexpr.NotApplicable("symbolic")
        return [z3.Int(f"v_{var}_{k}") for k in range(length)]

    def require(self, cond: Any) -> None:
        pass  # only lengths are wanted here

    def element_fact(self, kind: str, var: str) -> Any:
        raise evalexpr.NotApplicable("element facts are symbolic")

    def is_const(self, var: str) -> Any:
        raise evalexpr.NotApplicable("symbolic")

    def dtype(self, var: str) -> str:
        raise evalexpr.NotApplicable("symbolic")


def rank_of(p: ast.Pattern, sems: dict[str, OpSemantics], ranks: dict[str, int],
            attrs: dict[str, Any]) -> int:
    if isinstance(p, ast.PVar):
        return ranks[p.name]
    if isinstance(p, ast.PConst):
        return 0
    if isinstance(p, ast.PCompute):
        return 0 if p.func == "scalar" else 1
    in_ranks = [rank_of(i, sems, ranks, attrs) for i in p.inputs]
    sem = sems[p.op]
    if sem.builtin is None:
        return max(in_ranks, default=0)
    values: dict[str, Any] = {}
    for name, expr in p.attrs:
        try:
            values[name] = evalexpr.evaluate(expr, attrs, _RankFacts(ranks, attrs))
        except evalexpr.NotApplicable:
            values[name] = None
    return sem.builtin.out_rank(in_ranks, values)


def rank_free_vars(canon: CanonRule, sems: dict[str, OpSemantics],
                   guard: ast.Expr | None) -> set[str]:
    """Variables whose verdict holds at every rank (`dsl.normalize.rank_sensitive_vars`,
    the policy the e-graph's rank guard follows too)."""
    ops = {name: s.decl for name, s in sems.items()}
    sensitive = rank_sensitive_vars(canon.lhs, canon.rhs, guard, ops)
    return {v for v in canon.tensor_vars if v not in sensitive}


def _conjuncts(guard: ast.Expr) -> list[ast.Expr]:
    if isinstance(guard, ast.BinOp) and guard.op == "and":
        return _conjuncts(guard.lhs) + _conjuncts(guard.rhs)
    return [guard]


def guard_refuted(guard: ast.Expr | None, config: Config) -> bool:
    """A conjunct of ``guard`` is false from the ranks and enumerated attributes alone
    (``len(?sa) == 1`` with ``?sa = [0, 1]``): the rule does not apply, and the
    configuration needs no encoding. Conjuncts that need symbolic facts are skipped."""
    if guard is None:
        return False
    attrs = {k: v for k, v in config.attrs if v != SYMBOLIC_LIST}
    facts = _RankFacts(config.rank_of, attrs)
    # a shape built-in over placeholder dims is left undecided here: its symbolic
    # encoding costs more than the solver's check of a configuration it might drop
    facts.symbolic_shape_builtins = False  # type: ignore[attr-defined]
    for conjunct in _conjuncts(guard):
        try:
            value = evalexpr.evaluate(conjunct, attrs, facts)
        except Exception:  # symbolic, or not applicable here: decided by the solver
            continue
        if value is False:
            return True
    return False


def enumerate_configs(canon: CanonRule, sems: dict[str, OpSemantics],
                      ranks: tuple[int, ...] = RANKS, guard: ast.Expr | None | str = "rule"
                      ) -> Iterator[tuple[Config, str]]:
    """Every configuration, with what it must check: "values" (everything), "shape"
    (shapes only) or "rank" (only that both sides have one rank); see
    `rank_free_vars`. ``guard`` is the one being checked (default: the rule's)."""
    if isinstance(guard, str):
        guard = canon.guard
    free = rank_free_vars(canon, sems, guard)
    top = max(ranks)
    nodes = [p for p in subpatterns(canon.lhs) if isinstance(p, ast.POp)]
    pinned = pinned_ranks(guard)
    # a guard pinning a rank above the limit (rank(?w) == 4 for a 2-D Conv) lets the
    # variables it meets reach that rank too; ill-ranked left sides are dropped early
    wide = tuple(range(max([top, *pinned.values()]) + 1))
    choices = [(pinned[v],) if v in pinned else wide if v not in free else ranks
               for v in canon.tensor_vars]
    combinations = math.prod(len(c) for c in choices)
    if combinations > MAX_RANK_COMBINATIONS:  # a guard pinning some ranks cuts this
        raise Unsupported(f"{combinations} rank combinations to enumerate "
                          f"(limit {MAX_RANK_COMBINATIONS}; pin ranks with rank(?x) == N)")
    for combo in _rank_combinations(canon, sems, choices, top):
        rank_map = dict(zip(canon.tensor_vars, combo, strict=False))
        if not _lhs_ranks_fit(canon, sems, rank_map, nodes, top):
            continue
        # shapes of rank-free variables are covered by rank 3 (leading 1s), their
        # elements by rank 0: at one output index each is read at one element
        values_needed = all(rank_map[v] == 0 for v in free)
        shape_needed = values_needed or all(rank_map[v] == top for v in free)
        for attrs in _assign(nodes, 0, {}, sems, rank_map, top):
            config = Config(tuple(rank_map.items()), tuple(sorted(attrs.items())))
            yield config, ("values" if values_needed else "shape" if shape_needed else "rank")


def _lhs_ranks_fit(canon: CanonRule, sems: dict[str, OpSemantics], rank_map: dict[str, int],
                   nodes: list[ast.POp], top: int) -> bool:
    """False where the left side is ill-formed for these ranks under every
    assignment of the enumerated attributes."""
    return _fits(canon.lhs, sems, rank_map, nodes, top)


def _fits(pattern: ast.Pattern, sems: dict[str, OpSemantics], rank_map: dict[str, int],
          nodes: list[ast.POp], top: int) -> bool:
    """False where ``pattern`` (whose operator nodes are ``nodes``) is ill-formed for
    these ranks under every assignment of its enumerated attributes."""
    try:
        rank_of(pattern, sems, rank_map, {})
        return True
    except Illformed:
        pass  # perhaps only for want of an attribute: try the assignments
    except Exception:
        return True
    for attrs in _assign(nodes, 0, {}, sems, rank_map, top):
        try:
            rank_of(pattern, sems, rank_map, attrs)
            return True
        except Illformed:
            continue
        except Exception:
            return True
    return False


def _rank_combinations(canon: CanonRule, sems: dict[str, OpSemantics],
                       choices: list[tuple[int, ...]], top: int) -> Iterator[tuple[int, ...]]:
    """`itertools.product(*choices)` (one rank per tensor variable, in
    ``canon.tensor_vars`` order), less the combinations where a closed left-hand
    subpattern is ill-formed at every assignment of its attributes: the whole left side
    is then too (`rank_of` reads every subpattern), so `_lhs_ranks_fit` would drop them
    one by one. A subpattern is checked as soon as its variables have ranks, and a
    failure drops every combination below (bn-fold-gemm: 78,125 combinations, 6 kept).
    Closed: its attributes read no variable bound outside it, so its rank does not
    depend on the rest of the rule."""
    names = list(canon.tensor_vars)
    position = {v: k for k, v in enumerate(names)}
    # checks[k]: (number, subpattern, its nodes, its variables) of the subpatterns
    # whose last variable is names[k - 1]
    checks: list[list[tuple[int, ast.POp, list[ast.POp], tuple[str, ...]]]] = [
        [] for _ in range(len(names) + 1)]
    for number, (sub, sub_nodes, sub_vars) in enumerate(_closed_subpatterns(canon)):
        if any(v not in position for v in sub_vars):
            continue
        last = max((position[v] for v in sub_vars), default=-1)
        checks[last + 1].append((number, sub, sub_nodes, sub_vars))
    memo: dict[tuple[int, tuple[int, ...]], bool] = {}
    ranks: dict[str, int] = {}

    def fits(level: int) -> bool:
        for number, sub, sub_nodes, sub_vars in checks[level]:
            key = (number, tuple(ranks[v] for v in sub_vars))
            if key not in memo:
                memo[key] = _fits(sub, sems, ranks, sub_nodes, top)
            if not memo[key]:
                return False
        return True

    def walk(level: int, prefix: tuple[int, ...]) -> Iterator[tuple[int, ...]]:
        if level == len(names):
            yield prefix
            return
        for rank in choices[level]:
            ranks[names[level]] = rank
            if fits(level + 1):
                yield from walk(level + 1, (*prefix, rank))
        ranks.pop(names[level], None)

    if fits(0):
        yield from walk(0, ())


def _closed_subpatterns(canon: CanonRule) -> list[tuple[ast.POp, list[ast.POp], tuple[str, ...]]]:
    """The left side's operator subpatterns (but the whole side, which `_lhs_ranks_fit`
    checks) whose attribute expressions read only their own tensor variables and
    attribute variables that no other left-hand node binds: each with its operator
    nodes and tensor variables."""
    all_nodes = [p for p in subpatterns(canon.lhs) if isinstance(p, ast.POp)]
    out = []
    for sub in all_nodes[:-1]:
        sub_nodes = [p for p in subpatterns(sub) if isinstance(p, ast.POp)]
        sub_vars = tuple(dict.fromkeys(p.name for p in subpatterns(sub)
                                       if isinstance(p, ast.PVar)))
        inside = {id(n) for n in sub_nodes}
        outside_names = {e.name for n in all_nodes if id(n) not in inside
                         for _, expr in n.attrs for e in walk_expr(expr)
                         if isinstance(e, ast.Var)}
        read = {e.name for n in sub_nodes for _, expr in n.attrs for e in walk_expr(expr)
                if isinstance(e, ast.Var)}
        if all(name in sub_vars or (name not in outside_names
                                    and name not in canon.tensor_vars) for name in read):
            out.append((sub, sub_nodes, sub_vars))
    return out


def _assign(nodes: list[ast.POp], i: int, attrs: dict[str, Any],
            sems: dict[str, OpSemantics], ranks: dict[str, int],
            top: int) -> Iterator[dict[str, Any]]:
    if i == len(nodes):
        yield dict(attrs)
        return
    node = nodes[i]
    sem = sems[node.op]
    unbound = [(name, e.name) for name, e in node.attrs
               if isinstance(e, ast.Var) and e.name not in attrs]
    if not unbound:
        yield from _assign(nodes, i + 1, attrs, sems, ranks, top)
        return
    try:
        in_ranks = [rank_of(c, sems, ranks, attrs) for c in node.inputs]
    except Illformed:
        return
    types = {a.name: a.type for a in sem.decl.attrs}
    domains: list[list[Any]] = []
    names: list[str] = []
    for attr, var in unbound:
        domain = sem.builtin.attr_domain(attr, in_ranks) if sem.builtin is not None else None
        if domain is None:
            if types.get(attr) in ("float", "int", "tensor"):
                continue  # stays symbolic
            raise Unsupported(f"attribute `{attr}` of {node.op} has no finite domain to "
                              "enumerate")
        if attr == "_out_rank":  # a hidden target rank obeys the rank limit too
            domain = [r for r in domain if r <= top]
        names.append(var)
        domains.append(domain)
    for values in itertools.product(*domains):
        attrs2 = dict(attrs)
        attrs2.update(zip(names, values, strict=False))
        yield from _assign(nodes, i + 1, attrs2, sems, ranks, top)
