"""Integers that remember the dim expression they were computed from.

The symbolic OpenCL build (`backends/opencl/symbolic.py`) compiles the backend at a
shape whose dims are `SymInt`s: each is the dim's value at that shape (every decision
the backend makes, a variant, a tile, a simplification, sees a plain int) and carries
the `DimExpr` it stands for (``batch*seq``, symbolic shape inference's answer). Python
arithmetic on them (``+ - * // %``, unary minus, ``math.prod``) carries the expression
along, so a size the kernel generator computes (an extent, a stride, a work-item count,
an arena offset) arrives with its DERIVATION over the dims, not a value to fit later.

Inside `tracking()`, a `SymInt` formats as a token (``__dnnr_s7__``) instead of its
digits: the kernel text then says where each derived size sits, and `build.hoist_sizes`
turns every token into a ``const int`` argument whose value the run time computes from
the expression. Outside `tracking()` a `SymInt` prints as its value. An operation the
class does not cover (``int()``, ``np.prod``, ``max``'s choice) yields a plain int or the
one operand: its value stays right at this shape, and the symbolic build checks every
expression at every shape of its box before it uses one (`symbolic._Partition`).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Hashable, Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, replace

from egraph_compiler.ir.dims import Dim, DimExpr, dim_add, dim_floordiv, dim_mod, dim_mul
from egraph_compiler.ir.graph import Graph, TensorType, Value

_TOKENS: ContextVar[list[SymInt] | None] = ContextVar("dnnr_symint_tokens", default=None)
# (left, op, right, outcome) of every comparison inside `recording()`
_FACTS: ContextVar[list[tuple[Dim, str, Dim, bool]] | None] = ContextVar("dnnr_symint_facts",
                                                                          default=None)
TOKEN = re.compile(r"__dnnr_s(\d+)__")


class SymInt(int):
    """``int`` with ``expr``: the dim expression whose value it is at this shape."""

    expr: DimExpr

    def __new__(cls, value: int, expr: DimExpr) -> SymInt:
        obj = super().__new__(cls, value)
        obj.expr = expr
        return obj

    # -- arithmetic carries the expression ------------------------------------------
    def __add__(self, other: object) -> object:
        return _binary(self, other, int.__add__(self, other), dim_add)  # type: ignore[operator]

    def __radd__(self, other: object) -> object:
        return _binary(other, self, int.__radd__(self, other), dim_add)  # type: ignore[operator]

    def __sub__(self, other: object) -> object:
        return _binary(self, other, int.__sub__(self, other),  # type: ignore[operator]
                       lambda a, b: dim_add(a, dim_mul(b, -1)))

    def __rsub__(self, other: object) -> object:
        return _binary(other, self, int.__rsub__(self, other),  # type: ignore[operator]
                       lambda a, b: dim_add(a, dim_mul(b, -1)))

    def __mul__(self, other: object) -> object:
        return _binary(self, other, int.__mul__(self, other), dim_mul)  # type: ignore[operator]

    def __rmul__(self, other: object) -> object:
        return _binary(other, self, int.__rmul__(self, other), dim_mul)  # type: ignore[operator]

    def __floordiv__(self, other: object) -> object:
        value = int.__floordiv__(self, other)  # type: ignore[operator]
        if isinstance(other, int) and not isinstance(other, (bool, SymInt)) and other > 0:
            return make(value, dim_floordiv(self.expr, other))
        return _plain(value)  # a divisor that is itself a dim: no polynomial form

    def __mod__(self, other: object) -> object:
        value = int.__mod__(self, other)  # type: ignore[operator]
        if isinstance(other, int) and not isinstance(other, (bool, SymInt)) and other > 0:
            return make(value, dim_mod(self.expr, other))
        return _plain(value)

    def __neg__(self) -> object:
        return make(-int(self), dim_mul(self.expr, -1))

    def __pos__(self) -> SymInt:
        return self

    def __pow__(self, other: object, modulo: object = None) -> object:
        value = int.__pow__(self, other, modulo)  # type: ignore[call-overload]
        if modulo is None and isinstance(other, int) and not isinstance(other, SymInt) \
                and 0 <= other <= 8:
            expr: Dim = 1
            for _ in range(other):
                expr = dim_mul(expr, self.expr)
            return make(value, expr)
        return _plain(value)

    # -- comparisons: the value decides; inside `recording()` the branch is noted ------
    def _compare(self, other: object, op: str, outcome: object) -> object:
        facts = _FACTS.get()
        if facts is not None and isinstance(outcome, bool) and isinstance(other, int) \
                and not isinstance(other, bool):
            facts.append((self.expr, op, expr_of(other), outcome))
        return outcome

    def __lt__(self, other: object) -> object:
        return self._compare(other, "<", int.__lt__(self, other))  # type: ignore[operator]

    def __le__(self, other: object) -> object:
        return self._compare(other, "<=", int.__le__(self, other))  # type: ignore[operator]

    def __gt__(self, other: object) -> object:
        return self._compare(other, ">", int.__gt__(self, other))  # type: ignore[operator]

    def __ge__(self, other: object) -> object:
        return self._compare(other, ">=", int.__ge__(self, other))  # type: ignore[operator]

    def __eq__(self, other: object) -> bool:
        return self._compare(other, "==", int.__eq__(self, other))  # type: ignore[return-value]

    def __ne__(self, other: object) -> bool:
        return self._compare(other, "!=", int.__ne__(self, other))  # type: ignore[return-value]

    __hash__ = int.__hash__

    # -- text ------------------------------------------------------------------------
    def __str__(self) -> str:
        return self.__format__("")

    def __format__(self, spec: str) -> str:
        tokens = _TOKENS.get()
        if tokens is None or spec:
            return format(int(self), spec)
        tokens.append(self)
        return f"__dnnr_s{len(tokens) - 1}__"

    def __repr__(self) -> str:
        return int.__repr__(self)

    def __reduce__(self) -> tuple:
        return (SymInt, (int(self), self.expr))


def _plain(value: object) -> object:
    return int(value) if isinstance(value, int) else value  # type: ignore[arg-type]


def expr_of(value: int) -> Dim:
    """The dim expression of ``value``: its own for a `SymInt`, else the constant."""
    return value.expr if isinstance(value, SymInt) else int(value)


def make(value: int, expr: Dim) -> int:
    """``value`` as a `SymInt` of ``expr``, or a plain int when ``expr`` is a constant."""
    if isinstance(expr, DimExpr):
        return SymInt(value, expr)
    return int(value)


def _binary(left: object, right: object, value: object, combine) -> object:  # noqa: ANN001
    if value is NotImplemented or not isinstance(value, int):
        return value
    if isinstance(left, bool) or isinstance(right, bool) or not (
            isinstance(left, int) and isinstance(right, int)):
        return _plain(value)
    return make(value, combine(expr_of(left), expr_of(right)))


@contextlib.contextmanager
def tracking() -> Iterator[list[SymInt]]:
    """While active, every `SymInt` formatted into text becomes a token; the list this
    yields maps token number -> the `SymInt` (`untoken` puts the digits back)."""
    tokens: list[SymInt] = []
    handle = _TOKENS.set(tokens)
    try:
        yield tokens
    finally:
        _TOKENS.reset(handle)


@contextlib.contextmanager
def recording() -> Iterator[list[tuple[Dim, str, Dim, bool]]]:
    """While active, every comparison of a `SymInt` is noted with its outcome: the
    conditions under which a computation that branched on values took its path (the
    region where what it derived holds, `backends/opencl/crossover.py`)."""
    facts: list[tuple[Dim, str, Dim, bool]] = []
    handle = _FACTS.set(facts)
    try:
        yield facts
    finally:
        _FACTS.reset(handle)


@contextlib.contextmanager
def unrecorded() -> Iterator[None]:
    """Comparisons inside are not noted by an enclosing `recording()`: a cache lookup
    that compares a key with one made at another shape (equal values, other
    derivations) decides nothing about this shape's path."""
    handle = _FACTS.set(None)
    try:
        yield
    finally:
        _FACTS.reset(handle)


