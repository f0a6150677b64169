"""The plan stage: a `FusionPlan` in, an `ExecutionPlan` out.

`plan_memory(fusion_plan)` chooses the launch order of the blocks (SERENITY-style
DP on small regions between cut points, a greedy list schedule elsewhere) and
places every intermediate tensor in ONE arena (greedy by size, best of several
orderings), reporting the arena size, the naive size (a buffer per tensor) and
the max-live lower bound.
"""

from __future__ import annotations

from egraph_compiler.fusion.blocks import FusionPlan
from egraph_compiler.plan.memory import ExecutionPlan, plan_arena


def plan_memory(fusion_plan: FusionPlan) -> ExecutionPlan:
    """Execution order and arena offsets for ``fusion_plan`` (see module docstring)."""
    return plan_arena(fusion_plan)


__all__ = ["ExecutionPlan", "plan_memory"]
