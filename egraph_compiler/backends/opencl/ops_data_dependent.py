"""The operators whose output SIZE depends on their data (the rule files'
``execution_determined`` class: NonZero, Compress, Unique, NonMaxSuppression), run
between two segments of a segmented artefact (`segmented.py`).

- NonZero and Compress run on the device: a count kernel (one work-item per chunk of
  the input, at most `CHUNKS` chunks), an exclusive scan of the chunk counts, and a
  scatter that writes each kept element's coordinates (Compress: the kept positions,
  then a gather of the kept slices). The host reads back ONE integer, the total, to
  size the output; the data stays on the device.
- Unique and NonMaxSuppression select on the host: their operands are read back,
  the selection is computed with NumPy (sorting and greedy IoU suppression as the
  ONNX operator definitions state them), and the small result goes back as the next
  segment's input. The segments around them still run on the device.

Which function implements an operator is keyed by the registry's ``= builtin NAME`` of
its declaration in rules/operators.dnnr (`IMPLEMENTATIONS`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from egraph_compiler.backends.opencl.runtime import DeviceTensor, Tensor
from egraph_compiler.backends.opencl.spelling import C_TYPES
from egraph_compiler.ir.errors import DnnrError
from egraph_compiler.ir.graph import Node

CHUNKS = 256  # work-items of the count and scatter kernels (one chunk of elements each)

# Storage types by element size: Compress's gather copies elements as raw bits.
_BITS = {1: "uchar", 2: "ushort", 4: "uint", 8: "ulong"}


def _nonzero_test(dtype: np.dtype) -> tuple[str, str]:
    """The element type a buffer of ``dtype`` is read as, and the C test of ``v`` being
    non-zero (float16 by its bits: ±0 has no bit set but the sign)."""
    if dtype == np.float16:
        return "ushort", "((v) & 0x7fff) != 0"
    if str(dtype) not in C_TYPES:
        raise DnnrError(f"error: NonZero/Compress on OpenCL do not take {dtype} tensors")
    return C_TYPES[str(dtype)], "(v) != 0"


def _source(kind: str, dtype: np.dtype) -> str:
    element, test = _nonzero_test(dtype)
    test = test.replace("(v)", "x[x_off + i]")
    return f"""
__kernel void count_{kind}(__global const {element}* x, ulong x_off, int n, int chunk,
                          __global int* counts) {{
    int g = get_global_id(0), begin = g * chunk, end = min(begin + chunk, n), c = 0;
    for (int i = begin; i < end; ++i) c += ({test});
    counts[g] = c;
}}
/* one work-item: the chunk counts are few (CHUNKS) */
__kernel void exclusive_scan(__global const int* counts, int chunks, __global int* offsets) {{
    int sum = 0;
    for (int g = 0; g < chunks; ++g) {{ offsets[g] = sum; sum += counts[g]; }}
    offsets[chunks] = sum;
}}
/* row d of out: the d-th coordinate of each non-zero element, in row-major order */
__kernel void scatter_{kind}(__global const {element}* x, ulong x_off, int n, int chunk,
                            __global const int* offsets, int total, int rank,
                            __global const int* dims, __global long* out) {{
    int g = get_global_id(0), begin = g * chunk, end = min(begin + chunk, n), p = offsets[g];
    for (int i = begin; i < end; ++i) {{
        if (!({test})) continue;
        int rest = i;
        for (int d = rank - 1; d >= 0; --d) {{ out[(long)d * total + p] = rest % dims[d]; rest /= dims[d]; }}
        ++p;
    }}
}}
"""


def _gather_source(itemsize: int) -> str:
    element = _BITS[itemsize]
    return f"""
