"""``gemv-packed`` (`cpu_gemv.py`) on PoCL against onnxruntime: a Gemm (transB, bias,
HardSwish epilogue, a Flatten prologue) whose 37 columns leave a ragged block, a MatMul
of a 1-D vector by a [K, N] constant, a MatMul whose B is an input (falls back to the
direct 1 × 16 block), and the CPU model's choice of it for a one-row product; and the
one multiply-add spelling of the CPU kernels (`spelling.multiply_add`)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

from egraph_compiler.backends.opencl import KernelParams, cost
from egraph_compiler.backends.opencl.cpu_gemv import VARIANT, PackedGemv
from tests.backends.opencl.test_cpu_conv import _run
from tests.backends.opencl.test_gemm import _model


def _gemv(case: str) -> onnx.ModelProto:
    rng = np.random.default_rng(3)
    if case == "gemm-flatten-hardswish":  # [1, 24, 2, 2] → Flatten → Gemm(96 → 37)
        nodes = [helper.make_node("Flatten", ["x"], ["f"]),
                 helper.make_node("Gemm", ["f", "W", "B"], ["g"], transB=1),
                 helper.make_node("HardSwish", ["g"], ["y"])]
        constants = {"W": rng.standard_normal((37, 96)).astype(np.float32) * 0.3,
                     "B": rng.standard_normal(37).astype(np.float32)}
        return _model(nodes, {"x": [1, 24, 2, 2]}, [1, 37], constants)
    if case == "matmul-vector":  # [70] · [70, 48]
        return _model([helper.make_node("MatMul", ["x", "W"], ["y"])], {"x": [70]}, [48],
                      {"W": rng.standard_normal((70, 48)).astype(np.float32)})
    # B an input: not packed, the direct block instead
    return _model([helper.make_node("MatMul", ["x", "w"], ["y"])],
                  {"x": [1, 40], "w": [40, 33]}, [1, 33], {})


CASES = {"gemm-flatten-hardswish": VARIANT, "matmul-vector": VARIANT,
         "matmul-input-b": "direct"}


@pytest.mark.parametrize("case", sorted(CASES))
def test_packed_gemv_matches_onnxruntime(case: str, tmp_path: Path) -> None:
    launches = _run(_gemv(case), KernelParams.for_device("cpu"), tmp_path)
    assert [la["variant"].split()[0] for la in launches] == [CASES[case]]
    source = (tmp_path / "kernels.cl").read_text()
    if CASES[case] == VARIANT:  # one float16 accumulator over the packed weights
        assert re.search(r"acc = \(\(float16\)\(.*\) \* \*\(__global const float16\*\)", source)
    assert "mad(" not in source and "fma(" not in source


def test_one_row_products_are_priced_packed_on_the_cpu_only() -> None:
    """MobileNetV3's classifier Gemms (576 → 1024, 1024 → 1000) take ``gemv-packed`` on
    the CPU class; the GPU class is not offered it."""
    for n, k in ((1024, 576), (1000, 1024)):
        items = -(-n // 16)
        chosen = cost.choose(cost.options(cost.DEVICES["cpu"], 1, n, k, 1, items, True, "m"))
        assert chosen.variant == VARIANT and chosen.params == PackedGemv(16)
        gpu = cost.options(cost.DEVICES["gpu"], 1, n, k, 1, items, True, "m")
        assert all(o.variant != VARIANT for o in gpu)
