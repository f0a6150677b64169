"""OpenCL code for ConvTranspose, TopK, MaxPool's indices, LpPool, DepthToSpace and SpaceToDepth
(issue 17 item 6; rules/operators.dnnr, block "opsk"): ``anchor indexed`` generators in
the style of `ops_extra`, each computing one output element from its index;
`ops_extra.GENERATORS` takes them in.

ConvTranspose is written in gather form: an output pixel sums the input pixels whose
scattered taps land on it (input position ``i`` and tap ``k`` reach output
``i * stride - pad_begin + k * dilation``), so no two work items write one element;
per dim it visits only the taps of its stride phase (`_conv_transpose`).
TopK's output element ``j`` along the axis is the ``j``-th best element of its line
(ties: the lower index first, as ONNX says), found by ``j + 1`` selection passes over
the line; its indices output is the dnnr-internal TopKIndices (`ir.decompose` splits a
TopK whose indices are used), which runs the same selection; MaxPool's Indices output is
the dnnr-internal MaxPoolIndices, likewise.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from egraph_compiler.backends.opencl import spelling as sp
from egraph_compiler.backends.opencl.emit import Scope, ctype
from egraph_compiler.fusion import index as ix
from egraph_compiler.ir.conv_transpose import pad_begin
from egraph_compiler.ir.errors import ModelError
from egraph_compiler.ir.graph import Node

Index = tuple[ix.IExpr, ...]
Generator = Callable[[Any, Scope, Node, Index], str]  # (the kernel generator, scope, node, out)


def _loop_var(name: str, size: int) -> ix.IExpr:
    return ix.IVar(name, 0, size - 1) if size > 1 else 0


def _ints(node: Node, name: str, default: list[int]) -> list[int]:
    given = node.attr(name)
    return [int(v) for v in given] if given else default  # type: ignore[union-attr]


def _conv_transpose(gen: Any, scope: Scope, node: Node, out: Index) -> str:
    """ConvTranspose: bias plus, over the input channels of the output channel's group and
    the kernel taps, x at the input position that tap scatters onto this pixel times w."""
    x, w = node.inputs[:2]
    bias = node.inputs[2] if len(node.inputs) > 2 and node.inputs[2] else ""
    shape, w_shape, dtype = gen.view.shape(x), gen.view.shape(w), gen.view.dtype(x)
    if not dtype.startswith("float"):
        raise ModelError(f"node '{node.name}' (ConvTranspose): {dtype} is not a float type")
    out_shape = gen.view.shape(node.outputs[0])
    dims = len(shape) - 2
    group = int(node.attr("group", 1))
    per_group_in, per_group_out = shape[1] // group, w_shape[1]
    kernel = list(w_shape[2:])
    strides = _ints(node, "strides", [1] * dims)
    dilations = _ints(node, "dilations", [1] * dims)
    begin = pad_begin(node, list(shape[2:]), list(out_shape[2:]), kernel)
    em = gen.em
    n, oc = out[0], out[1]
    acc = em.fresh("acc")
    scope.emit(f"float {acc} = {('(float)' + em.value(scope, bias, (oc,))) if bias else '0.0f'};")
    first_channel, local = em.fresh("ic0"), em.fresh("ocg")
    scope.emit(f"const int {first_channel} = (({ix.render(oc)}) / {per_group_out}) * {per_group_in}; "
               f"const int {local} = ({ix.render(oc)}) % {per_group_out};")
    # Stride phases: tap k of a dim reaches this pixel when (q - k·dilation) % stride == 0
    # (q: the pixel's position in the scattered frame), i.e. k·dilation ≡ q (mod stride).
    # The taps of one residue r = q % stride are k0[r], k0[r] + step, ... (step = stride /
    # gcd(dilation, stride)), so each dim loops over those alone, with no divisibility
    # test per tap (the gather form tested all K taps: 4x the work at stride 2).
    # Dims nest outermost first; each loop's body is filled before it is nested.
    parents, bodies, headers, offsets, positions = [scope], [], [], [], []
    for i in range(dims):
        size, stride, dilation = kernel[i], strides[i], dilations[i]
        step = stride // math.gcd(dilation, stride)
        parent = parents[-1]
        q, k, numerator, position = em.fresh("q"), em.fresh("k"), em.fresh("num"), em.fresh("p")
        parent.emit(f"const int {q} = ({ix.render(out[2 + i])}) + {begin[i]};")
        start = "0"
        if stride > 1:
            first = [next((t for t in range(min(size, step)) if (t * dilation) % stride == r), size)
                     for r in range(stride)]
            table = em.fresh("k0")
            parent.emit(f"const int {table}[{stride}] = {{{', '.join(map(str, first))}}};")
            start = f"{table}[{q} % {stride}]"
        body = parent.child()
        # the input position falls as k grows: below 0 ends the loop, past the end skips
        body.emit(f"const int {numerator} = {q} - {k} * {dilation};")
        body.emit(f"if ({numerator} < 0) break;")
        body.emit(f"const int {position} = {numerator} / {stride};")
        body.emit(f"if ({position} >= {shape[2 + i]}) continue;")
        headers.append(f"for (int {k} = {start}; {k} < {size}; {k} += {step})")
        bodies.append(body)
        parents.append(body)
        offsets.append(ix.IVar(k, 0, size - 1) if size > 1 else 0)
        positions.append(ix.IVar(position, 0, shape[2 + i] - 1))
    channel = em.fresh("icg")
    inside = parents[-1].child()
    input_channel = em.fresh("ic")
    inside.emit(f"const int {input_channel} = {first_channel} + {channel};")
    ic = ix.IVar(input_channel, 0, shape[1] - 1)
    value = em.value(inside, x, (n, ic, *positions))
    weight = em.value(inside, w, (ic, ix.IVar(local, 0, per_group_out - 1), *offsets))
    inside.emit(f"{acc} += (float){value} * (float){weight};")
    parents[-1].nest(f"for (int {channel} = 0; {channel} < {per_group_in}; ++{channel})", inside)
    for i in reversed(range(dims)):
        parents[i].nest(headers[i], bodies[i])
    return em.assign(scope, dtype, f"({ctype(dtype)}){acc}")


def window_taps(em: Any, body: Scope, out: Index, shape: tuple[int, ...], offsets: tuple[ix.IExpr, ...],
                strides: list[int], begin: list[int], dilations: list[int]) -> tuple[list[str], list[ix.IVar]]:
    """Each spatial dim's input position of one window tap (``out·stride − begin +
    offset·dilation``), emitted in ``body``: the in-bounds conditions and the positions."""
    conditions, positions = [], []
    for i in range(len(shape) - 2):
        p = em.fresh("p")
        body.emit(f"const int {p} = ({ix.render(out[2 + i])}) * {strides[i]} - {begin[i]} + "
                  f"({ix.render(offsets[i])}) * {dilations[i]};")
        conditions.append(f"{p} >= 0 && {p} < {shape[2 + i]}")
        positions.append(ix.IVar(p, 0, shape[2 + i] - 1))
    return conditions, positions


def window_pad_begin(node: Node, in_size: list[int], kernel: list[int], strides: list[int],
                    dilations: list[int]) -> list[int]:
    """The leading pad of each spatial dim of a Conv or pooling window (explicit pads, or
    SAME_UPPER/LOWER's split of the total padding that keeps ceil(in / stride) outputs)."""
    dims = len(in_size)
    auto_pad = str(node.attr("auto_pad", "NOTSET"))
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        begin = []
        for i in range(dims):
            total = max((-(-in_size[i] // strides[i]) - 1) * strides[i]
                        + (kernel[i] - 1) * dilations[i] + 1 - in_size[i], 0)
            begin.append(total // 2 if auto_pad == "SAME_UPPER" else total - total // 2)
        return begin
    pads = node.attr("pads")
    if auto_pad == "VALID" or not pads:
        return [0] * dims
    return [int(p) for p in pads[:dims]]  # type: ignore[index]


def _max_pool_indices(gen: Any, scope: Scope, node: Node, out: Index) -> str:
    """MaxPoolIndices (dnnr-internal, MaxPool's Indices output; operand 0 is the pooled values,
    read only for the shape): the flat index into x of the window's first maximum, row-major
    (storage_order=1: a 2-D image's column-major position), onnx's reference."""
    x = node.inputs[1]
    shape = gen.view.shape(x)
    dims = len(shape) - 2
    kernel = _ints(node, "kernel_shape", [1] * dims)
    strides = _ints(node, "strides", [1] * dims)
    dilations = _ints(node, "dilations", [1] * dims)
    begin = window_pad_begin(node, list(shape[2:]), kernel, strides, dilations)
    column_major = int(node.attr("storage_order", 0)) == 1
    if column_major and dims != 2:
        raise ModelError(f"node '{node.name}' (MaxPool): storage_order=1 on a {dims}-D image "
                         "(ONNX defines it for 2-D)")
    em = gen.em
    best, at, tap = em.fresh("best"), em.fresh("at"), em.fresh("tap")
    scope.emit(f"float {best} = 0.0f; long {at} = -1;")
    taps = int(np.prod(kernel))
    body = scope.child()
    offsets = ix.delinearize(_loop_var(tap, taps), tuple(kernel))
    conditions, taps_at = window_taps(em, body, out, shape, offsets, strides, begin, dilations)
    positions = [v.name for v in taps_at]
    inside = body.child()
    value = em.value(inside, x, (out[0], out[1], *taps_at))
    if column_major:
        spatial = f"{positions[0]} + {positions[1]} * {shape[2]}"
    else:
        spatial = positions[0]
        for i in range(1, dims):
            spatial = f"({spatial}) * {shape[2 + i]} + {positions[i]}"
    image = int(np.prod(shape[2:]))
    inside.emit(f"if ({at} < 0 || (float){value} > {best}) {{ {best} = (float){value}; "
                f"{at} = (long)(({ix.render(out[0])}) * {shape[1]} + ({ix.render(out[1])})) * {image} + "
                f"({spatial}); }}")
    body.nest(f"if ({' && '.join(conditions)})", inside)
    scope.nest(f"for (int {tap} = 0; {tap} < {taps}; ++{tap})", body)
    return at


def _lp_pool(gen: Any, scope: Scope, node: Node, out: Index) -> str:
    """LpPool: (Σ |x|^p)^(1/p) over the window's taps inside x (padding contributes 0)."""
    x = node.inputs[0]
    shape, dtype = gen.view.shape(x), gen.view.dtype(x)
    if not dtype.startswith("float"):
        raise ModelError(f"node '{node.name}' (LpPool): {dtype} is not a float type")
    dims = len(shape) - 2
    kernel = _ints(node, "kernel_shape", [1] * dims)
    strides = _ints(node, "strides", [1] * dims)
    dilations = _ints(node, "dilations", [1] * dims)
    begin = window_pad_begin(node, list(shape[2:]), kernel, strides, dilations)
    p = float(node.attr("p", 2))
    em = gen.em
    acc, tap = em.fresh("acc"), em.fresh("tap")
    scope.emit(f"float {acc} = 0.0f;")
    taps = int(np.prod(kernel))
    body = scope.child()
    offsets = ix.delinearize(_loop_var(tap, taps), tuple(kernel))
    conditions, positions = window_taps(em, body, out, shape, offsets, strides, begin, dilations)
    inside = body.child()
    value = f"fabs((float){em.value(inside, x, (out[0], out[1], *positions))})"
    term = {1.0: value, 2.0: f"{value} * {value}"}.get(p, f"pow({value}, {p!r}f)")
    inside.emit(f"{acc} += {term};")
    body.nest(f"if ({' && '.join(conditions)})", inside)
    scope.nest(f"for (int {tap} = 0; {tap} < {taps}; ++{tap})", body)
    total = {1.0: acc, 2.0: f"sqrt({acc})"}.get(p, f"pow({acc}, {1.0 / p!r}f)")
    return em.assign(scope, dtype, f"({ctype(dtype)}){total}")


def _top_k_select(gen: Any, scope: Scope, node: Node, out: Index) -> tuple[str, str]:
    """(value, index) C variables of the element of x that is ``out``'s rank along the
    axis: rank 0 the largest (smallest with largest=0), ties broken by the lower index."""
    x = node.inputs[0]
    shape, dtype = gen.view.shape(x), gen.view.dtype(x)
    axis = int(node.attr("axis", -1))
    if not -len(shape) <= axis < len(shape):
        raise ModelError(f"node '{node.name}' ({node.op}): axis {axis} is out of range for rank {len(shape)}")
    axis %= len(shape)
    better = ">" if int(node.attr("largest", 1)) else "<"
    worse = "<" if better == ">" else ">"
    length = shape[axis]
    em = gen.em
    best, at, value, found, step, r = (em.fresh(s) for s in ("bv", "bi", "cv", "ci", "t", "r"))
    c = ctype(dtype)
    scope.emit(f"{c} {best} = {sp.literal(0, dtype)}; int {at} = -1;")
    rank = ix.render(out[axis])
    line = scope.child()
    line.emit(f"{c} {value} = {sp.literal(0, dtype)}; int {found} = -1;")
    candidate = line.child()
    read = em.value(candidate, x, tuple(_loop_var(r, length) if k == axis else v
                                        for k, v in enumerate(out)))
    # the next element in (value, index) order after the one the last pass chose
    candidate.emit(f"if (({at} < 0 || {read} {worse} {best} || ({read} == {best} && {r} > {at})) && "
                   f"({found} < 0 || {read} {better} {value})) {{ {value} = {read}; {found} = {r}; }}")
    line.nest(f"for (int {r} = 0; {r} < {length}; ++{r})", candidate)
    line.emit(f"{best} = {value}; {at} = {found};")
    scope.nest(f"for (int {step} = 0; {step} <= {rank}; ++{step})", line)
    return best, at


def _top_k(gen: Any, scope: Scope, node: Node, out: Index) -> str:
    """TopK's values output (its indices: TopKIndices)."""
    return _top_k_select(gen, scope, node, out)[0]


def _top_k_indices(gen: Any, scope: Scope, node: Node, out: Index) -> str:
    """TopKIndices (dnnr-internal): TopK's indices output."""
    return gen.em.assign(scope, "int64", f"(long){_top_k_select(gen, scope, node, out)[1]}")


def _depth_to_space(gen: Any, scope: Scope, node: Node, out: Index) -> str:
    """DepthToSpace: out[n, c, h, w] reads channel (bh, bw, c) (DCR) or (c, bh, bw) (CRD)
    at [h / b, w / b], bh = h % b, bw = w % b."""
    x = node.inputs[0]
    block = int(node.attr("blocksize"))
    channels = gen.view.shape(node.outputs[0])[1]
    n, c, h, w = out
    bh, bw = ix.mod(h, block), ix.mod(w, block)
    offset = ix.add(ix.mul(bh, block), bw)
    if str(node.attr("mode", "DCR")) == "CRD":
        source = ix.add(ix.mul(c, block * block), offset)
    else:
        source = ix.add(ix.mul(offset, channels), c)
    return gen.em.value(scope, x, (n, source, ix.floordiv(h, block), ix.floordiv(w, block)))


def _space_to_depth(gen: Any, scope: Scope, node: Node, out: Index) -> str:
    """SpaceToDepth: out[n, (bh * b + bw) * C + c, h, w] = x[n, c, h * b + bh, w * b + bw]."""
    x = node.inputs[0]
    block = int(node.attr("blocksize"))
    channels = gen.view.shape(x)[1]
    n, c, h, w = out
    offset = ix.floordiv(c, channels)
    return gen.em.value(scope, x, (n, ix.mod(c, channels),
                                   ix.add(ix.mul(h, block), ix.floordiv(offset, block)),
                                   ix.add(ix.mul(w, block), ix.mod(offset, block))))


GENERATORS: dict[str, Generator] = {
    "ConvTranspose": _conv_transpose,
    "TopK": _top_k,
    "TopKIndices": _top_k_indices,
    "MaxPoolIndices": _max_pool_indices,
    "LpPool": _lp_pool,
    "DepthToSpace": _depth_to_space,
    "SpaceToDepth": _space_to_depth,
}
