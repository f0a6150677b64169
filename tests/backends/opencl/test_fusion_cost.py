"""Fusion that pays: the OpenCL backend prices every prologue it would fuse into a conv
or matmul by how often the kernel option it picks re-evaluates it (`cost.fusion_cost`),
so the planner fuses it only where that beats a separate launch — per device class —
and a profile-database entry overrides the model."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import helper

from egraph_compiler.backends.opencl import KernelParams, build, cost, load
from egraph_compiler.backends.opencl.planning import execution_plan
from egraph_compiler.fusion import ProfileDb, plan_fusion
from tests.backends.opencl.helpers import static_graph
from tests.backends.opencl.test_gemm import _model
from tests.modelzoo import assert_close, run_ort


def _relu_conv(cin: int, size: int, cout: int) -> onnx.ModelProto:
    rng = np.random.default_rng(cout)
    nodes = [helper.make_node("Relu", ["x"], ["xr"]),
             helper.make_node("Conv", ["xr", "W"], ["y"], kernel_shape=[3, 3], pads=[1] * 4)]
    weights = (rng.standard_normal((cout, cin, 3, 3)) * 0.1).astype(np.float32)
    return _model(nodes, {"x": [1, cin, size, size]}, [1, cout, size, size], {"W": weights})


def _blocks(model: onnx.ModelProto, device: str, db: ProfileDb | None = None
            ) -> tuple[list[tuple[str, ...]], list[str]]:
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    graph = static_graph(model, {"x": np.zeros(shape, np.float32)})
    plan, _ = execution_plan(graph, profile_db=db, params=KernelParams.for_device(device))
    reasons = [d.reason for d in plan.fusion.decisions if d.verdict == "profile"]
    return [tuple(b.ops) for b in plan.fusion.blocks], reasons


def test_a_prologue_the_direct_conv_re_evaluates_often_stays_apart_on_the_cpu() -> None:
    """Relu → 3×3 conv to 4096 channels over 64×28×28: PoCL's window kernel evaluates
    each Relu output once per 16-channel tile and window covering it (768 times), which
    costs more than a launch and a round trip; the GPU's tiled GEMM stages it once per
    tap and row tile, cheaper than the launch — fused there."""
    model = _relu_conv(64, 28, 4096)
    blocks, reasons = _blocks(model, "cpu")
    assert blocks == [("Relu",), ("Conv",)], blocks
    assert any("cost model says not profitable" in r for r in reasons), reasons
    blocks, reasons = _blocks(model, "gpu")
    assert blocks == [("Relu", "Conv")], blocks
    assert any("cost model says fuse" in r for r in reasons), reasons
    # a 2 × 4 block of 16 channels: a 4 × 6 window per 8 outputs
    assert cost.prologue_reuse(cost.DEVICES["cpu"], *_anchor(model)) == 4096 / 16 * 24 / 8
    assert cost.prologue_reuse(cost.DEVICES["gpu"], *_anchor(model)) == 9.0 * -(-4096 // _bm())


def _anchor(model: onnx.ModelProto):  # noqa: ANN202 - (GraphView, node index)
    from egraph_compiler.fusion.planner import fold_compile_time
    from egraph_compiler.fusion.view import GraphView

    graph = static_graph(model, {"x": np.zeros((1, 64, 28, 28), np.float32)})
    view = GraphView(fold_compile_time(graph))
    return view, next(k for k, n in enumerate(view.nodes) if n.op == "Conv")


def _bm() -> int:
    option = cost.choose(cost.options(cost.DEVICES["gpu"], 4096, 28 * 28, 64 * 9, 1,
                                      28 * 28 // 4 * 256, True, None))
    return option.params.bm  # type: ignore[union-attr]


def test_a_small_prologue_fuses_and_the_profile_db_overrides_the_model(tmp_path: Path) -> None:
    """A small Relu → conv fuses on the CPU (the launch dominates); with a profile entry
    measuring the pair faster, the same edge stays apart; both plans compute the model."""
    model = _relu_conv(8, 12, 16)
    blocks, _ = _blocks(model, "cpu")
    assert blocks == [("Relu", "Conv")]
    key = next(d.key for d in execution_plan(static_graph(model, {
        "x": np.zeros((1, 8, 12, 12), np.float32)}))[0].fusion.decisions
        if d.verdict == "profile")
    db = ProfileDb({key: {"fused_us": 20.0, "separate_us": 10.0}})
    blocks, reasons = _blocks(model, "cpu", db)
    assert blocks == [("Relu",), ("Conv",)] and any("profile db" in r for r in reasons)
    feeds = {"x": np.random.default_rng(1).standard_normal((1, 8, 12, 12)).astype(np.float32)}
    graph = static_graph(model, feeds)
    for profile in (None, db):
        plan, _ = execution_plan(graph, profile_db=profile)
        build(plan, tmp_path / str(profile is None), KernelParams())
        assert_close(load(tmp_path / str(profile is None)).run(feeds), run_ort(model, feeds),
                     rtol=1e-4, atol=1e-5)


def test_without_a_backend_cost_model_prologues_fuse_as_the_table_says() -> None:
    """`plan_fusion` without a backend's model keeps DNNFusion's green cell."""
    model = _relu_conv(64, 56, 256)
    graph = static_graph(model, {"x": np.zeros((1, 64, 56, 56), np.float32)})
    assert [tuple(b.ops) for b in plan_fusion(graph).blocks] == [("Relu", "Conv")]
