"""Measure the GPU class's selection prices on an OpenCL GPU (`backends/opencl/gpu_prices.py`).

    python3 benchmarks/gpu_prices.py [DEVICE [JSON_FILE]]     # DEVICE: a substring, default NVIDIA

Needs only NumPy and pyopencl (the GPU machine: register NVIDIA's OpenCL with
``echo /usr/lib/libnvidia-opencl.so.1 > /etc/OpenCL/vendors/nvidia.icd``). Prints and
writes (JSON_FILE) three measurements the selection's GPU prices are made of:

- launch: an empty 64-work-item kernel enqueued 2,000 times back to back, wall time per
  launch (the price of one more kernel in a sequence: a conversion kernel, a split-K
  pass), and one launch waited for alone (the round trip), median of 200;
- copy: a float4 copy kernel over 256 MiB, GB/s (read + written bytes) from profiling
  events, median of 20 (the price of a conversion kernel's sectors);
- image vs buffer: the depthwise-weights pattern of `images.py` — a C × 9 float table
  read by C·P work-items, each reading its channel's 9 taps — once from a buffer and
  once from a one-channel ``image2d_t``, for reuse P = 1 … 512; device time from
  profiling events, median of 20; the ratio image / buffer per reuse is the image-read
  price factor.
"""

from __future__ import annotations

import json
import statistics as st
import sys
import time

import numpy as np
import pyopencl as cl

SRC = """
__kernel void empty(__global float *x) { }
__kernel void copy4(__global const float4 *x, __global float4 *y) { size_t i = get_global_id(0); y[i] = x[i]; }
__kernel void taps_buffer(__global const float *w, __global float *y, const int reuse) {
  int i = get_global_id(0), c = i / reuse; float s = 0.0f;
  for (int k = 0; k < 9; k++) s += w[c * 9 + k] * (float)(k + 1);
  y[i] = s; }
__constant sampler_t smp = CLK_NORMALIZED_COORDS_FALSE | CLK_ADDRESS_NONE | CLK_FILTER_NEAREST;
__kernel void taps_image(__read_only image2d_t w, __global float *y, const int reuse) {
  int i = get_global_id(0), c = i / reuse; float s = 0.0f;
  for (int k = 0; k < 9; k++) s += read_imagef(w, smp, (int2)(k, c)).x * (float)(k + 1);
  y[i] = s; }
"""


def event_ms(launch, repeats: int = 20) -> float:  # noqa: ANN001
    """Median device time of ``launch()`` (profiling events), after one warm-up."""
    launch().wait()
    times = []
    for _ in range(repeats):
        event = launch()
        event.wait()
        times.append((event.profile.end - event.profile.start) * 1e-6)
    return st.median(times)


def main(wanted: str = "NVIDIA", json_file: str = "") -> None:
    device = next(d for p in cl.get_platforms() for d in p.get_devices() if wanted.lower() in (p.name + d.name).lower())
    ctx = cl.Context([device])
    queue = cl.CommandQueue(ctx, properties=cl.command_queue_properties.PROFILING_ENABLE)
    prg = cl.Program(ctx, SRC).build()
    empty, copy4, taps_buffer, taps_image = (cl.Kernel(prg, n) for n in ("empty", "copy4", "taps_buffer", "taps_image"))
    mf = cl.mem_flags
    out: dict = {"card": device.name, "driver": device.driver_version, "platform": device.platform.name}
    dummy = cl.Buffer(ctx, mf.READ_WRITE, 256)
    empty(queue, (64,), (64,), dummy).wait()
    start = time.perf_counter()
    for _ in range(2000):  # back to back: the price of one more kernel in a sequence
        empty(queue, (64,), (64,), dummy)
    queue.finish()
    out["launch_us"] = (time.perf_counter() - start) / 2000 * 1e6
    alone = []
    for _ in range(200):  # each waited for: the round trip
        start = time.perf_counter()
        empty(queue, (64,), (64,), dummy).wait()
        alone.append((time.perf_counter() - start) * 1e6)
    out["launch_round_trip_us"] = st.median(alone)
    size = 256 << 20
    x, y = cl.Buffer(ctx, mf.READ_ONLY, size), cl.Buffer(ctx, mf.WRITE_ONLY, size)
    cl.enqueue_fill_buffer(queue, x, np.float32(1.0), 0, size).wait()
    out["copy_gbs"] = 2 * size / event_ms(lambda: copy4(queue, (size // 16,), None, x, y)) / 1e6
    channels = 4096  # a C x 9 table (depthwise weights), re-read `reuse` times per element
    table = np.random.default_rng(0).standard_normal((channels, 9)).astype(np.float32)
    w_buf = cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=table)
    w_img = cl.Image(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, cl.ImageFormat(cl.channel_order.R, cl.channel_type.FLOAT),
                     shape=(9, channels), hostbuf=table)
    out["image_reads"] = {}
    for reuse in (1, 4, 16, 64, 256, 512):
        items, r = channels * reuse, np.int32(reuse)
        y = cl.Buffer(ctx, mf.WRITE_ONLY, items * 4)
        results = []
        for kernel, w in ((taps_buffer, w_buf), (taps_image, w_img)):
            ms = event_ms(lambda k=kernel, w=w, y=y, n=items, r=r: k(queue, (n,), None, w, y, r))
            host = np.empty(items, np.float32)
            cl.enqueue_copy(queue, host, y)
            results.append((ms, host))
        assert np.array_equal(results[0][1], results[1][1]), "image and buffer reads differ"
        out["image_reads"][reuse] = {"buffer_ms": results[0][0], "image_ms": results[1][0],
                                     "image_over_buffer": results[1][0] / results[0][0]}
    text = json.dumps(out, indent=1)
    print(text)
    if json_file:
        with open(json_file, "w") as handle:
            handle.write(text)


if __name__ == "__main__":
    main(*sys.argv[1:3])
