"""Data-only AST of the rule language (`grammar/dnnr.lark`).

Every node carries a `Span` so a later stage (lowering, verification, the compile
report) can point back at the source. Nothing here imports another dnnr module.
Consumers: `dsl` builds it, `egraph` lowers it, `verify` proves it, `fusion`
reads the fusion table.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal


@dataclass(frozen=True, slots=True)
class Span:
    """Source range: 1-based line and column (lark's), ``end_col`` one past the last char."""

    file: str
    line: int
    col: int
    end_line: int
    end_col: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}"


NO_SPAN = Span("<builtin>", 0, 0, 0, 0)


# ---------------------------------------------------------------- expressions
# Used for guards (`when`), computed attributes, elementwise semantics
# (`= a + b`) and `requires` clauses.


@dataclass(frozen=True, slots=True)
class Var:
    """A pattern variable, ``?x``. ``name`` excludes the ``?``."""

    name: str
    span: Span = NO_SPAN


@dataclass(frozen=True, slots=True)
class Name:
    """A bare identifier: an operand of op semantics, an attribute, a dtype."""

    name: str
    span: Span = NO_SPAN


@dataclass(frozen=True, slots=True)
class Num:
    value: int | float
    span: Span = NO_SPAN


@dataclass(frozen=True, slots=True)
class Str:
    value: str
    span: Span = NO_SPAN


@dataclass(frozen=True, slots=True)
class ListLit:
    items: tuple[Expr, ...]
    span: Span = NO_SPAN


@dataclass(frozen=True, slots=True)
class Call:
    """A built-in function call: ``compose(?p, ?q)``, ``exp(x)``, ``rank(?x)``."""

    func: str
    args: tuple[Expr, ...]
    span: Span = NO_SPAN


BinOpKind = Literal[
    "+", "-", "*", "/", "//", "%", "**", "==", "!=", "<", "<=", ">", ">=", "and", "or"
]


@dataclass(frozen=True, slots=True)
class BinOp:
    op: BinOpKind
    lhs: Expr
    rhs: Expr
    span: Span = NO_SPAN


@dataclass(frozen=True, slots=True)
class UnOp:
    op: Literal["-", "not"]
    operand: Expr
    span: Span = NO_SPAN


@dataclass(frozen=True, slots=True)
class Index:
    """``base[index]``, e.g. ``shape(?x)[1]``."""

    base: Expr
    index: Expr
    span: Span = NO_SPAN


Expr = Var | Name | Num | Str | ListLit | Call | BinOp | UnOp | Index


def sub_expressions(e: Expr) -> tuple[Expr, ...]:
    """The immediate operand expressions of ``e`` (none for a leaf)."""
    if isinstance(e, Call):
        return tuple(e.args)
    if isinstance(e, BinOp):
        return (e.lhs, e.rhs)
    if isinstance(e, UnOp):
        return (e.operand,)
    if isinstance(e, Index):
        return (e.base, e.index)
    if isinstance(e, ListLit):
        return tuple(e.items)
    return ()


# ---------------------------------------------------------------- patterns


@dataclass(frozen=True, slots=True)
class PVar:
    """Pattern variable binding a tensor (an e-class)."""

    name: str
    span: Span = NO_SPAN


@dataclass(frozen=True, slots=True)
class PConst:
    """A scalar constant tensor in a pattern: matches any constant tensor whose
    elements all equal ``value`` (so ``Add(?x, 0)`` matches a zero tensor);
    on a right-hand side it builds a rank-0 constant of the operand's dtype."""

    value: int | float
    span: Span = NO_SPAN


@dataclass(frozen=True, slots=True)
class POp:
    """``Op(inputs..., attr=expr, ...)``. Attribute expressions on a left-hand side
    are a `Var` (bind), a literal (match) or absent (any); on a right-hand side any
    expression over bound variables and documented built-ins."""

    op: str
    inputs: tuple[Pattern, ...]
    attrs: tuple[tuple[str, Expr], ...] = ()
    span: Span = NO_SPAN
    # Span of each attribute *name* in ``attrs`` (same order), for diagnostics.
    attr_spans: tuple[Span, ...] = ()


@dataclass(frozen=True, slots=True)
class PCompute:
    """A constant tensor computed at compile time by a documented built-in, only
    on a right-hand side: ``scalar(?eps)`` turns a float attribute into a rank-0
    tensor, ``vector(?perm)`` an int list into a 1-D int64 tensor."""

    func: str
    args: tuple[Expr, ...]
    span: Span = NO_SPAN


Pattern = PVar | PConst | POp | PCompute


# ---------------------------------------------------------------- declarations

AttrType = Literal["int", "ints", "float", "floats", "string", "strings", "tensor"]


@dataclass(frozen=True, slots=True)
class Param:
    name: str
    optional: bool = False
    variadic: bool = False
    span: Span = NO_SPAN


@dataclass(frozen=True, slots=True)
class AttrDecl:
    name: str
    type: AttrType
    default: Expr | None = None
    span: Span = NO_SPAN
    type_span: Span = NO_SPAN


