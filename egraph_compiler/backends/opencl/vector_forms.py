"""Memory-bound kernels on ``float4``\\ s (GPU class): the ``vectors`` pointwise form and
4-wide row reductions (`vector_accumulate`).

`kernels._Gen._pointwise_items` gives a work-item several scalar elements of a row,
spaced a run apart. Where every tensor the block reads is either contiguous along the
output's flat index in aligned runs of 4 or constant over such a run (a broadcast
per-channel scale), and every output is float32 and contiguous, the block can move
whole ``float4``\\ s instead: one 16-byte load per operand and one 16-byte store per
output for four elements, a quarter of the load/store and index instructions, and four
times the bytes in flight per work-item (EfficientNet-B0's squeeze-excitation scale
``x · σ(s)`` over ``[8, 144, 56, 56]`` ran at 44 % of the H200's bandwidth as four
scalars per work-item).

Work-item ``gid`` takes float4 number ``q = gid + j·T`` for ``j < vectors`` (``T``
work-items): across a warp each access is 512 consecutive bytes. Whether the block
qualifies is proven on its index expressions by `sgemm`'s prologue probe (the same
walk that lets sgemm load a GEMM operand's prologue 4 wide): each read's offset, as a
function of the flat element index ``e``, steps by one inside every aligned run of 4
and is a multiple of 4 at its start, or does not move inside the run. The block's
operators then run once per lane on the loaded lanes (`sgemm._Lanes`), so each lane
computes exactly the scalar code. Offsets are printed with split terms merged
(`fusion.index_merge`): a contiguous read is ``e`` plus a constant.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

from egraph_compiler.backends.opencl import sgemm
from egraph_compiler.backends.opencl import spelling as sp
from egraph_compiler.backends.opencl.emit import Scope
from egraph_compiler.backends.opencl.rows import unrolled_accumulate
from egraph_compiler.fusion import index as ix
from egraph_compiler.fusion.index_merge import merge_splits

if TYPE_CHECKING:
    from egraph_compiler.backends.opencl.kernels import Kernel, _Gen

WIDTH = sgemm.VECTOR  # elements per vector (float4)
FLAT = "e"  # the C variable holding a vector's first flat element index


def vector_pointwise(gen: _Gen, vectors: int) -> Kernel | None:
    """The block as ``float4`` loads and stores, ``vectors`` per work-item; None where
    a read or a store is not proven 4-wide (then the scalar forms run)."""
    values = list(gen.stores)
    shapes = [gen.view.shape(v) for v in values]
    if vectors < 1 or not shapes or any(s != shapes[0] for s in shapes) or \
            any(type(d) is not int for d in shapes[0]) or \
            any(gen.view.dtype(v) != "float32" or gen.em.layouts.get(v) is not None
                for v in values):
        return None
    total = math.prod(shapes[0])
    if total % WIDTH:
        return None
    index = ix.delinearize(ix.IVar(FLAT, 0, total - 1), shapes[0])
    leaves: dict[str, sgemm._Leaf] = {}
    for value in values:
        found = vector_reads(gen, value, index, FLAT)
        if found is None:
            return None
        leaves.update((leaf.key, leaf) for leaf in found)
    count = total // WIDTH
    items = -(-count // vectors)
    gen.variant = f"vectors {vectors}"
    s = Scope()
    s.emit("const int gid = get_global_id(0);")
    s.emit(f"if (gid >= {items}) return;")
    for j in range(vectors):
        body = Scope(s)
        body.emit(f"const int {FLAT} = (gid + {j * items}) * {WIDTH};")
        lanes = load_lanes(gen, body, list(leaves.values()))
        results = {value: gen.em.fresh("r") for value in values}
        for value in values:
            body.emit(f"float4 {results[value]};")
        for lane in range(WIDTH):
            walk, scope = lanes(lane), Scope(body)
            for value in values:
                scope.emit(f"{results[value]}.s{lane} = {walk.value(scope, value, index)};")
            body.nest("", scope)
            gen.em.counter = walk.counter
        for value in values:
            offset = ix.render(merge_splits(ix.physical_offset(index, shapes[0], None)))
            body.emit(f"*(__global float4*)({gen.stores[value]} + {offset}) = {results[value]};")
        if j and count % vectors:
            s.nest(f"if (gid + {j * items} < {count})", body)
        else:
            s.nest("", body)
    return gen.finish(s, items, gen.params.work_group)


def vector_reads(gen: _Gen, name: str, index: tuple[ix.IExpr, ...], var: str
                 ) -> list[sgemm._Leaf] | None:
    """The kernel arguments value ``name`` at ``index`` reads, where each is 4-wide along
    C variable ``var`` or constant over its aligned runs of 4 (at least one 4-wide),
    judged on its offset with split terms merged (a run of 4 is contiguous in the tensor
    whatever its dims: rows of 26 read as one flat row of 1,040); None otherwise."""
    probe = sgemm._ReadProbe(gen.em)
    trial = Scope()
    try:
        probe.value(trial, name, index)
    except (sgemm._NotView, KeyError, ValueError, TypeError):
        return None
    merged = {key: (param, merge_splits(offset), dtype)
              for key, (param, offset, dtype) in probe.reads.items()}
    leaves = sgemm._classified(merged, var)
    if trial.lines or leaves is None or not any(leaf.vector for leaf in leaves):
        return None
    return leaves


def load_lanes(gen: _Gen, body: Scope, leaves: list[sgemm._Leaf]
               ) -> Callable[[int], sgemm._Lanes]:
    """Load ``leaves`` in ``body`` (a 4-wide read as one vector, a constant one once);
    the result gives lane ``k``'s value walk over those loads (made when asked for, so
    its temporaries are numbered after the walks before it: set ``gen.em.counter`` to
    the walk's when done)."""
    reads: dict[str, tuple[str, bool]] = {}
    for leaf in leaves:
        var = gen.em.fresh("v")
        at = ix.render(leaf.offset)
        c_type = sp.C_TYPES[leaf.dtype]
        if not leaf.vector:
            body.emit(f"const {c_type} {var} = {leaf.param}[{at}];")
        elif leaf.dtype == "float32":
            body.emit(f"const float4 {var} = *(__global const float4*)({leaf.param} + {at});")
        else:
            body.emit(f"const {c_type}4 {var} = vload4(0, {leaf.param} + {at});")
        reads[leaf.key] = (var, leaf.vector)

    def lane(k: int) -> sgemm._Lanes:
        return sgemm._Lanes(gen.em, {key: f"{var}.s{k}" if vector else var
                                     for key, (var, vector) in reads.items()})
    return lane


