"""Index comprehension: integer index expressions with range-aware strength reduction.

SmartMem §3.2.1: a layout operator fused into a block becomes index arithmetic.
Reshape splits (``//``, ``%``), merges (``*``, ``+``) or keeps (identity) index
dimensions; Transpose permutes them. Built naively (linearise, then delinearise)
the arithmetic is full of redundant ``/`` and ``%``; the constructors below
simplify as they build, using each sub-expression's value range:

- ``(q*c + r) // c -> q + r // c`` and ``(q*c + r) % c -> r % c`` (floor semantics);
- ``r // c -> 0`` and ``r % c -> r`` when ``0 <= r < c``;
- ``x // a // b -> x // (a*b)``; ``x % a % b -> x % b`` when ``a % b == 0``;
- a common factor ``g`` of every coefficient and the divisor cancels.

So a merge followed by the matching split disappears entirely, which is what
"eliminating" a Reshape/Transpose between two blocks means in generated code.
Expressions are immutable and hash-consed by value; `render` prints C.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from math import gcd

from egraph_compiler.shapes.prover import _ACTIVE_RANGES
from egraph_compiler.shapes.symint import SymInt, everywhere, unrecorded


@dataclass(frozen=True, slots=True)
class IVar:
    """A loop or work-item index with an inclusive value range."""

    name: str
    lo: int
    hi: int


@dataclass(frozen=True, slots=True)
class IOpaque:
    """An index read from a tensor (Gather indices) or any C text with a known range."""

    text: str
    lo: int
    hi: int
    deps: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class IDiv:
    num: IExpr
    den: int


@dataclass(frozen=True, slots=True)
class IMod:
    num: IExpr
    den: int


@dataclass(frozen=True, slots=True)
class ISum:
    """``const + sum(coeff * atom)``; atoms are never ISum, coefficients never 0."""

    terms: tuple[tuple[Atom, int], ...]
    const: int


Atom = IVar | IOpaque | IDiv | IMod
IExpr = int | Atom | ISum


# ----------------------------------------------------------------- ranges


def value_range(expr: IExpr) -> tuple[int, int]:
    if isinstance(expr, int):
        return expr, expr
    if isinstance(expr, (IVar, IOpaque)):
        return expr.lo, expr.hi
    if isinstance(expr, IDiv):
        lo, hi = value_range(expr.num)
        return lo // expr.den, hi // expr.den
    if isinstance(expr, IMod):
        lo, hi = value_range(expr.num)
        if everywhere(">=", lo, 0) and everywhere("<", hi, expr.den):
            return lo, hi
        return 0, expr.den - 1
    lo = hi = expr.const
    for atom, coeff in expr.terms:
        alo, ahi = value_range(atom)
        # alo <= ahi: the coefficient's sign orders the products (no comparison of
        # sizes that a symbolic build derives from the dims)
        lo += alo * coeff if coeff >= 0 else ahi * coeff
        hi += ahi * coeff if coeff >= 0 else alo * coeff
    return lo, hi


# ----------------------------------------------------------------- linear form


def _linear(expr: IExpr) -> tuple[dict[Atom, int], int]:
    if isinstance(expr, int):
        return {}, expr
    if isinstance(expr, ISum):
        return dict(expr.terms), expr.const
    return {expr: 1}, 0


@functools.lru_cache(maxsize=1 << 16)
def _cached_text(atom: Atom) -> str:
    return repr(atom)


def _order_key(atom: Atom) -> str:
    """Terms are ordered by their text (the generated code depends on that order);
    atoms are immutable, so each one's text is computed once. In a symbolic build
    (dim ranges active) a range derived from the dims is its expression in the text,
    not its value here: the order, and so the code, is the same at every shape (and
    the cache, which compares values, is not used)."""
    if _ACTIVE_RANGES.get():
        return _symbolic_text(atom)
    with unrecorded():
        return _cached_text(atom)


def _symbolic_text(value: object) -> str:
    """``repr(value)`` with every `SymInt` as ``<expression>``."""
    if isinstance(value, SymInt):
        return f"<{value.expr}>"
    if isinstance(value, (IVar, IOpaque, IDiv, IMod, ISum)):
        fields = ", ".join(f"{name}={_symbolic_text(getattr(value, name))}"
                           for name in value.__slots__)  # type: ignore[union-attr]
        return f"{type(value).__name__}({fields})"
    if isinstance(value, tuple):
        return "(" + ", ".join(_symbolic_text(v) for v in value) + ("," if len(value) == 1 else "") + ")"
    return repr(value)


def _make(terms: dict[Atom, int], const: int) -> IExpr:
    items = tuple(sorted(((a, c) for a, c in terms.items() if c != 0),
                         key=lambda t: _order_key(t[0])))
    if not items:
        return const
    if len(items) == 1 and const == 0 and items[0][1] == 1:
        return items[0][0]
    return ISum(items, const)


def add(*exprs: IExpr) -> IExpr:
    terms: dict[Atom, int] = {}
    const = 0
    for expr in exprs:
        t, c = _linear(expr)
        const += c
        for atom, coeff in t.items():
            terms[atom] = terms.get(atom, 0) + coeff
    return _make(terms, const)


def mul(expr: IExpr, factor: int) -> IExpr:
    terms, const = _linear(expr)
    return _make({a: c * factor for a, c in terms.items()}, const * factor)


def floordiv(expr: IExpr, den: int) -> IExpr:
    if everywhere("==", den, 1):
        return expr
    if isinstance(expr, int):
        return expr // den
    lo, hi = value_range(expr)
    if everywhere("==", lo // den, hi // den):
        return lo // den
    if isinstance(expr, IDiv):
        return floordiv(expr.num, expr.den * den)
    terms, const = _linear(expr)
    common = den
    for coeff in terms.values():
        common = gcd(common, coeff)
    common = gcd(common, const)
    if common > 1:
        return floordiv(_make({a: c // common for a, c in terms.items()}, const // common),
                        den // common)
    split = _aligned_split(terms, const, den)
    if split is not None:  # (q + r) // den == q // den when g | q, g | den and 0 <= r < g
        aligned, _ = split
        return floordiv(aligned, den)
    quotient = {a: c // den for a, c in terms.items() if c % den == 0}
    rest = {a: c for a, c in terms.items() if c % den != 0}
    rest_expr = _make(rest, const % den)
    rlo, rhi = value_range(rest_expr)
    if everywhere("==", rlo // den, rhi // den):
        return add(_make(quotient, const // den), rlo // den)
    if not quotient and const // den == 0:
        return IDiv(rest_expr, den)
    return add(_make(quotient, const // den), floordiv(rest_expr, den))


def mod(expr: IExpr, den: int) -> IExpr:
    if everywhere("==", den, 1):
        return 0
    if isinstance(expr, int):
        return expr % den
    lo, hi = value_range(expr)
    if everywhere(">=", lo, 0) and everywhere("<", hi, den):
        return expr
    if isinstance(expr, IMod) and expr.den % den == 0:
        return mod(expr.num, den)
    terms, const = _linear(expr)
    reduced = {a: c % den for a, c in terms.items()}
    if reduced != terms or const % den != const:
        return mod(_make(reduced, const % den), den)
    split = _aligned_split(terms, const, den)
    if split is not None:  # (q + r) % den == q % den + r when g | q, g | den and 0 <= r < g
        aligned, rest = split
        return add(mod(aligned, den), rest)
    common = den
    for coeff in terms.values():
        common = gcd(common, coeff)
    common = gcd(common, const)
    if common > 1:
        inner = mod(_make({a: c // common for a, c in terms.items()}, const // common),
                    den // common)
        return mul(inner, common)
    return IMod(expr, den)


def _aligned_split(terms: dict[Atom, int], const: int, den: int
                   ) -> tuple[IExpr, IExpr] | None:
    """Split ``terms + const`` into q (coefficients multiples of g) and r with
    0 <= r < g, for the largest proper divisor g of ``den`` where that works."""
    for g in range(den // 2, 1, -1):
        if den % g:
            continue
        aligned = {a: c for a, c in terms.items() if everywhere("==", c % g, 0)}
        rest = {a: c for a, c in terms.items() if a not in aligned}
        if not aligned or not rest:
            continue
        rest_expr = _make(rest, const % g)
        lo, hi = value_range(rest_expr)
        if everywhere(">=", lo, 0) and everywhere("<", hi, g):
            return _make(aligned, const - const % g), rest_expr
    return None


# ----------------------------------------------------------------- layouts


def linearize(index: tuple[IExpr, ...], shape: tuple[int, ...]) -> IExpr:
    """Row-major flat offset of a multi-index (the merge dependency)."""
    flat: IExpr = 0
    for idx, size in zip(index, shape, strict=False):
        flat = add(mul(flat, size), idx)
    return flat


@dataclass(frozen=True, slots=True)
class Blocked:
    """A split-axis layout (blocked NCHWc): logical axis ``axis`` (the channels) is
    split into ``axis / block`` at its place and ``axis % block`` innermost, the axis
    padded with zeros to a multiple of ``block`` — NCHW stored as N, ⌈C/b⌉, H, W, b. A
    kernel then loads the ``block`` channels of one position as one vector.

    ``image``: the same texels in an ``image2d_t`` (SmartMem's 2.5D memory; block 4 =
    RGBA): texel (x = w, y = (n·⌈C/4⌉ + c/4)·H + h) holds channels c/4·4 … +3, which is
    exactly the buffer's NCHW4c order, so a device without images runs the same kernels
    on that buffer.

    It iterates as the physical order for plan.json and the report: the kept axes as
    ints, the split axis as ``"1/4"`` (outer) and ``"1%4"`` (inner), then ``"image2d_t"``
    for an image."""

    axis: int
    block: int
    rank: int
    image: bool = False

    def __iter__(self):
        for a in range(self.rank):
            yield a if a != self.axis else f"{a}/{self.block}"
        yield f"{self.axis}%{self.block}"
        if self.image:
            yield "image2d_t"

    def image_extent(self, shape: tuple[int, ...]) -> tuple[int, int]:
        """(width, height) in texels of a rank-4 tensor as an RGBA image (``block`` 4)."""
        n, c, h, w = shape
        return w, n * -(-c // self.block) * h

    def __len__(self) -> int:
        return self.rank + 1 + self.image

    def padded(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        """The logical shape with the split axis rounded up to whole blocks."""
        size = shape[self.axis]
        return (*shape[:self.axis], -(-size // self.block) * self.block, *shape[self.axis + 1:])

    def physical_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        size = shape[self.axis]
        return (*shape[:self.axis], -(-size // self.block), *shape[self.axis + 1:], self.block)


Layout = tuple[int, ...] | Blocked


def physical_offset(index: tuple[IExpr, ...], shape: tuple[int, ...],
                    perm: Layout | None) -> IExpr:
    """Flat offset of a logical ``index`` in a tensor stored with its axes in ``perm``
    order (None: row-major), SmartMem's layout selection as index arithmetic; a
    `Blocked` layout maps the split axis's index c to (c / b, …, c % b) over the padded
    count (b a power of two keeps both a shift and a mask after strength reduction)."""
    if perm is None:
        return linearize(index, shape)
    if isinstance(perm, Blocked):
        c = index[perm.axis]
        split = (*index[:perm.axis], floordiv(c, perm.block), *index[perm.axis + 1:],
                 mod(c, perm.block))
        return linearize(split, perm.physical_shape(shape))
    return linearize(tuple(index[p] for p in perm), tuple(shape[p] for p in perm))


def stored_numel(shape: tuple[int, ...], perm: Layout | None) -> int:
    """Elements a tensor of logical ``shape`` occupies in ``perm`` (the padded count for
    a `Blocked` layout; the logical count for a permutation)."""
    size = 1
    for d in (perm.padded(shape) if isinstance(perm, Blocked) else shape):
        size *= d
    return size


def delinearize(flat: IExpr, shape: tuple[int, ...]) -> tuple[IExpr, ...]:
    """Multi-index of a flat row-major offset (the split dependency)."""
    out: list[IExpr] = []
    stride = 1
    lo, hi = value_range(flat)
    # a symbolic build: the leading index of an offset inside the tensor needs no
    # modulo (``flat // stride < size``), which its range, a quotient by a dim with
    # no expression, would not show the prover
    symbolic = bool(_ACTIVE_RANGES.get())
    for k, size in enumerate(reversed(shape)):
        if everywhere("==", size, 1):
            out.append(0)
        elif symbolic and k == len(shape) - 1 and everywhere(">=", lo, 0) and \
                everywhere("<", hi, stride * size):
            out.append(floordiv(flat, stride))
        else:
            out.append(mod(floordiv(flat, stride), size))
        stride *= size
    return tuple(reversed(out))


def reshape_index(index: tuple[IExpr, ...], out_shape: tuple[int, ...],
                  in_shape: tuple[int, ...]) -> tuple[IExpr, ...]:
    """Input index of a Reshape read at output ``index`` (identity/split/merge)."""
    return delinearize(linearize(index, out_shape), in_shape)


def broadcast_index(index: tuple[IExpr, ...], out_shape: tuple[int, ...],
                    in_shape: tuple[int, ...]) -> tuple[IExpr, ...]:
    """Input index of a NumPy-broadcast operand read at output ``index``."""
    lead = len(out_shape) - len(in_shape)
    return tuple(0 if everywhere("==", size, 1) else index[lead + k]
                 for k, size in enumerate(in_shape))


def strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    out = []
    stride = 1
    for size in reversed(shape):
        out.append(stride)
        stride *= size
    return tuple(reversed(out))


# ----------------------------------------------------------------- rendering


def substitute(expr: IExpr, replace: Callable[[IVar], IExpr]) -> IExpr:
    """``expr`` with every variable ``v`` replaced by ``replace(v)``, simplified again."""
    if isinstance(expr, int) or isinstance(expr, IOpaque):
        return expr
    if isinstance(expr, IVar):
        return replace(expr)
    if isinstance(expr, IDiv):
        return floordiv(substitute(expr.num, replace), expr.den)
    if isinstance(expr, IMod):
        return mod(substitute(expr.num, replace), expr.den)
    return add(expr.const, *(mul(substitute(atom, replace), coeff) for atom, coeff in expr.terms))


def free_vars(expr: IExpr) -> frozenset[str]:
    if isinstance(expr, int):
        return frozenset()
    if isinstance(expr, IVar):
        return frozenset({expr.name})
    if isinstance(expr, IOpaque):
        return expr.deps
    if isinstance(expr, (IDiv, IMod)):
        return free_vars(expr.num)
    out: frozenset[str] = frozenset()
    for atom, _ in expr.terms:
        out |= free_vars(atom)
    return out


def render(expr: IExpr) -> str:
    """C text of an index expression (int arithmetic)."""
    if isinstance(expr, int):
        return str(expr)
    if isinstance(expr, (IVar, IOpaque)):
        return expr.text if isinstance(expr, IOpaque) else expr.name
    if isinstance(expr, IDiv):
        return f"(({render(expr.num)})/{expr.den})"
    if isinstance(expr, IMod):
        return f"(({render(expr.num)})%{expr.den})"
    parts: list[str] = []
    for atom, coeff in expr.terms:
        text = render(atom)
        if coeff == 1:
            parts.append(text)
        elif coeff == -1:
            parts.append(f"-{text}")
        else:
            parts.append(f"{coeff}*{text}")
    if expr.const:
        parts.append(str(expr.const))
    return " + ".join(parts).replace("+ -", "- ")


def count_divmod(expr: IExpr) -> int:
    """How many / and % an expression still needs (what strength reduction lowers)."""
    if isinstance(expr, (int, IVar, IOpaque)):
        return 0
    if isinstance(expr, (IDiv, IMod)):
        return 1 + count_divmod(expr.num)
    return sum(count_divmod(atom) for atom, _ in expr.terms)
