"""Lemmas the induction (`check._paired_induction`) relies on, each proved by Z3 in
the tier's own arithmetic before it is used -- never assumed.

Split lemma. With ``F(k)`` the reduction (``combine`` left fold) of ``f(0) .. f(k-1)``
and ``G(k)`` that of ``f(a) .. f(a+k-1)``, for all ``a, n >= 1``:
``F(a + n) = combine(F(a), G(n))``. Proved by induction on ``n`` (base ``n = 1``,
step ``n -> n + 1``), ``F`` and ``G`` uninterpreted but for their defining equations
instantiated at the points used. It needs ``combine`` associative: it holds for
exact sums, products, max and min, not for IEEE sums (so IEEE tiers never split).

A reduction over a product space ``[0, n) x K`` is order-independent where the lemma
holds (``combine`` associative and commutative), so enumerate it row-major: the
elements with first index below ``s`` are the prefix of length ``s * |K|`` and the
others, re-indexed ``(s + t0, t...)``, the rest in the same order -- the 1-D lemma
with ``a = s * |K|``. A reduction over Concat(x1, x2) (a Conv over the channels of
both) thus becomes one reduction over x1's part plus one over x2's, each paired with
its counterpart on the other side.
"""

from __future__ import annotations

import functools

import z3

from egraph_compiler.verify.encode import combiner
from egraph_compiler.verify.scalar import Domain

EXACT_TIERS = ("real", "int")  # the tiers whose combine is associative and commutative


@functools.cache
def split_reduction(tier: str, kind: str) -> bool:
    """The split lemma holds for ``kind`` reductions in ``tier`` (proved, see above)."""
    if tier not in EXACT_TIERS or kind not in ("sum", "mean", "prod", "max", "min"):
        return False
    return _prove_split(Domain(tier), kind)


def _prove_split(domain: Domain, kind: str) -> bool:
    combine = combiner(kind, domain)  # a mean's reduction is its sum
    ints = z3.IntSort()
    f = z3.Function("lemma_f", ints, domain.sort)
    whole = z3.Function("lemma_F", ints, domain.sort)  # F(k): f(0) .. f(k-1)
    tail = z3.Function("lemma_G", ints, domain.sort)  # G(k): f(a) .. f(a+k-1)
    a, n = z3.Ints("lemma_a lemma_n")

    def defining(k: z3.ArithRef) -> list[z3.BoolRef]:
        """F and G's defining equations at k (k >= 1)."""
        return [whole(k + 1) == combine(whole(k), f(k)),
                tail(k + 1) == combine(tail(k), f(a + k))]

    def claim(k: z3.ArithRef) -> z3.BoolRef:
        return whole(a + k) == combine(whole(a), tail(k))

    base = [a >= 1, tail(1) == f(a), *defining(a), z3.Not(claim(z3.IntVal(1)))]
    step = [a >= 1, n >= 1, claim(n), *defining(a + n), *defining(n),
            z3.Not(claim(n + 1))]
    for facts in (base, step):
        solver = z3.Solver()
        solver.set("timeout", 10_000)
        solver.add(*facts)
        if solver.check() != z3.unsat:
            return False
    return True


def _unsat(*facts: z3.BoolRef) -> bool:
    solver = z3.Solver()
    solver.set("timeout", 10_000)
    solver.add(*facts)
    return solver.check() == z3.unsat


@functools.cache
def quantize_is_monotone() -> bool:
    """QuantizeLinear ``q(t) = clamp(round_half_to_even(t / s) + z, lo, hi)`` is
    non-decreasing in ``t`` for ``s > 0`` and non-increasing for ``s < 0`` (lo <= hi),
    so that ``q(max(a, b)) = max(q(a), q(b))`` (``min`` for ``s < 0``). Z3 gives up on
    the rounding's monotonicity at once (ToInt in both arguments), so it is proved in
    steps, each by Z3: ToInt(x) is the k with k <= x < k + 1; the rounding of x >= y
    at floors kx > ky, kx = ky (kx < ky is impossible); t / s; clamp(u + z). Their
    composition is monotone. Last, a monotone q commutes with max as stated."""
    from egraph_compiler.verify.quant_ops import round_half_to_even  # quant_ops uses this

    x, y, a, b, s, z, lo, hi = z3.Reals("x y a b s z lo hi")
    kx, ky = z3.Ints("kx ky")
    floors = [z3.ToReal(kx) <= x, x < z3.ToReal(kx) + 1,
              z3.ToReal(ky) <= y, y < z3.ToReal(ky) + 1]
    rx = z3.substitute(round_half_to_even(x), (z3.ToInt(x), kx))
    ry = z3.substitute(round_half_to_even(y), (z3.ToInt(y), ky))

    def clamp(u: z3.ArithRef) -> z3.ArithRef:
        return z3.If(u < lo, lo, z3.If(u > hi, hi, u))

    q = z3.Function("lemma_q", z3.RealSort(), z3.RealSort())
    monotone = [z3.Implies(a >= b, q(a) >= q(b)), z3.Implies(b >= a, q(b) >= q(a))]
    antitone = [z3.Implies(a >= b, q(a) <= q(b)), z3.Implies(b >= a, q(b) <= q(a))]
    steps = [
        (z3.ToReal(kx) <= x, x < z3.ToReal(kx) + 1, kx != z3.ToInt(x)),
        (*floors, x >= y, kx < ky),
        (*floors, x >= y, kx == ky, z3.Not(rx >= ry)),
        (*floors, x >= y, kx > ky, z3.Not(rx >= ry)),
        (a >= b, s > 0, z3.Not(a / s >= b / s)),
        (a >= b, s < 0, z3.Not(a / s <= b / s)),
        (x >= y, lo <= hi, z3.Not(clamp(x + z) >= clamp(y + z))),
        (*monotone, z3.Not(q(z3.If(a >= b, a, b)) == z3.If(q(a) >= q(b), q(a), q(b)))),
        (*monotone, z3.Not(q(z3.If(a <= b, a, b)) == z3.If(q(a) <= q(b), q(a), q(b)))),
        (*antitone, z3.Not(q(z3.If(a >= b, a, b)) == z3.If(q(a) <= q(b), q(a), q(b)))),
        (*antitone, z3.Not(q(z3.If(a <= b, a, b)) == z3.If(q(a) >= q(b), q(a), q(b)))),
    ]
    return all(_unsat(*facts) for facts in steps)

