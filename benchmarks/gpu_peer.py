"""The peer of `gpu_memory.py`'s numbers: what CUDA itself reaches on the same card at
the sizes of the memory-bound CNN kernels, and what the OpenCL profiling events add.

    python3 benchmarks/gpu_peer.py cuda      # on the GPU: PyTorch eager, CUDA timers
    python3 benchmarks/gpu_peer.py opencl    # on the GPU: the OpenCL event floor
    python3 benchmarks/gpu_peer.py opencl|cuda --sizes-from GPU_LOG ...  # a plain copy
        at the sizes of every memory-bound kernel of `gpu.py run` logs (batch 8), which
        `gpu.py memory GPU_LOG ... --peer PEER_LOG ...` sets beside each size band

``cuda`` times, with PyTorch on CUDA (torch 2.x): a device-to-device copy, ``clone``
and ``x + 0`` of 12.6 / 25.2 / 50.3 MB moved (the sizes of `gpu_memory.probe`; L2-warm,
and L2-cold with a 256 MB write before each call), and
PyTorch eager's own kernels for the ops of dnnr's CNN b8 kernels moving 12 MB or more
(`PEERS`: same shapes, same bytes counted), and an empty kernel (PTX through the
driver API). Three clocks each: CUDA events around one launch (median), CUDA events
around 50 back-to-back launches (per launch), and torch.profiler's kernel durations
(CUPTI: the kernels alone, launch overhead excluded; summed over the kernels of one
call, median over calls).

``opencl`` times an empty kernel and the float4 copy with NVIDIA's OpenCL: one
profiling event per launch (what `gpu.py` reads), events over back-to-back launches
(first start to last end, per launch), host wall time over back-to-back launches on
queues with and without ``CL_QUEUE_PROFILING_ENABLE``, and the copy at work-group sizes
64–1024 and as a persistent grid (4 work-groups per SM, each looping).

Measured (NVIDIA H200, torch 2.11 + CUDA 13.0, session 11, `.gpu/mem4/logs/{1,2}`):

- An empty kernel is 0.58 µs to CUPTI; one OpenCL profiling event says 5.26 µs and
  CUDA events around one launch 17.7 µs. The event floor is the events', not the
  GPU's: an event on an idle queue counts the launch's setup.
- Back to back, NVIDIA's OpenCL launches one kernel per 10.1 µs (plain queue) or 15.3 µs
  (``CL_QUEUE_PROFILING_ENABLE``: +5 µs a launch); CUDA through the driver API, 6.7 µs.
  Events over a batch are launch-bound, not fairer. Work-groups of 128–1024 copy alike
  (64 slower); a persistent grid does not beat 256-item groups.
- L2-cold copy of 12.6 / 25.2 / 50.3 MB moved: CUPTI kernel time 4.74 / 7.97 / 14.16 µs
  (55 / 66 / 74 % of 4,814 GB/s); CUDA events around it 7.10 / 10.34 / 16.46 µs, the
  same as OpenCL's events (7.04 / 9.81 / 16.51 µs): about 2 µs of every event is not
  the kernel's. L2-warm (repeated on the same buffers, which the 60 MB L2 holds) the
  copy's kernel takes 2.75 / 4.3 µs: 95 / 122 % of HBM's peak.
- PyTorch eager's own kernels (CUPTI, inputs L2-warm) for dnnr's ≥ 12 MB CNN kernels:
  ConvNeXt LayerNorm2d 7.8–11.7 %, effnet GAP 46–62 %, SE scale 37–53 %, ResNet's
  MaxPool 24 % (see the session-11 report for the per-kernel table).

NVIDIA H100 80GB HBM3 (3,352 GB/s; session 12, `.gpu/mem5/logs/1`), ``--sizes-from``
the 39 memory-bound kernels of all 15 models at b8 moving 12 MB or more: the copy of
their sizes runs time-weighted at 68.8 % (OpenCL events, L2-cold), 76.0 % (L2-warm),
79.0 % (CUPTI, L2-cold); CUDA events around ``copy_`` of 50 MB or more read only
34–39 % (not looked into). dnnr's kernels: 66.3 % by the OpenCL events.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SIZES_MB = (12, 24, 48)  # MiB moved (half read, half written): 12.6, 25.2, 50.3 MB
BATCH = 50  # launches per back-to-back sample

# dnnr's CNN b8 memory-bound kernels moving 12 MB or more (`gpu_memory.py`, session 10)
# and the same work in PyTorch eager: (label, bytes dnnr counts, build(torch) -> call).
# The bytes are the kernel's reads and writes as dnnr's plan counts them, so a % here
# and dnnr's are the same numerator over each one's time.


SCRUB_BYTES = 256 << 20  # written between L2-cold repeats: over any card's L2


def sizes_from(logs: list[Path], batch: int = 8, floor: int = 1 << 20) -> list[int]:
    """The bytes moved by the memory-bound kernels of `gpu.py run` logs at ``batch``
    moving ``floor`` or more, rounded up to whole work-groups of 256 float4 copies
    (8 KiB read + 8 KiB written) and thinned to sizes 2 % apart (`gpu.py memory`
    interpolates between them)."""
    import json

    from benchmarks.gpu import memory_kernels

    rows = [json.loads(line) for log in logs for line in log.read_text().splitlines()
            if line.startswith('{"model"')]
    unit = 2 * 256 * 16
    wanted = sorted({-(-k["bytes"] // unit) * unit for k in memory_kernels(rows, batch)
                     if k["bytes"] >= floor})
    if not wanted:
        raise SystemExit(f"error: no memory-bound kernel at batch {batch} in {logs}")
    kept = [wanted[0]]
    for size in wanted[1:]:
        if size > kept[-1] * 1.02 or size == wanted[-1]:
            kept.append(size)
    return kept


def _copy_line(nbytes: int, clock: str, seconds: float) -> None:
    """One copy time as `gpu.py memory --peer` reads it."""
    import json

    print(json.dumps({"copy_bytes": nbytes, "clock": clock, "s": seconds}), flush=True)


def _peers(torch: Any, dev: str = "cuda") -> list[tuple[str, int, Callable[[], Callable[[], Any]]]]:
    f = torch.nn.functional

    def randn(*shape: int) -> Any:
        return torch.randn(*shape, device=dev)

    def layernorm2d(c: int, hw: int) -> Callable[[], Any]:
        """ConvNeXt's LayerNorm2d (stem): NCHW → permute → LayerNorm → permute."""
        x, w, b = randn(8, c, hw, hw), randn(c), randn(c)
        return lambda: f.layer_norm(x.permute(0, 2, 3, 1), (c,), w, b, 1e-6).permute(0, 3, 1, 2)

    def block_layernorm(c: int, hw: int) -> Callable[[], Any]:
        """A ConvNeXt block's first LayerNorm: NCHW (the depthwise conv's) → NHWC."""
        x, w, b = randn(8, c, hw, hw), randn(c), randn(c)
        return lambda: f.layer_norm(x.permute(0, 2, 3, 1), (c,), w, b, 1e-6)

    def layernorm_alone(c: int, hw: int) -> Callable[[], Any]:
        """PyTorch's LayerNorm kernel alone on a contiguous NHWC map (no permute)."""
        x, w, b = randn(8, hw, hw, c), randn(c), randn(c)
        return lambda: f.layer_norm(x, (c,), w, b, 1e-6)

    def residual_layernorm(c: int, hw: int) -> Callable[[], Any]:
        """A stage's last block end, then the downsampling LayerNorm2d: γ · h (NHWC,
        the Linear's) permuted to NCHW, plus the residual, LayerNorm over C."""
        h, x, g = randn(8, hw, hw, c), randn(8, c, hw, hw), randn(c, 1, 1)
        w, b = randn(c), randn(c)

        def call() -> Any:
            y = g * h.permute(0, 3, 1, 2) + x
            return f.layer_norm(y.permute(0, 2, 3, 1), (c,), w, b, 1e-6).permute(0, 3, 1, 2)
        return call

    def gap(c: int, hw: int) -> Callable[[], Any]:
        x = randn(8, c, hw, hw)
        return lambda: f.adaptive_avg_pool2d(x, 1)

    def se_scale(c: int, hw: int) -> Callable[[], Any]:
        """EfficientNet's squeeze-excitation scale: x · σ(s), s per (image, channel)."""
        x, s = randn(8, c, hw, hw), randn(8, c, 1, 1)
        return lambda: x * torch.sigmoid(s)

    def maxpool() -> Callable[[], Any]:
        x = randn(8, 64, 112, 112)
        return lambda: f.max_pool2d(x, 3, 2, 1)

    def relu_maxpool() -> Callable[[], Any]:
        x = randn(8, 64, 112, 112)
        return lambda: f.max_pool2d(f.relu(x), 3, 2, 1)

    mb = 4 * 8  # float32 × batch 8
    return [
        ("convnext stem LayerNorm2d 96×56²", 2 * mb * 96 * 56 * 56, lambda: layernorm2d(96, 56)),
        ("convnext block LayerNorm 96×56² (NCHW→NHWC)", 2 * mb * 96 * 56 * 56,
         lambda: block_layernorm(96, 56)),
        ("  torch LayerNorm kernel alone, NHWC 96×56²", 2 * mb * 96 * 56 * 56,
         lambda: layernorm_alone(96, 56)),
        ("convnext γ·h + x, LayerNorm2d 96×56²", 3 * mb * 96 * 56 * 56,
         lambda: residual_layernorm(96, 56)),
        ("convnext γ·h + x, LayerNorm2d 192×28²", 3 * mb * 192 * 28 * 28,
         lambda: residual_layernorm(192, 28)),
        ("  torch LayerNorm kernel alone, NHWC 192×28²", 2 * mb * 192 * 28 * 28,
         lambda: layernorm_alone(192, 28)),
        ("effnet GAP 32×112²", mb * 32 * 112 * 112, lambda: gap(32, 112)),
        ("effnet GAP 144×56²", mb * 144 * 56 * 56, lambda: gap(144, 56)),
        ("effnet SE scale 32×112²", 2 * mb * 32 * 112 * 112, lambda: se_scale(32, 112)),
        ("effnet SE scale 96×56²", 2 * mb * 96 * 56 * 56, lambda: se_scale(96, 56)),
        ("effnet SE scale 144×56²", 2 * mb * 144 * 56 * 56, lambda: se_scale(144, 56)),
        ("effnet SE scale 240×28²", 2 * mb * 240 * 28 * 28, lambda: se_scale(240, 28)),
        ("resnet50 MaxPool 3×3/2 64×112²", mb * 64 * (112 * 112 + 56 * 56), maxpool),
        ("  with its Relu (torch: 2 kernels)", mb * 64 * (112 * 112 + 56 * 56), relu_maxpool),
    ]


