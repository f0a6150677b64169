"""Shape-function built-ins of the rule language (ONNX output shapes as list arithmetic).

Used by `rules/layout.dnnr` to canonicalise Squeeze/Unsqueeze/Flatten to Reshape and to
fold computed Reshape targets. Dims may be symbolic (`DimExpr`); a function raises
`ValueError` when it cannot give an exact answer, which makes the guard or computed
attribute that called it fail (no match), as the other int-list built-ins do.

Squeeze takes a ``require`` hook for the condition on dims it needs: by
default a condition that does not hold (or, over `DimExpr`, is not known to) raises; the
verifier passes its own, which records a Z3 condition (`verify.evalexpr`), so both
stages run the one definition.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from egraph_compiler.ir.dims import Dim, DimExpr, dim_add, dim_floordiv, dim_mul


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


Require = Callable[[Any], None]


def _holds(condition: Any) -> None:
    if not condition:
        raise ValueError("a condition on the dims does not hold (or cannot be proved)")


def squeeze_shape(shape: Sequence[Dim], axes: Sequence[int], require: Require = _holds) -> tuple[Dim, ...]:
    """ONNX Squeeze output shape; no axes = drop every dim equal to 1."""
    if not axes:
        if any(not isinstance(d, int) for d in shape):
            raise ValueError("squeeze of all unit dims with symbolic dims")
        return tuple(d for d in shape if d != 1)
    drop = {_axis(a, len(shape)) for a in axes}
    for i in drop:
        require(shape[i] == 1)  # a squeezed dim is 1
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
    if not isinstance(axis, int) or not -rank <= axis <= rank:
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


# -- the names `shape builtin NAME` may give (`dnnr check` reports any other) -------------
# The shape stage's general rules, implemented in `shapes/rules.py` (SHAPE_FUNCTIONS; the
# rule language comes before that stage, so it knows them by name only —
# tests/dsl/test_dsl_shape_builtins.py keeps the two in step), and the operator shape
# functions below (`OPERATOR_SHAPES`).
GENERAL_SHAPE_RULES = (
    "same", "broadcast", "matmul", "gemm", "conv", "pool", "global_pool", "reduce", "argreduce",
    "flatten", "transpose", "concat", "gather", "unsqueeze", "squeeze", "expand", "tile", "pad",
    "reshape", "split", "slice", "gather_elements", "shape", "size", "constant_of_shape", "range",
    "resize", "layer_norm", "topk", "nonzero", "depth_to_space", "space_to_depth",
    "dynamic_quantize_linear", "einsum", "gather_nd",
)


def shape_builtin_names() -> tuple[str, ...]:
    """Every name an op declaration's ``shape builtin NAME`` may use."""
    return (*GENERAL_SHAPE_RULES, *OPERATOR_SHAPES)


# -- operator shape functions (`shape builtin NAME` on an op declaration) ------------------
# Each takes the shape stage's per-node context (`ShapeContext`) and gives one (dtype, shape)
# per output. A dim given as None is one no rule can tell (the shape stage makes it a fresh
# symbol); a dim that depends on a value known only at run time (a box count, a crop size fed
# as an input) is a fresh symbol too.


class ShapeContext(Protocol):
    """What a shape function reads: `shapes.infer.Context` provides it."""

    attrs: dict[str, Any]
    node: Any

    def has(self, index: int) -> bool: ...
    def shape(self, index: int) -> tuple[Dim, ...] | None: ...
    def need_shape(self, index: int) -> tuple[Dim, ...]: ...
    def dtype(self, index: int) -> str: ...
    def value(self, index: int) -> tuple[Dim, ...] | None: ...
    def const(self, index: int) -> Any: ...
    def fresh(self) -> Dim: ...
    def unknown(self) -> Exception: ...


Typed = list[tuple[str, tuple[Dim | None, ...]]]


def _value_dim(ctx: ShapeContext, index: int) -> Dim | None:
    """The single value of operand ``index`` (a scalar or a one-element vector), if known."""
    value = ctx.value(index)
    return value[0] if value is not None and len(value) == 1 else None


