"""One OpenCL kernel per fusion block, by kernel kind.

- ``pointwise``: one work-item per output element, or (`KernelParams.pointwise_items`,
  the GPU class) a few of one row; everything lazily evaluated.

Conv and MatMul/Gemm anchors have several kernel *options* (`cost.options` lists them
as data, `cost.choose` picks one per shape for the device class in
`KernelParams.device`): ``direct`` (the two kernels below), ``tiled`` (a work-group-
tiled GEMM in local memory, implicit GEMM for convs; split-K in or across work-groups),
``gemv`` (`gemm.py`), ``sgemm`` (`sgemm.py`: the register-blocked GEMM, MatMul/Gemm on
the GPU class), ``conv-gemm`` (`conv_gemm.py`: k×k convs as implicit GEMM on sgemm's
register blocks, the GPU class), for 2-D depthwise convs ``depthwise`` (`depthwise.py`) and for
dense 2-D convs ``window`` (`window.py`), both a register window per work-item. Row
kernels (reduce, rownorm) run one work-group per row or, for few long rows, several
(``row-split``, `rows.py`). A block's kernel may take two launches through a scratch
buffer (`Kernel.then`, `Kernel.scratch`).

- ``conv``: Conv (grouped, depthwise, 1-3 spatial dims) tiled TC output channels ×
  TW output columns per work-item, prologue fused into the operand loads. Constant
  weights are re-laid-out for the consumer ([Cin/g, k…, Cout] padded to TC, SmartMem
  §3.2.2) so the TC channels are one ``floatTC`` vector load and vector FMAs.
- ``matmul``: MatMul (batched, broadcast) and Gemm, TM × TN register tiles; a
  constant B is stored [K, N] padded to TN and read as ``floatTN`` vectors.
- ``pool``: MaxPool, AveragePool, LRN, one output per work-item.
- ``reduce``: Reduce*, ArgMax/ArgMin, global pools — a work-group reduction in
  local memory when the reduced extent is large, a serial loop when small.
- ``rownorm``: Softmax, LogSoftmax, Layer/InstanceNormalization — two reductions over a
  row, then the normalised row through the epilogue; a LayerNorm whose rows are
  strided in memory and adjacent to each other (over NCHW channels) takes several
  rows per work-group, lanes along the rows (`pixel_rows.py`).
- ``rowgroup``: reductions over the same rows chained with elementwise operators
  (LayerNorm or Softmax written out as exporters emit them) — one reduction per
  Reduce*, per-row values computed once.

Both row kinds come in two variants (`KernelParams.row_serial_below`): short rows,
when there are enough of them, run one work-item per row — serial loops, no
barrier; long rows (or few rows) run one work-group per row, a strided loop then a
tree in local memory per reduction. Work-group barriers are what a CPU OpenCL
device pays most for (PoCL runs a work-group's items as loops cut at every
barrier): Softmax over 64-element rows took 3.2 ms of MHA's 4.6 ms as a tree.

Every anchor's result goes through the same epilogue: the spine of the block
evaluated at the anchor's index and stored at each output's forward index.
Tile and work-group sizes are `KernelParams` fields, written as ``#define``s.
Sources use ``KNAME`` as the kernel name; the builder turns the body's integer
literals into size arguments (`build.hoist_sizes`) and names each distinct source
by its hash, so blocks that differ only in shape share one compiled kernel.

Every tensor parameter is a buffer plus an element offset (``in0_buf, in0_off``)
and the body works on ``in0 = in0_buf + in0_off``: arena tensors are passed as
the arena buffer and their offset, never as OpenCL sub-buffers. NVIDIA's driver
segfaults releasing sub-buffers of an arena that kernels wrote (mha,
transformer_encoder on an H100), and sub-buffer origins must also be aligned to
CL_DEVICE_MEM_BASE_ADDR_ALIGN, which a plain offset does not need.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

import numpy as np

from egraph_compiler import ops
from egraph_compiler.backends.opencl import blocked as nchwc
from egraph_compiler.backends.opencl import conv_gemm as cg
from egraph_compiler.backends.opencl import (
    cost,
    cpu_channels,
    cpu_conv,
    cpu_depthwise,
    cpu_gemv,
    cpu_reduce,
    gemm,
    images,
    ops_extra,
    ops_models,
)
from egraph_compiler.backends.opencl import cpu_window as vec_conv
from egraph_compiler.backends.opencl import depthwise as dw
from egraph_compiler.backends.opencl import im2col as col
from egraph_compiler.backends.opencl import pixel_rows as pixel_form
from egraph_compiler.backends.opencl import rows as row_split
from egraph_compiler.backends.opencl import spelling as sp
from egraph_compiler.backends.opencl import window as win
from egraph_compiler.backends.opencl import winograd as wino
from egraph_compiler.backends.opencl.emit import Scope, ValueEmitter, ctype
from egraph_compiler.backends.opencl.gemm import Gemv, Tile
from egraph_compiler.backends.opencl.sgemm import VARIANT as SGEMM
from egraph_compiler.backends.opencl.sgemm import Sgemm, sgemm
from egraph_compiler.backends.opencl.vector_forms import vector_accumulate, vector_pointwise
from egraph_compiler.fusion import index as ix
from egraph_compiler.fusion.blocks import Block
from egraph_compiler.fusion.layout import SERIAL_REDUCE_BELOW
from egraph_compiler.fusion.structure import (
    ROW_REDUCE_OPS,
    BlockStructure,
    analyse,
    reduce_axes,
)
from egraph_compiler.fusion.view import GraphView
from egraph_compiler.ir.errors import ModelError
from egraph_compiler.ir.graph import Node
from egraph_compiler.shapes import prover
from egraph_compiler.shapes.symint import (
    Choice,
    SymInt,
    bit_length,
    everywhere,
    expr_of,
    note_choice,
    pinned,
)

UNROLL = "__attribute__((opencl_unroll_hint)) "
# pool windows of at most this many taps are emitted straight-line (`_Gen._window`)
POOL_UNROLL_TAPS = 64
# `_Gen._pointwise_items`: lanes per run of a row at least (a 32-byte sector of floats)
POINTWISE_MIN_RUN = 8
# memory-bound kinds whose GPU kernels compute offsets with split terms merged
# (`index_merge`): the index arithmetic is what they issue besides their loads. Not
# ``pool``: ResNet-50's Relu+MaxPool at batch 8 ran 0.011 -> 0.016 ms merged (H200)
MERGED_KINDS = frozenset({"pointwise", "reduce", "rownorm", "rowgroup"})
# the argument name of a block's scratch buffer (`Kernel.scratch`); build.py gives each
# block its own tensor of this kind
SCRATCH = "@scratch"


@dataclass(frozen=True)
class KernelParams:
    """Tunable sizes (``dnnr tune`` may change them per kernel kind)."""

    work_group: int = 64
    conv_tile_channels: int = 16
    conv_tile_width: int = 4
    depthwise_tile_width: int = 8
    matmul_tile_m: int = 4
    matmul_tile_n: int = 4
    reduce_work_group: int = 64
    serial_reduce_below: int = SERIAL_REDUCE_BELOW  # the layout cost model assumes it
    # Row kernels (rownorm, rowgroup): rows shorter than this run one work-item per
    # row when there are at least `row_serial_min_rows` of them (enough work-items to
    # keep every compute unit busy); otherwise one work-group per row. The default
    # suits CPU devices, where barriers cost most; a GPU wants it low (a work-item
    # per row leaves lanes idle and their loads uncoalesced), e.g. 0 to disable.
    row_serial_below: int = 1024
    row_serial_min_rows: int = 64
    row_serial_lanes: int = 8  # partial results per serial row reduction (a vector's width)
    # rownorm with one work-group per row: each work-item keeps about this many of the
    # row's elements in registers (loaded once, coalesced), the work-group sized to
    # match (32 lanes at least); 0 reads the row from memory in each of its three
    # passes through `reduce_work_group` lanes. A GPU wants it: Softmax over BERT-base's
    # 512-wide rows ran at 24 % of the H200's bandwidth with 256 lanes of 2 elements
    row_cache: int = 0
    # pointwise kernels: output elements per work-item, consecutive along every
    # output's last dim (`_Gen.pointwise`); 1 is one element per work-item. More share
    # the index arithmetic of the leading dims and each broadcast operand's load and
    # its operators between the items (EfficientNet's squeeze-excitation scale
    # evaluated its Sigmoid once per element; BERT-base's mask kernel was bound by
    # index divisions, 44 % of the H200's bandwidth)
    pointwise_items: int = 1
    # pointwise kernels whose reads and stores are proven 4-wide: this many float4s per
    # work-item (`vector_forms.py`); 0: the scalar forms above
    pointwise_vectors: int = 0
    # rownorm over rows whose elements are strided in memory while consecutive rows
    # are adjacent (LayerNorm over the channels of an NCHW map, ConvNeXt): a
    # work-group takes this many rows, its lanes along the rows (`pixel_rows.py`);
    # 0 keeps one work-group per row
    strided_rows: int = 0
    # ... its operands read contiguously along the row (NHWC) staged through local
    # memory by coalesced loads (`pixel_rows._stage`)
    strided_rows_stage: bool = False
    # rownorm (LayerNorm) over short contiguous rows: several rows per work-group of
    # `pixel_rows.LANES`, each row's lanes as `row_cache` sizes them
    # (`pixel_rows.packed_rownorm`); False keeps one work-group per row
    packed_rows: bool = False
    # a ``tiled`` conv of stride at least this (3×3 and larger, one group) as an
    # explicit im2col to scratch then the tiled GEMM (`im2col.py`); 0: never. Its
    # tile: `im2col_tile`, else `im2col.pick_tile`'s
    im2col_min_stride: int = 0
    # work-group reductions (`reduce`, row-split): independent partial sums per
    # work-item (`rows.strided_accumulate`); 1: one accumulator
    reduce_unroll: int = 1
    # ... each partial a float4 of the row where its reads are proven 4-wide
    # (`vector_forms.vector_accumulate`)
    reduce_vectors: bool = False
    im2col_tile: Tile | None = None
    # Conv/MatMul anchors: the device class whose cost model picks each anchor's
    # option (`cost.DEVICES`: "cpu" for PoCL, "gpu"), or a forced variant
    # ("direct", "tiled", "gemv") and its parameters (tests, `dnnr tune`).
    device: str = "cpu"
    anchor_variant: str | None = None
    anchor_tile: Tile | None = None
    anchor_gemv: Gemv | None = None
    anchor_depthwise: dw.Depthwise | None = None
    anchor_window: win.Window | None = None
    anchor_winograd: wino.Winograd | None = None
    anchor_sgemm: Sgemm | None = None
    anchor_conv_gemm: cg.ConvGemm | None = None
    # the GPU class's ``conv-gemm`` option (`conv_gemm.py`) offered to the cost model
    # (benchmarks build the baseline without it: DNNR_GPU_CONV_GEMM=0)
    conv_gemm: bool = True
    # row kernels: force ``row-split`` with these groups (tests), else `cost.row_options`
    row_split: row_split.RowSplit | None = None
    # `dnnr tune`'s choices: (shape class `cost.shape_key`, option), used where a
    # class matches and no variant is forced
    tuned: tuple[tuple[str, cost.Option], ...] = ()
    # sizes as kernel arguments (`build.hoist_sizes`): PoCL compiles each distinct
    # source at its first launch, so sharing sources pays there; on a GPU a size
    # argument turns every index division into a real integer division (a pointwise
    # SiLU of EfficientNet ran at 9 % of the H200's bandwidth), a literal into a
    # multiply and shift, and the driver compiles all kernels at once
    hoist_sizes: bool = True
    # code that is the same at every shape where that costs little, for the symbolic
    # build (`symbolic.py`): every window bounds check kept, even where this shape's
    # windows never cross the edge
    shape_stable: bool = False

    @staticmethod
    def for_device(device: str) -> KernelParams:
        """Defaults for a device class: "cpu" (PoCL) as above; "gpu" runs rows one
        work-group each (a work-item per row leaves lanes idle and loads uncoalesced)
        and 256-item work-groups, and lets the cost model pick tiled anchors."""
        if device == "gpu":
            return KernelParams(work_group=256, reduce_work_group=256, row_serial_below=0,
                                device="gpu", hoist_sizes=False, row_cache=8,
                                pointwise_items=_env_int("DNNR_GPU_POINTWISE_ITEMS", 4),
                                pointwise_vectors=_env_int("DNNR_GPU_POINTWISE_VECTORS", 2),
                                strided_rows=_env_int("DNNR_GPU_STRIDED_ROWS", 32),
                                strided_rows_stage=bool(_env_int("DNNR_GPU_ROWS_STAGE", 1)),
                                packed_rows=bool(_env_int("DNNR_GPU_PACKED_ROWS", 1)),
                                im2col_min_stride=_env_int("DNNR_GPU_IM2COL_STRIDE", 0),
                                conv_gemm=_env_int("DNNR_GPU_CONV_GEMM", 1) == 1,
                                reduce_unroll=_env_int("DNNR_GPU_REDUCE_UNROLL", 4),
                                reduce_vectors=bool(_env_int("DNNR_GPU_REDUCE_VECTORS", 1)),
                                row_split=row_split.RowSplit(_env_int("DNNR_GPU_ROW_SPLIT", 0))
                                if _env_int("DNNR_GPU_ROW_SPLIT", 0) else None)
        if device != "cpu":
            raise ValueError(f"unknown OpenCL device class '{device}' (cpu or gpu)")
        # a bound compile for PoCL: sizes stay literals (constant-folded index
        # divisions; BERT-tiny's kernels ran 1.12 -> 0.60 ms). The symbolic build
        # (`symbolic.build_symbolic`) turns hoisting back on: its sizes vary per run
        return KernelParams(hoist_sizes=False)


@dataclass(frozen=True)
class Kernel:
    source: str
    args: tuple[str, ...]
    global_size: int
    local_size: int
    # constants this kernel reads in a layout of its own (SmartMem §3.2.2)
    constants: tuple[tuple[str, np.ndarray], ...] = ()
    # constants it reads as image2d_t when the device allows (images.py):
    # (tensor, width, height, reason)
    images: tuple[tuple[str, int, int, str], ...] = ()
    # the anchor option generated (`cost.Option.describe`), "" for other kinds
    variant: str = ""
    shape_key: str = ""  # the anchor's shape class (`cost.shape_key`), "" for other kinds
    # the work-items the launch needs before rounding up to the work-group: the
    # symbolic build (`symbolic.py`) fits it over the dims, global = roundup(items, local)
    work_items: int = 0
    # float32 elements of scratch memory the block's launches share (split-K partials,
    # per-row partial results): passed as the last tensor argument, ``scr``
    scratch: int = 0
    # the block's next launch, when it takes several (a second pass over scratch)
    then: Kernel | None = None

    def chain(self) -> list[Kernel]:
        """This block's launches in order."""
        return [self] + (self.then.chain() if self.then is not None else [])


