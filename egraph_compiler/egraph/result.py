"""Data-only results of saturation: the e-graph handle, tables and statistics."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from egraph_compiler.dsl.ast import Limits, RuleSet
from egraph_compiler.egraph.schema import OpSchema
from egraph_compiler.egraph.tables import Tables
from egraph_compiler.ir.graph import Graph

StopReason = str  # "saturated" | "schedule-done" | "limit:nodes" | "limit:iterations" | "limit:seconds"


@dataclass(frozen=True, slots=True)
class IterationStats:
    ruleset: str  # the rulesets run in this iteration, comma-separated
    e_nodes: int
    # None above `saturate.COUNT_CLASSES_UP_TO` e-nodes: counting needs a `freeze()`
    e_classes: int | None
    seconds: float


@dataclass(frozen=True, slots=True)
class SaturationStats:
    iterations: tuple[IterationStats, ...]
    rule_matches: dict[str, int]  # LHS matches per DSL rule name (guard not yet checked)
    rule_fires: dict[str, int]  # matches whose guard held and whose RHS was added
    seconds: float  # total, load included
    load_seconds: float
    stop_reason: StopReason
    limit: int | float | None  # the value of the limit that stopped the run, if one did
    e_nodes: int
    e_classes: int = 0  # at the end of the run
    limits: Limits = Limits()
    # distinct e-classes each rule rewrote (egglog re-matches a site in later
    # iterations; `rule_fires` counts every such re-match)
    rule_sites: dict[str, int] = field(default_factory=dict)
    # rules in the order they first fired (within one iteration: egglog's report order)
    fire_order: tuple[str, ...] = ()

    def describe(self) -> str:
        """One line for reports; names the limit when one stopped the run."""
        why = self.stop_reason
        if why.startswith("limit:"):
            why = f"stopped by the {why[6:]} limit ({self.limit})"
            if why.startswith("stopped by the nodes") and self.limit is not None and self.e_nodes <= self.limit:
                why += ", before an iteration that would have overshot it"
        return (
            f"{len(self.iterations)} iteration(s), {self.e_nodes} e-nodes, {self.e_classes} e-classes, "
            f"{self.seconds:.2f} s: {why}"
        )


@dataclass
class Saturation:
    """A saturated e-graph and what extraction needs to read it back.

    ``outputs`` maps each graph output name to the egglog term of its e-class
    handle (``(V id)``); ``value_ids`` maps every graph value name to its id.
    """

    egraph: Any  # egglog.bindings.EGraph
    graph: Graph
    rules: RuleSet
    schemas: dict[str, OpSchema]
    tables: Tables
    value_ids: dict[str, int]
    outputs: dict[str, str]
    stats: SaturationStats
    # node label -> (op, output-0 id, input cells): how extraction recognises kept nodes
    signatures: dict[str, tuple[str, int, tuple[int, ...]]] = field(default_factory=dict)
