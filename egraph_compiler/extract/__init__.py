"""Stage `extract`: choose the cheapest program in a saturated e-graph.

Entry point: `extract(saturation, cost_model=...) -> Extraction`.

In: a `Saturation` from `egraph.saturate`. Out: an `Extraction` with ``graph``
(nodes in topological order, constant subterms folded, unused constants dropped,
graph input/output names preserved, kept nodes keep their names), ``cost`` (the
DAG cost of the chosen program: FLOPs and bytes, shared subterms counted once)
and ``provenance`` (node name -> names of the rules that produced it; empty for
nodes kept from the input graph).

Also `graph_cost(graph) -> Cost(flops, bytes)`, the same accounting (DNNFusion
Table 3.4) on any `Graph`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from egraph_compiler.egraph import Saturation
from egraph_compiler.extract.choose import DagImprover, fixpoint
from egraph_compiler.extract.cost import Cost, CostModel, graph_cost, op_cost
from egraph_compiler.extract.decode import decode
from egraph_compiler.extract.facts import complete_facts, list_items
from egraph_compiler.extract.view import EGraphView, ENode, read
from egraph_compiler.ir.errors import DnnrError
from egraph_compiler.ir.graph import Graph


@dataclass(frozen=True, slots=True)
class Extraction:
    graph: Graph
    cost: Cost
    provenance: dict[str, tuple[str, ...]]
    seconds: float = 0.0
    # False when the DAG-aware improvement pass ran out of its time budget
    # (`CostModel.improve_seconds`); the graph is valid, only possibly costlier
    improvement_complete: bool = True
    # rewritten node -> "name (Op)" of the original nodes of its e-class
    origins: dict[str, tuple[str, ...]] = field(default_factory=dict)


class ExtractionError(DnnrError):
    """No finite-cost program exists for an output (should not happen for a loaded graph)."""


def extract(saturation: Saturation, *, cost_model: CostModel | None = None) -> Extraction:
    """Extract the cheapest equivalent graph from ``saturation`` (see module doc)."""
    start = time.perf_counter()
    model = cost_model or CostModel()
    view = read(saturation)
    shapes, dtypes, constant = complete_facts(view, saturation)
    symbols = saturation.graph.symbols
    cache: dict[int, Cost] = {}

    def node_cost(node: ENode) -> Cost:
        if node.index in cache:
            return cache[node.index]
        if node.is_leaf_op or (node.children and all(c in constant for c in node.children)):
            cost = Cost(0.0, 0.0)
        else:
            schema = saturation.schemas[node.op]
            inputs = []
            for param, child in zip(schema.decl.params, node.children, strict=True):
                if param.variadic:
                    for item in list_items(view, child) or []:
                        inputs.append((shapes.get(item), dtypes.get(item)))
                elif view.classes.get(child) and view.classes[child][0].op == "Absent":
                    inputs.append(None)
                else:
                    inputs.append((shapes.get(child), dtypes.get(child)))
            output = (shapes.get(node.eclass), dtypes.get(node.eclass))
            cost = op_cost(node.op, view.attrs.get(node.index, {}), inputs, output, symbols, model.symbol_value)
        cache[node.index] = cost
        return cost

    def own(node: ENode) -> float:
        if node.is_leaf_op or (node.children and all(c in constant for c in node.children)):
            return 0.0
        return model.scalar(node_cost(node), node.op if node.op in saturation.schemas else None)

    original_ops = {(op, view.value_class.get(out0)) for op, out0, _ in saturation.signatures.values()}

    def prefer(node: ENode) -> int:
        return 0 if (node.op, node.eclass) in original_ops else 1

    tree_costs: dict[int, float] = {}
    choice = fixpoint(view, own, prefer, tree_costs)
    roots = []
    for name, handle in saturation.outputs.items():
        eclass = view.value_class.get(int(handle[3:-1]))
        if eclass is None or eclass not in choice:
            raise ExtractionError(f"graph output '{name}' has no finite-cost program in the e-graph")
        roots.append(eclass)
    free = {eclass for eclass, value in tree_costs.items() if value == 0.0}
    improver = DagImprover(view, choice, own, roots, free)
    complete = improver.improve(seconds=model.improve_seconds)
    graph, provenance, origins = decode(saturation, view, choice, shapes, dtypes)
    total = Cost(0.0, 0.0)
    for eclass, refs in improver.refs.items():
        if refs > 0:
            total = total + (Cost(0.0, 0.0) if own(choice[eclass]) == 0 else node_cost(choice[eclass]))
    return Extraction(graph, total, provenance, time.perf_counter() - start, complete, origins)


__all__ = ["Cost", "CostModel", "EGraphView", "Extraction", "ExtractionError", "extract", "graph_cost"]
