"""AST -> canonical `.dnnr` text. Re-parsing the output gives the same AST up to spans.

Expressions are printed with the fewest parentheses the grammar's precedence allows;
docs are printed directly above their rule, other comment blocks are followed by a
blank line so they never turn into a doc.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable

from egraph_compiler.dsl import ast

LINE_WIDTH = 100
INDENT = "    "

# Binding strength, weakest first; mirrors the `?expr` chain of grammar/dnnr.lark.
OR, AND, NOT, COMPARE, SUM, PRODUCT, UNARY, POWER, POSTFIX, ATOM = range(1, 11)
_BINARY_LEVEL = {
    "or": OR,
    "and": AND,
    **dict.fromkeys(("==", "!=", "<", "<=", ">", ">="), COMPARE),
    "+": SUM,
    "-": SUM,
    **dict.fromkeys(("*", "/", "//", "%"), PRODUCT),
    "**": POWER,
}


def number_text(value: int | float) -> str:
    if isinstance(value, float) and math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return repr(value) if isinstance(value, float) else str(value)


def _wrap(text_level: tuple[str, int], needed: int) -> str:
    text, level = text_level
    return text if level >= needed else f"({text})"


def _expr(expr: ast.Expr) -> tuple[str, int]:
    if isinstance(expr, ast.Var):
        return f"?{expr.name}", ATOM
    if isinstance(expr, ast.Name):
        return expr.name, ATOM
    if isinstance(expr, ast.Num):
        text = number_text(expr.value)
        return text, UNARY if text.startswith("-") else ATOM
    if isinstance(expr, ast.Str):
        return f'"{expr.value}"', ATOM
    if isinstance(expr, ast.ListLit):
        return f"[{_args(expr.items)}]", ATOM
    if isinstance(expr, ast.Call):
        return f"{expr.func}({_args(expr.args)})", ATOM
    if isinstance(expr, ast.Index):
        return f"{_wrap(_expr(expr.base), POSTFIX)}[{expr_text(expr.index)}]", POSTFIX
    if isinstance(expr, ast.UnOp):
        if expr.op == "not":
            return f"not {_wrap(_expr(expr.operand), NOT)}", NOT
        return f"-{_wrap(_expr(expr.operand), UNARY)}", UNARY
    level = _BINARY_LEVEL[expr.op]
    if level == COMPARE:
        left, right = SUM, SUM
    elif level == POWER:
        left, right = POSTFIX, UNARY
    else:  # left-associative
        left, right = level, level + 1 if level != PRODUCT else UNARY
    lhs = _wrap(_expr(expr.lhs), left)
    rhs = _wrap(_expr(expr.rhs), right)
    return f"{lhs} {expr.op} {rhs}", level


def expr_text(expr: ast.Expr) -> str:
    return _expr(expr)[0]


def _args(items: Iterable[ast.Expr]) -> str:
    return ", ".join(expr_text(e) for e in items)


def pattern_text(pattern: ast.Pattern) -> str:
    if isinstance(pattern, ast.PVar):
        return f"?{pattern.name}"
    if isinstance(pattern, ast.PConst):
        return number_text(pattern.value)
    if isinstance(pattern, ast.PCompute):
        return f"{pattern.func}({_args(pattern.args)})"
    parts = [pattern_text(p) for p in pattern.inputs]
    parts += [f"{name}={expr_text(value)}" for name, value in pattern.attrs]
    return f"{pattern.op}({', '.join(parts)})"


# ---------------------------------------------------------------- items


def _param(param: ast.Param) -> str:
    return param.name + ("?" if param.optional else "") + ("..." if param.variadic else "")


def op_text(op: ast.OpDecl) -> str:
    text = f"op {op.name}({', '.join(_param(p) for p in op.params)})"
    if op.attrs:
        attrs = []
        for attr in op.attrs:
            default = "" if attr.default is None else f" = {expr_text(attr.default)}"
            attrs.append(f"{attr.name}: {attr.type}{default}")
        text += f" [{', '.join(attrs)}]"
    if op.outputs != 1:
        text += f" -> {op.outputs}"
    elif op.dtype is not None:
        kind, *args = op.dtype
        text += f" -> {args[0]}" if kind == "fixed" else f" -> {kind}({', '.join(args)})"
    text += f" : {op.mapping} {op.layout} {op.dynamism}"
    if op.builtin is not None:
        text += f" = builtin {op.builtin}"
    elif op.semantics is not None:
        text += f" = {expr_text(op.semantics)}"
    if op.requires is not None:
        text += f" requires {expr_text(op.requires)}"
    if op.facts:
        text += f" facts {', '.join(op.facts)}"
    if op.shape is not None:
        text += f" shape {op.shape}"
    if op.cost is not None:
        kind, amount = op.cost
        text += f" cost {kind}" + (f"({amount:g})" if amount else "")
    if op.anchor is not None:
        text += f" anchor {op.anchor}"
    return text


def rule_text(rule: ast.Rule) -> str:
    lines = [f"# {line}" if line else "#" for line in rule.doc.split("\n")] if rule.doc else []
    flags = [f for f, _ in rule.flag_spans] or sorted(rule.flags)
    head = f"rule {rule.name}" + (f" [{', '.join(flags)}]" if flags else "") + ":"
    lhs, rhs = pattern_text(rule.lhs), pattern_text(rule.rhs)
    arrow = "<=>" if rule.bidirectional else "=>"
    guard = "" if rule.guard is None else f"when {expr_text(rule.guard)}"
    one_line = " ".join(part for part in (head, lhs, arrow, rhs, guard) if part)
    if len(one_line) <= LINE_WIDTH:
        lines.append(one_line)
    else:
        lines += [f"{head} {lhs}", f"{INDENT}{arrow} {rhs}"] + (
            [f"{INDENT}{guard}"] if guard else []
        )
    return "\n".join(lines)


def fuse_text(entry: ast.FuseEntry) -> str:
    result = f" -> {entry.result}" if entry.result is not None else ""
    return f"fuse {entry.first} then {entry.second}{result} : {entry.verdict}"


def limits_text(items: Iterable[tuple[str, int | float]]) -> str:
    body = "; ".join(f"{name} = {number_text(value)}" for name, value in items)
    return f"limits {{ {body} }}"


def _step_lines(step: ast.ScheduleStep, depth: int) -> list[str]:
    pad = INDENT * depth
    if isinstance(step, ast.Saturate):
        return [f"{pad}saturate {', '.join(step.rulesets)}"]
    if isinstance(step, ast.RunTimes):
        return [f"{pad}run {', '.join(step.rulesets)} {step.times}"]
    return [f"{pad}repeat {step.times} {{", *_block(step.body, depth + 1), f"{pad}}}"]


def _block(steps: Iterable[ast.ScheduleStep], depth: int) -> list[str]:
    chunks = [_step_lines(s, depth) for s in steps]
    for chunk in chunks[:-1]:
        chunk[-1] += ";"
    return [line for chunk in chunks for line in chunk]


def _step_inline(step: ast.ScheduleStep) -> str:
    if isinstance(step, ast.Repeat):
        return f"repeat {step.times} {{ {'; '.join(_step_inline(s) for s in step.body)} }}"
    return _step_lines(step, 0)[0]


def schedule_text(steps: tuple[ast.ScheduleStep, ...]) -> str:
    inline = (
        f"schedule {{ {'; '.join(_step_inline(s) for s in steps)} }}" if steps else "schedule { }"
    )
    if len(inline) <= LINE_WIDTH:
        return inline
    return "\n".join(["schedule {", *_block(steps, 1), "}"])


def item_text(item: ast.Item) -> str:
    if isinstance(item, ast.UseDecl):
        return f'use "{item.path}"'
    if isinstance(item, ast.Comment):
        return "\n".join(f"# {line}" if line else "#" for line in item.lines)
    if isinstance(item, ast.OpDecl):
        return op_text(item)
    if isinstance(item, ast.RulesetDecl):
        return f"ruleset {item.name}"
    if isinstance(item, ast.Rule):
        return rule_text(item)
    if isinstance(item, ast.FuseEntry):
        return fuse_text(item)
    if isinstance(item, ast.LimitsDecl):
        return limits_text((i.name, i.value) for i in item.items)
    return schedule_text(item.steps)


def _tight(prev: ast.Item, item: ast.Item) -> bool:
    """No blank line between these two consecutive items."""
    if isinstance(prev, ast.Comment):
        return False
    if isinstance(item, ast.Rule):
        return not item.doc and isinstance(prev, (ast.Rule, ast.RulesetDecl))
    tight_kinds = (ast.UseDecl, ast.OpDecl, ast.FuseEntry, ast.RulesetDecl)
    return type(prev) is type(item) and isinstance(item, tight_kinds)


def format_items(items: Iterable[ast.Item]) -> str:
    out: list[str] = []
    prev: ast.Item | None = None
    for item in items:
        if prev is not None and not _tight(prev, item):
            out.append("")
        out.append(item_text(item))
        prev = item
    return "\n".join(out) + "\n" if out else ""


def ruleset_items(ruleset: ast.RuleSet) -> list[ast.Item]:
    """A merged RuleSet as the items of one file (rulesets declared up front, in order)."""
    items: list[ast.Item] = list(ruleset.ops.values())
    items += [ast.RulesetDecl(r.name) for r in ruleset.rulesets]
    current = ruleset.rulesets[-1].name if ruleset.rulesets else None
    for rule in ruleset.rules:
        if rule.ruleset != current:
            items.append(ast.RulesetDecl(rule.ruleset))
            current = rule.ruleset
        items.append(rule)
    items += list(ruleset.fusion)
    limits = ruleset.limits
    if limits.span != ast.NO_SPAN or without_spans(limits) != ast.Limits():
        values = (
            ("nodes", limits.nodes),
            ("iterations", limits.iterations),
            ("seconds", limits.seconds),
        )
        items.append(ast.LimitsDecl(tuple(ast.LimitItem(n, v) for n, v in values)))
    if ruleset.schedule:
        items.append(ast.ScheduleDecl(ruleset.schedule))
    return items


_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def without_spans(node: object) -> object:
    """A copy of an AST value with every Span replaced by NO_SPAN (for comparisons)."""
    if isinstance(node, ast.Span):
        return ast.NO_SPAN
    kind = type(node)
    names = _FIELD_NAMES.get(kind)
    if names is None:  # fields() per node was most of `dnnr check`'s time on 10,000 rules
        names = _FIELD_NAMES[kind] = (tuple(f.name for f in dataclasses.fields(kind))
                                      if dataclasses.is_dataclass(kind) else ())
    if names:
        return dataclasses.replace(node, **{name: without_spans(getattr(node, name)) for name in names})  # type: ignore[type-var]
    if isinstance(node, tuple):
        return tuple(without_spans(x) for x in node)
    if isinstance(node, list):
        return [without_spans(x) for x in node]
    if isinstance(node, frozenset):
        return frozenset(without_spans(x) for x in node)
    if isinstance(node, dict):
        return {k: without_spans(v) for k, v in node.items()}
    return node
