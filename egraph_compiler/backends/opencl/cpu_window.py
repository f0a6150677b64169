"""A k×k convolution as explicit vectors of output pixels: the ``conv-vec`` option (CPU
devices only).

The ``window`` kernel (`window.py`), which the CPU cost model picked for every dense
k×k conv, keeps its register block in ``floatN`` vectors along output channels, and
PoCL runs its work-items one by one: ResNet-50's 7×7 stride-2 stem (8 channels) ran at
45 GFLOP/s, MobileNetV3's 3×3 stride-2 stem (16 channels) at 16. `cpu_conv.py`'s
answer for 1×1 convs — consecutive pixels on consecutive work-items, scalar
accumulators, PoCL vectorising the item loop — was tried for k×k windows first (a
work-group per output row, masked loads, the same packed weights): at stride 1 PoCL
vectorised it (ResNet-50's 56×56 3×3 conv: 0.075-0.082 ms against the window kernel's
0.088), but a stride-2 window's loads are gathers and PoCL left the item loop scalar
(the 7×7 stem 1.09 ms, against 0.62), so that form was dropped.

Here the vector is explicit: a work-item computes ``channels`` output channels ×
``pixels`` consecutive output columns of one row, one ``float{pixels}`` accumulator per
channel. Per input channel and window row it loads the row segment its window spans
once, as scalars (the block's prologue evaluated once per loaded element; bounds
checks only in items whose segment crosses the row's edge), builds each tap's vector
of inputs at stride ``s1`` from them, and does ``channels`` vector multiply-adds with
broadcast weights. Nothing relies on a vectoriser across work-items, so input channels
and window rows stay loops. The weights are *packed* at generation:
``[Cout/channels][Cin][K0][K1][channels]`` (output channels zero-padded to whole
blocks), so a work-item's weights are one contiguous run read in order. The epilogue
runs once per output channel on its vector where `cpu_epilogue` applies (MobileNetV3's
HardSwish stem 0.55 → 0.085 ms), else unrolled, one copy per output element. A 1×1
conv is the same kernel with a one-column window; at stride 1 over a plane its block
reads only at the output's pixels, it runs the plane as one row (`flat_applies`).

Measured on PoCL here (`cost._vec_conv_options` says where it is offered, fitted to
these): the two stems 0.40 / 0.21 ms against the window kernel's 0.62 / 0.42, the
3×3 convs of ResNet-50's 14×14 and 7×7 stages (an eighth of the width) 0.035-0.069 ms
against 0.073-0.093; on 28×28 and 56×56 maps it was no faster (0.059-0.087 against
0.055-0.081 for 28×28), so it is not offered there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from egraph_compiler.backends.opencl import cpu_conv
from egraph_compiler.backends.opencl import cpu_epilogue as epilogue
from egraph_compiler.backends.opencl.depthwise import (
    cdiv,
    symbolic,
)
from egraph_compiler.backends.opencl.emit import Scope
from egraph_compiler.fusion import index as ix

if TYPE_CHECKING:
    from egraph_compiler.backends.opencl.gemm import ConvGeometry
    from egraph_compiler.backends.opencl.kernels import Kernel, _Gen

VARIANT = "conv-vec"


@dataclass(frozen=True)
class VecConv:
    """``conv-vec`` parameters: output channels (accumulators) × consecutive output
    columns (each accumulator a ``float{pixels}``) per work-item."""

    channels: int
    pixels: int = 16

    def describe(self) -> str:
        return f"{VARIANT} {self.channels}x{self.pixels}"


VEC_CONVS = (VecConv(8, 16), VecConv(16, 16), VecConv(8, 8), VecConv(16, 8))
# the blocks priced for 1×1 convs (`cost._vec_conv_options`): 32 float16 accumulators
# measured fastest on most of ResNet-50's, though they fill AVX-512's registers
POINTWISE_VECS = (VecConv(16, 16), VecConv(32, 16))


def conv_vec(gen: _Gen, geo: ConvGeometry, params: VecConv) -> Kernel | None:
    """A work-item computes ``channels`` output channels × ``pixels`` consecutive output
    columns of one row as explicit vectors: per input channel and window row it loads
    the row segment its window spans once (scalars: the block's prologue evaluated once
    per element, zero where the padding reaches), gathers each tap's ``pixels``
    inputs into a vector (at stride ``s1``), and does ``channels`` vector multiply-adds
    with broadcast weights, read from the packed layout. Needs no vectoriser across
    work-items, so input channels and window rows stay loops, and a stride-2 window
    costs shuffles, not gathers (on PoCL the lane kernels' stride-2 loads left their
    work-item loop scalar). The segment is read with bounds checks only in work-items
    whose segment crosses the row's edge."""
    node = gen.anchor()
    x_name, w_name = node.inputs[0], node.inputs[1]
    weights = gen.view.constants.get(w_name)
    if not applies(geo) or weights is None or not gen.single_use(w_name) or \
            np.asarray(weights).dtype != np.float32 or params.pixels not in (2, 4, 8, 16):
        return None
    bias = node.inputs[2] if len(node.inputs) > 2 and node.inputs[2] else None
    batch, cout, out_h, out_w = geo.out_shape
    cin, in_h, in_w = geo.x_shape[1:]
    flat = flat_applies(gen, geo)
    if flat:  # the plane as one row of h·w pixels (`flat_applies`)
        out_w = in_w = out_h * out_w
        out_h = in_h = 1
    (k0, k1), (s0, s1), (d0, d1) = geo.kernel, geo.strides, geo.dilations
    channels, pixels = min(params.channels, cout), params.pixels
    n_ct, n_vt = cdiv(cout, channels), cdiv(out_w, pixels)
    span = (pixels - 1) * s1 + (k1 - 1) * d1 + 1
    total = batch * n_ct * out_h * n_vt
    packed = gen.derive(w_name, _packed(np.asarray(weights), channels), f"k{channels}")
    per_block = cin * k0 * k1 * channels
    vec = f"float{pixels}"
    s = Scope()
    s.emit("const int gid = get_global_id(0);")
    s.emit(f"if (gid >= {total}) return;")
    s.emit("int r = gid;")
    # a symbolic build whose output row is one column block (a recorded comparison: a
    # version condition) knows its window's columns, as a bound compile's literals do
    one_block = symbolic(out_w, in_w) and n_vt == 1
    s.emit("const int vt = 0;" if one_block else f"const int vt = r % {n_vt}; r /= {n_vt};")
    s.emit(f"const int oh = r % {out_h}; r /= {out_h};")
    s.emit(f"const int ct = r % {n_ct}; const int n = r / {n_ct};")
    s.emit(f"const int ow0 = vt * {pixels};")
    s.emit(f"const int ih0 = oh * {s0} - {geo.begin[0]}; const int iw0 = ow0 * {s1} - {geo.begin[1]};")
    s.emit(f"const bool inner = iw0 >= 0 && iw0 + {span} <= {in_w};")
    s.emit(f"__global const float* wk = {gen.em.params[packed]} + ct * {per_block};")
    acc = [f"a{c}" for c in range(channels)]
    s.emit(" ".join(f"{vec} {name} = ({vec})(0.0f);" for name in acc))
    n_var, ci_var = gen.ivar("n", batch), gen.ivar("ci", cin)
    h_var: ix.IExpr = 0 if flat else ix.IVar("h", 0, in_h - 1)
    taps = Scope(s)
    taps.emit(f"const int h = ih0 + q0 * {d0};")
    row = Scope(taps)
    segment = [f"r{j}" for j in range(span)]
    row.emit(" ".join(f"float {name};" for name in segment))
    inner, edge = Scope(row), Scope(row)
    inside = _columns_inside(in_w, geo.begin[1], span) if one_block else None
    for j in range(span):
        row.emit(f"const int w{j} = iw0 + {j};")
        at = gen.em.value(inner, x_name, (n_var, ci_var, h_var, ix.IVar(f"w{j}", 0, in_w - 1)))
        inner.emit(f"r{j} = {at};")
        if inside is not None:  # column w{j} = j - begin: its checks are decided
            if j < geo.begin[1] or j >= inside:
                edge.emit(f"r{j} = 0.0f;")
            else:
                edge.emit(f"r{j} = {gen.em.value(edge, x_name, (n_var, ci_var, h_var, ix.IVar(f'w{j}', 0, in_w - 1)))};")
            continue
        if symbolic(in_w):
            # one unsigned compare for both ends: LLVM merges ``w >= 0 && w < W`` into
            # it only for a literal W, not knowing a size argument is never negative
            # (ResNet-50's stem at 2×48×40: 113 µs with the pair, 92 with this, 87 bound)
            edge.emit(f"const bool ok{j} = (uint)w{j} < (uint){in_w}; "
                      f"const int cw{j} = ok{j} ? w{j} : 0;")
            at = gen.em.value(edge, x_name, (n_var, ci_var, h_var, ix.IVar(f"cw{j}", 0, in_w - 1)))
            edge.emit(f"r{j} = ok{j} ? {at} : 0.0f;")
            continue
        edge.emit(f"const int cw{j} = w{j} < 0 ? 0 : (w{j} < {in_w} ? w{j} : {in_w - 1});")
        at = gen.em.value(edge, x_name, (n_var, ci_var, h_var, ix.IVar(f"cw{j}", 0, in_w - 1)))
        edge.emit(f"r{j} = (w{j} >= 0 && w{j} < {in_w}) ? {at} : 0.0f;")
    if inside is not None:  # the one block's segment is `inner` or not at every shape here
        row.nest("", inner if geo.begin[1] == 0 and inside == span else edge)
    else:
        row.nest("if (inner)", inner)
        row.nest("else", edge)
    for q1 in range(k1):
        parts = ", ".join(f"r{q1 * d1 + j * s1}" for j in range(pixels))
        tap = Scope(row)
        tap.emit(f"const {vec} x = ({vec})({parts});")
        base = f"((ci * {k0} + q0) * {k1} + {q1}) * {channels}"
        for c in range(channels):
            tap.emit(f"{acc[c]} += x * wk[{base} + {c}];")
        row.nest("", tap)
    # a symbolic build's sizes stay arguments: there the high check goes where the last
    # output row's window stays inside the input, a recorded comparison (a version
    # condition, `depthwise._checks`); a bound compile keeps it, LLVM drops it itself
    last_row = (out_h - 1) * s0 - geo.begin[0] + (k0 - 1) * d0
    checks = (["h >= 0"] if geo.begin[0] > 0 else []) + \
        ([f"h < {in_h}"] if not symbolic(in_h, out_h) or last_row >= in_h else [])
    taps.nest(f"if ({' && '.join(checks)})" if checks else "", row)
    s.nest(f"for (int ci = 0; ci < {cin}; ++ci) for (int q0 = 0; q0 < {k0}; ++q0)", taps)
    co_var = gen.ivar("co", cout)
    oh_var, ow_var = (0, ix.IVar("ow", 0, out_w - 1)) if flat else \
        (gen.ivar("oh", out_h), gen.ivar("ow", out_w))
    lanes = "0123456789abcdef"
    # the one block's columns inside the output (recorded comparisons, as `_columns_inside`)
    stored = next((j for j in range(pixels) if not j < out_w), pixels) if one_block else pixels
    if epilogue.applies(gen):  # once per channel on its vector (`cpu_epilogue.py`)
        def lane(scope: Scope, j: int) -> str | None:
            scope.emit(f"const int ow = ow0 + {j};")
            gen.declare_iteration(scope, (n_var, co_var, oh_var, ow_var))
            return f"ow0 + {j} < {out_w}" if not one_block and out_w % pixels else None

        for c in range(channels):
            fin = Scope(s)
            fin.emit(f"const int co = ct * {channels} + {c}; const int ow = ow0;")
            done = Scope(fin)
            value = acc[c]
            if bias is not None:
                value = f"({value} + {gen.em.value(done, bias, (co_var,))})"
            gen.declare_iteration(done, (n_var, co_var, oh_var, ow_var))
            epilogue.store_vector(gen, done, value, vec, lane, stored)
            fin.nest(f"if (co < {cout})" if cout % channels else "", done)
            s.nest("", fin)
        return gen.finish(s, total, vec_group(total, gen.params.work_group))
    for c in range(channels):
        for j in range(stored):
            fin = Scope(s)
            fin.emit(f"const int ow = ow0 + {j}; const int co = ct * {channels} + {c};")
            done = Scope(fin)
            value = f"{acc[c]}.s{lanes[j]}"
            if bias is not None:
                value = f"({value} + {gen.em.value(done, bias, (co_var,))})"
            gen.declare_iteration(done, (n_var, co_var, oh_var, ow_var))
            gen.epilogue(done, value)
            guards = ([f"ow < {out_w}"] if not one_block and out_w % pixels else []) + \
                ([f"co < {cout}"] if cout % channels else [])
            fin.nest(f"if ({' && '.join(guards)})" if guards else "", done)
            s.nest("", fin)
    return gen.finish(s, total, vec_group(total, gen.params.work_group))


