"""Work-group-tiled GEMM kernels for the conv and matmul anchors (GPU variants).

Both anchors are one product ``C[b][m][n] = sum_k A[b][m][k] * B[b][k][n]`` once their
operands are described as `Operand`\\ s (how a work-item reads element (row, k)):

- MatMul/Gemm: A and B are the inputs (batch dims broadcast as ONNX says).
- Conv as implicit GEMM: A is the weights ``[Cout/g, Cin/g·k…]`` of group ``b``, B the
  input read through the window (rows = ``N·OH·OW``, batch folded into the columns, so
  a batch-8 conv has 8× the columns, not 8× the launches); a 1×1 conv is the same
  kernel with a one-tap window (no division in the tap decomposition).

Variants (`Tile`, `Gemv` are their parameters; `cost.options` lists and prices them):

- ``tiled``: a work-group computes a ``BM × BN`` tile of C; each K step stages
  ``BK`` columns of A and rows of B in local memory (every work-item loads
  ``BM·BK/WG`` elements of each; the block's prologue — BatchNorm, Relu, Clip… — is
  evaluated once per loaded element, there, not once per multiply), then each
  work-item accumulates a ``TM × TN`` register block, its rows and columns strided
  by ``BM/TM`` and ``BN/TN`` so local reads are conflict-free and stores coalesce.
  Ragged edges load zeros; the epilogue stores only inside C.
- ``gemv``: one row of one operand (MatMul with M = 1, a conv whose output is one
  pixel, e.g. squeeze-and-excitation): a work-group owns ``columns`` outputs and
  splits K among ``slices`` work-items each (split-K inside the work-group: partial
  sums meet in local memory, so no second launch or scratch buffer); the vector is
  staged in local memory one chunk at a time, its prologue once per element.

Slot setup: with the work-group size a multiple of the tile's fast extent, a
work-item's loads always hit the same row (or the same K offset) of its tile, so
everything that depends only on the row — a conv column's image, output row and
column, the window's top-left corner — is computed once before the K loop; the K
loop only splits ``k`` into channel and tap with compile-time divisors (defines:
`build.hoist_sizes` leaves preprocessor lines alone).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from egraph_compiler.backends.opencl import spelling as sp
from egraph_compiler.backends.opencl.conv_store import conv_store
from egraph_compiler.backends.opencl.emit import Scope
from egraph_compiler.fusion import index as ix

if TYPE_CHECKING:
    from egraph_compiler.backends.opencl.kernels import Kernel, _Gen

UNROLL = "__attribute__((opencl_unroll_hint)) "


@dataclass(frozen=True)
class Tile:
    """``tiled`` parameters: C tile ``bm × bn``, K step ``bk``, ``tm × tn`` per work-item."""

    bm: int
    bn: int
    bk: int
    tm: int
    tn: int
    # a work-item's rows and columns adjacent (read from local memory as one vector
    # each) rather than strided by the thread grid (scalar, conflict-free reads)
    contiguous: bool = False
    # split-K inside the work-group: ``slices`` copies of the thread grid each take
    # every slices-th K step of the tile; partial sums meet in local memory
    slices: int = 1
    # split-K across work-groups: ``groups`` work-groups per C tile each take one
    # contiguous K range and store their partial tile to scratch; a second launch
    # sums the partials and runs the epilogue (for few C tiles over a long K)
    groups: int = 1

    @property
    def tile_threads(self) -> int:
        return (self.bm // self.tm) * (self.bn // self.tn)

    @property
    def work_group(self) -> int:
        return self.tile_threads * self.slices

    def valid(self) -> bool:
        wg = self.tile_threads
        # 256: NVIDIA's driver allows no more for these kernels (registers per SM)
        return self.work_group <= 256 and self.groups >= 1 and (self.bm % self.tm == 0 and self.bn % self.tn == 0 and
                (self.bm * self.bk) % wg == 0 and (self.bk * self.bn) % wg == 0 and
                wg % self.bk == 0 and wg % self.bm == 0 and wg % self.bn == 0 and
                (not self.contiguous or (self.tm in (2, 4, 8) and self.tn in (2, 4, 8))))


@dataclass(frozen=True)
class Gemv:
    """``gemv`` parameters: outputs per work-group and K slices per output."""

    columns: int
    slices: int

    @property
    def work_group(self) -> int:
        return self.columns * self.slices


# (scope, slot name, row variable) -> None: pre-loop code for one load slot
Setup = Callable[[Scope, str, str], None]
# (scope, slot name, row variable, k variable) -> C expression of the element
Load = Callable[[Scope, str, str, str], str]


@dataclass
class Operand:
    """How a work-item reads element (row, k) of one operand; row and k are in range
    (clamped by the caller, which selects zero outside)."""

    rows: int
    k_fast: bool  # consecutive k are adjacent in memory (load along k)
    setup: Setup
    load: Load
    k_size: int = 0
    # (value, index(row, k)): the element as the block's value walk reads it, where the
    # operand is a value read at an index (`sgemm.vector_view` proves float4 loads on it)
    view: tuple[str, Callable[[ix.IExpr, ix.IExpr], tuple[ix.IExpr, ...]]] | None = None


@dataclass
class Problem:
    """``C[batch][m][n]``; ``store(scope, m, n, value)`` runs the epilogue of one element
    (batch variables ``b0, b1, …`` are bound by the kernel)."""

    batch: tuple[int, ...]
    k: int
    a: Operand  # rows = M
    b: Operand  # rows = N
    store: Callable[[Scope, str, str, str], None]


def bind_tile_indices(s: Scope, split: int, n_nt: int, n_mt: int, batch: tuple[int, ...]) -> None:
    """A tiled GEMM work-group's K group ``kg`` (split-K), column and row tiles ``nt``,
    ``mt`` and batch indices from its flat group id (`tiled` and `sgemm` alike)."""
    s.emit("int g = get_group_id(0);")
    if split > 1:
        s.emit(f"const int kg = g % {split}; g /= {split};")
    s.emit(f"const int nt = g % {n_nt}; g /= {n_nt};")
    s.emit(f"const int mt = g % {n_mt}; g /= {n_mt};")
    if split > 1:
        s.emit("const int gb = g;")  # the flat batch index, for the scratch store
    _bind_batch(s, "g", batch)


def _bind_batch(s: Scope, rest: str, batch: tuple[int, ...]) -> None:
    for d in reversed(range(len(batch))):
        if batch[d] > 1:
            s.emit(f"const int b{d} = {rest} % {batch[d]}; {rest} /= {batch[d]};")
        else:
            s.emit(f"const int b{d} = 0;")


def _clamp(expr: str, high: int) -> str:
    return f"({expr} < {high} ? {expr} : {high})"


def tiled(gen: _Gen, problem: Problem, tile: Tile) -> Kernel:
    m_size, n_size, k_size = problem.a.rows, problem.b.rows, problem.k
    wg, ks = tile.tile_threads, tile.slices  # the slot mapping below is per slice
    n_mt, n_nt = -(-m_size // tile.bm), -(-n_size // tile.bn)
    batch_total = math.prod(problem.batch)
    split = tile.groups
    step_k = tile.bk * ks
    # each K group's range: whole steps, so only the last group is ragged
    steps = -(-k_size // step_k)
    chunk = -(-steps // split) * step_k
    groups = batch_total * n_mt * n_nt * split
    gen.defines += [f"BM {tile.bm}", f"BN {tile.bn}", f"BK {tile.bk}", f"TM {tile.tm}",
                    f"TN {tile.tn}", f"WM {tile.bm // tile.tm}", f"WN {tile.bn // tile.tn}",
                    f"WG {wg}", f"KS {ks}"]
    s = Scope()
    if ks > 1:
        s.emit("const int slice = get_local_id(0) / WG;")
        s.emit("const int lid = get_local_id(0) % WG;")
    else:
        s.emit("const int lid = get_local_id(0);")
    bind_tile_indices(s, split, n_nt, n_mt, problem.batch)
    s.emit("const int tx = lid % WN; const int ty = lid / WN;")
    # a row pad against bank conflicts where stores go down a column (k-fast loads);
    # contiguous tiles keep rows a whole number of vectors, aligned
    pad_a = ("TM" if tile.contiguous else "1") if problem.a.k_fast else "0"
    pad_b = ("TN" if tile.contiguous else "1") if problem.b.k_fast else "0"
    align = ""
    if tile.contiguous:  # a define: `build.hoist_sizes` would make a literal an argument
        gen.defines.append("VALIGN 32")
        align = " __attribute__((aligned(VALIGN)))"
    s.emit(f"__local float As_[KS][BK][BM + {pad_a}]{align};")
    s.emit(f"__local float Bs_[KS][BK][BN + {pad_b}]{align};")
    mine = "slice" if ks > 1 else "0"  # this slice's tiles
    s.emit(f"__local float (*As)[BM + {pad_a}] = As_[{mine}];")
    s.emit(f"__local float (*Bs)[BN + {pad_b}] = Bs_[{mine}];")
    slots: list[tuple[str, Operand, int, str, str]] = []
    for name, operand, extent, base in (("a", problem.a, tile.bm, "mt * BM"),
                                        ("b", problem.b, tile.bn, "nt * BN")):
        rows = problem.a.rows if name == "a" else problem.b.rows
        for slot in range((extent * tile.bk) // wg):
            tag = f"{name}{slot}"
            if operand.k_fast:  # a slot reads one K offset, rows step by WG / BK
                s.emit(f"const int {tag}_kk = lid % BK;")
                s.emit(f"const int {tag}_rr = lid / BK + {slot * (wg // tile.bk)};")
            else:  # a slot reads one row, K offsets step by WG / extent
                s.emit(f"const int {tag}_rr = lid % {extent};")
                s.emit(f"const int {tag}_kk = lid / {extent} + {slot * (wg // extent)};")
            s.emit(f"const int {tag}_row = {base} + {tag}_rr;")
            s.emit(f"const bool {tag}_in = {tag}_row < {rows};")
            s.emit(f"const int {tag}_r = {_clamp(f'{tag}_row', rows - 1)};")
            operand.setup(s, tag, f"{tag}_r")
            slots.append((tag, operand, rows, "As" if name == "a" else "Bs", name))
    s.emit("float acc[TM][TN];")
    s.emit(UNROLL + "for (int i = 0; i < TM; ++i) " + UNROLL +
           "for (int j = 0; j < TN; ++j) acc[i][j] = 0.0f;")
    step = Scope(s)
    for tag, operand, _rows, array, _name in slots:
        body = Scope(step)
        body.emit(f"const int k = k0 + {tag}_kk;")
        if k_size % (tile.bk * ks):
            body.emit(f"const int kc = {_clamp('k', k_size - 1)};")
            ok = f"{tag}_in && k < {k_size}"
        else:
            body.emit("const int kc = k;")
            ok = f"{tag}_in"
        value = operand.load(body, tag, f"{tag}_r", "kc")
        body.emit(f"{array}[{tag}_kk][{tag}_rr] = {ok} ? {value} : 0.0f;")
        step.nest("", body)
    step.emit("barrier(CLK_LOCAL_MEM_FENCE);")
    inner = Scope(step)
    inner.emit("float av[TM], bv[TN];")
    if tile.contiguous:  # one vector read each from local memory
        inner.emit(f"const float{tile.tm} a_v = *(__local const float{tile.tm}*)&As[kk][ty * TM];")
        inner.emit(f"const float{tile.tn} b_v = *(__local const float{tile.tn}*)&Bs[kk][tx * TN];")
        inner.emit(" ".join(f"av[{i}] = a_v.s{i:x};" for i in range(tile.tm)))
        inner.emit(" ".join(f"bv[{j}] = b_v.s{j:x};" for j in range(tile.tn)))
    else:
        inner.emit(UNROLL + "for (int i = 0; i < TM; ++i) av[i] = As[kk][ty + i * WM];")
        inner.emit(UNROLL + "for (int j = 0; j < TN; ++j) bv[j] = Bs[kk][tx + j * WN];")
    inner.emit(UNROLL + "for (int i = 0; i < TM; ++i) " + UNROLL +
               "for (int j = 0; j < TN; ++j) acc[i][j] = " +
               sp.multiply_add("av[i]", "bv[j]", "acc[i][j]") + ";")
    step.nest(UNROLL + "for (int kk = 0; kk < BK; ++kk)", inner)
    step.emit("barrier(CLK_LOCAL_MEM_FENCE);")
    if split > 1:
        s.emit(f"const int k_first = kg * {chunk};")
        s.emit(f"const int k_stop = {k_size} < k_first + {chunk} ? {k_size} : k_first + {chunk};")
        first, stop = "k_first + ", "k_stop"
    else:
        first, stop = "", str(k_size)
    if ks > 1:  # every slice runs the same number of steps: the barriers stay uniform
        s.nest(f"for (int k0 = {first}slice * BK; k0 < {stop} + slice * BK; k0 += BK * KS)", step)
        s.emit("__local float red[KS - 1][TM * TN][WG];")
        s.emit("if (slice > 0) {")
        s.emit("  " + UNROLL + "for (int i = 0; i < TM; ++i) " + UNROLL +
               "for (int j = 0; j < TN; ++j) red[slice - 1][i * TN + j][lid] = acc[i][j];")
        s.emit("}")
        s.emit("barrier(CLK_LOCAL_MEM_FENCE);")
        s.emit("if (slice > 0) return;")
        s.emit("for (int r = 0; r < KS - 1; ++r) " + UNROLL + "for (int i = 0; i < TM; ++i) " +
               UNROLL + "for (int j = 0; j < TN; ++j) acc[i][j] += red[r][i * TN + j][lid];")
    else:
        s.nest(f"for (int k0 = {first.removesuffix(' + ') or '0'}; k0 < {stop}; k0 += BK)", step)
    rows = Scope(s)
    rows.emit("const int m = mt * BM + ty * TM + i;" if tile.contiguous else
              "const int m = mt * BM + ty + i * WM;")
    row_in = Scope(rows)
    cols = Scope(row_in)
    cols.emit("const int n = nt * BN + tx * TN + j;" if tile.contiguous else
              "const int n = nt * BN + tx + j * WN;")
    done = Scope(cols)
    if split > 1:  # partial tile to scratch [kg][batch][m][n]; the second launch sums them
        done.emit(f"{gen.scratch_param}[((kg * {batch_total} + gb) * {m_size} + m) * {n_size} + n] "
                  "= acc[i][j];")
    else:
        problem.store(done, "m", "n", "acc[i][j]")
    cols.nest(f"if (n < {n_size})", done)
    row_in.nest(UNROLL + "for (int j = 0; j < TN; ++j)", cols)
    rows.nest(f"if (m < {m_size})", row_in)
    s.nest(UNROLL + "for (int i = 0; i < TM; ++i)", rows)
    return gen.finish(s, groups * tile.work_group, tile.work_group)


def tiled_or_split(gen: _Gen, problem: Problem, tile: Tile) -> Kernel:
    """The ``tiled`` option: one launch, or two when the tile splits K across groups."""
    return split_k(gen, problem, tile) if tile.groups > 1 else tiled(gen, problem, tile)


def split_k(gen: _Gen, problem: Problem, tile: Tile) -> Kernel:
    """Split-K across work-groups: the tiled kernel over ``tile.groups`` K ranges into
    a scratch buffer, then a launch that sums them and runs the epilogue (two launches of one block)."""
    m_size, n_size = problem.a.rows, problem.b.rows
    batch_total = math.prod(problem.batch)
    gen.use_scratch(tile.groups * batch_total * m_size * n_size)
    return sum_partials(gen, problem, tile.groups, tiled(gen, problem, tile))


def sum_partials(gen: _Gen, problem: Problem, k_groups: int, partial: Kernel) -> Kernel:
    """``partial`` (K groups' partial tiles in scratch ``[kg][batch][m][n]``) followed by the
    launch that sums them in a fixed order and runs the epilogue."""
    m_size, n_size = problem.a.rows, problem.b.rows
    batch_total = math.prod(problem.batch)
    gen.next_kernel()
    total = batch_total * m_size * n_size
    s = Scope()
    s.emit("const int gid = get_global_id(0);")
    s.emit(f"if (gid >= {total}) return;")
    s.emit(f"const int n = gid % {n_size}; const int m = (gid / {n_size}) % {m_size};")
    s.emit(f"int g = gid / {m_size * n_size};")
    _bind_batch(s, "g", problem.batch)
    s.emit("float sum = 0.0f;")
    # fixed order over the K groups: the result does not depend on scheduling
    s.emit(f"for (int kg = 0; kg < {k_groups}; ++kg) sum += "
           f"{gen.scratch_param}[kg * {total} + gid];")
    problem.store(s, "m", "n", "sum")
    return replace(partial, then=gen.finish(s, total, gen.params.work_group))


def gemv(gen: _Gen, batch: tuple[int, ...], k_size: int, vector: Operand, matrix: Operand,
         store: Callable[[Scope, str, str], None], params: Gemv) -> Kernel:
    """``out[b][r] = sum_k vector[b][k] * matrix[b][r][k]`` (see the module docstring);
    ``store(scope, r, value)``."""
    wg, rows = params.work_group, matrix.rows
    n_rt = -(-rows // params.columns)
    groups = math.prod(batch) * n_rt
    gen.defines += [f"GC {params.columns}", f"KS {params.slices}", f"WG {wg}"]
    s = Scope()
    s.emit("const int lid = get_local_id(0);")
    s.emit("int g = get_group_id(0);")
    s.emit(f"const int rt = g % {n_rt}; g /= {n_rt};")
    _bind_batch(s, "g", batch)
    # along k in memory: neighbouring work-items take neighbouring k (coalesced)
    stride = 1 if matrix.k_fast else params.columns
    if matrix.k_fast:
        s.emit("const int slice = lid % KS; const int col = lid / KS;")
    else:
        s.emit("const int slice = lid / GC; const int col = lid % GC;")
    s.emit("__local float vs[WG];")
    s.emit("__local float red[WG];")
    s.emit("const int row = rt * GC + col;")
    s.emit(f"const int r = {_clamp('row', rows - 1)};")
    vector.setup(s, "v", "0")
    matrix.setup(s, "w", "r")
    s.emit("float accv = 0.0f;")
    chunk = Scope(s)
    stage = Scope(chunk)
    stage.emit("const int k = k0 + lid;")
    stage.emit(f"const int kc = {_clamp('k', k_size - 1)};")
    value = vector.load(stage, "v", "0", "kc")
    stage.emit(f"vs[lid] = k < {k_size} ? {value} : 0.0f;")
    chunk.nest("", stage)
    chunk.emit("barrier(CLK_LOCAL_MEM_FENCE);")
    chunk.emit(f"const int kn = {k_size} - k0 < WG ? {k_size} - k0 : WG;")
    mac = Scope(chunk)
    mac.emit("const int k = k0 + kk;")
    w = matrix.load(mac, "w", "r", "k")
    mac.emit(f"accv = {sp.multiply_add('vs[kk]', w, 'accv')};")
    chunk.nest("for (int kk = slice; kk < kn; kk += KS)", mac)
    chunk.emit("barrier(CLK_LOCAL_MEM_FENCE);")
    s.nest(f"for (int k0 = 0; k0 < {k_size}; k0 += WG)", chunk)
    s.emit("red[lid] = accv;")
    s.emit("barrier(CLK_LOCAL_MEM_FENCE);")
    s.emit("for (int h = KS / 2; h > 0; h >>= 1) {")
    s.emit(f"  if (slice < h) red[lid] += red[lid + h * {stride}];")
    s.emit("  barrier(CLK_LOCAL_MEM_FENCE);")
    s.emit("}")
    done = Scope(s)
    store(done, "row", "red[lid]")
    s.nest(f"if (slice == 0 && row < {rows})", done)
    return gen.finish(s, groups * wg, wg)


# -- operands of the two anchors --------------------------------------------------------

def _value_operand(gen: _Gen, name: str, index: Callable[[ix.IExpr, ix.IExpr], tuple[ix.IExpr, ...]],
                   rows: int, k_size: int, k_fast: bool) -> Operand:
    """An operand read through the block's value walk (its prologue included) at
    ``index(row, k)``."""
    def setup(scope: Scope, slot: str, row: str) -> None:
        return None

    def load(scope: Scope, slot: str, row: str, k: str) -> str:
        row_var = ix.IVar(row, 0, rows - 1) if rows > 1 else 0
        k_var = ix.IVar(k, 0, k_size - 1) if k_size > 1 else 0
        return gen.em.value(scope, name, index(row_var, k_var))

    return Operand(rows, k_fast, setup, load, k_size, (name, index))


def matmul_problem(gen: _Gen) -> tuple[Problem, dict[str, int]]:
    """The MatMul/Gemm anchor as a `Problem`, and its sizes (m, n, k, batch)."""
    node = gen.anchor()
    a_name, b_name = node.inputs[0], node.inputs[1]
    a_shape, b_shape = gen.view.shape(a_name), gen.view.shape(b_name)
    out_shape = gen.view.shape(node.outputs[0])
    is_gemm = node.op == "Gemm"
    trans_a = is_gemm and bool(node.attr("transA", 0))
    trans_b = is_gemm and bool(node.attr("transB", 0))
    a_vec, b_vec = len(a_shape) == 1, len(b_shape) == 1
    m_size = 1 if a_vec else (a_shape[-1] if trans_a else a_shape[-2])
    k_size = a_shape[-1] if (a_vec or not trans_a) else a_shape[-2]
    n_size = 1 if b_vec else (b_shape[-2] if trans_b else b_shape[-1])
    batch = tuple(out_shape[:len(out_shape) - (0 if a_vec else 1) - (0 if b_vec else 1)])
    # A [..., m, k] times a B shared by every batch (a Linear on a [batch, seq, hidden]
    # or NHWC activation): one GEMM of (batch · m) rows, not `batch` GEMMs of m rows —
    # a 14-row GEMM per image picks a thin tile and leaves most of the device idle
    # (ConvNeXt's 14×14 stage ran at 11-13 % of peak)
    # (one row per batch stays a batched GEMV: the ``gemv`` option)
    row_dims = (*batch, m_size) if batch and not a_vec and not trans_a and m_size > 1 and \
        len(b_shape) <= 2 and tuple(a_shape[:-2]) == batch else ()
    if row_dims:
        m_size, batch = math.prod(row_dims), ()
    bidx = tuple(gen.ivar(f"b{d}", size) for d, size in enumerate(batch))
    a_batch = ix.broadcast_index(bidx, batch, a_shape[:-2]) if batch and not a_vec else ()
    b_batch = ix.broadcast_index(bidx, batch, b_shape[:-2]) if batch and not b_vec else ()

    def a_index(m: ix.IExpr, k: ix.IExpr) -> tuple[ix.IExpr, ...]:
        if a_vec:
            return (k,)
        if row_dims:
            return (*ix.delinearize(m, row_dims), k)
        return (*a_batch, k, m) if trans_a else (*a_batch, m, k)

    def b_index(n: ix.IExpr, k: ix.IExpr) -> tuple[ix.IExpr, ...]:
        if b_vec:
            return (k,)
        return (*b_batch, n, k) if trans_b else (*b_batch, k, n)

    a = _value_operand(gen, a_name, a_index, m_size, k_size, not trans_a)
    b = _value_operand(gen, b_name, b_index, n_size, k_size, trans_b)

    def store(scope: Scope, m: str, n: str, value: str) -> None:
        m_var, n_var = gen.ivar(m, m_size), gen.ivar(n, n_size)
        if is_gemm:
            alpha, beta = float(node.attr("alpha", 1.0)), float(node.attr("beta", 1.0))
            value = f"({sp.literal(alpha, 'float32')} * {value})"
            if len(node.inputs) > 2 and node.inputs[2] and beta != 0.0:
                c_name = node.inputs[2]
                c_index = ix.broadcast_index((m_var, n_var), (m_size, n_size),
                                             gen.view.shape(c_name))
                value = f"({value} + {sp.literal(beta, 'float32')} * " \
                        f"{gen.em.value(scope, c_name, c_index)})"
        rows = ix.delinearize(m_var, row_dims) if row_dims else \
            (*bidx, *(() if a_vec else (m_var,)))
        out_index = (*rows, *(() if b_vec else (n_var,)))
        gen.declare_iteration(scope, out_index)
        gen.epilogue(scope, value)

    sizes = {"m": m_size, "n": n_size, "k": k_size,
             "batch": math.prod(batch)}
    return Problem(batch, k_size, a, b, store), sizes


@dataclass(frozen=True)
class ConvGeometry:
    x_shape: tuple[int, ...]
    out_shape: tuple[int, ...]
    kernel: tuple[int, ...]
    strides: tuple[int, ...]
    dilations: tuple[int, ...]
    begin: tuple[int, ...]
    group: int

    @property
    def spatial(self) -> int:
        return len(self.kernel)

    @property
    def cout_g(self) -> int:
        return self.out_shape[1] // self.group

    @property
    def cin_g(self) -> int:
        return self.x_shape[1] // self.group

    @property
    def taps(self) -> int:
        return math.prod(self.kernel)

    @property
    def columns(self) -> int:
        return self.out_shape[0] * math.prod(self.out_shape[2:])


def conv_problem(gen: _Gen, geo: ConvGeometry) -> tuple[Problem, dict[str, int]]:
    """The Conv anchor as an implicit GEMM (see the module docstring)."""
    node = gen.anchor()
    x_name, w_name = node.inputs[0], node.inputs[1]
    cout, cout_g, cin_g = geo.out_shape[1], geo.cout_g, geo.cin_g
    k_size = cin_g * geo.taps
    spatial = geo.spatial
    out_sp = geo.out_shape[2:]
    in_sp = geo.x_shape[2:]
    batch = (geo.group,)
    # compile-time divisors for the k split (the K loop's only divisions)
    gen.defines += [f"KTAPS {geo.taps}"] + [f"KQ{d} {geo.kernel[d]}" for d in range(spatial)]
    w_read = gen.relayout(w_name, (1, *range(2, 2 + spatial), 0)) \
        if gen.single_use(w_name) and geo.group == 1 else None

    def split_k(scope: Scope, k: str) -> tuple[ix.IExpr, list[str]]:
        """``k`` as (input channel, taps): ci = k / KTAPS, then the taps row-major."""
        if geo.taps == 1:
            return gen.ivar(k, cin_g), []
        scope.emit(f"const int ci = {k} / KTAPS; int q = {k} % KTAPS;")
        taps = []
        for d in reversed(range(spatial)):
            if d:
                scope.emit(f"const int q{d} = q % KQ{d}; q /= KQ{d};")
            else:
                scope.emit(f"const int q{d} = q;")
            taps.append(f"q{d}")
        return gen.ivar("ci", cin_g), list(reversed(taps))

    def w_setup(scope: Scope, slot: str, row: str) -> None:
        scope.emit(f"const int {slot}_co = b0 * {cout_g} + {row};")

    def w_load(scope: Scope, slot: str, row: str, k: str) -> str:
        if w_read is not None:  # [Cin/g, k…, Cout]: element k * Cout + co, no split
            return f"{gen.em.params[w_read]}[{k} * {cout} + {slot}_co]"
        ci, taps = split_k(scope, k)
        qs = [ix.IVar(t, 0, geo.kernel[d] - 1) for d, t in enumerate(taps)]
        return gen.em.value(scope, w_name, (ix.IVar(f"{slot}_co", 0, cout - 1), ci, *qs))

    def x_setup(scope: Scope, slot: str, row: str) -> None:
        scope.emit(f"int {slot}_c = {row};")
        for d in reversed(range(spatial)):
            scope.emit(f"const int {slot}_o{d} = {slot}_c % {out_sp[d]}; {slot}_c /= {out_sp[d]};")
            scope.emit(f"const int {slot}_p{d} = {slot}_o{d} * {geo.strides[d]} - {geo.begin[d]};")
        scope.emit(f"const int {slot}_n = {slot}_c;")

    def x_load(scope: Scope, slot: str, row: str, k: str) -> str:
        ci, taps = split_k(scope, k)
        channel = ix.add(ix.mul(ix.IVar("b0", 0, geo.group - 1), cin_g), ci) \
            if geo.group > 1 else ci
        positions, conds = [], []
        for d in range(spatial):
            tap = f" + {taps[d]} * {geo.dilations[d]}" if taps else ""
            scope.emit(f"const int p{d} = {slot}_p{d}{tap};")
            checks = _window_checks(f"p{d}", geo, d, gen.params.shape_stable)
            if checks:
                scope.emit(f"const int c{d} = p{d} < 0 ? 0 : {_clamp(f'p{d}', in_sp[d] - 1)};")
            positions.append(gen.ivar(f"c{d}" if checks else f"p{d}", in_sp[d]))
            conds += checks
        n_var = gen.ivar(f"{slot}_n", geo.out_shape[0])
        value = gen.em.value(scope, x_name, (n_var, channel, *positions))
        return f"(({' && '.join(conds)}) ? {value} : 0.0f)" if conds else value

    # the relaid weights [Cin/g, k…, Cout] read at (co, k): a view along the rows
    w_view = (w_read, lambda co, k: (*ix.delinearize(k, (cin_g, *geo.kernel)), co)) \
        if w_read is not None else None
    a = Operand(cout_g, w_read is None, w_setup, w_load, k_size, w_view)
    b = Operand(geo.columns, False, x_setup, x_load)
    sizes = {"m": cout_g, "n": geo.columns, "k": k_size, "batch": geo.group}
    return Problem(batch, k_size, a, b, conv_store(gen, geo, f"b0 * {cout_g}")), sizes


def _window_checks(position: str, geo: ConvGeometry, d: int, always: bool = False) -> list[str]:
    """Bounds checks for a window position (none on a side no window crosses;
    ``always`` keeps the high side's, `KernelParams.shape_stable`)."""
    checks = [f"{position} >= 0"] if geo.begin[d] > 0 else []
    last = (geo.out_shape[2 + d] - 1) * geo.strides[d] - geo.begin[d] + \
        (geo.kernel[d] - 1) * geo.dilations[d]
    if always or last >= geo.x_shape[2 + d]:
        checks.append(f"{position} < {geo.x_shape[2 + d]}")
    return checks
