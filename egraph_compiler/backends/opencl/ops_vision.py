"""OpenCL code for the vision and indexing operators (issue 17; rules/operators.dnnr, block
"opsb"): ``anchor indexed`` generators in the style of `ops_extra`, each computing one
output element from its index; `ops_extra.GENERATORS` takes them in.

Sampling operators (GridSample, RoiAlign, DeformConv) follow onnx's reference
implementations: coordinates are computed in float, the input is read at integer
positions chosen at run time (clamped into range before the read, so a bad coordinate
never reads outside the tensor; the padding mode decides what an out-of-range position
contributes). Operands whose value shapes the output (OneHot's depth, AffineGrid's size,
CenterCropPad's shape) are static by the time a kernel is built: the OpenCL backend only
sees static shapes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import product
from typing import Any

import numpy as np

from egraph_compiler.backends.opencl import spelling as sp
from egraph_compiler.backends.opencl.emit import Scope, ctype
from egraph_compiler.fusion import index as ix
from egraph_compiler.ir.errors import ModelError
from egraph_compiler.ir.graph import Node

Index = tuple[ix.IExpr, ...]
Generator = Callable[[Any, Scope, Node, Index], str]  # (the kernel generator, scope, node, out)


def _f(value: float) -> str:
    """A float literal."""
    return f"{float(value)!r}f"


def _loop_var(name: str, size: int) -> ix.IExpr:
    return ix.IVar(name, 0, size - 1) if size > 1 else 0


def _refuse(node: Node, what: str) -> ModelError:
    return ModelError(f"node '{node.name}' ({node.op}): {what} is not supported by the OpenCL backend")


def _emit_reflect(scope: Scope, var: str, lo: float, hi: float) -> None:
    """Reflect the float ``var`` by the near border until it lies in [lo, hi] (onnx's
    `_gs_reflect`)."""
    span = hi - lo
    scope.emit(f"if ({var} < {_f(lo)}) {{ const float dx = {_f(lo)} - {var}; const int nf = (int)(dx / {_f(span)}); "
               f"const float rm = dx - nf * {_f(span)}; {var} = (nf % 2 == 0) ? {_f(lo)} + rm : {_f(hi)} - rm; }}")
    scope.emit(f"else if ({var} > {_f(hi)}) {{ const float dx = {var} - {_f(hi)}; const int nf = (int)(dx / {_f(span)}); "
               f"const float rm = dx - nf * {_f(span)}; {var} = (nf % 2 == 0) ? {_f(hi)} - rm : {_f(lo)} + rm; }}")


class _Sampler:
    """Reads ``x`` (N, C, *spatial) at integer spatial positions computed at run time, with
    GridSample's padding modes: ``zeros`` (out of range reads 0), ``border`` (clamped),
    ``reflection`` (reflected at ``borders``)."""

    def __init__(self, gen: Any, x: str, lead: Index, padding: str,
                 borders: Sequence[tuple[float, float]]) -> None:
        self.gen, self.x, self.lead, self.padding, self.borders = gen, x, lead, padding, borders
        self.shape = gen.view.shape(x)
        self.dtype = gen.view.dtype(x)

    def pixel(self, scope: Scope, positions: Sequence[str]) -> str:
        """The C value of x at the int expressions ``positions`` (one per spatial dim)."""
        em = self.gen.em
        checks, index = [], []
        for k, (position, size) in enumerate(zip(positions, self.shape[2:], strict=True)):
            at = em.fresh("p")
            scope.emit(f"int {at} = {position};")
            if self.padding == "zeros":
                checks.append(f"{at} >= 0 && {at} < {size}")
            elif self.padding == "reflection":
                reflected = em.fresh("rf")
                scope.emit(f"float {reflected} = (float){at};")
                _emit_reflect(scope, reflected, *self.borders[k])
                scope.emit(f"{at} = (int){reflected};")
            safe = em.fresh("q")
            scope.emit(f"const int {safe} = clamp({at}, 0, {size - 1});")
            index.append(ix.IVar(safe, 0, size - 1))
        value = em.value(scope, self.x, (*self.lead, *index))
        if not checks:
            return value
        return em.assign(scope, self.dtype, f"(({' && '.join(checks)}) ? {value} : {sp.literal(0, self.dtype)})")

    def linear(self, scope: Scope, coords: Sequence[str]) -> str:
        """n-linear interpolation at the float coordinates ``coords``."""
        return self._interpolate(scope, coords, "w", (0, 1), lambda w: [f"(1.0f - {w})", w])

    def cubic(self, scope: Scope, coords: Sequence[str]) -> str:
        """Bicubic interpolation (Keys, a = -0.75) at the float coordinates ``coords``."""
        def coefficients(t: str) -> list[str]:
            a = -0.75
            terms = [f"(({_f(a)} * ({t} + 1.0f) - {_f(5 * a)}) * ({t} + 1.0f) + {_f(8 * a)}) * ({t} + 1.0f) - {_f(4 * a)}",
                     f"(({_f(a + 2)} * {t} - {_f(a + 3)}) * {t} * {t} + 1.0f)",
                     f"(({_f(a + 2)} * (1.0f - {t}) - {_f(a + 3)}) * (1.0f - {t}) * (1.0f - {t}) + 1.0f)",
                     f"(({_f(a)} * (2.0f - {t}) - {_f(5 * a)}) * (2.0f - {t}) + {_f(8 * a)}) * (2.0f - {t}) - {_f(4 * a)}"]
            names = [self.gen.em.fresh("c") for _ in terms]
            scope.emit(" ".join(f"const float {n} = {term};" for n, term in zip(names, terms, strict=True)))
            return names

        return self._interpolate(scope, coords, "t", (-1, 0, 1, 2), coefficients)

    def _interpolate(self, scope: Scope, coords: Sequence[str], fraction: str, offsets: Sequence[int],
                     weights: Callable[[str], list[str]]) -> str:
        """Σ over the taps at ``offsets`` from each coordinate's floor of the product of the
        taps' ``weights`` (of the coordinate's fractional part) times the pixel there."""
        em = self.gen.em
        floors, tap_weights = [], []
        for coord in coords:
            low, frac = em.fresh("lo"), em.fresh(fraction)
            scope.emit(f"const int {low} = (int)floor({coord}); const float {frac} = {coord} - (float){low};")
            floors.append(low)
            tap_weights.append(weights(frac))
        acc = em.fresh("acc")
        scope.emit(f"float {acc} = 0.0f;")
        for taps in product(range(len(offsets)), repeat=len(coords)):
            weight = " * ".join(w[tap] for w, tap in zip(tap_weights, taps, strict=True))
            value = self.pixel(scope, [f"{low} + {offsets[tap]}" for low, tap in zip(floors, taps, strict=True)])
            scope.emit(f"{acc} += {weight} * (float){value};")
        return acc


def _grid_sample(gen: Any, scope: Scope, node: Node, out: Index) -> str:
    """GridSample: x sampled at the grid's normalised coordinates (last grid axis reversed:
    its first entry is the innermost spatial dim)."""
    x, grid = node.inputs[:2]
    shape, dtype = gen.view.shape(x), gen.view.dtype(x)
    if not dtype.startswith("float"):
        raise _refuse(node, f"a {dtype} input")
    sizes = shape[2:]
    rank = len(sizes)
    mode = {"bilinear": "linear", "bicubic": "cubic"}.get(str(node.attr("mode")), str(node.attr("mode")))
    padding = str(node.attr("padding_mode", "zeros"))
    if mode not in ("nearest", "linear", "cubic") or padding not in ("zeros", "border", "reflection"):
        raise _refuse(node, f"mode '{mode}' with padding_mode '{padding}'")
    if mode == "cubic" and rank != 2:
        raise _refuse(node, f"cubic sampling of a {rank}-D input")
    align = bool(node.attr("align_corners", 0))
    borders = [(0.0, size - 1.0) if align else (-0.5, size - 0.5) for size in sizes]
    coords = []
    for k, size in enumerate(sizes):
        normalised = gen.em.value(scope, grid, (out[0], *out[2:], rank - 1 - k))
        coord = gen.em.fresh("u")
        denormalised = f"((float){normalised} + 1.0f) / 2.0f * {_f(size - 1)}" if align else \
            f"(((float){normalised} + 1.0f) * {_f(size)} - 1.0f) / 2.0f"
        scope.emit(f"float {coord} = {denormalised};")
        if mode == "nearest":
            scope.emit(f"{coord} = rint({coord});")  # halves to even, as PyTorch and onnx do
        lo, hi = borders[k]
        if padding == "border":
            scope.emit(f"if ({coord} < {_f(lo)} || {coord} > {_f(hi)}) {coord} = clamp({coord}, 0.0f, {_f(size - 1)});")
        elif padding == "reflection":
            _emit_reflect(scope, coord, lo, hi)
        coords.append(coord)
    sampler = _Sampler(gen, x, out[:2], padding, borders)
    if mode == "nearest":
        return sampler.pixel(scope, [f"(int){c}" for c in coords])
    value = sampler.linear(scope, coords) if mode == "linear" else sampler.cubic(scope, coords)
    return gen.em.assign(scope, dtype, f"({ctype(dtype)}){value}")


def _eye_like(gen: Any, scope: Scope, node: Node, out: Index) -> str:
    """EyeLike: 1 where column - row == k, else 0."""
    dtype = gen.view.dtype(node.outputs[0])
    k = int(node.attr("k", 0))
    on = f"(({ix.render(out[1])}) - ({ix.render(out[0])}) == {k})"
    return gen.em.assign(scope, dtype, f"({on} ? {sp.literal(1, dtype)} : {sp.literal(0, dtype)})")


def _one_hot(gen: Any, scope: Scope, node: Node, out: Index) -> str:
    """OneHot: values[1] where the index along axis equals indices (negative: from depth)."""
    indices, _, values = node.inputs[:3]
    out_shape = gen.view.shape(node.outputs[0])
    axis = int(node.attr("axis", -1)) % len(out_shape)
    depth = out_shape[axis]
    at = gen.em.fresh("h")
    raw = gen.em.value(scope, indices, out[:axis] + out[axis + 1:])
    scope.emit(f"long {at} = (long)({raw}); if ({at} < 0) {at} += {depth};")
    off, on = (gen.em.value(scope, values, (k,)) for k in (0, 1))
    dtype = gen.view.dtype(node.outputs[0])
    return gen.em.assign(scope, dtype, f"({at} == {ix.render(out[axis])} ? {on} : {off})")


def _affine_grid(gen: Any, scope: Scope, node: Node, out: Index) -> str:
    """AffineGrid: theta[n] applied to the base grid's (x, y[, z], 1) at this position."""
    theta = node.inputs[0]
    out_shape = gen.view.shape(node.outputs[0])
    dtype = gen.view.dtype(node.outputs[0])
    spatial = out_shape[1:-1]
    rank = len(spatial)
    align = bool(node.attr("align_corners", 0))
    acc = gen.em.fresh("acc")
    scope.emit(f"float {acc} = 0.0f;")
    for j in range(rank):  # the j-th base coordinate walks the j-th innermost spatial dim
        k = rank - 1 - j
        size, here = spatial[k], ix.render(out[1 + k])
        base = (f"(-1.0f + 2.0f * (float)({here}) / {_f(size - 1)})" if size > 1 else "-1.0f") if align else \
            f"((2.0f * (float)({here}) + 1.0f) / {_f(size)} - 1.0f)"
        weight = gen.em.value(scope, theta, (out[0], out[-1], j))
        scope.emit(f"{acc} += (float){weight} * {base};")
    scope.emit(f"{acc} += (float){gen.em.value(scope, theta, (out[0], out[-1], rank))};")
    return gen.em.assign(scope, dtype, f"({ctype(dtype)}){acc}")


