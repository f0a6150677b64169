"""Issue 15: division by a size argument through its magic number (`magicdiv`), as
exact as the ``/`` and ``%`` it replaces: the multiplier modelled in NumPy for every
divisor up to 2^16 (and a sample above) at the edge dividends, and rewritten kernels
run on PoCL against NumPy."""

from __future__ import annotations

import numpy as np
import pytest

from egraph_compiler.backends.opencl import dimpoly, magicdiv

INT_MAX = 2**31 - 1


def _magic_div(x: np.ndarray, m: np.ndarray, s: np.ndarray) -> np.ndarray:
    """The kernel's ``DNNR_DIV`` in NumPy: the signed 64-bit product ``x*m`` shifted
    right (arithmetically) by ``31 + s``, plus one for a negative ``x``."""
    product = x.astype(np.int64) * m.astype(np.int64)  # |x| < 2^31, m < 2^32: no overflow
    return (product >> (31 + s.astype(np.int64))) - (x.astype(np.int64) >> 31)


def _edge_dividends(d: np.ndarray) -> np.ndarray:
    """Per divisor (rows): 0, 1, around d, around the largest multiple of d below 2^31,
    and 2^31 - 1 (the bound), each also negated."""
    top = (INT_MAX // d) * d
    columns = [np.zeros_like(d), np.ones_like(d), d - 1, d, d + 1, 2 * d - 1, 2 * d,
               top - 1, top, np.minimum(top + d - 1, INT_MAX), np.full_like(d, INT_MAX),
               np.full_like(d, INT_MAX - 1)]
    x = np.clip(np.stack(columns, axis=1), 0, INT_MAX)
    return np.concatenate([x, -x], axis=1)


@pytest.mark.parametrize("divisors", [
    np.arange(1, 2**16 + 1, dtype=np.int64),
    np.unique(np.concatenate([np.random.default_rng(0).integers(2**16, 2**31, 20000),
                              2 ** np.arange(16, 31), 2 ** np.arange(16, 31) + 1,
                              2 ** np.arange(17, 32) - 1])).astype(np.int64),
])
def test_magic_division_is_exact_at_the_edge_dividends(divisors: np.ndarray) -> None:
    magics = [magicdiv.magic(int(d)) for d in divisors]
    m = np.array([mm for mm, _ in magics], np.uint64)
    s = np.array([ss for _, ss in magics], np.uint64)
    assert (m < 2**32).all() and (s < 32).all()
    x = _edge_dividends(divisors)
    quotient = _magic_div(x, m[:, None], s[:, None])
    truncated = np.sign(x) * (np.abs(x) // divisors[:, None])  # C's / on int
    wrong = np.argwhere(quotient != truncated)
    assert wrong.size == 0, f"d={divisors[wrong[0][0]]}, x={x[tuple(wrong[0])]}"


def test_magic_arguments_pass_as_int_and_zero_is_harmless() -> None:
    for d in (1, 3, 7, 641, 2**30 + 1, INT_MAX):
        m, s = magicdiv.magic(d)
        passed = magicdiv.magic_argument(d, "m")
        assert -(2**31) <= passed < 2**31 and passed % 2**32 == m
        assert dimpoly.evaluate(f"magic_m(2*seq + {d - 2})", {"seq": 1}) == passed
        assert dimpoly.evaluate(f"magic_s(seq*{d})", {"seq": 1}) == s
    assert magicdiv.magic(0) == (0, 0)
    with pytest.raises(ValueError, match="outside"):
        magicdiv.magic(2**31)


KERNEL = """__kernel void k(__global const int* restrict in0, ulong in0_off, __global int* restrict out0, ulong out0_off, const int s0, const int s1) {
  const int gid = get_global_id(0);
  int r = in0[gid];
  const int a = ((r)/s0) + r % s1 * 3;
  const int b = ((((r)/s0))%s1);
  r /= s1;
  out0[4*gid] = a; out0[4*gid + 1] = b; out0[4*gid + 2] = r; out0[4*gid + 3] = 7 / s0 + f(r) % s0;
}
"""


def test_rewrite_delimits_operands_and_leaves_the_rest() -> None:
    source = KERNEL.replace(" + f(r) % s0", "")
    rewritten, used = magicdiv.rewrite(source)
    assert used == ["s0", "s1"]
    assert ", const int s0_m, const int s0_s, const int s1_m, const int s1_s) {" in rewritten
    assert "DNNR_REM(r, s1, s1_m, s1_s) * 3" in rewritten
    assert "DNNR_REM(((DNNR_DIV((r), s0_m, s0_s))), s1, s1_m, s1_s)" in rewritten
    assert "r = DNNR_DIV(r, s1_m, s1_s);" in rewritten
    body = rewritten.partition(") {\n")[2]
    assert "/" not in body.replace("//", "") and "%" not in body
    # an operand it cannot delimit keeps its division (``a*b/s`` is ``(a*b)/s``), and
    # one that may be a float (a float name, an element, a call, a float literal)
    kept = ("x = a*b/s0 + ~c % s0 + (int)(y)/s0 + z/s01 + f(r)/s0 + in0[r] / s0 + t1 / s0 + "
            "(t1 + 1) / s0 + 2.0f / s0;\nconst float t1 = 1.0f;")
    header = "__kernel void k(const int s0, const int s1) {\n"  # s01 is not s0
    assert magicdiv.rewrite(header + kept + "\n}\n") == (header + kept + "\n}\n", [])


def test_rewritten_kernel_matches_numpy_on_pocl() -> None:
    import pyopencl as cl

    context = cl.Context([next(d for p in cl.get_platforms() for d in p.get_devices())])
    queue = cl.CommandQueue(context)
    source = KERNEL.replace(" + f(r) % s0", " - r % s0")
    rewritten, used = magicdiv.rewrite(source)
    kernel = cl.Kernel(cl.Program(context, rewritten).build(), "k")
    rng = np.random.default_rng(1)
    x = np.concatenate([rng.integers(-(2**31) + 1, 2**31, 4000), [0, 1, -1, INT_MAX, -INT_MAX],
                        rng.integers(-100, 100, 91)]).astype(np.int32)
    for s0, s1 in [(1, 1), (3, 7), (12, 64), (641, 2**16 + 1), (INT_MAX, 2**30 + 3)]:
        mf = cl.mem_flags
        src = cl.Buffer(context, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=x)
        dst = cl.Buffer(context, mf.WRITE_ONLY, 16 * x.size)
        sizes = {"s0": s0, "s1": s1}
        magic = [np.int32(magicdiv.magic_argument(sizes[s], p)) for s in used for p in "ms"]
        kernel(queue, (x.size,), None, src, np.uint64(0), dst, np.uint64(0), np.int32(s0),
               np.int32(s1), *magic)
        got = np.empty((x.size, 4), np.int32)
        cl.enqueue_copy(queue, got, dst)
        r = x.astype(np.int64)

        def div(a: np.ndarray, d: int) -> np.ndarray:
            return np.sign(a) * (np.abs(a) // d)  # C truncation

        def rem(a: np.ndarray, d: int) -> np.ndarray:
            return a - div(a, d) * d

        q = div(r, s1)
        want = np.stack([div(r, s0) + rem(r, s1) * 3, rem(div(r, s0), s1), q,
                         7 // s0 - rem(q, s0)], axis=1)
        assert np.array_equal(got, want.astype(np.int32)), f"s0={s0}, s1={s1}"


def test_unsigned_magic_is_exact_for_nonnegative_dividends() -> None:
    """``DNNR_UDIV`` (zero-extended ``x``) at the non-negative edge dividends of every
    divisor up to 2^16 and a sample above: C's ``/``."""
    divisors = np.concatenate([np.arange(1, 2**16 + 1), 2 ** np.arange(16, 31) + 1,
                               np.random.default_rng(2).integers(2**16, 2**31, 2000)])
    magics = [magicdiv.magic(int(d)) for d in divisors]
    m = np.array([mm for mm, _ in magics], np.uint64)[:, None]
    s = np.array([ss for _, ss in magics], np.uint64)[:, None]
    x = _edge_dividends(divisors.astype(np.int64))
    x = x[:, : x.shape[1] // 2].astype(np.uint64)  # the non-negative half
    quotient = (x * m) >> (np.uint64(31) + s)  # < 2^63: no overflow
    assert np.array_equal(quotient, x // divisors[:, None].astype(np.uint64))


UNSIGNED_KERNEL = """__kernel void k(__global int* restrict out0, ulong out0_off, const int s0, const int s1, const int s2, const int s3) {
  const int gid = get_global_id(0);
  int r = gid * s2 + s3;
  const int a = r / s0 + r % s1;
  r /= s1;
  const int b = (r - 7) / s0;
  int c = gid; c -= 3;
  out0[4*gid] = a; out0[4*gid + 1] = r; out0[4*gid + 2] = b; out0[4*gid + 3] = c % s0;
}
"""


def _run_unsigned_kernel(rewritten: str, used: list[str],
                         sizes_list: list[tuple[int, int, int, int]]) -> None:
    """Runs the rewritten `UNSIGNED_KERNEL` on PoCL at each (s0, s1, s2, s3) and compares
    every output with C's truncating division computed in int64."""
    import pyopencl as cl

    context = cl.Context([next(d for p in cl.get_platforms() for d in p.get_devices())])
    queue = cl.CommandQueue(context)
    kernel = cl.Kernel(cl.Program(context, rewritten).build(), "k")
    items = 4096
    for s0, s1, s2, s3 in sizes_list:
        dst = cl.Buffer(context, cl.mem_flags.WRITE_ONLY, 16 * items)
        sizes = {"s0": s0, "s1": s1}
        magic = [np.int32(magicdiv.magic_argument(sizes[s], p)) for s in used for p in "ms"]
        kernel(queue, (items,), None, dst, np.uint64(0), *map(np.int32, (s0, s1, s2, s3)), *magic)
        got = np.empty((items, 4), np.int32)
        cl.enqueue_copy(queue, got, dst)
        gid = np.arange(items, dtype=np.int64)
        r = gid * s2 + s3
        assert r.max() < 2**31

        def div(a: np.ndarray, d: int) -> np.ndarray:
            return np.sign(a) * (np.abs(a) // d)  # C truncation

        q = div(r, s1)
        c = gid - 3
        want = np.stack([div(r, s0) + r - div(r, s1) * s1, q, div(q - 7, s0),
                         c - div(c, s0) * s0], axis=1)
        assert np.array_equal(got, want.astype(np.int32)), (s0, s1, s2, s3)


def test_nonnegative_dividends_take_the_unsigned_product() -> None:
    """A dividend of work-item ids, sizes, literals, ``+ * / %`` (and names only ever
    assigned such) is divided unsigned; one with a ``-`` anywhere, or a name one
    assignment of which has one, keeps the signed form; both exact on PoCL."""

    rewritten, used = magicdiv.rewrite(UNSIGNED_KERNEL)
    assert used == ["s0", "s1"]
    assert "DNNR_UDIV(r, s0_m, s0_s) + DNNR_UREM(r, s1, s1_m, s1_s)" in rewritten
    assert "r = DNNR_UDIV(r, s1_m, s1_s);" in rewritten
    assert "DNNR_DIV((r - 7), s0_m, s0_s)" in rewritten and "DNNR_REM(c, s0," in rewritten
    _run_unsigned_kernel(rewritten, used, [(1, 1, 1, 0), (3, 7, 5, 11),
                                           (641, 2**16 + 1, 2**19 - 1, 12345),
                                           (INT_MAX, 2**30 + 3, 524287, 2**31 - 2**19 * 4096 + 2**19 - 2)])


def test_power_of_two_divisors_shift_and_mask_nonnegative_dividends() -> None:
    """A size `rewrite` is told is a power of two at every shape of its version divides a
    non-negative dividend by a shift (its magic ``s``, ``log2 d``) and reduces it by a
    mask; a dividend that may be negative keeps the signed magic product; exact on
    PoCL at d = 1, 2, 2^16 and 2^30."""

    rewritten, used = magicdiv.rewrite(UNSIGNED_KERNEL, frozenset({"s0", "s1"}))
    assert used == ["s0", "s1"]  # the same magic arguments as without the powers
    assert "DNNR_P2DIV(r, s0_s) + DNNR_P2REM(r, s1)" in rewritten
    assert "r = DNNR_P2DIV(r, s1_s);" in rewritten
    assert "DNNR_DIV((r - 7), s0_m, s0_s)" in rewritten and "DNNR_REM(c, s0," in rewritten
    only_s1, _ = magicdiv.rewrite(UNSIGNED_KERNEL, frozenset({"s1"}))
    assert "DNNR_UDIV(r, s0_m, s0_s) + DNNR_P2REM(r, s1)" in only_s1
    _run_unsigned_kernel(rewritten, used, [(1, 1, 1, 0), (2, 16, 5, 11), (2**16, 8, 2**19 - 1, 12345),
                                           (2**30, 2**30, 524287, 2**31 - 2**19 * 4096 + 2**19 - 2)])
