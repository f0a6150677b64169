"""A 1×1 convolution as a GEMM whose vectors run along output channels: the
``conv-channels`` option (CPU devices only).

The other CPU pointwise forms put consecutive output *pixels* in a vector
(`cpu_window.py`'s ``conv-vec`` explicitly, `cpu_conv.py`'s ``conv-lanes`` through
PoCL's vectoriser). On a small map that wastes lanes: MobileNetV3's 7×7 stages have 49
pixels, three full 16-wide vectors and one of a single pixel, and there ``direct``
(0.080-0.124 ms for its 96 ↔ 576-channel convs, one thread) was the best of them,
against onnxruntime's 0.033-0.038. Here a work-item holds ``channels / 16`` ``float16``
vectors of consecutive output channels × ``pixels`` output pixels (XNNPACK's and
oneDNN's micro-kernel shape with the roles of the two sides as NCHW has them): per
input channel it loads ``channels / 16`` vectors of weights, packed at generation as
``[Cout/channels][Cin][channels]`` (one contiguous run per work-item, read in order),
and ``pixels`` input elements, each broadcast (the block's prologue evaluated once per
loaded element), for ``channels / 16 × pixels`` vector multiply-adds. A pixel's input
address is computed once, outside the channel loop, so a stride or a plane of any
size costs nothing per multiply-add, and no lane idles while the output channels are
a multiple of 16. The price is the store: a vector holds one pixel of 16 channels,
whose addresses are a plane apart, so it is written lane by lane; the epilogue runs on
the vector where `cpu_epilogue` applies (lanes along the channels), else once per
element.

Measured on PoCL's calling thread here (load 1-3), every option of 25 1×1 convs
(`cost._channel_conv_options` has the fit): MobileNetV3-small's 7×7 ones 0.028-0.058 ms
against direct's 0.054-0.101, its 14×14 ones 0.021-0.058 against conv-vec's
0.022-0.075, ResNet-50's (an eighth of the width) 7×7 ones 0.010-0.021 against direct's
0.023-0.046 and its stride-2 ones 0.034-0.044 against conv-vec's 0.044-0.062; on 28×28
and 56×56 maps at stride 1 conv-vec stayed faster (0.013-0.070 against 0.016-0.21).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from egraph_compiler.backends.opencl import cpu_epilogue as epilogue
from egraph_compiler.backends.opencl.cpu_window import _packed, vec_group
from egraph_compiler.backends.opencl.depthwise import cdiv
from egraph_compiler.backends.opencl.emit import Scope
from egraph_compiler.fusion import index as ix

if TYPE_CHECKING:
    from egraph_compiler.backends.opencl.gemm import ConvGeometry
    from egraph_compiler.backends.opencl.kernels import Kernel, _Gen

VARIANT = "conv-channels"
LANES = 16  # a float16: AVX-512's vector, two of AVX2's


@dataclass(frozen=True)
class ChannelConv:
    """``conv-channels`` parameters: output channels per work-item (a multiple of
    `LANES`, ``channels / 16`` vectors) × output pixels per work-item."""

    channels: int
    pixels: int

    def describe(self) -> str:
        return f"{VARIANT} {self.channels}x{self.pixels}"

    def valid(self) -> bool:
        return self.channels % LANES == 0 and 0 < self.channels <= 4 * LANES and \
            0 < self.pixels <= 16


# the blocks priced (`cost._channel_conv_options`): 14-16 accumulators and the weight
# vectors within AVX-512's 32 registers (a 2 × 14 block, 28, measured slower)
CHANNEL_CONVS = (ChannelConv(32, 7), ChannelConv(32, 4), ChannelConv(48, 4),
                 ChannelConv(16, 7), ChannelConv(32, 8))


def applies(geo: ConvGeometry) -> bool:
    """A 1×1 2-D conv of one group, unpadded, at bound sizes (any stride: each pixel's
    input address is its own)."""
    return geo.spatial == 2 and geo.group == 1 and geo.kernel == (1, 1) and \
        tuple(geo.begin) == (0, 0) and all(isinstance(d, int) for d in (*geo.out_shape,
                                                                        *geo.x_shape))


def conv_channels(gen: _Gen, geo: ConvGeometry, params: ChannelConv) -> Kernel | None:
    """The kernel, or None where it does not apply (the caller keeps the direct one)."""
    node = gen.anchor()
    x_name, w_name = node.inputs[0], node.inputs[1]
    weights = gen.view.constants.get(w_name)
    if not applies(geo) or not params.valid() or weights is None or \
            not gen.single_use(w_name) or np.asarray(weights).dtype != np.float32:
        return None
    bias = node.inputs[2] if len(node.inputs) > 2 and node.inputs[2] else None
    batch, cout, out_h, out_w = geo.out_shape
    cin = geo.x_shape[1]
    s0, s1 = geo.strides
    plane = out_h * out_w
    vectors = cdiv(min(params.channels, cdiv(cout, LANES) * LANES), LANES)
    channels, pixels = vectors * LANES, min(params.pixels, plane)
    n_cb, n_pb = cdiv(cout, channels), cdiv(plane, pixels)
    total = batch * n_cb * n_pb
    packed = gen.derive(w_name, _packed(np.asarray(weights)[:, :, 0, 0], channels),
                        f"c{channels}")
    s = Scope()
    s.emit("const int gid = get_global_id(0);")
    s.emit(f"if (gid >= {total}) return;")
    s.emit("int r = gid;")
    s.emit(f"const int pb = r % {n_pb}; r /= {n_pb};")
    s.emit(f"const int cb = r % {n_cb}; const int n = r / {n_cb};")
    s.emit(f"const int first = pb * {pixels};")
    for j in range(pixels):
        # a pixel past the plane (the last block's) reads the last one and stores nothing
        s.emit(f"const int p{j} = min(first + {j}, {plane - 1});" if plane % pixels else
               f"const int p{j} = first + {j};")
        s.emit(f"const int oh{j} = p{j} / {out_w}; const int ow{j} = p{j} % {out_w};")
        s.emit(f"const int ih{j} = oh{j} * {s0}; const int iw{j} = ow{j} * {s1};")
    # PoCL spells ``vload16`` lane by lane (a 7×7 conv ran 3× slower); a float16 pointer
    # loads whole vectors. Aligned: a constant is a buffer of its own (PoCL aligns them
    # to 128 bytes) and a block of ``channels`` floats is a whole number of float16s
    s.emit(f"__global const float16* wk = (__global const float16*)"
           f"({gen.em.params[packed]}) + cb * {cin * vectors};")
    acc = [[f"a{v}_{j}" for j in range(pixels)] for v in range(vectors)]
    s.emit(" ".join(f"float16 {name} = (float16)(0.0f);" for row in acc for name in row))
    n_var, ci_var = gen.ivar("n", batch), gen.ivar("ci", cin)
    in_h, in_w = geo.x_shape[2:]
    step = Scope(s)
    for v in range(vectors):
        step.emit(f"const float16 w{v} = wk[ci * {vectors} + {v}];")
    for j in range(pixels):
        at = gen.em.value(step, x_name, (n_var, ci_var, ix.IVar(f"ih{j}", 0, in_h - 1),
                                         ix.IVar(f"iw{j}", 0, in_w - 1)))
        step.emit(f"const float x{j} = {at};")
        for v in range(vectors):
            step.emit(f"{acc[v][j]} += w{v} * x{j};")
    s.nest(f"for (int ci = 0; ci < {cin}; ++ci)", step)
    co_var = gen.ivar("co", cout)
    oh_var, ow_var = gen.ivar("oh", out_h), gen.ivar("ow", out_w)
    vector_form = epilogue.applies(gen, lane_dim=1)
    for v in range(vectors):
        for j in range(pixels):
            fin = Scope(s)
            fin.emit(f"const int c0 = cb * {channels} + {v * LANES}; "
                     f"const int oh = oh{j}; const int ow = ow{j};")

            def lane(scope: Scope, k: int) -> str | None:
                scope.emit(f"const int co = c0 + {k};")
                gen.declare_iteration(scope, (n_var, co_var, oh_var, ow_var))
                return f"c0 + {k} < {cout}" if cout % channels else None

            if vector_form:
                done = Scope(fin)
                value = acc[v][j]
                if bias is not None:
                    bias_vector = gen.em.fresh("b")
                    done.emit(f"float16 {bias_vector} = (float16)(0.0f);")
                    for k in range(LANES):
                        inner = Scope(done)
                        inside = lane(inner, k)
                        inner.emit(f"{bias_vector}.s{epilogue.LANE_NAMES[k]} = "
                                   f"{gen.em.value(inner, bias, (co_var,))};")
                        done.nest(f"if ({inside})" if inside else "", inner)
                    value = f"({value} + {bias_vector})"
                done.emit("const int co = c0;")
                gen.declare_iteration(done, (n_var, co_var, oh_var, ow_var))
                epilogue.store_vector(gen, done, value, "float16", lane, LANES, lane_dim=1)
                fin.nest("", done)
            else:
                done = fin
                for k in range(LANES):
                    one = Scope(done)
                    inside = lane(one, k)
                    value = f"{acc[v][j]}.s{epilogue.LANE_NAMES[k]}"
                    if bias is not None:
                        value = f"({value} + {gen.em.value(one, bias, (co_var,))})"
                    gen.epilogue(one, value)
                    done.nest(f"if ({inside})" if inside else "", one)
            s.nest(f"if (first + {j} < {plane})" if plane % pixels else "", fin)
    return gen.finish(s, total, vec_group(total, gen.params.work_group))
