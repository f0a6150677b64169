"""Depthwise convolution, specialised (MobileNet, EfficientNet): the ``depthwise`` option.

A depthwise conv (``group`` = input channels, one input channel per group) has no
reduction over channels: each output is ``K0 × K1`` multiply-adds over one channel's
window, so the general kernels waste their structure — the direct kernel reloads every
input element once per tap, the tiled GEMM does not apply. Here a work-item owns one
channel's ``rows × width`` block of output pixels (`Depthwise`) and walks the input
window that block needs, ``((rows-1)·s0 + (K0-1)·d0 + 1) × ((width-1)·s1 + (K1-1)·d1 + 1)``
elements, loading each once into a register (the block's prologue — BatchNorm, Relu,
Clip… — evaluated once per loaded element) and using it for every output and tap
that reads it: a 3×3 stride-1 conv with a 2 × 8 block loads 40 elements for 144
multiply-adds instead of 144. The channel's ``K0·K1`` weights are loaded once.

Everything about the window is known when the kernel is generated, so the loads and
the multiply-adds are emitted unrolled, straight-line, with each register a scalar
variable: no local memory and no barrier (PoCL runs a work-group's items as loops cut
at every barrier), and on a GPU neighbouring work-items read neighbouring window
segments. Two spatial dimensions only; others keep the direct kernel.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from egraph_compiler.backends.opencl.emit import Scope
from egraph_compiler.fusion import index as ix
from egraph_compiler.shapes.symint import SymInt

if TYPE_CHECKING:
    from egraph_compiler.backends.opencl.gemm import ConvGeometry
    from egraph_compiler.backends.opencl.kernels import Kernel, _Gen


@dataclass(frozen=True)
class Depthwise:
    """``depthwise`` parameters: output rows × columns per work-item. ``lanes``: a
    work-group per ``rows`` output rows of a channel, one work-item per output column
    (``width`` 1), so a group's items read consecutive input columns — PoCL runs a
    work-group as a loop over its items and vectorises it only when the addresses are
    consecutive in the item's id (a flat id split by / and % makes every load a
    gather, and the loop stays scalar)."""

    rows: int
    width: int
    lanes: bool = False

    def window(self, kernel: tuple[int, ...], strides: tuple[int, ...],
               dilations: tuple[int, ...]) -> tuple[int, int]:
        """Input rows × columns one work-item loads."""
        return ((self.rows - 1) * strides[0] + (kernel[0] - 1) * dilations[0] + 1,
                (self.width - 1) * strides[1] + (kernel[1] - 1) * dilations[1] + 1)


# PoCL's vectoriser runs 8 work-items a step (AVX2/AVX-512 machines here): a ``lanes``
# group is rounded up to a multiple, its extra items computing nothing they store (a
# 14-wide row in a group of 14 left 6 items to a scalar tail: 2.4× slower)
LANES_STEP = 8


def lanes_group(columns: int) -> int:
    """The work-group size of a ``lanes`` kernel over ``columns`` output columns."""
    return cdiv(columns, LANES_STEP) * LANES_STEP


def applies(geo: ConvGeometry) -> bool:
    """A 2-D depthwise conv (one input channel per group)."""
    return geo.spatial == 2 and geo.group > 1 and geo.cin_g == 1


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def depthwise(gen: _Gen, geo: ConvGeometry, params: Depthwise) -> Kernel:
    node = gen.anchor()
    x_name, w_name = node.inputs[0], node.inputs[1]
    bias = node.inputs[2] if len(node.inputs) > 2 and node.inputs[2] else None
    batch, channels, out_h, out_w = geo.out_shape
    (k0, k1), (s0, s1), (d0, d1) = geo.kernel, geo.strides, geo.dilations
    rows, width = min(params.rows, out_h), 1 if params.lanes else min(params.width, out_w)
    block = Depthwise(rows, width)
    win_h, win_w = block.window(geo.kernel, geo.strides, geo.dilations)
    n_rt, n_wt = cdiv(out_h, rows), cdiv(out_w, width)
    total = batch * channels * n_rt * (lanes_group(n_wt) if params.lanes else n_wt)
    s = Scope()
    if params.lanes:  # the group is (n, co, rt), uniform over its items; the item is ow
        s.emit("const int wt = get_local_id(0);")
        s.emit("int r = get_group_id(0);")
    else:
        s.emit("const int gid = get_global_id(0);")
        s.emit(f"if (gid >= {total}) return;")
        s.emit("int r = gid;")
        s.emit(f"const int wt = r % {n_wt}; r /= {n_wt};")
    # a symbolic build whose output rows are one block (a recorded comparison) knows its
    # window's rows, as a bound compile's literals do (`_checks`)
    one_row_block = symbolic(out_h) and n_rt == 1
    s.emit("const int rt = 0;" if one_row_block else f"const int rt = r % {n_rt}; r /= {n_rt};")
    s.emit(f"const int co = r % {channels}; const int n = r / {channels};")
    # the one input channel of output channel co's group (a channel multiplier > 1
    # gives several output channels per input channel)
    s.emit(f"const int ci = co / {geo.cout_g};" if geo.cout_g > 1 else "const int ci = co;")
    s.emit(f"const int oh0 = rt * {rows}; const int ow0 = wt * {width};")
    s.emit(f"const int ih0 = oh0 * {s0} - {geo.begin[0]}; const int iw0 = ow0 * {s1} - {geo.begin[1]};")
    n_var, c_var = gen.ivar("n", batch), gen.ivar("ci", geo.x_shape[1])
    co_var = gen.ivar("co", channels)
    weights = {}
    for q0 in range(k0):
        for q1 in range(k1):
            value = gen.em.value(s, w_name, (co_var, 0, q0, q1))
            weights[q0, q1] = value
    row_ok, col_ok = window_positions(s, geo, (win_h, win_w), (rows, width),
                                      clamp=not params.lanes,
                                      blocks=(n_rt, lanes_group(n_wt)) if params.lanes else None)
    # on a CPU the accumulators are scalars and the epilogue is unrolled: PoCL runs a
    # work-group as a loop over its work-items and vectorises that loop only when it
    # is innermost — a rolled epilogue loop (and the array it indexes) left every
    # depthwise kernel scalar (see `cost.DEVICES`, "depthwise")
    unrolled = gen.params.device == "cpu"
    acc = [f"acc{e}" if unrolled else f"acc[{e}]" for e in range(rows * width)]
    if unrolled:
        s.emit(" ".join(f"float {a} = 0.0f;" for a in acc))
    else:
        s.emit(f"float acc[{rows * width}];")
        for e in range(rows * width):
            s.emit(f"acc[{e}] = 0.0f;")
    needed = sorted({w * s1 + q1 * d1 for w in range(width) for q1 in range(k1)})
    for a in range(win_h):
        # which (output row, kernel row) pairs read window row a
        users = [(r, q0) for r in range(rows) for q0 in range(k0) if r * s0 + q0 * d0 == a]
        if not users:
            continue
        row = Scope(s)  # one window row's registers live only while it is used
        load_window_row(gen, row, geo, x_name, (n_var, c_var), a, needed, (row_ok, col_ok),
                        masked=params.lanes)
        for r, q0 in users:
            for q1 in range(k1):
                for w in range(width):
                    e = r * width + w
                    # plain operators, not mad(): a builtin is an out-of-line call on PoCL
                    # (kernels._clamp_high); ``a * b + c`` contracts to an FMA
                    row.emit(f"{acc[e]} += {weights[q0, q1]} * x{w * s1 + q1 * d1};")
        s.nest("", row)
    if unrolled:
        for e in range(rows * width):
            fin = Scope(s)
            fin.emit(f"const int oh = oh0 + {e // width}; const int ow = ow0 + {e % width};")
            _store(gen, fin, geo, (n_var, co_var), bias, acc[e], (rows, width), params.lanes)
            s.nest("", fin)
        return gen.finish(s, total, lanes_group(n_wt) if params.lanes else gen.params.work_group)
    # elsewhere the epilogue stays rolled (one copy of the fused epilogue, not rows × width)
    fin = Scope(s)
    fin.emit(f"const int oh = oh0 + e / {width}; const int ow = ow0 + e % {width};")
    _store(gen, fin, geo, (n_var, co_var), bias, "acc[e]", (rows, width), params.lanes)
    s.nest(f"for (int e = 0; e < {rows * width}; ++e)", fin)
    return gen.finish(s, total, gen.params.work_group)


def _store(gen: _Gen, fin: Scope, geo: ConvGeometry, batch_channel: tuple[ix.IExpr, ix.IExpr],
           bias: str | None, value: str, block: tuple[int, int], lanes: bool) -> None:
    """The epilogue of output (``oh``, ``ow``) from accumulator ``value``, if in range
    (`store_checks` of ``block``s; ``lanes``: items past the last column block)."""
    n_var, co_var = batch_channel
    out_h, out_w = geo.out_shape[2:]
    done = Scope(fin)
    if bias is not None:
        value = f"({value} + {gen.em.value(done, bias, (co_var,))})"
    gen.declare_iteration(done, (n_var, co_var, gen.ivar("oh", out_h), gen.ivar("ow", out_w)))
    gen.epilogue(done, value)
    checks = store_checks(geo, block, ragged_width=lanes)
    fin.nest(f"if ({' && '.join(checks)})" if checks else "", done)


def window_positions(s: Scope, geo: ConvGeometry, window: tuple[int, int],
                     block: tuple[int, int], clamp: bool = True,
                     blocks: tuple[int, int] | None = None
                     ) -> tuple[list[list[str]], list[list[str]]]:
    """Emit the input rows ``h{a}`` and columns ``w{b}`` of a work-item's window (from
    ``ih0``/``iw0``) and, where a position can fall outside the input, its clamped
    ``ch{a}``/``cw{b}``; return each row's and column's bounds checks (empty: none
    needed). Padding reads a clamped element and selects zero, with no branch.
    ``clamp`` False: no clamped positions (the loads are masked instead). ``blocks``:
    the work-items' blocks along each dim where more than cover the output (a
    ``lanes`` group's extra items), else ``⌈out / block⌉``."""
    in_h, in_w = geo.x_shape[2:]
    n_blocks = blocks or (cdiv(geo.out_shape[2], block[0]), cdiv(geo.out_shape[3], block[1]))
    row_ok, col_ok = [], []
    for a in range(window[0]):
        s.emit(f"const int h{a} = ih0 + {a};")
        checks = _checks(f"h{a}", geo, 0, a, block[0], n_blocks[0])
        if checks and clamp:
            s.emit(f"const int ch{a} = h{a} < 0 ? 0 : (h{a} < {in_h} ? h{a} : {in_h - 1});")
        row_ok.append(checks)
    for b in range(window[1]):
        s.emit(f"const int w{b} = iw0 + {b};")
        checks = _checks(f"w{b}", geo, 1, b, block[1], n_blocks[1])
        if checks and clamp:
            s.emit(f"const int cw{b} = w{b} < 0 ? 0 : (w{b} < {in_w} ? w{b} : {in_w - 1});")
        col_ok.append(checks)
    return row_ok, col_ok


