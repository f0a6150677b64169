"""A row kernel whose lanes run along the rows: the ``pixel-rows`` form of ``rownorm``.

LayerNormalization over the channels of an NCHW map (ConvNeXt's LayerNorm2d, exported
as Transpose → LayerNormalization → Transpose) normalises rows whose elements lie
``H·W`` apart in memory, while consecutive rows (pixels) are adjacent. One work-group
per row (`kernels._Gen._cached_rownorm`) then reads one element per 32-byte sector:
ConvNeXt-T's stage-1 LayerNorms ran at 7–16 % of the H200's bandwidth.

Here a work-group takes ``P`` consecutive rows (`KernelParams.strided_rows`, halved
for long rows until a lane keeps at most `MAX_REGISTERS` elements, and for few rows
until there are `TARGET_GROUPS` work-groups; below `MIN_GROUPS` one work-group per
row is kept) and its
``P × L`` lanes are ``lane = pixel + P · part``: the ``P`` lanes of a warp read one
element of ``P`` adjacent rows (one coalesced access), and each keeps its row's
elements ``part, part + L, …`` in registers. The two row statistics (mean, then the
mean square of the deviations) are summed over the ``L`` parts in local memory. The
outputs are written one of two ways, whichever the stores' strides ask for:

- ``direct``: each lane runs the epilogue on its own elements (stores coalesced along
  the rows, e.g. the NCHW → NCHW LayerNorm2d);
- ``transposed``: the normalised values go through a local ``[L][P + 1]`` tile (padded:
  no bank conflicts) and the work-group writes them with consecutive lanes on
  consecutive row elements (stores coalesced along the row, e.g. LayerNorm then a
  Linear over NHWC).

Where the form applies is read off the generated code itself (`access_strides`): the
offsets of every load of the row's input and of every store, evaluated at three
(row, element) points.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING

from egraph_compiler.backends.opencl import spelling as sp
from egraph_compiler.backends.opencl.emit import Scope
from egraph_compiler.fusion import index as ix

if TYPE_CHECKING:
    from egraph_compiler.backends.opencl.kernels import Kernel, _Gen
    from egraph_compiler.ir.graph import Node

UNROLL = "__attribute__((opencl_unroll_hint)) "  # xs[] stays in registers
LANES = 256  # work-group size: P rows × L parts
MIN_PIXELS = 8  # rows per work-group at least (one 32-byte sector of each element)
# work-groups at least: on the H200 ConvNeXt-T's LayerNorms ran faster than one
# work-group per row with 98 work-groups or more, the same with 49, slower with 25
# (batch 1, 28² × 192: 0.007 → 0.010 ms)
MIN_GROUPS = 96
# work-groups wanted: fewer rows per work-group (down to `MIN_PIXELS`) until there are
# this many, about 4 per compute unit of a 132-SM H200. ConvNeXt-T's b8 downsampling
# LayerNorm (6,272 rows of 192) ran at 21 % of the H200's bandwidth as 196 work-groups
# of 32 rows (1.5 per SM), 32 % as 784 of 8; its stage-1 LayerNorms (25,088 rows of
# 96) ran slower as 3,136 work-groups of 8 than as 784 of 32 (37 against 44–50 %)
TARGET_GROUPS = 512
MAX_REGISTERS = 32  # row elements a lane keeps (beyond it the form is not offered)
LOCAL_FLOATS = 12 * 1024  # the transposed tile's budget (48 KiB of local memory)
# `packed_rownorm`: rows of at most this many lanes share a work-group. A compute unit
# of an H100/H200 holds 32 work-groups: 32-lane rows filled half of its 2,048 lanes
# (64-lane rows fill it, and 128-lane ones already run at 70-80 % of the bandwidth)
PACKED_PARTS = 32
# ... and only with this many rows at least. On the H100 (b8, OpenCL events) packing
# took SegFormer's 25,088-row LayerNorms 0.063 → 0.032 ms (three kernels) and its
# 6,272-row ones 0.033 → 0.022, b1's 3,136-row ones 0.028 → 0.023; ViT's 1,576 rows
# of 256 and SegFormer's 1,568 of 160 ran about as fast either way, and BERT's, GPT-2's
# and BART's 1,024 rows of 256 slower (eight kernels 0.063 → 0.073 ms). With this
# floor SegFormer b8's fused kernels took 2.81 → 2.74 ms, b1's 1.22 → 1.18 (medians of
# three runs each, old and new alternating)
PACKED_MIN_ROWS = 2048

_INT = re.compile(r"const int (\w+) = ([\w\s+\-*/%()]+);")
_LOAD = re.compile(r"const \w+ (\w+) = (in\d+)\[([\w\s+\-*/%()]+)\];")
_STORE = re.compile(r"(out\d+)\[([\w\s+\-*/%()]+)\] = .*;")
_VALUE = re.compile(r"const \w+ \w+ = [^\[\]]*;")


def _evaluate(expr: str, env: dict[str, int]) -> int:
    """A rendered index expression (`fusion.index.render`: non-negative C integer
    arithmetic) at the values ``env``."""
    return int(eval(expr.replace("/", "//"), {"__builtins__": {}}, dict(env)))  # noqa: S307


def access_strides(lines: list[str]) -> list[tuple[str, int, int]] | None:
    """Per load and store of ``lines`` (straight-line code over the C variables ``o``,
    the row, and ``r``, the element): (``load``/``store``, offset change from row 0 to
    row 1, offset change from element 0 to element 1). None when a line is anything
    else (a gather's computed index, a guard), which the probe cannot evaluate."""
    found = _accesses(lines)
    return None if found is None else [(kind, d_o, d_r) for kind, _, d_o, d_r, _ in found]


def _accesses(lines: list[str]) -> list[tuple[str, str, int, int, str]] | None:
    """`access_strides` with each access's argument and the C text of its offset
    preceded by the index lines it reads."""
    points = ({"o": 0, "r": 0}, {"o": 0, "r": 1}, {"o": 1, "r": 0})
    envs = [dict(p) for p in points]
    found: list[tuple[str, str, int, int, str]] = []
    ints: list[str] = []
    for line in lines:
        line = line.strip()
        if (m := _INT.fullmatch(line)) is not None:
            ints.append(line)
            for env in envs:
                env[m.group(1)] = _evaluate(m.group(2), env)
        elif (m := _LOAD.fullmatch(line)) is not None or (m := _STORE.fullmatch(line)) is not None:
            param, text = (m.group(2), m.group(3)) if m.re is _LOAD else m.groups()[:2]
            at = [_evaluate(text, env) for env in envs]
            found.append(("load" if m.re is _LOAD else "store", param, at[2] - at[0],
                          at[1] - at[0], " ".join([*ints, f"const int at = {text};"])))
        elif _VALUE.fullmatch(line) is None:
            return None
    return found


def _stage(gen: _Gen, s: Scope, lines: list[str], rows: int, length: int, pixels: int,
           budget: int) -> dict[str, str]:
    """Copy, in ``s``, each argument the row's loads read contiguously along the row
    (an NHWC operand of an NCHW LayerNorm: lanes along the pixels would read it one
    element per 32-byte sector, ``length`` floats apart) into local memory with
    consecutive lanes on consecutive floats; returns what to pin each such value to
    (its element at the lane's ``pix``, ``r``). Only an argument read once by the row,
    whose work-group block of ``pixels`` rows is contiguous, and within ``budget``
    local floats. (ConvNeXt-T's downsampling LayerNorms, an NHWC residual branch added
    to an NCHW map, ran at 18–34 % of the H200's bandwidth.)"""
    found = _accesses(lines) or []
    loads = [a for a in found if a[0] == "load"]
    names = {param: value for value, param in gen.em.params.items()}
    pins: dict[str, str] = {}
    width = length + 1  # odd for even rows: the lanes' reads down a column miss no bank
    for _, param, d_o, d_r, text in loads:
        value = names.get(param)
        if d_o != length or d_r != 1 or sum(a[1] == param for a in loads) != 1 or \
                value is None or gen.view.dtype(value) != "float32" or \
                pixels * width * (len(pins) + 1) > budget:
            continue
        local = f"stage{len(pins)}"
        s.emit(f"__local float {local}[{pixels * width}];")
        block = Scope(s)
        block.emit(f"const int o = get_group_id(0) * {pixels}; const int r = 0;")
        block.emit(text)
        copy = Scope(block)
        copy.emit(f"const int p = e / {length}; const int q = e % {length};")
        read = f"{local}[p * {width} + q] = {param}[at + e];"
        copy.emit(f"if (o + p < {rows}) {read}" if rows % pixels else read)
        block.nest(f"for (int e = lid; e < {pixels * length}; e += {LANES})", copy)
        s.nest("", block)
        pins[value] = f"{local}[pix * {width} + r]"
    if pins:
        s.emit("barrier(CLK_LOCAL_MEM_FENCE);")
    return pins


def _probe(gen: _Gen, emit: Callable[[Scope], None]) -> list[tuple[str, int, int]] | None:
    """`access_strides` of the code ``emit`` writes, the emitter's state restored."""
    return access_strides(_lines(gen, emit))


def _lines(gen: _Gen, emit: Callable[[Scope], None]) -> list[str]:
    """The code ``emit`` writes, the emitter's state restored."""
    pinned, counter = dict(gen.em.pinned), gen.em.counter
    scope = Scope()
    try:
        emit(scope)
    finally:
        gen.em.pinned, gen.em.counter = pinned, counter
    return scope.lines


def _lane_elements(s: Scope, parts: int, per_lane: int, length: int, rows: int,
                   pixels: int) -> Callable[[Callable[[Scope], None]], None]:
    """``each(emit)``: ``emit`` in ``s`` for each of a lane's elements ``r = part +
    j · parts`` (j < ``per_lane``) of its row ``o``, guarded where the row is ragged
    over the parts or the last work-group's ``pixels`` rows over ``rows``."""
    checks = ([f"r < {length}"] if length % parts else []) + \
        ([f"o < {rows}"] if rows % pixels else [])

    def each(emit: Callable[[Scope], None]) -> None:
        body = Scope(s)
        body.emit(f"const int r = part + j * {parts};")
        inner = Scope(body)
        emit(inner)
        if checks:
            body.nest(f"if ({' && '.join(checks)})", inner)
        else:
            body.lines.extend(inner.lines)
        s.nest(UNROLL + f"for (int j = 0; j < {per_lane}; ++j)", body)
    return each


def _through_tile(s: Scope, each: Callable[[Callable[[Scope], None]], None], pixels: int,
                  length: int, rows: int, rows_fastest: bool,
                  write: Callable[[Scope, str], None]) -> None:
    """Emit, in ``s``, the normalised values through a local ``[length][pixels + 1]``
    tile (padded: no bank conflicts): each lane puts its elements in, then the
    work-group calls ``write(scope, value)`` at every (row ``o``, element ``r``) with
    consecutive lanes on consecutive rows (``rows_fastest``) or on consecutive
    elements of a row."""
    s.emit(f"__local float tile[{length * (pixels + 1)}];")
    each(lambda body: body.emit(f"tile[r * {pixels + 1} + pix] = (xs[j] - center) * scale;"))
    s.emit("barrier(CLK_LOCAL_MEM_FENCE);")
    out = Scope(s)
    out.emit(f"const int p = e % {pixels}; const int r = e / {pixels};" if rows_fastest else
             f"const int p = e / {length}; const int r = e % {length};")
    out.emit(f"const int o = get_group_id(0) * {pixels} + p;")
    inner = Scope(out)
    write(inner, f"tile[r * {pixels + 1} + p]")
    if rows % pixels:
        out.nest(f"if (o < {rows})", inner)
    else:
        out.lines.extend(inner.lines)
    s.nest(f"for (int e = lid; e < {pixels * length}; e += {LANES})", out)


def pixel_rownorm(gen: _Gen, node: Node, rows: int, length: int, x_name: str,
                  x_shape: tuple[int, ...], index: tuple[ix.IExpr, ...],
                  normalised: Callable[[Scope, str], str]) -> Kernel | None:
    """The ``pixel-rows`` kernel of LayerNormalization ``node`` over ``rows`` rows of
    ``length`` (``index``: its input's element at C variables ``o``, ``r``), or None
    where it does not apply: the row's loads strided and the rows adjacent, the row
    in registers. ``normalised(scope, x)`` is the normalised value of ``x`` (scale,
    bias) at ``index``."""
    pixels = gen.params.strided_rows
    if pixels < 2 or LANES % pixels or rows < 2 or length < 2:
        return None
    # long rows or few of them: fewer rows per work-group (more lanes per row, more
    # work-groups), down to a sector's worth of rows (8 floats: each access still
    # fills the sectors it touches)
    while (-(-length // (LANES // pixels)) > MAX_REGISTERS or
           -(-rows // pixels) < TARGET_GROUPS) and pixels > MIN_PIXELS:
        pixels //= 2
    if -(-rows // pixels) < MIN_GROUPS:
        return None
    parts = LANES // pixels
    per_lane = -(-length // parts)
    if per_lane > MAX_REGISTERS:
        return None
    loads = _probe(gen, lambda scope: gen.em.value(scope, x_name, index))
    # loads that move with the row (one that does not is a per-element parameter, e.g.
    # ConvNeXt's layer scale): one at least strided along its row and coalesced along
    # the rows; the others either that or contiguous along the row — a work-group's
    # rows × whole rows of such an operand are one contiguous block, whose sectors the
    # parts' loads share through the cache (ConvNeXt's downsampling LayerNorm adds an
    # NHWC branch to an NCHW residual)
    moving = [(d_o, d_r) for _, d_o, d_r in loads or () if d_o]
    if not any(d_o == 1 and d_r != 1 for d_o, d_r in moving) or \
            any(d_o != 1 and d_r != 1 for d_o, d_r in moving):
        return None

    def epilogue(scope: Scope, value: str) -> None:
        gen.declare_iteration(scope, index)
        gen.epilogue(scope, value)

    stores = _probe(gen, lambda scope: epilogue(scope, normalised(scope, "v")))
    if stores is None:
        return None
    store_strides = [(d_o, d_r) for kind, d_o, d_r in stores if kind == "store"]
    transposed = bool(store_strides) and all(d_r == 1 for _, d_r in store_strides)
    if transposed and length * (pixels + 1) > LOCAL_FLOATS:
        return None
    eps = sp.literal(float(node.attr("epsilon", 1e-5)), "float32")
    count = sp.literal(float(length), "float32")
    gen.variant = f"pixel-rows {pixels} {'transposed' if transposed else 'direct'}"
    s = Scope()
    s.emit("const int lid = get_local_id(0);")
    s.emit(f"const int pix = lid % {pixels}; const int part = lid / {pixels};")
    s.emit(f"const int o = get_group_id(0) * {pixels} + pix;")
    s.emit(f"__local float red[{LANES}];")
    s.emit(f"__local float stat[{2 * pixels}];")
    s.emit(f"float xs[{per_lane}];")

    each = _lane_elements(s, parts, per_lane, length, rows, pixels)

    def row_sum(var: str, slot: int) -> None:
        """Sum ``var`` over the row's parts into ``stat[slot·P + pix]``."""
        s.emit(f"red[lid] = {var};")
        s.emit("barrier(CLK_LOCAL_MEM_FENCE);")
        total = Scope(s)
        total.emit("float sum = 0.0f;")
        total.emit(f"for (int k = 0; k < {parts}; ++k) sum += red[k * {pixels} + pix];")
        total.emit(f"stat[{slot * pixels} + pix] = sum;")
        s.nest("if (part == 0)", total)
        s.emit("barrier(CLK_LOCAL_MEM_FENCE);")

    pins: dict[str, str] = {}
    if gen.params.strided_rows_stage and type(rows) is int and type(length) is int:
        lines = _lines(gen, lambda scope: gen.em.value(scope, x_name, index))
        pins = _stage(gen, s, lines, rows, length, pixels,
                      LOCAL_FLOATS - (length * (pixels + 1) if transposed else 0))
    s.emit("float acc = 0.0f;")

    def load(body: Scope) -> None:
        body.emit(f"xs[j] = {gen.em.value(body, x_name, index)};")
        body.emit("acc += xs[j];")

    gen.em.pinned = {**gen.em.pinned, **pins}
    each(load)
    for value in pins:
        del gen.em.pinned[value]
    row_sum("acc", 0)
    s.emit(f"const float center = stat[pix] / {count};")
    s.emit("float dev = 0.0f;")
    each(lambda body: body.emit("dev += (xs[j] - center) * (xs[j] - center);"))
    row_sum("dev", 1)
    s.emit(f"const float scale = rsqrt(stat[{pixels} + pix] / {count} + {eps});")
    if not transposed:
        each(lambda body: epilogue(body, normalised(body, "((xs[j] - center) * scale)")))
        return gen.finish(s, -(-rows // pixels) * LANES, LANES)
    _through_tile(s, each, pixels, length, rows, False,
                  lambda write, x: epilogue(write, normalised(write, x)))
    return gen.finish(s, -(-rows // pixels) * LANES, LANES)


def packed_rownorm(gen: _Gen, node: Node, rows: int, length: int, x_name: str,
                   index: tuple[ix.IExpr, ...], normalised: Callable[[Scope, str], str],
                   parts: int) -> Kernel | None:
    """The ``packed-rows`` kernel of LayerNormalization ``node`` over ``rows`` short
    contiguous rows of ``length`` (``index``: its input's element at C variables ``o``,
    ``r``), or None where it does not apply. ``parts``: the lanes a row takes (the
    one-work-group-per-row form's work-group, `kernels._Gen._cached_rownorm`).

    Short rows (SegFormer's 32–256 channels, a 256-wide transformer at batch 8) took a
    work-group of 32 lanes each (`PACKED_PARTS`): a compute unit holds 32 work-groups,
    so half its lanes were resident, and SegFormer's b8 stage-1 LayerNorms ran at
    17–19 % of the H100's bandwidth (a copy of their size by the same clock: 45 %).
    Here a `LANES` work-group takes ``LANES / parts`` rows, ``lane = part + parts · row``:
    each row's ``parts`` lanes (a warp or more) read its elements ``part, part + parts,
    …`` as the one-row form does, so every load and store stays coalesced along the
    row; the row statistics are summed over the row's lanes by a tree in local memory.
    Offered for `PACKED_MIN_ROWS` rows or more where every load that moves with the
    row is contiguous along it, and every store either that (written from the
    registers) or along the rows (through a local tile)."""
    per_lane = -(-length // parts)
    if parts > PACKED_PARTS or LANES % parts or rows < PACKED_MIN_ROWS or length < 2 or \
            per_lane > MAX_REGISTERS:
        return None
    pixels = LANES // parts
    loads = _probe(gen, lambda scope: gen.em.value(scope, x_name, index))
    if loads is None or any(d_o and d_r != 1 for _, d_o, d_r in loads):
        return None

    every_store = dict(gen.stores)

    def epilogue(scope: Scope, value: str, outputs: dict[str, str] = every_store) -> None:
        """The block's epilogue storing only ``outputs`` (value: its output argument)."""
        gen.declare_iteration(scope, index)
        gen.stores = outputs
        try:
            gen.epilogue(scope, value)
        finally:
            gen.stores = every_store

    found = _accesses(_lines(gen, lambda scope: epilogue(scope, normalised(scope, "v"))))
    if found is None:
        return None
    # stores along the row are written from the registers; stores along the rows (an
    # NCHW output: SegFormer's LayerNorm then a Transpose back) through a local tile,
    # consecutive lanes on consecutive rows, as `pixel_rownorm`'s ``transposed`` form
    # writes its rows' elements
    strides = {param: (d_o, d_r) for kind, param, d_o, d_r, _ in found if kind == "store"}
    along = {v: out for v, out in every_store.items() if strides.get(out, (0, 1))[1] == 1}
    across = {v: out for v, out in every_store.items() if v not in along}
    if any(strides[out][0] != 1 for out in across.values()) or \
            any(v in across for v in gen.shape.stored) or \
            (across and length * (pixels + 1) > LOCAL_FLOATS):
        return None
    eps = sp.literal(float(node.attr("epsilon", 1e-5)), "float32")
    count = sp.literal(float(length), "float32")
    gen.variant = f"packed-rows {pixels}x{parts}" + (" transposed" if across else "")
    s = Scope()
    s.emit("const int lid = get_local_id(0);")
    s.emit(f"const int part = lid % {parts}; const int pix = lid / {parts};")
    s.emit(f"const int o = get_group_id(0) * {pixels} + pix;")
    s.emit(f"__local float red[{LANES}];")
    s.emit(f"float xs[{per_lane}];")

    each = _lane_elements(s, parts, per_lane, length, rows, pixels)

    def row_sum(var: str) -> str:
        """Sum ``var`` over the row's lanes (a tree over ``parts`` slots of ``red``);
        return the C expression of the total (valid until ``red`` is written again)."""
        s.emit(f"red[lid] = {var};")
        s.emit("barrier(CLK_LOCAL_MEM_FENCE);")
        step = Scope(s)
        step.emit("if (part < h) red[lid] += red[lid + h];")
        step.emit("barrier(CLK_LOCAL_MEM_FENCE);")
        s.nest(f"for (int h = {parts // 2}; h > 0; h >>= 1)", step)
        return f"red[pix * {parts}]"

    s.emit("float acc = 0.0f;")

    def load(body: Scope) -> None:
        body.emit(f"xs[j] = {gen.em.value(body, x_name, index)};")
        body.emit("acc += xs[j];")

    each(load)
    s.emit(f"const float center = {row_sum('acc')} / {count};")
    s.emit("barrier(CLK_LOCAL_MEM_FENCE);")  # every row has read its total
    s.emit("float dev = 0.0f;")
    each(lambda body: body.emit("dev += (xs[j] - center) * (xs[j] - center);"))
    s.emit(f"const float scale = rsqrt({row_sum('dev')} / {count} + {eps});")
    gen.row_input = "xs[j]"  # a stored row input (a residual sum) is in registers
    if along:
        each(lambda body: epilogue(body, normalised(body, "((xs[j] - center) * scale)"),
                                   along))
    if not across:
        return gen.finish(s, -(-rows // pixels) * LANES, LANES)
    gen.row_input = None
    _through_tile(s, each, pixels, length, rows, True,
                  lambda write, x: epilogue(write, normalised(write, x), across))
    return gen.finish(s, -(-rows // pixels) * LANES, LANES)
