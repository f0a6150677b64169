"""The OpenCL backend: an `ExecutionPlan` in, an artefact directory out; and its runner.

- `build(execution_plan, out_dir, params=None) -> Artefact` writes ``kernels.cl``
  (one kernel per distinct fusion block; identical blocks share a kernel),
  ``plan.json`` (tensors, arena offsets, launches in order) and the weights.
- `load(out_dir, device=None) -> CompiledModel`; ``CompiledModel.run(inputs)``
  returns the outputs by name. The default device is PoCL's; ``device`` picks any
  platform or device whose name contains the string.
- `compile_graph(graph, out_dir, fuse=True)`: fusion → select → plan → build in one call
  (for tests and the benchmark; the pipeline calls the stages itself). A graph whose
  sizes depend on input values is kept and compiled at run time (`specialise`).
"""

from __future__ import annotations

from pathlib import Path

from egraph_compiler.backends.opencl.build import Artefact, build_artefact
from egraph_compiler.backends.opencl.kernels import KernelParams
from egraph_compiler.backends.opencl.planning import execution_plan
from egraph_compiler.backends.opencl.runtime import CompiledModel, OpenClError, plan_version
from egraph_compiler.backends.opencl.segmented import data_dependent
from egraph_compiler.backends.opencl.specialise import (
    SPECIALISE_PLAN_VERSION,
    SpecialisingModel,
    value_inputs,
    write_deferred,
)
from egraph_compiler.fusion import ProfileDb
from egraph_compiler.ir.graph import Graph
from egraph_compiler.plan import ExecutionPlan
from egraph_compiler.select import Selection


def build(execution_plan: ExecutionPlan, out_dir: str | Path,
          params: KernelParams | None = None, selection: Selection | None = None) -> Artefact:
    """Write the artefact of ``execution_plan`` into ``out_dir`` (``selection``: the
    layout PBQP that decided its intermediates' orders, recorded in plan.json)."""
    return build_artefact(execution_plan, out_dir, params, selection)


def load(out_dir: str | Path, device: str | None = None,
         images: bool | None = None) -> CompiledModel | SpecialisingModel:
    """Load an artefact written by `build` onto an OpenCL device (PoCL by default);
    ``images=False`` runs its image2d_t tensors as buffers (see `images`). An artefact
    whose sizes depend on input values (`specialise`) compiles at its first run."""
    if plan_version(out_dir) == SPECIALISE_PLAN_VERSION:
        return SpecialisingModel(out_dir, device, images)
    return CompiledModel(out_dir, device, images)


def compile_graph(graph: Graph, out_dir: str | Path, fuse: bool = True, tables: object = None,
                  profile_db: ProfileDb | None = None, layouts: str = "pbqp",
                  params: KernelParams | None = None, symbolic: Graph | None = None) -> Artefact:
    """``layouts``: see `planning.execution_plan` (default: the `select` stage's PBQP);
    ``params``: kernel sizes and the device class anchors are chosen for; ``symbolic``:
    ``graph`` before binding, for the multi-version analysis (`execution_plan`)."""
    needed = value_inputs(graph)
    if needed or data_dependent(graph):  # sizes decided at run time: kernels generated then
        return write_deferred(graph, out_dir, needed, tables, profile_db, fuse, layouts, params)
    plan, selection = execution_plan(graph, tables, profile_db, fuse, layouts, params, symbolic)
    return build(plan, out_dir, params, selection=selection)


__all__ = ["Artefact", "CompiledModel", "KernelParams", "OpenClError", "SpecialisingModel", "build",
           "compile_graph", "load"]
