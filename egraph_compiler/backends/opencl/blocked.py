"""Blocked NCHWc activations (c = 4, 8 or 16): the conv anchor that reads and writes them
with one vector load per block, and the pointwise kernel that keeps a padded block zero.

Layout: `fusion.index.Blocked` — NCHW stored as N, ⌈C/b⌉, H, W, b, the channel count
padded with zeros to a multiple of b; every kernel that reads or writes through
`fusion.index.physical_offset` (pointwise, reductions, pooling, every conv kernel's
epilogue) addresses it with index arithmetic. The `select` stage decides which
intermediates take it (`select.layouts`), with conversion kernels where a consumer
cannot read it.

The conv option ``nchwc{b} …`` (`conv_nchwc`, dense 2-D convs of one group whose weights
are a constant read once): a work-item computes ``b`` output channels × ``TW`` output
columns of one output row; per input-channel block and tap it loads the ``b`` input
channels of a position as one ``float{b}`` (``vload{b}``), and the weights, stored
``[Cout/b][Cin/b][KH][KW][b_in][b_out]`` (zero-padded), as ``b`` vectors of ``b`` output
channels: ``acc += x.s0 * w0 + x.s1 * w1 + …``. Its input must be stored
``Blocked(1, b)`` (the selection inserts a conversion otherwise).

Padding stays zero: the padded lanes' input channels meet zero weights, but a zero only
holds if the lane holds a number (garbage × 0 may be NaN), so every kernel that writes a
padded blocked tensor writes its padded lanes with 0.0f and never evaluates the epilogue
there (a bias + ReLU of a padded lane would read the bias out of range and store
ReLU(garbage)): the blocked conv (`conv_nchwc`, its ``co >= Cout`` branch) and the
pointwise kernel (`padded_pointwise`: it walks the padded physical tensor and stores 0
where the channel index is past the count — conversions NCHW → NCHWc are such pointwise
``Identity`` blocks). Other kernels walk logical indices only, so the selection offers a
padded blocked layout only to tensors these two kernels produce (`fusion.layout`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from egraph_compiler.backends.opencl import cost, gpu_prices, images
from egraph_compiler.backends.opencl.emit import Scope
from egraph_compiler.fusion import index as ix
from egraph_compiler.fusion.layout import CHANNEL_BLOCKS
from egraph_compiler.shapes import prover

if TYPE_CHECKING:
    from egraph_compiler.backends.opencl.kernels import Kernel, _Gen

BLOCKS = CHANNEL_BLOCKS  # float4, float8, float16 loads
VARIANT = "nchwc"
TILE_WIDTH = 8  # output columns per work-item
UNROLL = "__attribute__((opencl_unroll_hint)) "
# The blocked conv's estimate: the `direct` option's at the same shape × the measured
# ratio of the two kernels' device times at (channel block, window taps > 1) × the padding
# (padded Cin·Cout over Cin·Cout). Measured on PoCL (2-core CPU, conv launch alone, median of
# 7: `python benchmarks/layout_selection.py --blocked-kernels --repeats 7`) over the dense
# convs of resnet50 / mobilenet_v2 at 64x64, geometric means over the unpadded shapes:
# 1x1 (5 shapes) 3.9 / 2.0 / 1.39 at b = 4 / 8 / 16; 3x3 (2 shapes) 1.32 / 0.65 / 0.30.
# (`conv-vec`, the CPU's window kernel, ran those 3x3 convs at 0.13-0.20 of direct.)
# The GPU class is priced otherwise (`gpu_prices.blocked_conv_us`): measured on an H200, the
# blocked conv ran 0.9-20x direct's time, and the GPU model's direct estimate is itself
# 6-60x the measured time (0.016-0.16 measured over estimated, 42 shapes), so a ratio to it
# would carry that error; `benchmarks/gpu_blocked.py fit` fits the blocked conv's own time.
ESTIMATE_RATIO = {(4, False): 3.9, (8, False): 2.0, (16, False): 1.39,
                  (4, True): 1.32, (8, True): 0.65, (16, True): 0.30}


@dataclass(frozen=True)
class BlockedOption(cost.Option):
    """The blocked conv as an anchor option: ``params`` unused, ``block`` the channel block,
    ``image``: its input read from an RGBA ``image2d_t`` (block 4)."""

    block: int = 4
    image: bool = False

    def describe(self) -> str:
        return f"{VARIANT}{self.block}{IMAGE_SUFFIX if self.image else ''} {self.block}x{TILE_WIDTH}"

    @property
    def input_layout(self) -> ix.Blocked:
        return ix.Blocked(1, self.block, 4, self.image)


IMAGE_SUFFIX = "-image"


def block_of(label: str) -> ix.Blocked | None:
    """The layout a blocked conv option's label reads its input in, None for any other option."""
    if not label.startswith(VARIANT):
        return None
    head = label.split()[0][len(VARIANT):]
    image = head.endswith(IMAGE_SUFFIX)
    head = head.removesuffix(IMAGE_SUFFIX)
    return ix.Blocked(1, int(head), 4, image) if head.isdigit() else None


