"""The OpenCL prices of the `select` stage's problem (`select.layouts.Pricing`), in
estimated microseconds on the device class of `KernelParams.device`.

- implementations: every conv/matmul block's kernel options (`kernels.anchor_options`:
  `cost.options`, or the tuning database's option for its shape class), at the cost
  model's estimate;
- a sector transaction: 32 bytes at the device class's bandwidth (`cost.DEVICES`);
- a layout-conversion kernel (`select.conversions`): ``LAUNCH_US`` for its launch plus
  its sectors.

``LAUNCH_US``: "cpu" measured on PoCL here (an empty 64-item kernel enqueued 2,000
times: 5.8–10.7 µs per launch on the shared 2-core machine); "gpu" is an assumption
(NVIDIA's documented launch overhead of a few µs), not measured.
"""

from __future__ import annotations

from egraph_compiler.backends.opencl import cost
from egraph_compiler.backends.opencl.kernels import KernelParams, anchor_options
from egraph_compiler.fusion import FusionPlan
from egraph_compiler.fusion.view import GraphView
from egraph_compiler.select.layouts import Pricing

SECTOR_BYTES = 32
LAUNCH_US = {"cpu": 8.0, "gpu": 5.0}
ANCHOR_KINDS = ("conv", "matmul")


def pricing(plan: FusionPlan, params: KernelParams) -> Pricing:
    device = cost.DEVICES[params.device]
    view = GraphView(plan.graph)
    implementations = {}
    for block in plan.blocks:
        if block.kind in ANCHOR_KINDS:
            _, options = anchor_options(view, block, params)
            implementations[block.id] = [(o.describe(), o.estimate_us) for o in options]
    return Pricing("µs (cost model)", SECTOR_BYTES / (device.bandwidth_gbs * 1e3),
                   implementations, LAUNCH_US[params.device])