def _cell(us: float, nbytes: float, peak: float) -> str:
    """µs and, for a kernel moving bytes, % of the memory peak; "n/a" where the clock
    saw nothing (a profiler without CUPTI)."""
    if us <= 0:
        return f"{'n/a':>7} {'':>6}"
    return f"{us:7.2f} {100 * nbytes / us / 1e3 / peak:5.1f}%" if nbytes else f"{us:7.2f}"


_EMPTY_PTX = b"""
.version 7.0
.target sm_80
.address_size 64
.visible .entry empty(.param .u64 p) { ret; }
"""


def _empty_cuda_kernel(torch: Any) -> Callable[[], None]:
    """An empty kernel (one block of 256 threads) launched through the CUDA driver API
    on PyTorch's current stream."""
    import ctypes

    torch.zeros(1, device="cuda")  # the primary context, current
    cuda = ctypes.CDLL("libcuda.so.1")
    module, function = ctypes.c_void_p(), ctypes.c_void_p()
    ptx = ctypes.create_string_buffer(_EMPTY_PTX)
    for call, args in (("cuModuleLoadData", (ctypes.byref(module), ptx)),
                       ("cuModuleGetFunction", (ctypes.byref(function), module, b"empty"))):
        if getattr(cuda, call)(*args) != 0:
            raise SystemExit(f"{call} failed")
    arg = ctypes.c_uint64(0)
    params = (ctypes.c_void_p * 1)(ctypes.cast(ctypes.byref(arg), ctypes.c_void_p))
    stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)

    def launch() -> None:
        cuda.cuLaunchKernel(function, 1, 1, 1, 256, 1, 1, 0, stream, params, None)
    return launch


