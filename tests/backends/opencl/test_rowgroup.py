"""Row reductions: LayerNorm written out as exporters emit it, and Softmax, are one
kernel each, and match onnxruntime on PoCL (rtol 1e-3, atol 1e-4) in both variants —
one work-item per row (short rows, many of them) and one work-group per row."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest

from egraph_compiler.backends.opencl import KernelParams, build, compile_graph, load
from egraph_compiler.fusion import plan_fusion
from egraph_compiler.plan import plan_memory
from tests.backends.opencl.helpers import static_graph, with_static_inputs
from tests.modelzoo import (
    BLOCKS,
    _Builder,
    assert_close,
    layernorm_block,
    random_inputs,
    run_ort,
    softmax_block,
)

# each variant forced whatever the row count and length
VARIANTS = {"work-item per row": KernelParams(row_serial_min_rows=1),
            "work-group per row": KernelParams(row_serial_below=0)}

LAYERNORM_OPS = ["ReduceMean", "Sub", "Pow", "ReduceMean", "Add", "Sqrt", "Div", "Mul", "Add"]


def _launches(model, feeds: dict[str, np.ndarray], out: Path) -> list[list[str]]:  # noqa: ANN001
    model = with_static_inputs(model, feeds)
    compile_graph(static_graph(model, feeds), out)
    compiled = load(out)
    assert_close(compiled.run(feeds), run_ort(model, feeds), rtol=1e-3, atol=1e-4)
    return [launch["ops"] for launch in compiled.plan["launches"]]


# 100 columns: more than a work-group (64), so each work-item strides; 45: fewer, padded
@pytest.mark.parametrize("d_model", [100, 45])
def test_decomposed_layernorm_is_one_kernel(d_model: int, tmp_path: Path) -> None:
    model = layernorm_block(d_model=d_model, seed=3)
    feeds = random_inputs(model, 4, dims={"batch": 3, "seq": 7})
    feeds = {k: v * 5.0 + 2.0 for k, v in feeds.items()}  # a mean and variance far from 0/1
    launches = _launches(model, feeds, tmp_path)
    assert launches == [LAYERNORM_OPS]


def test_decomposed_softmax_is_one_kernel(tmp_path: Path) -> None:
    model = softmax_block(d_model=70)
    feeds = {k: v * 4.0 for k, v in random_inputs(model, 6, dims={"batch": 2, "seq": 3}).items()}
    assert _launches(model, feeds, tmp_path) == [["ReduceMax", "Sub", "Exp", "ReduceSum", "Div"]]


def test_transformer_blocks_run_softmax_and_layernorm_in_one_kernel_each(tmp_path: Path) -> None:
    model = BLOCKS["transformer_encoder"]()
    launches = _launches(model, random_inputs(model, 5, dims={"batch": 2, "seq": 5}), tmp_path)
    softmax = [ops for ops in launches if "Softmax" in ops]
    norms = [ops for ops in launches if "ReduceMean" in ops]
    assert len(softmax) == 1  # the scaling Div rides along
    assert len(norms) == 2 and all(ops.count("ReduceMean") == 2 for ops in norms), launches
    print(f"transformer_encoder: {sum(map(len, launches))} operators in {len(launches)} kernels")
    assert len(launches) <= 11


def _row_kernels(model, feeds: dict[str, np.ndarray], out: Path,  # noqa: ANN001
                 params: KernelParams, run: bool = True) -> list[dict]:
    """Build with ``params``, check against onnxruntime (``run``), return the row
    kernels' launches (with their source under "source")."""
    model = with_static_inputs(model, feeds)
    build(plan_memory(plan_fusion(static_graph(model, feeds))), out, params)
    if run:
        assert_close(load(out).run(feeds), run_ort(model, feeds), rtol=1e-3, atol=1e-4)
    source = (out / "kernels.cl").read_text()
    launches = [launch for launch in json.loads((out / "plan.json").read_text())["launches"]
                if launch["kind"] in ("rownorm", "rowgroup")]
    for launch in launches:
        start = source.index(f"void {launch['kernel']}(")
        launch["source"] = source[start:source.index("\n}\n", start)]
    return launches


def _row_op_model(op: str, shape: list[int], axis: int) -> onnx.ModelProto:
    b = _Builder(1)
    inputs = ["x"]
    if op == "LayerNormalization":
        inputs += [b.weight(tuple(shape[axis:]), 1), b.weight(tuple(shape[axis:]), 4)]
    return b.model(op.lower(), "x", shape, b.op(op, inputs, axis=axis), shape)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize(("op", "shape", "axis"), [
    ("Softmax", [3, 70, 37], -1),   # serial: 4 chunks of 8 lanes, then a tail of 5
    ("LogSoftmax", [2, 5, 40], 1),  # rows strided (not the innermost axis), shorter than 8
    ("LayerNormalization", [4, 5, 6, 7], 2),  # two reduced axes, 42 = 5 chunks + 2
])
def test_row_operators_match_onnxruntime_in_both_variants(
        op: str, shape: list[int], axis: int, variant: str, tmp_path: Path) -> None:
    model = _row_op_model(op, shape, axis)
    feeds = {k: v * 6.0 + 3.0 for k, v in random_inputs(model, 2).items()}
    if op != "LayerNormalization":  # masked entries: exp(-inf) is 0, a row of them is NaN
        feeds["x"][0, 0, :5] = -np.inf
    [launch] = _row_kernels(model, feeds, tmp_path, VARIANTS[variant])
    assert ("barrier" in launch["source"]) == (variant == "work-group per row")


# the tests above run these blocks with a work-group per row (21 and 6 rows)
@pytest.mark.parametrize("model", [layernorm_block(d_model=45, seed=3), softmax_block(d_model=70)],
                         ids=["layernorm", "softmax"])
def test_decomposed_rows_match_onnxruntime_with_a_work_item_per_row(
        model: onnx.ModelProto, tmp_path: Path) -> None:
    feeds = {k: v * 5.0 + 2.0 for k, v in random_inputs(model, 4, dims={"batch": 3, "seq": 7}).items()}
    [launch] = _row_kernels(model, feeds, tmp_path, VARIANTS["work-item per row"])
    assert "barrier" not in launch["source"] and "LANES" in launch["source"]


@pytest.mark.parametrize(("rows", "length", "serial"), [
    (64, 100, True),     # enough short rows: a work-item each
    (63, 100, False),    # too few rows to fill the device that way
    (64, 1024, False),   # long rows: a work-group each
])
def test_row_variant_follows_kernel_params(rows: int, length: int, serial: bool,
                                           tmp_path: Path) -> None:
    model = _row_op_model("Softmax", [rows, length], -1)
    [launch] = _row_kernels(model, random_inputs(model, 3), tmp_path, KernelParams(), run=False)
    params = KernelParams()
    expected = (-(-rows // params.work_group) * params.work_group, params.work_group) if serial \
        else (rows * params.reduce_work_group, params.reduce_work_group)
    assert (launch["global"], launch["local"]) == expected
