"""The operator registry: every fact an ``op`` declaration states or implies.

`Registry.from_ruleset(rules)` lays a rule set's declarations over the shipped
library's; stages read the active registry with `current()` (the pipeline activates
the rule set it compiles with through `using`). Derivations, where a clause is absent
(rules/README.md, "Operator facts"):

- elementwise = scalar semantics (``= expr``, or a built-in of `ELEMENTWISE_BUILTINS`;
  every such operator of the library is one_to_one);
- shape: ``same`` for an elementwise op of one required operand, ``broadcast`` for more;
- output dtype: that of the first operand;
- cost: ``per_element(1)``;
- role in generated code: ``anchor`` (an ``anchor`` clause), ``elementwise``,
  ``layout`` (reorganize/shuffle, or a ``cost movement`` op), else ``unsupported``;
- `OpInfo.expensive`, `OpInfo.row_reduction`, `OpInfo.moves_elements`, `Registry.kernel_class`: see each.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Any

from egraph_compiler.dsl import ast
from egraph_compiler.ops.quantised import INTEGER_SIGNATURES

OPERAND_ATTRIBUTE_SUFFIX = "_input"
# Built-in semantics (`= builtin NAME`) that name a scalar function the code generators
# implement per element (dsl/builtins.py documents each); other built-ins are whole-tensor.
ELEMENTWISE_BUILTINS = frozenset({
    "pow", "mod", "min", "max", "sum", "mean", "isnan", "isinf", "cast", "batch_norm",
    "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh", "bitshift",
    "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not",
})

# Scalar functions (and elementwise built-ins) dearer than a few additions: transcendental.
EXPENSIVE_FUNCTIONS = frozenset({"exp", "log", "sqrt", "tanh", "erf", "sin", "cos", "pow", "tan", "asin",
                                 "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh"})


def _expensive(e: ast.Expr) -> bool:
    """``e`` divides, raises to a power or calls an expensive function, anywhere."""
    return (isinstance(e, ast.Call) and e.func in EXPENSIVE_FUNCTIONS) or (
        isinstance(e, ast.BinOp) and e.op in ("/", "**")) or any(map(_expensive, ast.sub_expressions(e)))


def constant_value(expr: ast.Expr | None) -> Any:
    """The value of an attribute default: a number, string or list of them."""
    if expr is None:
        return None
    if isinstance(expr, ast.Num):
        return expr.value
    if isinstance(expr, ast.Str):
        return expr.value
    if isinstance(expr, ast.UnOp) and expr.op == "-":
        return -constant_value(expr.operand)
    if isinstance(expr, ast.ListLit):
        return [constant_value(item) for item in expr.items]
    if isinstance(expr, ast.Name) and expr.name == "inf":
        return math.inf
    raise ValueError(f"attribute default {expr} is not a constant")


@dataclass(frozen=True)
class OpInfo:
    """One operator's facts, read from its declaration or derived from its classes."""

    decl: ast.OpDecl

    @property
    def name(self) -> str:
        return self.decl.name

    @cached_property
    def defaults(self) -> Mapping[str, Any]:
        return {a.name: constant_value(a.default) for a in self.decl.attrs}

    def attr(self, attrs: Mapping[str, Any], name: str) -> Any:
        """The value of attribute ``name`` in ``attrs``, else its declared default."""
        value = attrs.get(name)
        return self.defaults.get(name) if value is None else value

    @property
    def semantics(self) -> ast.Expr | None:
        return self.decl.semantics

    @property
    def elementwise(self) -> bool:
        # The scalar semantics decide the code; the mapping class is fusion's own fact (an
        # author may declare Relu many_to_many to keep it out of fusion, not out of codegen).
        d = self.decl
        return d.semantics is not None or d.builtin in ELEMENTWISE_BUILTINS

    @property
    def required_params(self) -> int:
        return sum(1 for p in self.decl.params if not p.optional)

    @property
    def shape(self) -> str | None:
        """``same`` | ``broadcast`` | ``builtin NAME`` | None (the shape stage's own rule)."""
        if self.decl.shape is not None:
            return self.decl.shape
        if not self.elementwise:
            return None
        variadic = any(p.variadic for p in self.decl.params)
        return "broadcast" if variadic or self.required_params > 1 else "same"

    @property
    def dtype(self) -> tuple[str, ...]:
        return self.decl.dtype or ("like", self.decl.params[0].name if self.decl.params else "")

    def output_dtype(self, input_dtypes: Sequence[str | None], attrs: Mapping[str, Any],
                     from_onnx: Any) -> str | None:
        """The output dtype given the operands' (None for an absent one); ``from_onnx``
        turns an ONNX element-type code into a dtype name (``-> dtype(to)``)."""
        kind, *args = self.dtype
        if kind == "fixed":
            return args[0]
        if kind == "dtype":
            return from_onnx(int(self.attr(attrs, args[0])))
        names = [p.name for p in self.decl.params]
        if args and args[0] not in names:
            return None  # like(a tensor attribute): the shape stage's own rule knows
        index = names.index(args[0]) if args else 0
        found = input_dtypes[index] if index < len(input_dtypes) else None
        return found if found is not None else (args[1] if len(args) > 1 else None)

    @property
    def cost(self) -> tuple[str, float]:
        return self.decl.cost or ("per_element", 1.0)

    @property
    def facts(self) -> frozenset[str]:
        return frozenset(self.decl.facts)

    @cached_property
    def operand_attributes(self) -> tuple[tuple[int, str, str], ...]:
        """(operand position, attribute, its type) per optional operand ``NAME_input`` of an
        attribute ``NAME``: a run-time operand the IR holds as that attribute once it is a
        known constant (Slice bounds, Squeeze axes, Clip bounds; rules/README.md)."""
        types = {a.name: a.type for a in self.decl.attrs}
        found = []
        for position, param in enumerate(self.decl.params):
            name = param.name.removesuffix(OPERAND_ATTRIBUTE_SUFFIX)
            if param.optional and name != param.name and name in types:
                found.append((position, name, types[name]))
        return tuple(found)

    @property
    def moves_elements(self) -> bool:
        """Each output element is one input element: the mapping class reorganizes or
        shuffles (Reshape, Transpose, DepthToSpace, …) or the semantics are the first
        operand itself (Identity, Dropout)."""
        d = self.decl
        return d.mapping in ("reorganize", "shuffle") or (
            isinstance(d.semantics, ast.Name) and bool(d.params) and d.semantics.name == d.params[0].name)

    @property
    def anchor(self) -> str | None:
        return self.decl.anchor

    @cached_property
    def expensive(self) -> bool:
        """Recomputing it for every output tile of a fused Conv / MatMul / pool costs more
        than storing it once: its semantics divide or call a transcendental function."""
        d = self.decl
        return d.builtin in EXPENSIVE_FUNCTIONS or (d.semantics is not None and _expensive(d.semantics))

    @property
    def row_reduction(self) -> bool:
        """A reduction over attribute ``axes`` keeping dims, which a row group chains."""
        names = {a.name for a in self.decl.attrs}
        return self.anchor == "reduce" and {"axes", "keepdims"} <= names

    @property
    def role(self) -> str:
        """``anchor`` | ``elementwise`` | ``layout`` | ``unsupported`` (fusion's view)."""
        if self.anchor is not None:
            return "anchor"
        if self.elementwise:
            return "elementwise"
        if self.decl.mapping in ("reorganize", "shuffle") or self.decl.cost == ("movement", 0.0):
            return "layout"
        return "unsupported"


