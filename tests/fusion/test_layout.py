"""Reduction-dimension layout selection for intermediates (SmartMem §3.2.2): the cost model's
choice is recorded per tensor (the PoCL runs are in tests/backends/opencl/test_layouts.py)."""

from __future__ import annotations

import pytest

from egraph_compiler.fusion import plan_fusion
from egraph_compiler.fusion.layout import physical_strides
from tests.backends.opencl.helpers import static_graph
from tests.modelzoo import BLOCKS, channel_attention_block, random_inputs


def test_physical_strides() -> None:
    assert physical_strides((2, 3, 4), (0, 1, 2)) == {0: 12, 1: 4, 2: 1}
    assert physical_strides((2, 3, 4), (0, 2, 1)) == {0: 12, 2: 3, 1: 1}


def test_cost_model_stores_a_conv_output_channel_last_for_a_channel_reduction() -> None:
    model = channel_attention_block(channels=5, out_channels=48)
    plan = plan_fusion(static_graph(model, random_inputs(model, 1, dims={"batch": 2, "height": 7,
                                                                          "width": 9})))
    (choice,) = plan.layouts
    assert choice.perm == (0, 2, 3, 1), choice.reason
    assert "stored as [0, 2, 3, 1]" in choice.reason
    # fewer than 32 channels: one output per work-item, whose neighbours are already adjacent
    small = channel_attention_block(channels=5, out_channels=8)
    plan = plan_fusion(static_graph(small, random_inputs(small, 1, dims={"batch": 2, "height": 7,
                                                                          "width": 9})))
    assert [c.perm for c in plan.layouts] == [(0, 1, 2, 3)], plan.layouts


@pytest.mark.parametrize("name", ["mha", "transformer_encoder"])
def test_transformer_reductions_already_read_contiguously(name: str) -> None:
    """Softmax and LayerNorm reduce over the innermost axis: every decision keeps row-major."""
    model = BLOCKS[name]()
    plan = plan_fusion(static_graph(model, random_inputs(model, 0, dims={"batch": 2, "seq": 5})))
    assert plan.layouts, "the reduction inputs between blocks get a recorded decision"
    for choice in plan.layouts:
        assert choice.perm == tuple(range(len(choice.perm))), choice.reason
        assert "kept as is" in choice.reason