def recurrent_shapes(ctx: ShapeContext) -> Typed:
    """RNN / GRU / LSTM (opset 14): Y [seq, dirs, batch, hidden] and the last states
    [dirs, batch, hidden]; with layout=1 batch comes first: [batch, seq, dirs, hidden] and
    [batch, dirs, hidden]."""
    x, w, r = ctx.shape(0), ctx.shape(1), ctx.shape(2)
    if x is None or w is None or len(x) != 3 or len(w) != 3:
        raise ValueError("X and W of a recurrent layer must be 3-D")
    layout = int(ctx.attrs.get("layout", 0))
    seq, batch = (x[1], x[0]) if layout else (x[0], x[1])
    hidden = int(ctx.attrs["hidden_size"]) if ctx.attrs.get("hidden_size") is not None else \
        (r[2] if r is not None and len(r) == 3 else None)
    dirs, dtype = w[0], ctx.dtype(0)
    if layout:
        return [(dtype, (batch, seq, dirs, hidden)), (dtype, (batch, dirs, hidden)), (dtype, (batch, dirs, hidden))]
    return [(dtype, (seq, dirs, batch, hidden)), (dtype, (dirs, batch, hidden)), (dtype, (dirs, batch, hidden))]


def det_shape(ctx: ShapeContext) -> Typed:
    """Det: the batch axes of [..., M, M]."""
    x = ctx.shape(0)
    if x is None or len(x) < 2:
        raise ValueError("Det needs an input of rank >= 2")
    return [(ctx.dtype(0), tuple(x[:-2]))]


def col2im_shape(ctx: ShapeContext) -> Typed:
    """Col2Im: [N, C * prod(block), L] -> [N, C, *image_shape]."""
    x, image = ctx.shape(0), ctx.shape(1)
    if x is None or len(x) != 3 or image is None or len(image) != 1 or not isinstance(image[0], int):
        raise ValueError("Col2Im needs a 3-D input and a 1-D image_shape of static length")
    spatial = ctx.value(1) or (None,) * image[0]
    block = ctx.value(2)
    channels: Dim | None = None
    if block is not None and all(isinstance(b, int) and b > 0 for b in block) \
            and isinstance(x[1], int):
        channels = x[1] // int(_prod(block))
    return [(ctx.dtype(0), (x[0], channels, *spatial))]


def _dft_length(x: Sequence[Dim], axis: int, inverse: bool, onesided: bool, given: Dim | None) -> Dim | None:
    if given is not None:
        return given
    n = x[axis]
    if inverse and onesided:
        return 2 * (n - 1) if isinstance(n, int) else None
    return n


def dft_shape(ctx: ShapeContext) -> Typed:
    """DFT: the signal axis becomes the transform length (n//2+1 bins when onesided, the
    full length for an inverse onesided one), the last axis 2 (1 for that inverse)."""
    x = ctx.shape(0)
    if x is None or len(x) < 2:
        raise ValueError("DFT needs an input of rank >= 2")
    inverse, onesided = bool(ctx.attrs.get("inverse", 0)), bool(ctx.attrs.get("onesided", 0))
    last = 1 if inverse and onesided else 2
    if ctx.shape(2) is not None:  # a run-time axis
        if not onesided and _value_dim(ctx, 1) is None and ctx.shape(1) is None:
            return [(ctx.dtype(0), (*x[:-1], 2))]  # the transform keeps every axis's length
        return [(ctx.dtype(0), (*([None] * (len(x) - 1)), last))]
    axis = _axis(int(ctx.attrs.get("axis", 1)), len(x))
    if axis == len(x) - 1:
        raise ValueError("DFT's axis must not be the last (real/imaginary) axis")
    length = _dft_length(x, axis, inverse, onesided, _value_dim(ctx, 1))
    if onesided and not inverse:
        length = length // 2 + 1 if isinstance(length, int) else None
    return [(ctx.dtype(0), tuple(length if k == axis else (last if k == len(x) - 1 else d)
                                 for k, d in enumerate(x)))]


