"""Fusion that pays, for broadcasts: a consumer that reads a pointwise block's value
broadcast re-evaluates the block once per element of its own (`fusion.recompute`), so
the CPU class fuses it only where those evaluations cost less than the launch and
round trip they save; the GPU class (unpriced) and the plain planner keep Table 3.3's
green verdict. BERT-tiny's attention mask was the case (see `cost.fusion_cost`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

from egraph_compiler.backends.opencl import KernelParams, build, load
from egraph_compiler.backends.opencl.planning import execution_plan
from egraph_compiler.fusion import ProfileDb, plan_fusion
from tests.backends.opencl.helpers import static_graph
from tests.modelzoo import assert_close, run_ort


def _mask_then_add(heads: int) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """A two-operator chain over 64×64 (the "mask") added to a heads×64×64 score."""
    nodes = [helper.make_node("Sigmoid", ["m"], ["s"]), helper.make_node("Tanh", ["s"], ["t"]),
             helper.make_node("Add", ["x", "t"], ["y"])]
    shape = [1, heads, 64, 64]
    graph = helper.make_graph(
        nodes, "mask_add",
        [helper.make_tensor_value_info("m", TensorProto.FLOAT, [1, 1, 64, 64]),
         helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    rng = np.random.default_rng(heads)
    feeds = {"m": rng.standard_normal((1, 1, 64, 64)).astype(np.float32),
             "x": rng.standard_normal(shape).astype(np.float32)}
    return model, feeds


def _plan(model: onnx.ModelProto, feeds: dict[str, np.ndarray], device: str,
          db: ProfileDb | None = None):  # noqa: ANN202 - (ExecutionPlan, blocks, reasons)
    plan, _ = execution_plan(static_graph(model, feeds), profile_db=db,
                             params=KernelParams.for_device(device))
    reasons = [d.reason for d in plan.fusion.decisions if d.verdict == "profile"]
    return plan, sorted(tuple(b.ops) for b in plan.fusion.blocks), reasons


def test_a_wide_broadcast_keeps_the_chain_apart_on_the_cpu_and_computes_the_model(
        tmp_path: Path) -> None:
    """16 heads: the Add would evaluate Sigmoid and Tanh 16× (122,880 extra) — more than
    the CPU's launch and round trip; apart there (also not merged back as a pointwise
    block read by one block), fused on the GPU class and by the plain planner. Both
    plans compute what onnxruntime does."""
    model, feeds = _mask_then_add(16)
    plan, blocks, reasons = _plan(model, feeds, "cpu")
    assert blocks == [("Add",), ("Sigmoid", "Tanh")], blocks
    assert any("122880 re-evaluations) says not profitable" in r for r in reasons), reasons
    gpu_plan, gpu_blocks, _ = _plan(model, feeds, "gpu")
    assert gpu_blocks == [("Sigmoid", "Tanh", "Add")], gpu_blocks
    graph = static_graph(model, feeds)
    assert [tuple(b.ops) for b in plan_fusion(graph).blocks] == [("Sigmoid", "Tanh", "Add")]
    for name, (execution, device) in {"cpu": (plan, "cpu"), "gpu": (gpu_plan, "gpu")}.items():
        build(execution, tmp_path / name, KernelParams.for_device(device))
        assert_close(load(tmp_path / name).run(feeds), run_ort(model, feeds))


def test_a_narrow_broadcast_still_fuses_on_the_cpu() -> None:
    """2 heads: 2 × (8,192 − 4,096) extra evaluations cost less than a launch — one kernel."""
    model, feeds = _mask_then_add(2)
    _, blocks, reasons = _plan(model, feeds, "cpu")
    assert blocks == [("Sigmoid", "Tanh", "Add")], blocks
    assert any("(8192 re-evaluations) says fuse" in r for r in reasons), reasons


def test_a_profile_entry_overrides_the_broadcast_price() -> None:
    """A measurement saying the fused kernel is faster wins over the model."""
    model, feeds = _mask_then_add(16)
    plan, _, _ = _plan(model, feeds, "cpu")
    key = next(d.key for d in plan.fusion.decisions if d.verdict == "profile" and d.key)
    db = ProfileDb({key: {"fused_us": 5.0, "separate_us": 50.0}})
    _, blocks, reasons = _plan(model, feeds, "cpu", db)
    assert blocks == [("Sigmoid", "Tanh", "Add")], blocks
    assert any("profile db says fuse" in r for r in reasons), reasons
