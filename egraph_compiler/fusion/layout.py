"""Reduction-dimension layout selection for intermediate tensors (SmartMem §3.2.2).

A tensor between two blocks is stored in whatever dimension order its producer
and consumers read and write best: when a block reduces over axes that are not
innermost, the producer can write the tensor with those axes innermost so the
reduction's lanes read consecutive addresses. The order is a permutation of the
logical axes (physical shape ``[shape[p] for p in perm]``); every kernel that
stores or loads the tensor applies it through index comprehension, so no
Transpose ever runs.

The cost model counts memory transactions: a work-group's adjacent lanes touch
addresses ``stride`` elements apart, and one 32-byte sector holds ``SECTOR``
floats, so an access costs ``numel * min(stride, SECTOR)``. The lane axis of an
access is fixed by the kernel kind:

- work-group reductions (``rowgroup``, ``rownorm``, ``reduce`` over at least
  ``SERIAL_REDUCE_BELOW`` elements): the innermost reduced axis. Row kernels over
  short rows run a work-item per row instead (``KernelParams.row_serial_below``);
  that work-item streams its row, which wants the same order (rows contiguous);
- serial reductions: the innermost kept axis (one output per lane);
- Conv/MatMul anchors write register tiles spanning output channels (or columns)
  and output columns, so either of those axes innermost costs one sector;
- everything else (pointwise, pooling) walks its output in logical order: the
  last axis.

Candidates are the identity and, per consumer, "kept axes then reduced axes"
(work-group) or "reduced then kept" (serial); the cheapest wins, the identity on
ties. Only tensors whose every consumer is a reduction kernel are considered
(the tiled Conv/MatMul kernels read their operands with vector loads of their own
layout). Each choice is recorded with its costs.

For the `select` stage (``layout_options(..., blocked=True)``) a 4-D float tensor a conv
block reads also gets blocked NCHWc candidates (`index.Blocked`, c in `CHANNEL_BLOCKS`):
scalar readers (`BLOCKED_READERS`) read it at their lane axis's stride (the channels:
runs of c floats), a padded one (c not dividing the channels) only from producers that
write its padded lanes zero (a one-output pointwise block; a conv through its blocked
kernel, which the selection decides per option), and a conv block reads it only
through its blocked kernel (priced by `select`, which knows the implementations).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from egraph_compiler import ops
from egraph_compiler.fusion.index import Blocked, Layout
from egraph_compiler.fusion.structure import BlockStructure, reduce_axes
from egraph_compiler.fusion.view import GraphView
from egraph_compiler.ir.graph import Node

SECTOR = 8  # float32 elements per 32-byte memory transaction
# Reductions over fewer elements run one output per work-item (kernels.KernelParams).
SERIAL_REDUCE_BELOW = 32
REDUCING_KINDS = frozenset({"reduce", "rownorm", "rowgroup"})


@dataclass(frozen=True)
class LayoutChoice:
    """The physical dimension order of one intermediate tensor, and why."""

    value: str
    perm: Layout
    reason: str


def physical_strides(shape: Sequence[int], perm: Layout) -> dict[int, int]:
    """Element stride of each logical axis when stored in ``perm`` order (a `Blocked`
    layout: the split axis steps within its block, 1 apart; the others over whole blocks)."""
    strides: dict[int, int] = {}
    stride = 1
    if isinstance(perm, Blocked):
        physical = perm.physical_shape(tuple(shape))
        for axis in reversed(range(len(shape))):
            strides[axis] = 1 if axis == perm.axis else stride * perm.block
            stride *= physical[axis]  # the split axis: its count of blocks
        return strides
    for axis in reversed(perm):
        strides[axis] = stride
        stride *= shape[axis]
    return strides


# Block kinds whose kernels read every input through index comprehension (a scalar load
# at `physical_offset`), so any dimension order of an input is legal; the tiled
# Conv/MatMul/pool kernels read their operands in their own layout.
PERMUTABLE_READERS = REDUCING_KINDS | {"pointwise"}
CANNOT_READ = float("inf")


@dataclass(frozen=True)
class TensorLayoutOptions:
    """The dimension orders one intermediate may be stored in, with their costs in
    sector transactions: the producer's write per candidate and each consumer block's
    read per candidate (`CANNOT_READ` where that kernel cannot read the order)."""

    value: str
    producer: int  # block index in the structures' order
    candidates: tuple[Layout, ...]  # the identity first
    write: tuple[float, ...]
    reads: tuple[tuple[int, tuple[float, ...]], ...]  # (consumer block index, cost per candidate)
    lanes: tuple[int, ...]  # per consumer: the axis its adjacent lanes step along


def layout_options(view: GraphView, structures: Sequence[tuple[frozenset[int], BlockStructure]],
                   blocked: bool = False) -> list[TensorLayoutOptions]:
    """Options for every intermediate tensor (not a graph output) that some block reads:
    the identity and, per reduction consumer, "kept axes then reduced axes" (work-group)
    or "reduced then kept" (serial); with ``blocked``, for a 4-D float tensor a conv block
    reads, blocked NCHWc at each of `CHANNEL_BLOCKS` (`index.Blocked`, `blocked_candidates`)."""
    owner = {n: k for k, (members, _) in enumerate(structures) for n in members}
    result = []
    for index, (members, structure) in enumerate(structures):
        for value in structure.outputs:
            if value in view.graph_outputs:
                continue
            consumers = sorted({owner[u] for u in view.consumer_indices.get(value, [])} - {index})
            if consumers:
                options = _options(view, value, index, members, structure, consumers, structures)
                result.append(_with_blocked(view, options, structures) if blocked else options)
    return result


# channel blocks of the NCHWc candidates: one float4 / float8 / float16 load per block
CHANNEL_BLOCKS = (4, 8, 16)
BLOCKED_READERS = PERMUTABLE_READERS | {"pool"}  # scalar loads at `physical_offset`


def blocked_candidates(view: GraphView, value: str,
                       structures: Sequence[tuple[frozenset[int], BlockStructure]],
                       consumers: Sequence[int]) -> tuple[Blocked, ...]:
    """NCHWc layouts for ``value``: a 4-D float32 tensor read by a conv block, at each block
    no wider than twice its channels (wider is mostly padding)."""
    shape = view.shape(value)
    if len(shape) != 4 or view.dtype(value) != "float32" or \
            not any(structures[c][1].kind == "conv" for c in consumers):
        return ()
    return tuple(Blocked(1, b, 4) for b in CHANNEL_BLOCKS if b <= 2 * shape[1])


def padded(shape: Sequence[int], layout: Layout) -> bool:
    """Whether ``layout`` pads ``shape`` (a blocked layout whose block does not divide the axis)."""
    return isinstance(layout, Blocked) and shape[layout.axis] % layout.block != 0


def _with_blocked(view: GraphView, options: TensorLayoutOptions,
                  structures: Sequence[tuple[frozenset[int], BlockStructure]]) -> TensorLayoutOptions:
    """``options`` plus the NCHWc candidates, priced like the others: the producer writes
    with its lanes along the last axis (b apart), except a padded tensor, which only a
    pointwise block of one output (walking the padded tensor: `backends.opencl.blocked`)
    or a conv block (through its blocked kernel, decided per option by `select`) writes;
    a reader of kind `BLOCKED_READERS` reads with scalar loads at its lane axis's stride;
    a conv block cannot read it (`select` prices its blocked kernel, which can)."""
    value = options.value
    consumers = [c for c, _ in options.reads]
    extra = blocked_candidates(view, value, structures, consumers)
    if not extra:
        return options
    shape = view.shape(value)
    numel = int(np.prod(shape, dtype=np.int64))
    producer = structures[options.producer][1]
    writes, reads = list(options.write), [list(r) for _, r in options.reads]
    for layout in extra:
        stored = int(np.prod(layout.padded(shape), dtype=np.int64))
        strides = physical_strides(shape, layout)
        if padded(shape, layout) and producer.kind == "pointwise" and len(producer.outputs) == 1:
            writes.append(stored)  # walks the padded tensor in storage order
        elif padded(shape, layout) and producer.kind != "conv":
            writes.append(CANNOT_READ)  # its kernel would leave the padded lanes unwritten
        elif producer.kind == "conv":
            writes.append(stored)  # register tiles span the channels: the block is contiguous
        else:
            writes.append(numel * min(strides[len(shape) - 1], SECTOR))
        for r, (c, lane) in zip(reads, zip(consumers, options.lanes, strict=True), strict=True):
            # lanes along the channels: runs of b contiguous floats, so a sector serves
            # min(b, SECTOR) of them
            step = SECTOR // min(layout.block, SECTOR) if lane == layout.axis else \
                min(strides.get(lane, 1), SECTOR)
            r.append(float(numel * step) if structures[c][1].kind in BLOCKED_READERS else CANNOT_READ)
    # an RGBA image (block 4): written by a one-output pointwise block or a conv through
    # its blocked kernel, read only by the blocked convs that take an image input (`select`)
    if (producer.kind == "conv" or producer.kind == "pointwise" and len(producer.outputs) == 1) \
            and all(structures[c][1].kind == "conv" for c in consumers) and 4 <= 2 * shape[1]:
        image = Blocked(1, 4, 4, image=True)
        extra = (*extra, image)
        writes.append(int(np.prod(image.padded(shape), dtype=np.int64)))
        for r in reads:
            r.append(CANNOT_READ)
    return TensorLayoutOptions(value, options.producer, (*options.candidates, *extra),
                               tuple(writes), tuple((c, tuple(r)) for c, r in zip(consumers, reads,
                                                                                  strict=True)),
                               options.lanes)


def _options(view: GraphView, value: str, index: int, members: frozenset[int],
             producer: BlockStructure, consumers: list[int],
             structures: Sequence[tuple[frozenset[int], BlockStructure]]) -> TensorLayoutOptions:
    shape = view.shape(value)
    rank = len(shape)
    identity = tuple(range(rank))
    candidates = [identity]
    lanes = []
    for c in consumers:
        if structures[c][1].kind in REDUCING_KINDS:
            lane_axis, reduced = _consumer_lane(view, value, structures[c])
            kept = tuple(a for a in identity if a not in reduced)
            perm = (*reduced, *kept) if lane_axis not in reduced else (*kept, *reduced)
            if perm not in candidates:
                candidates.append(perm)
        else:  # walks its output in logical order: the last axis of any size > 1
            big = [a for a in range(rank) if shape[a] > 1]
            lane_axis = big[-1] if big else rank - 1
        lanes.append(lane_axis)
    numel = int(np.prod(shape, dtype=np.int64))
    strides = [physical_strides(shape, p) for p in candidates]
    write = tuple(numel * min(_producer_write_stride(view, value, members, producer, p, st),
                              SECTOR) for p, st in zip(candidates, strides, strict=True))
    reads = []
    for c, lane_axis in zip(consumers, lanes, strict=True):
        readable = structures[c][1].kind in PERMUTABLE_READERS
        reads.append((c, tuple(float(numel * min(st.get(lane_axis, 1), SECTOR))  # rank 0: no axis
                               if readable or p == identity else CANNOT_READ
                               for p, st in zip(candidates, strides, strict=True))))
    return TensorLayoutOptions(value, index, tuple(candidates), write, tuple(reads), tuple(lanes))


def _count(cost: float) -> str:
    return str(int(cost)) if cost != CANNOT_READ else "cannot read"


def select_layouts(view: GraphView, structures: Sequence[tuple[frozenset[int], BlockStructure]]
                   ) -> list[LayoutChoice]:
    """The per-tensor rule (SmartMem §3.2.2): a `LayoutChoice` for every intermediate
    read only by reduction kernels, each decided alone (the `select` stage decides all
    intermediates together as a PBQP)."""
    choices = []
    for options in layout_options(view, structures):
        if any(structures[c][1].kind not in REDUCING_KINDS for c, _ in options.reads):
            continue
        choices.append(_choose(options, structures))
    return choices


def _choose(options: TensorLayoutOptions,
            structures: Sequence[tuple[frozenset[int], BlockStructure]]) -> LayoutChoice:
    def cost(k: int) -> float:
        return options.write[k] + sum(r[k] for _, r in options.reads)

    best = min(range(len(options.candidates)), key=lambda k: (cost(k), k != 0))
    return LayoutChoice(options.value, options.candidates[best],
                        describe(options, best, structures, cost))


def describe(options: TensorLayoutOptions, pick: int,
             structures: Sequence[tuple[frozenset[int], BlockStructure]], cost) -> str:
    perm = options.candidates[pick]
    costs = ", ".join(f"{list(p)}: {_count(cost(k))}" for k, p in enumerate(options.candidates))
    what = "kept as is" if perm == options.candidates[0] else f"stored as {list(perm)}"
    kinds = ", ".join(structures[c][1].kind for c, _ in options.reads)
    return (f"{what}; read by {kinds} lanes along axes {list(options.lanes)}; "
            f"sector transactions {costs}")


def _consumer_lane(view: GraphView, value: str, consumer: tuple[frozenset[int], BlockStructure]
                   ) -> tuple[int, tuple[int, ...]]:
    """(axis of ``value`` that adjacent lanes step along, the reduced axes)."""
    _, structure = consumer
    shape = view.shape(value)
    rank = len(shape)
    node = view.nodes[structure.anchor]  # type: ignore[index]
    if node.inputs and shape != view.shape(node.inputs[0]):
        # read by the block's prologue at another shape (a broadcast operand): the
        # reduction's axes are not this value's; it is read like any operand
        big = [a for a in range(rank) if shape[a] > 1]
        return (big[-1] if big else rank - 1), ()
    info = ops.current().get(node.op)
    argreduce = info is not None and info.shape == "builtin argreduce"
    if info is not None and info.anchor == "rownorm":
        axes: tuple[int, ...] = normalised_axes(node, rank)
    elif info is not None and info.shape == "builtin global_pool":
        axes = tuple(range(2, rank))
    elif argreduce:
        axes = (int(node.attr("axis", 0)) % rank,)  # type: ignore[arg-type]
    else:
        axes, _ = reduce_axes(view, node)
    length = int(np.prod([shape[a] for a in axes], dtype=np.int64))
    serial = structure.kind == "reduce" and (length < SERIAL_REDUCE_BELOW or argreduce)
    pool = [a for a in range(rank) if (a not in axes) == serial and shape[a] > 1]
    lane = pool[-1] if pool else rank - 1
    return lane, axes


def normalised_axes(node: Node, rank: int) -> tuple[int, ...]:
    """The axes a row-normalisation anchor (``anchor rownorm``) reduces over:
    InstanceNormalization all the spatial ones, LayerNormalization ``axis`` onwards,
    Softmax/LogSoftmax ``axis``."""
    if node.op == "InstanceNormalization":
        return tuple(range(2, rank))
    axis = int(node.attr("axis", -1)) % rank  # type: ignore[arg-type]
    return tuple(range(axis, rank)) if node.op == "LayerNormalization" else (axis,)


def _producer_write_stride(view: GraphView, value: str, members: frozenset[int],
                           producer: BlockStructure, perm: tuple[int, ...],
                           strides: dict[int, int]) -> int:
    shape = view.shape(value)
    rank = len(shape)
    if producer.kind in ("conv", "matmul") and producer.anchor is not None and \
            view.shape(view.nodes[producer.anchor].outputs[0]) == shape:
        tile_axes = {1, rank - 1} if producer.kind == "conv" else {rank - 2, rank - 1}
        return 1 if perm[-1] in tile_axes else strides[rank - 1]
    if producer.kind in REDUCING_KINDS and producer.anchor is not None:
        structure_lane, _ = _consumer_lane(view, view.nodes[producer.anchor].inputs[0],
                                           (members, producer))
        if view.shape(view.nodes[producer.anchor].inputs[0]) == shape:
            return strides[structure_lane]
    last = [a for a in range(rank) if shape[a] > 1]
    return strides[last[-1]] if last else 1


__all__ = ["BLOCKED_READERS", "CANNOT_READ", "CHANNEL_BLOCKS", "LayoutChoice", "PERMUTABLE_READERS", "SECTOR", "SERIAL_REDUCE_BELOW",
           "TensorLayoutOptions", "blocked_candidates", "describe", "layout_options", "padded", "normalised_axes", "physical_strides",
           "select_layouts"]
