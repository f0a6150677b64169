"""The GPU class's selection prices, measured (`gpu_prices.json`, written by
``python3 benchmarks/gpu_prices.py --json …`` on the card it names).

- ``LAUNCH_US``: one more kernel in a sequence (an empty 64-work-item kernel enqueued
  2,000 times back to back, wall time per launch) — a conversion kernel's launch;
- ``COPY_GBS``: a float4 copy kernel's read + written bytes per second — the price of a
  sector transaction on the GPU class;
- `image_factor`: an ``image2d_t`` read over a buffer read of the same table, for the
  depthwise-weights pattern of `images.py` (a C × 9 table re-read ``reuse`` times per
  element), linear in log(reuse) between the measured reuses and flat beyond them.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

MEASURED: dict = json.loads(Path(__file__).with_name("gpu_prices.json").read_text())
CARD: str = MEASURED["card"]
LAUNCH_US: float = float(MEASURED["launch_us"])
COPY_GBS: float = float(MEASURED["copy_gbs"])
_IMAGE_RATIOS: tuple[tuple[float, float], ...] = tuple(sorted(
    (float(reuse), float(row["image_over_buffer"])) for reuse, row in MEASURED["image_reads"].items()))


def image_factor(reuse: float) -> float:
    """Measured image-read time over buffer-read time at ``reuse`` reads per element."""
    points = _IMAGE_RATIOS
    if reuse <= points[0][0]:
        return points[0][1]
    for (r0, f0), (r1, f1) in zip(points, points[1:], strict=False):
        if reuse <= r1:
            t = (math.log(reuse) - math.log(r0)) / (math.log(r1) - math.log(r0))
            return f0 + t * (f1 - f0)
    return points[-1][1]
