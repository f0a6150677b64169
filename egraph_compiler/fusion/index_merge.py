"""Merging a split index back: ``k·(x % a) + k·a·(x / a) → k·x``.

`index.delinearize` splits a flat work-item index into one index per dim, and
`index.linearize` multiplies them back by the strides of the tensor read. Where the
tensor is contiguous across those dims the product is the flat index again, but
`index`'s constructors only simplify a division or a modulo of a sum; they never see
that two terms of a sum recombine. So a Sigmoid·x over EfficientNet's ``[8, 32, 112,
112]`` map read its input at ``401408·(g/3584) + 12544·((g/112)%32) + 112·(g%112)``
(three divisions and two moduli per element) where the offset is ``112·g``.

Two identities of non-negative integers (floor division, which C's ``/`` and ``%``
are for ``x ≥ 0``), applied to a sum's terms until none applies:

- ``k·(x % a) + k·a·(x / a) = k·x``;
- ``k·(x % a) + k·a·((x / a) % b) = k·(x % (a·b))`` (the outer split of a dim pair).

Literal sizes only (a symbolic build's dims stay as `index` built them).
"""

from __future__ import annotations

from collections.abc import Mapping

from egraph_compiler.fusion import index as ix


def merge_splits(expr: ix.IExpr) -> ix.IExpr:
    """``expr`` with every recombinable pair of split terms merged (module docstring)."""
    if isinstance(expr, ix.IDiv) and type(expr.den) is int:
        return ix.floordiv(merge_splits(expr.num), expr.den)
    if isinstance(expr, ix.IMod) and type(expr.den) is int:
        return ix.mod(merge_splits(expr.num), expr.den)
    if not isinstance(expr, ix.ISum):
        return expr
    terms: dict[ix.Atom | int, int] = {}
    for atom, coeff in expr.terms:
        _accumulate(terms, merge_splits(atom), coeff)
    while _merge_one(terms):
        pass
    return ix.add(expr.const, *(ix.mul(atom, coeff) for atom, coeff in terms.items()))


def _accumulate(terms: dict[ix.Atom | int, int], expr: ix.IExpr, coeff: int) -> None:
    """Add ``coeff · expr`` to the linear form ``terms`` (constants under key 1)."""
    if isinstance(expr, int):
        terms[1] = terms.get(1, 0) + coeff * expr
        return
    if isinstance(expr, ix.ISum):
        if expr.const:
            terms[1] = terms.get(1, 0) + coeff * expr.const
        for atom, inner in expr.terms:
            _accumulate(terms, atom, coeff * inner)
        return
    terms[expr] = terms.get(expr, 0) + coeff
    if terms[expr] == 0:
        del terms[expr]


def _merge_one(terms: dict[ix.Atom | int, int]) -> bool:
    """Merge one pair of ``terms`` (in their sorted order: the result does not depend
    on dict order); False when no pair merges."""
    for atom in sorted((a for a in terms if isinstance(a, ix.IMod)), key=repr):
        k, x, a = terms[atom], atom.num, atom.den
        if type(k) is not int or type(a) is not int:
            continue
        lo, _ = ix.value_range(x)
        if type(lo) is not int or lo < 0:
            continue
        quotient = ix.floordiv(x, a)
        if not isinstance(quotient, int | ix.ISum) and terms.get(quotient) == k * a:
            del terms[atom], terms[quotient]
            _accumulate(terms, x, k)
            return True
        for other in sorted((o for o in terms if isinstance(o, ix.IMod) and o.num == quotient
                             and type(o.den) is int and terms[o] == k * a), key=repr):
            del terms[atom], terms[other]
            _accumulate(terms, ix.mod(x, a * other.den), k)
            return True
    return False


def substitute(expr: ix.IExpr, values: Mapping[str, ix.IExpr]) -> ix.IExpr:
    """``expr`` with each variable named in ``values`` replaced by its expression (a
    kernel's iteration variables ``i0, i1, …`` by the work-item index they were bound
    from, so that `merge_splits` sees the splits)."""
    return ix.substitute(expr, lambda v: values.get(v.name, v))
