"""Index comprehension: strength-reduced index arithmetic equals the naive one."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from egraph_compiler.fusion import index as ix


def _eval(expr: ix.IExpr, env: dict[str, int]) -> int:
    if isinstance(expr, int):
        return expr
    if isinstance(expr, ix.IVar):
        return env[expr.name]
    if isinstance(expr, ix.IDiv):
        return _eval(expr.num, env) // expr.den
    if isinstance(expr, ix.IMod):
        return _eval(expr.num, env) % expr.den
    assert isinstance(expr, ix.ISum)
    return expr.const + sum(c * _eval(a, env) for a, c in expr.terms)


dims = st.lists(st.integers(1, 6), min_size=1, max_size=4)


@settings(max_examples=60, deadline=None)
@given(dims, st.permutations(range(4)))
def test_reshape_then_transpose_indices_match_numpy(shape: list[int], perm: list[int]) -> None:
    import numpy as np

    rank = len(shape)
    perm = [p for p in perm if p < rank]
    data = np.arange(int(np.prod(shape))).reshape(shape)
    flat_shape = (int(np.prod(shape)),)
    out = data.transpose(perm)
    vars_ = tuple(ix.IVar(f"v{k}", 0, s - 1) for k, s in enumerate(out.shape))
    in_index = [0] * rank
    for k, p in enumerate(perm):
        in_index[p] = vars_[k]
    offset = ix.linearize(tuple(in_index), tuple(shape))
    offset = ix.linearize(ix.reshape_index((offset,), flat_shape, tuple(shape)), tuple(shape))
    for point in itertools.product(*(range(s) for s in out.shape)):
        env = {f"v{k}": p for k, p in enumerate(point)}
        assert data.reshape(-1)[_eval(offset, env)] == out[point]


def test_merge_then_split_is_identity() -> None:
    """SmartMem Fig. 3: a merge followed by the matching split leaves no / or %."""
    n, c, h = ix.IVar("n", 0, 1), ix.IVar("c", 0, 2), ix.IVar("h", 0, 15)
    merged = ix.reshape_index((n, c, h), (2, 3, 16), (2, 48))
    back = ix.reshape_index(merged, (2, 48), (2, 3, 16))
    assert back == (n, c, h)
    assert ix.count_divmod(ix.linearize(back, (2, 3, 16))) == 0


def test_mod_of_mod_strength_reduction() -> None:
    x = ix.IVar("x", 0, 10_000)
    assert ix.mod(ix.mod(x, 12), 4) == ix.mod(x, 4)
    assert ix.floordiv(ix.floordiv(x, 3), 4) == ix.floordiv(x, 12)
    assert ix.mod(ix.add(ix.mul(x, 8), 3), 4) == 3


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 12), st.integers(-6, 6), st.integers(1, 12), st.integers(1, 8))
def test_div_mod_rules_agree_with_python(a: int, k: int, b: int, c: int) -> None:
    v = ix.IVar("v", 0, 200)
    exprs = (ix.mod(ix.add(ix.mul(v, a), k), b), ix.floordiv(ix.add(ix.mul(v, a), k), b),
             ix.mod(ix.floordiv(ix.add(ix.mul(v, a), k), b), c))
    for value in range(0, 201, 7):
        want = ((value * a + k) % b, (value * a + k) // b, ((value * a + k) // b) % c)
        assert tuple(_eval(e, {"v": value}) for e in exprs) == want


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 64), st.integers(1, 9), st.integers(1, 9), st.integers(0, 5),
       st.integers(1, 300))
def test_two_variable_sums_reduce_correctly(a: int, n_x: int, n_y: int, k: int, d: int) -> None:
    x, y = ix.IVar("x", 0, n_x - 1), ix.IVar("y", 0, n_y - 1)
    expr = ix.add(ix.mul(x, a), y, k)
    div, rem = ix.floordiv(expr, d), ix.mod(expr, d)
    for vx in range(n_x):
        for vy in range(n_y):
            env = {"x": vx, "y": vy}
            assert _eval(div, env) == (vx * a + vy + k) // d
            assert _eval(rem, env) == (vx * a + vy + k) % d


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(1, 7), min_size=4, max_size=4), st.sampled_from((4, 8, 16)))
def test_blocked_nchwc_offsets_match_numpy_padded_layout(shape: list[int], block: int) -> None:
    """`physical_offset` of a `Blocked` layout: element (n, c, h, w) of NCHW lives where
    NumPy's zero-padded (N, C/b, H, W, b) copy puts it, and the strides agree."""
    import numpy as np

    from egraph_compiler.fusion.layout import physical_strides

    n, c, h, w = shape
    layout = ix.Blocked(1, block, 4)
    cp = -(-c // block) * block
    data = np.arange(1, n * c * h * w + 1).reshape(shape)
    padded = np.zeros((n, cp, h, w), dtype=data.dtype)
    padded[:, :c] = data
    stored = padded.reshape(n, cp // block, block, h, w).transpose(0, 1, 3, 4, 2).ravel()
    assert ix.stored_numel(tuple(shape), layout) == stored.size
    assert layout.physical_shape(tuple(shape)) == (n, cp // block, h, w, block)
    index = tuple(ix.IVar(f"v{k}", 0, s - 1) for k, s in enumerate(shape))
    offset = ix.physical_offset(index, tuple(shape), layout)
    strides = physical_strides(shape, layout)
    for point in itertools.product(*(range(s) for s in shape)):
        at = _eval(offset, {f"v{k}": v for k, v in enumerate(point)})
        assert stored[at] == data[point]
        if point[1] % block + 1 < block and point[1] + 1 < c:  # the next channel in its block
            assert _eval(offset, {f"v{k}": v + (k == 1) for k, v in enumerate(point)}) == at + strides[1]
    assert (stored == 0).sum() == n * (cp - c) * h * w  # the padded lanes, and nothing else
    assert list(layout) == [0, f"1/{block}", 2, 3, f"1%{block}"]
