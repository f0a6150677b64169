"""`spelling.ERF_HELPER` (``dnnr_erf``, the CPU class's inline erf) on PoCL against
float64 erf: within 1.1 ulp over a dense sweep of |x| in [1e-30, 6] (every 4096th
float, both signs, the pieces' boundaries ±1 ulp) and exact on ±0, ±inf and NaN;
a Gelu fused into a MatMul calls it and matches onnxruntime; the GPU class keeps the
built-in."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
from onnx import helper

from egraph_compiler.backends.opencl import KernelParams
from egraph_compiler.backends.opencl import spelling as sp
from tests.backends.opencl.test_cpu_conv import _run
from tests.backends.opencl.test_gemm import _model


def _sweep() -> np.ndarray:
    lo, hi = np.float32(1e-30).view(np.uint32), np.float32(6.0).view(np.uint32)
    bits = np.arange(int(lo), int(hi), 4096, dtype=np.uint32)
    edges = np.array([s for s, _, _ in sp.ERF_PIECES] + [sp.ERF_ONE], np.float32)
    around = np.concatenate([np.nextafter(edges, np.float32(0)), edges,
                             np.nextafter(edges, np.float32(9))])
    x = np.concatenate([bits.view(np.float32), around])
    return np.concatenate([x, -x]).astype(np.float32)


def test_inline_erf_is_within_1_1_ulp_on_pocl() -> None:
    import pyopencl as cl

    from egraph_compiler.backends.opencl.runtime import _device

    context = cl.Context([_device(None)])
    queue = cl.CommandQueue(context)
    program = cl.Program(context, sp.ERF_HELPER + """
__kernel void k(__global const float* x, __global float* y) {
  const int i = get_global_id(0); y[i] = dnnr_erf(x[i]); }""").build()
    x = np.concatenate([_sweep(), np.array([0.0, -0.0, np.inf, -np.inf, np.nan], np.float32)])
    mf = cl.mem_flags
    x_buf = cl.Buffer(context, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=x)
    y_buf = cl.Buffer(context, mf.WRITE_ONLY, x.nbytes)
    program.k(queue, (x.size,), None, x_buf, y_buf)
    y = np.empty_like(x)
    cl.enqueue_copy(queue, y, y_buf)
    finite = x[:-5]
    reference = np.array([math.erf(v) for v in finite.astype(np.float64)])
    ulp = np.spacing(np.abs(reference).astype(np.float32)).astype(np.float64)
    error = np.abs(y[:-5].astype(np.float64) - reference) / ulp
    assert error.max() <= 1.1, f"{error.max():.3f} ulp at x = {finite[np.argmax(error)]!r}"
    special = y[-5:]
    assert special[0] == 0.0 and not np.signbit(special[0])
    assert special[1] == 0.0 and np.signbit(special[1])
    assert list(special[2:4]) == [1.0, -1.0] and np.isnan(special[4])


def test_erf_calls_the_helper_and_the_gpu_class_keeps_the_builtin() -> None:
    assert sp.SPELLING.functions["erf"] == "dnnr_erf({0})"
    assert sp.helpers("y = dnnr_erf(t);", "cpu") == [sp.ERF_HELPER]
    assert "return erf(x);" in sp.helpers("y = dnnr_erf(t);", "gpu")[0]
    assert sp.helpers("y = exp(t);", "cpu") == []


def test_matmul_with_an_erf_gelu_epilogue_matches_onnxruntime(tmp_path: Path) -> None:
    """BERT's GELU as torch exports it (Div, Erf, Add, Mul, Mul) after a MatMul, fused
    into one launch on the CPU class: the kernel defines and calls `dnnr_erf`."""
    rng = np.random.default_rng(7)
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"]),
             helper.make_node("Div", ["h", "root2"], ["d"]),
             helper.make_node("Erf", ["d"], ["e"]),
             helper.make_node("Add", ["e", "one"], ["p"]),
             helper.make_node("Mul", ["h", "p"], ["m"]),
             helper.make_node("Mul", ["m", "half"], ["y"])]
    constants = {"W": (rng.standard_normal((32, 48)) * 0.8).astype(np.float32),
                 "root2": np.array(1.4142135381698608, np.float32),
                 "one": np.array(1.0, np.float32), "half": np.array(0.5, np.float32)}
    model = _model(nodes, {"x": [16, 32]}, [16, 48], constants)
    launches = _run(model, KernelParams.for_device("cpu"), tmp_path)
    assert len(launches) == 1
    source = (tmp_path / "kernels.cl").read_text()
    assert "static inline float dnnr_erf" in source and "= dnnr_erf(" in source


def test_the_helper_leaves_the_kernel_signature_to_hoisting() -> None:
    """`build.hoist_sizes` appends the size parameters at the first ``) {`` ending a
    line: a helper defined before the kernel must not have one."""
    from egraph_compiler.backends.opencl.build import hoist_sizes

    kernel = ("__kernel void k(__global float* y) {\n  const int i = get_global_id(0) % 37;\n"
              "  y[i] = dnnr_erf(y[i + 41]);\n}\n")
    for device in ("cpu", "gpu"):
        source, sizes = hoist_sizes("".join(sp.helpers(kernel, device)) + kernel, 1)
        assert sizes == (37, 41)
        assert "__kernel void k(__global float* y, const int s0, const int s1) {\n" in source
