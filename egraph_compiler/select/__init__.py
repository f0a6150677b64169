"""The select stage: a PBQP over implementation × layout, solved exactly (seed 000 §4.4).

`solve(problem, time_limit=1.0) -> Selection` is the one entry point: plain data in
(`Problem`: one `Node` per fusion block / anchor operator whose options are
implementation × layout with their costs, one `Edge` per producer→consumer tensor with
its conversion-cost matrix), plain data out (`Selection`: the pick per node, eq. 4.1's
objective, a lower bound and the gap, the local and chain-DP objectives for
comparison, the solver that finished and the seconds). The backends build the
problem from their own cost models (OpenCL: dimension order of intermediates;
Hexagon: HVX instruction family × 1/2/4-column panel layouts) and apply the picks;
`select_layouts(fusion_plan)` is the OpenCL one (the dimension order of every
intermediate), between fusion and plan. `symbolic.dominance` compares option costs
over symbolic dims with the shapes prover (a block without a dominating option is a
multi-version candidate).
"""

from __future__ import annotations

from egraph_compiler.select.baselines import chain_dp_picks, chains, local_picks
from egraph_compiler.select.layouts import layout_problem, select_layouts
from egraph_compiler.select.problem import (
    INFEASIBLE,
    Edge,
    Node,
    Problem,
    SelectError,
    Selection,
    edge,
    node,
)
from egraph_compiler.select.solver import solve

__all__ = ["INFEASIBLE", "Edge", "Node", "Problem", "SelectError", "Selection", "chain_dp_picks",
           "chains",
           "edge", "layout_problem", "local_picks", "node", "select_layouts", "solve"]