def _kernel_names(torch: Any, call: Callable[[], Any]) -> set[str]:
    """The names of the kernels ``call`` launches (torch.profiler)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        call()
        torch.cuda.synchronize()
    return {e.name for e in prof.events() if e.device_type.name == "CUDA"}


def _cuda_clocks(torch: Any, call: Callable[[], Any], repeats: int,
                 scrub: Callable[[], Any] | None = None) -> tuple[float, float, float, int]:
    """(CUDA events around one call: median µs; events around `BATCH` back-to-back
    calls: µs per call; profiler kernel durations summed per call: median µs; kernels
    per call). ``scrub``: run before each single call and each profiled one (L2-cold;
    its kernels are left out of the profile), and the back-to-back clock is not taken."""
    from torch.profiler import ProfilerActivity, profile

    for _ in range(3):
        call()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    single = []
    for _ in range(repeats):
        if scrub is not None:
            scrub()
        start.record()
        call()
        end.record()
        end.synchronize()
        single.append(start.elapsed_time(end) * 1e3)
    batched = []
    for _ in range(5 if scrub is None else 0):
        start.record()
        for _ in range(BATCH):
            call()
        end.record()
        end.synchronize()
        batched.append(start.elapsed_time(end) * 1e3 / BATCH)
    skip = _kernel_names(torch, scrub) if scrub is not None else set()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(repeats):
            if scrub is not None:
                scrub()
            call()
        torch.cuda.synchronize()
    kernels = sorted((e for e in prof.events()
                      if e.device_type.name == "CUDA" and e.name not in skip),
                     key=lambda e: e.time_range.start)
    per_call = len(kernels) // repeats if len(kernels) % repeats == 0 else 0
    if per_call:
        sums = [sum(k.time_range.elapsed_us() for k in kernels[i:i + per_call])
                for i in range(0, len(kernels), per_call)]
        kernel_us = statistics.median(sums)
    else:  # kernels not a whole number per call (should not happen): the mean
        kernel_us = sum(k.time_range.elapsed_us() for k in kernels) / repeats
    return (statistics.median(single), statistics.median(batched) if batched else 0.0,
            kernel_us, per_call)


def cuda_sizes(repeats: int, sizes: list[int]) -> None:
    """An L2-cold device-to-device copy moving each of ``sizes`` bytes: CUDA events
    around one launch and CUPTI's kernel time (medians)."""
    import torch

    from benchmarks.gpu import _peaks

    card, _, peak = _peaks()
    print(f"peer (CUDA copies at the kernels' sizes): {card}, memory peak {peak:.0f} GB/s; "
          f"{len(sizes)} sizes, median of {repeats}", flush=True)
    scrub_buffer = torch.empty(SCRUB_BYTES // 4, device="cuda")
    for nbytes in sizes:
        src = torch.randn(nbytes // 8, device="cuda")
        dst = torch.empty_like(src)
        events, _, cupti, _ = _cuda_clocks(torch, lambda s=src, d=dst: d.copy_(s), repeats,
                                           lambda: scrub_buffer.fill_(1.0))
        _copy_line(nbytes, "cuda_events_cold", events * 1e-6)
        if cupti > 0:
            _copy_line(nbytes, "cupti_cold", cupti * 1e-6)
        del src, dst


def cuda(repeats: int) -> None:
    """PyTorch eager on CUDA: copies, the CNN kernels' peers, an empty kernel."""
    import torch

    from benchmarks.gpu import _peaks

    card, _, peak = _peaks()
    print(f"peer (CUDA): {card}, memory peak {peak:.0f} GB/s; torch {torch.__version__}, "
          f"median of {repeats}; µs: CUDA events around 1 call | events around {BATCH} "
          f"calls, per call | profiler kernel time (sum per call), kernels per call")

    def line(label: str, nbytes: float, clocks: tuple[float, float, float, int]) -> None:
        one, batch, kern, count = clocks
        cells = "  ".join(_cell(us, nbytes, peak) for us in (one, batch, kern))
        print(f"{label:<46}{nbytes / 1e6:7.1f} MB  {cells}  ({count} kernels)", flush=True)

    for label, make in (("empty kernel (PTX, 1 block of 256)", lambda: _empty_cuda_kernel(torch)),
                        ("torch.cuda._sleep(0)", lambda: lambda: torch.cuda._sleep(0))):
        try:
            line(label, 0, _cuda_clocks(torch, make(), repeats))
        except Exception as error:  # noqa: BLE001 - the copies and peers still run
            print(f"{label}: failed: {error}", flush=True)
    for mib in SIZES_MB:
        floats = mib * (1 << 20) // 8
        src, dst = torch.randn(floats, device="cuda"), torch.empty(floats, device="cuda")
        for label, call in ((f"copy_ {floats * 8 / 1e6:.1f} MB", lambda s=src, d=dst: d.copy_(s)),
                            ("  clone", lambda s=src: s.clone()),
                            ("  x + 0", lambda s=src: s + 0)):
            line(label, floats * 8, _cuda_clocks(torch, call, repeats))
        del src, dst
    # L2-cold (a 256 MB write between calls): the H200's 60 MB L2 holds the sizes above
    # between back-to-back repeats
    scrub_buffer = torch.empty(64 << 20, device="cuda")
    for mib in SIZES_MB:
        floats = mib * (1 << 20) // 8
        src, dst = torch.randn(floats, device="cuda"), torch.empty(floats, device="cuda")
        for label, call in ((f"copy_ {floats * 8 / 1e6:.1f} MB, L2-cold", lambda s=src, d=dst: d.copy_(s)),
                            ("  x + 0, L2-cold", lambda s=src: s + 0)):
            line(label, floats * 8, _cuda_clocks(torch, call, repeats,
                                                 lambda: scrub_buffer.fill_(1.0)))
        del src, dst
    for label, nbytes, build in _peers(torch):
        try:
            line(label, nbytes, _cuda_clocks(torch, build(), repeats))
        except Exception as error:  # noqa: BLE001 - one failed peer, the others still run
            print(f"{label}: failed: {error}", flush=True)
        torch.cuda.empty_cache()


_CL_SOURCE = """
__kernel void empty(__global float* out) {}
__kernel void copy4(__global const float4* in, __global float4* out) {
  const int i = get_global_id(0); out[i] = in[i];
}
__kernel void fill4(__global float4* out) { out[get_global_id(0)] = (float4)(1.0f); }
__kernel void copy4_grid(__global const float4* in, __global float4* out, const int n) {
  for (int i = get_global_id(0); i < n; i += get_global_size(0)) out[i] = in[i];
}
"""


def opencl_sizes(device: str, repeats: int, sizes: list[int]) -> None:
    """A float4 copy (work-groups of 256) moving each of ``sizes`` bytes, timed as
    `gpu.py` times dnnr's kernels (one OpenCL profiling event each, median): L2-cold (a
    `SCRUB_BYTES` write before each) and L2-warm (repeated on the same buffers)."""
    import pyopencl as cl

    from benchmarks.gpu import _peaks
    from egraph_compiler.backends.opencl.runtime import _device

    card, _, peak = _peaks()
    ctx = cl.Context([_device(device)])
    queue = cl.CommandQueue(ctx, properties=cl.command_queue_properties.PROFILING_ENABLE)
    program = cl.Program(ctx, _CL_SOURCE).build()
    copy4, fill = cl.Kernel(program, "copy4"), cl.Kernel(program, "fill4")
    src = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, max(sizes) // 2)
    dst = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, max(sizes) // 2)
    scrub = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, SCRUB_BYTES)
    cl.enqueue_fill_buffer(queue, src, np.float32(1), 0, max(sizes) // 2).wait()
    print(f"peer (OpenCL copies at the kernels' sizes): {card}, memory peak {peak:.0f} GB/s; "
          f"{len(sizes)} sizes, median of {repeats} profiling events", flush=True)
    for nbytes in sizes:
        for clock, cold in (("opencl_cold", True), ("opencl_warm", False)):
            samples = []
            for n in range(repeats + 3):
                if cold:
                    fill(queue, (SCRUB_BYTES // 16,), (256,), scrub)
                event = copy4(queue, (nbytes // 32,), (256,), src, dst)
                event.wait()
                if n >= 3:
                    samples.append((event.profile.end - event.profile.start) * 1e-9)
            _copy_line(nbytes, clock, statistics.median(samples))


def opencl(device: str, repeats: int) -> None:
    """NVIDIA's OpenCL: where the empty kernel's 5.5 µs comes from."""
    import pyopencl as cl

    from benchmarks.gpu import _peaks
    from egraph_compiler.backends.opencl.runtime import _device

    card, _, peak = _peaks()
    dev = _device(device)
    ctx = cl.Context([dev])
    profiled = cl.CommandQueue(ctx, properties=cl.command_queue_properties.PROFILING_ENABLE)
    plain = cl.CommandQueue(ctx)
    program = cl.Program(ctx, _CL_SOURCE).build()
    empty, copy4, grid = (cl.Kernel(program, n) for n in ("empty", "copy4", "copy4_grid"))
    units = dev.max_compute_units
    big = max(SIZES_MB) * (1 << 20) // 2
    src = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, big)
    dst = cl.Buffer(ctx, cl.mem_flags.READ_WRITE, big)
    cl.enqueue_fill_buffer(profiled, src, np.float32(1), 0, big).wait()
    print(f"peer (OpenCL): {card}, {units} compute units, memory peak {peak:.0f} GB/s; "
          f"median of {repeats}; µs: one event per launch (end - start) | events over "
          f"{BATCH} back-to-back launches (last end - first start, per launch) | host wall "
          f"time over {BATCH} launches, profiling queue | the same, plain queue")

    def clocks(launch: Callable[[Any], Any]) -> tuple[float, float, float, float]:
        for _ in range(3):
            launch(profiled).wait()
        single = []
        for _ in range(repeats):
            event = launch(profiled)
            event.wait()
            single.append((event.profile.end - event.profile.start) * 1e-3)
        spans, walls = [], {id(profiled): [], id(plain): []}
        for _ in range(5):
            events = [launch(profiled) for _ in range(BATCH)]
            profiled.finish()
            spans.append((events[-1].profile.end - events[0].profile.start) * 1e-3 / BATCH)
            for queue in (profiled, plain):
                queue.finish()
                t0 = time.perf_counter()
                for _ in range(BATCH):
                    launch(queue)
                queue.finish()
                walls[id(queue)].append((time.perf_counter() - t0) * 1e6 / BATCH)
        return (statistics.median(single), statistics.median(spans),
                statistics.median(walls[id(profiled)]), statistics.median(walls[id(plain)]))

    def line(label: str, nbytes: float, times: tuple[float, ...]) -> None:
        cells = "  ".join(_cell(us, nbytes, peak) for us in times)
        print(f"{label:<46}{nbytes / 1e6:7.1f} MB  {cells}", flush=True)

    for items in (256, 256 * 1056):
        line(f"empty kernel, {items} work-items", 0,
             clocks(lambda q, n=items: empty(q, (n,), (256,), dst)))
    for mib in SIZES_MB:
        vec = mib * (1 << 20) // 32
        nbytes = vec * 32
        line(f"copy float4 {nbytes / 1e6:.1f} MB, work-group 256", nbytes,
             clocks(lambda q, n=vec: copy4(q, (n,), (256,), src, dst)))
        for local in (64, 128, 512, 1024):
            line(f"  work-group {local}", nbytes,
                 clocks(lambda q, n=vec, g=local: copy4(q, (n,), (g,), src, dst)))
        for per_unit in (4, 8):
            items = units * per_unit * 256
            line(f"  persistent grid, {per_unit} groups of 256 per unit", nbytes,
                 clocks(lambda q, n=vec, t=items: grid(q, (t,), (256,), src, dst, np.int32(n))))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("step", choices=["cuda", "opencl"])
    parser.add_argument("--device", default="NVIDIA", help="OpenCL device name substring")
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--sizes-from", nargs="+", type=Path, metavar="LOG",
                        help="only a plain copy at the sizes of the memory-bound kernels of "
                        "these `gpu.py run` logs (batch 8), for `gpu.py memory --peer`")
    args = parser.parse_args()
    if args.sizes_from:
        sizes = sizes_from(args.sizes_from)
        if args.step == "cuda":
            cuda_sizes(args.repeats, sizes)
        else:
            opencl_sizes(args.device, args.repeats, sizes)
    elif args.step == "cuda":
        cuda(args.repeats)
    else:
        opencl(args.device, args.repeats)


if __name__ == "__main__":
    main()
