"""Anchor kernel options and the cost model that picks one per shape.

Every conv and matmul anchor has several kernel *options* — a variant and its
parameters — listed as plain data by `options` (a selection stage may choose among
them; `choose` takes the cheapest by this model today):

- ``direct``: the register-tiled kernel of `kernels.py` (a work-item per TC output
  channels × TW columns, or TM × TN of a matmul; no local memory, no barrier);
- ``tiled``: the work-group-tiled GEMM of `gemm.py` (`gemm.Tile` parameters);
- ``sgemm``: the register-blocked GEMM of `sgemm.py` (float4 views, double buffering,
  8 × 8 blocks; `sgemm.Sgemm`), for MatMul/Gemm on devices whose model prices it (GPU);
- ``conv-gemm``: a k×k conv (one group, constant weights) as an implicit GEMM on
  sgemm's register blocks, its B tile gathered through the window (`conv_gemm.py`;
  `_conv_gemm_options`), on devices whose model prices it (GPU), where Winograd is not;
- ``gemv``: split-K inside a work-group for a single output row (`gemm.Gemv`);
- row kernels (`row_options`): ``row`` or ``row-split`` (several work-groups per row,
  `rows.RowSplit`), for rows few and long;
- ``conv-lanes`` (CPU class only): a pointwise conv as a GEMM whose vector lanes are
  consecutive output pixels (`cpu_conv.py`), where PoCL vectorises the work-group;
- ``conv-vec`` (CPU class only): a k×k conv whose work-item holds explicit vectors of
  consecutive output pixels, weights packed per channel block (`cpu_window.py`);
- ``conv-channels`` (CPU class only): a 1×1 conv as a GEMM whose vectors are 16
  consecutive output channels, a pixel's input broadcast (`cpu_channels.py`);
- ``gemv-packed`` (CPU class only): a one-row product whose work-items each stream
  their own packed block of the constant weights (`cpu_gemv.py`);
- ``depthwise``: a 2-D depthwise conv's ``rows × width`` output block per work-item
  over a register window (`depthwise.Depthwise`); its efficiency grows with the
  multiply-adds per loaded element, ``rows·width·taps / window``, saturating at
  ``depthwise_reuse_full``. On PoCL (this machine, loaded) it measured 1.3–4× faster
  than direct on MobileNet-sized layers (144×56² and 32×112² 3×3, 240×14² 5×5).

The model (documented, deliberately simple): a variant reaches a fraction
``efficiency`` of the device's FP32 peak when the device is full, so

    time = padded FLOPs / (peak × efficiency × fill)     (gemv: bytes / bandwidth / fill)

where *padded* counts the tile's ragged edges as work and *fill* is the fraction of
the device's slots the grid occupies, counted in whole waves (a grid of 1.1 waves
fills 55 %). A ``tiled`` work-group's efficiency grows with its register block's
arithmetic intensity (``tm·tn / (tm + tn)`` FMAs per local-memory read, saturating
at 2, i.e. 4 × 4). The efficiencies are per device class (`DEVICES`); the GPU
numbers are an H100 through NVIDIA's OpenCL: direct kernels measured at 0.2–3.7 %
of peak (DESIGN.md §7), tiled ones at 2–27 %. Four resident 256-item work-groups
per SM, the saturation at 4 × 4, the 15 % for vector reads, split-K only for grids
under half a wave, ``reuse_full`` and ``slice_cost`` were fitted (a grid search) to
a sweep of all 22 tiles over ResNet-18's conv/Gemm launches at batch 1 and 8 on an
H100: the model's picks sum to 3.43 ms where the per-launch fastest sum to 3.25 ms
(`benchmarks/gpu.py` prints the sweep, the model's tile beside the fastest). The
CPU numbers are PoCL on this project's x86 machines, where a work-group barrier
splits the work-item loop and spills the register block: on the test convs tiled
ran 9–60× slower than direct (a one-pixel 1×1 conv was the exception, 2–6× faster),
gemv 4–23× slower on a 2048 → 1000 Gemm; `tests/backends/opencl/test_gemm.py`
checks the CPU model keeps ``direct``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from egraph_compiler.backends.opencl.conv_gemm import VARIANT as VARIANT_CONV_GEMM
from egraph_compiler.backends.opencl.conv_gemm import ConvGemm
from egraph_compiler.backends.opencl.cpu_channels import CHANNEL_CONVS, ChannelConv
from egraph_compiler.backends.opencl.cpu_channels import LANES as CHANNEL_LANES
from egraph_compiler.backends.opencl.cpu_channels import VARIANT as VARIANT_CHANNEL_CONV
from egraph_compiler.backends.opencl.cpu_conv import CHUNK_MADS, LANES_CONVS, LanesConv
from egraph_compiler.backends.opencl.cpu_conv import VARIANT as VARIANT_LANES_CONV
from egraph_compiler.backends.opencl.cpu_depthwise import VARIANT as VARIANT_VEC_DEPTHWISE
from egraph_compiler.backends.opencl.cpu_depthwise import VecDepthwise, load_width
from egraph_compiler.backends.opencl.cpu_gemv import PACKED_GEMVS, PackedGemv
from egraph_compiler.backends.opencl.cpu_gemv import VARIANT as VARIANT_PACKED_GEMV
from egraph_compiler.backends.opencl.cpu_window import POINTWISE_VECS, VEC_CONVS, VecConv
from egraph_compiler.backends.opencl.cpu_window import VARIANT as VARIANT_VEC_CONV
from egraph_compiler.backends.opencl.depthwise import Depthwise, lanes_group
from egraph_compiler.backends.opencl.gemm import Gemv, Tile
from egraph_compiler.backends.opencl.rows import RowSplit, chunking
from egraph_compiler.backends.opencl.sgemm import VARIANT as VARIANT_SGEMM
from egraph_compiler.backends.opencl.sgemm import Sgemm
from egraph_compiler.backends.opencl.window import Window
from egraph_compiler.backends.opencl.winograd import Winograd
from egraph_compiler.fusion.profile_db import CostModel
from egraph_compiler.fusion.view import GraphView


@dataclass(frozen=True)
class DeviceModel:
    """What the cost model knows about a device class."""

    name: str
    compute_units: int
    peak_gflops: float
    bandwidth_gbs: float
    items_per_unit: int  # work-items a compute unit needs in flight to run at full rate
    groups_per_unit: int  # resident 256-item work-groups per compute unit (tiled)
    efficiency: dict[str, float] = field(default_factory=dict)
    # tiled: global-memory reuse of a tile (bm·bn / (bm + bn) outputs per element
    # loaded) at which it stops limiting, and the cost of each extra split-K slice
    reuse_full: float = 32.0
    slice_cost: float = 0.0
    # depthwise: multiply-adds per loaded element at which loads stop limiting
    depthwise_reuse_full: float = 4.0
    # what one more launch costs (split-K across groups, multi-group rows), µs
    launch_us: float = 5.0
    # GFLOP/s of a fused prologue's re-evaluations (`fusion_cost`)
    prologue_gflops: float = 1000.0
    # G operator evaluations/s of a pointwise kernel re-evaluating a broadcast operand
    # (`fusion.recompute`; 0: not priced, Table 3.3's verdict stands)
    recompute_gevals: float = 0.0
    # window: multiply-adds per loaded element at which loads stop limiting; how much
    # slower the direct kernel runs a conv of several taps than its FLOPs say
    window_reuse_full: float = 3.0
    direct_tap_penalty: float = 1.0
    # depthwise ``lanes`` (`depthwise.Depthwise`): what each of its small work-groups
    # costs a compute unit, µs (no "depthwise-lanes" efficiency: not offered)
    lanes_group_us: float = 0.0
    # depthwise register block: the vector registers a work-item's accumulators,
    # weights and window row may take before they spill (0: not modelled), and how
    # much slower a spilling block runs (PoCL, AVX-512: a 4×4 block of a 5×5 conv,
    # 49 values, ran 8-11× slower than the lanes form; a 4×4 block of a 3×3, 31, did not)
    registers: int = 0
    spill_penalty: float = 1.0
    # the direct kernel's columns per work-item for a one-row product (0: the default)
    gemv_columns: int = 0
    # ``conv-vec`` (`cpu_window.py`), µs per 8-lane vector multiply-add, per input
    # element loaded or placed in a tap's vector, per output element's epilogue
    # (empty: not offered)
    vec_conv_us: tuple[float, ...] = ()
    # ``conv-channels`` (`cpu_channels.py`), µs per 8-lane vector multiply-add, per
    # input element loaded (and broadcast), per output element stored (empty: not offered)
    channel_conv_us: tuple[float, ...] = ()
    # ``gemv-packed`` (`cpu_gemv.py`): its time as a fraction of the ``direct`` gemv
    # block's estimate for the same product (0: not offered)
    packed_gemv_rate: float = 0.0
    # ``depthwise-vec`` (`cpu_depthwise.py`): its time as a fraction of the best
    # ``depthwise`` option's estimate for the same stride-2 conv (0: not offered)
    vec_depthwise_rate: float = 0.0
    # whether fusion may give a row kernel its input as a second output (`fusion.
    # structure.stored_row_input`: a pre-LN residual sum stored by its LayerNorm)
    stored_row_inputs: bool = False
    # whether fusion prices an elementwise operator between a pointwise block and a
    # MatMul/Conv epilogue (`fusion.epilogues.left_to_anchor`)
    anchor_epilogues_priced: bool = False
    # whether fusion tries each Split as Slices its readers fuse (`fusion.splits`)
    split_as_slices: bool = False


DEVICES = {
    "cpu": DeviceModel("cpu", compute_units=2, peak_gflops=150.0, bandwidth_gbs=20.0,
                       items_per_unit=64, groups_per_unit=1,
                       efficiency={"direct": 0.25, "tiled": 0.04, "gemv": 0.02,
                                   "depthwise": 0.1, "depthwise-lanes": 0.25, "row": 0.5,
                                   "window": 0.5, "conv-lanes": 0.5},
                       lanes_group_us=0.2, registers=32, spill_penalty=6.0, gemv_columns=16,
                       depthwise_reuse_full=6.0, launch_us=30.0, prologue_gflops=300.0,
                       recompute_gevals=2.0,
                       direct_tap_penalty=25.0, vec_conv_us=(8.6e-5, 1.04e-4, 8.4e-4),
                       channel_conv_us=(7.0e-5, 1.0e-4, 2.5e-4),
                       packed_gemv_rate=0.8, vec_depthwise_rate=0.7),
    "gpu": DeviceModel("gpu", compute_units=132, peak_gflops=51_000.0, bandwidth_gbs=2_000.0,
                       items_per_unit=1024, groups_per_unit=4,
                       efficiency={"direct": 0.03, "tiled": 0.25, "gemv": 0.6,
                                   "depthwise": 0.05, "row": 0.6, "window": 0.01,
                                   "winograd": 0.1, VARIANT_SGEMM: 0.355,
                                   VARIANT_CONV_GEMM: 0.341},
                       reuse_full=8.0, slice_cost=0.0, launch_us=4.0, prologue_gflops=12_750.0,
                       stored_row_inputs=True, anchor_epilogues_priced=True,
                       split_as_slices=True),
}

TILES = (
    Tile(128, 128, 8, 8, 8), Tile(64, 128, 8, 4, 8), Tile(128, 64, 8, 8, 4),
    Tile(64, 64, 16, 4, 4), Tile(32, 64, 16, 2, 4), Tile(64, 32, 16, 4, 2),
    Tile(32, 32, 16, 2, 2), Tile(16, 64, 16, 1, 4), Tile(64, 16, 16, 4, 1),
    Tile(16, 16, 16, 1, 1),
    # the same register blocks read from local memory as vectors (see `gemm.Tile`)
    Tile(128, 128, 8, 8, 8, True), Tile(64, 128, 8, 4, 8, True), Tile(64, 64, 16, 4, 4, True),
    Tile(32, 64, 16, 2, 4, True), Tile(64, 32, 16, 4, 2, True), Tile(32, 32, 16, 2, 2, True),
    # split-K inside the work-group, for few output tiles over a long K (late CNN layers)
    Tile(32, 32, 16, 4, 4, True, 4), Tile(16, 16, 16, 2, 2, True, 4),
    Tile(32, 64, 16, 4, 4, True, 2), Tile(64, 32, 16, 4, 4, True, 2),
    Tile(16, 32, 16, 2, 2, True, 2), Tile(32, 32, 16, 2, 4, True, 2),
    # split-K across work-groups (two launches through scratch), when M·N is small
    Tile(32, 32, 16, 2, 2, True, 1, 4), Tile(32, 32, 16, 2, 2, True, 1, 8),
    Tile(64, 64, 16, 4, 4, True, 1, 4), Tile(16, 16, 16, 1, 1, False, 1, 16),
    Tile(32, 32, 16, 4, 4, True, 2, 4),
)
# the register-blocked GEMM (`sgemm.Sgemm`): C tile, K step, block per work-item, K groups
SGEMMS = (Sgemm(128, 128, 8, 8, 8), Sgemm(128, 128, 16, 8, 8), Sgemm(128, 64, 16, 8, 4),
          Sgemm(64, 128, 16, 4, 8), Sgemm(128, 64, 16, 8, 8), Sgemm(64, 128, 16, 8, 8),
          Sgemm(64, 64, 16, 8, 8), Sgemm(64, 64, 16, 4, 4), Sgemm(32, 64, 16, 4, 4),
          Sgemm(64, 32, 16, 4, 4), Sgemm(32, 32, 16, 4, 4),
          Sgemm(64, 64, 16, 4, 4, 2), Sgemm(64, 64, 16, 4, 4, 4), Sgemm(128, 64, 16, 8, 4, 2),
          Sgemm(128, 64, 16, 8, 4, 4), Sgemm(128, 64, 8, 8, 8), Sgemm(64, 128, 8, 8, 8))
# a work-item's registers beyond its accumulators, operand values and prefetch slots
# (indices, addresses), in `_sgemm_estimate`'s count of the work-groups an SM holds
SGEMM_OTHER_REGISTERS = 24
SGEMM_FULL_WARPS = 24  # warps an SM needs in flight to hide a work-group's first fetch and epilogue
# warps an SM needs in flight for ``sgemm``'s K loop to run at its rate, by register
# block (8 × 8: 64 independent multiply-adds per loaded pair, so fewer warps hide latency)
SGEMM_LOOP_WARPS = {(8, 8): 6, (8, 4): 8, (4, 8): 8, (4, 4): 12}
SGEMM_STEP_OVERHEAD = 1.0  # a work-group's first fetch and epilogue, in K steps
SGEMM_EPILOGUE_K = 1  # and its store loop per C element and epilogue operator, in multiply-adds
# K groups only over at least this much K each (256 had kept BERT/GPT-2's M = 512
# out-projection and context GEMMs off 4 groups of 192 K: 0.044 / 0.033 ms where they ran
# 0.034 / 0.026 on an H200; the replay of all 31 shapes 2.866 -> 2.846 ms, fastest 2.805)
SGEMM_SPLIT_MIN_K = 128
GEMVS = (Gemv(32, 8), Gemv(8, 32), Gemv(64, 4))
ROW_SPLITS = (RowSplit(2), RowSplit(4), RowSplit(8), RowSplit(16), RowSplit(32), RowSplit(64))
WINDOWS = (Window(16, 2, 4), Window(16, 4, 4), Window(16, 2, 8), Window(16, 1, 8),
           Window(8, 4, 8), Window(8, 2, 4), Window(16, 1, 4))
DEPTHWISES = (Depthwise(1, 4), Depthwise(1, 8), Depthwise(2, 4), Depthwise(2, 8),
              Depthwise(4, 4), Depthwise(4, 8), Depthwise(1, 16))
# Winograd F(2×2, 3×3) (`winograd.Winograd`): channels × tiles per work-group, K step,
# pairs per work-item, K groups (the last three: few C tiles over a long K)
WINOGRADS = (Winograd(32, 32, 8, 2, 2), Winograd(16, 32, 8, 1, 2), Winograd(32, 32, 8, 4, 2),
             Winograd(32, 64, 4, 2, 4), Winograd(16, 16, 16, 1, 1),
             Winograd(32, 32, 8, 2, 2, 4), Winograd(32, 32, 8, 2, 2, 8),
             Winograd(16, 32, 8, 1, 2, 4),
             # the batched-GEMM form: the 16 products as one batched tiled GEMM
             Winograd(64, 64, 16, 4, 4, batched=True, contiguous=True),
             Winograd(64, 32, 16, 4, 2, batched=True, contiguous=True),
             Winograd(128, 64, 8, 8, 4, batched=True),
             Winograd(128, 128, 8, 8, 8, batched=True, contiguous=True),
             Winograd(32, 32, 16, 4, 4, batched=True, contiguous=True, slices=4),
             Winograd(64, 32, 16, 4, 4, batched=True, contiguous=True, slices=2))
# a work-group per block of rows, a work-item per column (CPU: PoCL vectorises it)
DEPTHWISE_LANES = (Depthwise(4, 1, True), Depthwise(7, 1, True), Depthwise(14, 1, True),
                   Depthwise(28, 1, True))


@dataclass(frozen=True)
class Direct:
    """``direct`` parameters `dnnr tune` may set: a work-item's register block, ``a × b``
    = output channels × columns of a conv (depthwise: ``b`` columns only), or ``tm × tn``
    of a matmul (`KernelParams.conv_tile_*`, `matmul_tile_*` otherwise)."""

    a: int
    b: int


@dataclass(frozen=True)
class Option:
    """One way to generate an anchor: ``variant`` with ``params``, and its estimate."""

    variant: str
    params: Tile | Gemv | Direct | Depthwise | RowSplit | Window | Winograd | LanesConv | \
        VecConv | ChannelConv | VecDepthwise | Sgemm | ConvGemm | PackedGemv | None
    estimate_us: float

    def describe(self) -> str:
        if isinstance(self.params, Tile):
            p = self.params
            return f"tiled {p.bm}x{p.bn}x{p.bk} per-item {p.tm}x{p.tn}" + \
                (" vec" if p.contiguous else "") + (f" split-k {p.slices}" if p.slices > 1 else "") + \
                (f" k-groups {p.groups}" if p.groups > 1 else "")
        if isinstance(self.params, Sgemm):
            return self.params.describe()
        if isinstance(self.params, Gemv):
            return f"gemv {self.params.columns} outputs x {self.params.slices} k-slices"
        if isinstance(self.params, Direct):
            return f"direct {self.params.a}x{self.params.b}"
        if isinstance(self.params, Depthwise):
            return f"depthwise {self.params.rows}x{self.params.width}" + \
                (" lanes" if self.params.lanes else "")
        if isinstance(self.params, Window):
            p = self.params
            return f"window {p.channels}x{p.rows}x{p.width}"
        if isinstance(self.params, Winograd):
            p = self.params
            return ("winograd-gemm " if p.batched else "winograd ") + \
                f"{p.bm}x{p.bn}x{p.bk} per-item {p.tm}x{p.tn}" + (" vec" if p.contiguous else "") + \
                (f" split-k {p.slices}" if p.slices > 1 else "") + \
                (f" k-groups {p.groups}" if p.groups > 1 else "")
        if isinstance(self.params, RowSplit):
            return f"row-split {self.params.groups}"
        if isinstance(self.params, LanesConv | VecConv | ChannelConv | VecDepthwise | ConvGemm):
            return self.params.describe()
        return self.variant


def shape_key(op: str, sizes: dict[str, int], tiled_ok: bool, gemv_side: str | None) -> str:
    """The shape class of an anchor, as `dnnr tune`'s database keys it: the operator and
    its product ``batch × m × n × k`` (every option applies to every member of a class;
    two convs of one class may differ in window, which the class ignores)."""
    return (f"{op} m{sizes['m']} n{sizes['n']} k{sizes['k']} b{sizes['batch']}" +
            ("" if tiled_ok else " depthwise") + (f" gemv-{gemv_side}" if gemv_side else ""))


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _fill(units: int, slots: int) -> float:
    """Fraction of the device a grid of ``units`` keeps busy, in whole waves."""
    if units <= 0:
        return 1.0
    return units / (_cdiv(units, slots) * slots)


def options(device: DeviceModel, m: int, n: int, k: int, batch: int,
            direct_items: int, tiled_ok: bool, gemv_side: str | None,
            tiles: Sequence[Tile] = TILES, depthwise: bool = False,
            window_taps: int = 0, width: int = 0, winograd: bool = False,
            stride: int = 1, sgemm: bool = False, epilogue_ops: int = 0,
            conv_gemm: bool = False) -> list[Option]:
    """Every option for ``C[batch][m][n] = A·B`` over ``k``, priced for ``device``.

    ``direct_items``: work-items of the direct kernel; ``tiled_ok``: the tiled GEMM
    applies (not depthwise); ``gemv_side``: "m" or "n" when that side is one row;
    ``tiles``: the tiled GEMM's parameters to price (`dnnr tune` passes a larger space);
    ``depthwise``: a 2-D depthwise conv (``batch`` = channels, ``k`` = taps), which
    the specialised kernel of `depthwise.py` applies to; ``window_taps``: the taps of a
    dense 2-D conv with constant weights (``m`` = output channels, ``k`` = Cin·taps),
    which `window.py` applies to (0: not one); ``width``: the output's columns (0:
    square, ``√n``), which the depthwise ``lanes`` groups span; ``winograd``: a 3×3
    stride-1 conv of one group with constant weights (``m`` = Cout, ``n`` = N·OH·OW,
    ``k`` = Cin·9, square maps assumed), which `winograd.py` applies to on devices
    whose model has a "winograd" efficiency; ``stride``: a conv's column stride;
    ``sgemm``: offer the register-blocked GEMM (`sgemm.py`) on devices whose model has
    its efficiency (its callers: MatMul/Gemm anchors outside shape-stable builds; it was
    measured on those only); ``conv_gemm``: a k×k conv ``conv_gemm.applies`` to (``m`` =
    Cout, ``k`` = Cin·taps), offered ``conv-gemm`` on devices whose model has its
    efficiency (`_conv_gemm_options`)."""
    eff, peak = device.efficiency, device.peak_gflops * 1e3  # FLOP per µs
    flops = 2.0 * batch * m * n * k
    # the direct kernel redoes a window position's arithmetic and padding checks per
    # input channel, tap and column: on PoCL 3×3 and 7×7 convs ran 25-35× slower than
    # the window kernel (1×1 convs, with no padding, do not pay it)
    # (depthwise convs of several taps alike: on PoCL the direct kernel ran a 3×3 one
    # at 1 GFLOP/s, 25× slower than the depthwise kernels)
    taps_penalty = device.direct_tap_penalty if window_taps > 1 or (depthwise and k > 1) \
        else 1.0
    # a one-row product (M = 1) on a device with ``gemv_columns``: the direct kernel
    # with a 1 × that register block, one vector of B's row per k step (PoCL: the
    # default 4 × 4 block ran MobileNetV3's classifier Gemms at 0.58 ms, 1 × 16 0.31)
    block = gemv_direct(device).params if gemv_side == "m" and device.gemv_columns else None
    if block is not None:
        direct_items = batch * _cdiv(n, block.b)
    result = [Option("direct", block, flops * taps_penalty / (
        peak * eff["direct"] * _fill(direct_items, device.compute_units * device.items_per_unit)))]
    if tiled_ok:
        slots = device.compute_units * device.groups_per_unit
        for tile in tiles:
            if not tile.valid() or (tile.bm > 16 and m <= tile.bm // 2) or \
                    (tile.bn > 16 and n <= tile.bn // 2):
                continue
            groups = batch * _cdiv(m, tile.bm) * _cdiv(n, tile.bn)
            if (tile.slices > 1 or tile.groups > 1) and groups >= slots // 2:
                continue  # split-K is for grids that would fill under half the device
            step = tile.bk * tile.slices
            steps = _cdiv(k, step)
            if tile.groups > 1 and k < 256 * tile.groups:
                continue  # a K group needs enough work to pay its partials' round trip
            padded = 2.0 * groups * tile.bm * tile.bn * _cdiv(steps, tile.groups) * \
                step * tile.groups
            groups *= tile.groups
            intensity = min(1.0, tile.tm * tile.tn / (tile.tm + tile.tn) / 2.0)
            # vector reads from local memory measured 10-30 % faster on the H100
            vector = 1.15 if tile.contiguous else 1.0
            reuse = min(1.0, tile.bm * tile.bn / (tile.bm + tile.bn) / device.reuse_full)
            split = 1.0 / (1.0 + device.slice_cost * (tile.slices - 1))
            fill = _fill(groups * tile.work_group, slots * 256)
            # across groups: the partials written and read back, and a second launch
            second = 0.0 if tile.groups == 1 else device.launch_us + \
                8.0 * tile.groups * batch * m * n / (device.bandwidth_gbs * 1e3)
            result.append(Option("tiled", tile, padded / (peak * eff["tiled"] * intensity *
                                                          vector * reuse * split * fill) + second))
        if sgemm and VARIANT_SGEMM in eff:
            result += _sgemm_options(device, m, n, k, batch, epilogue_ops)
        # not where Winograd is priced: on ResNet's stride-1 3×3 convs (batch 8, H200)
        # winograd-gemm ran 0.056-0.065 ms, conv-gemm's fastest 0.060-0.087
        if conv_gemm and VARIANT_CONV_GEMM in eff and batch == 1 and \
                not (winograd and "winograd" in eff):
            result += _conv_gemm_options(device, m, n, k, epilogue_ops)
    if gemv_side is not None:
        rows = n if gemv_side == "m" else m
        bytes_moved = 4.0 * batch * rows * k
        for shape in GEMVS:
            groups = batch * _cdiv(rows, shape.columns)
            fill = _fill(groups * shape.work_group,
                         device.compute_units * device.items_per_unit)
            result.append(Option("gemv", shape, bytes_moved /
                                 (device.bandwidth_gbs * 1e3 * eff["gemv"] * fill)))
    if block is not None and device.packed_gemv_rate and batch == 1:
        result += _packed_gemv_options(device, result[0].estimate_us)
    if winograd and "winograd" in eff and batch == 1:
        result += _winograd_options(device, m, n, k // 9, width)
    vec = _vec_conv_options(device, m, n, k, window_taps, width, stride) \
        if window_taps and batch == 1 else []
    result += vec
    if window_taps and batch == 1 and not vec:
        # like depthwise: multiply-adds per loaded element (per input channel, the
        # window against rows·width·taps vector multiply-adds), a square kernel assumed
        side = max(1, round(window_taps ** 0.5))
        for shape in WINDOWS:
            items = _cdiv(m, shape.channels) * _cdiv(n, shape.rows * shape.width)
            window_size = (shape.rows + side - 1) * (shape.width + side - 1)
            reuse = min(1.0, shape.rows * shape.width * side * side / window_size /
                        device.window_reuse_full)
            lanes = min(1.0, shape.channels / 16)  # vector multiply-adds per weight load
            padded = flops * _cdiv(m, shape.channels) * shape.channels / m
            fill = _fill(items, device.compute_units * device.items_per_unit)
            result.append(Option("window", shape, padded / (peak * eff["window"] * reuse *
                                                            (0.5 + 0.5 * lanes) * fill)))
    if window_taps and "conv-lanes" in eff:
        result += _lanes_conv_options(device, flops, m, n, k, window_taps)
    if window_taps == 1 and batch == 1:
        result += _channel_conv_options(device, m, n, k)
    if depthwise:
        # a work-item's block reuses each loaded window element for
        # rows·width·taps / window multiply-adds (a square kernel, stride 1 assumed)
        side = max(1, round(k ** 0.5))
        for shape in DEPTHWISES:
            items = batch * m * _cdiv(n, shape.rows * shape.width)
            window = (shape.rows + side - 1) * (shape.width + side - 1)
            reuse = min(1.0, shape.rows * shape.width * k / window / device.depthwise_reuse_full)
            fill = _fill(items, device.compute_units * device.items_per_unit)
            live = shape.rows * shape.width + k + shape.width + side - 1
            spill = device.spill_penalty if device.registers and live > device.registers \
                else 1.0
            result.append(Option("depthwise", shape, spill * flops / (
                peak * eff["depthwise"] * reuse * fill)))
        if "depthwise-lanes" in eff:
            # vector lanes of a group idle past the row's end, rows of the last block
            # past the map's; each group pays a fixed cost (fitted on PoCL to
            # MobileNetV2/V3's depthwise layers: 14×14 ran fastest one group a channel,
            # 7×7 as the 4×4 register block)
            columns = width or max(1, round(n ** 0.5))
            height = max(1, n // columns)
            seen = set()
            for shape in DEPTHWISE_LANES:
                rows = min(shape.rows, height)
                if rows in seen:
                    continue
                seen.add(rows)
                group = lanes_group(columns)
                groups = batch * m * _cdiv(height, rows)
                padded = flops * group / columns * _cdiv(height, rows) * rows / height
                estimate = padded / (peak * eff["depthwise-lanes"]) + \
                    groups * device.lanes_group_us / device.compute_units
                result.append(Option("depthwise", Depthwise(rows, 1, True), estimate))
        if stride == 2 and device.vec_depthwise_rate:
            result += _vec_depthwise_options(device, result, n, width)
    return result


def _vec_depthwise_options(device: DeviceModel, depthwise: list[Option], n: int,
                           width: int) -> list[Option]:
    """``depthwise-vec`` (`cpu_depthwise.py`) for a stride-2 depthwise conv of ``n``
    outputs a channel, ``width`` columns (0: square), on a device with
    ``vec_depthwise_rate``: at that fraction of the best ``depthwise`` option's estimate.
    Measured on PoCL's calling thread here, in MobileNetV3-small (`prof.py` of
    /tmp/cpu6, load 1-3), against the ``lanes`` kernels the model picks there: 16 ×
    112² → 56² 0.031 ms against 0.089, 72 × 56² → 28² 0.066 against 0.114, 96 × 28² →
    14² (5×5) 0.046 against 0.064 (7 × 8 blocks; 4 × 8 ran 0.037 / 0.078 / 0.055, 2 × 8
    0.046 / 0.087 / 0.066, 14 × 8 0.033 / 0.069 / 0.054), 576 × 14² → 7² (5×5, 7 × 4)
    0.043 against 0.050. At stride 1 it ran slower than the lanes kernels (7 × 8: 88 ×
    28² 0.048 against 0.044, the 14² 5×5 ones 0.033-0.063 against 0.027-0.053): not
    offered there. One block: rows of at least 8 columns 7 × 8, narrower ones 7 × 4 (a
    load of 16 columns at stride 2 needs an input row of 16)."""
    best = min((o.estimate_us for o in depthwise if o.variant == "depthwise"), default=None)
    columns = width or max(1, round(n ** 0.5))
    if best is None:
        return []
    shape = VecDepthwise(7, 8) if columns >= 8 else VecDepthwise(7, 4)
    if load_width(shape.pixels, 2) > 2 * columns:
        return []
    return [Option(VARIANT_VEC_DEPTHWISE, shape, best * device.vec_depthwise_rate)]


# ``sgemm``'s rate by register block, relative to 8 × 8 (H200, the large BERT-base GEMMs
# of `benchmarks/gpu_gemm.py`: 8 × 8 ran at 58-62 % of peak, 8 × 4 at 52-57, 4 × 4 at 36-46)
SGEMM_BLOCK_RATE = {(8, 8): 1.0, (8, 4): 0.92, (4, 8): 0.92, (4, 4): 0.73}
# 8 × 8 blocks over other than four warps (128 × 128 over eight, 64 × 64 over two): on
# BERT-base's QKV GEMM 0.39 and 0.38 ms where 128 × 64 and 64 × 128 over four ran 0.335
SGEMM_OTHER_GROUP_RATE = 0.85


def _sgemm_options(device: DeviceModel, m: int, n: int, k: int, batch: int,
                   epilogue_ops: int = 0) -> list[Option]:
    """The ``sgemm`` options (`sgemm.py`), on devices whose model has its efficiency.

    Per SM: the work-groups it runs (``⌈groups / SMs⌉``), in rounds of the work-groups it
    holds at once (its 65,536 registers over the block's accumulators, operands, prefetch
    registers and ~24 more; at most 2,048 work-items), each round at a rate that grows with
    its warps (`_sgemm_round`): the K loop up to ``SGEMM_LOOP_WARPS`` of its register block,
    the first fetch and the epilogue (``SGEMM_STEP_OVERHEAD`` K steps, plus
    ``SGEMM_EPILOGUE_K`` per element and epilogue operator) up to ``SGEMM_FULL_WARPS``;
    at ``efficiency["sgemm"]`` times the block's rate (`SGEMM_BLOCK_RATE`). K groups add
    a launch and their partials' round trip.

    Refitted with BERT/GPT-2's batch-1 GEMMs (M = 512, 31 shapes in all): K groups
    from 128 K each (`SGEMM_SPLIT_MIN_K`); the picks sum to 2.846 ms, the fastest to
    2.805. Fitted first on an H200 to 21 shapes × 17 options of `benchmarks/gpu_gemm.py` (BERT-base,
    ConvNeXt-T and small-transformer GEMMs; ``gpu_gemm.py fit LOG`` replays it): the
    picks sum to 2.285 ms where the fastest sum to 2.254 (one 8 × 8 work-group per SM
    for the K loop, one warp round for the edges: 2.327 with BERT's QKV on 8 × 4 at
    0.376 ms where 8 × 8 ran 0.338; the ``tiled`` picks: 3.655). ConvNeXt's short-K
    fc1 with its Gelu (K 96, 6 epilogue operators) stays on 8 × 4: its 8 × 8 work-groups
    of 4 warps spent the Gelu latency-bound (0.090 against 0.073 ms).
    ``efficiency["sgemm"]`` puts the estimates in the ``tiled`` model's units (0.62 of the
    H200's peak, over the H100 peak the model assumes, over ~2.2-2.3: the median of the
    estimate over the measured time there; the sgemm/tiled boundary it sets was fitted
    with the picks)."""
    per_sm = device.peak_gflops * 1e3 / device.compute_units * device.efficiency[VARIANT_SGEMM]
    result = []
    for tile in SGEMMS:
        if not tile.valid() or m <= tile.bm // 2 or n <= tile.bn // 2:
            continue
        estimate = _sgemm_estimate(device, tile, m, n, k, batch, epilogue_ops, per_sm)
        if estimate is not None:
            result.append(Option(VARIANT_SGEMM, tile, estimate))
    return result


# ``conv-gemm``'s K loop needs this many times `SGEMM_LOOP_WARPS` in flight (its window
# gather's loads and index arithmetic; fitted, `_conv_gemm_options`)
CONV_GEMM_WARPS = 1.5
# and its K groups run 1.56× the rate the per-SM model gives them (split K measured
# faster than whole K even on grids the model counts as full: more warps per SM)
CONV_GEMM_SPLIT_RATE = 1.56
# and its 8 × 8 register blocks 1.2× (relative to sgemm's `SGEMM_BLOCK_RATE`): 64
# multiply-adds per gathered pair hide the gather's index arithmetic
CONV_GEMM_8X8_RATE = 1.2
# and fewer registers than sgemm's beyond its accumulators, operands and prefetch slots
# (`SGEMM_OTHER_REGISTERS`): fitted, not counted — with 24 an 8 × 4 work-group of 128 held
# 5 per SM, and 128 × 32 with 8 K groups (784 work-groups on the 28² outputs, 5.9 per SM)
# was priced a second round it did not run (H200: 0.041 / 0.068 ms where the picks
# 64 × 128 ran 0.045 / 0.076); 0-16 give the same picks on every replayed log, 20 the old
CONV_GEMM_OTHER_REGISTERS = 12
# the implicit-GEMM conv's tiles (`conv_gemm.ConvGemm`): C tile, K step, block, K groups
CONV_GEMMS = tuple(ConvGemm(Sgemm(*sizes)) for sizes in (
    (128, 128, 8, 8, 8), (128, 64, 16, 8, 8), (64, 128, 16, 8, 8),
    (128, 64, 16, 8, 4), (64, 128, 16, 4, 8), (64, 64, 16, 8, 8),
    (64, 64, 16, 4, 4), (32, 64, 16, 4, 4), (64, 32, 16, 4, 4),
    (32, 32, 16, 4, 4),
    (64, 64, 16, 4, 4, 2), (64, 64, 16, 4, 4, 4), (64, 64, 16, 4, 4, 8),
    (128, 64, 16, 8, 4, 2), (128, 64, 16, 8, 4, 4), (128, 64, 16, 8, 4, 8),
    (64, 64, 16, 8, 8, 2), (64, 64, 16, 8, 8, 4), (64, 64, 16, 8, 8, 8),
    (64, 128, 16, 8, 8, 2), (64, 128, 16, 8, 8, 4),
    (128, 64, 32, 8, 4, 4),
    # the 7² and 14² outputs (N = 392 / 1568 at batch 8): narrow tiles, more K groups
    (128, 32, 16, 8, 4, 8), (128, 32, 16, 8, 4, 12),
    (64, 64, 16, 8, 8, 12), (64, 64, 16, 8, 8, 16),
    (64, 128, 16, 8, 8, 8)))


def _conv_gemm_options(device: DeviceModel, m: int, n: int, k: int,
                       epilogue_ops: int = 0) -> list[Option]:
    """The ``conv-gemm`` options (`conv_gemm.py`): `sgemm`'s per-SM round model over
    `CONV_GEMMS` (the same schedule) at ``efficiency["conv-gemm"]``, its K loop needing
    `CONV_GEMM_WARPS` times sgemm's warps (the window gather's loads and index
    arithmetic), K groups at `CONV_GEMM_SPLIT_RATE`, 8 × 8 blocks at `CONV_GEMM_8X8_RATE`,
    the work-groups an SM holds counted with `CONV_GEMM_OTHER_REGISTERS`.

    Fitted (a grid search over the four) on an H200 to ResNet-18/50's 3×3 convs at batch
    8, 26 options each (`benchmarks/gpu_conv.py`, ``fit LOG`` replays it): over the six
    stride-2 convs the picks sum to 0.352 ms where the fastest sum to 0.347 and the
    earlier options (tiled) to 0.472; replayed on a later run with five more candidate
    tiles (not listed here), 0.349 against 0.329 and 0.472. With K groups from 128 K
    (`SGEMM_SPLIT_MIN_K`) and the narrow / many-K-group tiles of a third sweep listed
    (the last five), the same four constants: 0.334 against 0.323 (ResNet-18's 7²-output
    conv 0.051 -> 0.047 ms on 128 × 32 with 12 K groups; ResNet-50's 28² one still picks
    64 × 128 with 8 groups, 0.076, where 128 × 32 with 8 ran 0.067). Session 12: with
    `CONV_GEMM_OTHER_REGISTERS` both 28² convs pick 128 × 32 with 8 groups; the replays
    of conv14's logs (.gpu/conv14/logs/1/cv.log, 2/cv.log) 0.243 -> 0.231 and 0.169 ->
    0.167 ms (fastest 0.230, 0.167), gemm4's 0.334 -> 0.323 (fastest 0.323), the others
    unchanged; on an H100 in-model (.gpu/conv15/logs/3) ResNet-18's 28² conv 0.045 ->
    0.039-0.040 ms and ResNet-50's 0.077 -> 0.073-0.074 (with float4 partial stores,
    `conv_gemm.py`). It also moves ConvNeXt-T's b8 stem (4×4 stride 4, K 48) from 128 × 64
    8 × 8 to 32 × 64 4 × 4: 0.030 -> 0.025 ms in-model (logs/4). On the stride-1 ones
    Winograd stays (not offered beside it, `options`)."""
    per_sm = device.peak_gflops * 1e3 / device.compute_units * device.efficiency[VARIANT_CONV_GEMM]
    result = []
    for shape in CONV_GEMMS:
        tile = shape.tile
        if not shape.valid() or m <= tile.bm // 2 or n <= tile.bn // 2:
            continue
        rate = per_sm * (CONV_GEMM_SPLIT_RATE if tile.groups > 1 else 1.0) * \
            (CONV_GEMM_8X8_RATE if (tile.tm, tile.tn) == (8, 8) else 1.0)
        estimate = _sgemm_estimate(device, tile, m, n, k, 1, epilogue_ops, rate, CONV_GEMM_WARPS,
                                   CONV_GEMM_OTHER_REGISTERS)
        if estimate is not None:
            result.append(Option(VARIANT_CONV_GEMM, shape, estimate))
    return result


def _sgemm_estimate(device: DeviceModel, tile: Sgemm, m: int, n: int, k: int, batch: int,
                    epilogue_ops: int, per_sm: float, warps: float = 1.0,
                    other_registers: int = SGEMM_OTHER_REGISTERS) -> float | None:
    """One tile's estimate in `_sgemm_options`' model (None: K groups it does not offer),
    its K loop needing ``warps`` times `SGEMM_LOOP_WARPS` in flight; ``per_sm``: an SM's
    rate before the register block's (`SGEMM_BLOCK_RATE`)."""
    threads = tile.work_group
    registers = _cdiv(tile.tm * tile.tn + tile.tm + tile.tn + (tile.bm + tile.bn) * tile.bk //
                      threads + other_registers, 8) * 8
    resident = max(1, min(65536 // (threads * registers), 2048 // threads))
    groups = batch * _cdiv(m, tile.bm) * _cdiv(n, tile.bn)
    if tile.groups > 1 and (groups >= device.compute_units * resident // 2 or
                            k < SGEMM_SPLIT_MIN_K * tile.groups):
        return None  # K groups only for grids under half a wave, over a long K
    steps = _cdiv(_cdiv(k, tile.bk), tile.groups)
    loop = 2.0 * tile.bm * tile.bn * tile.bk * steps
    edges = 2.0 * tile.bm * tile.bn * (tile.bk * SGEMM_STEP_OVERHEAD +
                                       SGEMM_EPILOGUE_K * epilogue_ops)
    rate = per_sm * SGEMM_BLOCK_RATE[(tile.tm, tile.tn)] * \
        (SGEMM_OTHER_GROUP_RATE if (tile.tm, tile.tn) == (8, 8) and threads != 128 else 1.0)
    rounds, left = divmod(_cdiv(groups * tile.groups, device.compute_units), resident)
    estimate = sum(count * _sgemm_round(tile, held, loop, edges, warps) / rate
                   for count, held in ((rounds, resident), (1, left)) if count and held)
    if tile.groups > 1:
        estimate += device.launch_us + 8.0 * tile.groups * batch * m * n / \
            (device.bandwidth_gbs * 1e3)
    return estimate


def _sgemm_round(tile: Sgemm, held: int, loop: float, edges: float, warps_needed: float = 1.0
                 ) -> float:
    """The work of one round of ``held`` work-groups on an SM, scaled by occupancy: the
    K loop at the warps its register block needs (`SGEMM_LOOP_WARPS`), the first fetch
    and the epilogue (memory and call latency) at `SGEMM_FULL_WARPS`."""
    warps = held * tile.work_group / 32
    return held * (loop / min(1.0, warps / (SGEMM_LOOP_WARPS[(tile.tm, tile.tn)] * warps_needed)) +
                   edges / min(1.0, warps / SGEMM_FULL_WARPS))


def gemv_direct(device: DeviceModel) -> Option:
    """The ``direct`` option of a one-row product on a device with ``gemv_columns``."""
    return Option("direct", Direct(1, device.gemv_columns), 0.0)


def _packed_gemv_options(device: DeviceModel, direct_us: float) -> list[Option]:
    """``gemv-packed`` (`cpu_gemv.py`) for a one-row product whose ``direct`` 1 × 16
    block is priced ``direct_us``: at ``packed_gemv_rate`` of it. Both stream the whole
    weight matrix; measured on PoCL here (MobileNetV3's classifier Gemms, interleaved,
    minimum of 12): 576 → 1024 ran 93 µs packed against 157 direct, 1024 → 1000 155
    against 156 (both then at ~25 GB/s: memory-bound), and 8 columns a work-item ran
    7-15 % slower than 16. It applies only where B is a constant (`cpu_gemv.applies`;
    elsewhere the generator falls back to ``direct``)."""
    return [Option(VARIANT_PACKED_GEMV, shape, direct_us * device.packed_gemv_rate)
            for shape in PACKED_GEMVS]


def _lanes_conv_options(device: DeviceModel, flops: float, m: int, n: int, k: int,
                        taps: int) -> list[Option]:
    """``conv-lanes`` (`cpu_conv.py`) for a pointwise conv, on a device whose
    work-groups are vectorised over their items: consecutive output pixels across the
    vector lanes, ``channels`` accumulators per item, ``channels`` multiply-adds per
    loaded element (full rate from ``window_reuse_full``); each work-group costs
    ``lanes_group_us``. Offered only where it measured faster than ``direct`` (PoCL,
    ResNet-50's 1×1 convs): the pixels fill whole runs (masked lanes ran slower) and
    the input channels fit one straight-line chunk (a barrier per chunk ran slower)."""
    if taps != 1:
        return []
    peak, eff = device.peak_gflops * 1e3, device.efficiency["conv-lanes"]
    result = []
    for shape in LANES_CONVS:
        channels = min(shape.channels, m)
        if n % shape.pixels or k * channels > CHUNK_MADS:
            continue
        if channels != shape.channels and LanesConv(channels, shape.pixels) in LANES_CONVS:
            continue  # the same kernel as a smaller block listed
        groups = _cdiv(m, channels) * (n // shape.pixels)
        padded = flops * _cdiv(m, channels) * channels / m
        reuse = min(1.0, channels / device.window_reuse_full)
        estimate = padded / (peak * eff * reuse) + \
            groups * device.lanes_group_us / device.compute_units
        result.append(Option(VARIANT_LANES_CONV, LanesConv(channels, shape.pixels), estimate))
    return result


def _channel_conv_options(device: DeviceModel, m: int, n: int, k: int) -> list[Option]:
    """``conv-channels`` (`cpu_channels.py`) for a 1×1 conv (``m`` output channels,
    ``n`` = N·OH·OW pixels, ``k`` input channels), on a device with ``channel_conv_us``:
    per work-item its 16-lane multiply-adds (two 8-lane ones each), its loaded input
    elements and its outputs (stored lane by lane), the padded channels of a ragged
    last block counted as work. The three rates were fitted (a grid, least total time
    of the picks) to 25 1×1 convs measured on PoCL's calling thread here with every
    option of each (MobileNetV3-small's, ResNet-50's at an eighth of the width, stride 1
    and 2, 7×7 to 56×56): the picks sum to 0.784 ms where the fastest sum to 0.782 and
    the picks without this option to 1.022. It won on 7×7 and 14×14 maps and on
    stride-2 ones; ``conv-vec`` kept 28×28 and 56×56 maps at stride 1."""
    if not device.channel_conv_us:
        return []
    fma_us, element_us, output_us = device.channel_conv_us
    result = []
    seen: set[ChannelConv] = set()
    for shape in CHANNEL_CONVS:
        # the kernel clips its block to the channels and pixels there are
        # (`cpu_channels.conv_channels`); the option keeps the listed block's label, so
        # a symbolic build's pick at one shape is an option at every shape it serves
        clipped = ChannelConv(min(shape.channels, _cdiv(m, CHANNEL_LANES) * CHANNEL_LANES),
                              min(shape.pixels, n) if isinstance(n, int) else shape.pixels)
        if clipped in seen or (clipped != shape and clipped in CHANNEL_CONVS):
            continue  # the same kernel as a block listed
        seen.add(clipped)
        channels, pixels = clipped.channels, clipped.pixels
        vectors = channels // CHANNEL_LANES
        items = _cdiv(m, channels) * _cdiv(n, pixels)
        estimate = items * (k * vectors * pixels * 2 * fma_us + k * pixels * element_us +
                            channels * pixels * output_us)
        result.append(Option(VARIANT_CHANNEL_CONV, shape, estimate))
    return result


def _vec_conv_options(device: DeviceModel, m: int, n: int, k: int, taps: int, width: int,
                      stride: int) -> list[Option]:
    """``conv-vec`` (`cpu_window.py`) for a dense conv of ``taps`` > 1 (a square window,
    ``m`` output channels, ``n`` = N·OH·OW outputs each, ``k`` = Cin·taps), on a device
    with ``vec_conv_us``. Offered where it measured faster than the ``window`` kernel on
    PoCL, and then instead of it (the window model's estimates were 2.7× off for the
    MobileNetV3 stem): a stem (at most 4 input channels) of stride 1 or 2 (AlexNet's
    11×11 stride-4 stem ran 2.5 ms against the window kernel's 1.5) or output rows that
    fit one 16-wide vector (VGG-sized 3×3 convs too: 256 channels on 14×14 2.0 ms
    against 3.1, 512 on 7×7 4.1 against 23.6), or of at most 8 input channels at stride
    1 (with its epilogue on vectors, `cpu_epilogue`: ResNet-50's 56×56 3×3 at an eighth
    of the width 0.062 ms against 0.086; 16 channels on 28×28 measured no faster). Priced per work-item: its vector multiply-adds, the row segments it
    loads and the tap vectors it builds from them, and its outputs' epilogues, at the
    rates `DeviceModel.vec_conv_us` fitted to 20 measured (conv, block) pairs (ResNet-50
    at an eighth of the width and MobileNetV3 on PoCL here; within 0.6-2.1× of each,
    and for every conv the block it prices cheapest was the fastest measured)."""
    if not device.vec_conv_us or taps < 1:
        return []
    cin, side = k // taps, max(1, round(taps ** 0.5))
    width = width or max(1, round(n ** 0.5))
    fma_us, element_us, output_us = device.vec_conv_us
    blocks = VEC_CONVS
    if taps == 1:
        # a 1×1 conv (`cpu_window.flat_applies`: at stride 1 the plane is one row), its
        # epilogue on whole vectors (`cpu_epilogue`: an eighth of the per-output cost
        # fitted with per-element epilogues) and its loaded segment the tap's vector
        # (no second element cost). Offered where it measured faster than the direct
        # and conv-lanes kernels on PoCL (loaded machine; ResNet-50's 1×1 convs at an
        # eighth of the width, MobileNetV3-small's): maps of at least 14×14 outputs
        # (MobileNetV3's 14×14 ones 0.029-0.106 ms against direct's 0.042-0.159, its
        # 72-channel 56×56 one 0.085 against conv-lanes' 0.157, ResNet's 28×28 ones
        # 0.012-0.021 against 0.020-0.067), stride-2 ones with rows of at least 14
        # (0.033-0.068 against 0.059-0.081); on 7×7 maps direct was as fast or faster.
        # The 32-channel block only on maps of at least 28×28: on 14×14 ones its fewer
        # work-items ran up to 1.9× slower than the 16-channel block
        if n < 14 * 14 or (stride > 1 and width < 14):
            return []
        blocks, output_us = POINTWISE_VECS if n >= 28 * 28 else POINTWISE_VECS[:1], \
            output_us / 8
        if stride == 1:
            width = n
    elif (cin > 8 or stride > 2 or (cin > 4 and stride > 1)) and width > 16:
        return []
    rows = max(1, n // width)
    result = []
    for shape in blocks:
        channels = min(shape.channels, m)
        if channels != shape.channels and VecConv(channels, shape.pixels) in blocks:
            continue  # the same kernel as a smaller block listed
        items = _cdiv(m, channels) * rows * _cdiv(width, shape.pixels)
        span = (shape.pixels - 1) * stride + side
        placed = 0 if taps == 1 else shape.pixels * side  # tap vectors built per row
        estimate = items * (cin * taps * channels * _cdiv(shape.pixels, 8) * fma_us +
                            cin * side * (span + placed) * element_us +
                            channels * shape.pixels * output_us)
        result.append(Option(VARIANT_VEC_CONV, VecConv(channels, shape.pixels), estimate))
    return result


def _winograd_options(device: DeviceModel, cout: int, columns: int, cin: int,
                      width: int) -> list[Option]:
    """The ``winograd`` options of a conv with ``columns`` = N·OH·OW outputs per channel
    (maps ``width`` wide, square assumed). Priced as the tiled GEMM is, on its own
    work: 16 products of Cout × Cin by Cin × tiles (padded to the work-group's tile
    and K step) at ``efficiency["winograd"]``, the work-item's pairs' arithmetic
    intensity ``tm·tn / (tm + tn)`` saturating at 1 (its transforms' loads are the
    rest of the work), the grid's fill in waves, and K groups' partials. The batched
    form is priced as the tiled GEMM over a batch of 16 plus its scratch traffic.

    Measured on an H200 (ResNet-18's 3×3 convs at batch 8, every option forced in
    turn, `benchmarks/gpu.py` with ``DNNR_GPU_SWEEP``): the fused form ran at 13 % of
    peak on its own FLOPs (0.096-0.146 ms a layer, a 16·tm·tn register block leaves
    one multiply-add per local-memory read), the batched form at 50-54 % of peak
    counted as a direct conv (0.051-0.061 ms), the best tiled GEMM at 21-32 %. The
    fused form's 0.1 keeps the batched one ahead, as measured; with these numbers the
    model's picks sum to 0.766 ms over the 13 layers where the fastest sum to 0.718."""
    width = width or max(1, round(columns ** 0.5))
    height = max(1, round(columns / width))
    images = max(1, columns // max(1, width * height))
    n_tiles = images * _cdiv(height, 2) * _cdiv(width, 2)
    peak = device.peak_gflops * 1e3
    slots = device.compute_units * device.groups_per_unit
    result = []
    for shape in WINOGRADS:
        if shape.batched and shape.valid():
            # the tiled GEMM's price for 16 products, plus V and M written and read
            # back through scratch and two more launches
            gemm = [o for o in options(device, cout, n_tiles, cin, 16, 1, True, None,
                                       tiles=(shape.tile(),)) if o.variant == "tiled"]
            if gemm:
                moved = 4.0 * 2 * 16 * (cin + cout) * n_tiles
                result.append(Option("winograd", shape, gemm[0].estimate_us + 2 * device.launch_us +
                                     moved / (device.bandwidth_gbs * 1e3 * device.efficiency["row"])))
            continue
        if not shape.valid() or (shape.bm > 16 and cout <= shape.bm // 2) or \
                (shape.bn > 16 and n_tiles <= shape.bn // 2):
            continue
        groups = _cdiv(cout, shape.bm) * _cdiv(n_tiles, shape.bn)
        if shape.groups > 1 and (groups >= slots // 2 or cin < 64 * shape.groups):
            continue  # K groups only for grids under half the device, over long K
        steps = _cdiv(_cdiv(cin, shape.bk), shape.groups)
        padded = 2.0 * 16 * groups * shape.bm * shape.bn * steps * shape.bk * shape.groups
        intensity = min(1.0, shape.tm * shape.tn / (shape.tm + shape.tn))
        reuse = min(1.0, shape.bm * shape.bn / (shape.bm + shape.bn) / device.reuse_full)
        fill = _fill(groups * shape.groups * shape.work_group, slots * 256)
        second = 0.0 if shape.groups == 1 else device.launch_us + \
            8.0 * shape.groups * cout * columns / (device.bandwidth_gbs * 1e3)
        result.append(Option("winograd", shape, padded / (
            peak * device.efficiency["winograd"] * intensity * reuse * fill) + second))
    return result


def row_options(device: DeviceModel, rows: int, length: int, local: int) -> list[Option]:
    """The options of a row kernel (a reduction, Softmax, LayerNorm over ``rows`` rows of
    ``length``, a work-group of ``local`` per row): ``row`` (one work-group per row) and
    ``row-split`` (several per row, `rows.RowSplit`). Memory-bound: a variant moves
    the rows at ``efficiency["row"]`` of the bandwidth, times the fill of its grid; a
    split pays one more launch. A chunk shorter than the work-group is not offered."""
    moved = 4.0 * rows * length / (device.bandwidth_gbs * 1e3 * device.efficiency["row"])
    slots = device.compute_units * device.items_per_unit
    result = [Option("row", None, moved / _fill(rows * local, slots))]
    for split in ROW_SPLITS:
        chunk, groups = chunking(length, split.groups)
        if groups < 2 or chunk < local:
            continue
        result.append(Option("row-split", RowSplit(groups), moved /
                             _fill(rows * groups * local, slots) + device.launch_us))
    return result


def choose(candidates: list[Option], forced: str | None = None) -> Option:
    """The cheapest option (of variant ``forced`` when given and available)."""
    pool = [o for o in candidates if forced is None or o.variant == forced] or candidates
    return min(pool, key=lambda o: o.estimate_us)


# -- what fusing a prologue costs (fusion's yellow cells, for this backend) --------------

# the direct kernels' register blocks the reuse estimate assumes (`KernelParams` defaults)
_DIRECT_CONV_CHANNELS, _DIRECT_CONV_WIDTH, _DIRECT_MATMUL_N = 16, 4, 4


def fusion_cost(device: DeviceModel) -> CostModel:
    """The fusion planner's cost model for ``device``: a launch and the intermediate's
    round trip through memory against the prologue's work repeated as often as the
    anchor's option re-evaluates it (`prologue_reuse`), at ``prologue_gflops``.

    PoCL's rate is calibrated on this machine: a Relu re-evaluated 144 times per
    element by the direct kernel of a 3×3 conv from 64 to 256 channels over 56×56 cost
    less than its own launch (fused 218 ms, the pair 243 ms, minimum of 9), so re-
    evaluations run at 150 GFLOP/s at least; the model takes twice that. The GPU's
    is a quarter of its FP32 peak (the tiled kernel evaluates prologues in its load
    phase, beside the global loads).

    A pointwise kernel re-evaluating a broadcast operand (`fusion.recompute`) runs at
    PoCL's scalar rate, not the conv loop's: BERT-tiny's mask chain fused into the
    4×64×64 score Add added ~86k evaluations and 0.040-0.044 ms (profiling events), about
    2 G evaluations/s. The GPU class leaves it unpriced (it would not change a verdict
    below ~50 M extra evaluations)."""
    return CostModel(launch_us=device.launch_us,
                     bytes_per_us=device.bandwidth_gbs * 1e3 * device.efficiency["row"],
                     flops_per_us=device.prologue_gflops * 1e3,
                     prologue_reuse=lambda view, anchor: prologue_reuse(device, view, anchor),
                     recompute_evals_per_us=device.recompute_gevals * 1e3 or None,
                     stored_row_inputs=device.stored_row_inputs,
                     anchor_epilogues_priced=device.anchor_epilogues_priced,
                     split_as_slices=device.split_as_slices)


def prologue_reuse(device: DeviceModel, view: GraphView, anchor: int) -> float | None:
    """How many times the option this model picks for ``anchor`` evaluates each element
    of a prologue on its first input (None: not a conv or matmul anchor).

    direct conv: once per tap and output-channel tile of a work-item; tiled: once per
    tap and row tile of C (it stages the element in local memory); gemv: once;
    depthwise: once per work-item whose window covers it; direct matmul: once per
    column tile."""
    node = view.nodes[anchor]
    if node.op == "Conv":
        x_shape, w_shape = view.shape(node.inputs[0]), view.shape(node.inputs[1])
        out_shape = view.shape(node.outputs[0])
        group = int(node.attr("group", 1))  # type: ignore[arg-type]
        cout, cin_g, taps = out_shape[1], w_shape[1], int(np.prod(w_shape[2:]))
        strides = tuple(node.attr("strides") or (1,) * (len(x_shape) - 2))  # type: ignore[arg-type]
        depthwise = group > 1 and cin_g == 1
        columns = out_shape[0] * int(np.prod(out_shape[2:]))
        width = _DIRECT_CONV_WIDTH if not depthwise else 8
        items = columns // max(1, min(width, out_shape[-1])) * \
            _cdiv(cout, 1 if depthwise else _DIRECT_CONV_CHANNELS)
        window_taps = taps if group == 1 and len(x_shape) == 4 and \
            node.inputs[1] in view.constants else 0
        best = choose(options(device, cout // group, columns, cin_g * taps, group, items,
                              not depthwise, "n" if columns == 1 else None,
                              depthwise=depthwise and len(x_shape) == 4,
                              window_taps=window_taps, width=out_shape[-1],
                              stride=strides[-1],
                              # `conv_gemm.applies`, where Winograd is not offered
                              conv_gemm=window_taps > 1 and strides[-1] > 1))
        p = best.params
        if isinstance(p, ChannelConv):  # once per channel block
            return float(_cdiv(cout, p.channels))
        if isinstance(p, VecConv):  # once per channel block and window row segment
            side = max(1, round(taps ** 0.5))
            span = (p.pixels - 1) * strides[-1] + side
            return _cdiv(cout, p.channels) * max(1.0, side / strides[0] * span /
                                                 (p.pixels * strides[-1]))
        if isinstance(p, Window):  # once per channel tile and window covering it
            side = max(1, round(taps ** 0.5))
            window = ((p.rows - 1) * strides[0] + side) * ((p.width - 1) * strides[-1] + side)
            return _cdiv(cout, p.channels) * max(1.0, window / (p.rows * p.width *
                                                               int(np.prod(strides))))
        if isinstance(p, ConvGemm):
            p = p.tile
        if isinstance(p, Tile | Sgemm):
            return float(taps * _cdiv(cout // group, p.bm))
        if isinstance(p, Gemv):
            return 1.0
        if isinstance(p, VecDepthwise):  # once per tap's load and window row covering it
            side = max(1, round(taps ** 0.5))
            rows = ((p.rows - 1) * strides[0] + side) / (p.rows * strides[0])
            return side * load_width(p.pixels, strides[-1]) / (p.pixels * strides[-1]) * rows
        if isinstance(p, Depthwise):
            side = max(1, round(taps ** 0.5))
            stride = int(np.prod(strides))
            window = ((p.rows - 1) * strides[0] + side) * ((p.width - 1) * strides[-1] + side)
            return max(1.0, window / (p.rows * p.width * stride))
        return float(taps * (1 if depthwise else _cdiv(cout // group, _DIRECT_CONV_CHANNELS)))
    if node.op in ("MatMul", "Gemm"):
        a_shape, out_shape = view.shape(node.inputs[0]), view.shape(node.outputs[0])
        trans_a = node.op == "Gemm" and bool(node.attr("transA", 0))
        m = 1 if len(a_shape) == 1 else (a_shape[-1] if trans_a else a_shape[-2])
        k = a_shape[-1] if len(a_shape) == 1 or not trans_a else a_shape[-2]
        n = out_shape[-1] if len(view.shape(node.inputs[1])) > 1 else 1
        batch = int(np.prod(out_shape)) // max(m * n, 1)
        items = batch * _cdiv(m, 4) * _cdiv(n, _DIRECT_MATMUL_N)
        p = choose(options(device, m, n, k, batch, items, True,
                           "m" if m == 1 else None, sgemm=True)).params
        if isinstance(p, Tile | Sgemm):
            return float(_cdiv(n, p.bn))
        if isinstance(p, Gemv):
            return 1.0
        return float(_cdiv(n, _DIRECT_MATMUL_N))
    return None

