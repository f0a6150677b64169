"""Shape-function built-ins of the rule language (ONNX output shapes as list arithmetic).

Used by `rules/layout.dnnr` to canonicalise Squeeze/Unsqueeze/Flatten to Reshape and to
fold computed Reshape targets. Dims may be symbolic (`DimExpr`); a function raises
`ValueError` when it cannot give an exact answer, which makes the guard or computed
attribute that called it fail (no match), as the other int-list built-ins do.
"""

from __future__ import annotations

from collections.abc import Sequence

from egraph_compiler.ir.dims import Dim, DimExpr, dim_floordiv


def _axis(axis: int, rank: int) -> int:
    if not -rank <= int(axis) < rank:
        raise ValueError(f"axis {axis} is out of range for rank {rank}")
    return int(axis) + rank if axis < 0 else int(axis)


def _prod(dims: Sequence[Dim]) -> Dim:
    total: Dim = 1
    for d in dims:
        total = total * d
    return total


def reshape_shape(shape: Sequence[Dim], target: Sequence[Dim]) -> tuple[Dim, ...]:
    """ONNX Reshape output shape with allowzero=0: 0 copies, one -1 is inferred."""
    out: list[Dim] = []
    infer: int | None = None
    for i, d in enumerate(target):
        if isinstance(d, int) and d == 0:
            if i >= len(shape):
                raise ValueError("a 0 in the target past the input's rank")
            out.append(shape[i])
        elif isinstance(d, int) and d == -1:
            if infer is not None:
                raise ValueError("two -1 in a Reshape target")
            infer = i
            out.append(1)
        elif isinstance(d, int) and d < 0:
            raise ValueError(f"invalid Reshape target entry {d}")
        else:
            out.append(d)
    total = _prod(shape)
    known = _prod(out)
    if infer is not None:
        # Cancel the symbolic dims the target shares with the input, so that
        # (B, 3, 4) -> (0, -1) infers 12 from 3 * 4.
        rest = list(shape)
        fixed: list[Dim] = []
        for i, d in enumerate(out):
            if i == infer:
                continue
            if isinstance(d, DimExpr) and d in rest:
                rest.remove(d)
            else:
                fixed.append(d)
        known_rest, total_rest = _prod(fixed), _prod(rest)
        if not isinstance(known_rest, int) or known_rest <= 0:
            raise ValueError("cannot infer -1 next to symbolic dims")
        if isinstance(total_rest, int):
            if total_rest % known_rest:
                raise ValueError("Reshape target does not divide the element count")
            out[infer] = total_rest // known_rest
        else:
            out[infer] = dim_floordiv(total_rest, known_rest)
        known = _prod(out)
    if known != total:
        raise ValueError("Reshape changes the element count (or it cannot be proved equal)")
    return tuple(out)


def squeeze_shape(shape: Sequence[Dim], axes: Sequence[int]) -> tuple[Dim, ...]:
    """ONNX Squeeze output shape; no axes = drop every dim equal to 1."""
    if not axes:
        if any(isinstance(d, DimExpr) for d in shape):
            raise ValueError("squeeze of all unit dims with symbolic dims")
        return tuple(d for d in shape if d != 1)
    drop = {_axis(a, len(shape)) for a in axes}
    if any(shape[i] != 1 for i in drop):
        raise ValueError("Squeeze of a dim that is not 1")
    return tuple(d for i, d in enumerate(shape) if i not in drop)


def unsqueeze_shape(shape: Sequence[Dim], axes: Sequence[int]) -> tuple[Dim, ...]:
    """ONNX Unsqueeze output shape (axes index the output)."""
    rank = len(shape) + len(axes)
    out = list(shape)
    for a in sorted({_axis(a, rank) for a in axes}):
        out.insert(a, 1)
    if len(out) != rank:
        raise ValueError("repeated Unsqueeze axes")
    return tuple(out)


def flatten_shape(shape: Sequence[Dim], axis: int) -> tuple[Dim, ...]:
    """ONNX Flatten output shape: [prod(shape[:axis]), prod(shape[axis:])]."""
    rank = len(shape)
    if not -rank <= int(axis) <= rank:
        raise ValueError(f"Flatten axis {axis} is out of range for rank {rank}")
    cut = int(axis) + rank if axis < 0 else int(axis)
    return (_prod(shape[:cut]), _prod(shape[cut:]))


def reshape_target(source: Sequence[Dim], result: Sequence[Dim]) -> tuple[int, ...]:
    """A constant Reshape target (allowzero=0) turning shape ``source`` into ``result``.

    An int dim is written as itself, a symbolic dim equal to ``source`` at the same
    index as 0 (copy), and at most one other symbolic dim as -1 (inferred).
    """
    target: list[int] = []
    inferred = False
    for i, d in enumerate(result):
        if isinstance(d, int):
            target.append(d)
        elif i < len(source) and source[i] == d:
            target.append(0)
        elif not inferred:
            target.append(-1)
            inferred = True
        else:
            raise ValueError("more than one symbolic dim to infer")
    if reshape_shape(source, target) != tuple(result):
        raise ValueError("no constant Reshape target gives this shape")
    return tuple(target)
