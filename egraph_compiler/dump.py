"""Readable text of each stage's output, for ``dnnr compile --dump-after STAGE``
(MLIR's ``--mlir-print-ir-after``) and ``--dump-egraph FILE`` (egglog's JSON
serialisation of the saturated e-graph).

Text only: nothing here is parsed back. Iteration orders are sorted so two dumps
of the same compile are byte-identical and can be diffed.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # the CLI reads STAGES for its --help: keep this module's import cheap
    from egraph_compiler.egraph import Saturation
    from egraph_compiler.fusion import FusionPlan
    from egraph_compiler.ir.graph import Graph, TensorType
    from egraph_compiler.plan import ExecutionPlan

STAGES = ("import", "shapes", "saturate", "extract", "fusion", "plan")
BACKEND_STAGES = ("fusion", "plan")  # only a target with a fusion planner has them (opencl)


@dataclass
class Dumps:
    """Which stages to print, and where: ``emit(stage, text)``."""

    after: frozenset[str] = frozenset()
    emit: Callable[[str, str], None] = lambda stage, text: None
    egraph_file: Path | None = None
    _done: set[str] = field(default_factory=set)

    def wants(self, stage: str) -> bool:
        return stage in self.after

    def write(self, stage: str, text: Callable[[], str]) -> None:
        if stage in self.after:
            self._done.add(stage)
            self.emit(stage, text())


def _type(t: TensorType | None) -> str:
    if t is None:
        return "?"
    if t.shape is None:
        return f"{t.dtype}[?]"
    return f"{t.dtype}[{', '.join(str(d) for d in t.shape)}]"


def _attr(value: object) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (tuple, list)):
        return "[" + ", ".join(_attr(v) for v in value) + "]"
    if hasattr(value, "to_numpy"):
        array = np.asarray(value.to_numpy())  # type: ignore[attr-defined]
        return f"tensor<{array.dtype}{list(array.shape)}>"
    return repr(value) if isinstance(value, str) else str(value)


def graph_text(graph: Graph) -> str:
    """One line per input, constant, node and output; node lines read
    ``outputs = Op(inputs) {attrs}  # name``, each value with its type."""
    types = graph.types
    lines = [f"graph {graph.name} (opset {graph.opset})"]
    for value in graph.inputs:
        lines.append(f"  input  {value.name}: {_type(value.type)}")
    for name in sorted(graph.constants):
        array = np.asarray(graph.constants[name])
        lines.append(f"  const  {name}: {array.dtype}{list(array.shape)}")
    for node in graph.nodes:
        outs = ", ".join(f"{o}: {_type(types.get(o))}" if o else "_" for o in node.outputs)
        attrs = " {" + ", ".join(f"{k}={_attr(v)}" for k, v in node.attrs) + "}" if node.attrs else ""
        lines.append(f"  {outs} = {node.op}({', '.join(i or '_' for i in node.inputs)}){attrs}  # {node.name}")
    for value in graph.outputs:
        lines.append(f"  output {value.name}: {_type(value.type)}")
    return "\n".join(lines)


def egraph_text(saturation: Saturation) -> str:
    """Every e-class with its e-nodes (``cN``: e-class N), shape, dtype and the
    rules whose right-hand sides were added to it; then the saturation statistics."""
    from egraph_compiler.extract.view import read as read_egraph

    view = read_egraph(saturation)
    names = {cls: name for name, handle in saturation.outputs.items()
             if (cls := view.value_class.get(int(handle[3:-1]))) is not None}
    lines = [f"e-graph of {saturation.graph.name}: {len(view.classes)} e-classes, {len(view.nodes)} e-nodes"]
    for eclass in sorted(view.classes):
        shape = view.shape.get(eclass)
        header = f"  c{eclass}"
        if eclass in view.dtype or shape is not None:
            dims = "?" if shape is None else ", ".join(str(d) for d in shape)
            header += f" {view.dtype.get(eclass, '?')}[{dims}]"
        if eclass in names:
            header += f"  (output {names[eclass]})"
        if view.provenance.get(eclass):
            header += "  # by " + ", ".join(view.provenance[eclass])
        lines.append(header)
        for node in view.classes[eclass]:
            args = [f"c{c}" for c in node.children]
            attrs = view.attrs.get(node.index)
            if attrs:
                args += [f"{k}={_attr(v)}" for k, v in sorted(attrs.items())]
            elif node.prims:
                args += [_attr(p) for p in node.prims]
            lines.append(f"    {node.op}({', '.join(args)})")
    lines.append("  " + saturation.stats.describe())
    return "\n".join(lines)


def write_egraph_json(saturation: Saturation, path: Path) -> None:
    """egglog's own serialisation (nodes, e-classes, children) as JSON."""
    serialized = saturation.egraph.serialize([])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(json.loads(serialized.to_json()), indent=1, sort_keys=True) + "\n")


def fusion_text(plan: FusionPlan) -> str:
    """One paragraph per fusion block (one kernel): kind, mapping, member nodes."""
    nodes = plan.graph.nodes
    lines = [f"fusion plan: {len(plan.blocks)} block(s) for {len(nodes)} node(s)"]
    for block in plan.blocks:
        members = ", ".join(f"{nodes[i].name or nodes[i].op}:{nodes[i].op}" for i in block.nodes)
        lines.append(f"  block {block.id} [{block.kind}, {block.mapping}] iterates {list(block.iteration_shape)}")
        lines.append(f"    nodes   {members}")
        lines.append(f"    reads   {', '.join(block.inputs)}")
        lines.append(f"    writes  {', '.join(block.outputs)}")
        for value, perm in block.layouts:
            lines.append(f"    layout  {value} stored in dim order {list(perm)}")
    for decision in plan.decisions:
        lines.append(f"  decision block {decision.block} + {decision.candidate}: {decision.verdict} ({decision.reason})")
    return "\n".join(lines)


def plan_text(plan: ExecutionPlan) -> str:
    """Launch order and arena offsets."""
    lines = [f"execution plan: arena {plan.arena_bytes} bytes (one buffer per tensor: {plan.naive_bytes}, "
             f"lower bound {plan.lower_bound_bytes})",
             "  launch order: " + " ".join(f"block{b}" for b in plan.order)]
    for value in sorted(plan.offsets, key=lambda v: (plan.offsets[v], v)):
        lines.append(f"  {value}: offset {plan.offsets[value]}, {plan.sizes.get(value, 0)} bytes")
    return "\n".join(lines)