@dataclass(frozen=True)
class Registry:
    """Every declared operator by name."""

    ops: Mapping[str, OpInfo]

    @staticmethod
    def from_decls(decls: Mapping[str, ast.OpDecl], base: Registry | None = None) -> Registry:
        merged = dict(base.ops) if base else {}
        merged.update({name: OpInfo(decl) for name, decl in decls.items()})
        return Registry(merged)

    @staticmethod
    def from_ruleset(rules: Any) -> Registry:
        """``rules.ops`` (a dsl `RuleSet`) laid over the shipped library's operators."""
        return Registry.from_decls(getattr(rules, "ops", {}), shipped())

    def get(self, op: str) -> OpInfo | None:
        return self.ops.get(op)

    def where(self, fact: str) -> frozenset[str]:
        """The operators of which the boolean fact ``fact`` (``expensive``, ...) holds."""
        return frozenset(name for name, info in self.ops.items() if getattr(info, fact))

    def with_role(self, role: str) -> frozenset[str]:
        return frozenset(name for name, info in self.ops.items() if info.role == role)

    def kernel_class(self, op: str) -> str | None:
        """The class of computation ``op`` is (conv, matmul, pool, ...): its ``anchor`` (but
        not ``indexed``), else the geometry its ``shape builtin`` names (ConvInteger: conv),
        else, for an integer operator (`ops.quantised`), that of the float operator it
        stands for."""
        info = self.ops.get(op)
        # `anchor indexed` names how OpenCL generates it (one element per work item), not what
        # it computes: ConvTranspose stays a conv, LpPool a pool (`shape builtin`)
        anchor = info.anchor if info is not None and info.anchor != "indexed" else None
        if info is not None and (anchor or (info.shape or "").startswith("builtin ")):
            return anchor or (info.shape or "").removeprefix("builtin ")
        return self.kernel_class(INTEGER_SIGNATURES[op][0]) if op in INTEGER_SIGNATURES else None

    def anchors(self) -> Mapping[str, str]:
        return {name: info.anchor for name, info in self.ops.items() if info.anchor is not None}


@lru_cache(maxsize=4)
def _shipped(rules: Path) -> Registry:
    from egraph_compiler import dsl

    operators = rules / "operators.dnnr"
    return Registry.from_decls(dsl.load_rules([operators if operators.is_file() else rules]).ops)


def shipped() -> Registry:
    """The operators of the shipped library (``$DNNR_RULES`` when set), parsed once."""
    from egraph_compiler.dsl.shipped import rules_dir

    return _shipped(rules_dir())


_ACTIVE: ContextVar[Registry | None] = ContextVar("dnnr_registry", default=None)


def current() -> Registry:
    """The registry of the rule set being compiled with (`using`), else the shipped one."""
    return _ACTIVE.get() or shipped()


@contextlib.contextmanager
def using(rules: Any) -> Iterator[Registry]:
    """Make ``rules``' operators (over the shipped ones) the active registry."""
    registry = rules if isinstance(rules, Registry) else Registry.from_ruleset(rules)
    token = _ACTIVE.set(registry)
    try:
        yield registry
    finally:
        _ACTIVE.reset(token)
