"""Execution order and arena planning: valid order, no overlapping live tensors,
arena between the max-live lower bound and one buffer per tensor."""

from __future__ import annotations

import pytest

from egraph_compiler.fusion import plan_fusion
from egraph_compiler.plan import plan_memory
from tests.backends.opencl.helpers import static_graph
from tests.modelzoo import BLOCKS, light_model, random_inputs

DIMS = {"batch": 2, "height": 7, "width": 7, "seq": 5}


def _plan(name: str, fuse: bool = True):  # noqa: ANN202
    model = BLOCKS[name]() if name in BLOCKS else light_model(name)
    return plan_memory(plan_fusion(static_graph(model, random_inputs(model, 0, dims=DIMS)),
                                   fuse=fuse))


@pytest.mark.parametrize(("name", "fuse"), [("transformer_encoder", True),
                                            ("transformer_encoder", False),
                                            ("residual", False), ("squeezenet", True),
                                            ("inception_v1", True)])
def test_arena_is_valid_and_bounded(name: str, fuse: bool) -> None:
    plan = plan_memory(plan_fusion(_plan(name, fuse).fusion.graph, fuse=fuse))
    blocks = {b.id: b for b in plan.fusion.blocks}
    assert sorted(plan.order) == sorted(blocks)
    produced_at = {}
    for step, block_id in enumerate(plan.order):  # producers before consumers
        for value in blocks[block_id].inputs:
            if value in produced_at:
                assert produced_at[value] < step
        for value in blocks[block_id].outputs:
            produced_at[value] = step
    last_use = {v: produced_at[v] for v in plan.offsets}
    for step, block_id in enumerate(plan.order):
        for value in blocks[block_id].inputs:
            if value in last_use:
                last_use[value] = max(last_use[value], step)
    values = sorted(plan.offsets)
    for i, a in enumerate(values):  # tensors live at the same time never overlap
        for b in values[i + 1:]:
            overlap_time = not (last_use[a] < produced_at[b] or last_use[b] < produced_at[a])
            overlap_space = not (plan.offsets[a] + plan.sizes[a] <= plan.offsets[b] or
                                 plan.offsets[b] + plan.sizes[b] <= plan.offsets[a])
            assert not (overlap_time and overlap_space), (a, b)
    assert plan.lower_bound_bytes <= plan.arena_bytes <= plan.naive_bytes
    print(f"{name} fuse={fuse}: arena {plan.arena_bytes} B, naive {plan.naive_bytes} B, "
          f"lower bound {plan.lower_bound_bytes} B")
    if fuse is False:
        assert plan.arena_bytes < plan.naive_bytes
