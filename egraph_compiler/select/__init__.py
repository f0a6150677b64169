"""The select stage: a PBQP over implementation × layout, solved exactly (seed 000 §4.4).

`solve(problem, time_limit=1.0) -> Selection` is the one entry point: plain data in
(`Problem`: one `Node` per fusion block / anchor operator whose options are
implementation × layout with their costs, one `Edge` per producer→consumer tensor with
its conversion-cost matrix), plain data out (`Selection`: the pick per node, eq. 4.1's
objective, a lower bound and the gap, the local and chain-DP objectives for
comparison, the solver that finished and the seconds). The backends build the
problem from their own cost models (OpenCL: anchor kernel variant × constants as
buffers or image2d_t × dimension order of intermediates, with conversion kernels;
Hexagon: HVX instruction family × 1/2/4-column panel layouts) and apply the picks;
`select_layouts(fusion_plan, pricing=…)` is the OpenCL one, between fusion and plan
(it inserts the conversion blocks, `conversions`). `Selection.with_symbolic` compares
option costs over symbolic dims (`symbolic`: Z3 through the shapes prover, or every
assignment of the declared ranges): a block without a dominating option is a
multi-version candidate, listed as plain data in the report's ``multi_version``.
"""

from __future__ import annotations

from egraph_compiler.select.baselines import chain_dp_picks, chains, local_picks
from egraph_compiler.select.layouts import Pricing, layout_problem, select_layouts
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

__all__ = ["INFEASIBLE", "Edge", "Node", "Pricing", "Problem", "SelectError", "Selection", "chain_dp_picks",
           "chains",
           "edge", "layout_problem", "local_picks", "node", "select_layouts", "solve"]
