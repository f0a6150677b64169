"""The OpenCL prices of the `select` stage's problem (`select.layouts.Pricing`), in
estimated microseconds on the device class of `KernelParams.device`.

- implementations: every conv/matmul block's kernel options (`kernels.anchor_options`:
  `cost.options`, or the tuning database's option for its shape class), at the cost
  model's estimate; the blocked NCHWc conv's (`blocked.py`: on the CPU class the direct
  estimate × its measured ratio, on the GPU class `gpu_prices.blocked_conv_us`) are also
  listed in ``blocked`` with the layout they read;
- a sector transaction: 32 bytes at the device class's bandwidth (CPU: `cost.DEVICES`;
  GPU: the copy kernel's GB/s measured on the card `gpu_prices.CARD` names);
- a layout-conversion kernel (`select.conversions`): ``LAUNCH_US`` for its launch plus
  its sectors;
- constants a block may read as ``image2d_t`` (`images.py`: scalar 2-D reads re-read
  by many work-items): one 4-byte read per work-item at that bandwidth from a buffer;
  from an image, that times ``IMAGE_READ_FACTOR`` on a CPU, where image reads are
  emulated in software (PoCL: the depthwise block of tests/backends/opencl/test_images.py
  ran 0.38 ms with images, 0.28 ms with buffers: 1.36), and on a GPU that times
  `gpu_prices.image_factor` at the block's reuse (measured: image over buffer reads of
  the same table). So on the CPU class the selection always rejects images, with both
  prices in the report.

``LAUNCH_US``: "cpu" measured on PoCL here (an empty 64-item kernel enqueued 2,000
times: 5.8–10.7 µs per launch on the shared 2-core machine); "gpu" measured the same
way on the card `gpu_prices.CARD` names (`benchmarks/gpu_prices.py`).
"""

from __future__ import annotations

import numpy as np

from egraph_compiler.backends.opencl import blocked, cost, gpu_prices, images
from egraph_compiler.backends.opencl.kernels import KernelParams, anchor_options, generate
from egraph_compiler.fusion import Block, FusionPlan
from egraph_compiler.fusion.structure import analyse
from egraph_compiler.fusion.view import GraphView
from egraph_compiler.ir.dims import DimExpr
from egraph_compiler.ir.graph import Graph, Node, TensorType, Value
from egraph_compiler.select.layouts import Pricing
from egraph_compiler.select.symbolic import SymbolicNode, binding

SECTOR_BYTES = 32
LAUNCH_US = {"cpu": 8.0, "gpu": gpu_prices.LAUNCH_US}
IMAGE_READ_FACTOR = 0.38 / 0.28  # CPU: image reads over buffer reads (measured, PoCL)
ANCHOR_KINDS = ("conv", "matmul")


def pricing(plan: FusionPlan, params: KernelParams, force: str = "") -> Pricing:
    """``force`` "nchwc" / "images": every conv block with a blocked NCHWc kernel is priced
    with it alone, reading buffers / RGBA images (the policies of those names: the PBQP still
    lays out the rest)."""
    view = GraphView(plan.graph)
    implementations, channel_blocks = {}, {}
    for block in plan.blocks:
        if block.kind in ANCHOR_KINDS:
            _, options = anchor_options(view, block, params)
            implementations[block.id] = [(o.describe(), o.estimate_us) for o in options]
            channel_blocks[block.id] = {o.describe(): o.input_layout for o in options
                                        if isinstance(o, blocked.BlockedOption)}
    return Pricing("µs (cost model)", SECTOR_BYTES / (_bandwidth_gbs(params) * 1e3),
                   implementations, LAUNCH_US[params.device], _image_reads(plan, view, params),
                   {k: v for k, v in channel_blocks.items() if v}, force=force)


def _bandwidth_gbs(params: KernelParams) -> float:
    """The selection's memory bandwidth: the GPU class's measured copy GB/s, the CPU class's model."""
    return gpu_prices.COPY_GBS if params.device == "gpu" else cost.DEVICES[params.device].bandwidth_gbs


