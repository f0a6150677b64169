"""Row kernels with several work-groups per row: the ``row-split`` option.

One work-group per row (`kernels.reduce`, `kernels.rownorm`) leaves a device idle when
rows are few and long — a Softmax over one 32k-wide row, a ReduceMean of a whole
feature map at batch 1 — because a work-group runs on one compute unit. With
`RowSplit` ``groups`` work-groups share a row, each over one contiguous chunk, in two
launches of the block through scratch (no atomics, no order that depends on
scheduling: partials are combined in chunk order):

- ``reduce`` (Reduce*, global pools): pass 1 reduces each chunk (a strided loop, then
  a tree in local memory) to ``scr[row·G + chunk]``; pass 2, one work-item per row,
  combines the row's partials and runs the epilogue.
- ``rownorm`` Softmax / LogSoftmax: pass 1 stores each chunk's max ``m`` and
  ``Σ exp(x − m)``; LayerNormalization each chunk's mean and ``Σ (x − mean)²`` (Chan
  et al.'s pairwise update combines them without cancellation). Pass 2, one
  work-item per element, combines its row's partials (``groups`` of them, a few) and
  normalises the element through the epilogue.

`cost.row_options` prices the variants; `kernels._Gen` asks it per row kernel.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from egraph_compiler.backends.opencl import spelling as sp
from egraph_compiler.backends.opencl.emit import Scope
from egraph_compiler.fusion import index as ix

if TYPE_CHECKING:
    from egraph_compiler.backends.opencl.kernels import Kernel, _Gen

Index = tuple[ix.IExpr, ...]


@dataclass(frozen=True)
class RowSplit:
    """``row-split`` parameters: work-groups per row."""

    groups: int


def chunking(length: int, groups: int) -> tuple[int, int]:
    """(elements per chunk, chunks): no chunk is empty."""
    chunk = -(-length // max(groups, 1))
    return chunk, -(-length // chunk)


def _chunk_loop(gen: _Gen, chunk: int, length: int) -> str:
    """The strided loop of work-item ``lid`` over chunk ``g`` of row ``o``."""
    end = f"(g + 1) * {chunk} < {length} ? (g + 1) * {chunk} : {length}"
    return f"for (int r = g * {chunk} + lid; r < ({end}); r += WG)"


def strided_accumulate(s: Scope, var: str, reducer: tuple[str, str, str], start: str,
                       end: str, stride: str, unroll: int,
                       element: Callable[[Scope], str]) -> None:
    """Declare ``var`` and reduce into it element ``r`` (``element(scope)`` its C value)
    for ``r = start, start + stride, …`` below ``end``, with ``reducer`` = (init, step,
    combine). ``unroll`` > 1 keeps that many independent partials over consecutive
    strides, combined at the end: that many loads in flight per work-item (one load
    per iteration chained on one accumulator left a GPU waiting on memory latency:
    EfficientNet's GlobalAveragePools ran at 18–27 % of the H200's bandwidth)."""
    init, step, combine = reducer
    if unroll <= 1:
        s.emit(f"float {var} = {init};")
        body = Scope(s)
        body.emit(f"{var} = {step.format(var, element(body))};")
        s.nest(f"for (int r = {start}; r < ({end}); r += {stride})", body)
        return
    unrolled_accumulate(
        s, var, (init, combine), unroll,
        f"for (int r0 = {start}; r0 < ({end}); r0 += {unroll} * {stride})",
        lambda u: f"r0 + {u} * {stride}", f"({end})",
        lambda inner, acc: inner.emit(f"{acc} = {step.format(acc, element(inner))};"))


def unrolled_accumulate(s: Scope, var: str, reducer: tuple[str, str], unroll: int,
                        loop: str, first: Callable[[int], str], end: str,
                        accumulate: Callable[[Scope, str], None]) -> None:
    """The loop of ``unroll`` independent partials ``var0, var1, …`` (``reducer`` = (init,
    combine)) under header ``loop`` over ``r0``: partial ``u`` takes element
    ``r = first(u)`` while ``r < end`` (``accumulate(scope, partial)`` folds it in), and
    the partials are combined into ``var`` after it. Shared by the scalar
    (`strided_accumulate`) and float4 (`vector_forms.vector_accumulate`) reductions."""
    init, combine = reducer
    for u in range(unroll):
        s.emit(f"float {var}{u} = {init};")
    body = Scope(s)
    for u in range(unroll):
        one = Scope(body)
        one.emit(f"const int r = {first(u)};")
        inner = Scope(one)
        accumulate(inner, f"{var}{u}")
        one.nest(f"if (r < {end})", inner)
        body.nest("", one)
    s.nest(loop, body)
    s.emit(f"float {var} = {var}0;")
    for u in range(1, unroll):
        s.emit(f"{var} = {combine.format(var, f'{var}{u}')};")


def _tree(combine: str, var: str) -> list[str]:
    step = combine.format("red[lid]", "red[lid + s]")
    return [f"red[lid] = {var};", "barrier(CLK_LOCAL_MEM_FENCE);",
            "for (int s = WG / 2; s > 0; s >>= 1) {",
            f"  if (lid < s) red[lid] = {step};", "  barrier(CLK_LOCAL_MEM_FENCE);", "}"]


def _pass_one_header(gen: _Gen, s: Scope, groups: int, local: int) -> None:
    gen.defines.append(f"WG {local}")
    s.emit(f"const int o = get_group_id(0) / {groups}; const int g = get_group_id(0) % {groups};")
    s.emit("const int lid = get_local_id(0);")
    s.emit("__local float red[WG];")


def split_reduce(gen: _Gen, rows: int, length: int, groups: int, local: int,
                 element: Callable[[Scope], str], reducer: tuple[str, str, str],
                 combine: str, finish: Callable[[Scope, str], None]) -> Kernel:
    """A reduction of ``rows`` rows of ``length``: ``element(scope)`` is the C value of
    element ``r`` of row ``o``; ``reducer`` = (init, step, final) as `kernels._REDUCERS`;
    ``finish(scope, value)`` binds row ``o``'s iteration and runs the epilogue."""
    init, step, final = reducer
    chunk, groups = chunking(length, groups)
    gen.use_scratch(rows * groups)
    s = Scope()
    _pass_one_header(gen, s, groups, local)
    strided_accumulate(s, "accv", (init, step, combine), f"g * {chunk} + lid",
                       f"(g + 1) * {chunk} < {length} ? (g + 1) * {chunk} : {length}", "WG",
                       gen.params.reduce_unroll, element)
    s.lines.extend(_tree(combine, "accv"))
    s.emit(f"if (lid == 0) {gen.scratch_param}[o * {groups} + g] = red[0];")
    first = gen.finish(s, rows * groups * local, local)
    gen.next_kernel()
    t = Scope()
    t.emit("const int o = get_global_id(0);")
    t.emit(f"if (o >= {rows}) return;")
    t.emit(f"float accv = {gen.scratch_param}[o * {groups}];")
    t.emit(f"for (int g = 1; g < {groups}; ++g) accv = "
           f"{combine.format('accv', f'{gen.scratch_param}[o * {groups} + g]')};")
    finish(t, final.format("accv", float(length)))
    return _chained(first, gen.finish(t, rows, gen.params.work_group))


