"""What the static-shape targets check before generating code: sizes they can index,
and zero-sized tensors, which have a value without being computed.

- Index range: the OpenCL kernels and the Hexagon C index tensors with 32-bit ints
  (``get_global_id`` cast to ``int``, hoisted ``const int`` sizes). A tensor of 2³¹
  elements or more would wrap (``--bind batch=3000000000`` gave a kernel testing
  ``gid >= 9000000000``, always false for an int; a 2⁶³-element input a plan with
  ``"nbytes": 0``). Such a graph is refused with the value's name and size.
- Zero-sized tensors: a value with a zero dim is the empty array of its dtype and
  shape whatever its inputs are, so it becomes a constant and the nodes that
  computed it go (the index code divided by the zero extent). A node that still
  reads an empty tensor to make a non-empty one is evaluated when all its operands
  are known (a reduction over an empty axis: ONNX's identity, 0, -inf, 1...), else
  refused by name (a Concat with an empty piece), not compiled wrongly.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from egraph_compiler.fusion.view import SHAPE_INPUTS
from egraph_compiler.ir.errors import DnnrError
from egraph_compiler.ir.graph import Graph, Node

INDEX_LIMIT = 2**31 - 1  # elements a 32-bit signed index can address


def prepare_static_graph(graph: Graph, target: str) -> Graph:
    """``graph`` (static shapes) with zero-sized values as constants, after checking
    that every tensor fits the target's 32-bit indexing."""
    sizes: dict[str, int] = {}
    for name, value_type in graph.types.items():
        if value_type.shape is None or not all(isinstance(d, int) for d in value_type.shape):
            continue
        sizes[name] = math.prod(int(d) for d in value_type.shape)  # Python ints: never wraps
        if sizes[name] > INDEX_LIMIT:
            raise DnnrError(f"error: value '{name}' has {sizes[name]} elements "
                            f"(shape {list(value_type.shape)}); the {target} target indexes tensors "
                            f"with 32-bit ints, at most {INDEX_LIMIT} elements\n"
                            "  hint: bind smaller dims (--bind), or split the model")
    empty = {name for name, size in sizes.items() if size == 0}
    if not empty:
        return graph
    constants = dict(graph.constants)
    for name in empty:
        value_type = graph.types[name]
        constants.setdefault(name, np.zeros([int(d) for d in value_type.shape or ()], dtype=value_type.dtype))
    inputs = {v.name for v in graph.inputs}
    nodes = tuple(node for node in graph.nodes if not all(o in empty for o in node.outputs if o))
    nodes = tuple(_empty_operands_as_constants(node, empty & inputs, constants) for node in nodes)
    computing: list[Node] = []
    for node in nodes:
        # an empty shape operand is a value (Reshape to a scalar), not an empty piece;
        # so is an empty operand the IR holds as an attribute (axes: none given)
        shape_only = (*SHAPE_INPUTS.get(node.op, ()), *_attribute_operands(node.op))
        reads = [i for k, i in enumerate(node.inputs) if i in empty and k not in shape_only]
        if not reads or not all(o in sizes for o in node.outputs if o):  # else: sized at run time
            computing.append(node)
            continue
        folded = _evaluated(node, constants)
        if folded is not None:  # a reduction over an empty set: its identity (0, -inf, 1...)
            constants.update(folded)
            continue
        raise DnnrError(f"error: node '{node.outputs[0]}' ({node.op}) reads the zero-sized "
                        f"tensor '{reads[0]}' to make a non-empty one; the {target} target "
                        "cannot compile that\n  hint: remove the empty piece from the model")
    nodes = tuple(computing)
    kept = {i for node in nodes for i in node.inputs} | {v.name for v in graph.outputs}
    constants = {name: array for name, array in constants.items() if name in kept and name not in inputs}
    return replace(graph, nodes=nodes, constants=constants)


def _evaluated(node: Node, constants: dict[str, np.ndarray]) -> dict[str, np.ndarray] | None:
    """The outputs of ``node`` when every operand is known (an empty one is: all empty
    tensors of a shape are equal) and the registry can evaluate it, else None."""
    from egraph_compiler.ops.evaluate import can_evaluate, evaluate_node

    if not can_evaluate(node.op) or not all(i in constants for i in node.inputs if i):
        return None
    values = evaluate_node(node.op, node.attrs, [constants[i] if i else None for i in node.inputs],
                           len(node.outputs))
    return {name: value for name, value in zip(node.outputs, values, strict=False) if name}


def _attribute_operands(op: str) -> tuple[int, ...]:
    """Positions of the operands the IR holds as attributes once constant (the registry's
    ``NAME_input`` operands: axes, pads, split sizes, slice bounds)."""
    from egraph_compiler.ops import current

    info = current().get(op)
    return tuple(position for position, _, _ in info.operand_attributes) if info is not None else ()


def _empty_operands_as_constants(node: Node, empty_inputs: set[str],
                                 constants: dict[str, np.ndarray]) -> Node:
    """``node`` reading an empty constant instead of an empty graph input at an operand
    held as an attribute: every empty tensor has the same value, so it is known here
    (a run-time ``axes`` input of length 0) and the planner folds it into the attribute."""
    positions = _attribute_operands(node.op)
    renamed = list(node.inputs)
    for k in positions:
        if k < len(renamed) and renamed[k] in empty_inputs:
            name = f"{renamed[k]}__empty"
            constants[name] = constants[renamed[k]]
            renamed[k] = name
    return node if renamed == list(node.inputs) else replace(node, inputs=tuple(renamed))
