"""A strided conv as an explicit im2col then the tiled GEMM: the ``im2col`` form of a
``tiled`` conv (GPU class).

The implicit GEMM (`gemm.conv_problem`) computes every B element's input position
from its K index (input channel, taps: a division and remainders) and bounds-checks
it, per element loaded into the work-group's tile; at stride 2 its loads also touch
every other element. ResNet's stride-2 3×3 convs at batch 8 ran at 22.6–25.4 % of the
H200's FP32 peak that way, where the same core reaches 33–45 % on plain MatMuls.

Here a first launch writes the column matrix ``col[k][n]`` (``k`` = input channel ×
taps, ``n`` = output pixel over the batch; the conv's prologue applied, zero padding)
to the block's scratch, consecutive work-items on consecutive ``n`` (coalesced
stores); the second is `gemm.tiled` with B read from ``col`` (coalesced along ``n``,
no index arithmetic) and A, the weights, as the implicit GEMM reads them. Split-K
across work-groups is not combined with it (both would use the scratch). The tile:
`KernelParams.im2col_tile`, else a forced ``tiled`` option's (sweeps, tests), else
the largest of `TILES` that still gives every compute unit a work-group.

`KernelParams.im2col_min_stride` selects it (0: never), e.g. 2 for the stride-2 convs.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import TYPE_CHECKING

from egraph_compiler.backends.opencl import gemm
from egraph_compiler.backends.opencl.emit import Scope

if TYPE_CHECKING:
    from egraph_compiler.backends.opencl.kernels import Kernel, _Gen

# largest first: (bm, bn, bk, tm, tn), contiguous per-item tiles
TILES = (gemm.Tile(64, 64, 16, 4, 4, True), gemm.Tile(32, 64, 16, 2, 4, True),
         gemm.Tile(32, 32, 16, 2, 2, True))
COMPUTE_UNITS = 132  # an H100/H200: one work-group each at least
MAX_SCRATCH_FLOATS = 1 << 26  # 256 MiB of columns at most


def applies(gen: _Gen, geo: gemm.ConvGeometry) -> bool:
    """A conv of one group with a window larger than 1×1 and a stride of at least
    `KernelParams.im2col_min_stride`, constant weights read once (re-laid out for the
    A operand), its column matrix within `MAX_SCRATCH_FLOATS`."""
    low = gen.params.im2col_min_stride
    w_name = gen.anchor().inputs[1]
    static = all(type(d) is int for d in (*geo.x_shape, *geo.out_shape))
    return low > 0 and static and not gen.params.shape_stable and geo.group == 1 and geo.taps > 1 and min(geo.strides) >= low and \
        w_name in gen.view.constants and gen.single_use(w_name) and \
        geo.cin_g * geo.taps * geo.columns <= MAX_SCRATCH_FLOATS


def pick_tile(m_size: int, n_size: int) -> gemm.Tile:
    """`KernelParams.im2col_tile`'s default: the largest tile of `TILES` with at least
    `COMPUTE_UNITS` tiles of C, else the smallest."""
    for tile in TILES:
        if math.ceil(m_size / tile.bm) * math.ceil(n_size / tile.bn) >= COMPUTE_UNITS:
            return tile
    return TILES[-1]


def im2col_gemm(gen: _Gen, geo: gemm.ConvGeometry) -> Kernel:
    node = gen.anchor()
    x_name = node.inputs[0]
    cin, k_size, columns = geo.cin_g, geo.cin_g * geo.taps, geo.columns
    out_sp, in_sp, spatial = geo.out_shape[2:], geo.x_shape[2:], geo.spatial
    forced = gen.params.anchor_tile if gen.params.anchor_variant == "tiled" else None
    tile = replace(gen.params.im2col_tile or forced or pick_tile(geo.cout_g, columns),
                   groups=1)
    gen.variant = (f"im2col {tile.bm}x{tile.bn}x{tile.bk} per-item {tile.tm}x{tile.tn}"
                   f"{' vec' if tile.contiguous else ''}")
    gen.use_scratch(k_size * columns)
    scr = gen.scratch_param
    total = k_size * columns
    s = Scope()
    s.emit("const int gid = get_global_id(0);")
    s.emit(f"if (gid >= {total}) return;")
    s.emit(f"int c = gid % {columns}; const int k = gid / {columns};")
    for d in reversed(range(spatial)):
        s.emit(f"const int o{d} = c % {out_sp[d]}; c /= {out_sp[d]};")
    s.emit("const int nb = c;")
    s.emit(f"const int ci = k / {geo.taps}; int q = k % {geo.taps};")
    for d in reversed(range(spatial)):
        s.emit(f"const int q{d} = q % {geo.kernel[d]}; q /= {geo.kernel[d]};")
    positions, conds = [], []
    for d in range(spatial):
        s.emit(f"const int p{d} = o{d} * {geo.strides[d]} - {geo.begin[d]} + "
               f"q{d} * {geo.dilations[d]};")
        checks = gemm._window_checks(f"p{d}", geo, d, gen.params.shape_stable)
        if checks:
            s.emit(f"const int c{d} = p{d} < 0 ? 0 : (p{d} < {in_sp[d] - 1} ? p{d} : "
                   f"{in_sp[d] - 1});")
        positions.append(gen.ivar(f"c{d}" if checks else f"p{d}", in_sp[d]))
        conds += checks
    value = gen.em.value(s, x_name, (gen.ivar("nb", geo.out_shape[0]), gen.ivar("ci", cin),
                                     *positions))
    if conds:
        value = f"(({' && '.join(conds)}) ? {value} : 0.0f)"
    s.emit(f"{scr}[gid] = {value};")
    first = gen.finish(s, total, gen.params.work_group)
    gen.next_kernel()
    problem, _ = gemm.conv_problem(gen, geo)

    def col_load(scope: Scope, slot: str, row: str, k: str) -> str:
        return f"{scr}[{k} * {columns} + {row}]"

    problem = replace(problem, b=gemm.Operand(columns, False, lambda *_: None, col_load))
    return replace(first, then=gemm.tiled(gen, problem, tile))

