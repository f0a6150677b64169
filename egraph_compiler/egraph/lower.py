"""Lower DSL rules one-to-one to egglog rules.

``lhs => rhs when g`` becomes ``(rule (query of lhs, native parts of g)
((union root rhs) (Prov t "name") (Fresh t)...) :ruleset rs_<set> :name "name")``.
Pattern constants match all-equal constants through ``splat``; ``is_const``,
``nonneg``, ``positive``, ``nonzero`` in a top-level conjunction of the guard are
relation atoms; ``compose(?p, ?q)`` is native (``unstable-vec-map`` of
``vec-get``). Every other guard conjunct or computed attribute is evaluated in
Python, batched: rule ``name#ask`` records the primitive key (attribute values,
shapes, dtypes, small constant values) in ``Ask_<k>``; Python answers the new keys
after the iteration in ``Ok_<k>`` (guard true, with the computed values); rule
``name`` then applies on ``Ok_<k>`` in the ruleset's ``__apply`` companion, run
right after, so a guarded rule fires in the same iteration as an unguarded one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from egraph_compiler.dsl.ast import (
    Call,
    Expr,
    ListLit,
    Name,
    Num,
    Pattern,
    PCompute,
    PConst,
    POp,
    PVar,
    Rule,
    Str,
    UnOp,
    Var,
    sub_expressions,
)
from egraph_compiler.dsl.normalize import (
    NormalRule,
    is_filled_default,
    normalize_rule,
    pinned_ranks,
    rank_limits,
)
from egraph_compiler.egraph import text
from egraph_compiler.egraph.guards import BOOL_FACTS
from egraph_compiler.egraph.schema import ATTR_SORT, LoweringError, OpSchema, const_value, literal

SHAPE_CALLS = ("rank", "shape", "dim", "numel", "same_shape", "broadcastable")
# Variable kinds: "tensor" for a pattern variable bound to an e-class, else the
# attribute kind; a tensor-valued attribute (a constant-table handle) is "tensorattr".
KIND_SORT = {("tensorattr" if k == "tensor" else k): v for k, v in ATTR_SORT.items()}


def _attr_kind(kind: str) -> str:
    return "tensorattr" if kind == "tensor" else kind


def ruleset_name(name: str) -> str:
    return f"rs_{name}"


def apply_ruleset_name(name: str) -> str:
    return f"rs_{name}__apply"


@dataclass(frozen=True, slots=True)
class KeyColumn:
    """One primitive column of an oracle key: what it is and how to decode it."""

    var: str  # DSL variable name
    what: str  # "attr" | "shape" | "dtype" | "value" | "unit" (placeholder)
    sort: str  # egglog sort
    egg: str  # egglog variable


@dataclass
class GuardOracle:
    index: int
    rule_name: str
    keys: list[KeyColumn]
    checks: list[Expr]
    computed: list[tuple[Expr, str]]  # (expression, result kind: attr kind | "scalar" | "vector")

    @property
    def ask(self) -> str:
        return f"Ask_{self.index}"

    @property
    def ok(self) -> str:
        return f"Ok_{self.index}"


@dataclass
class LoweredRule:
    rule: Rule
    egglog_name: str  # :name of the applying rule (counts fires)
    ask_name: str | None  # :name of the recording rule (counts matches), if any
    text: str
    oracle: GuardOracle | None = None


@dataclass
class _Ctx:
    schemas: dict[str, OpSchema]
    rule: Rule
    bound: dict[str, tuple[str, str]] = field(default_factory=dict)  # var -> (egg var, kind)
    wildcards: frozenset[str] = frozenset()  # left-out left-hand attributes (match anything)
    atoms: list[str] = field(default_factory=list)
    counter: int = 0

    def fresh(self, prefix: str = "_t") -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def fail(self, message: str) -> LoweringError:
        return LoweringError(f"{self.rule.span}: rule {self.rule.name}: {message}")


def _schema(ctx: _Ctx, op: str) -> OpSchema:
    if op not in ctx.schemas:
        raise ctx.fail(f"operator '{op}' is not declared")
    return ctx.schemas[op]


def _bind(ctx: _Ctx, name: str, kind: str) -> str:
    if name in ctx.bound:
        egg, known = ctx.bound[name]
        if known != kind:
            raise ctx.fail(f"?{name} is used both as {known} and as {kind}")
        return egg
    egg = f"v_{name}"
    ctx.bound[name] = (egg, kind)
    return egg


# ---------------------------------------------------------------- left-hand side


def _lhs(ctx: _Ctx, pattern: Pattern) -> str:
    """Add query atoms matching ``pattern``; return the egglog variable of its class."""
    if isinstance(pattern, PVar):
        return _bind(ctx, pattern.name, "tensor")
    if isinstance(pattern, PConst):
        var = ctx.fresh("_c")
        ctx.atoms.append(f"(= {text.f64(float(pattern.value))} (splat {var}))")
        ctx.atoms.append(f"(is_const {var})")
        return var
    if isinstance(pattern, PCompute):
        raise ctx.fail(f"{pattern.func}(...) builds a constant and may only appear on a right-hand side")
    schema = _schema(ctx, pattern.op)
    # the operator atom goes before its children's: egglog's planner follows the
    # written order where sizes tie, and joining from the root avoids crossing
    # children that share a variable (two Reshapes of the same target shape)
    slot = len(ctx.atoms)
    ctx.atoms.append("")
    args = _lhs_inputs(ctx, schema, pattern)
    given = dict(pattern.attrs)
    for attr in schema.attrs:
        expr = given.pop(attr.name, None)
        if expr is None or (isinstance(expr, Var) and expr.name in ctx.wildcards):
            args.append(ctx.fresh("_a"))
        elif isinstance(expr, Var):
            args.append(_bind(ctx, expr.name, _attr_kind(attr.type)))
        else:
            value = const_value(expr)
            if attr.type in ("ints", "floats", "strings") and not isinstance(value, tuple):
                value = (value,)
            var = ctx.fresh("_a")
            ctx.atoms.append(f"(= {var} {literal(attr.type, value)})")
            args.append(var)
    if given:
        raise ctx.fail(f"{pattern.op} has no attribute '{next(iter(given))}'")
    var = ctx.fresh()
    ctx.atoms[slot] = f"(= {var} ({schema.egglog} {' '.join(args)}))" if args else f"(= {var} ({schema.egglog}))"
    _forbid_constant_broadcast(ctx, schema, pattern, args, var)
    return var


def _forbid_constant_broadcast(ctx: _Ctx, schema: OpSchema, pattern: POp, args: list[str], var: str) -> None:
    """A pattern constant (``Pow(?a, 2)``) matches any all-equal constant tensor,
    whatever its shape; one that broadcasts would change the op's output shape
    (``Pow(x[3], c[4,1])`` is ``[4,3]``, ``Square(x)`` is ``[3]``). So the match
    also requires the op's shape to equal each non-constant operand's: the
    constant then only fills in values. Unknown shapes do not match."""
    if schema.variadic_index is not None:
        return
    inputs = list(zip(pattern.inputs, args, strict=False))
    if not any(isinstance(p, PConst) for p, _ in inputs):
        return
    for sub, egg in inputs:
        if not isinstance(sub, PConst):
            ctx.atoms.append(f"(= (shape {var}) (shape {egg}))")


def _lhs_inputs(ctx: _Ctx, schema: OpSchema, pattern: POp) -> list[str]:
    def absent() -> str:
        var = ctx.fresh("_o")
        ctx.atoms.append(f"(= {var} (Absent))")
        return var

    return _operands(ctx, schema, list(pattern.inputs), lambda p: _lhs(ctx, p), lambda ps: _lhs_list(ctx, ps), absent)


def _operands(ctx: _Ctx, schema: OpSchema, inputs: list[Pattern], one: Callable[[Pattern], str],
              many: Callable[[list[Pattern]], str], absent: Callable[[], str]) -> list[str]:
    """A pattern's inputs matched to ``schema``'s operands: ``one`` of each given, ``many``
    of a variadic operand's, ``absent()`` for an optional one not given."""
    params = schema.decl.params
    args: list[str] = []
    for i, param in enumerate(params):
        if param.variadic:
            return [*args, many(inputs[i:])]
        if i < len(inputs):
            args.append(one(inputs[i]))
        elif param.optional:
            args.append(absent())
        else:
            raise ctx.fail(f"{schema.name} needs input '{param.name}'")
    if len(inputs) > len(params):
        raise ctx.fail(f"{schema.name} takes {len(params)} input(s), the pattern gives {len(inputs)}")
    return args