def split_rownorm(gen: _Gen, op: str, rows: int, length: int, groups: int, local: int,
                  element: Callable[[Scope], str], normalise: Callable[[Scope], None],
                  epsilon: float = 1e-5) -> Kernel:
    """Softmax, LogSoftmax or LayerNormalization (``op``) over rows of ``length``:
    ``element(scope)`` reads element ``r`` of row ``o``; ``normalise(scope, value)``
    binds element (o, r)'s iteration and runs the epilogue on the normalised value,
    computed from the element and the row statistics ``center`` and ``scale``
    (LayerNorm: mean and 1/σ; Softmax: max and 1/Σ; LogSoftmax: max and log Σ)."""
    chunk, groups = chunking(length, groups)
    layer_norm = op in ("LayerNormalization", "InstanceNormalization")  # same row statistics
    gen.use_scratch(rows * groups * 2)
    s = Scope()
    _pass_one_header(gen, s, groups, local)
    loop = _chunk_loop(gen, chunk, length)
    s.emit(f"const int count = ((g + 1) * {chunk} < {length} ? (g + 1) * {chunk} : {length}) "
           f"- g * {chunk};")
    # first statistic: the chunk's sum (LayerNorm) or max (Softmax)
    s.emit("float a1 = " + ("0.0f;" if layer_norm else "-INFINITY;"))
    body = Scope(s)
    x = element(body)
    body.emit(f"a1 = a1 + {x};" if layer_norm else f"a1 = {x} > a1 ? {x} : a1;")
    s.nest(loop, body)
    combine_first = "({0} + {1})" if layer_norm else "({1} > {0} ? {1} : {0})"
    s.lines.extend(_tree(combine_first, "a1"))
    s.emit("const float c1 = " + ("red[0] / (float)count;" if layer_norm else "red[0];"))
    s.emit("barrier(CLK_LOCAL_MEM_FENCE);")  # every lane has read red[0]
    gen.helpers.append(_inline_exp())
    s.emit("float a2 = 0.0f;")
    body = Scope(s)
    x = element(body)
    body.emit(f"a2 = a2 + ({x} - c1) * ({x} - c1);" if layer_norm else
              f"a2 = a2 + dnnr_exp({x} - c1);")
    s.nest(loop, body)
    s.lines.extend(_tree("({0} + {1})", "a2"))
    done = Scope(s)
    done.emit(f"{gen.scratch_param}[(o * {groups} + g) * 2] = c1;")
    done.emit(f"{gen.scratch_param}[(o * {groups} + g) * 2 + 1] = red[0];")
    s.nest("if (lid == 0)", done)
    first = gen.finish(s, rows * groups * local, local)
    gen.next_kernel()
    gen.helpers.append(_inline_exp())
    t = Scope()
    t.emit("const int gid = get_global_id(0);")
    t.emit(f"if (gid >= {rows * length}) return;")
    t.emit(f"const int o = gid / {length}; const int r = gid % {length};")
    t.emit(f"__global const float* part = {gen.scratch_param} + o * {groups * 2};")
    if layer_norm:  # Chan et al.: merge (count, mean, M2) chunk by chunk, in order
        t.emit(f"float n = (float)({chunk} < {length} ? {chunk} : {length}); "
               "float center = part[0]; float m2 = part[1];")
        t.emit(f"for (int g = 1; g < {groups}; ++g) {{")
        t.emit(f"  const float nb = (float)(((g + 1) * {chunk} < {length} ? (g + 1) * {chunk} : "
               f"{length}) - g * {chunk});")
        t.emit("  const float delta = part[2 * g] - center; const float total = n + nb;")
        t.emit("  center += delta * nb / total; m2 += part[2 * g + 1] + delta * delta * n * nb / total;")
        t.emit("  n = total;")
        t.emit("}")
        t.emit(f"const float scale = rsqrt(m2 / (float){length} + "
               f"{sp.literal(epsilon, 'float32')});")
    else:  # the row max, and each chunk's sum rescaled to it
        t.emit("float center = part[0];")
        t.emit(f"for (int g = 1; g < {groups}; ++g) center = part[2 * g] > center ? "
               "part[2 * g] : center;")
        t.emit("float total = 0.0f;")
        t.emit(f"for (int g = 0; g < {groups}; ++g) total += part[2 * g + 1] * "
               "dnnr_exp(part[2 * g] - center);")
        t.emit("const float scale = " + ("log(total);" if op == "LogSoftmax" else
                                         "1.0f / total;"))
    normalise(t)
    return _chained(first, gen.finish(t, rows * length, gen.params.work_group))


def _chained(first: Kernel, second: Kernel) -> Kernel:
    from dataclasses import replace

    return replace(first, then=second)


def _inline_exp() -> str:
    from egraph_compiler.backends.opencl.kernels import INLINE_EXP

    return INLINE_EXP

