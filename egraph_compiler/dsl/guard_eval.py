"""The one evaluator of guards and computed attributes (issue 11: one meaning of a guard).

The e-graph (`egraph/guards.py`: concrete ints, symbolic dims decided by the shapes
prover) and the verifier (`verify/evalexpr.py`: Z3 terms) both interpret the normalised
guard AST here; each supplies only a `GuardDomain` — how a tensor variable's facts are
read and how a *symbolic* value (a `DimExpr`, a Z3 term) is compared, combined and
passed to a shape built-in. Everything a guard means on concrete values is decided in
this module, once:

- names: ``inf``, ``true``/``false``, an attribute, else a dtype name as text;
- ``and`` / ``or`` short-circuit on a decided operand, and ``a or b`` holds when one
  side holds even if the other is undecided;
- ``==``/``!=`` of lists compare lengths then elements; ``//``/``%`` floor; ``**`` is
  int64-bounded (`dsl.bounds`);
- an index, ``dim(?x, i)`` or built-in argument out of range is *undecided*;
- tensor facts (`rank`, `shape`, `dim`, `numel`, `dtype`, `same_shape`,
  `broadcastable`, `is_const`, element facts) and int-list built-ins (`dsl.builtins`).

Undecided (`Undecided`) means the rule does not fire there: the e-graph treats it as a
false guard, the verifier as a configuration where the rule does not apply.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from egraph_compiler.dsl import ast
from egraph_compiler.dsl import builtins as dsl_builtins
from egraph_compiler.dsl.bounds import bounded_pow


class Undecided(Exception):
    """The guard or attribute has no value here: the rule does not fire."""


TENSOR_FACTS = ("rank", "shape", "dim", "numel", "dtype", "same_shape", "broadcastable",
                "is_const")
ELEMENT_FACTS = ("nonzero", "positive", "nonneg")
COMPARISONS = ("==", "!=", "<", "<=", ">", ">=")
SHAPE_BUILTINS = ("reshape_shape", "reshape_target", "squeeze_shape", "unsqueeze_shape",
                  "flatten_shape")
# permutation arithmetic the verifier encodes over symbolic perms (`verify/perm.py`)
PERM_BUILTINS = ("compose", "invert", "is_identity", "permute")

_ORDER: Mapping[str, Callable[[Any, Any], bool]] = {
    "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge}
ARITH: Mapping[str, Callable[[Any, Any], Any]] = {
    "+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv,
    "//": operator.floordiv, "%": operator.mod, "**": bounded_pow}


class GuardDomain:
    """Where a guard is evaluated. The base class knows concrete Python values only;
    a caller subclasses it for its tensor facts and its symbolic values. A method
    that cannot answer raises `Undecided`."""

    # ------------------------------------------------------------ tensor facts
    def rank(self, var: str) -> int:
        raise Undecided(f"rank(?{var})")

    def shape(self, var: str) -> Sequence[Any]:
        raise Undecided(f"shape(?{var})")

    def dtype(self, var: str) -> str:
        raise Undecided(f"dtype(?{var})")

    def is_const(self, var: str) -> Any:
        raise Undecided(f"is_const(?{var})")

    def element_fact(self, kind: str, var: str) -> Any:
        raise Undecided(f"{kind}(?{var})")

    def tensor_value(self, var: str) -> Sequence[Any]:
        """A (small, 1-D int) tensor variable used as a value: its elements."""
        raise Undecided(f"?{var} is a tensor; use it through shape(), dim() ...")

    # ------------------------------------------------------------ values
    def make_list(self, items: Sequence[Any]) -> Any:
        return tuple(items)

    def is_symbolic(self, value: Any) -> bool:
        """A value the base class cannot compute with (a symbolic dim, a Z3 term)."""
        return False

    def compare_symbolic(self, op: str, a: Any, b: Any) -> Any:
        raise Undecided(f"symbolic {op}")

    def arith_symbolic(self, op: str, a: Any, b: Any) -> Any:
        raise Undecided(f"symbolic {op}")

    def negate_symbolic(self, a: Any) -> Any:
        raise Undecided("symbolic -")

    def logic_symbolic(self, op: str, values: Sequence[Any]) -> Any:
        """``and`` / ``or`` / ``not`` of values, one at least symbolic (never decided)."""
        raise Undecided(f"symbolic {op}")

    def shape_builtin(self, name: str, args: Sequence[Any]) -> Any:
        """A shape built-in whose arguments hold a symbolic value."""
        return _concrete_builtin(name, args)

    def unsupported(self, name: str) -> Exception:
        """The exception for a built-in this domain cannot evaluate."""
        return Undecided(name)


def _concrete_builtin(name: str, args: Sequence[Any]) -> Any:
    builtin = dsl_builtins.BUILTINS.get(name)
    if builtin is None or builtin.impl is None:
        raise Undecided(name)
    try:
        return builtin.impl(*args)
    except (ValueError, TypeError, IndexError, ZeroDivisionError) as err:
        raise Undecided(f"{name}: {err}") from None


def _has_symbol(domain: GuardDomain, value: Any) -> bool:
    if isinstance(value, (list, tuple)):
        return any(_has_symbol(domain, v) for v in value)
    return domain.is_symbolic(value)


def evaluate(expr: ast.Expr, env: Mapping[str, Any], domain: GuardDomain) -> Any:
    """The value of ``expr``; ``env`` binds attribute variables (and names) to values,
    tensor variables are read through ``domain``. Raises `Undecided`."""
    return _Evaluator(env, domain)(expr)


def holds(expr: ast.Expr, env: Mapping[str, Any], domain: GuardDomain) -> bool:
    """Concrete guard truth: undecided (or symbolic) counts as false."""
    try:
        value = evaluate(expr, env, domain)
    except Undecided:
        return False
    return value is True


class _Evaluator:
    def __init__(self, env: Mapping[str, Any], domain: GuardDomain) -> None:
        self.env = env
        self.domain = domain

    def __call__(self, e: ast.Expr) -> Any:
        if isinstance(e, ast.Num):
            return e.value
        if isinstance(e, ast.Str):
            return e.value
        if isinstance(e, ast.Name):
            if e.name in self.env:
                return self.env[e.name]
            if e.name == "inf":
                return math.inf
            if e.name in ("true", "false"):
                return e.name == "true"
            return e.name  # a dtype name such as float32 compares as text
        if isinstance(e, ast.Var):
            if e.name in self.env:
                return self.env[e.name]
            return self.domain.make_list(self.domain.tensor_value(e.name))
        if isinstance(e, ast.ListLit):
            return self.domain.make_list([self(item) for item in e.items])
        if isinstance(e, ast.Index):
            base, index = self(e.base), self(e.index)
            if (not isinstance(base, (list, tuple)) or isinstance(index, bool)
                    or not isinstance(index, int) or not -len(base) <= index < len(base)):
                raise Undecided("index out of range")
            return base[index]
        if isinstance(e, ast.UnOp):
            value = self(e.operand)
            if e.op == "not":
                return self._not(value)
            if self.domain.is_symbolic(value):
                return self.domain.negate_symbolic(value)
            if isinstance(value, (bool, str, list, tuple)):
                raise Undecided("- of a non-number")
            return -value
        if isinstance(e, ast.BinOp):
            return self._binop(e)
        if isinstance(e, ast.Call):
            return self._call(e)
        raise Undecided(f"cannot evaluate {type(e).__name__}")

    # ------------------------------------------------------------ logic
    def _truth(self, value: Any) -> Any:
        if isinstance(value, bool) or self.domain.is_symbolic(value):
            return value
        raise Undecided("not a boolean")

    def _not(self, value: Any) -> Any:
        value = self._truth(value)
        return self.domain.logic_symbolic("not", [value]) if self.domain.is_symbolic(
            value) else not value

    def _logic(self, op: str, lhs: ast.Expr, rhs: ast.Expr) -> Any:
        stop = op == "or"  # the value that decides the whole: False for and, True for or
        try:
            left = self._truth(self(lhs))
        except Undecided:
            if op == "and":
                raise
            left = None  # `a or b` holds when b does, even with a undecided
        if left is stop:
            return stop
        right = self._truth(self(rhs))
        if right is stop:
            return stop
        if left is None:
            raise Undecided("or")
        if isinstance(left, bool) and isinstance(right, bool):
            return not stop
        return self.domain.logic_symbolic(op, [v for v in (left, right) if v is not (not stop)])

    # ------------------------------------------------------------ arithmetic
    def _binop(self, e: ast.BinOp) -> Any:
        if e.op in ("and", "or"):
            return self._logic(e.op, e.lhs, e.rhs)
        a, b = self(e.lhs), self(e.rhs)
        if e.op in COMPARISONS:
            return compare(self.domain, e.op, a, b)
        if e.op == "+" and isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
            return self.domain.make_list([*a, *b])
        if isinstance(a, (list, tuple, str)) or isinstance(b, (list, tuple, str)):
            raise Undecided(f"{e.op} of a list or text")
        if self.domain.is_symbolic(a) or self.domain.is_symbolic(b):
            return self.domain.arith_symbolic(e.op, a, b)
        if isinstance(a, bool) or isinstance(b, bool):
            raise Undecided(f"{e.op} of a boolean")
        try:
            return ARITH[e.op](a, b)
        except (TypeError, ValueError, ZeroDivisionError, OverflowError):
            raise Undecided(e.op) from None

    # ------------------------------------------------------------ built-ins
    def _tensor(self, arg: ast.Expr) -> str:
        if not isinstance(arg, ast.Var) or arg.name in self.env:
            raise Undecided("tensor facts take a tensor pattern variable")
        return arg.name

    def _call(self, e: ast.Call) -> Any:
        f, args, domain = e.func, e.args, self.domain
        if f in ELEMENT_FACTS:
            return domain.element_fact(f, self._tensor(args[0]))
        if f in TENSOR_FACTS:
            return self._tensor_fact(f, args)
        builtin = dsl_builtins.BUILTINS.get(f)
        if builtin is None or builtin.category != "int_list":
            raise domain.unsupported(f)
        values = [self(a) for a in args]
        if (f in SHAPE_BUILTINS or f in PERM_BUILTINS) and _has_symbol(domain, values):
            result = domain.shape_builtin(f, values)
        else:
            result = _concrete_builtin(f, values)
        return domain.make_list(result) if isinstance(result, (list, tuple)) else result

    def _tensor_fact(self, f: str, args: tuple[ast.Expr, ...]) -> Any:
        domain = self.domain
        if f == "rank":
            return domain.rank(self._tensor(args[0]))
        if f == "dtype":
            return domain.dtype(self._tensor(args[0]))
        if f == "is_const":
            return domain.is_const(self._tensor(args[0]))
        shape = list(domain.shape(self._tensor(args[0])))
        if f == "shape":
            return domain.make_list(shape)
        if f == "dim":
            axis = self(args[1])
            if isinstance(axis, bool) or not isinstance(axis, int) or not -len(shape) <= axis < len(shape):
                raise Undecided("dim() axis out of range")
            return shape[axis]
        if f == "numel":
            total: Any = 1
            for d in shape:
                total = (domain.arith_symbolic("*", total, d) if domain.is_symbolic(d)
                         or domain.is_symbolic(total) else total * d)
            return total
        other = list(domain.shape(self._tensor(args[1])))
        if f == "same_shape":
            return compare(domain, "==", shape, other)
        # broadcastable: every trailing pair equal or one of them 1
        pairs = []
        for x, y in zip(reversed(shape), reversed(other), strict=False):
            pairs.append(_all_of(domain, [compare(domain, "==", x, y), compare(domain, "==", x, 1),
                                          compare(domain, "==", y, 1)], "or"))
        return _all_of(domain, pairs)


def _all_of(domain: GuardDomain, values: Sequence[Any], op: str = "and") -> Any:
    """``and`` (``or``) of ``values``: False (True) where one is, else of the symbolic ones."""
    stop = op == "or"  # the value that decides the whole
    if any(v is stop for v in values):
        return stop
    symbolic = [v for v in values if v is not (not stop)]
    return domain.logic_symbolic(op, symbolic) if symbolic else not stop


def compare(domain: GuardDomain, op: str, a: Any, b: Any) -> Any:
    """``a op b``: lists compare by length then elementwise (``==``/``!=``) or
    lexicographically (concrete only); symbolic values go to the domain."""
    if isinstance(a, (list, tuple)) or isinstance(b, (list, tuple)):
        if op in ("==", "!="):
            if not isinstance(a, (list, tuple)) or not isinstance(b, (list, tuple)) or len(a) != len(b):
                return op == "!="
            parts: list[Any] = []
            undecided: Undecided | None = None
            for x, y in zip(a, b, strict=True):
                try:
                    parts.append(compare(domain, "==", x, y))
                except Undecided as err:  # one unequal pair still decides the whole
                    undecided = err
            if undecided is not None and not any(p is False for p in parts):
                raise undecided
            equal = _all_of(domain, parts)
            if op == "==":
                return equal
            return (not equal) if isinstance(equal, bool) else domain.logic_symbolic("not", [equal])
        if _has_symbol(domain, a) or _has_symbol(domain, b):
            raise Undecided(f"symbolic list {op}")
        a, b = tuple(a), tuple(b)  # type: ignore[arg-type]
    elif domain.is_symbolic(a) or domain.is_symbolic(b):
        return domain.compare_symbolic(op, a, b)
    if op == "==":
        return a == b
    if op == "!=":
        return a != b
    if isinstance(a, bool) or isinstance(b, bool):
        raise Undecided(f"{op} of a boolean")
    try:
        return bool(_ORDER[op](a, b))
    except TypeError:
        raise Undecided("incomparable") from None
