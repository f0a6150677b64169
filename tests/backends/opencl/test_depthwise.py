"""The specialised depthwise conv (`depthwise.py`) on PoCL against onnxruntime: ragged
blocks (output sizes no multiple of the block), padding on every side, strides,
dilation and a channel multiplier, with a BatchNorm → Relu prologue and an epilogue
fused; each window element loaded once; and the cost model's choice."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

from egraph_compiler.backends.opencl import KernelParams, build, cost, load
from egraph_compiler.backends.opencl.depthwise import Depthwise
from egraph_compiler.fusion import plan_fusion
from egraph_compiler.plan import plan_memory
from tests.backends.opencl.helpers import static_graph
from tests.backends.opencl.test_gemm import _model
from tests.modelzoo import assert_close, run_ort


def _depthwise(n: int, channels: int, size: tuple[int, int], k: int, stride: int, pad: int,
               dilation: int = 1, multiplier: int = 1) -> onnx.ModelProto:
    rng = np.random.default_rng(channels * k)
    out = [(s + 2 * pad - dilation * (k - 1) - 1) // stride + 1 for s in size]
    cout = channels * multiplier
    nodes = [
        helper.make_node("BatchNormalization", ["x", "s", "b", "mu", "var"], ["xn"]),
        helper.make_node("Relu", ["xn"], ["xr"]),
        helper.make_node("Conv", ["xr", "W", "B"], ["c"], kernel_shape=[k, k],
                         strides=[stride] * 2, pads=[pad] * 4, dilations=[dilation] * 2,
                         group=channels),
        helper.make_node("Sigmoid", ["c"], ["y"]),
    ]
    constants = {
        "W": rng.standard_normal((cout, 1, k, k)).astype(np.float32),
        "B": rng.standard_normal(cout).astype(np.float32),
        "s": rng.uniform(0.5, 1.5, channels).astype(np.float32),
        "b": rng.standard_normal(channels).astype(np.float32),
        "mu": rng.standard_normal(channels).astype(np.float32),
        "var": rng.uniform(0.5, 1.5, channels).astype(np.float32),
    }
    return _model(nodes, {"x": [n, channels, *size]}, [n, cout, *out], constants)


SHAPES = {
    "3x3-s1-ragged": _depthwise(2, 5, (9, 7), 3, 1, 1),
    "5x5-s2": _depthwise(1, 4, (13, 11), 5, 2, 2),
    "3x3-dilated-multiplier": _depthwise(1, 3, (10, 9), 3, 1, 2, dilation=2, multiplier=2),
    "3x3-s2-no-pad": _depthwise(1, 6, (8, 8), 3, 2, 0),
}
BLOCKS = (Depthwise(1, 4), Depthwise(2, 8), Depthwise(3, 5), Depthwise(4, 4),
          # a work-group per block of rows, a work-item per column (ragged row blocks;
          # a group wider than the row: items past its end store nothing)
          Depthwise(3, 1, True), Depthwise(4, 1, True))


def _compile(model: onnx.ModelProto, params: KernelParams, tmp_path: Path
             ) -> tuple[dict[str, np.ndarray], object]:
    rng = np.random.default_rng(3)
    feeds = {i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim])
             .astype(np.float32) for i in model.graph.input}
    build(plan_memory(plan_fusion(static_graph(model, feeds))), tmp_path, params)
    return feeds, load(tmp_path)


@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("block", BLOCKS, ids=lambda b: f"{b.rows}x{b.width}" +
                         ("-lanes" if b.lanes else ""))
def test_depthwise_matches_onnxruntime(shape: str, block: Depthwise, tmp_path: Path) -> None:
    params = KernelParams(anchor_variant="depthwise", anchor_depthwise=block)
    feeds, compiled = _compile(SHAPES[shape], params, tmp_path)
    launches = compiled.plan["launches"]  # type: ignore[attr-defined]
    assert len(launches) == 1, "prologue and epilogue fuse into the anchor"
    assert launches[0]["variant"].startswith("depthwise ")
    assert_close(compiled.run(feeds), run_ort(SHAPES[shape], feeds),  # type: ignore[attr-defined]
                 rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("shape", ["3x3-s1-ragged", "5x5-s2"])
def test_gpu_form_matches_onnxruntime(shape: str, tmp_path: Path) -> None:
    """The GPU class's form (an accumulator array, the epilogue in a rolled loop), run
    on PoCL."""
    params = replace(KernelParams.for_device("gpu"), anchor_variant="depthwise",
                     anchor_depthwise=Depthwise(3, 5))
    feeds, compiled = _compile(SHAPES[shape], params, tmp_path)
    assert "acc[e]" in (tmp_path / "kernels.cl").read_text()
    assert_close(compiled.run(feeds), run_ort(SHAPES[shape], feeds),  # type: ignore[attr-defined]
                 rtol=1e-4, atol=1e-5)


def test_each_window_element_is_loaded_once(tmp_path: Path) -> None:
    """A 2 × 8 block of a 3×3 stride-1 conv loads its 4 × 10 window once each (the
    prologue's Relu once per load), not once per tap; on a CPU its 16 accumulators
    are scalars and its epilogue is unrolled (PoCL vectorises only loop-free items)."""
    params = KernelParams(anchor_variant="depthwise", anchor_depthwise=Depthwise(2, 8))
    _compile(_depthwise(1, 4, (16, 16), 3, 1, 1), params, tmp_path)
    source = (tmp_path / "kernels.cl").read_text()
    assert source.count("const float x") == 4 * 10
    assert len(re.findall(r"float acc\d+ = 0\.0f;", source)) == 2 * 8
    assert len(re.findall(r"acc\d+ \+= ", source)) == 2 * 8 * 9
    assert "for (int e" not in source and "acc[" not in source


def test_lanes_reads_consecutive_columns(tmp_path: Path) -> None:
    """The lanes form: a work-item is an output column (its local id), its group a
    block of rows, loads masked rather than clamped, the group a multiple of 8."""
    params = KernelParams(anchor_variant="depthwise", anchor_depthwise=Depthwise(4, 1, True))
    _compile(_depthwise(1, 4, (16, 13), 3, 1, 1), params, tmp_path)
    source = (tmp_path / "kernels.cl").read_text()
    assert "const int wt = get_local_id(0);" in source
    assert "reqd_work_group_size(16, 1, 1)" in source
    assert "cw0" not in source and "ch0" not in source


def test_cost_model_picks_depthwise_for_mobilenet_layers() -> None:
    """A MobileNet 3×3 depthwise layer: the specialised kernel on both device classes;
    a 1-D depthwise conv (``depthwise=False``) never gets it."""
    for device in ("cpu", "gpu"):
        options = cost.options(cost.DEVICES[device], 1, 56 * 56, 9, 144, 144 * 56 * 56 // 8,
                               False, None, depthwise=True)
        assert cost.choose(options).variant == "depthwise", device
    options = cost.options(cost.DEVICES["cpu"], 1, 56, 9, 144, 144 * 7, False, None)
    assert {o.variant for o in options} == {"direct"}


def test_cost_model_prices_lanes_on_cpu_only() -> None:
    """MobileNetV3's 5×5 depthwise layer at 14×14: on PoCL the lanes form (a 4×4
    register block spills there); the GPU class is not offered it."""
    cpu = cost.choose(cost.options(cost.DEVICES["cpu"], 1, 14 * 14, 25, 240, 240 * 14 * 2,
                                   False, None, depthwise=True, width=14))
    assert isinstance(cpu.params, Depthwise) and cpu.params.lanes
    gpu = cost.options(cost.DEVICES["gpu"], 1, 14 * 14, 25, 240, 240 * 14 * 2, False, None,
                       depthwise=True, width=14)
    assert not any(isinstance(o.params, Depthwise) and o.params.lanes for o in gpu)
