"""Sums over contiguous rows on explicit vectors (`cpu_reduce.py`, CPU class) on PoCL
against onnxruntime: GlobalAveragePool with a fused epilogue, rows with a scalar tail
(7×7), ReduceMean without kept dims, ReduceSum; a block whose prologue is evaluated per
element keeps the scalar form, and so does the GPU class."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

from egraph_compiler.backends.opencl import KernelParams
from egraph_compiler.backends.opencl import spelling as sp
from tests.backends.opencl.test_cpu_conv import _run
from tests.backends.opencl.test_gemm import _model


def _reduce(op: str, shape: list[int], prologue: bool = False) -> onnx.ModelProto:
    """[Relu →] ``op`` over the spatial dims → HardSigmoid."""
    nodes, x = [], "x"
    if prologue:
        nodes.append(helper.make_node("Relu", ["x"], ["xr"]))
        x = "xr"
    if op == "GlobalAveragePool":
        nodes.append(helper.make_node(op, [x], ["r"]))
        out = [*shape[:2], 1, 1]
    else:  # opset 17: ReduceMean's axes an attribute, ReduceSum's an input
        keep = int(op == "ReduceSum")
        axes = {"axes": [2, 3]} if op == "ReduceMean" else {}
        inputs = [x, "axes"] if op == "ReduceSum" else [x]
        nodes.append(helper.make_node(op, inputs, ["r"], keepdims=keep, **axes))
        out = [*shape[:2], 1, 1] if keep else shape[:2]
    nodes.append(helper.make_node("HardSigmoid", ["r"], ["y"]))
    constants = {"axes": np.array([2, 3], np.int64)} if op == "ReduceSum" else {}
    return _model(nodes, {"x": shape}, out, constants)


# 16 × 20×20: rows of 400, two add chains, no tail; 5 × 7×7: one vector and a tail of 1
CASES = {
    "gap-two-chains": (_reduce("GlobalAveragePool", [1, 16, 20, 20]), True),
    "mean-tail": (_reduce("ReduceMean", [2, 5, 7, 7]), True),
    "sum-batch": (_reduce("ReduceSum", [2, 3, 6, 6]), True),
    "prologue-scalar": (_reduce("GlobalAveragePool", [1, 16, 20, 20], prologue=True), False),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_row_sums_match_onnxruntime(case: str, tmp_path: Path) -> None:
    model, on_vectors = CASES[case]
    _run(model, KernelParams.for_device("cpu"), tmp_path)
    source = (tmp_path / "kernels.cl").read_text()
    assert (sp.UNALIGNED_FLOAT16 in source) == on_vectors


def test_the_gpu_class_keeps_its_reductions(tmp_path: Path) -> None:
    model, _ = CASES["gap-two-chains"]
    _run(model, KernelParams.for_device("gpu"), tmp_path)
    assert sp.UNALIGNED_FLOAT16 not in (tmp_path / "kernels.cl").read_text()
