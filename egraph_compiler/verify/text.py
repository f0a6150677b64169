"""DSL text of expressions and patterns: for messages, suggested guards and cache keys."""

from __future__ import annotations

from egraph_compiler.dsl import ast

_PRECEDENCE = {"or": 1, "and": 2, "==": 4, "!=": 4, "<": 4, "<=": 4, ">": 4, ">=": 4,
               "+": 5, "-": 5, "*": 6, "/": 6, "//": 6, "%": 6, "**": 8}


def expr_text(expr: ast.Expr, parent: int = 0) -> str:
    if isinstance(expr, ast.Var):
        return f"?{expr.name}"
    if isinstance(expr, ast.Name):
        return expr.name
    if isinstance(expr, ast.Num):
        return repr(expr.value)
    if isinstance(expr, ast.Str):
        return f'"{expr.value}"'
    if isinstance(expr, ast.ListLit):
        return "[" + ", ".join(expr_text(item) for item in expr.items) + "]"
    if isinstance(expr, ast.Call):
        return f"{expr.func}(" + ", ".join(expr_text(a) for a in expr.args) + ")"
    if isinstance(expr, ast.Index):
        return f"{expr_text(expr.base, 9)}[{expr_text(expr.index)}]"
    if isinstance(expr, ast.UnOp):
        inner = expr_text(expr.operand, 7)
        return f"not {inner}" if expr.op == "not" else f"-{inner}"
    if isinstance(expr, ast.BinOp):
        prec = _PRECEDENCE[expr.op]
        text = f"{expr_text(expr.lhs, prec)} {expr.op} {expr_text(expr.rhs, prec + 1)}"
        return f"({text})" if prec < parent else text
    raise TypeError(f"not an expression: {expr!r}")


def pattern_text(pattern: ast.Pattern) -> str:
    if isinstance(pattern, ast.PVar):
        return f"?{pattern.name}"
    if isinstance(pattern, ast.PConst):
        return repr(pattern.value)
    if isinstance(pattern, ast.PCompute):
        return f"{pattern.func}(" + ", ".join(expr_text(a) for a in pattern.args) + ")"
    parts = [pattern_text(p) for p in pattern.inputs]
    parts += [f"{name}={expr_text(value)}" for name, value in pattern.attrs]
    return f"{pattern.op}(" + ", ".join(parts) + ")"


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
