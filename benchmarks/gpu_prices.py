"""Measure the GPU class's selection prices on an OpenCL GPU (`backends/opencl/gpu_prices.py`).

    python3 benchmarks/gpu_prices.py [--device NVIDIA] [--json FILE]

Needs only NumPy and pyopencl (the GPU machine: register NVIDIA's OpenCL with
``echo /usr/lib/libnvidia-opencl.so.1 > /etc/OpenCL/vendors/nvidia.icd``). Prints and
writes (``--json``) three measurements the selection's GPU prices are made of:

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

import argparse
import json
import os
import statistics
import time

import numpy as np
import pyopencl as cl

KERNELS = """
__kernel void empty(__global float *x) { }
__kernel void copy4(__global const float4 *restrict x, __global float4 *restrict y) {
  size_t i = get_global_id(0); y[i] = x[i];
}
__kernel void taps_buffer(__global const float *restrict w, __global float *restrict y, const int reuse) {
  int i = get_global_id(0), c = i / reuse; float s = 0.0f;
  for (int k = 0; k < 9; k++) s += w[c * 9 + k] * (float)(k + 1);
  y[i] = s;
}
__constant sampler_t smp = CLK_NORMALIZED_COORDS_FALSE | CLK_ADDRESS_NONE | CLK_FILTER_NEAREST;
__kernel void taps_image(__read_only image2d_t w, __global float *restrict y, const int reuse) {
  int i = get_global_id(0), c = i / reuse; float s = 0.0f;
  for (int k = 0; k < 9; k++) s += read_imagef(w, smp, (int2)(k, c)).x * (float)(k + 1);
  y[i] = s;
}
"""


def _device(wanted: str) -> cl.Device:
    for platform in cl.get_platforms():
        for device in platform.get_devices():
            if wanted.lower() in (platform.name + " " + device.name).lower():
                return device
    raise SystemExit(f"no OpenCL device matching {wanted!r}: "
                     f"{[(p.name, [d.name for d in p.get_devices()]) for p in cl.get_platforms()]}")


def _event_ms(queue: cl.CommandQueue, launch, repeats: int) -> float:  # noqa: ANN001
    launch().wait()
    samples = []
    for _ in range(repeats):
        event = launch()
        event.wait()
        samples.append((event.profile.end - event.profile.start) * 1e-6)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="NVIDIA")
    parser.add_argument("--json", default="")
    args = parser.parse_args()
    device = _device(args.device)
    context = cl.Context([device])
    queue = cl.CommandQueue(context, properties=cl.command_queue_properties.PROFILING_ENABLE)
    program = cl.Program(context, KERNELS).build()
    mf = cl.mem_flags
    result: dict = {"card": device.name, "driver": device.driver_version, "platform": device.platform.name}

    dummy = cl.Buffer(context, mf.READ_WRITE, 256)
    empty, copy4 = cl.Kernel(program, "empty"), cl.Kernel(program, "copy4")
    taps_buffer, taps_image = cl.Kernel(program, "taps_buffer"), cl.Kernel(program, "taps_image")
    empty(queue, (64,), (64,), dummy).wait()
    launches = 2000
    start = time.perf_counter()
    for _ in range(launches):
        empty(queue, (64,), (64,), dummy)
    queue.finish()
    result["launch_us"] = (time.perf_counter() - start) / launches * 1e6
    alone = []
    for _ in range(200):
        start = time.perf_counter()
        empty(queue, (64,), (64,), dummy).wait()
        alone.append((time.perf_counter() - start) * 1e6)
    result["launch_round_trip_us"] = statistics.median(alone)

    size = 256 << 20
    x = cl.Buffer(context, mf.READ_ONLY, size)
    y = cl.Buffer(context, mf.WRITE_ONLY, size)
    cl.enqueue_fill_buffer(queue, x, np.float32(1.0), 0, size).wait()
    ms = _event_ms(queue, lambda: copy4(queue, (size // 16,), None, x, y), 20)
    result["copy_gbs"] = 2 * size / (ms * 1e-3) / 1e9

    channels = 4096
    table = np.random.default_rng(0).standard_normal((channels, 9)).astype(np.float32)
    w_buffer = cl.Buffer(context, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=table)
    w_image = cl.Image(context, mf.READ_ONLY | mf.COPY_HOST_PTR,
                       cl.ImageFormat(cl.channel_order.R, cl.channel_type.FLOAT), shape=(9, channels), hostbuf=table)
    ratios = {}
    for reuse in (1, 4, 16, 64, 256, 512):
        items = channels * reuse
        out = cl.Buffer(context, mf.WRITE_ONLY, items * 4)
        args = ((items,), None)
        buffer_ms = _event_ms(queue, lambda a=args, o=out, r=reuse: taps_buffer(
            queue, *a, w_buffer, o, np.int32(r)), 20)
        image_ms = _event_ms(queue, lambda a=args, o=out, r=reuse: taps_image(
            queue, *a, w_image, o, np.int32(r)), 20)
        check_b = np.empty(items, np.float32)
        taps_buffer(queue, (items,), None, w_buffer, out, np.int32(reuse))
        cl.enqueue_copy(queue, check_b, out)
        check_i = np.empty(items, np.float32)
        taps_image(queue, (items,), None, w_image, out, np.int32(reuse))
        cl.enqueue_copy(queue, check_i, out)
        assert np.array_equal(check_b, check_i), "image and buffer reads differ"
        ratios[reuse] = {"buffer_ms": buffer_ms, "image_ms": image_ms, "image_over_buffer": image_ms / buffer_ms}
    result["image_reads"] = ratios
    text = json.dumps(result, indent=1)
    print(text)
    if args.json:
        with open(args.json, "w") as handle:
            handle.write(text)


if __name__ == "__main__":
    os.environ.setdefault("PYOPENCL_NO_CACHE", "1")
    main()