def _image_reads(plan: FusionPlan, view: GraphView, params: KernelParams
                 ) -> dict[int, tuple[float, float]]:
    """Per block with image candidates: the cost of reading them from buffers and from
    images (the candidates are those the generated kernel would read as images)."""
    bandwidth = _bandwidth_gbs(params)
    result = {}
    for block in plan.blocks:
        if not any(v in view.constants and images.candidate(view.shape(v), view.dtype(v))
                   for v in block.inputs):
            continue
        kernel = generate(view, block, params)
        work_items = int(np.prod(block.iteration_shape, dtype=np.int64))
        buffer_us = image_us = 0.0
        for _, width, height, _ in kernel.images:
            reads = work_items * 4 / (bandwidth * 1e3)
            reuse = work_items / max(width * height, 1)
            buffer_us += reads
            image_us += reads * (IMAGE_READ_FACTOR if params.device == "cpu" else gpu_prices.image_factor(reuse))
        if kernel.images:
            result[block.id] = (buffer_us, image_us)
    return result


def _bound_anchor(symbolic: Graph, static: Graph, node: Node, env: dict[str, int]
                  ) -> tuple[GraphView, Block] | None:
    """``node`` alone in a graph whose shapes are the symbolic graph's at ``env``."""
    values = [v for v in (*node.inputs, *node.outputs) if v]
    types = {}
    for v in values:
        t = symbolic.types.get(v)
        if t is None or t.shape is None:
            return None
        types[v] = TensorType(t.dtype, tuple(d.evaluate(env) if isinstance(d, DimExpr) else d
                                             for d in t.shape))
    constants = {v: static.constants.get(v, symbolic.constants.get(v)) for v in node.inputs
                 if v in static.constants or v in symbolic.constants}
    graph = Graph(f"anchor_{node.name}", tuple(Value(v, types[v]) for v in node.inputs
                                              if v and v not in constants),
                  tuple(Value(v, types[v]) for v in node.outputs if v), (node,), constants, types)
    view = GraphView(graph)
    shape = analyse(view, frozenset({0}))
    if isinstance(shape, str):
        return None
    return view, Block(0, (0,), (node.op,), "many_to_many", shape.kind, shape.anchor,
                       shape.inputs, shape.outputs, shape.iteration_shape)


def symbolic_anchors(plan: FusionPlan, params: KernelParams, symbolic: Graph,
                     names: dict[int, str]) -> list[SymbolicNode]:
    """Every anchor block whose shapes depend on a declared symbolic dim, with its
    implementations' costs as a function of the symbols: the same `anchor_options`,
    on the anchor alone at each assignment of the symbols (``names``: block id -> PBQP node)."""
    static = plan.graph
    env = binding(static, symbolic)
    by_name = {n.name: n for n in symbolic.nodes if n.name}
    result = []
    for block in plan.blocks:
        if block.kind not in ANCHOR_KINDS or block.id not in names or block.anchor is None:
            continue
        node = by_name.get(static.nodes[block.anchor].name)
        if node is None:
            continue
        used = sorted({s for v in (*node.inputs, *node.outputs) if v in symbolic.types
                       for d in symbolic.types[v].shape or () if isinstance(d, DimExpr)
                       for s in d.symbols()})
        if not used or any(s not in symbolic.symbols or s not in env for s in used):
            continue

        def costs_at(values: dict[str, int], node: Node = node) -> dict[str, float]:
            bound = _bound_anchor(symbolic, static, node, {**env, **values})
            if bound is None:
                return {}
            _, options = anchor_options(*bound, params)
            return {o.describe(): o.estimate_us for o in options}

        result.append(SymbolicNode(names[block.id], cost_at=costs_at, symbols=tuple(used),
                                   labelled=True))
    return result