_PLAIN = {"<": int.__lt__, "<=": int.__le__, ">": int.__gt__, ">=": int.__ge__,
          "==": int.__eq__, "!=": int.__ne__}


def everywhere(op: str, a: int, b: int) -> bool:
    """``a op b`` for an OPTIONAL specialisation (an index simplification, a dim of 1
    dropped): for plain ints, their comparison; where a `SymInt` takes part and dim
    ranges are active (`prover.using_ranges`), True only when the prover establishes it
    at every shape of the ranges, so the generated code is the same at all of them and
    the comparison is no part of the path (`recording`). Outside active ranges the
    value decides, as a plain comparison would."""
    if not (isinstance(a, SymInt) or isinstance(b, SymInt)):
        return _PLAIN[op](int(a), int(b))
    from egraph_compiler.shapes.prover import _ACTIVE_RANGES, decide

    if not _ACTIVE_RANGES.get():
        return bool({"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b, "==": a == b,
                     "!=": a != b}[op])
    if not _PLAIN[op](int(a), int(b)):
        return False
    return decide(op, expr_of(a), expr_of(b)) is True


def pinned(value: int) -> int:
    """``value`` as a plain int for code that depends on it exactly (a register tile
    as long as a short dim): inside `recording()` the path notes ``value == its
    value here``, so a symbolic build compiles this code for this value only."""
    if isinstance(value, SymInt):
        value.__eq__(int(value))
    return int(value)