def _columns_inside(in_w: int, begin: int, span: int) -> int:
    """For a row of one column block (``iw0 = -begin``): how many of the segment's
    ``span`` columns ``j - begin`` lie below the input's width ``in_w``, by comparisons
    of sizes that the path records (`versions.py`); past the first that does not, none
    does, which that comparison implies."""
    for j in range(begin, span):
        if not j - begin < in_w:
            return j
    return span


# work-groups a `conv-vec` grid is cut into at least, where its items allow: PoCL hands a
# device thread whole groups, so a 28-item grid (ResNet-50's 14×14 3×3 convs at an eighth
# of the width) in one 64-item group would leave one of the two threads idle (on the
# loaded machine the split measured neither faster nor slower)
VEC_GROUPS = 8


def vec_group(items: int, limit: int) -> int:
    """The work-group size of a ``conv-vec`` grid of ``items``: at most ``limit``, a
    power of two, small enough for `VEC_GROUPS` groups where the items allow."""
    local = limit
    while local > 1 and cdiv(items, local) < VEC_GROUPS:
        local //= 2
    return local


def applies(geo: ConvGeometry) -> bool:
    """A 2-D conv of one group (a 1×1 window too: `flat_applies` says when its plane
    is one row)."""
    return geo.spatial == 2 and geo.group == 1


def flat_applies(gen: _Gen, geo: ConvGeometry) -> bool:
    """A pointwise (1×1, stride 1, unpadded) conv at bound sizes whose block reads and
    writes only tensors of the output's plane or per-channel ones (`cpu_conv`): output
    pixel p reads input pixel p, so the plane is one row of h·w pixels and a
    work-item's vector runs on across the map's rows (a 7×7 or 14×14 map would leave
    lanes of a row-sized vector empty)."""
    return cpu_conv.applies(geo) and all(isinstance(d, int) for d in geo.out_shape) and \
        cpu_conv.planes_only(gen, geo)


def _packed(weights: np.ndarray, channels: int) -> np.ndarray:
    """``[Cout][Cin][K0][K1]`` as ``[Cout/channels][Cin][K0][K1][channels]``, the output
    channels padded with zeros to whole blocks."""
    cout = weights.shape[0]
    padded = cdiv(cout, channels) * channels
    if padded > cout:
        weights = np.concatenate([weights, np.zeros((padded - cout, *weights.shape[1:]),
                                                    weights.dtype)])
    blocks = weights.reshape(padded // channels, channels, *weights.shape[1:])
    return np.ascontiguousarray(np.moveaxis(blocks, 1, -1))
