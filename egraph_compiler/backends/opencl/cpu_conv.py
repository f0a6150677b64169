"""Pointwise (1×1) convolution as a CPU-shaped GEMM: the ``conv-lanes`` option (CPU
devices only).

PoCL runs a work-group as a loop over its work-items and vectorises that loop (8 or 16
items a step on the AVX2/AVX-512 machines here) when it is the innermost loop, its body
scalar code, and its addresses consecutive in the item's id. The ``direct`` and
``window`` kernels keep their register block in explicit ``floatN`` vectors along
output channels, which the vectoriser leaves alone: a work-group then runs its items
one by one. The shape CPU GEMM micro-kernels use (XNNPACK's and oneDNN's: a vector of
consecutive ``N`` times broadcast ``M`` values) is the other way round.

Here a 1×1 stride-1 unpadded conv is ``out[co][p] = Σ_ci w[co][ci] · x[ci][p]`` over
the plane's pixels ``p``: a work-group is ``channels`` output channels × a run of
``pixels`` consecutive pixels of one image, a work-item one pixel with ``channels``
scalar accumulators. Per input channel an item loads its pixel once (consecutive over
the group: one vector load after PoCL vectorises) and does ``channels`` multiply-adds
with weights uniform over the group (broadcasts), so a vector step is a
``lanes × channels`` register block. Input channels are emitted straight-line in
chunks of at most `CHUNK_MADS` multiply-adds (with no loop left the work-item loop is
innermost; a barrier between chunks makes each chunk a region of its own, its
work-item loop inside the chunk loop). The epilogue is unrolled, one copy per
accumulator, so it vectorises too.

Measured on this machine (PoCL, ResNet-50's 1×1 convs at an eighth of the width): on
56×56 planes 0.038-0.044 ms against the direct kernel's 0.07-0.105; on planes that are
not a multiple of the run (masked lanes) or input channels that take several chunks it
was slower than direct — `cost.options` offers it only where neither happens.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from egraph_compiler.backends.opencl.depthwise import cdiv, lanes_group
from egraph_compiler.backends.opencl.emit import Scope
from egraph_compiler.fusion import index as ix

if TYPE_CHECKING:
    from egraph_compiler.backends.opencl.gemm import ConvGeometry
    from egraph_compiler.backends.opencl.kernels import Kernel, _Gen

VARIANT = "conv-lanes"


@dataclass(frozen=True)
class LanesConv:
    """``conv-lanes`` parameters: output channels per work-item (its scalar
    accumulators) × consecutive output pixels per work-group (one per work-item)."""

    channels: int
    pixels: int

    def describe(self) -> str:
        return f"{VARIANT} {self.channels}x{self.pixels}"


# the blocks priced (`cost.options`): accumulators ≤ 24 leave AVX-512's 32 vector
# registers room for the pixel and a weight
LANES_CONVS = (LanesConv(8, 64), LanesConv(16, 64), LanesConv(24, 64), LanesConv(16, 32))


def applies(geo: ConvGeometry) -> bool:
    """A pointwise (1×1, stride 1, unpadded, one group) 2-D conv: output pixel p reads
    input pixel p."""
    return geo.spatial == 2 and geo.group == 1 and geo.kernel == (1, 1) and \
        geo.strides == (1, 1) and tuple(geo.begin) == (0, 0) and \
        geo.x_shape[2:] == geo.out_shape[2:]


def conv_lanes(gen: _Gen, geo: ConvGeometry, params: LanesConv) -> Kernel | None:
    """The kernel, or None where it does not apply (the caller keeps the direct one)."""
    if not applies(geo) or not planes_only(gen, geo):
        return None
    return _flat(gen, geo, params)




# multiply-adds a chunk of input channels emits straight-line (per work-item)
CHUNK_MADS = 512


def _chunk(cin: int, mads_per_channel: int) -> int:
    """Input channels per straight-line chunk: all of them when they fit
    ``CHUNK_MADS``, else the largest divisor of ``cin`` that does (at least 1)."""
    if cin * mads_per_channel <= CHUNK_MADS:
        return cin
    return max(d for d in range(1, cin + 1) if cin % d == 0 and
               (d * mads_per_channel <= CHUNK_MADS or d == 1))


def _flat(gen: _Gen, geo: ConvGeometry, params: LanesConv) -> Kernel:
    """The pointwise form: a work-group is ``channels`` output channels × a run of
    ``pixels`` output pixels of one image, an item one pixel."""
    node = gen.anchor()
    x_name, w_name = node.inputs[0], node.inputs[1]
    bias = node.inputs[2] if len(node.inputs) > 2 and node.inputs[2] else None
    batch, cout, out_h, out_w = geo.out_shape
    cin, plane = geo.x_shape[1], out_h * out_w
    channels = min(params.channels, cout)
    local = min(params.pixels, lanes_group(plane))
    n_ct, n_pt = cdiv(cout, channels), cdiv(plane, local)
    total = batch * n_ct * n_pt * local
    s = Scope()
    s.emit("int r = get_group_id(0);")
    s.emit(f"const int pt = r % {n_pt}; r /= {n_pt};")
    s.emit(f"const int ct = r % {n_ct}; const int n = r / {n_ct};")
    s.emit(f"const int p = pt * {local} + get_local_id(0);")
    # a lane past the plane reads nothing (a masked load: a clamped index hides from
    # the vectoriser that the addresses are consecutive) and stores nothing
    ragged = plane % local != 0
    for c in range(channels):
        s.emit(f"const int wc{c} = ct * {channels} + {c} < {cout} ? ct * {channels} + {c} "
               f": {cout - 1};" if cout % channels else
               f"const int wc{c} = ct * {channels} + {c};")
    acc = [f"a{c}" for c in range(channels)]
    s.emit(" ".join(f"float {name} = 0.0f;" for name in acc))
    n_var, ci_var = gen.ivar("n", batch), gen.ivar("ci", cin)
    # the plane as one row of ``plane`` columns: every tensor the block reads is the
    # output's plane or constant over it (`flat_applies`), so (0, pc) addresses pixel pc
    oh_var, ow_var = 0, ix.IVar("p", 0, plane - 1)
    chunk = _chunk(cin, channels)
    body = Scope(s)
    for j in range(chunk):
        step = Scope(body)
        step.emit(f"const int ci = c0 + {j};" if chunk < cin else f"const int ci = {j};")
        if ragged:
            inside = Scope(step)
            inside.emit(f"x0 = {gen.em.value(inside, x_name, (n_var, ci_var, oh_var, ow_var))};")
            step.emit("float x0 = 0.0f;")
            step.nest(f"if (p < {plane})", inside)
        else:
            step.emit(f"const float x0 = {gen.em.value(step, x_name, (n_var, ci_var, oh_var, ow_var))};")
        for c in range(channels):
            weight = gen.em.value(step, w_name, (ix.IVar(f"wc{c}", 0, cout - 1), ci_var, 0, 0))
            step.emit(f"{acc[c]} += {weight} * x0;")
        body.nest("", step)
    if chunk == cin:
        s.nest("", body)
    else:
        body.lines.insert(0, "barrier(CLK_LOCAL_MEM_FENCE);")
        s.nest(f"for (int c0 = 0; c0 < {cin}; c0 += {chunk})", body)
    co_var = gen.ivar("co", cout)
    for c, name in enumerate(acc):
        fin = Scope(s)
        fin.emit(f"const int co = ct * {channels} + {c};")
        done = Scope(fin)
        value = name
        if bias is not None:
            value = f"({value} + {gen.em.value(done, bias, (co_var,))})"
        gen.declare_iteration(done, (n_var, co_var, oh_var, ow_var))
        gen.epilogue(done, value)
        checks = ([f"p < {plane}"] if ragged else []) + ([f"co < {cout}"] if cout % channels else [])
        fin.nest(f"if ({' && '.join(checks)})" if checks else "", done)
        s.nest("", fin)
    return gen.finish(s, total, local)


def planes_only(gen: _Gen, geo: ConvGeometry) -> bool:
    """Every tensor the block's nodes read or write is 4-D with the output's plane or a
    1 × 1 one (a per-channel broadcast), so a pixel's flat offset in the plane is its
    address in each: the flat form then indexes the plane as one row."""
    plane = tuple(geo.out_shape[2:])
    for n in gen.block.nodes:
        node = gen.view.nodes[n]
        for name in (*node.inputs, *node.outputs):
            if not name:
                continue
            shape = tuple(gen.view.shape(name))
            if node is gen.anchor() and name == node.inputs[1]:
                continue  # the weights
            if len(shape) == 1 and node is gen.anchor():
                continue  # the bias
            if len(shape) != 4 or shape[2:] not in (plane, (1, 1)):
                return False
    return True
