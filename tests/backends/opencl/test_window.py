"""The register-window dense conv (`window.py`) on PoCL against onnxruntime: ragged
channel and pixel blocks, padding, strides (a 7×7 stride-2 stem), with a BatchNorm →
Relu prologue and an epilogue fused; and that the window's positions are computed
once, outside the loop over input channels."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from egraph_compiler.backends.opencl import KernelParams, build, cost, load
from egraph_compiler.backends.opencl.window import Window
from egraph_compiler.fusion import plan_fusion
from egraph_compiler.plan import plan_memory
from tests.backends.opencl.helpers import static_graph
from tests.backends.opencl.test_gemm import CONVS, _conv
from tests.modelzoo import assert_close, run_ort

SHAPES = {
    "3x3-pad-ragged": CONVS["3x3-pad-ragged"],
    "1x1": CONVS["1x1"],
    "1-pixel-output": CONVS["1-pixel-output"],
    "7x7-stride2-stem": _conv(1, 3, (23, 21), 8, 7, 2, 3),
}
BLOCKS = (Window(8, 1, 4), Window(16, 2, 2), Window(4, 3, 5))


def _compile(model: onnx.ModelProto, params: KernelParams, tmp_path: Path):  # noqa: ANN202
    rng = np.random.default_rng(3)
    feeds = {i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim])
             .astype(np.float32) for i in model.graph.input}
    build(plan_memory(plan_fusion(static_graph(model, feeds))), tmp_path, params)
    return feeds, load(tmp_path)


@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("block", BLOCKS, ids=lambda b: f"{b.channels}x{b.rows}x{b.width}")
def test_window_matches_onnxruntime(shape: str, block: Window, tmp_path: Path) -> None:
    feeds, compiled = _compile(SHAPES[shape], KernelParams(anchor_variant="window",
                                                           anchor_window=block), tmp_path)
    launches = compiled.plan["launches"]
    assert len(launches) == 1 and launches[0]["variant"].startswith("window ")
    assert_close(compiled.run(feeds), run_ort(SHAPES[shape], feeds), rtol=1e-4, atol=1e-5)


def test_window_positions_are_computed_outside_the_channel_loop(tmp_path: Path) -> None:
    _compile(SHAPES["3x3-pad-ragged"], KernelParams(anchor_variant="window",
                                                    anchor_window=Window(8, 1, 4)), tmp_path)
    source = (tmp_path / "kernels.cl").read_text()
    body = source[source.index("for (int ci = 0;"):]
    assert "? 0 : (" not in body.split("for (int eo")[0], "no clamp inside the channel loop"
    assert source.count("const float x") == 3 * 6  # a 3 × 6 window, each element once


def test_cpu_cost_model_prefers_the_window_for_resnet_3x3() -> None:
    options = cost.options(cost.DEVICES["cpu"], 64, 56 * 56, 64 * 9, 1, 56 * 14 * 4, True,
                           None, window_taps=9)
    assert cost.choose(options).variant == "window"
