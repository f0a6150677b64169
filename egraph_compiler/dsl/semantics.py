"""Semantic checks over every parsed file of one load; reports all errors, never raises.

Op declarations are global to the load (a rule file may use ops declared in another
file), as are rule names, ruleset names, the schedule and the limits.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from egraph_compiler.dsl import ast, load_budget
from egraph_compiler.dsl.builtins import (
    ANCHOR_CLAUSES,
    ATTR_TYPES,
    BUILTINS,
    COST_CLAUSES,
    DTYPE_FORMS,
    DTYPE_NAMES,
    DYNAMISM_CLASSES,
    FACT_CLAUSES,
    FUSION_VERDICTS,
    GUARD_CONSTANTS,
    LAYOUT_CLASSES,
    LIMIT_NAMES,
    MAPPING_CLASSES,
    RULE_FLAGS,
    SHAPE_CLAUSES,
)
from egraph_compiler.dsl.diagnostics import (
    ArityError,
    Diagnostic,
    DslError,
    DuplicateError,
    MisuseError,
    SourceLines,
    UnboundVariableError,
    UnknownNameError,
)
from egraph_compiler.dsl.format import without_spans
from egraph_compiler.dsl.names import (
    arity_range,
    describe_arity,
    is_literal,
    name_span,
    suggest,
    walk_expr,
)
from egraph_compiler.dsl.parser import ParsedFile
from egraph_compiler.dsl.shape_builtins import shape_builtin_names

TENSOR = "tensor"
ATTRIBUTE = "attribute"


@dataclass
class Scope:
    """What names an expression may use, and where it sits (for the messages)."""

    where: str  # "semantics", "guard", "right-hand side", "attribute default"
    operands: frozenset[str] = frozenset()
    owner: ast.OpDecl | None = None
    bound: dict[str, str] = field(default_factory=dict)  # ?var -> TENSOR / ATTRIBUTE
    lhs_ops: tuple[ast.OpDecl, ...] = ()
    bound_by: str = "the left-hand side"


class Checker:
    def __init__(self, files: Sequence[ParsedFile], lines: SourceLines) -> None:
        self.files = files
        self.lines = lines
        self.diagnostics: list[Diagnostic] = []
        self.ops: dict[str, ast.OpDecl] = {}
        self.broken_ops = set().union(*(f.broken_ops for f in files)) if files else set()
        self.broken_rulesets = set().union(*(f.broken_rulesets for f in files)) if files else set()
        self.rulesets: set[str] = set()
        self.rule_names: dict[str, ast.Rule] = {}
        self.fuse_cells: dict[tuple[str, str], ast.FuseEntry] = {}
        self.rewrites: dict[object, ast.Rule] = {}
        self.schedule: ast.ScheduleDecl | None = None
        self.limits: ast.LimitsDecl | None = None

    def error(
        self,
        kind: type[DslError],
        message: str,
        span: ast.Span,
        hint: str = "",
        notes: Sequence[tuple[ast.Span, str]] = (),
    ) -> None:
        self.diagnostics.append(self.lines.diagnostic(kind, message, span, hint, notes))

    # ---------------------------------------------------------------- driver
    def run(self) -> list[Diagnostic]:
        items = [item for f in self.files for item in f.source.items]
        for item in items:  # global names first: ops and rulesets may be used before
            if isinstance(item, ast.OpDecl):
                self.declare_op(item)
            elif isinstance(item, ast.RulesetDecl):
                self.rulesets.add(item.name)
            elif isinstance(item, ast.Rule):
                self.rulesets.add(item.ruleset)
        load_budget.at("checking the rules")
        for item in items:
            load_budget.check()  # a compile's seconds limit binds on the checks too
            if isinstance(item, ast.OpDecl):
                self.check_op(item)
            elif isinstance(item, ast.Rule):
                self.check_rule(item)
            elif isinstance(item, ast.FuseEntry):
                self.check_fuse(item)
            elif isinstance(item, ast.LimitsDecl):
                self.check_limits(item)
            elif isinstance(item, ast.ScheduleDecl):
                self.check_schedule(item)
        return self.diagnostics

    # ---------------------------------------------------------------- op declarations
    def declare_op(self, op: ast.OpDecl) -> None:
        first = self.ops.get(op.name)
        if first is None:
            self.ops[op.name] = op
            return
        self.error(
            DuplicateError,
            f"operator '{op.name}' is declared twice",
            op.name_span,
            "op declarations are global to a load; keep one",
            [(first.name_span, "first declared here")],
        )

    def check_class(self, value: str, table: dict[str, str], what: str, span: ast.Span) -> None:
        if value in table:
            return
        hint = suggest(value, table) or f"{what} classes: " + ", ".join(table)
        self.error(UnknownNameError, f"unknown {what} class '{value}'", span, hint)

    def check_op(self, op: ast.OpDecl) -> None:
        spans = op.class_spans or (op.span, op.span, op.span)
        self.check_class(op.mapping, MAPPING_CLASSES, "mapping", spans[0])
        self.check_class(op.layout, LAYOUT_CLASSES, "layout", spans[1])
        self.check_class(op.dynamism, DYNAMISM_CLASSES, "dynamism", spans[2])
        seen: dict[str, ast.Span] = {}
        for i, param in enumerate(op.params):
            self.check_unique(param.name, param.span, seen, f"operand of {op.name}")
            if param.variadic and i != len(op.params) - 1:
                self.error(
                    MisuseError,
                    f"variadic operand '{param.name}...' must be the last operand of {op.name}",
                    param.span,
                )
        for attr in op.attrs:
            self.check_unique(attr.name, attr.span, seen, f"operand or attribute of {op.name}")
            if attr.type not in ATTR_TYPES:
                hint = suggest(attr.type, ATTR_TYPES) or "attribute types: " + ", ".join(ATTR_TYPES)
                self.error(
                    UnknownNameError,
                    f"unknown attribute type '{attr.type}'",
                    attr.type_span if attr.type_span != ast.NO_SPAN else attr.span,
                    hint,
                )
            if attr.default is not None and not is_literal(attr.default):
                self.error(
                    MisuseError,
                    f"the default of attribute '{attr.name}' must be a literal",
                    attr.default.span,
                )
        if op.outputs < 1:
            self.error(MisuseError, f"{op.name} must have at least one output", op.span)
        self.check_op_clauses(op, seen)
        scope = Scope("semantics", frozenset(seen), owner=op)
        if op.semantics is not None:
            self.check_expr(op.semantics, scope)
        if op.requires is not None:
            self.check_expr(op.requires, scope)

    def check_op_clauses(self, op: ast.OpDecl, names: dict[str, ast.Span]) -> None:
        """The fact clauses name known kinds; ``like``/``dtype`` name an operand/attribute."""
        for fact in op.facts:
            self.check_class(fact, FACT_CLAUSES, "value fact", op.span)
        if op.shape is not None and not op.shape.startswith("builtin "):
            self.check_class(op.shape, SHAPE_CLAUSES, "shape", op.span)
        elif op.shape is not None:
            self.check_shape_builtin(op)
        if op.cost is not None:
            self.check_class(op.cost[0], COST_CLAUSES, "cost", op.span)
        if op.anchor is not None:
            self.check_class(op.anchor, ANCHOR_CLAUSES, "anchor kernel", op.span)
        if op.dtype is not None and op.dtype[0] != "fixed":
            kind, *args = op.dtype
            self.check_class(kind, DTYPE_FORMS, "output dtype", op.span)
            if args[0] not in names:
                self.error(UnknownNameError, f"output dtype {kind}({args[0]}): {op.name} has no "
                           f"operand or attribute '{args[0]}'", op.span)
        elif op.dtype is not None and op.dtype[1] not in DTYPE_NAMES:
            self.error(UnknownNameError, f"unknown output dtype '{op.dtype[1]}'", op.span,
                       suggest(op.dtype[1], DTYPE_NAMES))

    def check_shape_builtin(self, op: ast.OpDecl) -> None:
        """``shape builtin NAME`` names a shape function the shape stage has; otherwise
        the operator would load and fail only when a model uses it."""
        name = op.shape.removeprefix("builtin ") if op.shape else ""
        known = shape_builtin_names()
        if name in known:
            return
        hint = " ".join(filter(None, (suggest(name, known), "known shape builtins: " + ", ".join(known))))
        span = op.shape_span if op.shape_span != ast.NO_SPAN else op.span
        self.error(UnknownNameError, f"unknown shape builtin '{name}' in the declaration of {op.name}",
                   span, hint)

    def check_unique(self, name: str, span: ast.Span, seen: dict[str, ast.Span], what: str) -> None:
        if name in seen:
            self.error(
                DuplicateError,
                f"duplicate {what}: '{name}'",
                span,
                notes=[(seen[name], "first declared here")],
            )
        else:
            seen[name] = span

    # ---------------------------------------------------------------- expressions
    def check_expr(self, expr: ast.Expr, scope: Scope) -> None:
        reported: set[str] = set()
        for node in walk_expr(expr):
            if isinstance(node, ast.Var):
                self.check_var_use(node, scope, reported)
            elif isinstance(node, ast.Name):
                self.check_name_use(node, scope)
            elif isinstance(node, ast.Call):
                self.check_call(node, scope)

    def check_var_use(self, var: ast.Var, scope: Scope, reported: set[str]) -> None:
        if scope.where in ("semantics", "attribute default"):
            self.error(
                MisuseError,
                f"?{var.name}: op semantics name operands without '?'",
                var.span,
                f"write {var.name}",
            )
            return
        if var.name in scope.bound or var.name in reported:
            return
        reported.add(var.name)
        self.report_unbound(var.name, var.span, scope)

    def report_unbound(self, name: str, span: ast.Span, scope: Scope) -> None:
        hint = suggest(name, scope.bound, prefix="?")
        if not hint:
            bound = ", ".join(f"?{v}" for v in sorted(scope.bound)) or "none"
            hint = f"variables bound by {scope.bound_by}: {bound}"
        self.error(
            UnboundVariableError,
            f"variable ?{name} is not bound on {scope.bound_by}",
            span,
            hint,
        )

    def check_name_use(self, name: ast.Name, scope: Scope) -> None:
        if scope.where == "semantics":
            if name.name in scope.operands:
                return
            owner = scope.owner.name if scope.owner else "the op"
            hint = suggest(name.name, scope.operands) or (
                "operands and attributes: " + (", ".join(sorted(scope.operands)) or "none")
            )
            self.error(
                UnknownNameError,
                f"unknown operand '{name.name}' in the semantics of {owner}",
                name.span,
                hint,
            )
            return
        if (
            name.name in DTYPE_NAMES
            or name.name in GUARD_CONSTANTS
            or scope.where == "attribute default"
        ):
            return
        for op in scope.lhs_ops:
            if any(a.name == name.name for a in op.attrs):
                self.error(
                    UnknownNameError,
                    f"attribute '{name.name}' cannot be read by name in a {scope.where}",
                    name.span,
                    f"bind it in the pattern, {op.name}(..., {name.name}=?{name.name}), "
                    f"and use ?{name.name}",
                )
                return
        for op in scope.lhs_ops:
            close = suggest(name.name, [a.name for a in op.attrs])
            if close:
                self.error(
                    UnknownNameError,
                    f"'{name.name}' is not an attribute of {op.name}",
                    name.span,
                    f"{close} (bind attributes in the pattern and use the ?variable)",
                )
                return
        hint = suggest(name.name, DTYPE_NAMES + GUARD_CONSTANTS) or (
            "a bare name here must be a dtype (float32, int64, ...) or true/false; "
            "bind values as ?variables in the pattern"
        )
        self.error(
            UnknownNameError, f"unknown name '{name.name}' in a {scope.where}", name.span, hint
        )

    def check_call(self, call: ast.Call, scope: Scope) -> None:
        span = name_span(call.span, call.func)
        if call.func[:1].isupper():
            op = self.ops.get(call.func)
            if scope.where != "semantics":
                self.error(
                    MisuseError,
                    f"operator {call.func} cannot be called in a {scope.where}",
                    span,
                    "guards and computed attributes call built-in functions only",
                )
            elif op is None and call.func not in self.broken_ops:
                self.unknown_op(call.func, span)
            elif op is not None:
                self.check_operand_count(op, len(call.args), call.span)
            return
        builtin = BUILTINS.get(call.func)
        if builtin is None:
            hint = suggest(call.func, BUILTINS) or "see builtins_reference() for the list"
            self.error(UnknownNameError, f"unknown built-in function '{call.func}'", span, hint)
            return
        if builtin.category == "constructor":
            self.error(
                MisuseError,
                f"'{call.func}' builds a constant tensor: use it as an operand on a "
                "right-hand side, not inside an expression",
                span,
            )
            return
        if scope.where == "semantics" and builtin.category != "scalar":
            self.error(
                MisuseError,
                f"'{call.func}' cannot be used in op semantics",
                span,
                "semantics are scalar expressions over the operands (exp, log, max, ...)",
            )
            return
        self.check_builtin_args(call.func, call.args, call.span, scope)

    def check_builtin_args(
        self, func: str, args: tuple[ast.Expr, ...], span: ast.Span, scope: Scope
    ) -> None:
        builtin = BUILTINS[func]
        if len(args) != builtin.arity:
            plural = "" if builtin.arity == 1 else "s"
            self.error(
                ArityError,
                f"'{func}' takes {builtin.arity} argument{plural}, got {len(args)}",
                span,
                builtin.signature(),
            )
            return
        for kind, arg in zip(builtin.params, args, strict=True):
            if not isinstance(arg, ast.Var):
                continue
            bound = scope.bound.get(arg.name)
            if kind == "tensor" and bound == ATTRIBUTE:
                self.error(
                    MisuseError,
                    f"'{func}' takes a tensor, but ?{arg.name} is bound to an attribute",
                    arg.span,
                    builtin.signature(),
                )

    # ---------------------------------------------------------------- rules
    def unknown_op(self, name: str, span: ast.Span) -> None:
        hint = suggest(name, self.ops) or (
            "declare it with: op " + name + "(...) : mapping layout dynamism"
        )
        self.error(UnknownNameError, f"unknown operator '{name}'", span, hint)

    def check_operand_count(self, op: ast.OpDecl, count: int, span: ast.Span) -> None:
        fewest, most = arity_range(op)
        if count >= fewest and (most is None or count <= most):
            return
        self.error(
            ArityError,
            f"{op.name} takes {describe_arity(op)}, got {count}",
            span,
            notes=[(op.span, f"{op.name} is declared here")],
        )

    def check_rule(self, rule: ast.Rule) -> None:
        first = self.rule_names.get(rule.name)
        if first is not None:
            self.error(
                DuplicateError,
                f"rule '{rule.name}' is defined twice",
                rule.name_span,
                "rule names are global to a load; rename one",
                [(first.name_span, "first defined here")],
            )
        else:
            self.rule_names[rule.name] = rule
        self.check_rewrite_is_new(rule)
        for flag, span in rule.flag_spans:
            if flag not in RULE_FLAGS:
                hint = suggest(flag, RULE_FLAGS) or "rule flags: " + ", ".join(RULE_FLAGS)
                self.error(UnknownNameError, f"unknown rule flag '{flag}'", span, hint)

        errors_before = len(self.diagnostics)
        sides = [(rule.lhs, "left-hand side")]
        if rule.bidirectional:
            sides.append((rule.rhs, "right-hand side"))
        for side, where in sides:
            # A call-shaped side (PCompute) gets its own, more precise, error.
            if not isinstance(side, (ast.POp, ast.PCompute)):
                self.error(
                    MisuseError,
                    f"the {where} of a rule must be an operator pattern, such as Neg(?x)",
                    side.span,
                    "use '=>' if only the left-hand side is an operator pattern"
                    if rule.bidirectional
                    else "",
                )

        lhs_vars = self.bindings(rule.lhs)
        lhs_ops = tuple(self.ops[o] for o in self.op_names(rule.lhs) if o in self.ops)
        self.check_pattern(rule.lhs, matching=True)
        if any(d.kind is MisuseError for d in self.diagnostics[errors_before:]):
            return  # a malformed left-hand side binds nothing useful; avoid a cascade
        if rule.bidirectional:
            rhs_vars = self.bindings(rule.rhs)
            self.check_pattern(rule.rhs, matching=True)
            self.check_bound_both_ways(rule, lhs_vars, rhs_vars)
            bound = {v: k for v, k in lhs_vars.items() if v in rhs_vars}
        else:
            self.check_pattern(
                rule.rhs, matching=False, scope=Scope("right-hand side", bound=lhs_vars)
            )
            bound = lhs_vars
        if rule.guard is not None:
            by = "both sides" if rule.bidirectional else "the left-hand side"
            self.check_expr(rule.guard, Scope("guard", bound=bound, lhs_ops=lhs_ops, bound_by=by))

    def check_rewrite_is_new(self, rule: ast.Rule) -> None:
        """A rule that repeats another (or rewrites a pattern to itself) only costs time."""
        lhs, rhs, guard = without_spans((rule.lhs, rule.rhs, rule.guard))
        if lhs == rhs:
            self.error(
                MisuseError,
                f"rule '{rule.name}' rewrites a pattern to itself",
                rule.name_span,
                "delete it, or change one side",
            )
            return
        keys = [(lhs, rhs, guard, rule.bidirectional)]
        if rule.bidirectional:
            keys.append((rhs, lhs, guard, True))
        first = next((self.rewrites[k] for k in keys if k in self.rewrites), None)
        if first is not None:
            self.error(
                DuplicateError,
                f"rule '{rule.name}' is the same rewrite as rule '{first.name}'",
                rule.name_span,
                "delete one of them",
                [(first.name_span, f"'{first.name}' is here")],
            )
            return
        self.rewrites[keys[0]] = rule

    def check_bound_both_ways(
        self, rule: ast.Rule, lhs_vars: dict[str, str], rhs_vars: dict[str, str]
    ) -> None:
        for side, others, where in (
            (rule.rhs, lhs_vars, "the left-hand side"),
            (rule.lhs, rhs_vars, "the right-hand side"),
        ):
            scope = Scope("bidirectional rule", bound=others, bound_by=where)
            reported: set[str] = set()
            for name, span in self.var_occurrences(side):
                if name not in others and name not in reported:
                    reported.add(name)
                    self.report_unbound(name, span, scope)

    def bindings(self, pattern: ast.Pattern) -> dict[str, str]:
        """Variables a matching pattern binds: tensors (operands) and attributes."""
        found: dict[str, str] = {}
        for node in self.walk_pattern(pattern):
            if isinstance(node, ast.PVar):
                found.setdefault(node.name, TENSOR)
            elif isinstance(node, ast.POp):
                for _, value in node.attrs:
                    if isinstance(value, ast.Var):
                        found.setdefault(value.name, ATTRIBUTE)
            elif isinstance(node, ast.PCompute):  # an error itself; don't cascade
                for arg in node.args:
                    for sub in walk_expr(arg):
                        if isinstance(sub, ast.Var):
                            found.setdefault(sub.name, TENSOR)
        return found

    def var_occurrences(self, pattern: ast.Pattern) -> Iterator[tuple[str, ast.Span]]:
        for node in self.walk_pattern(pattern):
            if isinstance(node, ast.PVar):
                yield node.name, node.span
            elif isinstance(node, ast.POp):
                for _, value in node.attrs:
                    for sub in walk_expr(value):
                        if isinstance(sub, ast.Var):
                            yield sub.name, sub.span
            elif isinstance(node, ast.PCompute):
                for arg in node.args:
                    for sub in walk_expr(arg):
                        if isinstance(sub, ast.Var):
                            yield sub.name, sub.span

    def walk_pattern(self, pattern: ast.Pattern) -> Iterator[ast.Pattern]:
        yield pattern
        if isinstance(pattern, ast.POp):
            for child in pattern.inputs:
                yield from self.walk_pattern(child)

    def op_names(self, pattern: ast.Pattern) -> list[str]:
        return [p.op for p in self.walk_pattern(pattern) if isinstance(p, ast.POp)]

    def check_pattern(
        self, pattern: ast.Pattern, matching: bool, scope: Scope | None = None
    ) -> None:
        for node in self.walk_pattern(pattern):
            if isinstance(node, ast.POp):
                self.check_pop(node, matching, scope)
            elif isinstance(node, ast.PCompute):
                self.check_pcompute(node, matching, scope)
            elif isinstance(node, ast.PVar) and scope is not None:
                kind = scope.bound.get(node.name)
                if kind is None:
                    self.report_unbound(node.name, node.span, scope)
                elif kind == ATTRIBUTE:
                    self.error(
                        MisuseError,
                        f"?{node.name} is bound to an attribute, not a tensor",
                        node.span,
                        f"turn it into a tensor with vector(?{node.name}) or scalar(?{node.name})",
                    )

    def check_pop(self, node: ast.POp, matching: bool, scope: Scope | None) -> None:
        op = self.ops.get(node.op)
        if op is None:
            if node.op not in self.broken_ops:
                self.unknown_op(node.op, name_span(node.span, node.op))
        else:
            self.check_operand_count(op, len(node.inputs), node.span)
        seen: dict[str, ast.Span] = {}
        spans = node.attr_spans or tuple(value.span for _, value in node.attrs)
        for (name, value), span in zip(node.attrs, spans, strict=False):
            self.check_unique(name, span, seen, f"attribute of {node.op}")
            if op is not None and not any(a.name == name for a in op.attrs):
                names = [a.name for a in op.attrs]
                hint = suggest(name, names) or (
                    f"{op.name} declares attributes: {', '.join(names)}"
                    if names
                    else f"{op.name} declares no attributes"
                )
                self.error(UnknownNameError, f"{op.name} has no attribute '{name}'", span, hint)
            if matching:
                if not isinstance(value, ast.Var) and not is_literal(value):
                    self.error(
                        MisuseError,
                        f"attribute '{name}' in a pattern must be a ?variable or a literal",
                        value.span,
                        "compute values on the right-hand side or test them in a guard",
                    )
                else:
                    for sub in walk_expr(value):
                        if isinstance(sub, ast.Name):
                            self.check_name_use(sub, Scope("pattern", lhs_ops=(op,) if op else ()))
            elif scope is not None:
                self.check_expr(value, scope)

    def check_pcompute(self, node: ast.PCompute, matching: bool, scope: Scope | None) -> None:
        span = name_span(node.span, node.func)
        builtin = BUILTINS.get(node.func)
        if builtin is None or builtin.category != "constructor":
            op_hint = suggest(node.func, self.ops)
            if builtin is None and (op_hint or matching):
                self.unknown_op(node.func, span)
                return
            if builtin is None:
                constructors = [b for b, v in BUILTINS.items() if v.category == "constructor"]
                hint = suggest(
                    node.func, constructors
                ) or "right-hand-side constants are built by " + (
                    " or ".join(f"{c}(...)" for c in constructors)
                )
                self.error(
                    UnknownNameError, f"unknown constant constructor '{node.func}'", span, hint
                )
                return
            self.error(
                MisuseError,
                f"'{node.func}' is not a constant constructor and cannot stand for a tensor",
                span,
                "tensors on a right-hand side are ?variables, operators, numbers, "
                "scalar(...) or vector(...)",
            )
            return
        if matching:
            self.error(
                MisuseError,
                f"{node.func}(...) computes a constant and can only appear on a right-hand side",
                span,
                "match constants with a number, or bind them with ?variables and a guard",
            )
            return
        if scope is not None:
            self.check_builtin_args(node.func, node.args, node.span, scope)
            for arg in node.args:
                self.check_expr(arg, scope)

    # ---------------------------------------------------------------- fusion, limits, schedule
    def check_fuse(self, entry: ast.FuseEntry) -> None:
        spans = entry.part_spans or (entry.span,) * 4
        for value, span in (
            (entry.first, spans[0]),
            (entry.second, spans[1]),
            (entry.result, spans[2]),
        ):
            if value is not None:
                self.check_class(value, MAPPING_CLASSES, "mapping", span)
        if entry.verdict not in FUSION_VERDICTS:
            hint = suggest(entry.verdict, FUSION_VERDICTS) or "verdicts: " + ", ".join(
                FUSION_VERDICTS
            )
            self.error(
                UnknownNameError, f"unknown fusion verdict '{entry.verdict}'", spans[3], hint
            )
        cell = (entry.first, entry.second)
        first = self.fuse_cells.get(cell)
        if first is not None:
            self.error(
                DuplicateError,
                f"fusion of {entry.first} then {entry.second} is given twice",
                entry.span,
                notes=[(first.span, "first given here")],
            )
        else:
            self.fuse_cells[cell] = entry

    def check_single(self, decl: ast.LimitsDecl | ast.ScheduleDecl, what: str) -> bool:
        first = self.limits if isinstance(decl, ast.LimitsDecl) else self.schedule
        if first is None:
            if isinstance(decl, ast.LimitsDecl):
                self.limits = decl
            else:
                self.schedule = decl
            return True
        self.error(
            DuplicateError,
            f"a second '{what}' block",
            decl.span,
            f"a load may have one '{what}' block",
            [(first.span, "the first one is here")],
        )
        return False

    def check_limits(self, decl: ast.LimitsDecl) -> None:
        self.check_single(decl, "limits")
        seen: dict[str, ast.Span] = {}
        for item in decl.items:
            if item.name not in LIMIT_NAMES:
                hint = suggest(item.name, LIMIT_NAMES) or "limits: " + ", ".join(LIMIT_NAMES)
                self.error(UnknownNameError, f"unknown limit '{item.name}'", item.span, hint)
                continue
            self.check_unique(item.name, item.span, seen, "limit")
            if item.name != "seconds" and not isinstance(item.value, int):
                self.error(MisuseError, f"limit '{item.name}' must be an integer", item.span)
            elif not item.value > 0:
                self.error(MisuseError, f"limit '{item.name}' must be positive", item.span)

    def check_schedule(self, decl: ast.ScheduleDecl) -> None:
        self.check_single(decl, "schedule")
        self.check_steps(decl.steps)

    def check_steps(self, steps: tuple[ast.ScheduleStep, ...]) -> None:
        for step in steps:
            if isinstance(step, ast.Repeat):
                if step.times < 1:
                    self.error(MisuseError, "repeat needs a count of at least 1", step.span)
                self.check_steps(step.body)
                continue
            if isinstance(step, ast.RunTimes) and step.times < 1:
                self.error(MisuseError, "run needs a count of at least 1", step.span)
            spans = step.name_spans or (step.span,) * len(step.rulesets)
            for name, span in zip(step.rulesets, spans, strict=False):
                if name in self.rulesets or name in self.broken_rulesets:
                    continue
                hint = suggest(name, self.rulesets) or (
                    "rulesets: " + (", ".join(sorted(self.rulesets)) or "none")
                )
                self.error(UnknownNameError, f"unknown ruleset '{name}'", span, hint)


def check_files(files: Sequence[ParsedFile], lines: SourceLines) -> list[Diagnostic]:
    """Every semantic error of one load, in source order."""
    return Checker(files, lines).run()
