"""Pool kernels on PoCL against onnxruntime: small windows emitted straight-line (each
tap a literal, `kernels.POOL_UNROLL_TAPS`), large ones as loops; padding on every side,
strides, a Relu prologue and both AveragePool padding conventions; and a reduction over
many short rows (a work-item per row, a loop per reduced axis)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from onnx import helper

from egraph_compiler.backends.opencl import KernelParams, build, load
from egraph_compiler.backends.opencl.kernels import POOL_UNROLL_TAPS
from egraph_compiler.fusion import plan_fusion
from egraph_compiler.plan import plan_memory
from tests.backends.opencl.helpers import static_graph
from tests.backends.opencl.test_gemm import _model
from tests.modelzoo import assert_close, run_ort

CASES = {
    # ResNet's stem pool: 3×3, stride 2, padding 1 (straight-line)
    "max-3x3-s2": ("MaxPool", 3, 2, 1, {}, (12, 11)),
    "avg-3x3-pad-excluded": ("AveragePool", 3, 1, 1, {"count_include_pad": 0}, (9, 10)),
    "avg-3x3-pad-included": ("AveragePool", 3, 2, 1, {"count_include_pad": 1}, (9, 9)),
    # more taps than the straight-line limit: loops
    "max-9x9-loops": ("MaxPool", 9, 1, 4, {}, (10, 10)),
    "global-average-7x7": ("GlobalAveragePool", 0, 1, 0, {}, (7, 7)),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_pool_matches_onnxruntime(case: str, tmp_path: Path) -> None:
    op, k, stride, pad, attrs, size = CASES[case]
    channels = 70  # ≥ 64 rows: the global pool runs a work-item per row on PoCL
    if op == "GlobalAveragePool":
        pool = helper.make_node(op, ["r"], ["y"])
        out = [1, channels, 1, 1]
    else:
        pool = helper.make_node(op, ["r"], ["y"], kernel_shape=[k, k], strides=[stride] * 2,
                                pads=[pad] * 4, **attrs)
        out = [1, channels, *((s + 2 * pad - k) // stride + 1 for s in size)]
    model = _model([helper.make_node("Relu", ["x"], ["r"]), pool],
                   {"x": [1, channels, *size]}, out, {})
    feeds = {"x": np.random.default_rng(5).standard_normal((1, channels, *size))
             .astype(np.float32)}
    build(plan_memory(plan_fusion(static_graph(model, feeds))), tmp_path, KernelParams())
    source = (tmp_path / "kernels.cl").read_text()
    if op != "GlobalAveragePool":
        assert ("for (int q0" in source) == (k * k > POOL_UNROLL_TAPS)
    else:
        assert "for (int r0" in source and "for (int r1" in source
    assert_close(load(tmp_path).run(feeds), run_ort(model, feeds), rtol=1e-5, atol=1e-6)
