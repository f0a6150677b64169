"""Segmented execution: OpenCL for graphs with operators whose output SIZE depends on
their data (``execution_determined``: NonZero, Compress, Unique, NonMaxSuppression).

No size of such an output is known before the run, and dnnr generates kernels for
known sizes, so the artefact is cut at each such node (SoD²'s execution-determined
class; TVM Relax and onnxruntime size such outputs at run time too):

1. the device runs the segment that computes the node's operands (every node they
   depend on, compiled as a static graph), its outputs left in device buffers;
2. the node itself runs (`ops_data_dependent`): NonZero and Compress on the device,
   where the host reads back only the count that sizes the output; Unique and
   NonMaxSuppression select on the host from their read-back operands;
3. with that size known, the rest of the graph has static shapes again: the next
   cut, or the final segment, is compiled for it and run on the device, reading the
   earlier segments' outputs in place (`runtime.DeviceTensor`, one shared context).

Each segment is compiled with the artefact's options at the first run that reaches it
with its sizes, and kept in memory keyed by the input shapes, the value inputs' values
and the sizes every earlier cut produced (`SEGMENT_LIMIT` of them; not on disk: a size
read from data rarely repeats across processes the way a value input's does).
"""

from __future__ import annotations

import dataclasses
import hashlib
import shutil
import tempfile
import time
from collections import OrderedDict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from egraph_compiler.backends.opencl.ops_data_dependent import IMPLEMENTATIONS, ON_HOST, DeviceOps
from egraph_compiler.backends.opencl.runtime import CompiledModel, DeviceTensor, Tensor, _device
from egraph_compiler.ir.errors import DnnrError
from egraph_compiler.ir.graph import Graph, Node, TensorType, Value

EXECUTION_DETERMINED = "execution_determined"  # the rule files' dynamism class
SEGMENT_LIMIT = 64  # compiled segments kept per model (each sized by earlier cuts' counts)


def _builtin(op: str) -> tuple[str | None, str | None]:
    """The operator's dynamism class and ``= builtin NAME`` (registry facts)."""
    from egraph_compiler.ops import current

    info = current().get(op)
    if info is None:
        return None, None
    return str(info.decl.dynamism), info.decl.builtin


def data_dependent(graph: Graph) -> dict[str, str]:
    """The nodes of ``graph`` whose output sizes come from their data, by name, each
    with where its selection runs ("device" or "host"); a clear error names one that
    has no implementation."""
    found: dict[str, str] = {}
    for node in graph.nodes:
        dynamism, builtin = _builtin(node.op)
        if dynamism != EXECUTION_DETERMINED:
            continue
        if builtin not in IMPLEMENTATIONS:
            raise DnnrError(f"error: node '{node.name}' ({node.op}) has an output whose size depends "
                            "on its data, and the OpenCL backend has no implementation of it\n"
                            "  hint: compile for the onnx target")
        found[node.name] = f"{node.op} ({'host' if builtin in ON_HOST else 'device'})"
    return found


@dataclasses.dataclass
class _Step:
    """One segment and the cut after it (None: the final segment)."""

    model: CompiledModel | None
    reads: tuple[str, ...]  # the known values the segment's model takes
    prefix: frozenset[int]  # positions of the graph's nodes the segment computes
    cut: Node | None


def _type_of(tensor: Tensor) -> TensorType:
    if isinstance(tensor, DeviceTensor):
        return TensorType(str(tensor.dtype), tuple(tensor.shape))
    array = np.asarray(tensor)
    return TensorType(str(array.dtype), tuple(int(d) for d in array.shape))