def stft_shape(ctx: ShapeContext) -> Typed:
    """STFT: [batch, frames, bins, 2] with frames = (length - frame_length) // step + 1 and
    bins = frame_length // 2 + 1 when onesided (the window's length when frame_length is absent)."""
    signal, window = ctx.shape(0), ctx.shape(2)
    if signal is None or len(signal) != 3:
        raise ValueError("STFT needs a [batch, length, 1 or 2] signal")
    step, frame = _value_dim(ctx, 1), _value_dim(ctx, 3)
    if frame is None and window is not None and len(window) == 1:
        frame = window[0]
    elif frame is None and ctx.shape(3) is None:
        frame = signal[1]  # neither a window nor a frame length: one frame of the whole signal
    frames = bins = None
    if isinstance(step, int) and isinstance(frame, int) and isinstance(signal[1], int) and step > 0:
        frames = (signal[1] - frame) // step + 1
    if isinstance(frame, int):
        bins = frame // 2 + 1 if int(ctx.attrs.get("onesided", 1)) else frame
    return [(ctx.dtype(0), (signal[0], frames, bins, 2))]


def window_shape(ctx: ShapeContext) -> Typed:
    """Hann/Hamming/Blackman windows: [size]."""
    return [(ctx.dtype(0), (_value_dim(ctx, 0),))]


