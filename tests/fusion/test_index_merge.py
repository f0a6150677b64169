"""`fusion.index_merge`: split index terms merged back, checked by evaluating every
offset at every work-item index."""

from __future__ import annotations

import numpy as np
import pytest

from egraph_compiler.fusion import index as ix
from egraph_compiler.fusion.index_merge import merge_splits, substitute


def _at(expr: ix.IExpr, env: dict[str, int]) -> int:
    return int(eval(ix.render(expr).replace("/", "//"), {"__builtins__": {}}, env))  # noqa: S307


def test_contiguous_reads_collapse_to_the_flat_index() -> None:
    """EfficientNet's squeeze-excitation read (`index_merge` docstring) and ConvNeXt's
    NCHW → NHWC LayerNorm store, whose pixel index is contiguous in NHWC only."""
    g = ix.IVar("g", 0, 8 * 32 * 112 - 1)
    offset = ix.linearize((*ix.delinearize(g, (8, 32, 112)), ix.IVar("l", 0, 111)),
                          (8, 32, 112, 112))
    assert ix.count_divmod(offset) == 4
    assert ix.render(merge_splits(offset)) == "112*g + l"
    o, r = ix.IVar("o", 0, 8 * 56 * 56 - 1), ix.IVar("r", 0, 95)
    n, h, w = ix.delinearize(o, (8, 56, 56))
    assert ix.render(merge_splits(ix.linearize((n, h, w, r), (8, 56, 56, 96)))) == "96*o + r"
    assert ix.render(merge_splits(ix.linearize((n, r, h, w), (8, 96, 56, 56)))) == \
        "301056*((o)/3136) + ((o)%3136) + 3136*r"


@pytest.mark.parametrize("seed", range(4))
def test_merged_offsets_are_the_same_numbers(seed: int) -> None:
    """Random shapes read through a random permutation and broadcast (a dim read at 0),
    as a sum over two work-item variables, one bound through `substitute`."""
    rng = np.random.default_rng(seed)
    for _ in range(60):
        shape = tuple(int(d) for d in rng.choice([1, 2, 3, 4, 6, 8], rng.integers(1, 5)))
        size = int(np.prod(shape))
        g = ix.IVar("g", 0, size - 1)
        split = ix.delinearize(g, shape)
        perm = rng.permutation(len(shape))
        index = tuple(0 if rng.random() < 0.2 else split[p] for p in perm)
        offset = ix.linearize(index, tuple(shape[p] for p in perm))
        merged = merge_splits(substitute(ix.add(offset, ix.IVar("i0", 0, 9)),
                                         {"i0": ix.mul(ix.IVar("h", 0, 4), 2)}))
        assert ix.count_divmod(merged) <= ix.count_divmod(offset)
        for value in range(size):
            for h in (0, 4):
                assert _at(merged, {"g": value, "h": h}) == _at(offset, {"g": value}) + 2 * h
