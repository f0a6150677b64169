"""Symbolic tensor dimensions: an int, or a `DimExpr` over named symbols.

A `DimExpr` is kept in a canonical form — an integer polynomial whose atoms are
symbols (``B``, ``S``) or opaque floor-division / modulo terms — so two
expressions that are equal as polynomials compare and hash equal. Questions that
the canonical form cannot settle (``(H-1)//2+1 <= H``) are for `shapes`' Z3
prover. Data only: no other dnnr module is imported.
"""

from __future__ import annotations

from dataclasses import dataclass

# A monomial: sorted tuple of (atom, power); an atom is a symbol name or a nested
# ("//" | "%", DimExpr-polynomial, int) term.
Atom = str | tuple
Monomial = tuple[tuple[Atom, int], ...]
Terms = tuple[tuple[Monomial, int], ...]


def _atom_key(atom: Atom) -> str:
    return atom if isinstance(atom, str) else repr(atom)


def _normalise(terms: dict[Monomial, int]) -> Terms:
    return tuple(sorted(((m, c) for m, c in terms.items() if c != 0), key=lambda mc: repr(mc[0])))


@dataclass(frozen=True, slots=True)
class DimExpr:
    """A canonical integer polynomial over symbols and floor-div/mod atoms."""

    terms: Terms

    @staticmethod
    def symbol(name: str) -> DimExpr:
        return DimExpr((((((name, 1),), 1)),))

    @staticmethod
    def const(value: int) -> Dim:
        return value

    # -- construction helpers --------------------------------------------------
    @staticmethod
    def _of(value: Dim) -> dict[Monomial, int]:
        if isinstance(value, int):
            return {(): value} if value else {}
        return dict(value.terms)

    @staticmethod
    def _make(terms: dict[Monomial, int]) -> Dim:
        norm = _normalise(terms)
        if not norm:
            return 0
        if len(norm) == 1 and norm[0][0] == ():
            return norm[0][1]
        return DimExpr(norm)

    def __add__(self, other: Dim) -> Dim:
        return dim_add(self, other)

    __radd__ = __add__

    def __sub__(self, other: Dim) -> Dim:
        return dim_add(self, dim_mul(other, -1))

    def __rsub__(self, other: Dim) -> Dim:
        return dim_add(other, dim_mul(self, -1))

    def __mul__(self, other: Dim) -> Dim:
        return dim_mul(self, other)

    __rmul__ = __mul__

    def __floordiv__(self, other: int) -> Dim:
        return dim_floordiv(self, other)

    def __mod__(self, other: int) -> Dim:
        return dim_mod(self, other)

    def symbols(self) -> set[str]:
        found: set[str] = set()
        for mono, _ in self.terms:
            for atom, _ in mono:
                if isinstance(atom, str):
                    found.add(atom)
                else:
                    found |= atom[1].symbols() if isinstance(atom[1], DimExpr) else set()
        return found

    def evaluate(self, env: dict[str, int]) -> int:
        total = 0
        for mono, coeff in self.terms:
            prod = coeff
            for atom, power in mono:
                prod *= _eval_atom(atom, env) ** power
            total += prod
        return total

    def __str__(self) -> str:
        parts: list[str] = []
        for mono, coeff in self.terms:
            factors = [_atom_str(a) + (f"^{p}" if p != 1 else "") for a, p in mono]
            body = "*".join(factors)
            if not body:
                parts.append(str(coeff))
            elif coeff == 1:
                parts.append(body)
            elif coeff == -1:
                parts.append("-" + body)
            else:
                parts.append(f"{coeff}*{body}")
        text = " + ".join(parts).replace("+ -", "- ")
        return text

    def __repr__(self) -> str:
        return f"DimExpr({self})"


Dim = int | DimExpr


def _eval_atom(atom: Atom, env: dict[str, int]) -> int:
    if isinstance(atom, str):
        return env[atom]
    kind, inner, divisor = atom
    value = inner.evaluate(env) if isinstance(inner, DimExpr) else inner
    return value // divisor if kind == "//" else value % divisor


def _atom_str(atom: Atom) -> str:
    if isinstance(atom, str):
        return atom
    kind, inner, divisor = atom
    return f"({inner}){kind}{divisor}"


def dim_add(a: Dim, b: Dim) -> Dim:
    terms = DimExpr._of(a)
    for mono, coeff in DimExpr._of(b).items():
        terms[mono] = terms.get(mono, 0) + coeff
    return DimExpr._make(terms)


def _mono_mul(m1: Monomial, m2: Monomial) -> Monomial:
    powers: dict[Atom, int] = {}
    for atom, power in m1 + m2:
        powers[atom] = powers.get(atom, 0) + power
    return tuple(sorted(powers.items(), key=lambda ap: _atom_key(ap[0])))


def dim_mul(a: Dim, b: Dim) -> Dim:
    terms: dict[Monomial, int] = {}
    for m1, c1 in DimExpr._of(a).items():
        for m2, c2 in DimExpr._of(b).items():
            mono = _mono_mul(m1, m2)
            terms[mono] = terms.get(mono, 0) + c1 * c2
    return DimExpr._make(terms)


def dim_floordiv(a: Dim, divisor: int) -> Dim:
    """Floor division by a positive int; exact when every coefficient divides."""
    if divisor <= 0:
        raise ValueError("dims may only be divided by a positive int")
    if isinstance(a, int):
        return a // divisor
    if divisor == 1:
        return a
    if all(c % divisor == 0 for _, c in a.terms):
        return DimExpr._make({m: c // divisor for m, c in a.terms})
    return DimExpr._make({((("//", a, divisor), 1),): 1})


def dim_mod(a: Dim, divisor: int) -> Dim:
    if divisor <= 0:
        raise ValueError("dims may only be taken modulo a positive int")
    if isinstance(a, int):
        return a % divisor
    if all(c % divisor == 0 for _, c in a.terms):
        return 0
    return DimExpr._make({((("%", a, divisor), 1),): 1})


def shape_is_static(shape: tuple[Dim, ...] | None) -> bool:
    return shape is not None and all(isinstance(d, int) for d in shape)


def dim_str(dim: Dim) -> str:
    return str(dim)