def _lhs_list(ctx: _Ctx, items: list[Pattern]) -> str:
    tail = ctx.fresh("_l")
    ctx.atoms.append(f"(= {tail} (TNil))")
    for item in reversed(items):
        head = _lhs(ctx, item)
        cell = ctx.fresh("_l")
        ctx.atoms.append(f"(= {cell} (TCons {head} {tail}))")
        tail = cell
    return tail


# ---------------------------------------------------------------- right-hand side


@dataclass
class _Rhs:
    actions: list[str] = field(default_factory=list)
    computed: list[tuple[Expr, str, str]] = field(default_factory=list)  # (expr, kind, egg var)
    needs_dtype: bool = False


def _native_value(ctx: _Ctx, expr: Expr, kind: str) -> str | None:
    """egglog expression for an attribute value, or None when Python must compute it."""
    if isinstance(expr, Var):
        if expr.name in ctx.bound and ctx.bound[expr.name][1] == kind:
            return ctx.bound[expr.name][0]
        if expr.name in ctx.bound and kind == "float" and ctx.bound[expr.name][1] == "int":
            return f"(to-f64 {ctx.bound[expr.name][0]})"
        if expr.name not in ctx.bound:
            raise ctx.fail(f"?{expr.name} on the right-hand side is not bound on the left")
        return None
    if isinstance(expr, (Num, Str, ListLit, UnOp, Name)):
        try:
            value = const_value(expr)
        except LoweringError:
            return None
        if kind in ("ints", "floats", "strings") and not isinstance(value, tuple):
            return None
        try:
            return literal("tensor" if kind == "tensorattr" else kind, value)
        except (TypeError, ValueError):
            return None
    if isinstance(expr, Call) and expr.func == "compose" and kind == "ints" and len(expr.args) == 2:
        p, q = expr.args
        if isinstance(p, Var) and isinstance(q, Var) and all(
            ctx.bound.get(v.name, ("", ""))[1] == "ints" for v in (p, q)
        ):
            pe, qe = ctx.bound[p.name][0], ctx.bound[q.name][0]
            ctx.atoms.append(f"(= (vec-length {pe}) (vec-length {qe}))")
            ctx.atoms.append(f"(> (vec-length {pe}) 0)")
            return f'(unstable-vec-map (unstable-fn "vec-get" {pe}) {qe})'
    return None


