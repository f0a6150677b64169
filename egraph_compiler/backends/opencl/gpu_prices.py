"""The GPU class's selection prices, measured (`gpu_prices.json`, written by
``python3 benchmarks/gpu_prices.py --json …`` on the card it names).

- ``LAUNCH_US``: one more kernel in a sequence (an empty 64-work-item kernel enqueued
  2,000 times back to back, wall time per launch) — a conversion kernel's launch;
- ``COPY_GBS``: a float4 copy kernel's read + written bytes per second — the price of a
  sector transaction on the GPU class;
- `image_factor`: an ``image2d_t`` read over a buffer read of the same table, for the
  depthwise-weights pattern of `images.py` (a C × 9 table re-read ``reuse`` times per
  element), linear in log(reuse) between the measured reuses and flat beyond them;
- `blocked_conv_us` / `blocked_image_factor` (``blocked_conv``, written by
  ``benchmarks/gpu_blocked.py fit``): the blocked NCHWc conv's device time as a fitted
  function of its multiply-adds and work-items per channel block, and its RGBA-image
  input over its NCHW4c buffer input (`blocked.py`); absent, the GPU class offers no
  blocked conv.
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


def blocked_measured() -> bool:
    """Whether the card's blocked NCHWc conv was measured (else the GPU class offers none)."""
    return "blocked_conv" in MEASURED


def blocked_conv_us(block: int, multiply_adds: int, work_items: int) -> float | None:
    """The blocked conv's device µs at channel block ``block``: the fitted model
    log t = intercept[block] + flops_exponent · log(multiply-adds over the padded channels)
    + items_exponent · log(work-items) (`blocked.work`; more work-items, more of the card
    busy). None outside the measured shapes' range of both (``domain``): no extrapolation."""
    fit = MEASURED["blocked_conv"]
    (macs_lo, macs_hi), (items_lo, items_hi) = fit["domain"]["multiply_adds"], fit["domain"]["work_items"]
    if not (macs_lo <= multiply_adds <= macs_hi and items_lo <= work_items <= items_hi):
        return None
    return math.exp(float(fit["intercept"][str(block)]) + float(fit["flops_exponent"]) * math.log(multiply_adds)
                    + float(fit["items_exponent"]) * math.log(work_items))


def blocked_image_factor() -> float:
    """The blocked conv reading an RGBA image over reading the NCHW4c buffer (measured)."""
    return float(MEASURED["blocked_conv"]["image_over_buffer"])
