"""MaxPool with four outputs per work-item and ``float4`` input rows (GPU class):
the ``vector-pool`` form of `kernels._Gen.pool`.

The scalar pool gives a work-item one output and loads its ``kh × kw`` window one
float at a time, each load with its bounds checks and its fused prologue: ResNet-50's
b8 stem MaxPool (3×3 / 2 after a Relu, 25.7 MB read, 6.4 MB written) issued 9 scalar
loads per output and ran at 58 % of the H200's bandwidth.

Here work-item ``(n, c, oh, m)`` owns outputs ``ow = 4m … 4m + 3``. Their windows
cover, in each input row, the columns ``4·sw·m − bw … 4·sw·m + 4·sw − 1`` when the
window reaches at most ``sw`` columns right of its stride (``kw − bw ≤ sw``) and the
row is exactly ``sw · OW`` wide: ``sw`` aligned ``float4``\\ s (no load past the row)
and ``bw`` scalars on the left (the padding at ``m = 0``). Each input element is
loaded once per window row, its prologue once per lane (`sgemm._Lanes`, as
`vector_forms` does), and each output's maximum runs the epilogue. Whether the reads
are 4-wide is proven on their offsets (`vector_forms.vector_reads`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from egraph_compiler.backends.opencl.emit import Scope
from egraph_compiler.backends.opencl.vector_forms import WIDTH, load_lanes, vector_reads
from egraph_compiler.fusion import index as ix

if TYPE_CHECKING:
    from egraph_compiler.backends.opencl.kernels import Kernel, _Gen
    from egraph_compiler.ir.graph import Node


def vector_maxpool(gen: _Gen, node: Node, begin: tuple[int, ...]) -> Kernel | None:
    """The kernel of MaxPool ``node`` (``begin``: its leading pads), or None where the
    form does not apply (then the scalar pool runs)."""
    x_name = node.inputs[0]
    x_shape = gen.view.shape(x_name)
    out_shape = gen.view.shape(node.outputs[0])
    if len(x_shape) != 4 or any(type(d) is not int for d in (*x_shape, *out_shape)) or \
            gen.view.dtype(x_name) != "float32":
        return None
    (kh, kw) = tuple(node.attr("kernel_shape"))  # type: ignore[misc]
    (sh, sw) = tuple(node.attr("strides") or (1, 1))  # type: ignore[misc]
    if tuple(node.attr("dilations") or (1, 1)) != (1, 1):
        return None
    bh, bw = begin
    batch, channels, out_h, out_w = out_shape
    height, width = x_shape[2], x_shape[3]
    if out_w % WIDTH or width != sw * out_w or kw - bw > sw or not 0 <= bw <= WIDTH * sw:
        return None
    groups = out_w // WIDTH
    n, ch, oh, m = (ix.IVar(name, 0, size - 1) for name, size in
                    (("n", batch), ("ch", channels), ("oh", out_h), ("m", groups)))
    row = ix.IVar("p0", 0, height - 1)
    column = ix.IVar("c", 0, width - 1)
    leaves = vector_reads(gen, x_name, (n, ch, row, column), "c")
    if leaves is None:
        return None
    total = batch * channels * out_h * groups
    gen.variant = "vector-pool"
    s = Scope()
    s.emit("const int gid = get_global_id(0);")
    s.emit(f"if (gid >= {total}) return;")
    for var, expr in zip(("n", "ch", "oh", "m"),
                         ix.delinearize(ix.IVar("gid", 0, total - 1),
                                        (batch, channels, out_h, groups)), strict=True):
        s.emit(f"const int {var} = {ix.render(expr)};")
    for j in range(WIDTH):
        s.emit(f"float acc{j} = -INFINITY;")
    span = WIDTH * sw  # the input columns of a work-item's windows, right of its left pad
    for q0 in range(kh):
        tap = Scope(s)
        tap.emit(f"const int p0 = oh * {sh} - {bh} + {q0};")
        inside = Scope(tap)
        columns: dict[int, str] = {}  # column offset from 4·sw·m -> its C value
        for left in range(1, bw + 1):  # the window's left pad: outside the row at m = 0
            var = gen.em.fresh("x")
            inside.emit(f"float {var} = -INFINITY;")
            load = Scope(inside)
            load.emit(f"const int c = m * {span} - {left};")
            load.emit(f"{var} = {gen.em.value(load, x_name, (n, ch, row, column))};")
            inside.nest("if (m > 0)", load)
            columns[-left] = var
        for v in range(sw):
            block = Scope(inside)
            block.emit(f"const int c = m * {span} + {v * WIDTH};")
            lanes = load_lanes(gen, block, leaves)
            for lane in range(WIDTH):
                walk, scope = lanes(lane), Scope(block)
                var = gen.em.fresh("x")
                inside.emit(f"float {var};")
                scope.emit(f"{var} = {walk.value(scope, x_name, (n, ch, row, column))};")
                block.nest("", scope)
                gen.em.counter = walk.counter
                columns[v * WIDTH + lane] = var
            inside.nest("", block)
        for j in range(WIDTH):
            for q1 in range(kw):
                x = columns[j * sw - bw + q1]
                inside.emit(f"acc{j} = {x} > acc{j} ? {x} : acc{j};")
        checks = (["p0 >= 0"] if bh > q0 else []) + \
            ([f"p0 < {height}"] if (out_h - 1) * sh - bh + q0 >= height else [])
        tap.nest(f"if ({' && '.join(checks)})" if checks else "", inside)
        s.nest("", tap)
    for j in range(WIDTH):
        out = Scope(s)
        out.emit(f"const int ow = m * {WIDTH} + {j};")
        gen.declare_iteration(out, (n, ch, oh, ix.IVar("ow", 0, out_w - 1)))
        gen.epilogue(out, f"acc{j}")
        s.nest("", out)
    return gen.finish(s, total, gen.params.work_group)