def vector_accumulate(gen: _Gen, s: Scope, var: str, reducer: tuple[str, str, str],
                      length: int, unroll: int, name: str, index: tuple[ix.IExpr, ...]
                      ) -> bool:
    """`rows.strided_accumulate` over row ``o``'s elements ``r`` 4 at a time: each
    work-item ``lid`` loads float4s ``lid, lid + WG, …`` of the row, ``unroll``
    independent partials; False (nothing emitted) where the row's reads of value
    ``name`` at ``index`` (over C variables ``o``, ``r``) are not proven 4-wide along
    ``r`` or the row is not whole vectors. (EfficientNet-B0's GlobalAveragePool over
    ``[8, 32, 112, 112]`` ran at 41 % of the H200's bandwidth one float per load.)"""
    if type(length) is not int or length % WIDTH:  # (a symbolic row keeps scalars)
        return False
    leaves = vector_reads(gen, name, index, "r")
    if leaves is None:
        return False
    init, step, combine = reducer

    def accumulate(inner: Scope, partial: str) -> None:
        """One float4 of the row into ``partial``, lane by lane."""
        lanes = load_lanes(gen, inner, leaves)
        for lane in range(WIDTH):
            walk, scope = lanes(lane), Scope(inner)
            x = walk.value(scope, name, index)
            scope.emit(f"{partial} = {step.format(partial, x)};")
            inner.nest("", scope)
            gen.em.counter = walk.counter
    unrolled_accumulate(
        s, var, (init, combine), unroll,
        f"for (int r0 = lid * {WIDTH}; r0 < {length}; r0 += {unroll * WIDTH} * WG)",
        lambda u: f"r0 + {u * WIDTH} * WG", f"{length}", accumulate)
    return True
