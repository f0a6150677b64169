"""``conv-gemm``: a k×k conv as an implicit GEMM on `sgemm`'s register-blocked core (GPU class).

``C[co][n] = Σ_k W[co][k] · X[k][n]`` with M = output channels, N = batch × OH × OW and
K = Cin × KH × KW, as `gemm.conv_problem` reads a conv, but with the K index ordered
**tap-major** (``k = (kh·KW + kw)·Cin + ci``) and the B tile gathered from the input
through the window map rather than by dividing each element's ``k``:

- the weights are a constant re-laid out at generation as ``[KH·KW·Cin][Cout]``: A's
  element (co, k) sits at ``k·Cout + co``, so A tiles load as ``float4`` along the output
  channels (`sgemm.vector_view` proves it) into ``As[k][m]`` with no transpose;
- a work-item's B slots all read one output column (the work-group is a multiple of the
  tile's width), so the column's image, top-left window corner and bounds are computed
  once before the K loop;
- where ``bk`` divides Cin every K step lies inside one tap: the tap (kh, kw) and the
  step's first channel are one division per step for the whole work-group, a column's
  window position and its bounds check one add and compare per step, and each slot's
  element is the column's pixel of channel ``ci0 + kk`` (the block's prologue —
  BatchNorm, Relu — evaluated once per loaded element, through the value walk); where
  it does not (ragged channel counts: a stem's 3 channels) each slot splits its own
  ``k`` into tap and channel;
- then `sgemm`'s schedule: ``bm × bn`` C tiles of ``tm × tn`` register blocks read from
  local memory as ``float4``\\ s, double buffering (the next K tile fetched into
  registers while this one is multiplied; one barrier per step), no bounds checks on
  whole tiles; the conv's epilogue (bias, Relu, a residual Add) runs in the store loop;
- with K groups, each stores its partial tile to scratch as ``float4`` runs of 4 columns
  where the columns are whole runs (they were scalar stores: on an H100, session 12,
  ResNet-18's 7²-output conv with its sum launch 0.048 -> 0.041 ms, 28.7 -> 34.0 % of
  FP32 peak, ResNet-50's 0.075 -> 0.068; the other four stride-2 convs equal or faster;
  the sum launch reading float4 runs too, 4 elements per work-item, was slower on all six:
  .gpu/conv15/logs/2).

ResNet's stride-2 3×3 convs at batch 8 ran at 22–25 % of an H200's FP32 peak as
``tiled`` (`gemm.py`: per-element tap division, small register blocks) and slower as an
explicit im2col (`im2col.py`: the column matrix's round trip). As ``conv-gemm`` (the cost
model's picks, `benchmarks/gpu_conv.py` on an H200): ResNet-18's 33 / 32 / 27 %,
ResNet-50's 49 / 37 / 34 % (in the model after the third sweep: 38.5 / 31.0 / 29.9 % and
49.3 / 36.1 / 38.1 %); mostly with K split over 2–12 work-groups, which measured
faster even where the grid already filled the device. `sgemm` on `gemm.conv_problem`
(per-element k division, channel-major K) ran the same shapes at 7–33 %.
It is offered where Winograd is not (the stride-1 3×3 convs ran faster as
``winograd-gemm``), and not in shape-stable builds.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from egraph_compiler.backends.opencl import gemm
from egraph_compiler.backends.opencl.conv_store import conv_store
from egraph_compiler.backends.opencl.emit import Scope
from egraph_compiler.backends.opencl.gemm import Operand
from egraph_compiler.backends.opencl.sgemm import VARIANT as SGEMM
from egraph_compiler.backends.opencl.sgemm import (
    VECTOR,
    KRange,
    Sgemm,
    schedule,
    store_elements,
    store_runs,
)
from egraph_compiler.fusion import index as ix

if TYPE_CHECKING:
    from egraph_compiler.backends.opencl.kernels import Kernel, _Gen

VARIANT = "conv-gemm"


@dataclass(frozen=True)
class ConvGemm:
    """``conv-gemm`` parameters: the `sgemm.Sgemm` tile its schedule runs (C tile, K
    step, register block, and K ranges across work-groups ``groups``: split-K for the
    late layers' few C tiles, partials through scratch, `gemm.sum_partials`)."""

    tile: Sgemm

    @property
    def work_group(self) -> int:
        return self.tile.work_group

    def valid(self) -> bool:
        # the gather shares one column setup among a work-item's slots
        return self.tile.valid() and self.work_group % self.tile.bn == 0

    def describe(self) -> str:
        return VARIANT + self.tile.describe().removeprefix(SGEMM)


def applies(gen: _Gen, geo: gemm.ConvGeometry) -> bool:
    """A 2-D conv of one group with a window larger than 1×1 (a 1×1 conv is a plain
    GEMM), constant weights read once (re-laid out at generation), sizes known here
    (not a shape-stable build: bounds checks and the tap split are decided per shape)."""
    w_name = gen.anchor().inputs[1]
    static = all(type(d) is int for d in (*geo.x_shape, *geo.out_shape))
    return static and not gen.params.shape_stable and geo.spatial == 2 and geo.group == 1 and \
        geo.taps > 1 and w_name in gen.view.constants and gen.single_use(w_name)


def conv_gemm(gen: _Gen, geo: gemm.ConvGeometry, params: ConvGemm) -> Kernel | None:
    """The ``conv-gemm`` kernel (module docstring); None where it does not apply."""
    if not applies(gen, geo) or not params.valid():
        return None
    node = gen.anchor()
    w_name = node.inputs[1]
    cout, k_size = geo.out_shape[1], geo.cin_g * geo.taps
    constant = gen.view.constants.get(w_name)
    if constant is None or w_name not in gen.em.params:
        return None
    # [KH·KW·Cin][Cout]: tap-major K rows (two dims, so a load's offset is k·Cout + co
    # with no division; the tag is no `relayout` recipe)
    w_read = gen.derive(w_name, np.transpose(constant, (2, 3, 1, 0)).reshape(k_size, cout),
                        f"2310p{cout}k")
    w_param = gen.em.params[w_read]

    def w_setup(scope: Scope, slot: str, row: str) -> None:
        return None

    def w_load(scope: Scope, slot: str, row: str, k: str) -> str:
        return f"{w_param}[{k} * {cout} + {row}]"

    weights = Operand(cout, False, w_setup, w_load, k_size,
                      (w_read, lambda co, k: (k, co)))
    store = conv_store(gen, geo, None)
    if params.tile.groups == 1:
        return _kernel(gen, geo, params.tile, weights, store)
    gen.use_scratch(params.tile.groups * cout * geo.columns)
    columns = Operand(geo.columns, False, w_setup, w_load, k_size)  # its rows only
    problem = gemm.Problem((1,), k_size, weights, columns, store)
    return gemm.sum_partials(gen, problem, params.tile.groups,
                             _kernel(gen, geo, params.tile, weights, store))


def _vector_partials(geo: gemm.ConvGeometry) -> bool:
    """Whether K groups store their partial tiles to scratch as ``float4`` runs of
    columns: the columns are whole runs of 4, so a work-item's run of 4 (`sgemm._runs`,
    aligned) stays inside one row of scratch."""
    return geo.columns % VECTOR == 0


class _Gather:
    """B's global → register → local-memory path: element (k, column n) of the implicit
    column matrix read from the input through the window (`_Loader`'s interface)."""

    array = "Bs"
    width = 1

    def __init__(self, gen: _Gen, geo: gemm.ConvGeometry, extent: int, bk: int,
                 threads: int) -> None:
        self.gen, self.geo, self.extent, self.bk, self.threads = gen, geo, extent, bk, threads
        self.columns = geo.columns
        self.slots = extent * bk // threads
        self.stride = extent
        self.k_size = geo.cin_g * geo.taps
        # every K step inside one tap: the tap split once per step
        self.per_step = geo.cin_g % bk == 0

    def setup(self, s: Scope) -> None:
        geo = self.geo
        out_sp = geo.out_shape[2:]
        # threads % extent == 0 (`ConvGemm.valid`): slot j's column is slot 0's
        s.emit(f"const int g_rr = lid % {self.extent};")
        s.emit(f"const int g_row = nt * {self.extent} + g_rr;")
        if self.columns % self.extent:
            s.emit(f"const bool g_in = g_row < {self.columns};")
            s.emit(f"int g_c = g_row < {self.columns - 1} ? g_row : {self.columns - 1};")
        else:
            s.emit("int g_c = g_row;")
        for d in reversed(range(geo.spatial)):
            s.emit(f"const int g_o{d} = g_c % {out_sp[d]}; g_c /= {out_sp[d]};")
            s.emit(f"const int g_p{d} = g_o{d} * {geo.strides[d]} - {geo.begin[d]};")
        s.emit("const int g_n = g_c;")
        for slot in range(self.slots):
            s.emit(f"const int b{slot}_kk = lid / {self.extent} + {slot * self.threads // self.extent};")
            s.emit(f"float b{slot}_v = 0.0f;")

    def _window(self, s: Scope, taps: list[str], guard: list[str]) -> tuple[list[ix.IExpr], list[str]]:
        """The column's input position at tap ``taps`` (clamped where a window crosses
        an edge) and the checks that it is inside."""
        geo, gen = self.geo, self.gen
        positions, conds = [], list(guard)
        for d in range(geo.spatial):
            s.emit(f"const int y{d} = g_p{d} + {taps[d]} * {geo.dilations[d]};")
            checks = gemm._window_checks(f"y{d}", geo, d)
            size = geo.x_shape[2 + d]
            if checks:
                s.emit(f"const int yc{d} = y{d} < 0 ? 0 : (y{d} < {size - 1} ? y{d} : {size - 1});")
            positions.append(gen.ivar(f"yc{d}" if checks else f"y{d}", size))
            conds += checks
        return positions, conds

    def _taps(self, s: Scope, k: str) -> None:
        """``k`` split into channel ``ci0`` and tap ``q0``, ``q1`` (tap-major K)."""
        geo = self.geo
        s.emit(f"const int tap = {k} / {geo.cin_g}; const int ci0 = {k} - tap * {geo.cin_g};")
        s.emit(f"const int q0 = tap / {geo.kernel[1]}; const int q1 = tap - q0 * {geo.kernel[1]};")

    def fetch(self, s: Scope, k0: str) -> None:
        gen, geo = self.gen, self.geo
        x_name = gen.anchor().inputs[0]
        guard = ["g_in"] if self.columns % self.extent else []
        n_var = gen.ivar("g_n", geo.out_shape[0])
        body = Scope(s)
        if self.per_step:
            self._taps(body, f"({k0})")
            positions, conds = self._window(body, ["q0", "q1"], guard)
            if conds:
                body.emit(f"const bool ok = {' && '.join(conds)};")
            for slot in range(self.slots):
                one = Scope(body)
                one.emit(f"const int ci = ci0 + b{slot}_kk;")
                value = gen.em.value(one, x_name, (n_var, gen.ivar("ci", geo.cin_g), *positions))
                one.emit(f"b{slot}_v = ok ? {value} : 0.0f;" if conds else f"b{slot}_v = {value};")
                body.nest("", one)
        else:  # each slot its own tap and channel
            for slot in range(self.slots):
                one = Scope(body)
                one.emit(f"const int k = {k0} + b{slot}_kk;")
                ragged = self.k_size % self.bk != 0
                one.emit(f"const int kc = k < {self.k_size - 1} ? k : {self.k_size - 1};" if ragged
                         else "const int kc = k;")
                self._taps(one, "kc")
                positions, conds = self._window(one, ["q0", "q1"],
                                                guard + ([f"k < {self.k_size}"] if ragged else []))
                value = gen.em.value(one, x_name, (n_var, gen.ivar("ci0", geo.cin_g), *positions))
                one.emit(f"b{slot}_v = ({' && '.join(conds)}) ? {value} : 0.0f;" if conds
                         else f"b{slot}_v = {value};")
                body.nest("", one)
        s.nest("", body)

    def place(self, s: Scope, buffer: str) -> None:
        for slot in range(self.slots):
            s.emit(f"Bs[{buffer}][b{slot}_kk][g_rr] = b{slot}_v;")


def _kernel(gen: _Gen, geo: gemm.ConvGeometry, tile: Sgemm, weights: Operand,
            store: Callable[[Scope, str, str, str], None]) -> Kernel:
    """`sgemm.schedule` (one K range per work-group) with the window gather as B."""
    m_size, n_size, k_size = geo.cout_g, geo.columns, weights.k_size
    threads = tile.work_group
    split = tile.groups
    steps = -(-k_size // tile.bk)
    # whole K steps per group (only the last is short), whole taps per group where a
    # step lies inside one tap
    per_group = -(-steps // split)
    if split > 1:
        k_range = KRange((f"const int k_first = kg * {per_group * tile.bk};",
                          f"const int k_steps = {steps} - kg * {per_group} < {per_group} ? "
                          f"{steps} - kg * {per_group} : {per_group};"),
                         "k_first + 0", f"k_first + ahead * {tile.bk}", "k_steps",
                         after_accumulators=True)
    else:
        k_range = KRange((), "0", f"ahead * {tile.bk}", str(steps), guarded=False)
    s, rows_a, cols_b = schedule(gen, tile, (m_size, n_size, k_size), (1,), weights,
                                 lambda: _Gather(gen, geo, tile.bn, tile.bk, threads), k_range, "CG")

    def store_element(done: Scope, value: str) -> None:
        if split > 1:  # the partial tile to scratch [kg][m][n]
            done.emit(f"{gen.scratch_param}[(kg * {m_size} + m) * {n_size} + n] = {value};")
        else:
            store(done, "m", "n", value)

    if split > 1 and _vector_partials(geo):
        _store_partial_runs(s, gen.scratch_param, tile, rows_a, cols_b, m_size, n_size)
    else:
        store_elements(s, tile, rows_a, cols_b, m_size, n_size, store_element)
    return gen.finish(s, -(-m_size // tile.bm) * -(-n_size // tile.bn) * split * threads, threads)


def _store_partial_runs(s: Scope, scratch: str, tile: Sgemm, rows_a: list[str], cols_b: list[str],
                        m_size: int, n_size: int) -> None:
    """A K group's partial tile to scratch ``[kg][m][n]`` a run of 4 columns at a time (a
    ``float4`` store)."""
    def emit_run(out: Scope, guard: str, values: list[str]) -> None:
        out.emit(f"{'if (' + guard + ') ' if guard else ''}"
                 f"*(__global float4*)&{scratch}[(kg * {m_size} + m) * {n_size} + n] = "
                 f"(float4)({', '.join(values)});")

    store_runs(s, tile, rows_a, cols_b, m_size, n_size, emit_run)
