"""DSL text of expressions and patterns: for messages, suggested guards and cache keys."""

from __future__ import annotations

from egraph_compiler.dsl import ast
from egraph_compiler.dsl.format import expr_text, pattern_text

__all__ = ["expr_text", "op_text", "pattern_text", "rule_text"]

def rule_text(rule: ast.Rule) -> str:
    flags = f" [{', '.join(sorted(rule.flags))}]" if rule.flags else ""
    arrow = "<=>" if rule.bidirectional else "=>"
    guard = f" when {expr_text(rule.guard)}" if rule.guard is not None else ""
    return (f"rule {rule.name}{flags}: {pattern_text(rule.lhs)} {arrow} "
            f"{pattern_text(rule.rhs)}{guard}")


def op_text(decl: ast.OpDecl) -> str:
    """Everything about an operator that its verification depends on."""
    params = ", ".join(p.name + ("?" if p.optional else "...") if p.optional or p.variadic
                       else p.name for p in decl.params)
    attrs = ", ".join(f"{a.name}: {a.type}" + (f" = {expr_text(a.default)}" if a.default
                                                else "") for a in decl.attrs)
    sem = (f" = {expr_text(decl.semantics)}" if decl.semantics is not None
           else f" = builtin {decl.builtin}" if decl.builtin else "")
    req = f" requires {expr_text(decl.requires)}" if decl.requires is not None else ""
    return f"op {decl.name}({params}) [{attrs}]{sem}{req}"
