"""prove_eq / prove_le / prove_divisible: canonical form first, then Z3 over ranges; never assume."""

from __future__ import annotations

import pytest

from egraph_compiler.ir import DimExpr
from egraph_compiler.shapes import prove_divisible, prove_eq, prove_le, prove_lt

B, S, H, W = (DimExpr.symbol(n) for n in ("B", "S", "H", "W"))
RANGES = {"B": (1, 64), "S": (1, 4096), "H": (1, 2**31 - 1), "W": (1, 2**31 - 1)}


def test_canonical_form_settles_polynomial_identities() -> None:
    assert prove_eq(B * S * 12, S * 12 * B, RANGES)
    assert prove_eq((B * 4) // 4, B, RANGES)
    assert prove_eq(B * (S + 1) - B, B * S, RANGES)


def test_z3_settles_floor_division_facts() -> None:
    assert prove_eq((H - 1) // 2 + 1, (H + 1) // 2, RANGES)
    assert prove_le((H - 1) // 2 + 1, H, RANGES)
    assert prove_lt(H // 2, H, RANGES)
    assert prove_eq((H + 2 - 3) // 1 + 1, H, RANGES)


def test_ranges_are_used_and_unknown_is_false() -> None:
    assert not prove_le(S, 4000, RANGES)
    assert prove_le(S, 4096, RANGES)
    assert prove_le(B * S, 64 * 4096, RANGES)
    assert not prove_eq(B, S, RANGES)
    assert not prove_eq(B, S, {}), "symbols without ranges are only known non-negative"
    assert not prove_le(1, H, {}), "H may be 0 when nothing says otherwise"
    assert prove_le(1, H, RANGES)


@pytest.mark.parametrize(("value", "divisor", "expected"), [
    (B * 16, 8, True),
    (2 * B + 2, 2, True),
    (B, 2, False),
    (H * W, H, True),
    (H * W + 1, H, False),
    (B * 6, 4, False),
    (24, 8, True),
])
def test_divisibility(value, divisor, expected: bool) -> None:
    assert prove_divisible(value, divisor, RANGES) is expected


def test_decide_is_three_valued_and_uses_the_active_ranges() -> None:
    from egraph_compiler.shapes import decide, using_ranges

    assert decide("==", S * B, B * S, RANGES) is True  # canonical form
    assert decide(">=", S, 1, RANGES) is True  # interval bounds of the range
    assert decide("<", S, 0, RANGES) is False  # refuted for every S in 1..4096
    assert decide("<=", S, 512, RANGES) is None  # holds for some S only: neither
    assert decide("!=", S + 1, S, RANGES) is True
    assert decide("==", (B, S), (B, S + 0), RANGES) is True
    assert decide("==", (B, S), (B, S, 1), RANGES) is False
    assert decide("==", (B, S), (B, H), RANGES) is None
    with using_ranges({"S": (1, 512)}):
        assert decide("<=", S, 512) is True
    assert decide("<=", S, 512) is None  # outside the block: S only known non-negative


def test_z3_answers_are_cached_per_question_and_ranges() -> None:
    from egraph_compiler.shapes import prover

    question = ((H - 1) // 3 + 1, (H + 2) // 3)
    assert prove_eq(*question, RANGES)
    size = prover.cache_size()
    assert prove_eq(*question, RANGES) and prover.cache_size() == size  # answered from the cache
    assert prove_eq(*question, {**RANGES, "H": (1, 100)}) and prover.cache_size() == size + 1  # other ranges: asked


def test_linear_differences_are_decided_by_their_exact_bounds() -> None:
    from egraph_compiler.shapes import prove_ne

    assert not prove_le(S + B, 100, RANGES)  # S=100, B=1 breaks it: no Z3 needed
    assert prove_ne(2 * S, 3, RANGES)  # 0 lies in the interval of 2S-3 but is never attained
    assert not prove_ne(S, 7, RANGES)
