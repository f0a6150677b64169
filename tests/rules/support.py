"""Helpers for the rule-library tests: build a model of several independent cases,
optimise it once with chosen rule files and schedule, and look at each case's cone.

A "case" is a small subgraph with its own inputs and one output named after it, so
one saturation (loading the rules costs seconds) serves a whole test module, and each
case's #FLOPS before and after is measured on the nodes that feed its output only.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from egraph_compiler import dsl, egraph, extract, ir, shapes
from egraph_compiler.dsl.ast import Limits, RuleSet, ScheduleStep
from egraph_compiler.egraph import Saturation
from egraph_compiler.extract.cost import CostModel
from egraph_compiler.ir.graph import Graph

RULES = Path(__file__).resolve().parents[2] / "rules"
FLOAT = TensorProto.FLOAT
SYMBOL_VALUE = 2  # the value a symbolic dim takes in the feeds


@dataclass
class ModelBuilder:
    """Collects nodes, inputs, initializers and outputs of independent cases."""

    nodes: list[onnx.NodeProto] = field(default_factory=list)
    inputs: list[onnx.ValueInfoProto] = field(default_factory=list)
    outputs: list[onnx.ValueInfoProto] = field(default_factory=list)
    initializers: list[onnx.TensorProto] = field(default_factory=list)
    feeds: dict[str, np.ndarray] = field(default_factory=dict)
    rng: np.random.Generator = field(default_factory=lambda: np.random.default_rng(17))

    def input(self, name: str, shape: Sequence[int | str], low: float = -1.0, high: float = 1.0,
              dtype: int = FLOAT) -> str:
        """A graph input; a str dim is symbolic, fed as ``SYMBOL_VALUE``."""
        self.inputs.append(helper.make_tensor_value_info(name, dtype, list(shape)))
        np_dtype = helper.tensor_dtype_to_np_dtype(dtype)
        size = tuple(SYMBOL_VALUE if isinstance(d, str) else d for d in shape)
        if np.issubdtype(np_dtype, np.integer):
            self.feeds[name] = self.rng.integers(int(low), int(high), size=size).astype(np_dtype)
        else:
            self.feeds[name] = self.rng.uniform(low, high, size=size).astype(np_dtype)
        return name

    def const(self, name: str, value: np.ndarray | float, dtype: type = np.float32) -> str:
        array = np.asarray(value, dtype=dtype)
        self.initializers.append(numpy_helper.from_array(array, name))
        return name

    def random_const(self, name: str, shape: Sequence[int], low: float = -1.0, high: float = 1.0) -> str:
        return self.const(name, self.rng.uniform(low, high, size=tuple(shape)))

    def node(self, op: str, inputs: Sequence[str], output: str, **attrs: object) -> str:
        self.nodes.append(helper.make_node(op, list(inputs), [output], **attrs))
        return output

    def output(self, name: str, shape: Sequence[int | str], dtype: int = FLOAT) -> None:
        self.outputs.append(helper.make_tensor_value_info(name, dtype, list(shape)))

    def model(self, only: Sequence[str] | None = None) -> onnx.ModelProto:
        """The model of every case, or of the cases whose outputs are ``only``."""
        nodes, outputs = self.nodes, self.outputs
        if only is not None:
            outputs = [o for o in self.outputs if o.name in only]
            producer = {out: n for n in self.nodes for out in n.output}
            keep: set[int] = set()
            stack = list(only)
            while stack:
                node = producer.get(stack.pop())
                if node is not None and id(node) not in keep:
                    keep.add(id(node))
                    stack.extend(node.input)
            nodes = [n for n in self.nodes if id(n) in keep]
        used = {i for n in nodes for i in n.input}
        graph = helper.make_graph(
            nodes, "rules_cases",
            [i for i in self.inputs if i.name in used],
            outputs,
            [t for t in self.initializers if t.name in used],
        )
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)

    def feeds_for(self, model: onnx.ModelProto) -> dict[str, np.ndarray]:
        return {i.name: self.feeds[i.name] for i in model.graph.input}


def load(files: Sequence[str], schedule: Sequence[ScheduleStep] = ()) -> RuleSet:
    """The named rule files with a test schedule; generous limits (loading counts too)."""
    rules = dsl.load_rules([RULES / f for f in files])
    return dataclasses.replace(
        rules, schedule=tuple(schedule), limits=Limits(nodes=50_000, iterations=60, seconds=240.0)
    )


@dataclass(frozen=True)
class Optimised:
    before: Graph
    after: Graph
    saturation: Saturation

    def fired(self, rule: str) -> int:
        return self.saturation.stats.rule_fires.get(rule, 0)


def optimise(model: onnx.ModelProto, rules: RuleSet, cost_model: CostModel | None = None) -> Optimised:
    before = shapes.infer_shapes(ir.load_onnx(model))
    saturation = egraph.saturate(before, rules)
    chosen = extract.extract(saturation, cost_model=cost_model) if cost_model else extract.extract(saturation)
    # The extracted graph carries the e-graph's types; `shapes` does not know the
    # dnnr-internal operators (Square, Gelu), so it is not re-run here.
    return Optimised(before, chosen.graph, saturation)


def cone(graph: Graph, *outputs: str) -> Graph:
    """The subgraph computing ``outputs``: their producers, transitively."""
    producer = graph.producer()
    needed: set[int] = set()
    stack = list(outputs)
    while stack:
        node = producer.get(stack.pop())
        if node is None or id(node) in needed:
            continue
        needed.add(id(node))
        stack.extend(i for i in node.inputs if i)
    nodes = tuple(n for n in graph.nodes if id(n) in needed)
    outs = tuple(v for v in graph.outputs if v.name in outputs)
    used = {i for n in nodes for i in n.inputs} | set(outputs)
    ins = tuple(v for v in graph.inputs if v.name in used)
    consts = {k: v for k, v in graph.constants.items() if k in used}
    return dataclasses.replace(graph, inputs=ins, nodes=nodes, outputs=outs, constants=consts)


def flops(graph: Graph, output: str) -> float:
    return extract.graph_cost(cone(graph, output)).flops


def op_count(graph: Graph, output: str, op: str) -> int:
    return sum(1 for n in cone(graph, output).nodes if n.op == op)


def lower_internal_ops(graph: Graph) -> Graph:
    """dnnr-internal operators in their ONNX form (rules/README.md, "Internal
    operators"), in case the exporter does not lower them itself."""
    nodes = []
    for node in graph.nodes:
        if node.op == "Square":
            node = dataclasses.replace(node, op="Mul", inputs=(node.inputs[0], node.inputs[0]))
        nodes.append(node)
    return dataclasses.replace(graph, nodes=tuple(nodes))


def run_graph(graph: Graph, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The IR graph exported to ONNX and run by onnxruntime."""
    from tests.modelzoo import run_ort

    return run_ort(ir.to_onnx(lower_internal_ops(graph)), dict(feeds))