def _center_crop_pad(gen: Any, scope: Scope, node: Node, out: Index) -> str:
    """CenterCropPad: the input centred in the output (cropped where larger, zero-padded
    where smaller)."""
    x = node.inputs[0]
    in_shape, out_shape = gen.view.shape(x), gen.view.shape(node.outputs[0])
    dtype = gen.view.dtype(x)
    index, checks = [], []
    for here, size_in, size_out in zip(out, in_shape, out_shape, strict=True):
        if size_in >= size_out:  # crop: start (in - out) // 2 into the input
            index.append(ix.add(here, (size_in - size_out) // 2))
            continue
        shift = (size_out - size_in) // 2  # pad: the input starts this far into the output
        at = gen.em.fresh("cp")
        scope.emit(f"const int {at} = ({ix.render(here)}) - {shift};")
        checks.append(f"{at} >= 0 && {at} < {size_in}")
        safe = gen.em.fresh("q")
        scope.emit(f"const int {safe} = clamp({at}, 0, {size_in - 1});")
        index.append(ix.IVar(safe, 0, size_in - 1))
    value = gen.em.value(scope, x, tuple(index))
    if not checks:
        return value
    return gen.em.assign(scope, dtype, f"(({' && '.join(checks)}) ? {value} : {sp.literal(0, dtype)})")


def _max_unpool(gen: Any, scope: Scope, node: Node, out: Index) -> str:
    """MaxUnpool: the x element whose (flat, whole-tensor) index names this output
    element, else 0. Only x's (n, c) plane can name it."""
    x, indices = node.inputs[:2]
    shape, dtype = gen.view.shape(x), gen.view.dtype(x)
    out_shape = gen.view.shape(node.outputs[0])
    flat = gen.em.fresh("flat")
    strides = [int(np.prod(out_shape[k + 1:], dtype=np.int64)) for k in range(len(out_shape))]
    scope.emit(f"const long {flat} = {' + '.join(f'(long)({ix.render(i)}) * {s}' for i, s in zip(out, strides, strict=True))};")
    acc = gen.em.fresh("acc")
    scope.emit(f"{ctype(dtype)} {acc} = {sp.literal(0, dtype)};")
    plane = int(np.prod(shape[2:], dtype=np.int64))
    body = scope.child()
    at = (*out[:2], *ix.delinearize(_loop_var("r", plane), tuple(shape[2:])))
    target = gen.em.value(body, indices, at)
    body.emit(f"if ((long)({target}) == {flat}) {acc} = {gen.em.value(body, x, at)};")
    scope.nest(f"for (int r = 0; r < {plane}; ++r)", body)
    return acc


def _roi_align(gen: Any, scope: Scope, node: Node, out: Index) -> str:
    """RoiAlign: the average (or max) of bilinear samples on a grid inside this bin of the
    region of interest (onnx's reference, sample by sample)."""
    x, rois, batch_indices = node.inputs[:3]
    shape, dtype = gen.view.shape(x), gen.view.dtype(x)
    height, width = shape[2], shape[3]
    pooled_h, pooled_w = gen.view.shape(node.outputs[0])[2:]
    scale = float(node.attr("spatial_scale", 1.0))
    half_pixel = str(node.attr("coordinate_transformation_mode", "half_pixel")) == "half_pixel"
    mode = str(node.attr("mode", "avg"))
    ratio = int(node.attr("sampling_ratio", 0))
    em = gen.em
    roi, ph, pw = out[0], ix.render(out[2]), ix.render(out[3])
    corner = [em.fresh("roi") for _ in range(4)]
    for k, name in enumerate(corner):
        scope.emit(f"const float {name} = (float){em.value(scope, rois, (roi, k))} * {_f(scale)}"
                   f"{' - 0.5f' if half_pixel else ''};")
    start_w, start_h, end_w, end_h = corner
    roi_w, roi_h = em.fresh("rw"), em.fresh("rh")
    scope.emit(f"float {roi_w} = {end_w} - {start_w}; float {roi_h} = {end_h} - {start_h};")
    if not half_pixel:  # malformed regions count as 1 x 1
        scope.emit(f"{roi_w} = fmax({roi_w}, 1.0f); {roi_h} = fmax({roi_h}, 1.0f);")
    bin_h, bin_w, grid_h, grid_w = em.fresh("bh"), em.fresh("bw"), em.fresh("gh"), em.fresh("gw")
    scope.emit(f"const float {bin_h} = {roi_h} / {_f(pooled_h)}; const float {bin_w} = {roi_w} / {_f(pooled_w)};")
    if ratio > 0:
        scope.emit(f"const int {grid_h} = {ratio}; const int {grid_w} = {ratio};")
    else:
        scope.emit(f"const int {grid_h} = (int)ceil({roi_h} / {_f(pooled_h)}); "
                   f"const int {grid_w} = (int)ceil({roi_w} / {_f(pooled_w)});")
    batch = em.fresh("b")
    scope.emit(f"const int {batch} = clamp((int)({em.value(scope, batch_indices, (roi,))}), 0, {shape[0] - 1});")
    acc = em.fresh("acc")
    scope.emit(f"float {acc} = {'0.0f' if mode == 'avg' else '-INFINITY'};")
    body = scope.child()
    y, xx = em.fresh("y"), em.fresh("x")
    body.emit(f"float {y} = {start_h} + (float)({ph}) * {bin_h} + ((float)iy + 0.5f) * {bin_h} / (float){grid_h};")
    body.emit(f"float {xx} = {start_w} + (float)({pw}) * {bin_w} + ((float)ix + 0.5f) * {bin_w} / (float){grid_w};")
    sample = em.fresh("smp")
    body.emit(f"float {sample} = 0.0f;")
    inside = body.child()
    lows = []
    for coord, size in ((y, height), (xx, width)):
        low, high = em.fresh("lo"), em.fresh("hi")
        inside.emit(f"{coord} = fmax({coord}, 0.0f); int {low} = (int){coord}; int {high};")
        inside.emit(f"if ({low} >= {size - 1}) {{ {low} = {high} = {size - 1}; {coord} = (float){low}; }} "
                    f"else {{ {high} = {low} + 1; }}")
        lows.append((low, high))
    (y_low, y_high), (x_low, x_high) = lows
    ly, lx = f"({y} - (float){y_low})", f"({xx} - (float){x_low})"
    taps = [((y_low, x_low), f"(1.0f - {ly}) * (1.0f - {lx})"), ((y_low, x_high), f"(1.0f - {ly}) * {lx}"),
            ((y_high, x_low), f"{ly} * (1.0f - {lx})"), ((y_high, x_high), f"{ly} * {lx}")]
    terms = []
    for (row, col), weight in taps:
        value = em.value(inside, x, (ix.IVar(batch, 0, shape[0] - 1), out[1], ix.IVar(row, 0, height - 1),
                                     ix.IVar(col, 0, width - 1)))
        terms.append(f"({weight}) * (float){value}")
    if mode == "avg":
        inside.emit(f"{sample} = {' + '.join(terms)};")
    else:
        inside.emit(f"{sample} = fmax(fmax({terms[0]}, {terms[1]}), fmax({terms[2]}, {terms[3]}));")
    body.nest(f"if (!({y} < -1.0f || {y} > {_f(height)} || {xx} < -1.0f || {xx} > {_f(width)}))", inside)
    body.emit(f"{acc} = {acc} + {sample};" if mode == "avg" else f"{acc} = fmax({acc}, {sample});")
    loop = scope.child()
    loop.nest(f"for (int ix = 0; ix < {grid_w}; ++ix)", body)
    scope.nest(f"for (int iy = 0; iy < {grid_h}; ++iy)", loop)
    if mode == "avg":
        scope.emit(f"{acc} /= (float)max({grid_h} * {grid_w}, 1);")
    else:
        scope.emit(f"if ({grid_h} * {grid_w} == 0) {acc} = 0.0f;")
    return em.assign(scope, dtype, f"({ctype(dtype)}){acc}")


def _deform_conv(gen: Any, scope: Scope, node: Node, out: Index) -> str:
    """DeformConv (2-D): Conv whose taps are bilinear samples (zero outside) at positions
    moved by offset, each weighted by mask when given."""
    x, w, offset = node.inputs[:3]
    bias = node.inputs[3] if len(node.inputs) > 3 and node.inputs[3] else ""
    mask = node.inputs[4] if len(node.inputs) > 4 and node.inputs[4] else ""
    shape, w_shape, dtype = gen.view.shape(x), gen.view.shape(w), gen.view.dtype(x)
    if len(shape) != 4:
        raise _refuse(node, f"a rank-{len(shape)} input (only 2-D DeformConv)")
    channels, height, width = shape[1:]
    out_channels, group_channels, kh, kw = w_shape
    group = int(node.attr("group", 1))
    offset_group = int(node.attr("offset_group", 1))
    strides = list(node.attr("strides") or (1, 1))
    dilations = list(node.attr("dilations") or (1, 1))
    pads = list(node.attr("pads") or (0, 0, 0, 0))
    em = gen.em
    n, oc, oh, ow = out
    acc = em.fresh("acc")
    scope.emit(f"float {acc} = {('(float)' + em.value(scope, bias, (oc,))) if bias else '0.0f'};")
    first = em.fresh("ic0")
    scope.emit(f"const int {first} = (({ix.render(oc)}) / {out_channels // group}) * {group_channels};")
    body = scope.child()
    ic = ix.IVar("icx", 0, channels - 1)
    body.emit(f"const int icx = {first} + icg;")
    og = em.fresh("og")
    body.emit(f"const int {og} = icx / {channels // offset_group};")
    tap = ix.add(ix.mul(ix.IVar(og, 0, offset_group - 1), kh * kw), ix.add(ix.mul(_loop_var("a", kh), kw),
                                                                           _loop_var("b", kw)))
    coords = []
    for k, (stride, dilation, pad, loop) in enumerate(zip(strides, dilations, pads[:2], ("a", "b"), strict=True)):
        moved = em.value(body, offset, (n, ix.add(ix.mul(tap, 2), k), oh, ow))
        coord = em.fresh("u")
        here = ix.render(out[2 + k])
        body.emit(f"const float {coord} = (float)(({here}) * {stride} - {pad} + {loop} * {dilation}) + (float){moved};")
        coords.append(coord)
    sampler = _Sampler(gen, x, (n, ic), "zeros", [(0.0, height - 1.0), (0.0, width - 1.0)])
    value = sampler.linear(body, coords)
    if mask:
        value = f"{value} * (float){em.value(body, mask, (n, tap, oh, ow))}"
    weight = em.value(body, w, (oc, ix.IVar("icg", 0, group_channels - 1), _loop_var("a", kh), _loop_var("b", kw)))
    body.emit(f"{acc} += (float){weight} * {value};")
    inner = scope.child()
    inner.nest(f"for (int b = 0; b < {kw}; ++b)", body)
    middle = scope.child()
    middle.nest(f"for (int a = 0; a < {kh}; ++a)", inner)
    scope.nest(f"for (int icg = 0; icg < {group_channels}; ++icg)", middle)
    return em.assign(scope, dtype, f"({ctype(dtype)}){acc}")


def _max_roi_pool(gen: Any, scope: Scope, node: Node, out: Index) -> str:
    """MaxRoiPool: the max over this bin of the (rounded, scaled) region of interest
    (batch, x1, y1, x2, y2); 0 for an empty bin (onnxruntime's Caffe semantics)."""
    x, rois = node.inputs[:2]
    shape, dtype = gen.view.shape(x), gen.view.dtype(x)
    pooled = gen.view.shape(node.outputs[0])[2:]
    scale = float(node.attr("spatial_scale", 1.0))
    em = gen.em
    batch = em.fresh("b")
    scope.emit(f"const int {batch} = clamp((int)({em.value(scope, rois, (out[0], 0))}), 0, {shape[0] - 1});")
    bounds = []
    for k, (size, bins) in enumerate(zip(shape[2:], pooled, strict=True)):
        start, end = (em.fresh("st"), em.fresh("en"))
        first = em.value(scope, rois, (out[0], 2 - k))  # y1 is column 2, x1 column 1
        last = em.value(scope, rois, (out[0], 4 - k))
        scope.emit(f"const int {start} = (int)round((float){first} * {_f(scale)}); "
                   f"const int {end} = (int)round((float){last} * {_f(scale)});")
        length, low, high = em.fresh("len"), em.fresh("lo"), em.fresh("hi")
        here = ix.render(out[2 + k])
        scope.emit(f"const float {length} = (float)max({end} - {start} + 1, 1) / {_f(bins)};")
        scope.emit(f"const int {low} = min(max((int)floor((float)({here}) * {length}) + {start}, 0), {size}); "
                   f"const int {high} = min(max((int)ceil((float)({here} + 1) * {length}) + {start}, 0), {size});")
        bounds.append((low, high))
    (h0, h1), (w0, w1) = bounds
    acc = em.fresh("acc")
    scope.emit(f"float {acc} = ({h1} <= {h0} || {w1} <= {w0}) ? 0.0f : -INFINITY;")
    body = scope.child()
    value = em.value(body, x, (ix.IVar(batch, 0, shape[0] - 1), out[1], ix.IVar("hy", 0, shape[2] - 1),
                               ix.IVar("wx", 0, shape[3] - 1)))
    body.emit(f"{acc} = fmax({acc}, (float){value});")
    inner = scope.child()
    inner.nest(f"for (int wx = {w0}; wx < {w1}; ++wx)", body)
    scope.nest(f"for (int hy = {h0}; hy < {h1}; ++hy)", inner)
    return em.assign(scope, dtype, f"({ctype(dtype)}){acc}")


GENERATORS: dict[str, Generator] = {
    "MaxRoiPool": _max_roi_pool,
    "GridSample": _grid_sample,
    "EyeLike": _eye_like,
    "OneHot": _one_hot,
    "AffineGrid": _affine_grid,
    "CenterCropPad": _center_crop_pad,
    "MaxUnpool": _max_unpool,
    "RoiAlign": _roi_align,
    "DeformConv": _deform_conv,
}
