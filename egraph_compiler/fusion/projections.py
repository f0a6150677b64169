"""Horizontal fusion of projections that share an input (attention's Q, K and V).

An attention layer multiplies the same activation by three weight matrices (and adds
three biases). As three MatMuls that is three kernels, each reading the activation
again; as one MatMul by the weights concatenated along N (plus one Add of the
concatenated biases) it is one kernel, and three Slices along the last axis give back
Q, K and V — layout operators, so each becomes index arithmetic in the kernel that
reads it (SmartMem index comprehension) and costs no launch.

It pays whenever it applies here: the merged weights are constants (built once at
compile time), every projection reads the whole input, and the merged kernel does the
same multiply-adds as the three it replaces with one launch and one pass over the
input instead of three. Projections with different bias structure (one with a bias,
one without) keep their Adds apart: only the MatMuls merge then.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from egraph_compiler.fusion.view import GraphView
from egraph_compiler.ir.graph import Graph, Node, TensorType

MIN_PROJECTIONS = 2


@dataclass(frozen=True)
class _Projection:
    matmul: int
    weight: np.ndarray
    bias_add: int | None  # the Add of a constant [N] bias right after the MatMul
    bias: np.ndarray | None
    output: str  # the value its consumers read (the Add's output when it has a bias)


def _projections(view: GraphView, value: str) -> list[_Projection]:
    """The MatMuls reading ``value`` as their left operand with constant 2-D weights."""
    found = []
    for n in view.consumer_indices.get(value, []):
        node = view.nodes[n]
        if node.op != "MatMul" or node.inputs[0] != value or node.inputs[1] == value:
            continue
        weight = view.constants.get(node.inputs[1])
        if weight is None or weight.ndim != 2 or view.dtype(node.outputs[0]) != "float32":
            continue
        bias_add, bias, output = None, None, node.outputs[0]
        users = view.consumer_indices.get(output, [])
        if len(users) == 1 and output not in view.graph_outputs and \
                view.nodes[users[0]].op == "Add":
            user = view.nodes[users[0]]
            other = user.inputs[1] if user.inputs[0] == output else user.inputs[0]
            constant = view.constants.get(other)
            if constant is not None and constant.shape == (weight.shape[1],):
                bias_add, bias, output = users[0], constant, user.outputs[0]
        found.append(_Projection(n, weight, bias_add, bias, output))
    return found


def merge_projections(graph: Graph) -> tuple[Graph, list[tuple[str, ...]]]:
    """``graph`` with every group of projections sharing an input merged (module
    docstring), and the merged MatMuls' output names per group (for the report)."""
    view = GraphView(graph)
    replaced: dict[int, list[Node]] = {}  # first MatMul's index -> the nodes replacing the group
    dropped: set[int] = set()
    constants = dict(graph.constants)
    types = dict(graph.types)
    groups: list[tuple[str, ...]] = []
    values = [v.name for v in graph.inputs] + [o for node in graph.nodes for o in node.outputs if o]
    for value in values:
        group = _projections(view, value)
        if len(group) < MIN_PROJECTIONS:
            continue
        with_bias = all(p.bias is not None for p in group)
        first = view.nodes[group[0].matmul]
        merged = f"{first.outputs[0]}/merged_projections"
        weights = f"{merged}/weight"
        constants[weights] = np.concatenate([p.weight for p in group], axis=1)
        out_type = graph.types[first.outputs[0]]
        shape = (*tuple(out_type.shape or ())[:-1], int(constants[weights].shape[1]))
        types[weights] = TensorType("float32", constants[weights].shape)
        types[merged] = TensorType("float32", shape)
        nodes = [Node("MatMul", (value, weights), (merged,), name=merged)]
        source = merged
        if with_bias:
            biases, source = f"{merged}/bias", f"{merged}/biased"
            constants[biases] = np.concatenate([p.bias for p in group])  # type: ignore[misc]
            types[biases] = TensorType("float32", constants[biases].shape)
            types[source] = TensorType("float32", shape)
            nodes.append(Node("Add", (merged, biases), (source,), name=source))
        start, axis = 0, len(shape) - 1
        for p in group:
            width = int(p.weight.shape[1])
            keep_bias = p.bias_add is not None and not with_bias
            sliced = f"{view.nodes[p.matmul].outputs[0]}" if keep_bias else p.output
            nodes.append(Node("Slice", (source,), (sliced,), (
                ("axes", (axis,)), ("ends", (start + width,)), ("starts", (start,)),
                ("steps", (1,))), name=f"{sliced}/slice"))
            start += width
            dropped.add(p.matmul)
            if p.bias_add is not None and with_bias:
                dropped.add(p.bias_add)
        replaced[group[0].matmul] = nodes
        groups.append(tuple(view.nodes[p.matmul].outputs[0] for p in group))
    if not groups:
        return graph, []
    kept: list[Node] = []
    for n, node in enumerate(graph.nodes):
        kept.extend(replaced.get(n, []))
        if n not in dropped:
            kept.append(node)
    used = {i for node in kept for i in node.inputs} | {v.name for v in graph.outputs}
    constants = {k: v for k, v in constants.items() if k in used}
    return replace(graph, nodes=tuple(kept), constants=constants, types=types), groups