def _value_or_computed(ctx: _Ctx, rhs: _Rhs, expr: Expr, kind: str) -> str:
    native = _native_value(ctx, expr, _attr_kind(kind))
    if native is not None:
        return native
    _check_vars(ctx, expr)
    var = f"r{len(rhs.computed)}"
    rhs.computed.append((expr, kind, var))
    return var


def _check_vars(ctx: _Ctx, expr: Expr) -> None:
    for name in _vars(expr):
        if name not in ctx.bound:
            raise ctx.fail(f"?{name} is not bound on the left-hand side")


def _rhs(ctx: _Ctx, rhs: _Rhs, pattern: Pattern, root: str) -> str:
    if isinstance(pattern, PVar):
        if pattern.name not in ctx.bound or ctx.bound[pattern.name][1] != "tensor":
            raise ctx.fail(f"?{pattern.name} on the right-hand side is not a tensor bound on the left")
        return ctx.bound[pattern.name][0]
    if isinstance(pattern, PConst):
        rhs.needs_dtype = True
        return f"(ScalarConst {text.f64(float(pattern.value))} _dt)"
    if isinstance(pattern, PCompute):
        if pattern.func == "scalar" and len(pattern.args) == 1:
            rhs.needs_dtype = True
            return f"(ScalarConst {_value_or_computed(ctx, rhs, pattern.args[0], 'float')} _dt)"
        if pattern.func == "vector" and len(pattern.args) == 1:
            return f"(VecConst {_value_or_computed(ctx, rhs, pattern.args[0], 'ints')})"
        raise ctx.fail(f"unknown constant constructor {pattern.func}(...)")
    schema = _schema(ctx, pattern.op)
    def many(items: list[Pattern]) -> str:
        tail = "(TNil)"
        for item in reversed(items):
            tail = f"(TCons {_rhs(ctx, rhs, item, root)} {tail})"
        return tail

    args = _operands(ctx, schema, list(pattern.inputs), lambda p: _rhs(ctx, rhs, p, root), many, lambda: "(Absent)")
    given = dict(pattern.attrs)
    for attr in schema.attrs:
        expr = given.pop(attr.name, None)
        if expr is None or is_filled_default(expr, attr):
            args.append(literal(attr.type, schema.default(attr)))
        else:
            args.append(_value_or_computed(ctx, rhs, expr, attr.type))
    if given:
        raise ctx.fail(f"{pattern.op} has no attribute '{next(iter(given))}'")
    term = ctx.fresh("_n")
    body = f"({schema.egglog} {' '.join(args)})" if args else f"({schema.egglog})"
    rhs.actions.append(f"(let {term} {body})")
    rhs.actions.append(f"(Prov {term} {text.string(ctx.rule.name)})")
    rhs.actions.append(f"(Fresh {term})")
    return term