def _zero_accumulators(s: Scope, outer: str, inner: str,
                       vector: tuple[int, str, str] | None) -> None:
    """Declare and zero an anchor tile's accumulators: ``float acc[outer][inner]``, or
    with ``vector = (width, length, loop variable)`` one ``float{width}`` per row."""
    if vector is not None:
        width, length, var = vector
        s.emit(f"float{width} acc[{length}];")
        s.emit(UNROLL + f"for (int {var} = 0; {var} < {length}; ++{var}) "
               f"acc[{var}] = (float{width})(0.0f);")
    else:
        s.emit(f"float acc[{outer}][{inner}];")
        s.emit(UNROLL + f"for (int a = 0; a < {outer}; ++a) " + UNROLL +
               f"for (int b = 0; b < {inner}; ++b) acc[a][b] = 0.0f;")

def _env_int(name: str, default: int) -> int:
    """An integer kernel parameter of the GPU class from the environment (benchmarks
    build artefacts at several settings), else ``default``."""
    import os

    text = os.environ.get(name, "")
    return int(text) if text.strip().isdigit() else default


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


class _Gen:
    def __init__(self, view: GraphView, block: Block, params: KernelParams) -> None:
        self.view, self.block, self.params = view, block, params
        shape = analyse(view, frozenset(block.nodes))
        if isinstance(shape, str):
            raise ModelError(f"block {block.id} cannot be generated: {shape}")
        self.shape: BlockStructure = shape
        self.args: list[str] = []
        loads: dict[str, str] = {}
        for value in block.inputs:
            constant = view.constants.get(value)
            if constant is not None and np.size(constant) == 1:
                continue
            loads[value] = f"in{len(self.args)}"
            self.args.append(value)
        self.n_inputs = len(self.args)
        self.stores: dict[str, str] = {}
        for k, value in enumerate(block.outputs):
            self.stores[value] = f"out{k}"
            self.args.append(value)
        self.em = ValueEmitter(view, block.nodes, loads)
        self.em.layouts = dict(block.layouts)
        self.em.merge_splits = params.device == "gpu" and block.kind in MERGED_KINDS and \
            bool(_env_int("DNNR_GPU_MERGE_SPLITS", 1))
        self.defines: list[str] = []
        self.helpers: list[str] = []  # functions the body calls, defined before the kernel
        self.variant = ""  # the anchor option chosen (conv, matmul)
        self.shape_key = ""
        self.scratch = 0  # float32 elements (`use_scratch`)
        self.scratch_param = "scr"
        # the iteration variables the last `declare_iteration` bound, and (where set) the
        # stored values `epilogue` hands back instead of storing them: `sgemm`'s vector
        # epilogue stores 4 lanes at once
        self.iteration: dict[str, ix.IExpr] = {}
        self.stored: dict[str, str] | None = None
        # a row kernel's input element where it normalises it: what it stores of the
        # block's stored row input (`structure.stored_row_input`), read once
        self.row_input: str | None = None

    # -- several launches per block -------------------------------------------------------
    def use_scratch(self, elements: int) -> None:
        """Give this block's launches a scratch buffer of ``elements`` floats (``scr``,
        after the outputs)."""
        self.scratch = max(self.scratch, elements)
        if SCRATCH not in self.args:
            self.args.append(SCRATCH)

    def next_kernel(self) -> None:
        """Start the block's next launch: the arguments (and re-laid-out constants)
        stay, the defines, helpers and pinned values of the last one go."""
        self.defines, self.helpers = [], []
        self.em.pinned = {}

    # -- shared pieces ------------------------------------------------------------------
    def signature(self, local: int, image_params: frozenset[str] = frozenset()
                  ) -> tuple[str, list[str]]:
        """The kernel header and the body's first lines, which point each tensor
        name at its buffer plus offset (see the module docstring); ``image_params``
        are declared through the `images` prelude (an image or a buffer at build)."""
        params, pointers = [], []
        for k, value in enumerate(self.args):
            if value == SCRATCH:
                params.append(f"__global float* {self.scratch_param}_buf, const ulong "
                              f"{self.scratch_param}_off")
                pointers.append(f"__global float* restrict {self.scratch_param} = "
                                f"{self.scratch_param}_buf + {self.scratch_param}_off;")
                continue
            qual = "const " if k < self.n_inputs else ""
            name = f"in{k}" if k < self.n_inputs else self.stores[value]
            if name in image_params:
                params.append(f"DNNR_IMAGE_ARG({name})")
                pointers.append(f"DNNR_IMAGE_POINTER({name})")
                continue
            derived = self.em.derived.get(value)
            dtype = str(derived.dtype) if derived is not None else self.view.dtype(value)
            pointer = f"__global {qual}{sp.STORAGE_TYPES.get(dtype, ctype(dtype))}*"
            params.append(f"{pointer} {name}_buf, const ulong {name}_off")
            pointers.append(f"{pointer} restrict {name} = {name}_buf + {name}_off;")
        defines = "".join(f"#define {d}\n" for d in self.defines)
        prelude = (images.PRELUDE if image_params else "") + "".join(self.helpers)
        return (f"{prelude}{defines}__kernel __attribute__((reqd_work_group_size({local}, 1, 1)))\n"
                f"void KNAME({', '.join(params)})"), pointers

    def finish(self, body: Scope, total: int, local: int) -> Kernel:
        inputs = {}
        for k, value in enumerate(self.args[:self.n_inputs]):
            derived = self.em.derived.get(value)
            shape = tuple(derived.shape) if derived is not None else self.view.shape(value)
            inputs[f"in{k}"] = (shape, value)
        work_items = math.prod(self.shape.iteration_shape)
        text, chosen = images.resolve("\n".join("  " + line for line in body.lines), inputs,
                                      work_items, self.block.images)
        self.helpers += sp.helpers(text, self.params.device)  # dnnr_erf (`spelling`)
        header, pointers = self.signature(local, frozenset(chosen))
        lines = "\n".join("  " + line for line in pointers) + "\n" + text
        undefs = "".join(f"#undef {d.split()[0]}\n" for d in self.defines)
        source = f"{header} {{\n{lines}\n}}\n{undefs}"
        global_size = _cdiv(max(total, 1), local) * local
        return Kernel(source, tuple(self.args), global_size, local,
                      tuple(sorted(self.em.derived.items())),
                      tuple((inputs[p][1], w, h, why) for p, (w, h, why) in sorted(chosen.items())),
                      self.variant, self.shape_key, max(total, 1), self.scratch)

    def single_use(self, name: str) -> bool:
        return sum(name in self.view.nodes[n].inputs for n in self.block.nodes) == 1

    def relayout(self, name: str, perm: tuple[int, ...], pad_last: int = 0) -> str | None:
        """Reduction-dimension layout selection for a constant operand: store it
        permuted so the consumer's inner loop reads it contiguously. Returns the
        derived constant's name (read with indices permuted the same way)."""
        constant = self.view.constants.get(name)
        identity = perm == tuple(range(len(perm)))
        if constant is None or name not in self.em.params or (
                identity and pad_last <= np.shape(constant)[-1]):
            return None
        array = np.transpose(constant, perm)
        if pad_last > array.shape[-1]:  # zero columns so a vector load never runs off the end
            widths = [(0, 0)] * (array.ndim - 1) + [(0, pad_last - array.shape[-1])]
            array = np.pad(array, widths)
        return self.derive(name, array, f"{''.join(str(p) for p in perm)}p{array.shape[-1]}")

    def derive(self, name: str, array: np.ndarray, tag: str) -> str:
        """Pass ``array``, computed at generation from constant ``name`` (a layout of
        it), in ``name``'s argument slot; returns the derived constant's name."""
        derived = f"{name}@{tag}"
        self.em.derived[derived] = np.ascontiguousarray(array)
        slot = self.args.index(name)
        self.args[slot] = derived
        self.em.params[derived] = self.em.params[name]
        return derived

    def declare_iteration(self, scope: Scope, exprs: tuple[ix.IExpr, ...]) -> None:
        """Bind ``i0, i1, …`` (the block's iteration variables) for the epilogue."""
        self.iteration = {}
        for k, (expr, size) in enumerate(zip(exprs, self.shape.iteration_shape, strict=False)):
            if not everywhere("==", size, 1):  # as `structure.iteration_vars`
                scope.emit(f"const int i{k} = {ix.render(expr)};")
                self.iteration[f"i{k}"] = expr
                if self.em.merge_splits:
                    self.em.bound[f"i{k}"] = expr

    def epilogue_ops(self) -> int:
        """The operators the store loop evaluates per element (layout operators only move
        the index): ``sgemm``'s pricing charges them to a work-group's edges."""
        registry = ops.current()
        return sum(1 for n in self.shape.spine
                   if (info := registry.get(self.view.nodes[n].op)) is None or info.role != "layout")

    def epilogue(self, scope: Scope, anchor_var: str) -> None:
        node = self.view.nodes[self.shape.anchor]  # type: ignore[index]
        self.em.pinned = {node.outputs[0]: anchor_var}
        for n in self.shape.spine:
            spine_node = self.view.nodes[n]
            out = spine_node.outputs[0]
            var = self.em.node_value(scope, spine_node, out, self.shape.forward[out])
            self.em.pinned[out] = var
        for value in self.shape.stored:  # the row input, also needed outside the block
            self.em.pinned[value] = self.row_input if self.row_input is not None else \
                self.em.value(scope, value, self.shape.forward[value])
        if self.stored is not None:  # the caller stores them (`sgemm`'s vector epilogue)
            self.stored.update({value: self.em.pinned[value] for value in self.stores})
            return
        for value, store in self.stores.items():
            offset = self.store_offset(value, self.shape.forward[value])
            scope.emit(self.store_line(value, store, offset, self.em.pinned[value]))

    def store_line(self, value: str, store: str, offset: str, expr: str) -> str:
        """``expr`` written to element ``offset`` of output ``value``: a float16 tensor holds
        halves, computed in float and converted on the way out (`spelling.STORAGE_TYPES`)."""
        if self.view.dtype(value) == "float16":
            return f"vstore_half({expr}, {offset}, {store});"
        return f"{store}[{offset}] = {expr};"

    def store_offset(self, value: str, index: tuple[ix.IExpr, ...]) -> str:
        """Where element ``index`` of an output goes, in the layout the plan chose."""
        return ix.render(self.em.offset(self.store_index(value, index)))

    def store_index(self, value: str, index: tuple[ix.IExpr, ...]) -> ix.IExpr:
        """`store_offset` as an index expression."""
        return ix.physical_offset(index, self.view.shape(value), self.em.layouts.get(value))

    def anchor(self) -> Node:
        return self.view.nodes[self.shape.anchor]  # type: ignore[index]

    def tile(self, tile: int, size: int) -> int:
        """A register tile along a dim of ``size``: no larger than the dim. (Keeping it
        whatever the dim made symbolic artefacts' code the same at more shapes, and
        MobileNetV2's late convs up to 40 % slower: the versions keep the clamp.)
        A dim of a symbolic build (`symint.SymInt`) below the tile at some shapes: its
        largest value where it stays below the tile everywhere (rows past the dim are
        masked), else this exact value, a version per short length (`symint.pinned`)."""
        if not isinstance(size, SymInt) or everywhere("<=", tile, size):
            return max(1, min(tile, size))
        high = prover.bounds(size.expr, prover.active_ranges())[1]
        if high is not None and high < tile:
            return max(1, int(high))
        return tile if size >= tile else max(1, pinned(size))

    def ivar(self, name: str, size: int) -> ix.IExpr:
        # a dim of 1 drops its index only where it is 1 at every shape (`symint.everywhere`)
        return 0 if everywhere("<=", size, 1) else ix.IVar(name, 0, size - 1)

    # -- pointwise ----------------------------------------------------------------------
    def pointwise(self) -> Kernel:
        padded = nchwc.padded_pointwise(self)  # an output in NCHWc with padded channels
        if padded is not None:
            return padded
        if self.params.pointwise_vectors:
            vectors = vector_pointwise(self, self.params.pointwise_vectors)
            if vectors is not None:
                return vectors
        items = self.pointwise_items()
        if items > 1:
            return self._pointwise_items(items)
        local = self.params.work_group
        total = max((self.view.numel(v) for v in self.block.outputs), default=0)
        scope = Scope()
        scope.emit("const int gid = get_global_id(0);")
        scope.emit(f"if (gid >= {total}) return;")
        for value, store in self.stores.items():
            numel = self.view.numel(value)
            body = scope.child() if numel < total else scope
            flat = self.ivar("gid", numel)
            index = ix.delinearize(flat, self.view.shape(value))
            result = self.em.value(body, value, index)
            body.emit(self.store_line(value, store, self.store_offset(value, index), result))
            if body is not scope:
                scope.nest(f"if (gid < {numel})", body)
        return self.finish(scope, total, local)

    def pointwise_items(self) -> int:
        """`KernelParams.pointwise_items`, halved until it divides every output's last
        dim into runs of at least `POINTWISE_MIN_RUN` lanes (static shapes only: a
        symbolic build keeps one element per work-item)."""
        items = self.params.pointwise_items
        shapes = [self.view.shape(v) for v in self.block.outputs]
        if not shapes or any(not s or any(type(d) is not int or d < 1 for d in s)
                             for s in shapes):
            return 1
        while items > 1 and any(s[-1] % items or s[-1] // items < POINTWISE_MIN_RUN
                                for s in shapes):
            items //= 2
        return items

    def _pointwise_items(self, items: int) -> Kernel:
        """``items`` elements of one row of every output's last dim per work-item, ``R =
        last / items`` apart: work-item ``gid`` takes row ``gid / R``, elements ``lane +
        k·R`` (``lane = gid % R``), so each of its loads and stores is coalesced across
        the warp (consecutive lanes, consecutive elements), the row's index arithmetic
        is done once, and a value that does not depend on the last dim (a broadcast
        operand, the operators on it) is loaded and evaluated once — the emitter's memo
        is keyed by index (`emit.ValueEmitter.value`). (Items adjacent in one work-item
        measured slower on the H200: its stores 8–16 bytes apart across the warp.)"""
        self.variant = f"items {items}"
        total = max(self.view.numel(v) for v in self.block.outputs) // items
        scope = Scope()
        scope.emit("const int gid = get_global_id(0);")
        scope.emit(f"if (gid >= {total}) return;")
        for k, (value, store) in enumerate(self.stores.items()):
            shape = self.view.shape(value)
            run = shape[-1] // items
            groups = self.view.numel(value) // items
            body = scope.child() if groups < total else scope
            body.emit(f"const int row{k} = gid / {run}; const int lane{k} = gid % {run};")
            lead = ix.delinearize(self.ivar(f"row{k}", groups // run), shape[:-1])
            for j in range(items):
                index = (*lead, ix.add(self.ivar(f"lane{k}", run), j * run))
                result = self.em.value(body, value, index)
                body.emit(self.store_line(value, store, self.store_offset(value, index), result))
            if body is not scope:
                scope.nest(f"if (gid < {groups})", body)
        return self.finish(scope, total, self.params.work_group)

    # -- anchor options -----------------------------------------------------------------
    def priced_options(self, sizes: dict[str, int], direct_items: int, tiled_ok: bool,
                       gemv_side: str | None, depthwise_ok: bool, window_taps: int
                       ) -> tuple[str, list[cost.Option], cost.Option | None]:
        """The anchor's shape class (`cost.shape_key`), every option `cost.options` prices
        for it, and `dnnr tune`'s stored option for the class where it applies to this
        member (else None)."""
        p = self.params
        winograd_ok = self.winograd_ok()
        candidates = cost.options(cost.DEVICES[p.device], sizes["m"], sizes["n"], sizes["k"],
                                  sizes["batch"], direct_items, tiled_ok, gemv_side,
                                  depthwise=depthwise_ok, window_taps=window_taps,
                                  width=sizes.get("width", 0), winograd=winograd_ok,
                                  stride=sizes.get("stride", 1),
                                  sgemm=_sgemm_offered(p, self.block.kind),
                                  conv_gemm=self.conv_gemm_ok(),
                                  epilogue_ops=self.epilogue_ops())
        key = cost.shape_key(self.anchor().op, sizes, tiled_ok, gemv_side)
        tuned = dict(p.tuned).get(key)
        if tuned is not None and not ((tuned.variant != "depthwise" or depthwise_ok) and
                                      (tuned.variant != "window" or window_taps > 0) and
                                      (tuned.variant != "winograd" or winograd_ok) and
                                      (tuned.variant != cg.VARIANT or self.conv_gemm_ok())):
            tuned = None  # a class member the stored option does not apply to
        return key, candidates, tuned

    def pick(self, sizes: dict[str, int], direct_items: int, tiled_ok: bool,
             gemv_side: str | None, depthwise_ok: bool = False,
             window_taps: int = 0) -> cost.Option:
        """The anchor's option: forced by `KernelParams`, else the cost model's choice."""
        p = self.params
        self.shape_key, candidates, tuned = self.priced_options(
            sizes, direct_items, tiled_ok, gemv_side, depthwise_ok, window_taps)
        if self.block.implementation and p.anchor_variant is None:
            # the `select` stage's choice among `anchor_options` (by its label)
            pool = candidates + ([tuned] if tuned is not None else [])
            option = next((o for o in pool if o.describe() == self.block.implementation), None)
            if option is None:
                raise ModelError(f"block {self.block.id}: selected implementation "
                                 f"{self.block.implementation!r} is not an option of {self.shape_key}")
            return self._use(option)
        if p.anchor_variant == "depthwise" and p.anchor_depthwise is not None and depthwise_ok:
            option = cost.Option("depthwise", p.anchor_depthwise, 0.0)
        elif p.anchor_variant == "window" and p.anchor_window is not None and window_taps:
            option = cost.Option("window", p.anchor_window, 0.0)
        elif p.anchor_variant == "winograd" and p.anchor_winograd is not None and self.winograd_ok():
            option = cost.Option("winograd", p.anchor_winograd, 0.0)
        elif p.anchor_variant == SGEMM and p.anchor_sgemm is not None and tiled_ok:
            if not p.anchor_sgemm.valid():
                raise ModelError(f"block {self.block.id}: {p.anchor_sgemm.describe()} does not map "
                                 f"its loads onto its work-group (see sgemm.Sgemm.valid)")
            option = cost.Option(SGEMM, p.anchor_sgemm, 0.0)
        elif p.anchor_variant == cg.VARIANT and p.anchor_conv_gemm is not None and \
                self.block.kind == "conv" and cg.applies(self, self.conv_geometry()):
            if not p.anchor_conv_gemm.valid():
                raise ModelError(f"block {self.block.id}: {p.anchor_conv_gemm.describe()} does not "
                                 f"map its loads onto its work-group (see conv_gemm.ConvGemm.valid)")
            option = cost.Option(cg.VARIANT, p.anchor_conv_gemm, 0.0)
        elif p.anchor_variant == "tiled" and p.anchor_tile is not None and tiled_ok:
            if not p.anchor_tile.valid():
                raise ModelError(f"block {self.block.id}: tile {p.anchor_tile} does not map its "
                                 f"loads onto its work-group (see gemm.Tile.valid)")
            option = cost.Option("tiled", p.anchor_tile, 0.0)
        elif p.anchor_variant == "gemv" and p.anchor_gemv is not None and gemv_side:
            option = cost.Option("gemv", p.anchor_gemv, 0.0)
        else:
            option = cost.choose(candidates, p.anchor_variant)
        if tuned is not None and p.anchor_variant is None:
            option = tuned
        return self._use(option)

    def _use(self, option: cost.Option) -> cost.Option:
        if isinstance(option.params, cost.Direct):  # this block's generator only
            a, b = option.params.a, option.params.b
            self.params = replace(self.params, conv_tile_channels=a, conv_tile_width=b,
                                  depthwise_tile_width=b, matmul_tile_m=a, matmul_tile_n=b)
        self.variant = option.describe()
        return option

    def anchor_shape(self) -> tuple[dict[str, int], int, bool, str | None, bool, int]:
        """What `pick` prices for this conv/matmul anchor: (sizes m/n/k/batch, the
        direct kernel's work-items, whether the tiled GEMM applies, the gemv side,
        whether the depthwise kernel applies, the taps the window kernel would cover
        (0: it does not apply))."""
        if self.block.kind == "matmul":
            _, sizes = gemm.matmul_problem(self)
            tm = max(1, min(self.params.matmul_tile_m, sizes["m"]))
            tn = max(1, min(self.params.matmul_tile_n, sizes["n"]))
            direct_items = sizes["batch"] * _cdiv(sizes["m"], tm) * _cdiv(sizes["n"], tn)
            return sizes, direct_items, True, "m" if sizes["m"] == 1 else None, False, 0
        geo = self.conv_geometry()
        depthwise = geo.group > 1 and geo.cin_g == 1
        sizes = {"m": geo.cout_g, "n": geo.columns, "k": geo.cin_g * geo.taps,
                 "batch": geo.group, "width": geo.out_shape[-1], "stride": geo.strides[-1]}
        tw = self.params.depthwise_tile_width if depthwise else self.params.conv_tile_width
        direct_items = geo.columns // max(1, min(tw, geo.out_shape[-1])) * \
            _cdiv(geo.out_shape[1], 1 if depthwise else self.params.conv_tile_channels)
        w_name = self.anchor().inputs[1]
        # the register-window kernels unroll code for this shape's blocks: not in a
        # build whose code must be the same at every shape (`shape_stable`)
        stable = self.params.shape_stable
        window_taps = geo.taps if win.applies(geo) and self.single_use(w_name) and \
            w_name in self.view.constants and not stable else 0
        return (sizes, direct_items, not depthwise, "n" if geo.columns == 1 else None,
                dw.applies(geo) and not stable, window_taps)

    def winograd_ok(self) -> bool:
        """The ``winograd`` option applies: a 3×3 stride-1 conv of one group whose
        weights are a constant read once (transformed at generation), outside a build
        whose code must be the same at every shape."""
        if self.block.kind != "conv" or self.params.shape_stable:
            return False
        w_name = self.anchor().inputs[1]
        return wino.applies(self.conv_geometry()) and w_name in self.view.constants and \
            self.single_use(w_name)

    def conv_gemm_ok(self) -> bool:
        """The ``conv-gemm`` option is offered: a conv it applies to (`conv_gemm.applies`),
        unless `KernelParams.conv_gemm` is off (the cost model offers it on devices
        whose model prices it: the GPU class)."""
        return self.params.conv_gemm and self.block.kind == "conv" and \
            cg.applies(self, self.conv_geometry())

    def conv_geometry(self) -> gemm.ConvGeometry:
        node = self.anchor()
        x_shape = self.view.shape(node.inputs[0])
        w_shape = self.view.shape(node.inputs[1])
        out_shape = self.view.shape(node.outputs[0])
        spatial = len(x_shape) - 2
        kernel = tuple(w_shape[2:])
        strides = tuple(node.attr("strides") or (1,) * spatial)  # type: ignore[arg-type]
        dil = tuple(node.attr("dilations") or (1,) * spatial)  # type: ignore[arg-type]
        begin = _pads_begin(node, x_shape[2:], out_shape[2:], kernel, strides, dil)
        return gemm.ConvGeometry(tuple(x_shape), tuple(out_shape), kernel, strides, dil, begin,
                                 int(node.attr("group", 1)))  # type: ignore[arg-type]

    def conv(self) -> Kernel:
        geo = self.conv_geometry()
        channel_block = nchwc.block_of(self.block.implementation)
        if channel_block is not None and self.params.anchor_variant is None:  # `select`'s pick
            kernel = nchwc.conv_nchwc(self, geo, channel_block)
            if kernel is None:
                raise ModelError(f"block {self.block.id}: selected implementation "
                                 f"{self.block.implementation!r} needs its input stored "
                                 f"{list(channel_block)}")
            return kernel
        option = self.pick(*self.anchor_shape())
        if option.variant == cpu_depthwise.VARIANT:  # CPU devices only (`cost.options`)
            kernel = cpu_depthwise.depthwise_vec(self, geo, option.params)  # type: ignore[arg-type]
            if kernel is not None:
                return kernel
            # where it does not apply (a prologue not computed lane by lane): the next best
            _, candidates, _ = self.priced_options(*self.anchor_shape())
            option = self._use(cost.choose([o for o in candidates
                                            if o.variant != cpu_depthwise.VARIANT]))
        if option.variant == "depthwise":
            return dw.depthwise(self, geo, option.params)  # type: ignore[arg-type]
        if option.variant == cpu_conv.VARIANT:  # CPU devices only (`cost.options`)
            kernel = cpu_conv.conv_lanes(self, geo, option.params)  # type: ignore[arg-type]
            if kernel is not None:
                return kernel
            self.variant = "direct"  # where it does not apply: the kernel generated
        if option.variant == cpu_channels.VARIANT:  # CPU devices only (`cost.options`)
            kernel = cpu_channels.conv_channels(self, geo, option.params)  # type: ignore[arg-type]
            if kernel is not None:
                return kernel
            self.variant = "direct"
        if option.variant == vec_conv.VARIANT:  # CPU devices only (`cost.options`)
            kernel = vec_conv.conv_vec(self, geo, option.params)  # type: ignore[arg-type]
            if kernel is not None:
                return kernel
            self.variant = "direct"
        if option.variant == "window":
            kernel = win.window(self, geo, option.params)  # type: ignore[arg-type]
            if kernel is not None:
                return kernel
        if option.variant == "winograd":
            kernel = wino.winograd(self, geo, option.params)  # type: ignore[arg-type]
            if kernel is not None:
                return kernel
        if option.variant == cg.VARIANT:
            kernel = cg.conv_gemm(self, geo, option.params)  # type: ignore[arg-type]
            if kernel is not None:
                return kernel
        if option.variant == "tiled":
            if col.applies(self, geo):
                return col.im2col_gemm(self, geo)
            problem, _ = gemm.conv_problem(self, geo)
            return gemm.tiled_or_split(self, problem, option.params)  # type: ignore[arg-type]
        if option.variant == SGEMM:
            problem, _ = gemm.conv_problem(self, geo)
            return sgemm(self, problem, option.params)  # type: ignore[arg-type]
        if option.variant == "gemv":
            problem, _ = gemm.conv_problem(self, geo)
            return gemm.gemv(self, problem.batch, problem.k, problem.b, problem.a,
                             lambda scope, row, value: problem.store(scope, row, "0", value),
                             option.params)  # type: ignore[arg-type]
        return self.conv_direct()

    # -- conv -----------------------------------------------------------------------------
    def conv_direct(self) -> Kernel:
        node = self.anchor()
        x_name, w_name = node.inputs[0], node.inputs[1]
        bias = node.inputs[2] if len(node.inputs) > 2 and node.inputs[2] else None
        x_shape, w_shape = self.view.shape(x_name), self.view.shape(w_name)
        out_shape = self.view.shape(node.outputs[0])
        spatial = len(x_shape) - 2
        group = int(node.attr("group", 1))  # type: ignore[arg-type]
        cout, cg = w_shape[0], w_shape[1]
        cout_g = cout // group
        kernel = w_shape[2:]
        strides = tuple(node.attr("strides") or (1,) * spatial)  # type: ignore[arg-type]
        dil = tuple(node.attr("dilations") or (1,) * spatial)  # type: ignore[arg-type]
        begin = _pads_begin(node, x_shape[2:], out_shape[2:], kernel, strides, dil)
        depthwise = group > 1 and cg == 1
        tw = self.params.depthwise_tile_width if depthwise else self.params.conv_tile_width
        tw = self.tile(tw, out_shape[-1])
        limit = self.params.conv_tile_channels
        if group == 1:  # a vector width (the weights are padded to it), at most the limit
            tc = next((t for t in (2, 4, 8, 16) if t >= min(limit, cout)), limit)
        else:  # a tile never straddles two groups
            tc = next(t for t in (limit, 16, 8, 4, 2, 1) if t <= limit and cout_g % t == 0)
        self.defines += [f"TC {tc}", f"TW {tw}"]
        n_ct, n_wt = _cdiv(cout, tc), _cdiv(out_shape[-1], tw)
        outer = out_shape[2:-1]
        total = out_shape[0] * n_ct * math.prod(outer) * n_wt
        s = Scope()
        s.emit("const int gid = get_global_id(0);")
        s.emit(f"if (gid >= {total}) return;")
        s.emit("int r = gid;")
        s.emit(f"const int wt = r % {n_wt}; r /= {n_wt};")
        for d in reversed(range(len(outer))):
            s.emit(f"const int o{d} = r % {outer[d]}; r /= {outer[d]};")
        s.emit(f"const int ct = r % {n_ct}; r /= {n_ct};")
        s.emit("const int n = r;")
        w_perm = (1, *range(2, 2 + spatial), 0)
        w_read = self.relayout(w_name, w_perm, pad_last=n_ct * tc) \
            if self.single_use(w_name) else None
        vector = w_read is not None and tc in (2, 4, 8, 16)
        # TC output channels as one vector when weights are contiguous along Cout
        _zero_accumulators(s, "TC", "TW", (tc, "TW", "b") if vector else None)
        n_var = self.ivar("n", out_shape[0])
        ci = self.ivar("ci", cg)
        channel: ix.IExpr = ci
        if group > 1:
            s.emit(f"const int gbase = ((ct * TC) / {cout_g}) * {cg};")
            channel = ix.add(ix.IOpaque("gbase", 0, x_shape[1] - cg, frozenset({"gbase"})), ci)
        qs = tuple(self.ivar(f"q{d}", k) for d, k in enumerate(kernel))
        # weights for TC output channels
        wbody = Scope(s)
        wbody.emit(f"const int co = {_clamp_high('ct * TC + tc', cout - 1)};")
        co = self.ivar("co", cout)
        w_index = (ci, *qs, co) if w_read else (co, ci, *qs)
        wbody.emit(f"wv[tc] = {self.em.value(wbody, w_read or w_name, w_index)};")
        # inputs for TW output columns
        xbody = Scope(s)
        xbody.emit(f"const int ol = {_clamp_high('wt * TW + tw', out_shape[-1] - 1)};")
        positions, conds = [], []
        out_vars = [f"o{d}" for d in range(len(outer))] + ["ol"]
        for d in range(spatial):
            xbody.emit(f"const int p{d} = {out_vars[d]} * {strides[d]} - {begin[d]} + "
                       f"{ix.render(qs[d])} * {dil[d]};")
            checks = _window_checks(f"p{d}", begin[d], out_shape[2 + d], strides[d],
                                    kernel[d], dil[d], x_shape[2 + d],
                                    self.params.shape_stable)
            if checks:  # read a clamped position and select zero padding after it
                xbody.emit(f"const int c{d} = p{d} < 0 ? 0 : ({_clamp_high(f'p{d}', x_shape[2 + d] - 1)});")
            positions.append(self.ivar(f"c{d}" if checks else f"p{d}", x_shape[2 + d]))
            conds += checks
        # no branch around the load: the fused prologue's per-channel part (BatchNorm's
        # rsqrt of the variance, say) is then loop-invariant and leaves the tap loops
        value = self.em.value(xbody, x_name, (n_var, channel, *positions))
        xbody.emit(f"const float xv = ({' && '.join(conds)}) ? {value} : 0.0f;" if conds
                   else f"const float xv = {value};")
        inner = Scope(s)
        if vector:
            w_shape_padded = self.em.derived[w_read].shape  # type: ignore[index]
            offset = ix.render(ix.linearize((ci, *qs, 0), tuple(w_shape_padded)))
            # an aligned vector load: the row length is padded to a multiple of TC
            inner.emit(f"const float{tc} wv = *(__global const float{tc}*)("
                       f"{self.em.params[w_read]} + {offset} + ct * TC);")  # type: ignore[index]
            xbody.emit("acc[tw] += wv * xv;")
        else:
            xbody.emit(UNROLL + "for (int tc = 0; tc < TC; ++tc) acc[tc][tw] += wv[tc] * xv;")
            inner.emit("float wv[TC];")
            inner.nest(UNROLL + "for (int tc = 0; tc < TC; ++tc)", wbody)
        inner.nest(UNROLL + "for (int tw = 0; tw < TW; ++tw)", xbody)
        for d in reversed(range(spatial)):
            loop = Scope(s)
            loop.nest(f"for (int q{d} = 0; q{d} < {kernel[d]}; ++q{d})", inner)
            inner = loop
        s.nest(f"for (int ci = 0; ci < {cg}; ++ci)", inner)
        fin = Scope(s)
        fin.emit("const int co = ct * TC + tc; const int ol = wt * TW + tw;")
        done = Scope(fin)
        value = "accs[tc]" if vector else "acc[tc][tw]"
        if bias is not None:
            value = f"({value} + {self.em.value(done, bias, (self.ivar('co', cout),))})"
        self.declare_iteration(done, (n_var, ix.IVar("co", 0, cout - 1),
                                      *(ix.IVar(v, 0, 0) for v in out_vars)))
        self.epilogue(done, value)
        fin.nest(f"if (co < {cout} && ol < {out_shape[-1]})", done)
        # the vector epilogue's inner loop stays rolled: unrolled, the fused epilogue is
        # copied TC × TW times and PoCL's first-launch compile takes 3× longer, for no
        # speed. The scalar tile unrolls both, so acc[][] keeps constant indices and
        # stays in registers.
        tiles = Scope(s)
        if vector:
            tiles.emit(f"const float{tc} accv = acc[tw]; const float* accs = (const float*)&accv;")
            tiles.nest("for (int tc = 0; tc < TC; ++tc)", fin)
            s.nest(UNROLL + "for (int tw = 0; tw < TW; ++tw)", tiles)
        else:
            tiles.nest(UNROLL + "for (int tw = 0; tw < TW; ++tw)", fin)
            s.nest(UNROLL + "for (int tc = 0; tc < TC; ++tc)", tiles)
        return self.finish(s, total, self.params.work_group)

    # -- matmul / gemm -----------------------------------------------------------------
    def matmul(self) -> Kernel:
        option = self.pick(*self.anchor_shape())
        problem, _ = gemm.matmul_problem(self)
        if option.variant == "tiled":
            return gemm.tiled_or_split(self, problem, option.params)  # type: ignore[arg-type]
        if option.variant == SGEMM:
            return sgemm(self, problem, option.params)  # type: ignore[arg-type]
        if option.variant == "gemv":
            return gemm.gemv(self, problem.batch, problem.k, problem.a, problem.b,
                             lambda scope, row, value: problem.store(scope, "0", row, value),
                             option.params)  # type: ignore[arg-type]
        if option.variant == cpu_gemv.VARIANT:  # CPU devices only (`cost.options`)
            kernel = cpu_gemv.gemv_packed(self, option.params)  # type: ignore[arg-type]
            if kernel is not None:
                return kernel
            self._use(cost.gemv_direct(cost.DEVICES[self.params.device]))  # where it does not apply
        return self.matmul_direct()

    def matmul_direct(self) -> Kernel:
        node = self.anchor()
        a_name, b_name = node.inputs[0], node.inputs[1]
        a_shape, b_shape = self.view.shape(a_name), self.view.shape(b_name)
        out_shape = self.view.shape(node.outputs[0])
        gemm = node.op == "Gemm"
        trans_a = gemm and bool(node.attr("transA", 0))
        trans_b = gemm and bool(node.attr("transB", 0))
        a_vec, b_vec = len(a_shape) == 1, len(b_shape) == 1
        m_size = 1 if a_vec else (a_shape[-1] if trans_a else a_shape[-2])
        k_size = a_shape[-1] if (a_vec or not trans_a) else a_shape[-2]
        n_size = 1 if b_vec else (b_shape[-2] if trans_b else b_shape[-1])
        batch = out_shape[:len(out_shape) - (0 if a_vec else 1) - (0 if b_vec else 1)]
        tm = self.tile(self.params.matmul_tile_m, m_size)
        tn = self.tile(self.params.matmul_tile_n, n_size)
        self.defines += [f"TM {tm}", f"TN {tn}"]
        n_mt, n_nt = _cdiv(m_size, tm), _cdiv(n_size, tn)
        total = math.prod(batch) * n_mt * n_nt
        s = Scope()
        s.emit("const int gid = get_global_id(0);")
        s.emit(f"if (gid >= {total}) return;")
        s.emit("int r = gid;")
        s.emit(f"const int nt = r % {n_nt}; r /= {n_nt};")
        # a symbolic build's outermost index is the quotient itself (gid < total makes
        # it less than its size): one magic division fewer per work-item
        outer_is_quotient = isinstance(batch[0] if batch else n_mt, SymInt)
        s.emit("const int mt = r;" if outer_is_quotient and not batch else
               f"const int mt = r % {n_mt}; r /= {n_mt};")
        for d in reversed(range(len(batch))):
            s.emit(f"const int b{d} = r;" if outer_is_quotient and d == 0 else
                   f"const int b{d} = r % {batch[d]}; r /= {batch[d]};")
        bidx = tuple(self.ivar(f"b{d}", size) for d, size in enumerate(batch))
        b_read = None
        if not b_vec and tn in (2, 4, 8, 16) and self.single_use(b_name):
            rank_b = len(b_shape)
            perm = (*range(rank_b - 2), rank_b - 1, rank_b - 2) if trans_b else tuple(range(rank_b))
            b_read = self.relayout(b_name, perm, pad_last=n_nt * tn)
            if b_read is None and not trans_b and b_name in self.view.constants and \
                    n_size % tn == 0 and b_name in self.em.params:
                b_read = b_name  # already [..., K, N] with N a multiple of TN
        # TN output columns as one vector when B rows are contiguous along N
        _zero_accumulators(s, "TM", "TN", (tn, "TM", "a") if b_read is not None else None)
        k = self.ivar("k", k_size)
        m, nn = self.ivar("m", m_size), self.ivar("nn", n_size)
        abody = Scope(s)
        # a symbolic build (sizes are arguments): where the rows fill whole tiles the
        # clamp goes, a version per divisibility (a path condition); with a literal
        # size LLVM drops it itself, and with it the loads are one row apart (BERT's
        # QKV matmul at seq 16: 17.7 µs with the clamp, 11.5 bound)
        exact_m = isinstance(m_size, SymInt) and m_size % tm == 0
        exact_n = isinstance(n_size, SymInt) and n_size % tn == 0
        abody.emit(f"const int m = {'mt * TM + tm' if exact_m else _clamp_last('mt * TM + tm', m_size)};")
        if a_vec:
            a_index: tuple[ix.IExpr, ...] = (k,)
        else:
            a_batch = ix.broadcast_index(bidx, batch, a_shape[:-2]) if batch else ()
            a_index = (*a_batch, k, m) if trans_a else (*a_batch, m, k)
        abody.emit(f"av[tm] = {self.em.value(abody, a_name, a_index)};")
        bbody = Scope(s)
        bbody.emit(f"const int nn = {'nt * TN + tn' if exact_n else _clamp_last('nt * TN + tn', n_size)};")
        if b_vec:
            b_index: tuple[ix.IExpr, ...] = (k,)
        else:
            b_batch = ix.broadcast_index(bidx, batch, b_shape[:-2]) if batch else ()
            b_index = (*b_batch, nn, k) if trans_b else (*b_batch, k, nn)
        loop = Scope(s)
        loop.emit("float av[TM];")
        loop.nest(UNROLL + "for (int tm = 0; tm < TM; ++tm)", abody)
        if b_read is not None:
            shape_b = self.em.derived[b_read].shape if b_read in self.em.derived else b_shape
            offset = ix.render(ix.linearize((*b_batch, k, 0), tuple(shape_b)))
            # aligned: rows are padded to (or already) a multiple of TN
            loop.emit(f"const float{tn} bv = *(__global const float{tn}*)("
                      f"{self.em.params[b_read]} + {offset} + nt * TN);")
            loop.emit(UNROLL + "for (int tm = 0; tm < TM; ++tm) acc[tm] += av[tm] * bv;")
        else:
            bbody.emit(f"bv[tn] = {self.em.value(bbody, b_name, b_index)};")
            loop.emit("float bv[TN];")
            loop.nest(UNROLL + "for (int tn = 0; tn < TN; ++tn)", bbody)
            loop.emit(UNROLL + "for (int tm = 0; tm < TM; ++tm) " + UNROLL +
                      "for (int tn = 0; tn < TN; ++tn) acc[tm][tn] += av[tm] * bv[tn];")
        s.nest(f"for (int k = 0; k < {k_size}; ++k)", loop)
        fin = Scope(s)
        fin.emit("const int m = mt * TM + tm; const int nn = nt * TN + tn;")
        done = Scope(fin)
        value = "accs[tn]" if b_read is not None else "acc[tm][tn]"
        if gemm:
            alpha, beta = float(node.attr("alpha", 1.0)), float(node.attr("beta", 1.0))
            value = f"({sp.literal(alpha, 'float32')} * {value})"
            if len(node.inputs) > 2 and node.inputs[2] and beta != 0.0:
                c_name = node.inputs[2]
                c_index = ix.broadcast_index((m, nn), (m_size, n_size), self.view.shape(c_name))
                cval = self.em.value(done, c_name, c_index)
                value = f"({value} + {sp.literal(beta, 'float32')} * {cval})"
        out_index = (*bidx, *(() if a_vec else (m,)), *(() if b_vec else (nn,)))
        self.declare_iteration(done, out_index)
        self.epilogue(done, value)
        # whole tiles (a symbolic build's version, above) need no bound on the store
        guard = " && ".join(c for c, exact in ((f"m < {m_size}", exact_m),
                                               (f"nn < {n_size}", exact_n)) if not exact)
        fin.nest(f"if ({guard})" if guard else "", done)
        tiles = Scope(s)
        if b_read is not None:
            tiles.emit(f"const float{tn} accv = acc[tm]; const float* accs = (const float*)&accv;")
        # rolled for a vector tile, unrolled for a scalar one: see conv's epilogue
        tiles.nest(("" if b_read is not None else UNROLL) + "for (int tn = 0; tn < TN; ++tn)", fin)
        s.nest(UNROLL + "for (int tm = 0; tm < TM; ++tm)", tiles)
        return self.finish(s, total, self.params.work_group)

    # -- pooling and LRN ---------------------------------------------------------------
    def pool(self) -> Kernel:
        node = self.anchor()
        x_name = node.inputs[0]
        x_shape = self.view.shape(x_name)
        out_shape = self.view.shape(node.outputs[0])
        extra = node.outputs[1] if len(node.outputs) > 1 else ""
        if extra and (extra in self.view.consumer_indices or extra in self.view.graph_outputs):
            raise ModelError("MaxPool's Indices output is not supported by the OpenCL backend")
        if node.op == "MaxPool" and len(x_shape) == 4 and not node.attr("ceil_mode", 0) and \
                self.params.device == "cpu" and not self.params.shape_stable:
            self.variant = cpu_depthwise.POOL_VARIANT
            kernel = cpu_depthwise.max_pool_vec(self, self._pool_geometry(node, x_shape, out_shape))
            if kernel is not None:  # stride 2, the input computed lane by lane
                return kernel
            self.variant = ""
        total = math.prod(out_shape)
        s = Scope()
        s.emit("const int gid = get_global_id(0);")
        s.emit(f"if (gid >= {total}) return;")
        gid = self.ivar("gid", total)
        idx = tuple(self.ivar(f"i{k}", size) for k, size in enumerate(out_shape))
        self.declare_iteration(s, ix.delinearize(gid, out_shape))
        if node.op == "LRN":
            value = self._lrn(s, node, x_name, x_shape, idx)
        else:
            value = self._window(s, node, x_name, x_shape, out_shape, idx)
        self.epilogue(s, value)
        return self.finish(s, total, self.params.work_group)

    def _pool_geometry(self, node: Node, x_shape: tuple[int, ...], out_shape: tuple[int, ...]
                       ) -> gemm.ConvGeometry:
        """A 2-D pool's window as a depthwise conv's geometry (a group per channel)."""
        kernel = tuple(node.attr("kernel_shape"))  # type: ignore[arg-type]
        strides = tuple(node.attr("strides") or (1, 1))  # type: ignore[arg-type]
        dil = tuple(node.attr("dilations") or (1, 1))  # type: ignore[arg-type]
        begin = _pads_begin(node, x_shape[2:], out_shape[2:], kernel, strides, dil)
        return gemm.ConvGeometry(tuple(x_shape), tuple(out_shape), kernel, strides, dil, begin,
                                 x_shape[1])

    def _window(self, s: Scope, node: Node, x_name: str, x_shape: tuple[int, ...],
                out_shape: tuple[int, ...], idx: tuple[ix.IExpr, ...]) -> str:
        spatial = len(x_shape) - 2
        kernel = tuple(node.attr("kernel_shape"))  # type: ignore[arg-type]
        strides = tuple(node.attr("strides") or (1,) * spatial)  # type: ignore[arg-type]
        dil = tuple(node.attr("dilations") or (1,) * spatial)  # type: ignore[arg-type]
        begin = _pads_begin(node, x_shape[2:], out_shape[2:], kernel, strides, dil)
        pads = tuple(node.attr("pads") or (0,) * 2 * spatial)  # type: ignore[arg-type]
        is_max = node.op == "MaxPool"
        s.emit("float accv = -INFINITY;" if is_max else "float accv = 0.0f; int cnt = 0;")
        # a small window straight-line (each tap a literal): PoCL vectorises a
        # work-group's items only when their code has no loop left (ResNet's 3×3 MaxPool
        # ran its taps as loops over size arguments, `build.hoist_sizes`)
        taps = int(np.prod(kernel))
        if taps <= POOL_UNROLL_TAPS:
            for q in np.ndindex(*kernel):
                tap = Scope(s)
                for d in range(spatial):
                    tap.emit(f"const int q{d} = {q[d]};")
                self._pool_tap(tap, node, x_name, x_shape, out_shape, idx,
                               (strides, dil, begin), is_max)
                s.nest("", tap)
        else:
            body = Scope(s)
            self._pool_tap(body, node, x_name, x_shape, out_shape, idx, (strides, dil, begin),
                           is_max)
            loop = body
            for d in reversed(range(spatial)):
                outer = Scope(s)
                outer.nest(f"for (int q{d} = 0; q{d} < {kernel[d]}; ++q{d})", loop)
                loop = outer
            s.lines.extend(loop.lines)
        if is_max:
            return "accv"
        if int(node.attr("count_include_pad", 0)):  # type: ignore[arg-type]
            # window positions inside the padded input (not the ceil_mode overhang)
            terms = []
            for d in range(spatial):
                lo = f"({ix.render(idx[2 + d])} * {strides[d]} - {begin[d]})"
                hi_lim = x_shape[2 + d] + pads[d + spatial]
                if dil[d] > 1:  # the taps (every dil-th position) before the padded end
                    terms.append(f"min({kernel[d]}, ({hi_lim} - {lo} + {dil[d] - 1}) / {dil[d]})")
                    continue
                terms.append(f"(min({lo} + {(kernel[d] - 1) * dil[d] + 1}, {hi_lim}) - max({lo}, "
                             f"{-begin[d]}))")
            return f"(accv / (float)({' * '.join(terms)}))"
        return "(accv / (float)cnt)"

    def _pool_tap(self, body: Scope, node: Node, x_name: str, x_shape: tuple[int, ...],
                  out_shape: tuple[int, ...], idx: tuple[ix.IExpr, ...],
                  geometry: tuple[tuple[int, ...], ...], is_max: bool) -> None:
        """One window tap ``q0, q1, …`` (variables of ``body``) of a pool."""
        strides, dil, begin = geometry
        kernel = tuple(node.attr("kernel_shape"))  # type: ignore[arg-type]
        conds, positions = [], []
        for d in range(len(x_shape) - 2):
            body.emit(f"const int p{d} = {ix.render(idx[2 + d])} * {strides[d]} - {begin[d]} + "
                      f"q{d} * {dil[d]};")
            conds += _window_checks(f"p{d}", begin[d], out_shape[2 + d], strides[d],
                                    kernel[d], dil[d], x_shape[2 + d],
                                    self.params.shape_stable)
            positions.append(self.ivar(f"p{d}", x_shape[2 + d]))
        guarded = Scope(body)
        x = self.em.value(guarded, x_name, (idx[0], idx[1], *positions))
        guarded.emit(f"const float xv = {x}; accv = xv > accv ? xv : accv;" if is_max
                     else f"accv += {x}; cnt += 1;")
        body.nest(f"if ({' && '.join(conds)})" if conds else "", guarded)

    def _lrn(self, s: Scope, node: Node, x_name: str, x_shape: tuple[int, ...],
             idx: tuple[ix.IExpr, ...]) -> str:
        size = int(node.attr("size"))  # type: ignore[arg-type]
        alpha = float(node.attr("alpha", 1e-4))
        beta = float(node.attr("beta", 0.75))
        bias = float(node.attr("bias", 1.0))
        lo, hi = (size - 1) // 2, _cdiv(size - 1, 2)
        channels = x_shape[1]
        s.emit("float sq = 0.0f;")
        body = Scope(s)
        cvar = self.ivar("cc", channels)
        x = self.em.value(body, x_name, (idx[0], cvar, *idx[2:]))
        body.emit(f"sq = {sp.multiply_add(x, x, 'sq')};")
        s.nest(f"for (int cc = max(0, {ix.render(idx[1])} - {lo}); "
               f"cc <= min({channels - 1}, {ix.render(idx[1])} + {hi}); ++cc)", body)
        center = self.em.value(s, x_name, idx)
        return (f"({center} / pow({sp.literal(bias, 'float32')} + "
                f"{sp.literal(alpha / size, 'float32')} * sq, {sp.literal(beta, 'float32')}))")

    # -- reductions ----------------------------------------------------------------------
    def reduce(self) -> Kernel:
        node = self.anchor()
        x_name = node.inputs[0]
        x_shape = self.view.shape(x_name)
        out_shape = self.view.shape(node.outputs[0])
        rank = len(x_shape)
        op = node.op
        if op in ("GlobalAveragePool", "GlobalMaxPool"):
            axes, keep = tuple(range(2, rank)), True
        elif op in ("ArgMax", "ArgMin"):
            axes, keep = (int(node.attr("axis", 0)) % rank,), bool(node.attr("keepdims", 1))
        else:
            axes, keep = reduce_axes(self.view, node)
        reduced = tuple(x_shape[a] for a in axes)
        length = math.prod(reduced)
        total = math.prod(out_shape)
        kept_axes = [a for a in range(rank) if a not in axes]

        def input_index(out_idx: tuple[ix.IExpr, ...], r_idx: tuple[ix.IExpr, ...]
                        ) -> tuple[ix.IExpr, ...]:
            full: list[ix.IExpr] = [0] * rank
            for k, a in enumerate(axes):
                full[a] = r_idx[k]
            for k, a in enumerate(kept_axes):
                full[a] = out_idx[a] if keep else out_idx[k]
            return tuple(full)

        init, step, final = _REDUCERS["Max" if op == "GlobalMaxPool" else
                                      "Mean" if op == "GlobalAveragePool" else op.replace("Reduce", "")]
        if op in cpu_reduce.SUMS:  # CPU class: rows on vectors (`cpu_reduce`)
            kernel = cpu_reduce.row_sum(self, x_name, tuple(axes), final)
            if kernel is not None:
                return kernel
        out_idx = tuple(self.ivar(f"i{k}", size) for k, size in enumerate(out_shape))
        # many short rows (a CPU's GlobalAveragePool over 7×7): a work-item per row, as
        # the row kernels do (`serial_rows`) — a work-group per row costs PoCL a barrier
        # loop per row (576 rows of 49 ran 0.32 ms as work-groups, 0.03 ms serial)
        serial = length < self.params.serial_reduce_below or op in ("ArgMax", "ArgMin") or \
            self.serial_rows(length, total)
        s = Scope()
        if serial:
            local = self.params.work_group
            s.emit("const int gid = get_global_id(0);")
            s.emit(f"if (gid >= {total}) return;")
            self.declare_iteration(s, ix.delinearize(self.ivar("gid", total), out_shape))
            body = Scope(s)
            r_idx = ix.delinearize(self.ivar("r", length), reduced)
            x = self.em.value(body, x_name, input_index(out_idx, r_idx))
            if op in ("ArgMax", "ArgMin"):
                cmp = ">" if op == "ArgMax" else "<"
                cmp += "=" if node.attr("select_last_index", 0) else ""
                s.emit("float best = 0.0f; long besti = 0;")
                body.emit(f"if (r == 0 || {x} {cmp} best) {{ best = {x}; besti = r; }}")
                s.nest(f"for (int r = 0; r < {length}; ++r)", body)
                self.epilogue(s, "besti")
                return self.finish(s, total, local)
            # one loop per reduced axis, not a flat ``r`` split by / and %: with sizes as
            # kernel arguments (`build.hoist_sizes`) each split is an integer division
            # per element (PoCL: GlobalAveragePool over 576 × 7×7 ran 10× slower)
            body = Scope(s)
            loops = [(f"r{k}", size) for k, size in enumerate(reduced)]
            x = self.em.value(body, x_name, input_index(
                out_idx, tuple(self.ivar(name, size) for name, size in loops)))
            s.emit(f"float accv = {init};")
            body.emit(f"accv = {step.format('accv', x)};")
            for name, size in reversed(loops):
                outer = Scope(s)
                outer.nest(f"for (int {name} = 0; {name} < {size}; ++{name})", body)
                body = outer
            s.lines.extend(body.lines)
            self.epilogue(s, final.format("accv", float(length)))
            return self.finish(s, total, local)
        out_vars = ix.delinearize(self.ivar("o", total), out_shape)
        r_idx = ix.delinearize(self.ivar("r", length), reduced)
        groups, local = self.row_groups(total, length, self.params.reduce_unroll)
        if groups > 1:
            def finish(scope: Scope, value: str) -> None:
                self.declare_iteration(scope, out_vars)
                self.epilogue(scope, value)

            return row_split.split_reduce(
                self, total, length, groups, local,
                lambda body: self.em.value(body, x_name, input_index(out_vars, r_idx)),
                (init, step, final), _combine_only(step), finish)
        self.defines.append(f"WG {local}")
        s.emit("const int o = get_group_id(0); const int lid = get_local_id(0);")
        s.emit("__local float red[WG];")
        body = Scope(s)
        if len(reduced) > 1 and 2 * reduced[-1] >= local:
            s.emit(f"float accv = {init};")
            # the outer reduced axes as loops and the innermost split over the group
            # (at most half its lanes idle): no / and % per element (see the serial
            # form above; PoCL: 16 × 56² ran 0.21 ms flat, 0.03 ms with literal sizes)
            loops = [(f"r{k}", size) for k, size in enumerate(reduced)]
            x = self.em.value(body, x_name, input_index(
                out_vars, tuple(self.ivar(name, size) for name, size in loops)))
            body.emit(f"accv = {step.format('accv', x)};")
            inner, extent = loops[-1]
            headers = [f"for (int {inner} = lid; {inner} < {extent}; {inner} += WG)"] + \
                [f"for (int {name} = 0; {name} < {size}; ++{name})" for name, size in
                 reversed(loops[:-1])]
            for header in headers:
                outer = Scope(s)
                outer.nest(header, body)
                body = outer
            s.lines.extend(body.lines)
        elif self.params.reduce_unroll > 1:
            if not (self.params.reduce_vectors and vector_accumulate(
                    self, s, "accv", (init, step, _combine_only(step)), length,
                    self.params.reduce_unroll, x_name, input_index(out_vars, r_idx))):
                row_split.strided_accumulate(
                    s, "accv", (init, step, _combine_only(step)), "lid", str(length), "WG",
                    self.params.reduce_unroll,
                    lambda body: self.em.value(body, x_name, input_index(out_vars, r_idx)))
        else:
            s.emit(f"float accv = {init};")
            x = self.em.value(body, x_name, input_index(out_vars, r_idx))
            body.emit(f"accv = {step.format('accv', x)};")
            s.nest(f"for (int r = lid; r < {length}; r += WG)", body)
        s.lines.extend(_tree_reduce(step, "accv"))
        done = Scope(s)
        self.declare_iteration(done, out_vars)
        self.epilogue(done, final.format("red[0]", float(length)))
        s.nest("if (lid == 0)", done)
        return self.finish(s, total * local, local)

    def row_groups(self, rows: int, length: int, in_flight: int = 1) -> tuple[int, int]:
        """(work-groups per row, work-group size) of a row kernel that runs a work-group
        per row: the forced `KernelParams.row_split`, else `cost.row_options`' choice
        (1 = one work-group per row). ``in_flight``: loads a work-item keeps in flight
        (`KernelParams.reduce_unroll`), which the grid's fill counts: EfficientNet's
        GlobalAveragePools over 256 and 768 rows ran 0.010/0.014 ms split in two
        launches, 0.007/0.008 ms in one with 4 partials (H200)."""
        local = min(self.params.reduce_work_group, 1 << bit_length(max(length - 1, 1)))
        if self.params.shape_stable:  # the split's chunking is this shape's
            return 1, local
        if self.params.row_split is not None:
            split: cost.Option | None = cost.Option("row-split", self.params.row_split, 0.0)
        else:
            split = cost.choose(cost.row_options(cost.DEVICES[self.params.device], rows,
                                                 length, local * max(1, in_flight)))
            _note_row_choice(self.params.device, rows, length, local * max(1, in_flight), split)
        if split is None or not isinstance(split.params, row_split.RowSplit):
            return 1, local
        chunk, groups = row_split.chunking(length, split.params.groups)
        if groups < 2:
            return 1, local
        self.variant = split.describe()
        return groups, min(local, 1 << bit_length(max(chunk - 1, 1)))

    def indexed(self) -> Kernel:
        """An ``anchor indexed`` operator: one work item per output element, its value
        from the operator's generator in `ops_extra`, then the block's epilogue."""
        node = self.anchor()
        out_shape = self.view.shape(node.outputs[0])
        total = math.prod(out_shape)
        s = Scope()
        s.emit("const int gid = get_global_id(0);")
        s.emit(f"if (gid >= {total}) return;")
        self.declare_iteration(s, ix.delinearize(self.ivar("gid", total), out_shape))
        out_idx = tuple(self.ivar(f"i{k}", size) for k, size in enumerate(out_shape))
        self.epilogue(s, ops_extra.generate(self, s, node, out_idx))
        return self.finish(s, total, self.params.work_group)

    def serial_rows(self, length: int, rows: int) -> bool:
        """One work-item per row rather than one work-group (`KernelParams.row_serial_below`)."""
        return length < self.params.row_serial_below and rows >= self.params.row_serial_min_rows

    def row_start(self, s: Scope, serial: bool, rows: int, length: int) -> tuple[str, int]:
        """Bind ``o`` (this kernel instance's row); return the loop header that walks
        the row's elements ``r`` and the work-group size."""
        if serial:
            s.emit("const int o = get_global_id(0);")
            s.emit(f"if (o >= {rows}) return;")
            return f"for (int r = 0; r < {length}; ++r)", self.params.work_group
        local = min(self.params.reduce_work_group, 1 << bit_length(max(length - 1, 1)))
        self.defines.append(f"WG {local}")
        s.emit("const int o = get_group_id(0); const int lid = get_local_id(0);")
        s.emit("__local float red[WG];")
        return f"for (int r = lid; r < {length}; r += WG)", local

    def row_reduce(self, s: Scope, serial: bool, loop: str, length: int, var: str, init: str,
                   step: str, term: Callable[[Scope], str]) -> str:
        """Reduce ``term`` (emitted into a loop body that binds ``r``) over the row
        with ``step``; return the expression of the row's total. ``loop`` is
        `row_start`'s loop over the row.

        A work-group strides over the row, then combines its lanes in a tree. A
        serial row keeps `KernelParams.row_serial_lanes` partials for consecutive
        elements (an unrolled inner loop: the compiler turns them into vector loads
        and vector arithmetic where the row is contiguous), then the tail."""
        lanes = self.params.row_serial_lanes
        if not serial or lanes < 2 or length < lanes:
            s.emit(f"float {var} = {init};")
            body = Scope(s)
            body.emit(f"{var} = {step.format(var, term(body))};")
            s.nest(loop, body)
            if serial:
                return var
            s.lines.extend(_tree_reduce(step, var))
            return "red[0]"
        if f"LANES {lanes}" not in self.defines:  # a literal: the loops over it unroll
            self.defines.append(f"LANES {lanes}")
        combine, chunked = _combine_only(step), length - length % lanes
        s.emit(f"float {var}_[LANES];")
        s.emit(UNROLL + f"for (int j = 0; j < LANES; ++j) {var}_[j] = {init};")
        lane = Scope(s)
        lane.emit("const int r = r0 + j;")
        lane.emit(f"{var}_[j] = {step.format(f'{var}_[j]', term(lane))};")
        chunk = Scope(s)
        chunk.nest(UNROLL + "for (int j = 0; j < LANES; ++j)", lane)
        s.nest(f"for (int r0 = 0; r0 < {chunked}; r0 += LANES)", chunk)
        s.emit(f"float {var} = {var}_[0];")
        s.emit(UNROLL + f"for (int j = 1; j < LANES; ++j) {var} = "
               f"{combine.format(var, f'{var}_[j]')};")
        if chunked < length:
            tail = Scope(s)
            tail.emit(f"{var} = {step.format(var, term(tail))};")
            s.nest(f"for (int r = {chunked}; r < {length}; ++r)", tail)
        return var

    def rownorm(self) -> Kernel:
        node = self.anchor()
        x_name = node.inputs[0]
        x_shape = self.view.shape(x_name)
        rank = len(x_shape)
        layer_norm = node.op in ("LayerNormalization", "InstanceNormalization")
        if layer_norm and any(o for o in node.outputs[1:]):
            raise ModelError("LayerNormalization's Mean/InvStdDev outputs are not supported")
        axes = ops_models.normalised_axes(node, rank)
        reduced = tuple(x_shape[a] for a in axes)
        outer_axes = [a for a in range(rank) if a not in axes]
        outer = tuple(x_shape[a] for a in outer_axes)
        length = math.prod(reduced)
        rows = math.prod(outer)
        serial = self.serial_rows(length, rows)
        o_idx = ix.delinearize(self.ivar("o", rows), outer)

        def full(r_idx: tuple[ix.IExpr, ...]) -> tuple[ix.IExpr, ...]:
            out: list[ix.IExpr] = [0] * rank
            for k, a in enumerate(axes):
                out[a] = r_idx[k]
            for k, a in enumerate(outer_axes):
                out[a] = o_idx[k]
            return tuple(out)

        r_idx = ix.delinearize(self.ivar("r", length), reduced)
        groups = 1 if serial else self.row_groups(rows, length)[0]
        if groups > 1:
            return self._split_rownorm(node, rows, length, groups, x_name, x_shape, full(r_idx))
        if not serial and node.op == "LayerNormalization" and self.params.strided_rows and \
                not self.shape.stored:  # the pixel form stores only the normalised rows
            kernel = pixel_form.pixel_rownorm(
                self, node, rows, length, x_name, x_shape, full(r_idx),
                lambda body, x: self._scale_shift(body, node, full(r_idx), x_shape, x))
            if kernel is not None:
                return kernel
        if not serial and node.op == "LayerNormalization" and self.params.packed_rows and \
                self.params.row_cache > 0:
            kernel = pixel_form.packed_rownorm(
                self, node, rows, length, x_name, full(r_idx),
                lambda body, x: self._scale_shift(body, node, full(r_idx), x_shape, x),
                self._row_lanes(length))
            if kernel is not None:
                return kernel
        if not serial and self.params.row_cache > 0:
            return self._cached_rownorm(node, rows, length, x_name, x_shape, full(r_idx))
        s = Scope()
        loop, local = self.row_start(s, serial, rows, length)
        init, first = ("0.0f", "({0} + {1})") if layer_norm else _REDUCERS["Max"][:2]
        first_total = self.row_reduce(s, serial, loop, length, "accv", init, first,
                                      lambda body: self.em.value(body, x_name, full(r_idx)))
        count = sp.literal(float(length), "float32")
        s.emit(f"const float center = {f'({first_total} / {count})' if layer_norm else first_total};")
        if not serial:  # every lane has read red[0] before it is reused
            s.emit("barrier(CLK_LOCAL_MEM_FENCE);")
        if not layer_norm:
            self.helpers.append(INLINE_EXP)

        def term(body: Scope) -> str:
            x = self.em.value(body, x_name, full(r_idx))
            return f"({x} - center) * ({x} - center)" if layer_norm else f"dnnr_exp({x} - center)"

        second_total = self.row_reduce(s, serial, loop, length, "accs", "0.0f",
                                        "({0} + {1})", term)
        if layer_norm:
            eps = sp.literal(float(node.attr("epsilon", 1e-5)), "float32")
            s.emit(f"const float scale = rsqrt({second_total} / {count} + {eps});")
        elif node.op == "LogSoftmax":
            s.emit(f"const float log_total = log({second_total});")
        else:  # one division per row, a multiply per element
            s.emit(f"const float inv_total = 1.0f / {second_total};")
        body = Scope(s)
        index = full(r_idx)
        x = self.em.value(body, x_name, index)
        if layer_norm:
            value = self._scale_shift(body, node, index, x_shape, f"({x} - center) * scale")
        elif node.op == "LogSoftmax":
            value = f"({x} - center - log_total)"
        else:
            value = f"(dnnr_exp({x} - center) * inv_total)"
        self.declare_iteration(body, index)
        self.row_input = x
        self.epilogue(body, value)
        s.nest(loop, body)
        return self.finish(s, rows if serial else rows * local, local)

    def _cached_rownorm(self, node: Node, rows: int, length: int, x_name: str,
                        x_shape: tuple[int, ...], index: tuple[ix.IExpr, ...]) -> Kernel:
        """One work-group per row, the row in registers: work-item ``lid`` holds elements
        ``lid + j·WG`` (j < ROWC; consecutive lanes read consecutive elements), read once
        (prologue included) for the first reduction; the second reduction and the
        normalised outputs use the registers. `KernelParams.row_cache` sets ROWC."""
        layer_norm = node.op in ("LayerNormalization", "InstanceNormalization")
        local = self._row_lanes(length)
        per_lane = -(-length // local)
        self.defines += [f"WG {local}", f"ROWC {per_lane}"]
        ragged = length % local != 0
        s = Scope()
        s.emit("const int o = get_group_id(0); const int lid = get_local_id(0);")
        s.emit("__local float red[WG];")
        s.emit("float xs[ROWC];")
        loop = UNROLL + "for (int j = 0; j < ROWC; ++j)"

        def each(emit: Callable[[Scope], None]) -> None:
            """``emit`` for each of this work-item's elements ``r`` of the row."""
            body = Scope(s)
            body.emit("const int r = lid + j * WG;")
            inner = Scope(body) if ragged else body
            emit(inner)
            if ragged:
                body.nest(f"if (r < {length})", inner)
            s.nest(loop, body)

        init, first = ("0.0f", "({0} + {1})") if layer_norm else _REDUCERS["Max"][:2]
        s.emit(f"float accv = {init};")

        def load(body: Scope) -> None:
            body.emit(f"xs[j] = {self.em.value(body, x_name, index)};")
            body.emit(f"accv = {first.format('accv', 'xs[j]')};")

        each(load)
        s.lines.extend(_tree_reduce(first, "accv"))
        count = sp.literal(float(length), "float32")
        s.emit(f"const float center = {'(red[0] / ' + count + ')' if layer_norm else 'red[0]'};")
        s.emit("barrier(CLK_LOCAL_MEM_FENCE);")  # every lane has read red[0]
        if not layer_norm:
            self.helpers.append(INLINE_EXP)
        s.emit("float accs = 0.0f;")
        term = "(xs[j] - center) * (xs[j] - center)" if layer_norm else "dnnr_exp(xs[j] - center)"
        each(lambda body: body.emit(f"accs = accs + {term};"))
        s.lines.extend(_tree_reduce("({0} + {1})", "accs"))
        if layer_norm:
            eps = sp.literal(float(node.attr("epsilon", 1e-5)), "float32")
            s.emit(f"const float scale = rsqrt(red[0] / {count} + {eps});")
        elif node.op == "LogSoftmax":
            s.emit("const float log_total = log(red[0]);")
        else:  # one division per row, a multiply per element
            s.emit("const float inv_total = 1.0f / red[0];")

        def normalise(body: Scope) -> None:
            if layer_norm:
                value = self._scale_shift(body, node, index, x_shape, "(xs[j] - center) * scale")
            elif node.op == "LogSoftmax":
                value = "(xs[j] - center - log_total)"
            else:
                value = "(dnnr_exp(xs[j] - center) * inv_total)"
            self.declare_iteration(body, index)
            self.row_input = "xs[j]"
            self.epilogue(body, value)

        each(normalise)
        return self.finish(s, rows * local, local)

    def _row_lanes(self, length: int) -> int:
        """The lanes of a row kept in registers: about `KernelParams.row_cache` elements
        each, 32 at least (`_cached_rownorm`, `pixel_rows.packed_rownorm`)."""
        lanes = -(-length // self.params.row_cache)
        return min(self.params.reduce_work_group, max(32, 1 << bit_length(max(lanes - 1, 1))))

    def _scale_shift(self, body: Scope, node: Node, index: tuple[ix.IExpr, ...],
                     x_shape: tuple[int, ...], normalised: str) -> str:
        """``normalised * scale + bias`` of a Layer/InstanceNormalization, its parameters
        read where `ops_models.parameter_index` says (one place for both row forms)."""
        def parameter(k: int) -> str:
            return self.em.value(body, node.inputs[k], ops_models.parameter_index(
                node, index, x_shape, self.view.shape(node.inputs[k])))

        value = f"({normalised} * {parameter(1)})"
        if len(node.inputs) > 2 and node.inputs[2]:
            value = f"({value} + {parameter(2)})"
        return value

    def _split_rownorm(self, node: Node, rows: int, length: int, groups: int, x_name: str,
                       x_shape: tuple[int, ...], index: tuple[ix.IExpr, ...]) -> Kernel:
        """`rownorm` with several work-groups per row (`rows.split_rownorm`)."""
        _, local = self.row_groups(rows, length)
        layer_norm = node.op in ("LayerNormalization", "InstanceNormalization")

        def normalise(body: Scope) -> None:
            x = self.em.value(body, x_name, index)
            if layer_norm:
                value = self._scale_shift(body, node, index, x_shape, f"({x} - center) * scale")
            elif node.op == "LogSoftmax":
                value = f"({x} - center - scale)"
            else:
                value = f"(dnnr_exp({x} - center) * scale)"
            self.declare_iteration(body, index)
            self.row_input = x
            self.epilogue(body, value)

        return row_split.split_rownorm(
            self, node.op, rows, length, groups, local,
            lambda body: self.em.value(body, x_name, index), normalise,
            float(node.attr("epsilon", 1e-5)))

    def rowgroup(self) -> Kernel:
        """Each reduction of the group in turn over the row (serially, or a strided
        loop then a tree in local memory), the per-row values computed from it once,
        then the full-row outputs (see `fusion.structure`)."""
        view, nodes = self.view, self.block.nodes
        reductions = [n for n in nodes if view.nodes[n].op in ROW_REDUCE_OPS]
        full = self.shape.iteration_shape
        axes, _ = reduce_axes(view, view.nodes[reductions[0]])
        reduced = tuple(full[a] for a in axes)
        outer_axes = [a for a in range(len(full)) if a not in axes]
        length = math.prod(reduced)
        rows = math.prod([full[a] for a in outer_axes])
        serial = self.serial_rows(length, rows)
        row_shape = tuple(1 if a in axes else size for a, size in enumerate(full))
        o_idx = ix.delinearize(self.ivar("o", rows), tuple(full[a] for a in outer_axes))
        r_idx = ix.delinearize(self.ivar("r", length), reduced)
        at_row: list[ix.IExpr] = [0] * len(full)
        at_element: list[ix.IExpr] = [0] * len(full)
        for k, a in enumerate(outer_axes):
            at_row[a] = at_element[a] = o_idx[k]
        for k, a in enumerate(axes):
            at_element[a] = r_idx[k]
        row_index, element_index = tuple(at_row), tuple(at_element)
        s = Scope()
        loop, local = self.row_start(s, serial, rows, length)
        for k, n in enumerate(reductions):
            node = view.nodes[n]
            init, step, final = _REDUCERS[node.op.removeprefix("Reduce")]
            if k and not serial:  # every work-item has read red[0] of the previous reduction
                s.emit("barrier(CLK_LOCAL_MEM_FENCE);")
            total = self.row_reduce(s, serial, loop, length, f"acc{k}", init, step,
                                    lambda body, x=node.inputs[0]: self.em.value(
                                        body, x, element_index))
            s.emit(f"const float row{k} = {final.format(total, float(length))};")
            self.em.pinned[node.outputs[0]] = f"row{k}"
            self._hoist_row_values(s, row_shape, row_index)
        per_element = Scope(s)
        for value, store in self.stores.items():
            if view.shape(value) == row_shape:
                done = Scope(s)
                offset = self.store_offset(value, row_index)
                done.emit(self.store_line(value, store, offset, self.em.value(done, value, row_index)))
                if serial:
                    s.lines.extend(done.lines)
                else:
                    s.nest("if (lid == 0)", done)
            else:
                offset = self.store_offset(value, element_index)
                result = self.em.value(per_element, value, element_index)
                per_element.emit(self.store_line(value, store, offset, result))
        if per_element.lines:
            s.nest(loop, per_element)
        return self.finish(s, rows if serial else rows * local, local)

    def _hoist_row_values(self, s: Scope, row_shape: tuple[int, ...],
                          row_index: tuple[ix.IExpr, ...]) -> None:
        """Compute each per-row elementwise value once, as soon as its reductions are
        known (e.g. LayerNorm's sqrt(var + eps)), instead of once per element."""
        for n in self.block.nodes:
            node = self.view.nodes[n]
            out = node.outputs[0]
            if out in self.em.pinned or node.op in ROW_REDUCE_OPS or \
                    self.view.shape(out) != row_shape:
                continue
            ready = all(v in self.em.pinned or self.view.producer_index.get(v) not in
                        self.block.nodes for v in self.view.data_inputs(node))
            if ready:
                self.em.pinned[out] = self.em.value(s, out, row_index)


_REDUCERS = {  # init, combine step, final (from the accumulated value and the count)
    "Sum": ("0.0f", "({0} + {1})", "{0}"),
    "Mean": ("0.0f", "({0} + {1})", "({0} / (float){1})"),
    # comparisons, not fmax/fmin: PoCL's builtins are calls (`_clamp_high`); a NaN
    # element is skipped as fmax would skip it
    "Max": ("-INFINITY", "({1} > {0} ? {1} : {0})", "{0}"),
    "Min": ("INFINITY", "({1} < {0} ? {1} : {0})", "{0}"),
    "Prod": ("1.0f", "({0} * {1})", "{0}"),
    "L1": ("0.0f", "({0} + fabs({1}))", "{0}"),
    "L2": ("0.0f", sp.multiply_add("{1}", "{1}", "{0}"), "sqrt({0})"),
    "SumSquare": ("0.0f", sp.multiply_add("{1}", "{1}", "{0}"), "{0}"),
    "LogSum": ("0.0f", "({0} + {1})", "log({0})"),
    "LogSumExp": ("0.0f", "({0} + exp({1}))", "log({0})"),
    "ArgMax": ("", "", ""), "ArgMin": ("", "", ""),
}


# exp in plain arithmetic: 2^(v log2 e) as 2^n (exponent bits) times a degree-5 fit of
# 2^f on [0, 1) (relative error 1.5e-7). PoCL's exp is an out-of-line call here (see
# `_clamp_high`) and cost 2/3 of a Softmax; this one inlines and vectorises. y is
# clamped to [-127, 128] so it underflows to 0 and overflows to inf as exp does.
# One line: `build.hoist_sizes` takes the first ") {" plus newline as the kernel body.
INLINE_EXP = (
    "#ifndef DNNR_INLINE_EXP\n#define DNNR_INLINE_EXP\n"
    "inline float dnnr_exp(const float v) { "
    "float y = v * 1.44269504f; y = y < -127.0f ? -127.0f : (y > 128.0f ? 128.0f : y); "
    "int n = (int)y; n -= y < (float)n; const float f = y - (float)n; "
    "float p = 0.0018762336f; p = p * f + 0.0089925891f; p = p * f + 0.0558235943f; "
    "p = p * f + 0.2401545346f; p = p * f + 0.6931529641f; p = p * f + 0.9999999404f; "
    "return as_float((n + 127) << 23) * p; }\n#endif\n")


def _combine_only(step: str) -> str:
    """The combine step for partial results (L1/L2/… apply their map once, not twice)."""
    if "fabs" in step or "{1} * {1}" in step or "exp" in step:
        return "({0} + {1})"
    return step


def _tree_reduce(step: str, var: str) -> list[str]:
    combine = _combine_only(step).format("red[lid]", "red[lid + s]")
    return [
        f"red[lid] = {var};",
        "barrier(CLK_LOCAL_MEM_FENCE);",
        "for (int s = WG / 2; s > 0; s >>= 1) {",
        f"  if (lid < s) red[lid] = {combine};",
        "  barrier(CLK_LOCAL_MEM_FENCE);",
        "}",
    ]


def _window_checks(position: str, begin: int, out_size: int, stride: int, kernel: int,
                   dilation: int, in_size: int, always: bool = False) -> list[str]:
    """The bounds checks a window position needs: none on a side no window crosses
    (no padding there), which drops a compare and branch per load (1×1 convs);
    ``always`` keeps the high side's (`KernelParams.shape_stable`)."""
    checks = [f"{position} >= 0"] if begin > 0 else []
    if always or (out_size - 1) * stride - begin + (kernel - 1) * dilation >= in_size:
        checks.append(f"{position} < {in_size}")
    return checks


def _note_row_choice(device: str, rows: int, length: int, local: int,
                     split: cost.Option | None) -> None:
    """A symbolic build's path notes the row-split pick (floating point: its
    comparisons of sizes are not seen) as a function of the dims (`symint.Choice`)."""
    if not (isinstance(rows, SymInt) or isinstance(length, SymInt)):
        return
    exprs = (expr_of(rows), expr_of(length), expr_of(local))

    def decide(env: Mapping[str, int]) -> str:
        r, n, w = (e if isinstance(e, int) else e.evaluate(dict(env)) for e in exprs)
        chosen = cost.choose(cost.row_options(cost.DEVICES[device], r, n, w))
        return chosen.describe() if chosen is not None else "one work-group per row"

    label = split.describe() if split is not None else "one work-group per row"
    note_choice(Choice(f"rows {exprs[0]} x {exprs[1]}", label, decide, repr(exprs)))


def _clamp_high(expr: str, high: int) -> str:
    """``min(expr, high)`` without the builtin: PoCL's kernel library is built for
    skylake-avx512 and is not inlined into kernels compiled for a CPU it names
    differently (a Sapphire Rapids guest reads as rocketlake), so every builtin in a
    hot loop is a call. Plain operators (``a * b + c`` contracts to an FMA) are not."""
    return f"({expr} < {high} ? {expr} : {high})"


def _clamp_last(expr: str, size: int) -> str:
    """``expr`` clamped to ``size - 1``, the last index of a dim of ``size``: a literal
    size as `_clamp_high`'s compare, a symbolic build's size argument through the
    ``min`` builtin, which PoCL inlines for ints: with the compare against an argument
    its work-group vectoriser gave up on the matmul's A loads (GPT-2's QKV matmul at
    3x7: 8.3 µs with the compare, 5.5 with ``min``, 5.1 bound)."""
    if isinstance(size, SymInt):
        return f"min({expr}, {size - 1})"
    return _clamp_high(expr, size - 1)


def _pads_begin(node: Node, in_sizes: tuple[int, ...], out_sizes: tuple[int, ...],
                kernel: tuple[int, ...], strides: tuple[int, ...],
                dil: tuple[int, ...]) -> tuple[int, ...]:
    auto = node.attr("auto_pad", "NOTSET")
    spatial = len(in_sizes)
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        out = []
        for i, o, k, s, d in zip(in_sizes, out_sizes, kernel, strides, dil, strict=False):
            total = max((o - 1) * s + (k - 1) * d + 1 - i, 0)
            out.append(total // 2 if auto == "SAME_UPPER" else total - total // 2)
        return tuple(out)
    if auto == "VALID":
        return (0,) * spatial
    pads = node.attr("pads") or (0,) * 2 * spatial
    return tuple(pads[:spatial])  # type: ignore[index]


def _sgemm_offered(params: KernelParams, kind: str) -> bool:
    """``sgemm`` is an option of MatMul/Gemm anchors (measured on those only; a forced
    ``anchor_variant`` still generates it for a conv), outside a build whose code must
    be the same at every shape (`KernelParams.shape_stable`: its bounds checks and
    vector loads are decided from this shape's sizes)."""
    return kind == "matmul" and not params.shape_stable


def anchor_options(view: GraphView, block: Block, params: KernelParams
                   ) -> tuple[str, list[cost.Option]]:
    """The implementations the `select` stage chooses among for a conv/matmul block
    (its shape class `cost.shape_key`, and `dnnr tune`'s option for that class when the
    database has one, else every option `cost.options` prices); a forced variant
    (`KernelParams.anchor_variant`) leaves one option: the one `pick` generates."""
    gen = _Gen(view, block, params)
    shape = gen.anchor_shape()
    key, candidates, tuned = gen.priced_options(*shape)
    if params.anchor_variant is not None:
        return key, [gen.pick(*shape)]
    direct = min((o.estimate_us for o in candidates if o.variant == "direct"), default=None)
    # NCHWc input and output, priced from direct (not beside a tuned option: that one is measured)
    extra = nchwc.options(gen, direct) if direct is not None and tuned is None else []
    return key, ([tuned] if tuned is not None else candidates) + extra


def anchor_shape(view: GraphView, block: Block, params: KernelParams) -> tuple:
    """What `anchor_options` prices a conv/matmul block by: (sizes, direct_items,
    tiled_ok, gemv_side, depthwise_ok, window_taps), the arguments of `cost.options`
    (the symbolic build traces them: `crossover.py`)."""
    return _Gen(view, block, params).anchor_shape()


def generate(view: GraphView, block: Block, params: KernelParams) -> Kernel:
    """The kernel of one block."""
    try:
        gen = _Gen(view, block, params)
        return getattr(gen, block.kind)()
    except ModelError as error:  # say where, when the message does not already
        if "node '" in str(error):
            raise
        where = ", ".join(f"node '{view.nodes[n].name}' ({view.nodes[n].op})" for n in block.nodes[:3])
        raise ModelError(f"{where}: {error}") from None
