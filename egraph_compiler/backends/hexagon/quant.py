"""Integer requantisation: the arithmetic every kernel and the NumPy model share.

A real scale ``M`` (e.g. s_x·s_w / s_y) becomes a multiplier ``m`` in [2^30, 2^31) and a
right shift ``s``: ``y = clamp(zy + ((acc · m + 2^(s−1)) >> s), lo, hi)`` in 64-bit
arithmetic with an arithmetic shift (rounds half up). onnxruntime rounds half to even
in float, so results can differ by one unit in the last place on exact ties.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

ELEMENTWISE_SHIFT = 24  # fixed-point fraction bits of Add/Mul input rescaling


@dataclass(frozen=True, slots=True)
class Requant:
    multiplier: tuple[int, ...]  # per output channel (length 1 = per tensor)
    shift: tuple[int, ...]
    zero_point: int  # of the uint8 output
    lo: int = 0
    hi: int = 255


def quantize_multiplier(real: float) -> tuple[int, int]:
    """``real ≈ m · 2^-s`` with ``m`` in [2^30, 2^31) and 1 ≤ s ≤ 62."""
    if real <= 0:
        return 0, 1
    exponent = math.floor(math.log2(real))
    shift = 30 - exponent
    multiplier = round(real * 2.0**shift)
    if multiplier >= 2**31:
        multiplier //= 2
        shift -= 1
    while shift > 62:
        multiplier >>= 1
        shift -= 1
    if shift < 1:
        raise ValueError(f"requantisation scale {real} is too large")
    return multiplier, shift


def requant_from_scales(scales: np.ndarray, zero_point: int, lo: int = 0, hi: int = 255) -> Requant:
    pairs = [quantize_multiplier(float(s)) for s in np.atleast_1d(scales)]
    return Requant(tuple(p[0] for p in pairs), tuple(p[1] for p in pairs), int(zero_point), lo, hi)


def apply_requant(acc: np.ndarray, rq: Requant, channel_axis: int = -1) -> np.ndarray:
    """NumPy model of the kernels' requantisation (``acc`` int32/int64, channels last)."""
    acc = acc.astype(np.int64)
    shape = [1] * acc.ndim
    shape[channel_axis] = -1
    mult = np.asarray(rq.multiplier, dtype=np.int64).reshape(shape if len(rq.multiplier) > 1 else [1] * acc.ndim)
    shift = np.asarray(rq.shift, dtype=np.int64).reshape(mult.shape)
    # acc·m fits in int64: |acc| < 2^31 and m < 2^31.
    prod = acc * mult
    rounded = (prod + (np.int64(1) << (shift - 1))) >> shift
    return np.clip(rounded + rq.zero_point, rq.lo, rq.hi).astype(np.uint8)
