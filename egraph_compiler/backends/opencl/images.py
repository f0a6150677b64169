"""2.5D memory (SmartMem §3.3): constant tensors read as ``image2d_t`` where a kernel
re-reads them with 2-D locality, with plain buffers as the fallback.

Choice, per tensor and kernel (`choose`): a float32 constant of rank ≥ 2, viewed as
an image ``shape[-1]`` texels wide and ``prod(shape[:-1])`` high, read through the
generic scalar loads (a tensor a kernel also reads with vector loads stays a
buffer), within the extents every image-capable device supports (8192 × 8192), and
re-read at least ``REUSE_FOR_IMAGE`` times per element (the kernel's work-items
over the tensor's size): then the texture cache serves the repeated 2-D reads
(depthwise convolution weights are the typical case). Each choice is recorded with
its reason in ``plan.json`` (``images``) and the compile report.

A kernel declares such a tensor with ``DNNR_IMAGE_ARG`` and reads it with
``DNNR_IMAGE_LOAD(name, column, row, width)``; `PRELUDE` defines both twice, for images
and for buffers, selected by ``-D DNNR_IMAGES`` when the runtime builds the
program. The runtime (`image_mode`) turns images on only when the device reports
``CL_DEVICE_IMAGE_SUPPORT``, every image fits its ``IMAGE2D_MAX_WIDTH/HEIGHT`` and
it is not a CPU (no texture cache there); otherwise the same artefact runs on
buffers. PoCL's CPU device reports image support (16384 × 16384), so
``images=True`` runs the image path there.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

REUSE_FOR_IMAGE = 8.0
CPU_DEVICE = 1 << 1  # CL_DEVICE_TYPE_CPU
GUARANTEED_EXTENT = 8192  # the OpenCL minimum for image2d width and height

PRELUDE = """#ifndef DNNR_IMAGE_ARG
#ifdef DNNR_IMAGES
__constant sampler_t dnnr_sampler = CLK_NORMALIZED_COORDS_FALSE | CLK_ADDRESS_NONE | CLK_FILTER_NEAREST;
#define DNNR_IMAGE_ARG(n) __read_only image2d_t n##_img, const ulong n##_off
#define DNNR_IMAGE_POINTER(n)
#define DNNR_IMAGE_LOAD(n, col, row, w) read_imagef(n##_img, dnnr_sampler, (int2)((col), (row))).x
#else
#define DNNR_IMAGE_ARG(n) __global const float* n##_buf, const ulong n##_off
#define DNNR_IMAGE_POINTER(n) __global const float* restrict n = n##_buf + n##_off;
#define DNNR_IMAGE_LOAD(n, col, row, w) n[(row) * (w) + (col)]
#endif
#endif
"""

# what the value emitter writes for a load that may become an image read; `resolve`
# turns it into DNNR_IMAGE_LOAD or back into the plain buffer load
_MARK = re.compile(r"@IMG\((\w+)\|([^|@]*)\|([^|@]*)\|(\d+)\|([^|@]*)\)@")


def mark(param: str, x: str, y: str, width: int, flat: str) -> str:
    return f"@IMG({param}|{x}|{y}|{width}|{flat})@"


def extent(shape: tuple[int, ...]) -> tuple[int, int]:
    """(width, height) of a tensor seen as a one-channel image."""
    return int(shape[-1]), int(np.prod(shape[:-1], dtype=np.int64))


def candidate(shape: tuple[int, ...], dtype: str) -> bool:
    return dtype == "float32" and len(shape) >= 2 and min(extent(shape)) >= 2


def choose(shape: tuple[int, ...], work_items: int) -> tuple[bool, str]:
    """Image or buffer for a candidate tensor read by ``work_items`` work-items."""
    width, height = extent(shape)
    if max(width, height) > GUARANTEED_EXTENT:
        return False, f"{width}x{height} exceeds the guaranteed image extent {GUARANTEED_EXTENT}"
    reuse = work_items / max(width * height, 1)
    if reuse < REUSE_FOR_IMAGE:
        return False, f"read {reuse:.1f} times per element: no reuse for a texture cache"
    return True, (f"{width}x{height} image: re-read {reuse:.0f} times per element with 2-D "
                  "locality (texture cache)")


def resolve(body: str, params: dict[str, tuple[tuple[int, ...], str]], work_items: int,
            allowed: bool | None = None) -> tuple[str, dict[str, tuple[int, int, str]]]:
    """Decide every marked tensor (``params``: kernel parameter -> (shape, tensor name))
    and rewrite its loads. Returns the body and the images: parameter -> (width,
    height, reason). ``allowed`` False (the `select` stage priced images out): buffers."""
    marked = {m.group(1) for m in _MARK.finditer(body)} if allowed is not False else set()
    unmarked = _MARK.sub("", body)
    images: dict[str, tuple[int, int, str]] = {}
    for param in sorted(marked):
        if re.search(rf"\b{param}\b", unmarked):  # also read as a plain pointer (vector loads)
            continue
        shape, _ = params[param]
        use, reason = choose(shape, work_items)
        if use:
            images[param] = (*extent(shape), reason)

    def rewrite(match: re.Match[str]) -> str:
        param, x, y, width, flat = match.groups()
        if param in images:
            return f"DNNR_IMAGE_LOAD({param}, {x}, {y}, {width})"
        return f"{param}[{flat}]"

    return _MARK.sub(rewrite, body), images


def image_mode(device: Any, images: dict[str, dict[str, Any]], wanted: bool | None
               ) -> tuple[bool, str]:
    """Whether to run an artefact's image tensors as images on ``device`` (a pyopencl
    device), and why; ``wanted`` True/False forces images (where supported)/buffers."""
    if not images:
        return False, "no image tensors in this artefact"
    if wanted is False:
        return False, "buffers forced"
    if not device.image_support:
        return False, f"{device.name} has no image support (CL_DEVICE_IMAGE_SUPPORT = 0)"
    if wanted is None and device.type & CPU_DEVICE:
        # no texture cache: a CPU driver emulates image reads in software (PoCL: the
        # depthwise block of tests/backends/opencl/test_images.py ran 0.38 ms with
        # images, 0.28 ms with buffers)
        return False, f"{device.name} is a CPU device: buffers (images=True forces images)"
    too_big = [n for n, info in images.items() if info["width"] > device.image2d_max_width
               or info["height"] > device.image2d_max_height]
    if too_big:
        return False, (f"{', '.join(too_big)} exceed {device.name}'s image limits "
                       f"{device.image2d_max_width}x{device.image2d_max_height}")
    return True, f"{len(images)} image tensor(s) on {device.name}"
