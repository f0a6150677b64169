"""The CPU depthwise conv on explicit vectors along the output row (`cpu_depthwise.py`,
``depthwise-vec``) on PoCL against onnxruntime: stride 2 and 1, padding on every side,
ragged widths and row blocks (edge blocks at both ends of a row, and a row of one
block), 5×5 windows, a channel multiplier, batch 2, a bias and a fused epilogue; and
where it does not apply (a prologue evaluated per loaded element) the kernel it falls
back to."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

from egraph_compiler.backends.opencl import KernelParams, cost
from egraph_compiler.backends.opencl.cpu_depthwise import POOL_VARIANT, VARIANT, VecDepthwise
from tests.backends.opencl.test_cpu_conv import _run
from tests.backends.opencl.test_gemm import _model


def _depthwise(n: int, channels: int, size: tuple[int, int], k: int, stride: int, pad: int,
               multiplier: int = 1, prologue: str = "") -> onnx.ModelProto:
    """[prologue →] depthwise Conv (+bias) → HardSwish. ``prologue``: ``relu``;
    ``batchnorm`` (BatchNormalization → Relu); ``residual`` (Add of a second input of
    x's shape → Relu); ``row`` (Add of a [W] row: differs along a row)."""
    rng = np.random.default_rng(channels * k + stride)
    out = [(s + 2 * pad - k) // stride + 1 for s in size]
    cout = channels * multiplier
    constants = {"W": rng.standard_normal((cout, 1, k, k)).astype(np.float32),
                 "B": rng.standard_normal(cout).astype(np.float32)}
    inputs = {"x": [n, channels, *size]}
    nodes = []
    if prologue == "batchnorm":
        nodes.append(helper.make_node("BatchNormalization", ["x", "s", "b", "mu", "var"],
                                      ["xa"]))
        constants.update({"s": rng.uniform(0.5, 1.5, channels).astype(np.float32),
                          "b": rng.standard_normal(channels).astype(np.float32),
                          "mu": rng.standard_normal(channels).astype(np.float32),
                          "var": rng.uniform(0.5, 1.5, channels).astype(np.float32)})
    elif prologue == "residual":
        nodes.append(helper.make_node("Add", ["x", "x2"], ["xa"]))
        inputs["x2"] = [n, channels, *size]
    elif prologue == "row":
        nodes.append(helper.make_node("Add", ["x", "bias_row"], ["xa"]))
        constants["bias_row"] = rng.standard_normal(size[1]).astype(np.float32)
    if prologue:
        nodes.append(helper.make_node("Relu", ["xa" if prologue != "relu" else "x"], ["xr"]))
    nodes += [helper.make_node("Conv", ["xr" if prologue else "x", "W", "B"], ["c"],
                               kernel_shape=[k, k], strides=[stride] * 2, pads=[pad] * 4,
                               group=channels),
              helper.make_node("HardSwish", ["c"], ["y"])]
    return _model(nodes, inputs, [n, cout, *out], constants)


def _key(model: onnx.ModelProto) -> str:
    x = model.graph.input[0].type.tensor_type.shape.dim
    y = model.graph.output[0].type.tensor_type.shape.dim
    w = next(i for i in model.graph.initializer if i.name == "W")
    group = x[1].dim_value
    columns = y[0].dim_value * y[2].dim_value * y[3].dim_value
    return f"Conv m{w.dims[0] // group} n{columns} k{w.dims[2] * w.dims[3]} b{group} depthwise"


def _forced(model: onnx.ModelProto, block: VecDepthwise) -> KernelParams:
    return dataclasses.replace(KernelParams.for_device("cpu"),
                               tuned=((_key(model), cost.Option(VARIANT, block, 0.0)),))


# (model, block): a 37-wide row at stride 2 is 19 outputs, blocks of 8 leave 3 in the
# last, whose loads would pass the row's end (its own branch) as the first block's
# start before it; 17 rows in blocks of 4 leave one; a 16-wide map at stride 2 is one
# block of 8 that is an edge at both ends
CASES = {
    "3x3-s2-ragged": (_depthwise(1, 5, (17, 37), 3, 2, 1), VecDepthwise(4, 8)),
    "3x3-s2-one-block-batch2": (_depthwise(2, 3, (16, 16), 3, 2, 1), VecDepthwise(2, 8)),
    "5x5-s2-multiplier": (_depthwise(1, 3, (29, 29), 5, 2, 2, multiplier=2),
                          VecDepthwise(2, 8)),
    "5x5-s2-pixels4": (_depthwise(1, 4, (14, 14), 5, 2, 2), VecDepthwise(1, 4)),
    "3x3-s1": (_depthwise(1, 4, (11, 21), 3, 1, 1), VecDepthwise(3, 8)),
    "3x3-s2-no-pad": (_depthwise(1, 6, (33, 40), 3, 2, 0), VecDepthwise(4, 8)),
    # prologues computed on the loaded vectors: per-channel parameters broadcast, a
    # second input of x's shape loaded as vectors beside it
    "3x3-s2-relu": (_depthwise(1, 5, (17, 37), 3, 2, 1, prologue="relu"), VecDepthwise(4, 8)),
    "5x5-s2-batchnorm": (_depthwise(1, 4, (28, 28), 5, 2, 2, prologue="batchnorm"),
                         VecDepthwise(2, 8)),
    "3x3-s2-residual": (_depthwise(2, 3, (20, 33), 3, 2, 1, prologue="residual"),
                        VecDepthwise(2, 8)),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_depthwise_vec_matches_onnxruntime(case: str, tmp_path: Path) -> None:
    model, block = CASES[case]
    launches = _run(model, _forced(model, block), tmp_path)
    assert [la["variant"] for la in launches] == [block.describe()], \
        "the epilogue fuses into one depthwise-vec launch"
    source = (tmp_path / "kernels.cl").read_text()
    assert len(re.findall(rf"float{block.pixels} acc\d+ = ", source)) == \
        min(block.rows, model.graph.output[0].type.tensor_type.shape.dim[2].dim_value)
    # the taps' inputs are whole-vector loads, never a vector built from scalar loads
    assert re.search(r"\*\(__global const dnnr_float\d+u\*\)", source)


def test_depthwise_vec_falls_back_where_the_prologue_differs_along_a_row(
        tmp_path: Path) -> None:
    """An Add of a per-column row before the conv differs across a loaded vector's
    lanes in a way a row load does not give: the next-best option (the ``depthwise``
    kernel) generates the block instead, still fused and checked against onnxruntime."""
    model = _depthwise(1, 4, (17, 37), 3, 2, 1, prologue="row")
    launches = _run(model, _forced(model, VecDepthwise(4, 8)), tmp_path)
    assert len(launches) == 1 and launches[0]["variant"].startswith("depthwise ")


def test_depthwise_vec_validity() -> None:
    assert VecDepthwise(4, 8).valid() and VecDepthwise(1, 4).valid()
    assert not VecDepthwise(4, 16).valid() and not VecDepthwise(0, 8).valid()
    assert not VecDepthwise(17, 8).valid()


def _pick(device: str, channels: int, size: int, k: int, stride: int) -> cost.Option:
    out = size // stride
    return cost.choose(cost.options(cost.DEVICES[device], 1, out * out, k * k, channels,
                                    channels * out * out // 8, False, None, depthwise=True,
                                    width=out, stride=stride))


def test_depthwise_vec_is_priced_at_stride_2_on_the_cpu_class() -> None:
    # MobileNetV3-small's stride-2 depthwise convs on PoCL's calling thread: 0.031 /
    # 0.066 / 0.046 / 0.043 ms against the lanes kernels' 0.089 / 0.114 / 0.064 / 0.050
    assert _pick("cpu", 16, 112, 3, 2).describe() == "depthwise-vec 7x8"
    assert _pick("cpu", 72, 56, 3, 2).describe() == "depthwise-vec 7x8"
    assert _pick("cpu", 96, 28, 5, 2).variant == VARIANT
    assert _pick("cpu", 576, 14, 5, 2).describe() == "depthwise-vec 7x4"
    # stride 1 keeps the lanes kernels (88 × 28²: 0.044 ms against 0.064); the GPU class
    # is not offered it
    assert _pick("cpu", 88, 28, 3, 1).variant == "depthwise"
    assert _pick("gpu", 72, 56, 3, 2).variant != VARIANT


def test_depthwise_vec_option_round_trips_through_the_tuning_database() -> None:
    from egraph_compiler.backends.opencl.kernel_search import option_from_json, option_to_json
    from egraph_compiler.ir.errors import DnnrError

    option = cost.Option(VARIANT, VecDepthwise(4, 8), 0.0)
    assert option_from_json(option_to_json(option), "db") == option
    with pytest.raises(DnnrError, match="cpu_depthwise.VecDepthwise.valid"):
        option_from_json({"variant": VARIANT, "rows": 4, "pixels": 16}, "db")


def _max_pool(n: int, channels: int, size: tuple[int, int], k: int, pad: int
              ) -> onnx.ModelProto:
    """Relu → MaxPool k×k stride 2 (ResNet's stem pool at k 3, pad 1)."""
    out = [(s + 2 * pad - k) // 2 + 1 for s in size]
    nodes = [helper.make_node("Relu", ["x"], ["xr"]),
             helper.make_node("MaxPool", ["xr"], ["y"], kernel_shape=[k, k], strides=[2, 2],
                              pads=[pad] * 4)]
    return _model(nodes, {"x": [n, channels, *size]}, [n, channels, *out], {})


# a 37-wide row is 19 outputs (a ragged last block, edges at both ends), 23 rows in
# blocks of 7 leave 5; 16 × 16 is one block of 8 columns; no padding at 3×3 and 2×2
POOLS = {"3x3-pad1-ragged": _max_pool(1, 3, (23, 37), 3, 1),
         "3x3-pad1-batch2": _max_pool(2, 2, (16, 16), 3, 1),
         "2x2-no-pad": _max_pool(1, 4, (20, 34), 2, 0),
         "3x3-no-pad": _max_pool(1, 2, (17, 33), 3, 0)}


@pytest.mark.parametrize("case", sorted(POOLS))
def test_max_pool_vec_matches_onnxruntime(case: str, tmp_path: Path) -> None:
    """The stride-2 MaxPool on the same row vectors (`cpu_depthwise.max_pool_vec`), its
    Relu prologue on the loaded vectors, the padding's lanes -INFINITY."""
    launches = _run(POOLS[case], KernelParams.for_device("cpu"), tmp_path)
    assert [la["variant"] for la in launches] == [POOL_VARIANT]
    assert "-INFINITY" in (tmp_path / "kernels.cl").read_text()
