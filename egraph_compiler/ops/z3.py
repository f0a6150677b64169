"""The Z3 backend of `ops.scalar`: an operator's ``= expr`` / ``requires expr`` as a Z3
term, through the same compiler (`scalar.compile_expr`) as the NumPy and C targets.

What the arithmetic means is the caller's `Z3Arithmetic` — the verifier's tier (exact
reals, integers, IEEE formats, bit-vectors, uninterpreted): it plays the part a C
target's `Spelling` plays, saying how each operator and scalar function is written.
This module only decides what is common to every tier: conditions and numbers convert
into each other where the expression needs the other (``not x`` of a boolean tensor,
``select(a > b, ...)``), text compares as text, ``inf`` is the tier's infinity.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

import z3

from egraph_compiler.dsl import ast
from egraph_compiler.ops.scalar import ScalarBackend, compile_expr


class Unencodable(Exception):
    """The expression has no Z3 encoding (the verdict is `unknown`)."""


class Z3Arithmetic(Protocol):
    """A tier's scalar arithmetic (the verifier's `Domain`)."""

    def const(self, value: float | int) -> z3.ExprRef: ...
    def binop(self, op: str, a: Any, b: Any) -> z3.ExprRef: ...
    def neg(self, a: z3.ExprRef) -> z3.ExprRef: ...
    def call(self, func: str, args: tuple[z3.ExprRef, ...]) -> z3.ExprRef: ...


def as_bool(value: Any, arith: Z3Arithmetic) -> Any:
    """A tensor element read as a condition: ONNX booleans are stored as 0 / 1 elements
    (every element of a tensor variable has the tier's sort), so nonzero is true."""
    if isinstance(value, (z3.BoolRef, bool)):
        return value
    return arith.binop("!=", value, arith.const(0))


def as_element(value: Any, arith: Z3Arithmetic) -> Any:
    """A condition stored as a tensor element: 1 or 0 in the tier's sort."""
    if isinstance(value, z3.BoolRef):
        return z3.If(value, arith.const(1), arith.const(0))
    return value


_LOGIC = {"and": z3.And, "or": z3.Or}


class Z3Backend(ScalarBackend):
    def __init__(self, arith: Z3Arithmetic) -> None:
        self.arith = arith

    def _lift(self, value: Any) -> Any:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return self.arith.const(value)
        return as_element(value, self.arith)

    def number(self, value: float | int) -> Any:
        return self.arith.const(value)

    def name(self, name: str, env: Mapping[str, Any]) -> Any:
        if name in env:
            return env[name]
        if name == "inf":
            return self.arith.const(float("inf"))
        raise Unencodable(f"unknown name `{name}` in operator semantics")

    def unary(self, op: str, operand: Any) -> Any:
        if op == "not":
            return z3.Not(as_bool(operand, self.arith))
        return self.arith.neg(self._lift(operand))

    def binary(self, op: str, lhs: Any, rhs: Any) -> Any:
        if isinstance(lhs, str) or isinstance(rhs, str):
            if op in ("==", "!="):
                return z3.BoolVal((lhs == rhs) == (op == "=="))
            raise Unencodable("string arithmetic in operator semantics")
        if op in _LOGIC:
            return _LOGIC[op](as_bool(lhs, self.arith), as_bool(rhs, self.arith))
        if op in ("==", "!=") and isinstance(lhs, z3.BoolRef) and isinstance(rhs, z3.BoolRef):
            return (lhs == rhs) if op == "==" else (lhs != rhs)
        return self.arith.binop(op, self._lift(lhs), self._lift(rhs))

    def call(self, func: str, args: list[Any]) -> Any:
        if func in ("select", "where") and len(args) == 3:
            return self.arith.call(func, (as_bool(args[0], self.arith), self._lift(args[1]),
                                          self._lift(args[2])))
        return self.arith.call(func, tuple(self._lift(a) for a in args))

    def unsupported(self, expr: ast.Expr) -> Exception:
        return Unencodable(f"cannot encode {expr!r} in operator semantics")


def to_z3(expr: ast.Expr, env: Mapping[str, Any], arith: Z3Arithmetic) -> Any:
    """``expr`` as a Z3 term (or condition) over ``env``'s terms, in ``arith``'s tier."""
    return compile_expr(expr, env, Z3Backend(arith))