@dataclass(frozen=True, slots=True)
class OpDecl:
    """``op Name(params) [attrs] : mapping layout dynamism [= semantics] [requires e]``.

    ``semantics`` is a scalar expression over the params/attrs for elementwise
    ops; ``builtin`` names a documented built-in encoding (``reduce_sum``,
    ``matmul``, ``transpose`` ...) for the others; both absent = opaque.
    """

    name: str
    params: tuple[Param, ...]
    attrs: tuple[AttrDecl, ...]
    mapping: str
    layout: str
    dynamism: str
    semantics: Expr | None = None
    builtin: str | None = None
    requires: Expr | None = None
    outputs: int = 1
    span: Span = NO_SPAN
    name_span: Span = NO_SPAN
    # Spans of the mapping, layout and dynamism class names, in that order.
    class_spans: tuple[Span, ...] = ()
    # Optional facts (rules/README.md, "Operator facts"); None = derived by `ops`.
    # ``dtype``: ("same",) | ("fixed", "bool") | ("attr", "to") | ("like", param[, fallback]).
    dtype: tuple[str, ...] | None = None
    facts: tuple[str, ...] = ()
    shape: str | None = None  # "same" | "broadcast" | "builtin NAME"
    cost: tuple[str, float] | None = None  # ("per_element", 1.0) | ("reduce", 0) | ...
    anchor: str | None = None  # conv | matmul | pool | reduce | rownorm
    # Of NAME in ``shape builtin NAME`` (its diagnostics point there); else the declaration's.
    shape_span: Span = NO_SPAN


@dataclass(frozen=True, slots=True)
class Rule:
    """A rewrite. ``bidirectional`` rules (``<=>``) also rewrite right to left.
    ``flags`` holds markers such as ``exact`` (bit-exact in IEEE arithmetic)."""

    name: str
    lhs: Pattern
    rhs: Pattern
    guard: Expr | None = None
    bidirectional: bool = False
    ruleset: str = "default"
    flags: frozenset[str] = frozenset()
    doc: str = ""
    span: Span = NO_SPAN
    name_span: Span = NO_SPAN
    # ``(flag, span)`` in source order; ``flags`` is the set for consumers.
    flag_spans: tuple[tuple[str, Span], ...] = ()


@dataclass(frozen=True, slots=True)
class RulesetDecl:
    name: str
    span: Span = NO_SPAN


@dataclass(frozen=True, slots=True)
class Saturate:
    """Run the rulesets until nothing changes (or a limit stops it)."""

    rulesets: tuple[str, ...]
    span: Span = NO_SPAN
    name_spans: tuple[Span, ...] = ()


@dataclass(frozen=True, slots=True)
class RunTimes:
    """Run the rulesets ``times`` iterations."""

    rulesets: tuple[str, ...]
    times: int
    span: Span = NO_SPAN
    name_spans: tuple[Span, ...] = ()


@dataclass(frozen=True, slots=True)
class Repeat:
    times: int
    body: tuple[ScheduleStep, ...]
    span: Span = NO_SPAN


ScheduleStep = Saturate | RunTimes | Repeat


@dataclass(frozen=True, slots=True)
class Limits:
    """Budgets for one saturation: e-nodes, iterations, wall seconds."""

    nodes: int = 50_000
    iterations: int = 30
    seconds: float = 20.0
    span: Span = NO_SPAN


@dataclass(frozen=True, slots=True)
class FuseEntry:
    """One cell of DNNFusion Table 3.3: ``fuse FIRST then SECOND -> RESULT : verdict``."""

    first: str
    second: str
    result: str | None
    verdict: Literal["fuse", "break", "profile"]
    span: Span = NO_SPAN
    # Spans of first, second, result (NO_SPAN when absent) and verdict.
    part_spans: tuple[Span, ...] = ()


@dataclass(frozen=True, slots=True)
class RuleSet:
    """Everything parsed from a set of `.dnnr` files (after `use` is resolved)."""

    ops: dict[str, OpDecl] = field(default_factory=dict)
    rules: tuple[Rule, ...] = ()
    rulesets: tuple[RulesetDecl, ...] = ()
    schedule: tuple[ScheduleStep, ...] = ()
    limits: Limits = Limits()
    fusion: tuple[FuseEntry, ...] = ()
    files: tuple[str, ...] = ()

    def rules_in(self, ruleset: str) -> tuple[Rule, ...]:
        return tuple(r for r in self.rules if r.ruleset == ruleset)


# ---------------------------------------------------------------- one source file
# The parser's output for a single file, items in source order (comments kept, so
# the formatter can reprint the file). `dsl.load_rules` merges files into a RuleSet.


@dataclass(frozen=True, slots=True)
class UseDecl:
    """``use "other.dnnr"``; ``path`` is as written, resolved against the using file."""

    path: str
    span: Span = NO_SPAN


@dataclass(frozen=True, slots=True)
class Comment:
    """A block of ``#`` lines that is not a rule's doc comment (text without ``#``)."""

    lines: tuple[str, ...]
    span: Span = NO_SPAN


@dataclass(frozen=True, slots=True)
class LimitItem:
    name: str
    value: int | float
    span: Span = NO_SPAN


@dataclass(frozen=True, slots=True)
class LimitsDecl:
    """``limits { nodes = N; iterations = N; seconds = S }`` as written."""

    items: tuple[LimitItem, ...]
    span: Span = NO_SPAN


@dataclass(frozen=True, slots=True)
class ScheduleDecl:
    steps: tuple[ScheduleStep, ...]
    span: Span = NO_SPAN


Item = UseDecl | Comment | OpDecl | RulesetDecl | Rule | FuseEntry | LimitsDecl | ScheduleDecl


@dataclass(frozen=True, slots=True)
class SourceFile:
    file: str
    items: tuple[Item, ...] = ()
