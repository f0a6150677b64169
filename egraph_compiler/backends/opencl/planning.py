"""Fusion → select → plan for the OpenCL backend: the one place that chains them, so
`compile_graph`, `dnnr bench` and `dnnr tune` build the same artefact."""

from __future__ import annotations

from egraph_compiler import shapes
from egraph_compiler.backends.opencl.cost import DEVICES, fusion_cost
from egraph_compiler.backends.opencl.kernels import KernelParams
from egraph_compiler.backends.opencl.pricing import pricing, symbolic_anchors
from egraph_compiler.fusion import ProfileDb, plan_fusion
from egraph_compiler.ir.decompose import decompose
from egraph_compiler.ir.graph import Graph
from egraph_compiler.plan import ExecutionPlan, plan_memory
from egraph_compiler.select import Selection, select_layouts

LAYOUT_POLICIES = ("pbqp", "local", "chain-dp", "per-tensor", "row-major", "nchwc", "images")


def with_kernels(graph: Graph) -> Graph:
    """``graph`` with the operators the backend has no kernel for (RNN, DFT, ...) lowered to
    ones it has (`ir.decompose`), shapes inferred again; ``graph`` itself when it has none."""
    lowered = decompose(graph)
    return graph if lowered is None else shapes.infer_shapes(lowered)


def execution_plan(graph: Graph, tables: object = None, profile_db: ProfileDb | None = None,
                   fuse: bool = True, layouts: str = "pbqp", params: KernelParams | None = None,
                   symbolic: Graph | None = None) -> tuple[ExecutionPlan, Selection | None]:
    """``layouts``: "pbqp" (the `select` stage decides every anchor's kernel variant and
    every intermediate's dimension order together, inserting conversion kernels where a
    consumer cannot read the chosen order), its baselines "local" / "chain-dp",
    "per-tensor" (fusion's SmartMem rule alone) or "row-major" (the last two leave each
    anchor's variant to the cost model at code generation); "nchwc" / "images" are "pbqp"
    with every conv that has a blocked NCHWc kernel forced onto it, reading its input from
    a buffer / an RGBA image2d_t (`backends.opencl.blocked`). ``params``: the device class
    and tuning database the options are priced with — pass the same to `build`.
    ``symbolic``: ``graph`` before its symbolic dims were bound, with the declared ranges:
    each anchor whose implementations' costs depend on them gets a verdict (one
    implementation cheapest over the whole range, or a multi-version candidate). The device
    class of ``params`` also prices the prologues fusion may fuse (`cost.fusion_cost`)."""
    if layouts not in LAYOUT_POLICIES:
        raise ValueError(f"layouts must be one of {', '.join(LAYOUT_POLICIES)}, not {layouts!r}")
    device = (params or KernelParams()).device
    graph = with_kernels(graph)
    fusion_plan = plan_fusion(graph, tables, profile_db, fuse=fuse, layouts=layouts == "per-tensor",
                              cost=fusion_cost(DEVICES[device]))
    selection = None
    if layouts in ("pbqp", "local", "chain-dp", "nchwc", "images"):
        params = params or KernelParams()
        forced = layouts in ("nchwc", "images")
        fusion_plan, selection = select_layouts(
            fusion_plan, policy="pbqp" if forced else layouts,
            pricing=pricing(fusion_plan, params, force=layouts if forced else ""))
        if symbolic is not None and symbolic.symbols:
            names = {int(n.name.split(":")[0].removeprefix("block")): n.name
                     for n in selection.problem.nodes}
            selection = selection.with_symbolic(
                symbolic_anchors(fusion_plan, params, symbolic, names), symbolic.symbols)
    return plan_memory(fusion_plan), selection
