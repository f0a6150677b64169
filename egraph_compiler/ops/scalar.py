"""One compiler of the scalar expressions of ``op … = expr`` declarations.

`evaluate` turns an expression into NumPy values (folding of declared operators, the
verifier's replay), `to_c` into C text (OpenCL, the Hexagon scalar fallback; a C target
contributes only a `Spelling`: how to write a literal and each scalar built-in), and
`evaluate_in` into the values of any other `Domain` — shape inference evaluates shape
arithmetic (Shape → Gather → Mul …) on symbolic dims this way (`shapes.values`). Z3
terms are the verifier's (`verify/scalar.py`), over the same declarations.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from egraph_compiler.dsl import ast

_erf = np.frompyfunc(math.erf, 1, 1)


def _np_erf(x: Any) -> Any:
    array = np.asarray(x)
    # np.asarray: frompyfunc returns a Python float, not an array, for a 0-d input
    return np.asarray(_erf(array.astype(np.float64))).astype(
        array.dtype if array.dtype.kind == "f" else np.float64)


NUMPY_FUNCTIONS: Mapping[str, Callable[..., Any]] = {
    "exp": np.exp, "log": np.log, "sqrt": np.sqrt, "abs": np.abs, "tanh": np.tanh, "erf": _np_erf,
    "sin": np.sin, "cos": np.cos, "floor": np.floor, "ceil": np.ceil, "round": np.round,
    "sign": np.sign, "min": np.minimum, "max": np.maximum,
    "select": lambda c, a, b: np.where(c, a, b),
    # the elementwise built-ins of `= builtin NAME` operators
    "tan": np.tan, "asin": np.arcsin, "acos": np.arccos, "atan": np.arctan, "sinh": np.sinh, "cosh": np.cosh,
    "asinh": np.arcsinh, "acosh": np.arccosh, "atanh": np.arctanh, "isnan": np.isnan,
}
_NUMPY_BINARY: Mapping[str, Callable[[Any, Any], Any]] = {
    "+": np.add, "-": np.subtract, "*": np.multiply, "/": np.divide, "**": np.power,
    "//": np.floor_divide, "%": np.mod, "==": np.equal, "!=": np.not_equal, "<": np.less,
    "<=": np.less_equal, ">": np.greater, ">=": np.greater_equal,
    "and": np.logical_and, "or": np.logical_or,
}


def _keep(value: Any) -> Any:
    return value


class NoReference(ValueError):
    """A scalar function without a NumPy reference."""


def evaluate(expr: ast.Expr, env: Mapping[str, Any], *, cast: Callable[[Any], Any] = _keep,
             integer: bool = False) -> Any:
    """``expr`` over NumPy arrays or scalars; ``env`` binds operands and attributes.

    ``cast`` rounds every non-boolean intermediate to the domain evaluated in (the
    verifier's replay in fp16 or bf16; numbers and scalar attributes are cast too);
    ``integer`` makes ``/`` a floor division.
    """

    def walk(e: ast.Expr) -> Any:
        if isinstance(e, ast.Num):
            return cast(e.value)
        if isinstance(e, ast.Str):
            return e.value
        if isinstance(e, (ast.Name, ast.Var)):
            if e.name not in env:
                raise KeyError(f"unbound name {e.name!r} in scalar semantics")
            value = env[e.name]
            return value if isinstance(value, (str, np.ndarray)) else cast(value)
        if isinstance(e, ast.UnOp):
            value = walk(e.operand)
            return np.logical_not(value) if e.op == "not" else cast(np.negative(value))
        if isinstance(e, ast.BinOp):
            a, b = walk(e.lhs), walk(e.rhs)
            if isinstance(a, str) or isinstance(b, str):
                return (a == b) == (e.op == "==")
            fn = np.floor_divide if integer and e.op == "/" else _NUMPY_BINARY[e.op]
            out = np.asarray(fn(a, b))
            return out if out.dtype == bool else cast(out)
        if isinstance(e, ast.Call):
            if e.func not in NUMPY_FUNCTIONS:
                raise NoReference(f"no NumPy reference for {e.func}()")
            out = np.asarray(NUMPY_FUNCTIONS[e.func](*(walk(arg) for arg in e.args)))
            return out if out.dtype == bool else cast(out)
        raise NoReference(f"{type(e).__name__} is not a scalar expression")

    return walk(expr)


@dataclass(frozen=True)
class Domain:
    """The scalar operations of a value domain: ``binary`` per operator (``+``, ``==`` …),
    ``functions`` per scalar built-in (``abs``, ``select``, and ``min``/``max``/``mod`` …
    for ``= builtin NAME`` operators); ``number`` turns a literal or a numeric attribute
    into a value. Any of them returns None for what the domain cannot represent."""

    binary: Mapping[str, Callable[[Any, Any], Any]]
    functions: Mapping[str, Callable[..., Any]]
    number: Callable[[float], Any]
    negate: Callable[[Any], Any]
    logical_not: Callable[[Any], Any]


def evaluate_in(expr: ast.Expr, env: Mapping[str, Any], domain: Domain) -> Any | None:
    """``expr`` over ``domain``'s values (``env`` binds operands and attributes); None where
    an operation, function or value is outside the domain."""

    def walk(e: ast.Expr) -> Any | None:
        if isinstance(e, ast.Num):
            return domain.number(e.value)
        if isinstance(e, (ast.Name, ast.Var)):
            value = env.get(e.name)
            return domain.number(value) if isinstance(value, (int, float)) else value
        if isinstance(e, ast.UnOp):
            children: tuple[ast.Expr, ...] = (e.operand,)
        else:
            children = (e.lhs, e.rhs) if isinstance(e, ast.BinOp) else tuple(getattr(e, "args", ()))
        args = [walk(sub) for sub in children]
        if any(a is None for a in args):
            return None
        if isinstance(e, ast.UnOp):
            return domain.logical_not(args[0]) if e.op == "not" else domain.negate(args[0])
        fn = domain.binary.get(e.op) if isinstance(e, ast.BinOp) else \
            domain.functions.get(e.func) if isinstance(e, ast.Call) else None
        return None if fn is None else fn(*args)

    return walk(expr)


@dataclass(frozen=True)
class Spelling:
    """How a C-like target writes scalar code: ``functions`` maps a scalar built-in to a
    template over ``{0}``, ``{1}`` …; ``binary`` overrides an operator (``"/"`` →
    ``"dnnr_fdiv({0}, {1})"``); ``literal`` writes a float constant."""

    functions: Mapping[str, str]
    literal: Callable[[float], str]
    binary: Mapping[str, str] = field(default_factory=dict)


_C_OPERATORS = {"and": "&&", "or": "||"}


def _unwrap(text: str) -> str:
    """``(a + b)`` → ``a + b`` when the outer parentheses enclose the whole text."""
    if not (text.startswith("(") and text.endswith(")")):
        return text
    depth = 0
    for i, char in enumerate(text):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth == 0 and i < len(text) - 1:
            return text
    return text[1:-1]


def to_c(expr: ast.Expr, operands: Mapping[str, str], attributes: Mapping[str, float],
         spelling: Spelling) -> str:
    """C text of ``expr``: ``operands`` maps a parameter to its C expression, ``attributes``
    an attribute to its value (written as a literal). Every operator is parenthesised."""

    def walk(e: ast.Expr) -> str:
        if isinstance(e, ast.Num):
            return spelling.literal(float(e.value))
        if isinstance(e, ast.Name):
            if e.name in operands:
                return operands[e.name]
            if e.name in attributes:
                return spelling.literal(float(attributes[e.name]))
            raise KeyError(f"unbound name {e.name!r} in scalar semantics")
        if isinstance(e, ast.UnOp):
            return f"(-{walk(e.operand)})" if e.op == "-" else f"(!{walk(e.operand)})"
        if isinstance(e, ast.BinOp):
            lhs, rhs = walk(e.lhs), walk(e.rhs)
            if e.op in spelling.binary:
                return spelling.binary[e.op].format(lhs, rhs)
            return f"({lhs} {_C_OPERATORS.get(e.op, e.op)} {rhs})"
        if isinstance(e, ast.Call):
            args = [walk(a) for a in e.args]
            if e.func == "select":
                return f"({args[0]} ? {args[1]} : {args[2]})"
            if e.func in spelling.functions:  # a call's own parentheses delimit its operands
                return spelling.functions[e.func].format(*(_unwrap(a) for a in args))
        raise ValueError(f"no C spelling for {type(e).__name__} {getattr(e, 'func', '')}")

    return walk(expr)
