"""Dense 2-D convolution over a register window: the ``window`` option (CPU devices).

The direct kernel (`kernels._Gen.conv_direct`) computes, for every input element it
loads, the element's window position, clamps it and checks it against the padding —
once per input channel, tap and output column of a work-item — and reloads an element
once per tap that reads it. On PoCL that index arithmetic, not the multiply-adds,
bounds a conv (ResNet's 7×7 stem ran at 3 GFLOP/s).

Here a work-item owns ``channels`` output channels (one ``floatC`` vector) × a
``rows × width`` block of output pixels, as `depthwise.py` does for one channel: the
window's positions, clamps and padding flags are computed once, before the loop over
input channels; per input channel it loads the window once (the prologue once per
loaded element), one weight vector per tap (constant weights re-laid-out
``[Cin, K0, K1, Cout]`` padded to the vector), and does ``rows·width·taps`` vector
multiply-adds, emitted unrolled. Groups of one input-channel block only (``group``
1); others keep the direct kernel.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from egraph_compiler.backends.opencl.depthwise import (
    cdiv,
    load_window_row,
    store_checks,
    window_positions,
)
from egraph_compiler.backends.opencl.emit import Scope

if TYPE_CHECKING:
    from egraph_compiler.backends.opencl.gemm import ConvGeometry
    from egraph_compiler.backends.opencl.kernels import Kernel, _Gen


@dataclass(frozen=True)
class Window:
    """``window`` parameters: output channels (a vector width) × rows × columns per
    work-item."""

    channels: int
    rows: int
    width: int


def valid(params: Window) -> bool:
    """An OpenCL vector width of channels."""
    return params.channels in (2, 4, 8, 16) and params.rows >= 1 and params.width >= 1


def applies(geo: ConvGeometry) -> bool:
    """A 2-D conv of one group."""
    return geo.spatial == 2 and geo.group == 1


def window(gen: _Gen, geo: ConvGeometry, params: Window) -> Kernel | None:
    """The kernel, or None when the weights are not a constant it can re-lay out."""
    node = gen.anchor()
    x_name, w_name = node.inputs[0], node.inputs[1]
    bias = node.inputs[2] if len(node.inputs) > 2 and node.inputs[2] else None
    batch, cout, out_h, out_w = geo.out_shape
    cin = geo.x_shape[1]
    (k0, k1), (s0, s1), (d0, d1) = geo.kernel, geo.strides, geo.dilations
    tc = params.channels
    rows, width = min(params.rows, out_h), min(params.width, out_w)
    n_ct, n_rt, n_wt = cdiv(cout, tc), cdiv(out_h, rows), cdiv(out_w, width)
    if not valid(params) or not gen.single_use(w_name):
        return None
    w_read = gen.relayout(w_name, (1, 2, 3, 0), pad_last=n_ct * tc)
    if w_read is None:
        return None
    win_h = (rows - 1) * s0 + (k0 - 1) * d0 + 1
    win_w = (width - 1) * s1 + (k1 - 1) * d1 + 1
    total = batch * n_ct * n_rt * n_wt
    s = Scope()
    s.emit("const int gid = get_global_id(0);")
    s.emit(f"if (gid >= {total}) return;")
    s.emit("int r = gid;")
    s.emit(f"const int wt = r % {n_wt}; r /= {n_wt};")
    s.emit(f"const int rt = r % {n_rt}; r /= {n_rt};")
    s.emit(f"const int ct = r % {n_ct}; const int n = r / {n_ct};")
    s.emit(f"const int oh0 = rt * {rows}; const int ow0 = wt * {width};")
    s.emit(f"const int ih0 = oh0 * {s0} - {geo.begin[0]}; const int iw0 = ow0 * {s1} - {geo.begin[1]};")
    row_ok, col_ok = window_positions(s, geo, (win_h, win_w), (rows, width))
    vec = f"float{tc}"
    s.emit(f"{vec} acc[{rows * width}];")
    for e in range(rows * width):
        s.emit(f"acc[{e}] = ({vec})(0.0f);")
    loop = Scope(s)
    n_var, ci_var = gen.ivar("n", batch), gen.ivar("ci", cin)
    padded = n_ct * tc
    weights = gen.em.params[w_read]
    loop.emit(f"__global const {vec}* wv = (__global const {vec}*)({weights} + "
              f"ci * {k0 * k1 * padded} + ct * {tc});")
    needed = sorted({w * s1 + q1 * d1 for w in range(width) for q1 in range(k1)})
    for a in range(win_h):
        users = [(r, q0) for r in range(rows) for q0 in range(k0) if r * s0 + q0 * d0 == a]
        if not users:
            continue
        row = Scope(loop)
        load_window_row(gen, row, geo, x_name, (n_var, ci_var), a, needed, (row_ok, col_ok))
        for r, q0 in users:
            for q1 in range(k1):
                # one aligned vector load per tap: rows are padded to the vector width
                row.emit(f"const {vec} w{q0}_{q1} = wv[{(q0 * k1 + q1) * padded // tc}];")
                for w in range(width):
                    e = r * width + w
                    row.emit(f"acc[{e}] += w{q0}_{q1} * x{w * s1 + q1 * d1};")
        loop.nest("", row)
    s.nest(f"for (int ci = 0; ci < {cin}; ++ci)", loop)
    # rolled epilogue: one copy of the fused epilogue
    fin = Scope(s)
    fin.emit(f"const int e = eo / {tc}; const int tcc = eo % {tc};")
    fin.emit(f"const int oh = oh0 + e / {width}; const int ow = ow0 + e % {width};")
    fin.emit(f"const int co = ct * {tc} + tcc;")
    fin.emit("const float* accs = (const float*)&acc[e];")
    done = Scope(fin)
    value = "accs[tcc]"
    co_var = gen.ivar("co", cout)
    if bias is not None:
        value = f"({value} + {gen.em.value(done, bias, (co_var,))})"
    gen.declare_iteration(done, (n_var, co_var, gen.ivar("oh", out_h), gen.ivar("ow", out_w)))
    gen.epilogue(done, value)
    checks = [f"co < {cout}", *store_checks(geo, (rows, width))]
    fin.nest(f"if ({' && '.join(checks)})", done)
    s.nest(f"for (int eo = 0; eo < {rows * width * tc}; ++eo)", fin)
    return gen.finish(s, total, gen.params.work_group)