def bit_length(value: int) -> int:
    """``int.bit_length`` of ``value`` (a power-of-two work-group for a row of this
    length): inside `recording()` the path notes the power-of-two interval it falls in,
    which a plain ``bit_length`` (no expression for it) would not."""
    bits = int(value).bit_length()
    if isinstance(value, SymInt) and bits > 0:
        value.__ge__(1 << (bits - 1))
        value.__lt__(1 << bits)
    return bits


@dataclass(frozen=True)
class Choice:
    """A decision the backend made in floating point over sizes derived from the dims
    (a cost model's pick), which comparisons of `SymInt`s do not see: ``decide(dims)``
    re-makes it at any shape, and the path holds where it gives ``label`` again."""

    what: str
    label: str
    decide: Callable[[Mapping[str, int]], str]
    signature: str  # what ``decide`` evaluates (its sizes' derivations)

    @property
    def key(self) -> Hashable:
        return ("choice", self.what, self.signature, self.label)

    def holds(self, env: Mapping[str, int]) -> bool:
        return self.decide(env) == self.label

    def __str__(self) -> str:
        return f"{self.what} runs {self.label}"


def note_choice(choice: Choice) -> None:
    """Add ``choice`` to the path of the enclosing `recording()` (none: nothing)."""
    facts = _FACTS.get()
    if facts is not None:
        facts.append(choice)  # type: ignore[arg-type]


def untoken(text: str, tokens: list[SymInt]) -> str:
    """``text`` with every token replaced by its value's digits."""
    return TOKEN.sub(lambda m: str(int(tokens[int(m.group(1))])), text)


def active_tokens() -> list[SymInt] | None:
    """The token list of the enclosing `tracking()`, or None outside one."""
    return _TOKENS.get()


def plain_text(text: str) -> str:
    """``text`` with its tokens as digits (a name, a variant's note: not kernel code)."""
    tokens = _TOKENS.get()
    return text if tokens is None or "__dnnr_s" not in text else untoken(text, tokens)


def with_derivations(bound: Graph, symbolic: Graph, env: Mapping[str, int]) -> Graph:
    """``bound`` (``symbolic`` with its dims bound to ``env``) whose shape dims are
    `SymInt`s of ``symbolic``'s dim expressions, where shape inference gave one that
    agrees with the bound value (elsewhere the plain int stays)."""

    def derived(name: str, shape: tuple | None) -> tuple | None:
        known = symbolic.types.get(name)
        if shape is None or known is None or known.shape is None or len(known.shape) != len(shape):
            return shape
        dims = []
        for value, expr in zip(shape, known.shape, strict=True):
            if isinstance(value, int) and isinstance(expr, DimExpr) and \
                    expr.symbols() <= set(env) and expr.evaluate(dict(env)) == value:
                value = SymInt(value, expr)
            dims.append(value)
        return tuple(dims)

    types = {n: TensorType(t.dtype, derived(n, t.shape)) for n, t in bound.types.items()}
    inputs = tuple(Value(v.name, types.get(v.name, v.type)) for v in bound.inputs)
    outputs = tuple(Value(v.name, types.get(v.name, v.type)) for v in bound.outputs)
    return replace(bound, inputs=inputs, outputs=outputs, types=types)


def proved_equal(a: int, b: int) -> bool:
    """``a == b`` for every shape of the active dim ranges (`prover.using_ranges`) when
    either is a `SymInt`; for plain ints, their equality. An equality that holds at this
    shape only (a batch of 1 against a broadcast 1) is NOT one: fusion legality that
    rests on it must hold at every shape one artefact serves."""
    if not (isinstance(a, SymInt) or isinstance(b, SymInt)):
        return int(a) == int(b)
    if int(a) != int(b):
        return False
    from egraph_compiler.shapes.prover import decide

    return decide("==", expr_of(a), expr_of(b)) is True