# ---------------------------------------------------------------- guards


def _vars(expr: Expr) -> list[str]:
    if isinstance(expr, Var):
        return [expr.name]
    found: list[str] = []
    for child in sub_expressions(expr):
        found += _vars(child)
    return found


def _uses(expr: Expr, var: str, parent: str | None = None) -> set[str]:
    """How a tensor variable is used: 'shape', 'dtype', 'value', 'bool:<fact>'."""
    if isinstance(expr, Var):
        if expr.name != var:
            return set()
        if parent in SHAPE_CALLS:
            return {"shape"}
        if parent == "dtype":
            return {"dtype"}
        if parent in BOOL_FACTS:
            return {f"bool:{parent}"}
        return {"value"}
    func = expr.func if isinstance(expr, Call) else None
    found: set[str] = set()
    for child in sub_expressions(expr):
        found |= _uses(child, var, func)
    return found


def _native_guard(ctx: _Ctx, expr: Expr) -> str | None:
    if (
        isinstance(expr, Call)
        and expr.func in BOOL_FACTS
        and len(expr.args) == 1
        and isinstance(expr.args[0], Var)
        and ctx.bound.get(expr.args[0].name, ("", ""))[1] == "tensor"
    ):
        return f"({expr.func} {ctx.bound[expr.args[0].name][0]})"
    return None


# ---------------------------------------------------------------- whole rules


def lower_rule(
    rule: Rule, schemas: dict[str, OpSchema], oracle_index: int, reverse: bool = False
) -> LoweredRule:
    # the one meaning of the rule, shared with the verifier (dsl/normalize.py)
    normal = normalize_rule(rule, {op: s.decl for op, s in schemas.items()}, reverse)
    lhs, rhs_pattern = normal.lhs, normal.rhs
    name = f"{rule.name}#reverse" if reverse else rule.name
    ctx = _Ctx(schemas, rule, wildcards=normal.wildcards)
    if not isinstance(lhs, POp):
        raise ctx.fail("a left-hand side must be an operator pattern" + (" (reverse direction of <=>)" if reverse else ""))
    root = _lhs(ctx, lhs)
    _limit_ranks(ctx, normal)
    python_checks: list[Expr] = []
    for conjunct in normal.conjuncts:
        native = _native_guard(ctx, conjunct)
        if native is not None:
            ctx.atoms.append(native)
        else:
            _check_vars(ctx, conjunct)
            python_checks.append(conjunct)
    rhs = _Rhs()
    term = _rhs(ctx, rhs, rhs_pattern, root)
    actions = rhs.actions + [f"(union {root} {term})", f"(Fired {text.string(rule.name)} {root})"]
    rs = ruleset_name(rule.ruleset)
    if not python_checks and not rhs.computed:
        if rhs.needs_dtype:
            ctx.atoms.append(f"(= _dt (dtype {root}))")
        body = f"(rule ({' '.join(ctx.atoms)}) ({' '.join(actions)}) :ruleset {rs} :name {text.string(name)})"
        return LoweredRule(rule, name, None, body)
    oracle = _oracle(ctx, oracle_index, name, python_checks, rhs)
    query = " ".join(ctx.atoms)
    key = " ".join(k.egg for k in oracle.keys)
    results = " ".join(var for _, _, var in rhs.computed)
    ask_name = f"{name}#ask"
    sorts = " ".join(k.sort for k in oracle.keys)
    result_sorts = " ".join(_result_sort(kind) for _, kind, _ in rhs.computed)
    # The apply rule joins a record of the match with the answer on the key
    # columns. Re-matching the left-hand side there instead made egglog start from
    # the small answer table and cross the shape lookups of every class sharing a
    # shape (measured: seconds per iteration on densenet121).
    carried = [root] + sorted({egg for egg, _ in ctx.bound.values()} - {root})
    carried_sorts = ["T"] + [_sort_of(ctx, egg) for egg in carried[1:]]
    match = f"Match_{oracle.index}"
    apply_query = [f"({match} {' '.join(carried)} {key})", f"({oracle.ok} {key} {results})"]
    if rhs.needs_dtype:
        apply_query.append(f"(= _dt (dtype {root}))")
    body = "\n".join([
        f"(relation {oracle.ask} ({sorts}))",
        f"(relation {oracle.ok} ({sorts} {result_sorts}))",
        f"(relation {match} ({' '.join(carried_sorts)} {sorts}))",
        f"(rule ({query}) (({oracle.ask} {key}) ({match} {' '.join(carried)} {key})) "
        f":ruleset {rs} :name {text.string(ask_name)})",
        f"(rule ({' '.join(apply_query)}) ({' '.join(actions)}) "
        f":ruleset {apply_ruleset_name(rule.ruleset)} :name {text.string(name)})",
    ])
    return LoweredRule(rule, name, ask_name, body, oracle)


