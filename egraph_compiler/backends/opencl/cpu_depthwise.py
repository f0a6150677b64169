"""A depthwise conv as explicit vectors along the output row: the ``depthwise-vec``
option (CPU devices only; priced at stride 2, `cost._vec_depthwise_options`).

The ``depthwise`` kernel's ``lanes`` form (`depthwise.py`) puts consecutive output
columns on consecutive work-items and leaves the vectorising to PoCL; at stride 2 the
items' loads are two elements apart, a gather, so PoCL keeps the item loop scalar
(MobileNetV3-small's stride-2 depthwise convs 0.087-0.115 ms on the calling thread,
about 4× onnxruntime's). Here a work-item owns ``rows`` output rows × ``pixels``
consecutive output columns of one channel, one ``float{pixels}`` accumulator per row.
Per window row and tap it does ONE unaligned vector load of the ``2·pixels`` (stride 2)
input elements the tap's lanes span and takes every ``s1``-th lane (``.even`` at
stride 2: a shuffle, no gather), then a vector multiply-add per output row that reads
the window row. Edges without scalar fallbacks: at bound sizes which column blocks
reach past either end of the input row is known when generating, so each such block
gets its own branch whose loads start at a clamped literal offset and whose lanes are
picked (or zeroed, for the padding) at generation; the other blocks share the branch
whose load starts at the item's own column. Window rows outside the input (top and
bottom padding) are skipped by a branch uniform over the item.

Applies at bound sizes, 2-D, stride 1 or 2, rows wide enough for one load, where
the conv's input is computed lane by lane from kernel inputs of its own shape
(`row_inputs`): no prologue, or an elementwise one (Relu, BatchNorm, a residual Add),
which runs on the loaded vectors (`emit.ValueEmitter.vector`). The epilogue runs once
per output row on its vector where `cpu_epilogue` applies (HardSwish), else per element.

Measured in MobileNetV3-small on PoCL's calling thread (7 × 8 blocks): its four
stride-2 depthwise convs 0.031 / 0.066 / 0.046 / 0.043 ms (7 × 4) against the lanes
kernels' 0.089 / 0.114 / 0.064 / 0.050; at stride 1 it ran 10-25 % slower than them,
so the cost model offers it at stride 2 only (`cost._vec_depthwise_options`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from egraph_compiler.backends.opencl import cpu_epilogue as epilogue
from egraph_compiler.backends.opencl.cpu_window import vec_group
from egraph_compiler.backends.opencl.depthwise import applies as depthwise_applies
from egraph_compiler.backends.opencl.depthwise import cdiv, symbolic
from egraph_compiler.backends.opencl.emit import Scope
from egraph_compiler.fusion import index as ix

if TYPE_CHECKING:
    from egraph_compiler.backends.opencl.gemm import ConvGeometry
    from egraph_compiler.backends.opencl.kernels import Kernel, _Gen

VARIANT = "depthwise-vec"
POOL_VARIANT = "max-pool-vec"
LANE_NAMES = "0123456789abcdef"


@dataclass(frozen=True)
class VecDepthwise:
    """``depthwise-vec`` parameters: output rows × consecutive output columns (one
    ``float{pixels}`` accumulator per row) per work-item."""

    rows: int
    pixels: int = 8

    def describe(self) -> str:
        return f"{VARIANT} {self.rows}x{self.pixels}"

    def valid(self) -> bool:
        return 1 <= self.rows <= 16 and self.pixels in (4, 8)


def load_width(pixels: int, stride: int) -> int:
    """Elements one tap's load spans: ``(pixels - 1)·stride + 1``, as a whole vector."""
    span = (pixels - 1) * stride + 1
    return next(w for w in (4, 8, 16) if w >= span) if span <= 16 else 0


