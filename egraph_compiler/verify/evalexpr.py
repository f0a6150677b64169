"""Evaluate guards and computed attributes: Python values where they are known
(ranks, permutations, axes), Z3 terms where they are symbolic (dims, element facts).

The same evaluator serves the SMT encoding and the NumPy replay: only the `Facts`
backend differs. Int-list built-ins follow `dsl.builtins`: ``compose(p, q)[i] = p[q[i]]``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import z3

from egraph_compiler.dsl import ast
from egraph_compiler.verify.scalar import Unsupported


class NotApplicable(Exception):
    """A guard or attribute cannot be evaluated for this configuration (e.g. an axis
    out of range): the rule does not fire here."""


class Facts(Protocol):
    def rank(self, var: str) -> int: ...
    def shape(self, var: str) -> list[Any]: ...
    def element_fact(self, kind: str, var: str) -> Any: ...
    def is_const(self, var: str) -> Any: ...
    def dtype(self, var: str) -> str: ...


def _is_z3(value: object) -> bool:
    return isinstance(value, z3.ExprRef)


def logical_and(values: Sequence[Any]) -> Any:
    if any(_is_z3(v) for v in values):
        return z3.And(*[v if _is_z3(v) else z3.BoolVal(bool(v)) for v in values])
    return all(values)


def logical_or(values: Sequence[Any]) -> Any:
    if any(_is_z3(v) for v in values):
        return z3.Or(*[v if _is_z3(v) else z3.BoolVal(bool(v)) for v in values])
    return any(values)


def equal(a: Any, b: Any) -> Any:
    if isinstance(a, (list, tuple)) or isinstance(b, (list, tuple)):
        if not isinstance(a, (list, tuple)) or not isinstance(b, (list, tuple)):
            return False
        if len(a) != len(b):
            return False
        return logical_and([equal(x, y) for x, y in zip(a, b, strict=False)])
    if _is_z3(a) or _is_z3(b):
        return a == b
    return a == b


# ---------------------------------------------------------------- int-list built-ins
def compose(p: Sequence[int], q: Sequence[int]) -> list[int]:
    if len(p) != len(q):
        raise NotApplicable("compose of permutations of different lengths")
    return [p[i] for i in q]


def invert(p: Sequence[int]) -> list[int]:
    out = [0] * len(p)
    for i, v in enumerate(p):
        out[v] = i
    return out


def permute(values: Sequence[Any], p: Sequence[int]) -> list[Any]:
    if len(values) != len(p):
        raise NotApplicable("permute with a permutation of another length")
    return [values[i] for i in p]


def normalize_axes(axes: Sequence[int], rank: int) -> list[int]:
    if any(a < -rank or a >= rank for a in axes):
        raise NotApplicable("axis out of range")
    return sorted(a % rank if rank else a for a in axes)


PURE_BUILTINS: dict[str, Callable[..., Any]] = {
    "compose": compose,
    "invert": invert,
    "is_identity": lambda p: list(p) == list(range(len(p))),
    "len": lambda items: len(items),
    "permute": permute,
    "normalize_axes": normalize_axes,
    "concat": lambda a, b: list(a) + list(b),
    "range": lambda n: list(range(n)),
}
ELEMENT_FACTS = ("nonzero", "positive", "nonneg")


def evaluate(expr: ast.Expr, attrs: dict[str, Any], facts: Facts) -> Any:
    """The value of ``expr``; tensor variables are named by ``?x`` (`ast.Var`) and
    looked up as tensors only inside tensor-fact built-ins."""
    ev = _Evaluator(attrs, facts)
    return ev(expr)


class _Evaluator:
    def __init__(self, attrs: dict[str, Any], facts: Facts) -> None:
        self.attrs = attrs
        self.facts = facts

    def __call__(self, e: ast.Expr) -> Any:
        if isinstance(e, ast.Num):
            return e.value
        if isinstance(e, ast.Str):
            return e.value
        if isinstance(e, ast.Name):
            return self.attrs.get(e.name, e.name)  # a bare dtype name compares as text
        if isinstance(e, ast.Var):
            if e.name in self.attrs:
                return self.attrs[e.name]
            raise NotApplicable(f"?{e.name} is a tensor; use it through shape(), dim() ...")
        if isinstance(e, ast.ListLit):
            return [self(item) for item in e.items]
        if isinstance(e, ast.Index):
            base, index = self(e.base), self(e.index)
            if not isinstance(index, int) or not -len(base) <= index < len(base):
                raise NotApplicable("index out of range")
            return base[index]
        if isinstance(e, ast.UnOp):
            value = self(e.operand)
            if e.op == "not":
                return z3.Not(value) if _is_z3(value) else not value
            return -value
        if isinstance(e, ast.BinOp):
            return self._binop(e)
        if isinstance(e, ast.Call):
            return self._call(e)
        raise NotApplicable(f"cannot evaluate {e!r}")

    def _binop(self, e: ast.BinOp) -> Any:
        if e.op == "and":
            return logical_and([self(e.lhs), self(e.rhs)])
        if e.op == "or":
            return logical_or([self(e.lhs), self(e.rhs)])
        a, b = self(e.lhs), self(e.rhs)
        if e.op == "==":
            return equal(a, b)
        if e.op == "!=":
            eq = equal(a, b)
            return z3.Not(eq) if _is_z3(eq) else not eq
        ops: dict[str, Callable[[Any, Any], Any]] = {
            "+": lambda x, y: x + y, "-": lambda x, y: x - y, "*": lambda x, y: x * y,
            "/": lambda x, y: x / y, "//": lambda x, y: x // y if not _is_z3(x) and
            not _is_z3(y) else x / y, "%": lambda x, y: x % y, "**": lambda x, y: x ** y,
            "<": lambda x, y: x < y, "<=": lambda x, y: x <= y, ">": lambda x, y: x > y,
            ">=": lambda x, y: x >= y}
        return ops[e.op](a, b)

    def _tensor(self, arg: ast.Expr) -> str:
        if not isinstance(arg, ast.Var):
            raise NotApplicable("tensor built-ins take a pattern variable")
        return arg.name

    def _call(self, e: ast.Call) -> Any:
        f, args = e.func, e.args
        if f in PURE_BUILTINS:
            return PURE_BUILTINS[f](*[self(a) for a in args])
        if f in ELEMENT_FACTS:
            return self.facts.element_fact(f, self._tensor(args[0]))
        if f == "rank":
            return self.facts.rank(self._tensor(args[0]))
        if f == "shape":
            return list(self.facts.shape(self._tensor(args[0])))
        if f == "dim":
            shape = self.facts.shape(self._tensor(args[0]))
            axis = self(args[1])
            if not isinstance(axis, int) or not -len(shape) <= axis < len(shape):
                raise NotApplicable("dim() axis out of range")
            return shape[axis]
        if f == "numel":
            return math.prod(self.facts.shape(self._tensor(args[0])))
        if f == "dtype":
            return self.facts.dtype(self._tensor(args[0]))
        if f == "is_const":
            return self.facts.is_const(self._tensor(args[0]))
        if f in ("same_shape", "broadcastable"):
            a = self.facts.shape(self._tensor(args[0]))
            b = self.facts.shape(self._tensor(args[1]))
            if f == "same_shape":
                return equal(a, b)
            return logical_and([logical_or([x == y, x == 1, y == 1])
                                for x, y in zip(reversed(a), reversed(b), strict=False)])
        raise Unsupported(f"the built-in {f}() has no verifier encoding")
