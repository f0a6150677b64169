"""One compiler of the scalar expressions of ``op … = expr`` declarations.

`compile_expr` walks an expression once for every target, a `ScalarBackend` saying
what each construct becomes: `evaluate` gives NumPy values (folding of declared
operators, the verifier's replay), `to_c` C text (OpenCL, the Hexagon scalar fallback;
a C target contributes only a `Spelling`: how to write a literal and each scalar
built-in), `evaluate_in` the values of any other `Domain` (shape inference evaluates
shape arithmetic, Shape → Gather → Mul …, on symbolic dims this way: `shapes.values`),
`ops.z3` Z3 terms (the verifier; its tier's arithmetic is the spelling).
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
    "bitwise_and": np.bitwise_and, "bitwise_or": np.bitwise_or, "bitwise_xor": np.bitwise_xor,
    "bitwise_not": np.bitwise_not,
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


class ScalarBackend:
    """What a target makes of each construct of a scalar expression. `compile_expr` walks
    the expression once for every target: NumPy values (`evaluate`), C text (`to_c`),
    Z3 terms (`ops.z3`). ``env`` values are the target's own (arrays, C text, terms)."""

    def number(self, value: float | int) -> Any:
        raise NotImplementedError

    def text(self, value: str) -> Any:
        return value

    def name(self, name: str, env: Mapping[str, Any]) -> Any:
        if name not in env:
            raise KeyError(f"unbound name {name!r} in scalar semantics")
        return env[name]

    def unary(self, op: str, operand: Any) -> Any:
        raise NotImplementedError

    def binary(self, op: str, lhs: Any, rhs: Any) -> Any:
        raise NotImplementedError

    def call(self, func: str, args: list[Any]) -> Any:
        raise NotImplementedError

    def unsupported(self, expr: ast.Expr) -> Exception:
        return NoReference(f"{type(expr).__name__} is not a scalar expression")


def compile_expr(expr: ast.Expr, env: Mapping[str, Any], backend: ScalarBackend) -> Any:
    """``expr`` in ``backend``'s target (the one compiler of `= expr` semantics)."""

    def walk(e: ast.Expr) -> Any:
        if isinstance(e, ast.Num):
            return backend.number(e.value)
        if isinstance(e, ast.Str):
            return backend.text(e.value)
        if isinstance(e, (ast.Name, ast.Var)):
            return backend.name(e.name, env)
        if isinstance(e, ast.UnOp):
            return backend.unary(e.op, walk(e.operand))
        if isinstance(e, ast.BinOp):
            return backend.binary(e.op, walk(e.lhs), walk(e.rhs))
        if isinstance(e, ast.Call):
            return backend.call(e.func, [walk(arg) for arg in e.args])
        raise backend.unsupported(e)

    return walk(expr)


@dataclass(frozen=True)
class _NumPy(ScalarBackend):
    cast: Callable[[Any], Any]
    integer: bool

    def number(self, value: float | int) -> Any:
        return self.cast(value)

    def name(self, name: str, env: Mapping[str, Any]) -> Any:
        value = super().name(name, env)
        return value if isinstance(value, (str, np.ndarray)) else self.cast(value)

    def unary(self, op: str, operand: Any) -> Any:
        return np.logical_not(operand) if op == "not" else self.cast(np.negative(operand))

    def binary(self, op: str, lhs: Any, rhs: Any) -> Any:
        if isinstance(lhs, str) or isinstance(rhs, str):
            return (lhs == rhs) == (op == "==")
        fn = np.floor_divide if self.integer and op == "/" else _NUMPY_BINARY[op]
        out = np.asarray(fn(lhs, rhs))
        return out if out.dtype == bool else self.cast(out)

    def call(self, func: str, args: list[Any]) -> Any:
        if func not in NUMPY_FUNCTIONS:
            raise NoReference(f"no NumPy reference for {func}()")
        out = np.asarray(NUMPY_FUNCTIONS[func](*args))
        return out if out.dtype == bool else self.cast(out)


def evaluate(expr: ast.Expr, env: Mapping[str, Any], *, cast: Callable[[Any], Any] = _keep,
             integer: bool = False) -> Any:
    """``expr`` over NumPy arrays or scalars; ``env`` binds operands and attributes.

    ``cast`` rounds every non-boolean intermediate to the domain evaluated in (the
    verifier's replay in fp16 or bf16; numbers and scalar attributes are cast too);
    ``integer`` makes ``/`` a floor division.
    """
    return compile_expr(expr, env, _NumPy(cast, integer))


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