def _limit_ranks(ctx: _Ctx, normal: NormalRule) -> None:
    """Match only where every rank-sensitive variable has a rank `dnnr verify` checked
    (`dsl.normalize.rank_limits`); an unknown shape does not match."""
    pinned = pinned_ranks(normal.guard)
    limits = rank_limits(normal, {op: s.decl for op, s in ctx.schemas.items()})
    for var, limit in limits.items():
        if var in pinned or var not in ctx.bound:
            continue  # the guard fixes the rank already
        shape = ctx.fresh("_rk")
        ctx.atoms.append(f"(= {shape} (shape {ctx.bound[var][0]}))")
        ctx.atoms.append(f"(<= (vec-length {shape}) {limit})")


def _sort_of(ctx: _Ctx, egg: str) -> str:
    for bound_egg, kind in ctx.bound.values():
        if bound_egg == egg:
            return "T" if kind == "tensor" else KIND_SORT[kind]
    raise ctx.fail(f"internal: unknown variable {egg}")


def _result_sort(kind: str) -> str:
    return KIND_SORT.get(kind, "i64")


def _oracle(ctx: _Ctx, index: int, name: str, checks: list[Expr], rhs: _Rhs) -> GuardOracle:
    exprs = checks + [expr for expr, _, _ in rhs.computed]
    keys: list[KeyColumn] = []
    names: list[str] = []
    for expr in exprs:
        for var in _vars(expr):
            if var not in names:
                names.append(var)
    for var in names:
        egg, kind = ctx.bound[var]
        if kind != "tensor":
            keys.append(KeyColumn(var, "attr", KIND_SORT[kind], egg))
            continue
        uses: set[str] = set()
        for expr in exprs:
            uses |= _uses(expr, var)
        for use in sorted(uses):
            if use.startswith("bool:"):
                raise ctx.fail(
                    f"{use[5:]}(?{var}) is supported only as a top-level conjunct of the guard"
                )
            fn = {"shape": "shape", "dtype": "dtype", "value": "ivalue"}[use]
            col = f"_k_{use}_{var}"
            ctx.atoms.append(f"(= {col} ({fn} {egg}))")
            keys.append(KeyColumn(var, use, "String" if use == "dtype" else "IVec", col))
    if not keys:  # a guard over no variable still needs a (constant) key column
        keys.append(KeyColumn("", "unit", "i64", "0"))
    computed = [(expr, kind) for expr, kind, _ in rhs.computed]
    return GuardOracle(index, name, keys, checks, computed)