class SegmentedRun:
    """The run-time half of a segmented artefact, for a `SpecialisingModel` whose plan
    names data-dependent nodes: `run` cuts, compiles (once per sizes) and runs."""

    def __init__(self, owner: Any) -> None:
        import pyopencl as cl

        self.owner = owner  # the SpecialisingModel: its graph, options and value inputs
        device = _device(owner.device)
        self.context = cl.Context([device])
        self.queue = cl.CommandQueue(self.context)
        self.ops = DeviceOps(self.context, self.queue)
        self._graphs: dict[str, Graph] = {}
        self._steps: OrderedDict[str, _Step] = OrderedDict()
        self.last: CompiledModel | None = None

    def run(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        owner = self.owner
        key = owner.key(inputs)
        known: dict[str, Tensor] = {n: np.asarray(a) for n, a in inputs.items() if n not in owner.value_inputs}
        graph = self._graphs.get(key) or self._first_graph(inputs, key)
        outputs = [v.name for v in graph.outputs]
        while True:
            step = self._steps.get(key) or self._plan(graph, key)
            self._steps.move_to_end(key)
            if step.model is not None:
                known.update(step.model.run_device({n: known[n] for n in step.reads}))
                self.last = step.model
            if step.cut is None:
                break
            node = step.cut
            operands = [known[n] if n in known else graph.constants.get(n) if n else None for n in node.inputs]
            _, builtin = _builtin(node.op)
            results = IMPLEMENTATIONS[str(builtin)](self.ops, node, operands)
            for name, value in zip(node.outputs, results, strict=False):
                if name:
                    known[name] = value
            sizes = ";".join(f"{n}:{list(_type_of(known[n]).shape)}" for n in node.outputs if n)
            key = hashlib.sha256(f"{key}|{sizes}".encode()).hexdigest()[:16]
            graph = self._graphs.get(key) or self._after(graph, step, known, key)
        results_host = {name: np.array(graph.constants[name]) if name in graph.constants and name not in known
                        else self.ops.host(known[name]) for name in outputs}
        self.queue.finish()
        return results_host

    def _first_graph(self, inputs: Mapping[str, np.ndarray], key: str) -> Graph:
        from egraph_compiler.backends.opencl.specialise import specialised_graph

        owner = self.owner
        tensors = owner.plan["tensors"]
        with owner.rules_context():
            values = {name: np.asarray(inputs[name], dtype=tensors[name]["dtype"])
                      for name in owner.value_inputs}
            graph = specialised_graph(owner.graph(), values, {n: np.shape(a) for n, a in inputs.items()})
        self._graphs[key] = graph
        return graph

    def _plan(self, graph: Graph, key: str) -> _Step:
        """Cut ``graph`` before its first data-dependent node and compile the segment
        that computes that node's operands (the whole graph when none is left)."""
        cut_at = next((k for k, node in enumerate(graph.nodes)
                       if _builtin(node.op)[0] == EXECUTION_DETERMINED), None)
        producer = {out: k for k, node in enumerate(graph.nodes) for out in node.outputs if out}
        if cut_at is None:
            prefix = frozenset(range(len(graph.nodes)))
            wanted = [v.name for v in graph.outputs if v.name in producer]
        else:
            prefix_set: set[int] = set()
            stack = [n for n in graph.nodes[cut_at].inputs if n in producer]
            while stack:
                k = producer[stack.pop()]
                if k not in prefix_set:
                    prefix_set.add(k)
                    stack.extend(n for n in graph.nodes[k].inputs if n in producer)
            prefix = frozenset(prefix_set)
            later = {n for k, node in enumerate(graph.nodes) if k not in prefix for n in node.inputs} | \
                {v.name for v in graph.outputs}
            wanted = [out for k in sorted(prefix) for out in graph.nodes[k].outputs if out in later]
        model, reads = (self._compile(graph, prefix, wanted, key) if prefix and wanted else (None, ()))
        step = self._steps[key] = _Step(model, reads, prefix, None if cut_at is None else graph.nodes[cut_at])
        if len(self._steps) > SEGMENT_LIMIT:
            self._steps.popitem(last=False)
        return step

    def _compile(self, graph: Graph, prefix: frozenset[int], wanted: list[str],
                 key: str) -> tuple[CompiledModel, tuple[str, ...]]:
        from egraph_compiler import shapes

        owner = self.owner
        nodes = tuple(graph.nodes[k] for k in sorted(prefix))
        read = {n for node in nodes for n in node.inputs if n}
        segment = Graph(f"{graph.name}-segment", tuple(v for v in graph.inputs if v.name in read),
                        tuple(Value(n, graph.types[n]) for n in wanted), nodes,
                        {n: a for n, a in graph.constants.items() if n in read}, {}, graph.opset)
        began = time.perf_counter()
        work = Path(tempfile.mkdtemp(prefix=f"dnnr-segment-{key}-"))
        try:
            with owner.rules_context():
                segment = shapes.infer_shapes(segment)
                launches = owner.compile_static(segment, work)
            model = CompiledModel(work, shared=(self.context, self.queue))
        finally:
            shutil.rmtree(work, ignore_errors=True)  # the model holds its kernels and weights
        owner.specialisations.append({"key": key, "seconds": round(time.perf_counter() - began, 4),
                                      "segment": len(nodes), "launches": launches, "cached": False})
        return model, tuple(v.name for v in segment.inputs)

    def _after(self, graph: Graph, step: _Step, known: Mapping[str, Tensor], key: str) -> Graph:
        """``graph`` less the segment and the cut node, the values they made (now
        sized) its inputs, shapes inferred again."""
        from egraph_compiler import shapes

        cut = step.cut
        nodes = tuple(node for k, node in enumerate(graph.nodes) if k not in step.prefix and node is not cut)
        needed = {n for node in nodes for n in node.inputs if n} | {v.name for v in graph.outputs}
        inputs = tuple(Value(n, _type_of(known[n])) for n in sorted(needed) if n in known)
        rest = Graph(graph.name, inputs, graph.outputs, nodes,
                     {n: a for n, a in graph.constants.items() if n in needed}, {}, graph.opset)
        with self.owner.rules_context():
            rest = shapes.infer_shapes(rest)
        self._graphs[key] = rest
        return rest
