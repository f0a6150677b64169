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

from egraph_compiler.dsl import ast, shape_builtins
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
    # optional: ``values(var)`` (a rank-1 tensor's elements as ints, for list
    # built-ins) and ``require(cond)`` (a symbolic condition a built-in needs)


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


def _has_z3(value: Any) -> bool:
    if isinstance(value, (list, tuple)):
        return any(_has_z3(v) for v in value)
    return _is_z3(value)


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


def sym_squeeze_shape(shape: Sequence[Any], axes: Sequence[int], require: Require
                      ) -> list[Any]:
    if not axes:
        raise NotApplicable("squeeze of all unit dims with symbolic dims")
    drop = {shape_builtins._axis(a, len(shape)) for a in axes}
    for i in drop:
        require(_int(shape[i]) == 1)
    return [d for i, d in enumerate(shape) if i not in drop]


def sym_unsqueeze_shape(shape: Sequence[Any], axes: Sequence[int], require: Require
                        ) -> list[Any]:
    try:
        return list(shape_builtins.unsqueeze_shape(list(shape), list(axes)))
    except ValueError as err:
        raise NotApplicable(str(err)) from err


def sym_flatten_shape(shape: Sequence[Any], axis: int, require: Require) -> list[Any]:
    rank = len(shape)
    if not isinstance(axis, int) or not -rank <= axis <= rank:
        raise NotApplicable(f"Flatten axis {axis} for rank {rank}")
    cut = axis + rank if axis < 0 else axis
    return [_prod(shape[:cut]), _prod(shape[cut:])]


SHAPE_BUILTINS: dict[str, Callable[..., Any]] = {
    "reshape_shape": sym_reshape_shape, "reshape_target": sym_reshape_target,
    "squeeze_shape": sym_squeeze_shape, "unsqueeze_shape": sym_unsqueeze_shape,
    "flatten_shape": sym_flatten_shape,
}


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
            values = getattr(self.facts, "values", None)
            if values is not None:  # a constant 1-D tensor used as a list (a shape)
                return list(values(e.name))
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

    def _tensor(self, arg: ast.Expr) -> str:
        if not isinstance(arg, ast.Var):
            raise NotApplicable("tensor built-ins take a pattern variable")
        return arg.name

    def _call(self, e: ast.Call) -> Any:
        f, args = e.func, e.args
        if f in PURE_BUILTINS:
            return PURE_BUILTINS[f](*[self(a) for a in args])
        if f in SHAPE_BUILTINS:
            args_v = [self(a) for a in args]
            if not any(_has_z3(a) for a in args_v):
                try:
                    return list(getattr(shape_builtins, f)(*args_v))
                except ValueError as err:
                    raise NotApplicable(str(err)) from err
            return SHAPE_BUILTINS[f](*args_v, require=self._require)
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
