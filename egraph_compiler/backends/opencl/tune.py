"""``dnnr tune``: fill the profile database for the yellow cells of Table 3.3.

For every yellow case the planner meets in a model (a decision with verdict
``profile``, which names its database key and the edge it decided), time the two
operators of that edge on the device fused into one kernel and as two kernels.
Results go to a versioned JSON database keyed by operator combination and shape
class (`egraph_compiler.fusion.profile_db`); ``dnnr compile --profile-db FILE``
reads it back.

With ``kernel_budget`` > 0 it then searches every conv/matmul anchor's kernel
parameters (`kernel_search`: Chameleon beside random search, same budget) and adds
the best measured option per shape class to the database's ``kernels`` section,
keyed by the OpenCL device's name; it prints both searches' curves.
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from egraph_compiler.backends.opencl.build import build_artefact
from egraph_compiler.backends.opencl.cost import DEVICES, fusion_cost
from egraph_compiler.backends.opencl.kernel_search import record, search_model
from egraph_compiler.backends.opencl.kernels import KernelParams
from egraph_compiler.backends.opencl.planning import execution_plan
from egraph_compiler.backends.opencl.runtime import CompiledModel
from egraph_compiler.fusion import ProfileDb, plan_fusion
from egraph_compiler.fusion.view import GraphView
from egraph_compiler.ir.graph import Graph, Node, Value


def _pair_graph(graph: Graph, first: Node, second: Node) -> Graph:
    """A two-operator graph: ``first`` feeding ``second``, other inputs kept."""
    view = GraphView(graph)
    inputs = []
    for name in [*view.data_inputs(first), *view.data_inputs(second)]:
        if name in first.outputs or name in graph.constants or name in [v.name for v in inputs]:
            continue
        inputs.append(Value(name, graph.types[name]))
    out = second.outputs[0]
    return replace(graph, name=f"{first.op}_{second.op}", inputs=tuple(inputs),
                   outputs=(Value(out, graph.types[out]),), nodes=(first, second))


def _latency_us(graph: Graph, fuse: bool, work: Path, repeats: int, tables: Any,
                device: str | None) -> tuple[float, str]:
    """Best wall time of one run (µs) and the device's name."""
    plan, selection = execution_plan(graph, tables, fuse=fuse)
    artefact = build_artefact(plan, work, selection=selection)
    model = CompiledModel(artefact.out_dir, device)
    feeds = {v.name: np.ones([int(d) for d in v.type.shape or ()], v.type.dtype)
             for v in graph.inputs}
    model.run(feeds)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        model.run(feeds)
        best = min(best, time.perf_counter() - start)
    return best * 1e6, str(model.device.name)


def tune(graph: Graph, db_path: str | Path, repeats: int = 5, tables: Any = None,
         device: str | None = None, kernel_budget: int = 0, kernel_device: str = "cpu",
         report: Any = print) -> ProfileDb:
    """Time every yellow edge of ``graph`` both ways; merge into the database at
    ``db_path`` (created when missing; entries already there are kept). Then, with
    ``kernel_budget`` > 0, search each anchor shape class's kernel parameters with that
    many measurements per search (``kernel_device``: the class whose defaults start it)."""
    path = Path(db_path)
    db = ProfileDb.load(path) if path.exists() else ProfileDb()
    # the backend's own cost model: prologues into conv/matmul anchors are yellow too
    plan = plan_fusion(graph, tables, profile_db=None,
                       cost=fusion_cost(DEVICES[kernel_device]))
    graph = plan.graph
    entries = dict(db.entries)
    device_name = db.device
    with tempfile.TemporaryDirectory(prefix="dnnr-tune-") as tmp:
        for decision in plan.decisions:
            if decision.verdict != "profile" or decision.edge is None or decision.key in entries:
                continue
            first, second = (graph.nodes[n] for n in decision.edge)
            pair = _pair_graph(graph, first, second)
            work = Path(tmp) / f"pair{len(entries)}"
            fused_us, device_name = _latency_us(pair, True, work / "fused", repeats, tables, device)
            separate_us, _ = _latency_us(pair, False, work / "separate", repeats, tables, device)
            entries[decision.key] = {"fused_us": round(fused_us, 3),
                                     "separate_us": round(separate_us, 3)}
    result = ProfileDb(entries, device_name, db.kernels)
    if kernel_budget > 0:
        name, searches = search_model(graph, kernel_budget, KernelParams.for_device(kernel_device),
                                      tables, device, repeats=max(repeats, 3))
        if searches:
            report(f"kernel search on {name} ({kernel_budget} measurements per search):")
            for found in searches:
                report(found.summary())
                report("    best so far, chameleon: " +
                       " ".join(f"{t:.1f}" for t in found.chameleon.best_so_far()))
                report("    best so far, random:    " +
                       " ".join(f"{t:.1f}" for t in found.random.best_so_far()))
            result = record(replace(result, device=result.device or name), name, searches)
    result.save(path)
    return result
