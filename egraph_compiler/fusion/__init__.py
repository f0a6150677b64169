"""The fusion stage: an optimised `Graph` (shapes inferred) in, a `FusionPlan` out.

`plan_fusion(graph, tables, profile_db=None, fuse=True)` folds compile-time
computations, then groups operators into fusion blocks with DNNFusion's Listing
3.1 (seeds, successor and predecessor exploration, fusion table verdicts, a
constraint check, profile database or cost model for yellow cases), merges
reductions over the same rows into one row-group block (`structure`), and picks
the dimension order of intermediates that reductions read (`layout`). Each
`Block` knows its mapping type, member nodes, anchor, kernel kind and the index
map of every value it stores. A backend's cost model may also let a row kernel store
its input (a pre-LN residual sum), leave broadcast consumers to a MatMul's epilogue
(`epilogues`) and split a Split into Slices its readers fuse (`splits`). ``tables`` is a `FusionTables` (or a dsl
`RuleSet`, read through `FusionTables.from_ruleset`; None: the shipped rule
library's tables, `FusionTables.shipped`); ``fuse=False`` gives one
block per operator (the "OurB" baseline).
"""

from __future__ import annotations

from typing import Any

from egraph_compiler.fusion.blocks import Block, Decision, FusionPlan
from egraph_compiler.fusion.layout import LayoutChoice, TensorLayoutOptions, layout_options
from egraph_compiler.fusion.planner import block_structures, plan_blocks, relayout
from egraph_compiler.fusion.profile_db import CostModel, ProfileDb
from egraph_compiler.fusion.tables import FusionTables
from egraph_compiler.ir.graph import Graph


def plan_fusion(graph: Graph, tables: Any = None, profile_db: ProfileDb | None = None,
                fuse: bool = True, layouts: bool = True,
                cost: CostModel | None = None) -> FusionPlan:
    """Group ``graph``'s operators into fusion blocks (see the module docstring);
    ``layouts=False`` stores every intermediate row-major (no `fusion.layout` choice);
    ``cost``: the yellow cells' cost model (a backend's, for its device)."""
    if tables is None:
        tables = FusionTables.shipped()
    elif not isinstance(tables, FusionTables):
        tables = FusionTables.from_ruleset(tables)
    return plan_blocks(graph, tables, profile_db, cost or CostModel(), fuse, layouts)


__all__ = ["Block", "CostModel", "Decision", "FusionPlan", "FusionTables", "LayoutChoice",
           "ProfileDb", "TensorLayoutOptions", "block_structures", "layout_options", "plan_fusion",
           "relayout"]
