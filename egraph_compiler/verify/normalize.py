"""A rule in the form the checker wants: the DSL's normal form (`dsl/normalize.py`, the
same one the e-graph lowering consumes: every attribute explicit, a left-out left-hand
attribute a wildcard per occurrence, a left-out right-hand one its declared default),
spans stripped, plus what only the checker needs:

- A constant on the left matches a constant tensor of *any* shape whose elements
  all equal it: it becomes a tensor variable ``#c0`` with a fixed value.
- A Reshape's (Expand's, ConstantOfShape's) target rank is a hidden attribute.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from egraph_compiler.dsl import ast
from egraph_compiler.dsl.normalize import normalize_rule


def strip_spans(node: object) -> object:
    """The same AST without source positions, so equal subtrees compare equal."""
    if isinstance(node, tuple):
        return tuple(strip_spans(item) for item in node)
    if isinstance(node, frozenset):
        return node
    if not dataclasses.is_dataclass(node) or isinstance(node, type):
        return node
    changes: dict[str, object] = {}
    for f in dataclasses.fields(node):
        value = getattr(node, f.name)
        if f.name == "span" or f.name.endswith("_span"):
            changes[f.name] = ast.NO_SPAN
        elif f.name.endswith("_spans"):
            changes[f.name] = ()
        elif f.name == "doc":
            changes[f.name] = ""
        else:
            changes[f.name] = strip_spans(value)
    return dataclasses.replace(node, **changes)  # type: ignore[type-var]


@dataclass(frozen=True)
class CanonRule:
    rule: ast.Rule
    lhs: ast.Pattern
    rhs: ast.Pattern
    guard: ast.Expr | None
    tensor_vars: tuple[str, ...]  # left-hand side order; ``#cN`` are constants
    const_values: tuple[tuple[str, float], ...]
    ops: tuple[str, ...]
    problems: tuple[str, ...]  # reasons the rule cannot be encoded at all


class _Canon:
    def __init__(self, ops: dict[str, ast.OpDecl]) -> None:
        self.ops = ops
        self.consts: list[tuple[str, float]] = []
        self.tensor_vars: list[str] = []
        self.problems: list[str] = []
        self.lhs_nodes: list[ast.POp] = []
        self.used: set[str] = set()

    def lhs(self, p: ast.Pattern) -> ast.Pattern:
        if isinstance(p, ast.PVar):
            if p.name not in self.tensor_vars:
                self.tensor_vars.append(p.name)
            return p
        if isinstance(p, ast.PConst):
            name = f"#c{len(self.consts)}"
            self.consts.append((name, p.value))
            self.tensor_vars.append(name)
            return ast.PVar(name)
        if isinstance(p, ast.PCompute):
            self.problems.append(f"`{p.func}(...)` may only appear on a right-hand side")
            return p
        node = self._node(p, tuple(self.lhs(i) for i in p.inputs))
        self.lhs_nodes.append(node)
        return node

    def _node(self, p: ast.POp, inputs: tuple[ast.Pattern, ...]) -> ast.POp:
        attrs = dict(p.attrs)
        decl = self.ops.get(p.op)
        self.used.add(p.op)
        if decl is None:
            self.problems.append(f"unknown operator {p.op}")
        self._reshape_rank(decl, inputs, attrs)
        return ast.POp(p.op, inputs, tuple(sorted(attrs.items())))

    def _reshape_rank(self, decl: ast.OpDecl | None, inputs: tuple[ast.Pattern, ...],
                      attrs: dict[str, ast.Expr]) -> None:
        """A Reshape's target rank is an enumerated hidden attribute, shared by every
        Reshape to the same shape variable; a ``vector(...)`` target's length is an
        attribute computed from its list (``_target_len``)."""
        kinds = {"reshape": ("Reshape", 1), "expand": ("Expand", 1),
                 "constant_of_shape": ("ConstantOfShape", 0)}
        if decl is None or decl.builtin not in kinds:
            return
        kind, position = kinds[decl.builtin]
        if len(inputs) <= position:
            return
        target = inputs[position]
        if isinstance(target, ast.PVar):
            attrs["_out_rank"] = ast.Var(f"_{kind}0_rank_{target.name.lstrip('#')}")
        elif isinstance(target, ast.PCompute) and target.func == "vector" and target.args:
            attrs["_target_len"] = ast.Call("len", (target.args[0],))

    def rhs(self, p: ast.Pattern) -> ast.Pattern:
        if (isinstance(p, ast.PCompute) and p.func == "vector" and len(p.args) == 1
                and isinstance(p.args[0], ast.Var) and p.args[0].name in self.tensor_vars):
            # vector(?s) of a tensor ?s: the constant with ?s's value (the e-graph builds
            # it only once ?s's value is known), so the same tensor as ?s
            return ast.PVar(p.args[0].name)
        if not isinstance(p, ast.POp):
            return p
        return self._node(p, tuple(self.rhs(i) for i in p.inputs))


def canonical(rule: ast.Rule, ops: dict[str, ast.OpDecl]) -> CanonRule:
    normal = normalize_rule(rule, ops)
    stripped = strip_spans(rule)
    assert isinstance(stripped, ast.Rule)
    canon = _Canon(ops)
    lhs = canon.lhs(strip_spans(normal.lhs))  # type: ignore[arg-type]
    rhs = canon.rhs(strip_spans(normal.rhs))  # type: ignore[arg-type]
    for name in _pattern_vars(rhs):
        if name not in canon.tensor_vars:
            canon.problems.append(f"?{name} on the right-hand side is not bound on the left")
    return CanonRule(rule, lhs, rhs, stripped.guard, tuple(canon.tensor_vars),
                     tuple(canon.consts), tuple(sorted(canon.used)), tuple(canon.problems))


def _pattern_vars(p: ast.Pattern) -> list[str]:
    if isinstance(p, ast.PVar):
        return [p.name]
    if isinstance(p, ast.POp):
        return [name for i in p.inputs for name in _pattern_vars(i)]
    return []


def subpatterns(p: ast.Pattern) -> list[ast.Pattern]:
    """Every node of a pattern, children before parents."""
    out: list[ast.Pattern] = []
    if isinstance(p, ast.POp):
        for child in p.inputs:
            out.extend(subpatterns(child))
    out.append(p)
    return out


_TENSOR_FACTS = {"rank", "shape", "dim", "numel", "dtype", "is_const", "same_shape",
                 "broadcastable", "nonzero", "positive", "nonneg"}


def list_used_vars(canon: CanonRule) -> frozenset[str]:
    """Tensor variables whose values the rule reads as an int list (``?s`` in
    ``reshape_shape(shape(?x), ?s)``), not only their shape or facts."""
    found: set[str] = set()

    def expr(e: object, as_tensor: bool = False) -> None:
        if isinstance(e, ast.Var):
            if not as_tensor and e.name in canon.tensor_vars:
                found.add(e.name)
        else:
            tensor_args = isinstance(e, ast.Call) and e.func in _TENSOR_FACTS
            for sub in ast.sub_expressions(e):  # type: ignore[arg-type]
                expr(sub, tensor_args)

    def pattern(p: ast.Pattern) -> None:
        if isinstance(p, ast.PCompute):
            for a in p.args:
                expr(a)
        elif isinstance(p, ast.POp):
            for child in p.inputs:
                pattern(child)
            for _name, value in p.attrs:
                expr(value)

    expr(canon.guard)
    pattern(canon.lhs)
    pattern(canon.rhs)
    return frozenset(found)


def _boolean_params(decl: ast.OpDecl) -> set[str]:
    """Inputs an elementwise operator reads as conditions (``not x``, ``a and b``,
    ``select(c, ...)``): ONNX gives them boolean tensors."""
    found: set[str] = set()

    def walk(e: ast.Expr) -> None:
        cond: list[ast.Expr] = []
        if isinstance(e, ast.UnOp) and e.op == "not":
            cond = [e.operand]
        elif isinstance(e, ast.BinOp) and e.op in ("and", "or"):
            cond = [e.lhs, e.rhs]
        elif isinstance(e, ast.Call) and e.func in ("select", "where") and e.args:
            cond = [e.args[0]]
        found.update(c.name for c in cond if isinstance(c, ast.Name))
        for sub in ast.sub_expressions(e):
            walk(sub)

    if decl.semantics is not None:
        walk(decl.semantics)
    return found


def boolean_vars(canon: CanonRule, ops: dict[str, ast.OpDecl]) -> frozenset[str]:
    """Tensor variables of the rule that some operator reads as a condition: their
    elements are 0 or 1 (booleans), in the solver and in the fuzz."""
    return frozenset(child.name for p in (*subpatterns(canon.lhs), *subpatterns(canon.rhs))
                     if isinstance(p, ast.POp) and p.op in ops
                     for param, child in zip(ops[p.op].params, p.inputs, strict=False)
                     if isinstance(child, ast.PVar) and param.name in _boolean_params(ops[p.op]))