def applies(gen: _Gen) -> bool:
    """A dense 2-D conv of one group whose weights are a constant read once and whose
    input is a block input (not computed by a fused prologue) of rank 4, in a bound build."""
    # not in a symbolic build (dim ranges active): its shapes' padded counts and texel
    # extents are not derived for the versions' region checks
    if gen.block.kind != "conv" or gen.params.shape_stable or prover.active_ranges():
        return False
    node = gen.anchor()
    x_name, w_name = node.inputs[0], node.inputs[1]
    x_shape = gen.view.shape(x_name)
    return (len(x_shape) == 4 and int(node.attr("group", 1)) == 1  # type: ignore[arg-type]
            and w_name in gen.view.constants and gen.single_use(w_name)
            and x_name in gen.block.inputs and gen.view.dtype(x_name) == "float32"
            and all(gen.view.shape(v) == gen.view.shape(node.outputs[0])
                    for v in gen.block.outputs))


def work(shape: tuple[int, ...], cout: int, out_hw: tuple[int, int], taps: int, b: int) -> tuple[int, int]:
    """The blocked conv's (multiply-adds over the padded channels, work-items) on input
    ``shape`` (N, Cin, H, W): what the GPU class's price model reads (`gpu_prices.blocked_conv_us`)."""
    n_batch, cin = shape[0], shape[1]
    out_h, out_w = out_hw
    cib, cob = -(-cin // b), -(-cout // b)
    return (n_batch * cob * b * out_h * out_w * cib * b * taps,
            n_batch * cob * out_h * -(-out_w // TILE_WIDTH))


def options(gen: _Gen, direct_us: float) -> list[BlockedOption]:
    """The blocked conv at each channel block that fits the channels, where the device
    class was measured: on the CPU class priced from the direct kernel's estimate at the
    same shape (`estimate_ratio`), on the GPU class by the model fitted to the card's
    measurements (`gpu_prices.blocked_conv_us`: offered only within the measured shapes'
    range, and only where the card was measured at all); the RGBA-image variant at block
    4's price × the class's measured image-read factor."""
    device = gen.params.device
    if device not in ("cpu", "gpu") or not applies(gen) or (device == "gpu" and not gpu_prices.blocked_measured()):
        return []
    node = gen.anchor()
    x_shape = gen.view.shape(node.inputs[0])
    cin, cout = x_shape[1], gen.view.shape(node.outputs[0])[1]
    taps = int(np.prod(gen.view.shape(node.inputs[1])[2:]))

    def price(b: int) -> float | None:
        if device == "cpu":
            return direct_us * estimate_ratio(b, taps > 1, cin, cout)
        return gpu_prices.blocked_conv_us(b, *work(x_shape, cout, gen.view.shape(node.outputs[0])[2:], taps, b))

    result = [BlockedOption(VARIANT, None, cost, block=b) for b in BLOCKS
              if (b <= max(cin, cout) or b == BLOCKS[0]) and (cost := price(b)) is not None]
    if result and result[0].block == 4 and image_refusal(x_shape) is None:
        factor = CPU_IMAGE_FACTOR if device == "cpu" else gpu_prices.blocked_image_factor()
        result.append(BlockedOption(VARIANT, None, result[0].estimate_us * factor, block=4, image=True))
    return result


def image_refusal(shape: tuple[int, ...]) -> str | None:
    """Why a tensor cannot be an RGBA activation image (None: it can)."""
    width, height = ix.Blocked(1, 4, 4, True).image_extent(shape)
    if max(width, height) > images.GUARANTEED_EXTENT:
        return (f"{width}x{height} texels exceed the guaranteed image extent "
                f"{images.GUARANTEED_EXTENT}")
    return None


# the blocked conv reading its input from an RGBA image over reading the same NCHW4c
# buffer, on PoCL's CPU device with images forced on (`--blocked-kernels --repeats 7`, the
# 8 shapes above): geometric mean 3.51, min 2.56, max 19.8 — PoCL emulates image reads in
# software, so the selection never takes them on the CPU class (the runtime would not run
# them there either unless ``images=True``)
CPU_IMAGE_FACTOR = 3.51


def estimate_ratio(b: int, window: bool, cin: int, cout: int) -> float:
    """The CPU class's blocked conv estimate over the direct kernel's (`ESTIMATE_RATIO` × padding)."""
    padding = (-(-cin // b) * b) * (-(-cout // b) * b) / (cin * cout)
    return ESTIMATE_RATIO[b, window] * padding


def blocked_weights(weights: np.ndarray, b: int) -> np.ndarray:
    """Conv weights [Cout][Cin][KH][KW] as the blocked conv reads them:
    [Cout/b][Cin/b][KH][KW][b_in][b_out], zero-padded to whole blocks."""
    cout, cin, kh, kw = weights.shape
    cib, cob = -(-cin // b), -(-cout // b)
    padded = np.zeros((cob * b, cib * b, kh, kw), dtype=np.float32)
    padded[:cout, :cin] = weights
    # [cob][b_out][cib][b_in][kh][kw] -> [cob][cib][kh][kw][b_in][b_out]
    return np.ascontiguousarray(padded.reshape(cob, b, cib, b, kh, kw).transpose(0, 2, 4, 5, 3, 1))


def _vec(b: int) -> str:
    return f"float{b}"


def _lane(k: int) -> str:
    return f"s{k:x}"


def conv_nchwc(gen: _Gen, geo, wanted: ix.Blocked) -> Kernel | None:
    """The blocked conv kernel (module docstring), or None where it does not apply (the
    input not stored in ``wanted``)."""
    if not applies(gen) or len(geo.kernel) != 2:
        return None
    node = gen.anchor()
    x_name, w_name = node.inputs[0], node.inputs[1]
    bias = node.inputs[2] if len(node.inputs) > 2 and node.inputs[2] else None
    if gen.em.layouts.get(x_name) != wanted:
        return None
    b = wanted.block
    n_batch, cin, height, width = geo.x_shape
    _, cout, out_h, out_w = geo.out_shape
    kh, kw = geo.kernel
    (sh, sw), (dh, dw), (ph, pw) = geo.strides, geo.dilations, geo.begin
    cib, cob = -(-cin // b), -(-cout // b)
    w_read = gen.derive(w_name, blocked_weights(np.asarray(gen.view.constants[w_name], dtype=np.float32), b),
                        f"nchwc{b}")
    w_param, x_param = gen.em.params[w_read], gen.em.params[x_name]
    tw = gen.tile(TILE_WIDTH, out_w)
    n_wt = -(-out_w // tw)
    total = n_batch * cob * out_h * n_wt
    vec = _vec(b)
    # the tile sizes as defines: the build hoists body literals into arguments, and a
    # loop bound the compiler cannot see keeps acc[] in memory (3x slower on PoCL)
    gen.defines += [f"NB_B {b}", f"NB_TW {tw}"]
    s = Scope()
    s.emit("const int gid = get_global_id(0);")
    s.emit(f"if (gid >= {total}) return;")
    s.emit("int r = gid;")
    s.emit(f"const int wt = r % {n_wt}; r /= {n_wt};")
    s.emit(f"const int oh = r % {out_h}; r /= {out_h};")
    s.emit(f"const int cob = r % {cob}; r /= {cob};")
    s.emit("const int n = r;")
    s.emit(f"{vec} acc[NB_TW];")
    s.emit(UNROLL + f"for (int tw = 0; tw < NB_TW; ++tw) acc[tw] = ({vec})(0.0f);")
    tap = Scope(s)
    tap.emit(f"const __global float* wp = {w_param} + "
             f"((((cob * {cib} + cib) * {kh} + q0) * {kw} + q1) * {b * b});")
    tap.emit(f"{vec} w[NB_B];")
    tap.emit(UNROLL + f"for (int j = 0; j < NB_B; ++j) w[j] = vload{b}(j, wp);")
    # a window that stays inside the input along a dim needs no check there
    check_h = ph > 0 or (out_h - 1) * sh - ph + (kh - 1) * dh >= height
    check_w = pw > 0 or (n_wt * tw - 1) * sw - pw + (kw - 1) * dw >= width
    column = Scope(tap)
    column.emit(f"const int p1 = (wt * NB_TW + tw) * {sw} - {pw} + q1 * {dw};")
    column.emit(f"const int c1 = p1 < 0 ? 0 : (p1 > {width - 1} ? {width - 1} : p1);" if check_w
                else "const int c1 = p1;")
    load = f"vload{b}(0, {x_param} + (((n * {cib} + cib) * {height} + c0) * {width} + c1) * {b})"
    if wanted.image:  # texel (c1, row) of the RGBA image, or of its NCHW4c buffer
        load = f"DNNR_ACT_LOAD4({x_param}, c1, (n * {cib} + cib) * {height} + c0, {width})"
    conds = (["inside0"] if check_h else []) + ([f"p1 >= 0 && p1 < {width}"] if check_w else [])
    column.emit(f"const {vec} xv = ({' && '.join(conds)}) ? {load} : ({vec})(0.0f);" if conds
                else f"const {vec} xv = {load};")
    column.emit("acc[tw] += " + " + ".join(f"xv.{_lane(k)} * w[{k}]" for k in range(b)) + ";")
    tap.nest(UNROLL + "for (int tw = 0; tw < NB_TW; ++tw)", column)
    row = Scope(s)
    row.emit(f"const int p0 = oh * {sh} - {ph} + q0 * {dh};")
    if check_h:
        row.emit(f"const int inside0 = p0 >= 0 && p0 < {height};")
        row.emit(f"const int c0 = p0 < 0 ? 0 : (p0 > {height - 1} ? {height - 1} : p0);")
    else:
        row.emit("const int c0 = p0;")
    row.nest(f"for (int q1 = 0; q1 < {kw}; ++q1)", tap)
    taps = Scope(s)
    taps.nest(f"for (int q0 = 0; q0 < {kh}; ++q0)", row)
    s.nest(f"for (int cib = 0; cib < {cib}; ++cib)", taps)
    # the epilogue per lane: real channels through the fused epilogue, padded ones 0
    fin = Scope(s)
    fin.emit("const int co = cob * NB_B + l; const int ol = wt * NB_TW + tw;")
    done = Scope(fin)
    value = "accs[l]"
    n_var = gen.ivar("n", n_batch)
    if bias is not None:
        value = f"({value} + {gen.em.value(done, bias, (gen.ivar('co', cout),))})"
    gen.declare_iteration(done, (n_var, ix.IVar("co", 0, cout - 1), ix.IVar("oh", 0, 0),
                                 ix.IVar("ol", 0, 0)))
    # outputs stored as RGBA images: the epilogue fills a texel's four lanes (the padded
    # ones stay 0), written once after the lane loop (write_imagef takes whole texels)
    texels = {v: f"ov{k}" for k, v in enumerate(gen.stores)
              if getattr(gen.em.layouts.get(v), "image", False)}
    if texels and b != 4:
        return None
    plain_store = gen.store_line
    gen.store_line = lambda value, store, offset, expr: (  # type: ignore[method-assign]
        f"{texels[value]}[l] = {expr};" if value in texels else plain_store(value, store, offset, expr))
    try:
        gen.epilogue(done, value)
    finally:
        del gen.store_line  # the method again
    pad = Scope(fin)
    for value_name, store in gen.stores.items():
        out_layout = gen.em.layouts.get(value_name)
        if isinstance(out_layout, ix.Blocked) and cout % out_layout.block and value_name not in texels:
            ob = out_layout.block
            blocks = -(-cout // ob)
            pad.emit(f"{store}[((((n * {blocks} + co / {ob}) * {out_h} + oh) * {out_w} + ol) * {ob})"
                     f" + co % {ob}] = 0.0f;")
    fin.nest(f"if (co < {cout} && ol < {out_w})", done)
    if pad.lines:
        fin.nest(f"else if (co < {cob * b} && ol < {out_w})", pad)
    tiles = Scope(s)
    tiles.emit(f"const {vec} accv = acc[tw]; const float* accs = (const float*)&accv;")
    for texel in texels.values():
        tiles.emit(f"float {texel}[4] = {{0.0f, 0.0f, 0.0f, 0.0f}};")
    tiles.nest("for (int l = 0; l < NB_B; ++l)", fin)
    for value_name, texel in texels.items():
        tiles.emit(f"if (wt * NB_TW + tw < {out_w}) DNNR_ACT_STORE4({gen.stores[value_name]}, "
                   f"wt * NB_TW + tw, (n * {cob} + cob) * {out_h} + oh, {out_w}, "
                   f"(float4)({texel}[0], {texel}[1], {texel}[2], {texel}[3]));")
    s.nest(UNROLL + "for (int tw = 0; tw < NB_TW; ++tw)", tiles)
    gen.variant = BlockedOption(VARIANT, None, 0.0, block=b, image=wanted.image).describe()
    if not wanted.image and not texels:
        return gen.finish(s, total, gen.params.work_group)
    gen.helpers.append(ACT_PRELUDE)
    return _activation_images(gen.finish(s, total, gen.params.work_group),
                              reads={x_param} if wanted.image else set(),
                              writes={gen.stores[v] for v in texels})


# activation images (SmartMem §3.3's 2.5D memory for intermediates): declared, read and
# written through these macros; ``-D DNNR_IMAGES`` (the runtime's `images.image_mode`)
# makes them image2d_t with read_imagef / write_imagef, otherwise the same NCHW4c buffer
ACT_PRELUDE = """#ifndef DNNR_ACT_ARG_R
#ifdef DNNR_IMAGES
__constant sampler_t dnnr_act_sampler = CLK_NORMALIZED_COORDS_FALSE | CLK_ADDRESS_NONE | CLK_FILTER_NEAREST;
#define DNNR_ACT_ARG_R(n) __read_only image2d_t n##_img, const ulong n##_off
#define DNNR_ACT_ARG_W(n) __write_only image2d_t n##_img, const ulong n##_off
#define DNNR_ACT_POINTER_R(n)
#define DNNR_ACT_POINTER_W(n)
#define DNNR_ACT_LOAD4(n, x, y, w) read_imagef(n##_img, dnnr_act_sampler, (int2)((x), (y)))
#define DNNR_ACT_STORE4(n, x, y, w, v) write_imagef(n##_img, (int2)((x), (y)), (v))
#else
#define DNNR_ACT_ARG_R(n) __global const float* n##_buf, const ulong n##_off
#define DNNR_ACT_ARG_W(n) __global float* n##_buf, const ulong n##_off
#define DNNR_ACT_POINTER_R(n) __global const float* restrict n = n##_buf + n##_off;
#define DNNR_ACT_POINTER_W(n) __global float* restrict n = n##_buf + n##_off;
#define DNNR_ACT_LOAD4(n, x, y, w) vload4((y) * (w) + (x), n)
#define DNNR_ACT_STORE4(n, x, y, w, v) vstore4((v), (y) * (w) + (x), n)
#endif
#endif
"""


def _activation_images(kernel: Kernel, reads: set[str] = frozenset(), writes: set[str] = frozenset()
                       ) -> Kernel:
    """``kernel`` with the parameters in ``reads`` / ``writes`` declared as activation
    images (`ACT_PRELUDE`) instead of buffers."""
    from dataclasses import replace

    source = kernel.source
    for param in reads:
        source = source.replace(f"__global const float* {param}_buf, const ulong {param}_off",
                                f"DNNR_ACT_ARG_R({param})")
        source = source.replace(f"__global const float* restrict {param} = {param}_buf + {param}_off;",
                                f"DNNR_ACT_POINTER_R({param})")
    for param in writes:
        source = source.replace(f"__global float* {param}_buf, const ulong {param}_off",
                                f"DNNR_ACT_ARG_W({param})")
        source = source.replace(f"__global float* restrict {param} = {param}_buf + {param}_off;",
                                f"DNNR_ACT_POINTER_W({param})")
    return replace(kernel, source=source)


def padded_outputs(gen: _Gen) -> list[str]:
    """The block's outputs stored in a blocked layout whose channel count is padded, or
    as an activation image."""
    result = []
    for value in gen.block.outputs:
        layout = gen.em.layouts.get(value)
        if isinstance(layout, ix.Blocked) and (gen.view.shape(value)[layout.axis] % layout.block
                                               or layout.image):
            result.append(value)
    return result


def image_pointwise(gen: _Gen, value: str, layout: ix.Blocked) -> Kernel:
    """A pointwise block writing its one output as an RGBA activation image: a work-item
    per texel computes its four channels (0 past the channel count) and writes them at once."""
    shape = gen.view.shape(value)
    n_batch, channels, height, width = shape
    blocks = -(-channels // 4)
    total = n_batch * blocks * height * width
    gen.helpers.append(ACT_PRELUDE)
    s = Scope()
    s.emit("const int gid = get_global_id(0);")
    s.emit(f"if (gid >= {total}) return;")
    parts = ix.delinearize(gen.ivar("gid", total), (n_batch, blocks, height, width))
    lanes = []
    for lane in range(4):
        s.emit(f"const int ch{lane} = {ix.render(ix.add(ix.mul(parts[1], 4), lane))};")
        inside = Scope(s)
        index = (parts[0], ix.IVar(f"ch{lane}", 0, channels - 1), parts[2], parts[3])
        result = gen.em.value(inside, value, index)
        inside.emit(f"v{lane} = {result};")
        s.emit(f"float v{lane} = 0.0f;")
        s.nest(f"if (ch{lane} < {channels})", inside)
        lanes.append(f"v{lane}")
    store = gen.stores[value]
    s.emit(f"DNNR_ACT_STORE4({store}, {ix.render(parts[3])}, gid / {width}, {width}, "
           f"(float4)({', '.join(lanes)}));")
    return _activation_images(gen.finish(s, total, gen.params.work_group), writes={store})


def padded_pointwise(gen: _Gen) -> Kernel | None:
    """A pointwise block with one output stored in a padded blocked layout: the work-items
    walk the padded physical tensor; a lane past the channel count stores 0 (module
    docstring). None when no output is padded."""
    padded = padded_outputs(gen)
    if not padded:
        return None
    value = padded[0]
    if len(gen.block.outputs) != 1:
        from egraph_compiler.ir.errors import ModelError
        raise ModelError(f"internal error: block {gen.block.id} stores a padded blocked tensor "
                         "among several outputs")
    layout = gen.em.layouts[value]
    assert isinstance(layout, ix.Blocked)
    if layout.image:
        return image_pointwise(gen, value, layout)
    shape = gen.view.shape(value)
    physical = layout.physical_shape(shape)
    total = math.prod(physical)
    s = Scope()
    s.emit("const int gid = get_global_id(0);")
    s.emit(f"if (gid >= {total}) return;")
    parts = ix.delinearize(gen.ivar("gid", total), physical)
    channel_count = shape[layout.axis]
    s.emit(f"const int ch = {ix.render(ix.add(ix.mul(parts[layout.axis], layout.block), parts[-1]))};")
    inside = Scope(s)
    channel = ix.IVar("ch", 0, channel_count - 1)
    index = (*parts[:layout.axis], channel, *parts[layout.axis + 1:-1])
    result = gen.em.value(inside, value, index)
    inside.emit(gen.store_line(value, gen.stores[value], "gid", result))
    s.nest(f"if (ch < {channel_count})", inside)
    s.emit(f"else {gen.store_line(value, gen.stores[value], 'gid', '0.0f')}")
    return gen.finish(s, total, gen.params.work_group)
