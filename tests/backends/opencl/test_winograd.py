"""Winograd F(2×2, 3×3) (`winograd.py`) on PoCL against onnxruntime: ragged channel and
tile blocks, odd maps (a last tile half outside), symmetric and asymmetric padding, K
split across work-groups (two launches), with a BatchNorm → Relu prologue and a
Sigmoid epilogue fused; the weight transform against its definition; and where the
cost models offer the option."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

from egraph_compiler.backends.opencl import KernelParams, build, cost, load
from egraph_compiler.backends.opencl.winograd import G_MATRIX, Winograd, transform_weights
from egraph_compiler.fusion import plan_fusion
from egraph_compiler.plan import plan_memory
from tests.backends.opencl.helpers import static_graph
from tests.backends.opencl.test_gemm import CONVS, _conv, _model
from tests.modelzoo import run_ort


def _asymmetric() -> onnx.ModelProto:
    """Relu → Conv with pads (top 2, left 0, bottom 0, right 1) → Add of a second input
    (a residual epilogue reading another tensor at the output's index)."""
    rng = np.random.default_rng(5)
    nodes = [helper.make_node("Relu", ["x"], ["xr"]),
             helper.make_node("Conv", ["xr", "W"], ["c"], kernel_shape=[3, 3],
                              pads=[2, 0, 0, 1]),
             helper.make_node("Add", ["c", "r"], ["y"])]
    weights = (rng.standard_normal((9, 6, 3, 3)) * 0.3).astype(np.float32)
    return _model(nodes, {"x": [1, 6, 7, 8], "r": [1, 9, 7, 7]}, [1, 9, 7, 7], {"W": weights})


SHAPES = {
    "3x3-pad-ragged": CONVS["3x3-pad-ragged"],  # 2 images, 5 → 13 channels, 9×7
    "no-pad-even": _conv(1, 12, (8, 10), 20, 3, 1, 0),
    "deep-ragged-k": _conv(1, 40, (5, 6), 24, 3, 1, 1),
    "asymmetric-pads-residual": _asymmetric(),
}
BLOCKS = (Winograd(32, 32, 8, 2, 2), Winograd(16, 32, 8, 1, 2, 4),
          Winograd(32, 32, 16, 4, 4, batched=True, contiguous=True, slices=4))


@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("block", BLOCKS, ids=lambda b: cost.Option("winograd", b, 0).describe())
def test_winograd_matches_onnxruntime(shape: str, block: Winograd, tmp_path: Path) -> None:
    model = SHAPES[shape]
    rng = np.random.default_rng(3)
    feeds = {i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim])
             .astype(np.float32) for i in model.graph.input}
    params = KernelParams(anchor_variant="winograd", anchor_winograd=block)
    build(plan_memory(plan_fusion(static_graph(model, feeds))), tmp_path, params)
    compiled = load(tmp_path)
    launches = compiled.plan["launches"]
    assert len({launch["block"] for launch in launches}) == 1, "prologue and epilogue fused"
    assert launches[0]["variant"].startswith(("winograd ", "winograd-gemm "))
    assert len(launches) == (3 if block.batched else 2 if block.groups > 1 else 1), \
        "K groups: a second launch; batched: transform, GEMM, transform"
    actual, expected = compiled.run(feeds)["y"], run_ort(model, feeds)["y"]
    relative = np.max(np.abs(actual - expected)) / np.max(np.abs(expected))
    assert relative <= 1e-4, f"{shape}: max error {relative:.2e} of the largest output"


def test_weight_transform_is_g_g_gt() -> None:
    weights = np.random.default_rng(0).standard_normal((3, 2, 3, 3)).astype(np.float32)
    u = transform_weights(weights)
    g_matrix = np.array(G_MATRIX)
    assert u.shape == (16, 2, 3) and u.dtype == np.float32
    for co in range(3):
        for ci in range(2):
            expected = g_matrix @ weights[co, ci].astype(np.float64) @ g_matrix.T
            np.testing.assert_allclose(u[:, ci, co].reshape(4, 4), expected, rtol=1e-6, atol=1e-7)


def _resnet_3x3(channels: int, size: int, batch: int, device: str, winograd: bool) -> cost.Option:
    columns = batch * size * size
    return cost.choose(cost.options(cost.DEVICES[device], channels, columns, channels * 9, 1,
                                    columns // 4 * channels // 16, True, None, window_taps=9,
                                    width=size, winograd=winograd))


def test_gpu_cost_model_offers_winograd_only_where_it_applies() -> None:
    # measured on an H200 (cost._winograd_options): the batched form was the fastest
    # option on every 3×3 stride-1 layer of ResNet-18 at batch 8
    for channels, size in ((64, 56), (128, 28), (256, 14), (512, 7)):
        chosen = _resnet_3x3(channels, size, 8, "gpu", True)
        assert chosen.variant == "winograd" and chosen.params.batched, (channels, chosen)
    assert _resnet_3x3(128, 28, 8, "gpu", False).variant != "winograd"
    # PoCL's model has no Winograd efficiency: the CPU keeps its kernels
    assert _resnet_3x3(128, 28, 8, "cpu", True).variant != "winograd"


def test_every_listed_winograd_shape_is_valid() -> None:
    assert all(shape.valid() for shape in cost.WINOGRADS)


def test_tuning_space_and_database_carry_winograd() -> None:
    from egraph_compiler.backends.opencl.kernel_search import (
        _space,
        features,
        option_from_json,
        option_to_json,
        tile_space,
    )

    params = KernelParams.for_device("gpu")
    key = "Conv m128 n6272 k1152 b1"
    _, space = _space(key, "Conv", params, tile_space(), 9, True, 28)
    shapes = [o for o in space if o.variant == "winograd"]
    assert shapes and all(len(features(o)) == len(features(space[0])) for o in shapes)
    _, without = _space(key, "Conv", params, tile_space(), 9, False, 28)
    assert not any(o.variant == "winograd" for o in without)
    for option in shapes:
        assert option_from_json(option_to_json(option), "db").params == option.params