__kernel void gather_kept(__global const {element}* x, ulong x_off, __global const long* kept_at,
                          int kept, int axis_size, int inner, int total, __global {element}* y) {{
    int i = get_global_id(0);
    if (i >= total) return;
    int within = i % inner, j = (i / inner) % kept, outer = i / (inner * kept);
    y[i] = x[x_off + ((long)outer * axis_size + kept_at[j]) * inner + within];
}}
"""


class DeviceOps:
    """The device half of these operators on one context and queue (programs built once
    per source and kept)."""

    def __init__(self, context: Any, queue: Any) -> None:
        self.context, self.queue = context, queue
        self._programs: dict[str, Any] = {}
        self._kernels: dict[tuple[str, str], Any] = {}

    def kernel(self, source: str, name: str) -> Any:
        """Kernel ``name`` of ``source``, built once (a kernel object per retrieval costs)."""
        import pyopencl as cl

        if source not in self._programs:
            self._programs[source] = cl.Program(self.context, source).build()
        if (source, name) not in self._kernels:
            self._kernels[(source, name)] = cl.Kernel(self._programs[source], name)
        return self._kernels[(source, name)]

    def on_device(self, value: Tensor) -> DeviceTensor:
        import pyopencl as cl

        if isinstance(value, DeviceTensor):
            return value
        array = np.require(np.asarray(value), requirements="C")
        buffer = cl.Buffer(self.context, cl.mem_flags.READ_ONLY | cl.mem_flags.COPY_HOST_PTR,
                           hostbuf=array.reshape(-1) if array.size else np.zeros(1, np.uint8))
        return DeviceTensor(buffer, 0, array.dtype, tuple(array.shape))

    def host(self, value: Tensor) -> np.ndarray:
        return value.read(self.queue) if isinstance(value, DeviceTensor) else np.asarray(value)

    def nonzero(self, x: Tensor, limit: int | None = None) -> DeviceTensor:
        """The coordinates of ``x``'s non-zero elements, [rank, count] int64 (``limit``:
        only the first ``limit`` elements of a 1-D ``x`` are looked at)."""
        import pyopencl as cl

        x = self.on_device(x)
        n = int(np.prod(x.shape, dtype=np.int64)) if limit is None else min(limit, x.shape[0])
        shape = x.shape if limit is None else (n,)
        mf = cl.mem_flags
        chunks = min(CHUNKS, n)
        chunk = -(-n // chunks) if chunks else 0
        chunks = -(-n // chunk) if chunk else 0
        total = 0
        if chunks:
            kind = str(x.dtype)
            source = _source(kind, x.dtype)
            counts = cl.Buffer(self.context, mf.READ_WRITE, 4 * chunks)
            offsets = cl.Buffer(self.context, mf.READ_WRITE, 4 * (chunks + 1))
            self.kernel(source, f"count_{kind}")(self.queue, (chunks,), None, x.buffer, np.uint64(x.offset),
                                              np.int32(n), np.int32(chunk), counts)
            self.kernel(source, "exclusive_scan")(self.queue, (1,), None, counts, np.int32(chunks), offsets)
            found = np.zeros(1, np.int32)  # the one value the host needs: the output's size
            cl.enqueue_copy(self.queue, found, offsets, src_offset=4 * chunks)
            total = int(found[0])
        rank = len(shape)
        out = cl.Buffer(self.context, mf.READ_WRITE, max(8 * rank * total, 8))
        if total and rank:
            dims = np.asarray(shape, np.int32)
            dims_buffer = cl.Buffer(self.context, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=dims)
            self.kernel(source, f"scatter_{kind}")(
                self.queue, (chunks,), None, x.buffer, np.uint64(x.offset), np.int32(n), np.int32(chunk),
                offsets, np.int32(total), np.int32(rank), dims_buffer, out)
        return DeviceTensor(out, 0, np.dtype(np.int64), (rank, total))

    def compress(self, x: Tensor, condition: Tensor, axis: int | None) -> DeviceTensor:
        """The slices of ``x`` along ``axis`` (its flattened elements when None) where
        ``condition`` holds; a shorter condition drops the rest."""
        import pyopencl as cl

        x = self.on_device(x)
        condition = self.on_device(condition)
        if len(condition.shape) != 1:
            raise DnnrError(f"error: Compress needs a 1-D condition, got shape {list(condition.shape)}")
        if axis is None:
            outer, axis_size, inner = 1, int(np.prod(x.shape, dtype=np.int64)), 1
        else:
            axis = axis + len(x.shape) if axis < 0 else axis
            outer = int(np.prod(x.shape[:axis], dtype=np.int64))
            axis_size, inner = x.shape[axis], int(np.prod(x.shape[axis + 1:], dtype=np.int64))
        kept_at = self.nonzero(condition, limit=axis_size)  # [1, kept]: row 0 is the positions
        kept = kept_at.shape[1]
        shape = (kept,) if axis is None else (*x.shape[:axis], kept, *x.shape[axis + 1:])
        total = outer * kept * inner
        y = cl.Buffer(self.context, cl.mem_flags.READ_WRITE, max(total * x.dtype.itemsize, 1))
        if total:
            self.kernel(_gather_source(x.dtype.itemsize), "gather_kept")(self.queue, (total,), None, x.buffer, np.uint64(x.offset), kept_at.buffer,
                                np.int32(kept), np.int32(axis_size), np.int32(inner), np.int32(total), y)
        return DeviceTensor(y, 0, x.dtype, shape)


# -- the host selections -------------------------------------------------------------

def unique(x: np.ndarray, axis: int | None, sorted_: bool) -> list[np.ndarray]:
    """Y, indices (first occurrences), inverse_indices, counts (ONNX Unique): sorted
    ascending, or in order of first occurrence when ``sorted_`` is 0."""
    flat = x.reshape(-1) if axis is None else x
    along = 0 if axis is None else axis
    y, indices, inverse, counts = np.unique(flat, return_index=True, return_inverse=True,
                                            return_counts=True, axis=None if axis is None else axis)
    inverse = np.asarray(inverse).reshape(-1)
    if not sorted_:
        order = np.argsort(indices, kind="stable")
        rank_of = np.empty_like(order)
        rank_of[order] = np.arange(len(order))
        indices, counts, inverse = indices[order], counts[order], rank_of[inverse]
        y = np.take(flat, indices, axis=along)
    return [y, indices.astype(np.int64), inverse.astype(np.int64), counts.astype(np.int64)]


def _iou_suppresses(a: np.ndarray, b: np.ndarray, centre: bool, threshold: float) -> bool:
    """Whether box ``b`` (already kept) suppresses ``a``: IoU > threshold (ONNX's test,
    corners in either order, or centre/size boxes)."""
    if centre:
        ax0, ax1, ay0, ay1 = a[0] - a[2] / 2, a[0] + a[2] / 2, a[1] - a[3] / 2, a[1] + a[3] / 2
        bx0, bx1, by0, by1 = b[0] - b[2] / 2, b[0] + b[2] / 2, b[1] - b[3] / 2, b[1] + b[3] / 2
    else:
        ay0, ay1 = sorted((a[0], a[2]))
        ax0, ax1 = sorted((a[1], a[3]))
        by0, by1 = sorted((b[0], b[2]))
        bx0, bx1 = sorted((b[1], b[3]))
    width, height = min(ax1, bx1) - max(ax0, bx0), min(ay1, by1) - max(ay0, by0)
    if width <= 0 or height <= 0:
        return False
    inter = width * height
    area_a, area_b = (ax1 - ax0) * (ay1 - ay0), (bx1 - bx0) * (by1 - by0)
    union = area_a + area_b - inter
    if area_a <= 0 or area_b <= 0 or union <= 0:
        return False
    return bool(inter / union > threshold)


def non_max_suppression(boxes: np.ndarray, scores: np.ndarray, max_per_class: np.ndarray | None,
                        iou_threshold: np.ndarray | None, score_threshold: np.ndarray | None,
                        centre: bool) -> np.ndarray:
    """[selected, 3] rows of (batch, class, box): per batch and class, boxes by score
    (ties: lower index first) kept greedily unless a kept box overlaps by IoU > threshold."""
    limit = 0 if max_per_class is None or max_per_class.size == 0 else max(int(max_per_class.reshape(-1)[0]), 0)
    iou = 0.0 if iou_threshold is None or iou_threshold.size == 0 else float(iou_threshold.reshape(-1)[0])
    floor = None if score_threshold is None or score_threshold.size == 0 else float(score_threshold.reshape(-1)[0])
    rows: list[tuple[int, int, int]] = []
    for batch in range(boxes.shape[0]):
        for cls in range(scores.shape[1]):
            class_scores = scores[batch, cls]
            candidates = [k for k in range(boxes.shape[1]) if floor is None or class_scores[k] > floor]
            candidates.sort(key=lambda k: (-class_scores[k], k))
            kept: list[int] = []
            for k in candidates:
                if len(kept) >= limit:
                    break
                if not any(_iou_suppresses(boxes[batch, k], boxes[batch, j], centre, iou) for j in kept):
                    kept.append(k)
                    rows.append((batch, cls, k))
    return np.asarray(rows, dtype=np.int64).reshape(-1, 3)


# -- dispatch ------------------------------------------------------------------------

Operands = Sequence[Tensor | None]


def _run_nonzero(ops: DeviceOps, node: Node, xs: Operands) -> list[Tensor]:
    return [ops.nonzero(_given(node, xs, 0))]


def _run_compress(ops: DeviceOps, node: Node, xs: Operands) -> list[Tensor]:
    axis = node.attr("axis")
    return [ops.compress(_given(node, xs, 0), _given(node, xs, 1), None if axis is None else int(axis))]


def _run_unique(ops: DeviceOps, node: Node, xs: Operands) -> list[Tensor]:
    axis = node.attr("axis")
    return list(unique(ops.host(_given(node, xs, 0)), None if axis is None else int(axis),
                       bool(node.attr("sorted", 1))))


def _run_nms(ops: DeviceOps, node: Node, xs: Operands) -> list[Tensor]:
    optional = [None if k >= len(xs) or xs[k] is None else ops.host(xs[k]) for k in (2, 3, 4)]
    return [non_max_suppression(ops.host(_given(node, xs, 0)), ops.host(_given(node, xs, 1)), *optional,
                                centre=bool(node.attr("center_point_box", 0)))]


def _given(node: Node, xs: Operands, position: int) -> Tensor:
    if position >= len(xs) or xs[position] is None:
        raise DnnrError(f"error: node '{node.name}' ({node.op}) lacks its operand {position}")
    return xs[position]  # type: ignore[return-value]


# by the operator's ``= builtin NAME`` in the registry (rules/operators.dnnr)
IMPLEMENTATIONS: Mapping[str, Callable[[DeviceOps, Node, Operands], list[Tensor]]] = {
    "nonzero": _run_nonzero, "compress": _run_compress, "unique": _run_unique,
    "non_max_suppression": _run_nms,
}
# the ones whose selection runs on the host (plan.json and the report say so)
ON_HOST = frozenset({"unique", "non_max_suppression"})