def mel_weight_matrix_shape(ctx: ShapeContext) -> Typed:
    """MelWeightMatrix: [dft_length // 2 + 1, num_mel_bins]."""
    length = _value_dim(ctx, 1)
    return [(ctx.dtype(0), (length // 2 + 1 if isinstance(length, int) else None, _value_dim(ctx, 0)))]


# --- opsb ---------------------------------------------------------------------------------
# Output shapes of the vision and indexing operators (`shape builtin NAME` in
# rules/operators.dnnr, block "opsb").


def _static_length(ctx: ShapeContext, index: int) -> int:
    """The length of the 1-D input ``index`` (a shape or size vector), which must be static."""
    shape = ctx.need_shape(index)
    if len(shape) != 1 or not isinstance(shape[0], int):
        raise ctx.unknown()
    return shape[0]


def _values_or_fresh(ctx: ShapeContext, index: int) -> tuple[Dim, ...]:
    """The value of a small int input (a shape), else one fresh dim per element."""
    value = ctx.value(index)
    if value is not None:
        return tuple(value)
    return tuple(ctx.fresh() for _ in range(_static_length(ctx, index)))


def grid_sample_shape(ctx: ShapeContext) -> Typed:
    """GridSample: (N, C) of x, then grid's spatial dims (grid is (N, *out, rank))."""
    x, grid = ctx.need_shape(0), ctx.need_shape(1)
    if len(grid) != len(x) or len(x) < 3:
        raise ValueError(f"grid of rank {len(grid)} for an input of rank {len(x)}")
    return [(ctx.dtype(0), (x[0], x[1], *grid[1:-1]))]


def affine_grid_shape(ctx: ShapeContext) -> Typed:
    """AffineGrid: size (N, C, *spatial) gives (N, *spatial, len(spatial))."""
    size = _values_or_fresh(ctx, 1)
    if len(size) not in (4, 5):
        raise ValueError(f"size has {len(size)} entries (4 or 5 expected)")
    return [(ctx.dtype(0), (size[0], *size[2:], len(size) - 2))]


def roi_align_shape(ctx: ShapeContext) -> Typed:
    """RoiAlign: (number of rois, C, output_height, output_width)."""
    x, rois = ctx.need_shape(0), ctx.need_shape(1)
    height, width = int(ctx.attrs.get("output_height", 1)), int(ctx.attrs.get("output_width", 1))
    return [(ctx.dtype(0), (rois[0], x[1], height, width))]


def max_roi_pool_shape(ctx: ShapeContext) -> Typed:
    """MaxRoiPool: (number of rois, C, *pooled_shape)."""
    x, rois = ctx.need_shape(0), ctx.need_shape(1)
    pooled = tuple(int(d) for d in ctx.attrs["pooled_shape"])
    return [(ctx.dtype(0), (rois[0], x[1], *pooled))]


def max_unpool_shape(ctx: ShapeContext) -> Typed:
    """MaxUnpool: output_shape's value, else (in - 1) * stride - pads + kernel per spatial dim."""
    if ctx.has(2):
        return [(ctx.dtype(0), _values_or_fresh(ctx, 2))]
    x = ctx.need_shape(0)
    spatial = len(x) - 2
    kernel = [int(k) for k in ctx.attrs["kernel_shape"]]
    strides = [int(s) for s in ctx.attrs.get("strides") or [1] * spatial]
    pads = [int(p) for p in ctx.attrs.get("pads") or [0] * 2 * spatial]
    out = [dim_add(dim_mul(x[2 + i], strides[i]), kernel[i] - strides[i] - pads[i] - pads[i + spatial])
           for i in range(spatial)]
    return [(ctx.dtype(0), (x[0], x[1], *out))]


def one_hot_shape(ctx: ShapeContext) -> Typed:
    """OneHot: indices' shape with depth inserted at axis (which counts in the output)."""
    indices = ctx.need_shape(0)
    depth_value = ctx.const(1)
    depth: Dim = int(float(depth_value.reshape(-1)[0])) if depth_value is not None else ctx.fresh()
    axis = _axis(int(ctx.attrs.get("axis", -1)), len(indices) + 1)
    out = list(indices)
    out.insert(axis, depth)
    return [(ctx.dtype(2), tuple(out))]


def compress_shape(ctx: ShapeContext) -> Typed:
    """Compress: as many slices as condition has true values (a fresh dim), along axis or
    of the flattened input."""
    x = ctx.need_shape(0)
    if ctx.attrs.get("axis") is None:
        return [(ctx.dtype(0), (ctx.fresh(),))]
    axis = _axis(int(ctx.attrs["axis"]), len(x))
    return [(ctx.dtype(0), tuple(ctx.fresh() if i == axis else d for i, d in enumerate(x)))]


def non_max_suppression_shape(ctx: ShapeContext) -> Typed:
    """NonMaxSuppression: (number of kept boxes, 3) int64 rows."""
    return [("int64", (ctx.fresh(), 3))]


def unique_shape(ctx: ShapeContext) -> Typed:
    """Unique: U unique values (slices along axis), their first indices, the inverse
    indices (one per input element, or per slice) and counts; U is one fresh dim."""
    x = ctx.need_shape(0)
    count = ctx.fresh()
    if ctx.attrs.get("axis") is None:
        values: tuple[Dim, ...] = (count,)
        inverse: Dim = _prod(x)
    else:
        axis = _axis(int(ctx.attrs["axis"]), len(x))
        values = tuple(count if i == axis else d for i, d in enumerate(x))
        inverse = x[axis]
    return [(ctx.dtype(0), values), ("int64", (count,)), ("int64", (inverse,)), ("int64", (count,))]


def center_crop_pad_shape(ctx: ShapeContext) -> Typed:
    """CenterCropPad: input's shape with the dims of axes (all when absent) set to shape."""
    x = ctx.need_shape(0)
    target = _values_or_fresh(ctx, 1)
    axes = [_axis(int(a), len(x)) for a in ctx.attrs.get("axes") or range(len(x))]
    if len(axes) != len(target):
        raise ValueError(f"shape has {len(target)} entries for {len(axes)} axes")
    out = list(x)
    for axis, size in zip(axes, target, strict=True):
        out[axis] = size
    return [(ctx.dtype(0), tuple(out))]


# name (`shape builtin NAME`) -> its shape function
OPERATOR_SHAPES: dict[str, Any] = {
    "recurrent": recurrent_shapes, "det": det_shape, "col2im": col2im_shape, "dft": dft_shape,
    "stft": stft_shape, "window": window_shape, "mel_weight_matrix": mel_weight_matrix_shape,
    "grid_sample": grid_sample_shape, "affine_grid": affine_grid_shape, "roi_align": roi_align_shape,
    "max_roi_pool": max_roi_pool_shape, "max_unpool": max_unpool_shape, "one_hot": one_hot_shape,
    "compress": compress_shape, "non_max_suppression": non_max_suppression_shape,
    "unique": unique_shape, "center_crop_pad": center_crop_pad_shape,
}


# --- opsk ---------------------------------------------------------------------------------
def top_k_indices_shape(ctx: ShapeContext) -> Typed:
    """TopKIndices (dnnr-internal, TopK's indices output): x's shape with k along axis."""
    x = ctx.need_shape(0)
    k = ctx.value(1)
    axis = _axis(int(ctx.attrs.get("axis", -1)), len(x))
    out = list(x)
    out[axis] = k[0] if k is not None else ctx.fresh()
    return [("int64", tuple(out))]


OPERATOR_SHAPES["top_k_indices"] = top_k_indices_shape
