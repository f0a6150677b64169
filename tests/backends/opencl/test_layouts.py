"""Intermediates stored in the layout the cost model chose (SmartMem §3.2.2) run on PoCL like
the row-major plan and onnxruntime, and plan.json records the choice."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from egraph_compiler.backends.opencl import build, load
from egraph_compiler.fusion import plan_fusion
from egraph_compiler.plan import plan_memory
from tests.backends.opencl.helpers import static_graph, with_static_inputs
from tests.modelzoo import assert_close, channel_attention_block, random_inputs, run_ort


def test_channel_reduction_of_a_conv_output_is_stored_channel_last(tmp_path: Path) -> None:
    model = channel_attention_block(channels=5, out_channels=48)
    feeds = random_inputs(model, 1, dims={"batch": 2, "height": 7, "width": 9})
    model = with_static_inputs(model, feeds)
    graph = static_graph(model, feeds)
    expected = run_ort(model, feeds)
    chosen = plan_fusion(graph)
    (choice,) = chosen.layouts
    assert choice.perm == (0, 2, 3, 1), choice.reason  # channels innermost for the reduction
    assert "stored as [0, 2, 3, 1]" in choice.reason
    results = {}
    for label, plan in (("chosen", chosen), ("row-major", plan_fusion(graph, layouts=False))):
        artefact = build(plan_memory(plan), tmp_path / label)
        assert artefact.layouts == {c.value: c.reason for c in plan.layouts}  # the report
        doc = json.loads((tmp_path / label / "plan.json").read_text())
        recorded = {v: p for b in doc["blocks"] for v, p in b.get("layouts", {}).items()}
        assert recorded == ({choice.value: list(choice.perm)} if label == "chosen" else {})
        results[label] = load(tmp_path / label).run(feeds)
        assert_close(results[label], expected, rtol=1e-3, atol=1e-4)
    for name, value in results["chosen"].items():
        np.testing.assert_allclose(value, results["row-major"][name], rtol=1e-5, atol=1e-6)
