"""``dnnr tune``: fill the profile database for the yellow cells of Table 3.3.

For every yellow candidate the planner meets in a model (its decisions log has
verdict ``profile``), time the two alternatives on the device: the candidate
fused into the block, and the block and the candidate as two kernels. Results go
to a versioned JSON database keyed by operator combination and shape class
(`egraph_compiler.fusion.profile_db`).
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from egraph_compiler.backends.opencl.build import build_artefact
from egraph_compiler.backends.opencl.runtime import CompiledModel
from egraph_compiler.fusion import ProfileDb, plan_fusion
from egraph_compiler.fusion.profile_db import profile_key
from egraph_compiler.fusion.view import GraphView
from egraph_compiler.ir.graph import Graph, Node, Value
from egraph_compiler.plan import plan_memory


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


def _latency_us(graph: Graph, fuse: bool, work: Path, repeats: int) -> float:
    artefact = build_artefact(plan_memory(plan_fusion(graph, fuse=fuse)), work)
    model = CompiledModel(artefact.out_dir)
    feeds = {v.name: np.ones([int(d) for d in v.type.shape or ()], v.type.dtype)
             for v in graph.inputs}
    model.run(feeds)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        model.run(feeds)
        best = min(best, time.perf_counter() - start)
    return best * 1e6


def tune(graph: Graph, db_path: str | Path, repeats: int = 5) -> ProfileDb:
    """Time every yellow pair of ``graph`` both ways; merge into the database at ``db_path``."""
    path = Path(db_path)
    db = ProfileDb.load(path) if path.exists() else ProfileDb()
    plan = plan_fusion(graph, profile_db=None)
    graph = plan.graph
    view = GraphView(graph)
    entries = dict(db.entries)
    with tempfile.TemporaryDirectory(prefix="dnnr-tune-") as tmp:
        for decision in plan.decisions:
            if decision.verdict != "profile":
                continue
            candidate = int(decision.candidate.split(":")[1])
            users = view.successors(candidate)
            if not users:
                continue
            first, second = view.nodes[candidate], view.nodes[users[0]]
            key = profile_key(first.op, second.op, view.numel(first.outputs[0]))
            if key in entries:
                continue
            pair = _pair_graph(graph, first, second)
            entries[key] = {
                "fused_us": _latency_us(pair, True, Path(tmp) / f"{key}-f", repeats),
                "separate_us": _latency_us(pair, False, Path(tmp) / f"{key}-s", repeats),
            }
    result = ProfileDb(entries, db.device or "pocl")
    result.save(path)
    return result