def applies(gen: _Gen, geo: ConvGeometry, params: VecDepthwise) -> bool:
    """A bound 2-D depthwise conv, stride 1 or 2, whose rows hold one tap's load and
    whose input the block computes elementwise from inputs of its shape (`row_inputs`)."""
    sizes = (*geo.x_shape, *geo.out_shape)
    if not (gen.params.device == "cpu" and params.valid() and depthwise_applies(geo) and
            all(isinstance(d, int) for d in sizes) and not symbolic(*sizes) and
            geo.strides[1] in (1, 2)):
        return False
    width = load_width(params.pixels, geo.strides[1])
    return 0 < width <= geo.x_shape[3] and row_inputs(gen, gen.anchor().inputs[0]) is not None


def row_inputs(gen: _Gen, x_name: str) -> list[str] | None:
    """The kernel inputs the conv's input ``x_name`` is computed from lane by lane — the
    tensors of its own shape, loaded as vectors along a row (``x_name`` itself where no
    prologue is fused) — or None where it is not so computed. The prologue qualifies
    where every node of it is a float32 elementwise operator whose spelling reads the
    same on vectors (`cpu_epilogue.vector_node`) with the output of ``x_name``'s shape,
    and every other operand is the same along a row (a per-channel BatchNorm parameter,
    a scalar, a tensor broadcast along the columns): loaded once as a scalar, broadcast."""
    view, x_shape = gen.view, tuple(gen.view.shape(x_name))
    rows: list[str] = []
    pending, seen = [x_name], set()
    while pending:
        name = pending.pop()
        if name in seen:
            continue
        seen.add(name)
        if view.dtype(name) != "float32":
            return None
        producer = view.producer_index.get(name)
        if producer is not None and producer in gen.em.members:
            node = view.nodes[producer]
            if not epilogue.vector_node(gen, node) or tuple(view.shape(name)) != x_shape:
                return None
            pending += [i for k, i in enumerate(node.inputs)
                        if i and not (node.op == "BatchNormalization" and k > 0)]
            continue
        constant = view.constants.get(name)
        if constant is not None and np.size(constant) == 1:
            continue  # a literal
        if name not in gen.em.params or gen.em.layouts.get(name) is not None:
            return None
        shape = tuple(view.shape(name))
        if shape == x_shape and constant is None:
            rows.append(name)
        elif shape and shape[-1] != 1:
            return None  # differs along a row, and not as a row of x's
    return rows


def depthwise_vec(gen: _Gen, geo: ConvGeometry, params: VecDepthwise) -> Kernel | None:
    """The kernel, or None where it does not apply (the caller keeps ``depthwise``)."""
    if not applies(gen, geo, params):
        return None
    node = gen.anchor()
    bias = node.inputs[2] if len(node.inputs) > 2 and node.inputs[2] else None
    return _row_vectors(gen, geo, params, node.inputs[1], bias)


# MaxPool's block on CPU devices (`max_pool_vec`): ResNet-50's 3×3 stride-2 one
POOL_BLOCK = VecDepthwise(7, 8)


def max_pool_vec(gen: _Gen, geo: ConvGeometry) -> Kernel | None:
    """A 2-D MaxPool at stride 2 on a CPU device as the same row vectors (its geometry
    that of a depthwise conv, `geo.group` = channels): each tap's vector folded in by a
    per-lane ``>`` select, as the scalar pool (`kernels._Gen._pool_tap`) does, padding
    lanes -INFINITY. None where it does not apply (the caller keeps the scalar pool)."""
    if geo.strides != (2, 2) or not applies(gen, geo, POOL_BLOCK):
        return None
    return _row_vectors(gen, geo, POOL_BLOCK, None, None)