class _Missing(Exception):
    """An operation, function or value outside a `Domain` (`evaluate_in` gives None)."""


@dataclass(frozen=True)
class _InDomain(ScalarBackend):
    domain: Domain

    def number(self, value: float | int) -> Any:
        return self._known(self.domain.number(value))

    def text(self, value: str) -> Any:
        raise _Missing(value)

    def name(self, name: str, env: Mapping[str, Any]) -> Any:
        value = env.get(name)
        return self._known(self.domain.number(value) if isinstance(value, (int, float)) else value)

    def unary(self, op: str, operand: Any) -> Any:
        return self._known(self.domain.logical_not(operand) if op == "not"
                           else self.domain.negate(operand))

    def binary(self, op: str, lhs: Any, rhs: Any) -> Any:
        return self._apply(self.domain.binary.get(op), [lhs, rhs])

    def call(self, func: str, args: list[Any]) -> Any:
        return self._apply(self.domain.functions.get(func), args)

    def unsupported(self, expr: ast.Expr) -> Exception:
        return _Missing(type(expr).__name__)

    @staticmethod
    def _known(value: Any) -> Any:
        if value is None:
            raise _Missing("a value outside the domain")
        return value

    def _apply(self, fn: Callable[..., Any] | None, args: list[Any]) -> Any:
        if fn is None:
            raise _Missing("an operation outside the domain")
        return self._known(fn(*args))


def evaluate_in(expr: ast.Expr, env: Mapping[str, Any], domain: Domain) -> Any | None:
    """``expr`` over ``domain``'s values (``env`` binds operands and attributes); None where
    an operation, function or value is outside the domain."""
    try:
        return compile_expr(expr, env, _InDomain(domain))
    except _Missing:
        return None


@dataclass(frozen=True)
class Spelling:
    """How a C-like target writes scalar code: ``functions`` maps a scalar built-in to a
    template over ``{0}``, ``{1}`` …; ``binary`` overrides an operator (``"/"`` →
    ``"dnnr_fdiv({0}, {1})"``); ``reciprocal`` a division of the literal 1 (``1 / {0}``);
    ``literal`` writes a float constant."""

    functions: Mapping[str, str]
    literal: Callable[[float], str]
    binary: Mapping[str, str] = field(default_factory=dict)
    reciprocal: str | None = None


_C_OPERATORS = {"and": "&&", "or": "||"}


def unwrap(text: str) -> str:
    """``(a + b)`` → ``a + b`` when the outer parentheses enclose the whole text."""
    if not (text.startswith("(") and text.endswith(")")):
        return text
    depth = 0
    for i, char in enumerate(text):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth == 0 and i < len(text) - 1:
            return text
    return text[1:-1]


@dataclass(frozen=True)
class _C(ScalarBackend):
    spelling: Spelling

    def number(self, value: float | int) -> str:
        return self.spelling.literal(float(value))

    def text(self, value: str) -> str:
        raise ValueError(f"no C spelling for the text {value!r}")

    def unary(self, op: str, operand: str) -> str:
        return f"(-{operand})" if op == "-" else f"(!{operand})"

    def binary(self, op: str, lhs: str, rhs: str) -> str:
        if op == "/" and self.spelling.reciprocal and lhs == self.number(1.0):
            return self.spelling.reciprocal.format(unwrap(rhs))
        if op in self.spelling.binary:
            return self.spelling.binary[op].format(lhs, rhs)
        return f"({lhs} {_C_OPERATORS.get(op, op)} {rhs})"

    def call(self, func: str, args: list[str]) -> str:
        if func == "select":
            return f"({args[0]} ? {args[1]} : {args[2]})"
        if func in self.spelling.functions:  # a call's own parentheses delimit its operands
            return self.spelling.functions[func].format(*(unwrap(a) for a in args))
        raise ValueError(f"no C spelling for Call {func}")

    def unsupported(self, expr: ast.Expr) -> Exception:
        return ValueError(f"no C spelling for {type(expr).__name__}")


def to_c(expr: ast.Expr, operands: Mapping[str, str], attributes: Mapping[str, float],
         spelling: Spelling) -> str:
    """C text of ``expr``: ``operands`` maps a parameter to its C expression, ``attributes``
    an attribute to its value (written as a literal). Every operator is parenthesised."""
    env = {name: spelling.literal(float(value)) for name, value in attributes.items()}
    env.update(operands)
    return compile_expr(expr, env, _C(spelling))
