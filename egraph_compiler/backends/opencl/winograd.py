"""Winograd F(2×2, 3×3) convolution: the ``winograd`` option (GPU devices).

A 3×3 stride-1 conv computes each 2×2 block of outputs ("tile") of one output
channel from a 4×4 input patch per input channel. Lavin and Gray's minimal filtering
writes it as ``Y = Aᵀ [Σ_ci (G g Gᵀ) ⊙ (Bᵀ d B)] A``: 16 multiplies per tile and
input channel instead of 36, i.e. 2.25× fewer multiply-adds. Over all tiles it is 16
independent products ``M[e] = U[e] · V[e]`` (``e`` one of the 16 transformed
positions, ``U[e]`` Cout × Cin, ``V[e]`` Cin × tiles) — the batched-GEMM formulation
CLBlast, TVM and ARM Compute Library use. Two forms, both options (`Winograd`):

**Batched** (``batched=True``; three launches of the block through scratch): a
work-item per (input channel, tile) writes ``V = Bᵀ d B`` (the prologue once per
loaded element); `gemm.tiled` computes the 16 products as one GEMM batched over
``e`` with its own tile parameters; a work-item per (output channel, tile) applies
``Aᵀ M A`` and stores through the epilogue. On an H200 this ran ResNet-18's 3×3
convs at batch 8 at 50-54 % of the FP32 peak counted as direct-conv FLOPs (the tiled
GEMM: 21-32 %), since each product keeps the GEMM's large register blocks.

**Fused** (one kernel; 13 % of peak on its own FLOPs there, kept as an option):

- ``U = G g Gᵀ`` is computed when the kernel is generated (`transform_weights`): a
  derived constant laid out ``[16][Cin][Cout]``, so a K step's weights load coalesced
  along output channels;
- a work-group owns ``bm`` output channels × ``bn`` tiles; each K step (``bk`` input
  channels) a work-item loads one tile's 4×4 patch of one channel (the block's
  prologue once per loaded element; padding reads a clamped element and selects
  zero), transforms it (``Bᵀ d B``: additions only) into local memory, and loads its
  share of ``U``; then every work-item accumulates its ``tm × tn`` (channel, tile)
  pairs at all 16 positions (16·tm·tn registers);
- after the K loop each work-item applies ``Aᵀ m A`` to each pair's 16 sums in
  registers and stores the ≤ 4 outputs that lie inside the map through the epilogue.

With ``groups`` > 1 (deep layers over a small map: few C tiles, long K) the work-groups
of one C tile split the input channels; each stores its partial outputs (the output
transform is linear) to scratch and a second launch sums them in a fixed order and
runs the epilogue, as `gemm.split_k` does.

Numerics: the transforms add and subtract values of like size (the F(2×2, 3×3)
matrices hold 0, ±1 and ±½), so the error stays within a few ulps of the direct sum
(`tests/backends/opencl/test_winograd.py` compares with onnxruntime).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from egraph_compiler.backends.opencl.emit import Scope
from egraph_compiler.fusion import index as ix

if TYPE_CHECKING:
    from egraph_compiler.backends.opencl.gemm import ConvGeometry, Tile
    from egraph_compiler.backends.opencl.kernels import Kernel, _Gen

UNROLL = "__attribute__((opencl_unroll_hint)) "
# F(2×2, 3×3): Y = Aᵀ [(G g Gᵀ) ⊙ (Bᵀ d B)] A (Lavin & Gray 2016)
G_MATRIX = ((1.0, 0.0, 0.0), (0.5, 0.5, 0.5), (0.5, -0.5, 0.5), (0.0, 0.0, 1.0))
DERIVED_SUFFIX = "@winograd"


@dataclass(frozen=True)
class Winograd:
    """``winograd`` parameters: a work-group's ``bm`` output channels × ``bn`` tiles,
    K step ``bk`` input channels, ``tm × tn`` (channel, tile) pairs per work-item, and
    ``groups`` work-groups splitting the input channels of one C tile."""

    bm: int
    bn: int
    bk: int
    tm: int
    tn: int
    groups: int = 1
    # the batched-GEMM formulation (three launches through scratch: input transform,
    # 16 products by `gemm.tiled` with this tile, output transform); ``contiguous`` and
    # ``slices`` as `gemm.Tile`'s
    batched: bool = False
    contiguous: bool = False
    slices: int = 1

    @property
    def work_group(self) -> int:
        return (self.bm // self.tm) * (self.bn // self.tn) * self.slices

    def tile(self) -> Tile:
        """The batched form's GEMM tile."""
        from egraph_compiler.backends.opencl.gemm import Tile

        return Tile(self.bm, self.bn, self.bk, self.tm, self.tn, self.contiguous, self.slices)

    def valid(self) -> bool:
        """Batched: a valid `gemm.Tile`, one K group. Fused: each work-item transforms
        patches of one tile (``wg % bn``) and loads weights of one output channel
        (``wg % bm``), the same number each; local memory within NVIDIA's 48 KiB;
        16·tm·tn accumulators within 128 registers."""
        if self.batched:
            return self.groups == 1 and self.tile().valid()
        wg = self.work_group
        return (not self.contiguous and self.slices == 1 and
                self.bm % self.tm == 0 and self.bn % self.tn == 0 and wg <= 256 and
                wg % self.bn == 0 and (self.bk * self.bn) % wg == 0 and wg % self.bm == 0 and
                16 * self.bk * (self.bm + self.bn) * 4 <= 40 * 1024 and
                16 * self.tm * self.tn <= 128 and self.groups >= 1)


