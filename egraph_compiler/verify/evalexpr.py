"""The verifier's domain for guards and computed attributes: `dsl.guard_eval` (the one
evaluator, shared with the e-graph) over Python values where they are known (ranks,
permutations, axes) and Z3 terms where they are symbolic (dims, element facts).

The same domain serves the SMT encoding and the NumPy replay: only the `Facts`
backend differs. Shape built-ins over symbolic dims are encoded here (`SHAPE_BUILTINS`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import z3

from egraph_compiler.dsl import ast, guard_eval, shape_builtins
from egraph_compiler.verify.scalar import Unsupported

# A guard or attribute cannot be evaluated for this configuration (e.g. an axis out of
# range): the rule does not fire here. The same exception as the e-graph's "undecided".
NotApplicable = guard_eval.Undecided


class Facts(Protocol):
    def rank(self, var: str) -> int: ...
    def shape(self, var: str) -> list[Any]: ...
    def element_fact(self, kind: str, var: str) -> Any: ...
    def is_const(self, var: str) -> Any: ...
    def dtype(self, var: str) -> str: ...
    # optional: ``values(var)`` (a rank-1 tensor's elements as ints, for list
    # built-ins) and ``require(cond)`` (a symbolic condition a built-in needs)


def _is_z3(value: object) -> bool:
    return isinstance(value, z3.ExprRef)


# ---------------------------------------------------------------- shape built-ins, symbolic
# `dsl.shape_builtins` over z3 dims: the same results, with the conditions under which
# the compiler's version succeeds handed to ``require`` (where it raises, the rule does
# not fire). Where the compiler may fail on a case that is mathematically defined (it
# cannot cancel some symbolic dims), firing is over-approximated: more is proved.
Require = Callable[[Any], None]


def _int(value: Any) -> Any:
    return z3.IntVal(value) if isinstance(value, int) else value


def _prod(dims: Sequence[Any]) -> Any:
    return math.prod((_int(d) for d in dims), start=z3.IntVal(1)) if dims else 1


def sym_reshape_shape(shape: Sequence[Any], target: Sequence[Any], require: Require
                      ) -> list[Any]:
    """ONNX Reshape (allowzero=0): 0 copies the input dim, one -1 is inferred (the
    element count divided by the other output dims), the element count is kept."""
    plain: list[Any] = []  # each output dim, with 1 in place of an inferred one
    is_inferred: list[Any] = []
    for k, t in enumerate(target):
        copy = shape[k] if k < len(shape) else None
        if isinstance(t, int):
            if t == 0 and copy is None or t < -1:
                raise NotApplicable(f"Reshape target entry {t} at {k}")
            plain.append(copy if t == 0 else 1 if t == -1 else t)
            is_inferred.append(t == -1)
            continue
        require(t >= -1)
        if copy is None:
            require(t != 0)
        plain.append(z3.If(t == -1, 1, t if copy is None else z3.If(t == 0, copy, t)))
        is_inferred.append(t == -1)
    numel = _prod(shape)
    if not any(x is True or _is_z3(x) for x in is_inferred):
        require(_prod(plain) == numel)
        return plain
    require(z3.Sum([z3.If(x, 1, 0) if _is_z3(x) else int(x) for x in is_inferred]) <= 1)
    inferred = _int(numel) / _prod(plain)
    out = [inferred if x is True else z3.If(x, inferred, d) if _is_z3(x) else d
           for x, d in zip(is_inferred, plain, strict=True)]
    require(_prod(out) == numel)
    return out


def sym_reshape_target(source: Sequence[Any], result: Sequence[Any], require: Require
                       ) -> list[Any]:
    """A target that gives ``result``: the compiler writes 0 / -1 for some symbolic
    dims, and returns it only once `reshape_shape(source, target) == result`; the
    result itself (its dims >= 1 written out) gives the same output shape."""
    require(_prod(result) == _prod(source))
    return list(result)


# Reshape's own: its target entries may be symbolic (-1 and 0 decided by the solver), which
# the compiler's version never meets. Squeeze, Unsqueeze and Flatten are the compiler's.
SHAPE_BUILTINS: dict[str, Callable[..., Any]] = {
    "reshape_shape": sym_reshape_shape, "reshape_target": sym_reshape_target,
    "squeeze_shape": shape_builtins.squeeze_shape,
    "unsqueeze_shape": lambda shape, axes, require: shape_builtins.unsqueeze_shape(shape, axes),
    "flatten_shape": lambda shape, axis, require: shape_builtins.flatten_shape(shape, axis),
}


def call_shape_builtin(function: Callable[..., Any], *args: Any, **hooks: Any) -> Any:
    """``function(*args)``; where it raises (no exact answer), the rule does not fire."""
    try:
        return function(*args, **hooks)
    except ValueError as err:
        raise NotApplicable(str(err)) from err


class Z3Domain(guard_eval.GuardDomain):
    """The verifier's domain: tensor facts from a `Facts` backend (the SMT encoding,
    the NumPy replay, the rank enumeration); symbolic values are Z3 terms; a shape
    built-in over symbolic dims fires only where ``facts.require`` is told it is defined."""

    def __init__(self, facts: Facts) -> None:
        self.facts = facts

    def rank(self, var: str) -> int:
        return self.facts.rank(var)

    def shape(self, var: str) -> Sequence[Any]:
        return self.facts.shape(var)

    def dtype(self, var: str) -> str:
        return self.facts.dtype(var)

    def is_const(self, var: str) -> Any:
        return self.facts.is_const(var)

    def element_fact(self, kind: str, var: str) -> Any:
        return self.facts.element_fact(kind, var)

    def tensor_value(self, var: str) -> Sequence[Any]:
        values = getattr(self.facts, "values", None)
        if values is None:
            raise NotApplicable(f"?{var} is a tensor; use it through shape(), dim() ...")
        return values(var)  # a constant 1-D tensor used as a list (a shape)

    def make_list(self, items: Sequence[Any]) -> Any:
        return list(items)

    def is_symbolic(self, value: Any) -> bool:
        return _is_z3(value)

    def compare_symbolic(self, op: str, a: Any, b: Any) -> Any:
        return _Z3_COMPARE[op](a, b)

    def arith_symbolic(self, op: str, a: Any, b: Any) -> Any:
        if op == "//":  # integer dims: Z3's integer division
            return a / b
        if op == "**":
            return a ** b
        return guard_eval.ARITH[op](a, b)

    def negate_symbolic(self, a: Any) -> Any:
        return -a

    def logic_symbolic(self, op: str, values: Sequence[Any]) -> Any:
        terms = [v if _is_z3(v) else z3.BoolVal(bool(v)) for v in values]
        if op == "not":
            return z3.Not(terms[0])
        return z3.And(*terms) if op == "and" else z3.Or(*terms)

    def shape_builtin(self, name: str, args: Sequence[Any]) -> Any:
        if not getattr(self.facts, "symbolic_shape_builtins", True):
            raise NotApplicable(f"{name} over symbolic dims")
        if name in SHAPE_BUILTINS:
            return list(call_shape_builtin(SHAPE_BUILTINS[name], *args, require=self._require))
        from egraph_compiler.verify.perm import PERM_BUILTINS  # perm imports this module's users

        if name in PERM_BUILTINS:
            return PERM_BUILTINS[name](*args, require=self._require)
        return super().shape_builtin(name, args)

    def unsupported(self, name: str) -> Exception:
        return Unsupported(f"the built-in {name}() has no verifier encoding")

    def _require(self, cond: Any) -> None:
        """A symbolic shape built-in is defined only where ``cond`` holds."""
        if not _is_z3(cond):
            if not cond:
                raise NotApplicable("a shape built-in is undefined here")
            return
        simple = z3.simplify(cond)
        if z3.is_false(simple):
            raise NotApplicable("a shape built-in is undefined here")
        if not z3.is_true(simple):
            require = getattr(self.facts, "require", None)
            if require is None:
                raise NotApplicable("a symbolic shape condition")
            require(cond)


_Z3_COMPARE: dict[str, Callable[[Any, Any], Any]] = {
    "==": lambda a, b: a == b, "!=": lambda a, b: a != b, "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b, ">": lambda a, b: a > b, ">=": lambda a, b: a >= b}


def evaluate(expr: ast.Expr, attrs: dict[str, Any], facts: Facts) -> Any:
    """The value of ``expr`` (`dsl.guard_eval`, the e-graph's evaluator too); tensor
    variables (``?x``) are read through ``facts``."""
    return guard_eval.evaluate(expr, attrs, Z3Domain(facts))
