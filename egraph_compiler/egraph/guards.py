"""Evaluate guards and computed attributes in Python over primitive facts.

A guard sees attribute values and, for each tensor variable, the facts the
e-graph holds for its class (`TensorFacts`). A comparison of symbolic dims is decided
by `shapes.decide` (canonical form, bounds, then Z3 under the graph's dim ranges).
Anything unknown — a missing fact, a symbolic comparison the prover cannot settle, a built-in
rejecting its arguments — makes the guard false (`Unknown`): never assume.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from dataclasses import dataclass

from egraph_compiler.dsl import builtins as dsl_builtins
from egraph_compiler.dsl.ast import BinOp, Call, Expr, Index, ListLit, Name, Num, Str, UnOp, Var
from egraph_compiler.ir.dims import Dim, DimExpr
from egraph_compiler.shapes import broadcast_shape
from egraph_compiler.shapes import decide as decide_dims


class Unknown(Exception):
    """The guard's value cannot be decided from what the e-graph knows."""


@dataclass(frozen=True, slots=True)
class TensorFacts:
    shape: tuple[Dim, ...] | None = None
    dtype: str | None = None
    value: tuple[Dim, ...] | None = None  # value of a small int constant


TENSOR_FACTS = ("rank", "shape", "dim", "numel", "dtype", "same_shape", "broadcastable")
BOOL_FACTS = ("is_const", "nonneg", "positive", "nonzero")


def _shape(facts: object) -> tuple[Dim, ...]:
    if not isinstance(facts, TensorFacts) or facts.shape is None:
        raise Unknown("shape")
    return facts.shape


def _numel(shape: tuple[Dim, ...]) -> Dim:
    total: Dim = 1
    for d in shape:
        total = total * d
    return total


def _fact(name: str, args: list) -> object:
    if name == "rank":
        return len(_shape(args[0]))
    if name == "shape":
        return _shape(args[0])
    if name == "dim":
        shape = _shape(args[0])
        index = args[1]
        if not isinstance(index, int) or not -len(shape) <= index < len(shape):
            raise Unknown("dim index")
        return shape[index]
    if name == "numel":
        return _numel(_shape(args[0]))
    if name == "dtype":
        if not isinstance(args[0], TensorFacts) or args[0].dtype is None:
            raise Unknown("dtype")
        return args[0].dtype
    if name == "same_shape":
        a, b = _shape(args[0]), _shape(args[1])
        if a == b:
            return True
        if len(a) != len(b):
            return False
        answer = decide_dims("==", a, b)
        if answer is None:
            raise Unknown("same_shape")
        return answer
    if name == "broadcastable":
        if broadcast_shape([_shape(args[0]), _shape(args[1])]) is None:
            raise Unknown("broadcastable")
        return True
    raise Unknown(name)


def _compare(op: str, a: object, b: object) -> bool:
    if isinstance(a, list):
        a = tuple(a)
    if isinstance(b, list):
        b = tuple(b)
    if _has_symbol(a) or _has_symbol(b):  # the shapes stage's prover, under the graph's dim ranges
        answer = True if op == "==" and a == b else decide_dims(op, a, b)
        if answer is None:
            raise Unknown(f"symbolic {op}")
        return answer
    if op == "==":
        return a == b
    if op == "!=":
        return a != b
    ops: dict[str, Callable[[object, object], bool]] = {
        "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge,
    }
    try:
        return bool(ops[op](a, b))
    except TypeError:
        raise Unknown("incomparable") from None


def _has_symbol(value: object) -> bool:
    if isinstance(value, DimExpr):
        return True
    if isinstance(value, tuple):
        return any(_has_symbol(v) for v in value)
    return False


_ARITH: dict[str, Callable[[object, object], object]] = {
    "+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv,
    "//": operator.floordiv, "%": operator.mod, "**": operator.pow,
}


def evaluate(expr: Expr, env: dict[str, object]) -> object:
    """Value of ``expr``; tensor variables are `TensorFacts`, used bare they mean
    their (small int) value. Raises `Unknown` when undecidable."""
    if isinstance(expr, Var):
        if expr.name not in env:
            raise Unknown(f"?{expr.name}")
        return env[expr.name]
    if isinstance(expr, Num):
        return expr.value
    if isinstance(expr, Str):
        return expr.value
    if isinstance(expr, Name):
        if expr.name == "inf":
            return math.inf
        if expr.name in ("true", "false"):
            return expr.name == "true"
        return expr.name  # a dtype name such as float32
    if isinstance(expr, ListLit):
        return tuple(value_of(evaluate(item, env)) for item in expr.items)
    if isinstance(expr, UnOp):
        inner = evaluate(expr.operand, env)
        if expr.op == "not":
            return not _truth(inner)
        return -value_of(inner)  # type: ignore[operator]
    if isinstance(expr, BinOp):
        if expr.op == "and":
            return _truth(evaluate(expr.lhs, env)) and _truth(evaluate(expr.rhs, env))
        if expr.op == "or":
            left = _try_truth(expr.lhs, env)
            if left:
                return True
            right = _try_truth(expr.rhs, env)
            if right:
                return True
            if left is None or right is None:
                raise Unknown("or")
            return False
        lhs, rhs = value_of(evaluate(expr.lhs, env)), value_of(evaluate(expr.rhs, env))
        if expr.op in ("==", "!=", "<", "<=", ">", ">="):
            return _compare(expr.op, lhs, rhs)
        try:
            if expr.op in ("//", "%") and isinstance(lhs, DimExpr) and isinstance(rhs, int):
                return _ARITH[expr.op](lhs, rhs)
            if isinstance(lhs, tuple) and isinstance(rhs, tuple) and expr.op == "+":
                return lhs + rhs
            return _ARITH[expr.op](lhs, rhs)
        except (TypeError, ValueError, ZeroDivisionError):
            raise Unknown(expr.op) from None
    if isinstance(expr, Index):
        base, index = value_of(evaluate(expr.base, env)), value_of(evaluate(expr.index, env))
        if not isinstance(base, tuple) or not isinstance(index, int) or not -len(base) <= index < len(base):
            raise Unknown("index")
        return base[index]
    if isinstance(expr, Call):
        args = [evaluate(arg, env) for arg in expr.args]
        if expr.func in TENSOR_FACTS:
            return _fact(expr.func, args)
        if expr.func in BOOL_FACTS:
            raise Unknown(f"{expr.func} is only decided natively")
        builtin = dsl_builtins.BUILTINS.get(expr.func)
        if builtin is None or builtin.impl is None:
            raise Unknown(expr.func)
        try:
            return builtin.impl(*[value_of(a) for a in args])
        except (ValueError, TypeError, IndexError):
            raise Unknown(expr.func) from None
    raise Unknown(type(expr).__name__)


def value_of(value: object) -> object:
    """A tensor variable used as a value means its (small int constant) value."""
    if isinstance(value, TensorFacts):
        if value.value is None:
            raise Unknown("tensor value")
        return value.value
    return value


def _truth(value: object) -> bool:
    if not isinstance(value, bool):
        raise Unknown("not a boolean")
    return value


def _try_truth(expr: Expr, env: dict[str, object]) -> bool | None:
    try:
        return _truth(evaluate(expr, env))
    except Unknown:
        return None


def holds(expr: Expr, env: dict[str, object]) -> bool:
    """Guard truth: `Unknown` counts as false."""
    try:
        return _truth(evaluate(expr, env))
    except Unknown:
        return False