def load_window_row(gen: _Gen, row: Scope, geo: ConvGeometry, x_name: str,
                    batch_channel: tuple[ix.IExpr, ix.IExpr], a: int, columns: list[int],
                    checks: tuple[list[list[str]], list[list[str]]], masked: bool = False
                    ) -> None:
    """Load window row ``a``'s ``columns`` of input ``x_name`` into registers ``x{b}``
    (zero where a bounds check of `window_positions` fails). ``masked``: a position
    that fails is not read at all (no clamped positions: a load only under its checks,
    which a vectoriser turns into a masked load of consecutive elements)."""
    row_ok, col_ok = checks
    in_h, in_w = geo.x_shape[2:]
    h_pos = ix.IVar(f"ch{a}" if row_ok[a] and not masked else f"h{a}", 0, in_h - 1)
    for b in columns:
        if masked:
            w_pos = ix.IVar(f"w{b}", 0, in_w - 1)
            conds = row_ok[a] + col_ok[b]
            if not conds:
                row.emit(f"const float x{b} = {gen.em.value(row, x_name, (*batch_channel, h_pos, w_pos))};")
                continue
            inside = Scope(row)
            value = gen.em.value(inside, x_name, (*batch_channel, h_pos, w_pos))
            inside.emit(f"x{b} = {value};")
            row.emit(f"float x{b} = 0.0f;")
            row.nest(f"if ({' && '.join(conds)})", inside)
            continue
        w_pos = ix.IVar(f"cw{b}" if col_ok[b] else f"w{b}", 0, in_w - 1)
        value = gen.em.value(row, x_name, (*batch_channel, h_pos, w_pos))
        conds = row_ok[a] + col_ok[b]
        row.emit(f"const float x{b} = ({' && '.join(conds)}) ? {value} : 0.0f;" if conds
                 else f"const float x{b} = {value};")


