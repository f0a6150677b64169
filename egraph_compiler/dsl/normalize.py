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

    def lhs(self, p: ast.Pattern) -> ast.Pattern:
        if not isinstance(p, ast.POp):
            return p
        inputs = tuple(self.lhs(i) for i in p.inputs)
        decl = self.ops.get(p.op)
        attrs = list(p.attrs)
        if decl is not None:
            given = {name for name, _ in attrs}
            self.counter += 1
            for attr in decl.attrs:
                if attr.name not in given:
                    name = f"_{p.op}{self.counter}_{attr.name}"
                    self.wildcards.append(name)
                    attrs.append((attr.name, ast.Var(name, p.span)))
        return dataclasses.replace(p, inputs=inputs, attrs=tuple(attrs))

    def rhs(self, p: ast.Pattern) -> ast.Pattern:
        if not isinstance(p, ast.POp):
            return p
        inputs = tuple(self.rhs(i) for i in p.inputs)
        decl = self.ops.get(p.op)
        attrs = list(p.attrs)
        if decl is not None:
            given = {name for name, _ in attrs}
            attrs += [(a.name, a.default) for a in decl.attrs
                      if a.name not in given and a.default is not None]
        return dataclasses.replace(p, inputs=inputs, attrs=tuple(attrs))


def normalize_rule(rule: ast.Rule, ops: dict[str, ast.OpDecl], reverse: bool = False
                   ) -> NormalRule:
    """The normal form of ``rule`` (right to left for ``reverse``) over the operator
    declarations ``ops``. Unknown operators are left as written (the checker reports
    them); nothing here raises."""
    lhs, rhs = (rule.rhs, rule.lhs) if reverse else (rule.lhs, rule.rhs)
    norm = _Normaliser(ops)
    lhs_n = norm.lhs(lhs)
    rhs_n = norm.rhs(rhs)
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