def _row_vectors(gen: _Gen, geo: ConvGeometry, params: VecDepthwise, w_name: str | None,
                 bias: str | None) -> Kernel:
    """The kernel of `depthwise_vec` (weights ``w_name``), or of `max_pool_vec` (None)."""
    node = gen.anchor()
    x_name = node.inputs[0]
    pool = w_name is None
    batch, channels, out_h, out_w = geo.out_shape
    in_h, in_w = geo.x_shape[2:]
    (k0, k1), (s0, s1), (d0, d1) = geo.kernel, geo.strides, geo.dilations
    rows, pixels = min(params.rows, out_h), params.pixels
    width = load_width(pixels, s1)
    n_rt, n_vt = cdiv(out_h, rows), cdiv(out_w, pixels)
    total = batch * channels * n_rt * n_vt
    vec, load = f"float{pixels}", f"dnnr_float{width}u"
    # unaligned (`spelling.UNALIGNED_FLOAT16`): a load starts at any column
    gen.helpers.append(f"#ifndef DNNR_FLOAT{width}U\n#define DNNR_FLOAT{width}U\n"
                       f"typedef float {load} __attribute__((ext_vector_type({width}), "
                       "aligned(4)));\n#endif\n")
    s = Scope()
    s.emit("const int gid = get_global_id(0);")
    s.emit(f"if (gid >= {total}) return;")
    s.emit("int r = gid;")
    s.emit(f"const int vt = r % {n_vt}; r /= {n_vt};")
    s.emit(f"const int rt = r % {n_rt}; r /= {n_rt};")
    s.emit(f"const int co = r % {channels}; const int n = r / {channels};")
    s.emit(f"const int ci = co / {geo.cout_g};" if geo.cout_g > 1 else "const int ci = co;")
    s.emit(f"const int oh0 = rt * {rows}; const int ow0 = vt * {pixels};")
    s.emit(f"const int ih0 = oh0 * {s0} - {geo.begin[0]}; const int iw0 = ow0 * {s1} - {geo.begin[1]};")
    s.emit(f"const int plane = (n * {geo.x_shape[1]} + ci) * {in_h * in_w};")
    rows_in = row_inputs(gen, x_name) or []
    index_head = (gen.ivar("n", batch), gen.ivar("ci", geo.x_shape[1]),
                  ix.IVar("h", 0, in_h - 1))
    co_var = gen.ivar("co", channels)
    weights = {}
    if w_name is not None:
        for q0 in range(k0):
            for q1 in range(k1):
                weights[q0, q1] = gen.em.value(s, w_name, (co_var, 0, q0, q1))
    acc = [f"acc{e}" for e in range(rows)]
    # a pool's padding never wins a max: -INFINITY where a conv's is zero
    outside = "-INFINITY" if pool else "0.0f"
    s.emit(" ".join(f"{vec} {a} = ({vec})({outside});" for a in acc))

    def block(scope: Scope, vt: int | None) -> None:
        """Every window row of column block ``vt`` (None: the blocks inside the row)."""
        for a in range((rows - 1) * s0 + (k0 - 1) * d0 + 1):
            users = [(e, q0) for e in range(rows) for q0 in range(k0) if e * s0 + q0 * d0 == a]
            if not users:
                continue
            row = Scope(scope)
            loads: dict[str, str] = {}  # a load (its prologue applied) by its start
            for q1 in range(k1):
                offset = q1 * d1
                if vt is None:
                    # taps whose first lanes differ by less than the stride share a load
                    # (at stride 2 a 3×3 row's three taps are two loads: .even, .odd of
                    # the first, .even of the second)
                    shift = offset % s1
                    start = f"iw0 + {offset - shift}"
                else:
                    first = vt * pixels * s1 - geo.begin[1] + offset
                    start = str(min(max(first, 0), in_w - width))
                if start not in loads:
                    # each row input's vector stands for the elements the prologue
                    # reads (the column variable is never spelled: the walk finds it)
                    index = (*index_head, ix.IVar(f"col{len(loads)}", 0, in_w - 1))
                    for name in rows_in:
                        var = gen.em.fresh("l")
                        row.emit(f"const {load} {var} = *(__global const {load}*)"
                                 f"({gen.em.params[name]} + plane + h * {in_w} + {start});")
                        row.memo[(name, index)] = var
                    gen.em.vector = f"float{width}"
                    try:
                        loads[start] = gen.em.value(row, x_name, index)
                    finally:
                        gen.em.vector = None
                loaded = loads[start]
                tap = gen.em.fresh("tap")
                if vt is None:
                    row.emit(f"const {vec} {tap} = {loaded}{_lanes(pixels, s1, shift)};")
                else:
                    parts = [f"{loaded}.s{LANE_NAMES[first + j * s1 - int(start)]}"
                             if 0 <= first + j * s1 < in_w else outside for j in range(pixels)]
                    row.emit(f"const {vec} {tap} = ({vec})({', '.join(parts)});")
                for e, q0 in users:
                    row.emit(f"{acc[e]} = {tap} > {acc[e]} ? {tap} : {acc[e]};" if pool else
                             f"{acc[e]} += {tap} * {weights[q0, q1]};")
            checks = (["h >= 0"] if geo.begin[0] > a else []) + \
                ([f"h < {in_h}"] if (n_rt - 1) * rows * s0 - geo.begin[0] + a >= in_h else [])
            outer = Scope(scope)
            outer.emit(f"const int h = ih0 + {a};")
            outer.nest(f"if ({' && '.join(checks)})" if checks else "", row)
            scope.nest("", outer)

    # column blocks whose loads leave the row: each its own branch, at literal offsets
    edges = [vt for vt in range(n_vt)
             if vt * pixels * s1 - geo.begin[1] < 0 or
             vt * pixels * s1 - geo.begin[1] + (k1 - 1) * d1 + width > in_w]
    for i, vt in enumerate(edges):
        branch = Scope(s)
        block(branch, vt)
        s.nest(f"{'else ' if i else ''}if (vt == {vt})", branch)
    inner = Scope(s)
    if len(edges) < n_vt:
        block(inner, None)
        s.nest("else" if edges else "", inner)
    n_var = gen.ivar("n", batch)
    oh_var, ow_var = gen.ivar("oh", out_h), gen.ivar("ow", out_w)
    ragged = out_w % pixels != 0
    for e in range(rows):
        fin = Scope(s)
        fin.emit(f"const int oh = oh0 + {e};")
        if epilogue.applies(gen):  # once per row on its vector (`cpu_epilogue.py`)
            def lane(scope: Scope, j: int) -> str | None:
                scope.emit(f"const int ow = ow0 + {j};")
                gen.declare_iteration(scope, (n_var, co_var, oh_var, ow_var))
                return f"ow0 + {j} < {out_w}" if ragged else None

            done = Scope(fin)
            done.emit("const int ow = ow0;")
            value = acc[e]
            if bias is not None:
                value = f"({value} + {gen.em.value(done, bias, (co_var,))})"
            gen.declare_iteration(done, (n_var, co_var, oh_var, ow_var))
            epilogue.store_vector(gen, done, value, vec, lane, pixels)
            fin.nest("", done)
        else:
            for j in range(pixels):
                one = Scope(fin)
                one.emit(f"const int ow = ow0 + {j};")
                done = Scope(one)
                value = f"{acc[e]}.s{LANE_NAMES[j]}"
                if bias is not None:
                    value = f"({value} + {gen.em.value(done, bias, (co_var,))})"
                gen.declare_iteration(done, (n_var, co_var, oh_var, ow_var))
                gen.epilogue(done, value)
                one.nest(f"if (ow < {out_w})" if ragged else "", done)
                fin.nest("", one)
        s.nest(f"if (oh0 + {e} < {out_h})" if out_h % rows else "", fin)
    return gen.finish(s, total, vec_group(total, gen.params.work_group))


def _lanes(pixels: int, stride: int, shift: int = 0) -> str:
    """The swizzle taking every ``stride``-th lane of a load from lane ``shift``,
    ``pixels`` of them."""
    if stride == 1 and shift == 0 and load_width(pixels, 1) == pixels:
        return ""
    return ".s" + "".join(LANE_NAMES[shift + j * stride] for j in range(pixels))
