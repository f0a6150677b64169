"""One scalar compiler, three targets: every declared `= expr` operator compiled by
`ops.scalar` to NumPy and, through `ops.z3`, to the verifier's Z3 tiers gives the same
value at the same inputs — exactly over the reals (where Z3 can evaluate the term) and
bit for bit in IEEE fp32 (NumPy rounding every intermediate to float32)."""

from __future__ import annotations

import numpy as np
import pytest
import z3

from egraph_compiler import ops
from egraph_compiler.ops.scalar import evaluate
from egraph_compiler.ops.z3 import to_z3
from egraph_compiler.verify import encode
from egraph_compiler.verify.scalar import Domain

POINTS = [(0.75, 1.5, -0.25), (-2.0, 0.5, 3.0), (1.25, -1.0, 0.0), (0.0, 2.0, -3.5)]


def _declared() -> list[ops.OpInfo]:
    return [info for _, info in sorted(ops.shipped().ops.items())
            if info.semantics is not None
            and all(isinstance(v, (int, float)) for v in info.defaults.values())]


def _env(info: ops.OpInfo, point: tuple[float, ...]) -> dict[str, float]:
    env = {p.name: point[k % len(point)] for k, p in enumerate(info.decl.params)}
    env.update({name: float(v) for name, v in info.defaults.items()})
    return env


def _real_value(term: z3.ExprRef) -> float | bool | None:
    value = z3.simplify(term)
    if z3.is_true(value) or z3.is_false(value):
        return z3.is_true(value)
    if z3.is_rational_value(value):
        return float(value.as_fraction())
    return None  # an uninterpreted function (exp, tanh ...) is left


def test_the_real_tier_computes_what_numpy_computes() -> None:
    compared = 0
    for info in _declared():
        for point in POINTS:
            env = _env(info, point)
            with np.errstate(all="ignore"):
                expected = np.asarray(evaluate(info.semantics, {k: np.float64(v) for k, v in env.items()}))
            if not np.all(np.isfinite(expected.astype(float))) or not all(
                    np.isfinite(v) for v in env.values()):  # the real tier has no infinity
                continue
            domain = Domain("real")
            got = _real_value(encode.scalar_expr(  # the verifier's entry point
                info.semantics, {k: domain.const(v) for k, v in env.items()}, domain))
            if got is None:
                continue
            assert got == pytest.approx(float(expected), abs=1e-12), (info.name, point)
            compared += 1
    assert compared >= 100, compared  # most declared operators have exact real semantics


def test_the_fp32_tier_is_bit_exact_with_numpy_in_float32() -> None:
    compared = 0
    for info in _declared():
        for point in POINTS:
            env = _env(info, point)
            with np.errstate(all="ignore"):
                expected = np.asarray(evaluate(
                    info.semantics, {k: np.float32(v) for k, v in env.items()}, cast=np.float32))
            domain = Domain("fp32")
            term = z3.simplify(to_z3(info.semantics, {k: domain.const(v) for k, v in env.items()},
                                     domain))
            if z3.is_true(term) or z3.is_false(term):
                assert z3.is_true(term) == bool(expected), (info.name, point)
            elif z3.is_fp_value(term):
                if term.isNaN():  # its bits are unspecified
                    value = np.float32(np.nan)
                else:
                    bits = z3.simplify(z3.fpToIEEEBV(term)).as_long()
                    value = np.array([bits], dtype=np.uint32).view(np.float32)[0]
                assert np.array_equal(np.float32(expected), value, equal_nan=True), (info.name, point)
            else:
                continue  # a function without an IEEE definition in Z3 (exp, tanh ...)
            compared += 1
    assert compared >= 100, compared