def applies(geo: ConvGeometry) -> bool:
    """A 2-D 3×3 conv, stride 1, dilation 1, one group (any padding)."""
    return (geo.spatial == 2 and geo.group == 1 and geo.kernel == (3, 3) and
            geo.strides == (1, 1) and geo.dilations == (1, 1))


def tiles(geo: ConvGeometry) -> int:
    """2×2 output tiles over the batch (the GEMM's columns)."""
    return geo.out_shape[0] * -(-geo.out_shape[2] // 2) * -(-geo.out_shape[3] // 2)


def transform_weights(weights: np.ndarray) -> np.ndarray:
    """``U[e][ci][co] = (G g[co][ci] Gᵀ)[e // 4][e % 4]`` in float32, from ``weights``
    ``[Cout][Cin][3][3]``. Elementwise float64 arithmetic in a fixed order (no BLAS),
    so the same weights give the same bits on any machine (`benchmarks/gpu.py`
    rebuilds it there from the weights)."""
    g = np.asarray(weights, dtype=np.float64)
    rows = [sum(G_MATRIX[r][j] * g[:, :, j, :] for j in range(3) if G_MATRIX[r][j])
            for r in range(4)]  # (G g): 4 × [Cout, Cin, 3]
    u = np.empty((16, g.shape[1], g.shape[0]), dtype=np.float64)
    for r in range(4):
        for c in range(4):
            value = sum(G_MATRIX[c][j] * rows[r][:, :, j] for j in range(3) if G_MATRIX[c][j])
            u[r * 4 + c] = np.transpose(value)
    return np.ascontiguousarray(u.astype(np.float32))


def _derive_weights(gen: _Gen, name: str) -> str | None:
    """Replace constant ``name`` among the kernel's arguments by its transform (as
    `kernels._Gen.relayout` does for a permutation); None when it is not a constant."""
    constant = gen.view.constants.get(name)
    if constant is None or name not in gen.em.params:
        return None
    derived = name + DERIVED_SUFFIX
    gen.em.derived[derived] = transform_weights(constant)
    gen.args[gen.args.index(name)] = derived
    gen.em.params[derived] = gen.em.params[name]
    return derived


def _input_transform(d: list[list[str]]) -> list[str]:
    """``Bᵀ d B`` as 16 C expressions (row-major), from the 4×4 patch ``d``."""
    def bt(col: list[str]) -> list[str]:  # Bᵀ applied to a column of four
        return [f"({col[0]} - {col[2]})", f"({col[1]} + {col[2]})",
                f"({col[2]} - {col[1]})", f"({col[1]} - {col[3]})"]
    # t = Bᵀ d: column by column; then (t B) row by row = Bᵀ applied to each row of t
    t_cols = [bt([d[a][b] for a in range(4)]) for b in range(4)]
    t = [[t_cols[b][a] for b in range(4)] for a in range(4)]
    return [value for a in range(4) for value in bt(t[a])]


def winograd(gen: _Gen, geo: ConvGeometry, params: Winograd) -> Kernel | None:
    """The kernel, or None where the option does not apply (weights not a constant
    read once, not a 3×3 stride-1 conv, parameters that do not map)."""
    node = gen.anchor()
    x_name, w_name = node.inputs[0], node.inputs[1]
    bias = node.inputs[2] if len(node.inputs) > 2 and node.inputs[2] else None
    if not applies(geo) or not params.valid() or not gen.single_use(w_name):
        return None
    u_name = _derive_weights(gen, w_name)
    if u_name is None:
        return None
    if params.batched:
        return _batched(gen, geo, params, x_name, u_name, bias)
    batch, cout, out_h, out_w = geo.out_shape
    cin, (in_h, in_w) = geo.x_shape[1], geo.x_shape[2:]
    th, tw = -(-out_h // 2), -(-out_w // 2)
    n_tiles = batch * th * tw
    p = params
    wg = p.work_group
    n_mt, n_nt = -(-cout // p.bm), -(-n_tiles // p.bn)
    split = p.groups
    steps = -(-cin // p.bk)
    chunk = -(-steps // split) * p.bk  # each group's channels: whole K steps
    columns = batch * out_h * out_w
    gen.defines += [f"WBM {p.bm}", f"WBN {p.bn}", f"WBK {p.bk}", f"WTM {p.tm}", f"WTN {p.tn}",
                    f"WWM {p.bm // p.tm}", f"WWN {p.bn // p.tn}", f"WWG {wg}"]
    if split > 1:
        gen.use_scratch(split * cout * columns)
    s = Scope()
    s.emit("const int lid = get_local_id(0);")
    s.emit("int g = get_group_id(0);")
    if split > 1:
        s.emit(f"const int kg = g % {split}; g /= {split};")
    s.emit(f"const int nt = g % {n_nt}; const int mt = g / {n_nt};")
    s.emit("const int tx = lid % WWN; const int ty = lid / WWN;")
    s.emit("__local float Us[16][WBK][WBM];")
    s.emit("__local float Vs[16][WBK][WBN];")
    # the patch a work-item transforms: one tile (wg % bn == 0), rows and columns of
    # its 4×4 window, clamped, and their bounds checks — once, before the K loop
    s.emit("const int jj = lid % WBN;")
    s.emit("const int t_row = nt * WBN + jj;")
    s.emit(f"const bool t_in = t_row < {n_tiles};")
    s.emit(f"int tc = t_row < {n_tiles} ? t_row : {n_tiles - 1};")
    s.emit(f"const int t_x = tc % {tw}; tc /= {tw};")
    s.emit(f"const int t_y = tc % {th}; const int t_n = tc / {th};")
    row_ok: list[list[str]] = []
    col_ok: list[list[str]] = []
    for a in range(4):
        s.emit(f"const int h{a} = t_y * 2 - {geo.begin[0]} + {a};")
        s.emit(f"const int ch{a} = h{a} < 0 ? 0 : (h{a} < {in_h} ? h{a} : {in_h - 1});")
        row_ok.append(([f"h{a} >= 0"] if geo.begin[0] > a else []) + [f"h{a} < {in_h}"])
        s.emit(f"const int w{a} = t_x * 2 - {geo.begin[1]} + {a};")
        s.emit(f"const int cw{a} = w{a} < 0 ? 0 : (w{a} < {in_w} ? w{a} : {in_w - 1});")
        col_ok.append(([f"w{a} >= 0"] if geo.begin[1] > a else []) + [f"w{a} < {in_w}"])
    # the weights a work-item loads: one output channel (wg % bm == 0)
    s.emit("const int mm = lid % WBM;")
    s.emit("const int w_co = mt * WBM + mm;")
    s.emit(f"const bool w_in = w_co < {cout};")
    s.emit(f"const int w_cc = w_in ? w_co : {cout - 1};")
    s.emit("float acc[16][WTM][WTN];")
    s.emit(UNROLL + "for (int e = 0; e < 16; ++e) " + UNROLL + "for (int i = 0; i < WTM; ++i) " +
           UNROLL + "for (int j = 0; j < WTN; ++j) acc[e][i][j] = 0.0f;")
    step = Scope(s)
    ragged = cin % (p.bk * split) != 0 or split > 1
    u_param = gen.em.params[u_name]
    for slot in range(p.bk * p.bn // wg):
        body = Scope(step)
        body.emit(f"const int kk = lid / WBN + {slot * (wg // p.bn)};")
        body.emit("const int ci = k0 + kk;")
        ok = ["t_in"]
        if ragged:
            body.emit(f"const int cc = ci < {_k_stop(split, cin)} ? ci : {cin - 1};")
            ok.append(f"ci < {_k_stop(split, cin)}")
            channel = ix.IVar("cc", 0, cin - 1)
        else:
            channel = gen.ivar("ci", cin)
        n_var = gen.ivar("t_n", batch)
        patch = []
        for a in range(4):
            row = []
            for b in range(4):
                h_var, w_var = ix.IVar(f"ch{a}", 0, in_h - 1), ix.IVar(f"cw{b}", 0, in_w - 1)
                value = gen.em.value(body, x_name, (n_var, channel, h_var, w_var))
                conds = ok + row_ok[a] + col_ok[b]
                body.emit(f"const float d{a}{b} = ({' && '.join(conds)}) ? {value} : 0.0f;")
                row.append(f"d{a}{b}")
            patch.append(row)
        for e, expr in enumerate(_input_transform(patch)):
            body.emit(f"Vs[{e}][kk][jj] = {expr};")
        step.nest("", body)
    w_slots = 16 * p.bk * p.bm // wg
    load = Scope(step)
    load.emit(f"const int q = lid / WBM + r * {wg // p.bm};")
    load.emit("const int kk = q % WBK; const int e = q / WBK;")
    load.emit("const int ci = k0 + kk;")
    cond = "w_in"
    if ragged:
        cond += f" && ci < {_k_stop(split, cin)}"
        load.emit(f"const int cc = ci < {cin} ? ci : {cin - 1};")
        index = f"(e * {cin} + cc) * {cout} + w_cc"
    else:
        index = f"(e * {cin} + ci) * {cout} + w_cc"
    load.emit(f"Us[e][kk][mm] = {cond} ? {u_param}[{index}] : 0.0f;")
    step.nest(UNROLL + f"for (int r = 0; r < {w_slots}; ++r)", load)
    step.emit("barrier(CLK_LOCAL_MEM_FENCE);")
    inner = Scope(step)
    inner.emit("float av[WTM], bv[WTN];")
    inner.emit(UNROLL + "for (int i = 0; i < WTM; ++i) av[i] = Us[e][kk][ty + i * WWM];")
    inner.emit(UNROLL + "for (int j = 0; j < WTN; ++j) bv[j] = Vs[e][kk][tx + j * WWN];")
    inner.emit(UNROLL + "for (int i = 0; i < WTM; ++i) " + UNROLL +
               "for (int j = 0; j < WTN; ++j) acc[e][i][j] = mad(av[i], bv[j], acc[e][i][j]);")
    step.nest(UNROLL + "for (int e = 0; e < 16; ++e) " + UNROLL +
              "for (int kk = 0; kk < WBK; ++kk)", inner)
    step.emit("barrier(CLK_LOCAL_MEM_FENCE);")
    if split > 1:
        s.emit(f"const int k_first = kg * {chunk};")
        s.emit(f"const int k_stop = {cin} < k_first + {chunk} ? {cin} : k_first + {chunk};")
        s.nest("for (int k0 = k_first; k0 < k_stop; k0 += WBK)", step)
    else:
        s.nest(f"for (int k0 = 0; k0 < {cin}; k0 += WBK)", step)
    # output transform Aᵀ m A per pair, then the ≤ 4 outputs inside the map
    pair = Scope(s)
    pair.emit("const int co = mt * WBM + ty + i * WWM;")
    pair.emit("int t = nt * WBN + tx + j * WWN;")
    body = Scope(pair)
    body.emit(f"const int ox = (t % {tw}) * 2; t /= {tw};")
    body.emit(f"const int oy = (t % {th}) * 2; const int nb = t / {th};")
    _output_transform(body, lambda e: f"acc[{e}][i][j]")
    out = Scope(body)
    out.emit("const int oh = oy + q / 2; const int ow = ox + q % 2;")
    done = Scope(out)
    if split > 1:  # partial outputs to scratch [kg][co][column]; the second launch sums
        done.emit(f"{gen.scratch_param}[(kg * {cout} + co) * {columns} + "
                  f"(nb * {out_h} + oh) * {out_w} + ow] = y[q];")
    else:
        _store(gen, geo, done, bias, "y[q]")
    out.nest(f"if (oh < {out_h} && ow < {out_w})", done)
    body.nest("for (int q = 0; q < 4; ++q)", out)
    pair.nest(f"if (co < {cout} && t < {n_tiles})", body)
    s.nest(UNROLL + "for (int i = 0; i < WTM; ++i) " + UNROLL + "for (int j = 0; j < WTN; ++j)",
           pair)
    first = gen.finish(s, n_mt * n_nt * split * wg, wg)
    if split == 1:
        return first
    gen.next_kernel()
    total = cout * columns
    t = Scope()
    t.emit("const int gid = get_global_id(0);")
    t.emit(f"if (gid >= {total}) return;")
    t.emit(f"const int co = gid / {columns}; int c = gid % {columns};")
    t.emit(f"const int ow = c % {out_w}; c /= {out_w};")
    t.emit(f"const int oh = c % {out_h}; const int nb = c / {out_h};")
    t.emit("float sum = 0.0f;")
    t.emit(f"for (int kg = 0; kg < {split}; ++kg) sum += {gen.scratch_param}[kg * {total} + gid];")
    _store(gen, geo, t, bias, "sum")
    return replace(first, then=gen.finish(t, total, gen.params.work_group))


def _patch(gen: _Gen, s: Scope, geo: ConvGeometry, x_name: str, tile: str, channel: ix.IExpr,
           ok: list[str]) -> list[str]:
    """Load the 4×4 input patch of tile ``tile`` (a flat tile index variable) in
    ``channel`` into ``d{a}{b}`` (zero outside the input or where ``ok`` fails) and
    return ``Bᵀ d B``'s 16 expressions."""
    batch, _, out_h, out_w = geo.out_shape
    in_h, in_w = geo.x_shape[2:]
    th, tw = -(-out_h // 2), -(-out_w // 2)
    s.emit(f"int tc = {tile};")
    s.emit(f"const int t_x = tc % {tw}; tc /= {tw};")
    s.emit(f"const int t_y = tc % {th}; const int t_n = tc / {th};")
    patch = []
    for a in range(4):
        s.emit(f"const int h{a} = t_y * 2 - {geo.begin[0]} + {a};")
        s.emit(f"const int ch{a} = h{a} < 0 ? 0 : (h{a} < {in_h} ? h{a} : {in_h - 1});")
        s.emit(f"const int w{a} = t_x * 2 - {geo.begin[1]} + {a};")
        s.emit(f"const int cw{a} = w{a} < 0 ? 0 : (w{a} < {in_w} ? w{a} : {in_w - 1});")
    for a in range(4):
        row = []
        for b in range(4):
            h_var, w_var = ix.IVar(f"ch{a}", 0, in_h - 1), ix.IVar(f"cw{b}", 0, in_w - 1)
            value = gen.em.value(s, x_name, (gen.ivar("t_n", batch), channel, h_var, w_var))
            conds = ok + ([f"h{a} >= 0"] if geo.begin[0] > a else []) + [f"h{a} < {in_h}"] + \
                ([f"w{b} >= 0"] if geo.begin[1] > b else []) + [f"w{b} < {in_w}"]
            s.emit(f"const float d{a}{b} = ({' && '.join(conds)}) ? {value} : 0.0f;")
            row.append(f"d{a}{b}")
        patch.append(row)
    return _input_transform(patch)


def _batched(gen: _Gen, geo: ConvGeometry, params: Winograd, x_name: str, u_name: str,
             bias: str | None) -> Kernel:
    """The batched-GEMM formulation: ``V[e][ci][t]`` (scratch, offset 0) from a
    work-item per (input channel, tile); ``M[e][co][t] = Σ_ci U[e][ci][co]·V[e][ci][t]``
    (scratch, after V) by `gemm.tiled` over a batch of 16; ``Y = Aᵀ M A`` from a
    work-item per (output channel, tile), through the epilogue."""
    from egraph_compiler.backends.opencl import gemm

    batch, cout, out_h, out_w = geo.out_shape
    cin = geo.x_shape[1]
    n_tiles = tiles(geo)
    v_size, m_offset = 16 * cin * n_tiles, 16 * cin * n_tiles
    gen.use_scratch(v_size + 16 * cout * n_tiles)
    scr = gen.scratch_param
    s = Scope()
    s.emit("const int gid = get_global_id(0);")
    s.emit(f"if (gid >= {cin * n_tiles}) return;")
    s.emit(f"const int ci = gid / {n_tiles}; const int t = gid % {n_tiles};")
    for e, expr in enumerate(_patch(gen, s, geo, x_name, "t", gen.ivar("ci", cin), [])):
        s.emit(f"{scr}[{e * cin * n_tiles} + gid] = {expr};")
    first = gen.finish(s, cin * n_tiles, gen.params.work_group)
    gen.next_kernel()
    u_param = gen.em.params[u_name]

    def u_load(scope: Scope, slot: str, row: str, k: str) -> str:
        return f"{u_param}[(b0 * {cin} + {k}) * {cout} + {row}]"

    def v_load(scope: Scope, slot: str, row: str, k: str) -> str:
        return f"{scr}[(b0 * {cin} + {k}) * {n_tiles} + {row}]"

    def none(scope: Scope, slot: str, row: str) -> None:
        return None

    def m_store(scope: Scope, m: str, n: str, value: str) -> None:
        scope.emit(f"{scr}[{m_offset} + (b0 * {cout} + {m}) * {n_tiles} + {n}] = {value};")

    problem = gemm.Problem((16,), cin, gemm.Operand(cout, False, none, u_load),
                           gemm.Operand(n_tiles, False, none, v_load), m_store)
    second = gemm.tiled(gen, problem, params.tile())
    gen.next_kernel()
    t = Scope()
    t.emit("const int gid = get_global_id(0);")
    t.emit(f"if (gid >= {cout * n_tiles}) return;")
    t.emit(f"const int co = gid / {n_tiles}; int tt = gid % {n_tiles};")
    t.emit(f"const int ox = (tt % {-(-out_w // 2)}) * 2; tt /= {-(-out_w // 2)};")
    t.emit(f"const int oy = (tt % {-(-out_h // 2)}) * 2; const int nb = tt / {-(-out_h // 2)};")
    t.emit("float mv[16];")
    t.emit(UNROLL + f"for (int e = 0; e < 16; ++e) mv[e] = {scr}[{m_offset} + "
           f"e * {cout * n_tiles} + gid];")
    _output_transform(t, lambda e: f"mv[{e}]")
    out = Scope(t)
    out.emit("const int oh = oy + q / 2; const int ow = ox + q % 2;")
    done = Scope(out)
    _store(gen, geo, done, bias, "y[q]")
    out.nest(f"if (oh < {out_h} && ow < {out_w})", done)
    t.nest("for (int q = 0; q < 4; ++q)", out)
    third = gen.finish(t, cout * n_tiles, gen.params.work_group)
    return replace(first, then=replace(second, then=third))


def _output_transform(scope: Scope, m: Callable[[str], str]) -> None:
    """``y = Aᵀ m A``: the 2×2 outputs ``y[0..3]`` of a tile's 16 products, ``m(e)`` the
    text reading product ``e`` (rows m0 + m1 + m2 and m1 − m2 − m3, then the same over columns)."""
    scope.emit("float r0[4], r1[4];")
    scope.emit(UNROLL + "for (int c = 0; c < 4; ++c) { "
               f"r0[c] = {m('c')} + {m('4 + c')} + {m('8 + c')}; "
               f"r1[c] = {m('4 + c')} - {m('8 + c')} - {m('12 + c')}; }}")
    scope.emit("float y[4];")
    scope.emit("y[0] = r0[0] + r0[1] + r0[2]; y[1] = r0[1] - r0[2] - r0[3];")
    scope.emit("y[2] = r1[0] + r1[1] + r1[2]; y[3] = r1[1] - r1[2] - r1[3];")


def _k_stop(split: int, cin: int) -> str:
    """The end of this work-group's input channels (``k_stop`` with K groups)."""
    return "k_stop" if split > 1 else str(cin)


def _store(gen: _Gen, geo: ConvGeometry, scope: Scope, bias: str | None, value: str) -> None:
    """Output (nb, co, oh, ow) through the bias and the block's epilogue."""
    batch, cout, out_h, out_w = geo.out_shape
    co = gen.ivar("co", cout)
    if bias is not None:
        value = f"({value} + {gen.em.value(scope, bias, (co,))})"
    gen.declare_iteration(scope, (gen.ivar("nb", batch), co, gen.ivar("oh", out_h),
                                  gen.ivar("ow", out_w)))
    gen.epilogue(scope, value)