def _checks(position: str, geo: ConvGeometry, d: int, offset: int, block: int,
            blocks: int) -> list[str]:
    """Bounds checks of window position ``offset`` along spatial dim ``d`` for ``blocks``
    blocks of ``block`` outputs: below zero only where the padding reaches; above the
    input always in a bound compile — whether the last block's window crosses the end
    depends on the size, and a rule that does not keeps one source for convs that differ
    only in shape (sizes are kernel arguments, `build.hoist_sizes`), where LLVM drops a
    dead check itself once the sizes are literals. A symbolic build's sizes stay
    arguments, so there the check goes where no block's window reaches the end, a
    comparison of sizes recorded as a path condition (`versions.py`): a version per
    outcome (MobileNetV2's first depthwise launch at 1×32×32 took 17.6 µs with its
    checks, 11.7 bound)."""
    checks = [f"{position} >= 0"] if geo.begin[d] > offset else []
    in_size, out_size = geo.x_shape[2 + d], geo.out_shape[2 + d]
    last = (blocks - 1) * block * geo.strides[d] - geo.begin[d] + offset
    if not symbolic(in_size, out_size) or last >= in_size:
        # one block: the position is ``last`` in every work-item, always past the end
        # (ConvNeXt's 7×7 depthwise on a 1×1 map reads one of its 7 rows)
        one_block = symbolic(in_size, out_size) and blocks == 1
        checks.append("0" if one_block else f"{position} < {in_size}")
    return checks


def symbolic(*sizes: int) -> bool:
    """Some size is a `SymInt` (a symbolic build): a check on it is a version condition."""
    return any(isinstance(size, SymInt) for size in sizes)


def store_checks(geo: ConvGeometry, block: tuple[int, int], ragged_width: bool = False
                 ) -> list[str]:
    """The store's bounds checks ``oh < H``, ``ow < W`` of blocks of ``block`` output
    rows × columns: in a symbolic build none along a dim the blocks fill exactly (a
    recorded comparison, as `_checks`); ``ragged_width``: the width's kept whatever the
    size (work-items past the last block, as a ``lanes`` group's)."""
    out_h, out_w = geo.out_shape[2:]
    checks = []
    if not symbolic(out_h) or out_h % block[0] != 0:
        checks.append(f"oh < {out_h}")
    if ragged_width or not symbolic(out_w) or out_w % block[1] != 0:
        checks.append(f"ow < {out_w}")
    return checks
