"""The one meaning of a rule, produced here and consumed by both the e-graph lowering
(`egraph/lower.py`) and the verifier (`verify/normalize.py`), so that what `dnnr verify`
proves is what the compiler applies (STYLE 17: normalise once, consume twice).

Attribute semantics (rules/README.md, "What an attribute means"):

- Left-hand side: ``attr=?p`` binds, ``attr=literal`` matches, an attribute left out
  matches anything: it becomes a *wildcard* variable of its own (``_LeakyRelu1_alpha``),
  one per occurrence. The same operator over the same inputs written twice on the left
  is two nodes, each with its own wildcards: ``Add(LeakyRelu(?x), LeakyRelu(?x))``
  matches ``LeakyRelu(x, alpha=0.1) + LeakyRelu(x, alpha=0.5)``, exactly as the
  e-graph matches it. Bind the attribute to one variable to require equal values.
- Right-hand side: an attribute left out takes its *declared default* (the `op` line of
  `operators.dnnr`), never the value of a left-hand node; one without a default stays
  absent (its ONNX meaning, e.g. Transpose's reversed `perm`).
- Guards are split once into top-level conjuncts (``and``).

`dropped_attributes` finds the right-hand nodes whose default silently replaces what the
left side matched (`dnnr check` warns about them).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from egraph_compiler.dsl import ast
from egraph_compiler.dsl.format import expr_text


@dataclass(frozen=True)
class NormalRule:
    """A rule with every attribute explicit (see the module docstring).

    ``lhs``/``rhs`` keep the source spans of what the author wrote; an attribute filled
    in by normalisation is a wildcard `ast.Var` (left) or the declaration's default
    expression itself (right: ``expr is decl.default`` tells a filled-in default from one
    the author wrote)."""

    rule: ast.Rule
    lhs: ast.Pattern
    rhs: ast.Pattern
    guard: ast.Expr | None
    conjuncts: tuple[ast.Expr, ...]
    wildcards: frozenset[str]  # attribute variables standing for "matches anything"
    reverse: bool = False  # the right-to-left direction of a `<=>` rule


def conjuncts(expr: ast.Expr | None) -> tuple[ast.Expr, ...]:
    """The top-level ``and``-ed parts of a guard, in order."""
    if expr is None:
        return ()
    if isinstance(expr, ast.BinOp) and expr.op == "and":
        return conjuncts(expr.lhs) + conjuncts(expr.rhs)
    return (expr,)


class _Normaliser:
    def __init__(self, ops: dict[str, ast.OpDecl]) -> None:
        self.ops = ops
        self.counter = 0
        self.wildcards: list[str] = []

    def complete(self, p: ast.Pattern, matching: bool) -> ast.Pattern:
        """Every declared attribute spelled out: on the matching side a fresh wildcard
        variable, on the written side the declared default (none: left unset)."""
        if not isinstance(p, ast.POp):
            return p
        inputs = tuple(self.complete(i, matching) for i in p.inputs)
        decl = self.ops.get(p.op)
        attrs = list(p.attrs)
        if decl is not None:
            given = {name for name, _ in attrs}
            self.counter += matching
            for attr in (a for a in decl.attrs if a.name not in given):
                if matching:
                    name = f"_{p.op}{self.counter}_{attr.name}"
                    self.wildcards.append(name)
                    attrs.append((attr.name, ast.Var(name, p.span)))
                elif attr.default is not None:
                    attrs.append((attr.name, attr.default))
        return dataclasses.replace(p, inputs=inputs, attrs=tuple(attrs))


def normalize_rule(rule: ast.Rule, ops: dict[str, ast.OpDecl], reverse: bool = False
                   ) -> NormalRule:
    """The normal form of ``rule`` (right to left for ``reverse``) over the operator
    declarations ``ops``. Unknown operators are left as written (the checker reports
    them); nothing here raises."""
    lhs, rhs = (rule.rhs, rule.lhs) if reverse else (rule.lhs, rule.rhs)
    norm = _Normaliser(ops)
    lhs_n = norm.complete(lhs, matching=True)
    rhs_n = norm.complete(rhs, matching=False)
    return NormalRule(rule, lhs_n, rhs_n, rule.guard, conjuncts(rule.guard),
                      frozenset(norm.wildcards), reverse)


def is_filled_default(expr: ast.Expr, attr: ast.AttrDecl) -> bool:
    """The right-hand attribute value was filled in from the declaration (not written)."""
    return attr.default is not None and expr is attr.default


@dataclass(frozen=True)
class DroppedAttribute:
    """A right-hand node that gets ``attr``'s default while a left-hand node of the same
    operator matched something else (a variable or another literal)."""

    rule: str
    op: str
    attr: str
    default: ast.Expr
    lhs_value: ast.Expr
    wildcard: bool  # the left-hand node leaves the attribute out
    span: ast.Span

    def message(self) -> str:
        matched = ("any value (the attribute is left out there)" if self.wildcard
                   else expr_text(self.lhs_value))
        return (f"rule {self.rule}: {self.op} on the right-hand side leaves out `{self.attr}`, "
                f"so it gets the default {expr_text(self.default)}, while the left-hand "
                f"{self.op} matches {matched}; write `{self.attr}=...` on the right "
                "(bind it on the left to keep it)")


def _ops_of(p: ast.Pattern) -> list[ast.POp]:
    if not isinstance(p, ast.POp):
        return []
    return [n for child in p.inputs for n in _ops_of(child)] + [p]


def _same_literal(a: ast.Expr, b: ast.Expr) -> bool:
    return expr_text(a) == expr_text(b)


def dropped_attributes(rule: ast.Rule, ops: dict[str, ast.OpDecl]) -> list[DroppedAttribute]:
    """Every right-hand attribute left to its default where the left side binds or
    matches a value that need not be that default."""
    found: list[DroppedAttribute] = []
    directions = (False, True) if rule.bidirectional else (False,)
    for reverse in directions:
        normal = normalize_rule(rule, ops, reverse)
        lhs_nodes = _ops_of(normal.lhs)
        for node in _ops_of(normal.rhs):
            decl = ops.get(node.op)
            if decl is None:
                continue
            for attr in decl.attrs:
                value = dict(node.attrs).get(attr.name)
                if value is None or not is_filled_default(value, attr):
                    continue
                for left in lhs_nodes:
                    if left.op != node.op:
                        continue
                    matched = dict(left.attrs).get(attr.name)
                    if matched is None or (not isinstance(matched, ast.Var)
                                           and _same_literal(matched, attr.default)):  # type: ignore[arg-type]
                        continue
                    found.append(DroppedAttribute(rule.name, node.op, attr.name,
                                                  attr.default,  # type: ignore[arg-type]
                                                  matched, isinstance(matched, ast.Var)
                                                  and matched.name in normal.wildcards,
                                                  node.span))
                    break
    return found


def attribute_warnings(ruleset: ast.RuleSet) -> list[str]:
    """``file:line:col: warning: ...`` for every `dropped_attributes` finding (what
    `dnnr check` prints)."""
    return [f"{d.span}: warning: {d.message()}"
            for rule in ruleset.rules for d in dropped_attributes(rule, ruleset.ops)]


# ---------------------------------------------------------------- ranks
# A verdict holds at the ranks checked. `dnnr verify` checks every rank-sensitive tensor
# variable at ranks 0..RANK_LIMIT (or at the rank a guard pins), and the e-graph applies
# the rule only where each such variable's rank is within that bound (`rank_limits`): the
# compiler never applies a rule outside what was verified. A variable reached only
# through elementwise operators on both sides, and not named by a shape guard, is
# rank-free: a lower rank is a higher one with leading 1s, and each output element reads
# one of its elements, so its verdict holds at every rank.

RANK_LIMIT = 4  # a rule with an enumerated int-list attribute (axes, Conv pads) at every rank
WIDE_RANK_LIMIT = 6  # every other rule: its configurations grow linearly with the rank
# the verifier enumerates every tensor variable's rank: at most this many combinations
MAX_RANK_COMBINATIONS = 390_625  # 5 ** 8: eight tensor variables of any rank 0..RANK_LIMIT
# Int-list attributes the verifier encodes as one list of symbolic Ints at every rank
# above RANK_LIMIT (`verify/perm.py`), keyed by the built-in encoding of the operator
# declaring them: a rule whose only enumerated lists are these is verified, hence
# applied, up to WIDE_RANK_LIMIT. A permutation is axis arithmetic; axes lists and
# Conv geometry are still enumerated.
SYMBOLIC_LIST_ATTRIBUTES: dict[str, frozenset[str]] = {"transpose": frozenset({"perm"})}
RANK_SENSITIVE_CALLS = frozenset({"rank", "shape", "dim", "numel", "same_shape", "broadcastable"})


def pinned_ranks(guard: ast.Expr | None) -> dict[str, int]:
    """``rank(?x) == N`` conjuncts of the guard: ?x has that rank only."""
    pinned: dict[str, int] = {}
    for c in conjuncts(guard):
        if (isinstance(c, ast.BinOp) and c.op == "==" and isinstance(c.lhs, ast.Call)
                and c.lhs.func == "rank" and c.lhs.args
                and isinstance(c.lhs.args[0], ast.Var) and isinstance(c.rhs, ast.Num)
                and isinstance(c.rhs.value, int)):
            pinned[c.lhs.args[0].name] = c.rhs.value
    return pinned


def _guard_rank_vars(expr: ast.Expr | None) -> set[str]:
    found: set[str] = set()

    def walk(e: ast.Expr) -> None:
        if isinstance(e, ast.Call) and e.func in RANK_SENSITIVE_CALLS:
            found.update(a.name for a in e.args if isinstance(a, ast.Var))
        for sub in ast.sub_expressions(e):
            walk(sub)

    if expr is not None:
        walk(expr)
    return found


def rank_sensitive_vars(lhs: ast.Pattern, rhs: ast.Pattern, guard: ast.Expr | None,
                        ops: dict[str, ast.OpDecl]) -> set[str]:
    """Tensor variables under a non-elementwise operator on either side, or named by a
    shape function of the guard (see the section comment)."""
    sensitive: set[str] = set()

    def walk(p: ast.Pattern, under_shaper: bool) -> None:
        if isinstance(p, ast.PVar):
            if under_shaper:
                sensitive.add(p.name)
        elif isinstance(p, ast.POp):
            decl = ops.get(p.op)
            shaper = under_shaper or decl is None or decl.semantics is None
            for child in p.inputs:
                walk(child, shaper)

    walk(lhs, False)
    walk(rhs, False)
    return sensitive | _guard_rank_vars(guard)


def _tensor_vars(p: ast.Pattern) -> list[str]:
    if isinstance(p, ast.PVar):
        return [p.name]
    if isinstance(p, ast.POp):
        return [v for child in p.inputs for v in _tensor_vars(child)]
    return []


def _enumerates_lists(p: ast.Pattern, ops: dict[str, ast.OpDecl]) -> bool:
    """An operator of ``p`` has an int-list attribute left to a variable (a perm, axes):
    the verifier enumerates its values, factorially or exponentially many in the rank."""
    if not isinstance(p, ast.POp):
        return False
    decl = ops.get(p.op)
    types = {a.name: a.type for a in decl.attrs} if decl is not None else {}
    symbolic = SYMBOLIC_LIST_ATTRIBUTES.get((decl.builtin or "").lower() if decl else "",
                                            frozenset())
    if any(types.get(name) == "ints" and isinstance(value, ast.Var) and name not in symbolic
           for name, value in p.attrs):
        return True
    return any(_enumerates_lists(child, ops) for child in p.inputs)


def rank_limit(normal: NormalRule, ops: dict[str, ast.OpDecl]) -> int:
    """The highest rank (of a variable no guard pins) at which ``normal`` is verified,
    hence applied: `WIDE_RANK_LIMIT`, or `RANK_LIMIT` for a rule that enumerates an axes
    list or a Conv geometry (issue 12 asks >= 6; a perm is symbolic above RANK_LIMIT,
    `SYMBOLIC_LIST_ATTRIBUTES`)."""
    if _enumerates_lists(normal.lhs, ops) or _enumerates_lists(normal.rhs, ops):
        return RANK_LIMIT
    if not rank_sensitive_vars(normal.lhs, normal.rhs, normal.guard, ops):
        return RANK_LIMIT  # elementwise only: its verdict holds at every rank anyway
    pinned = pinned_ranks(normal.guard)
    free = [v for v in dict.fromkeys(_tensor_vars(normal.lhs)) if v not in pinned]
    if (WIDE_RANK_LIMIT + 1) ** len(free) > MAX_RANK_COMBINATIONS:
        return RANK_LIMIT  # too many tensor variables to enumerate their ranks to 6
    return WIDE_RANK_LIMIT


def rank_limits(normal: NormalRule, ops: dict[str, ast.OpDecl]) -> dict[str, int]:
    """Each rank-sensitive tensor variable of the left side -> the highest rank at which
    the rule is verified, hence applied."""
    pinned = pinned_ranks(normal.guard)
    top = max([rank_limit(normal, ops), *pinned.values()])
    sensitive = rank_sensitive_vars(normal.lhs, normal.rhs, normal.guard, ops)
    return {v: pinned.get(v, top) for v in dict.fromkeys(_tensor_vars(normal.lhs))
            if v in sensitive}
