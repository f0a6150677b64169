"""A read-only view of a `Graph` that fusion, planning and code generation share:
static shapes, producers, consumers, and which inputs of a node carry data."""

from __future__ import annotations

import math
from functools import cached_property

import numpy as np

from egraph_compiler.ir.dims import shape_is_static
from egraph_compiler.ir.errors import ModelError
from egraph_compiler.ir.graph import Graph, Node
from egraph_compiler.shapes.symint import unrecorded

# Inputs that only carry a shape (read at compile time, never by a kernel).
SHAPE_INPUTS = {"Reshape": (1,), "Expand": (1,), "Tile": (1,), "ConstantOfShape": (0,)}


class GraphView:
    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.nodes = graph.nodes
        self.constants = graph.constants
        self.graph_inputs = tuple(v.name for v in graph.inputs)
        self.graph_outputs = tuple(v.name for v in graph.outputs)
        self._shapes: dict[str, tuple[int, ...]] = {}  # the graph is immutable

    @cached_property
    def producer_index(self) -> dict[str, int]:
        return {out: i for i, node in enumerate(self.nodes) for out in node.outputs if out}

    @cached_property
    def consumer_indices(self) -> dict[str, list[int]]:
        users: dict[str, list[int]] = {}
        for i, node in enumerate(self.nodes):
            for name in self.data_inputs(node):
                if i not in users.setdefault(name, []):
                    users[name].append(i)
        return users

    def data_inputs(self, node: Node) -> tuple[str, ...]:
        skip = SHAPE_INPUTS.get(node.op, ())
        return tuple(name for k, name in enumerate(node.inputs) if name and k not in skip)

    def shape(self, value: str) -> tuple[int, ...]:
        known = self._shapes.get(value)
        if known is None:
            known = self._shapes[value] = self._shape(value)
        return known

    def _shape(self, value: str) -> tuple[int, ...]:
        if value in self.constants:
            shape = tuple(int(d) for d in np.shape(self.constants[value]))
            # a constant folded from the dims: its typed shape carries their derivation
            typed = self.graph.types.get(value)
            with unrecorded():  # checks the derivation here; decides nothing (`symint`)
                derived = typed is not None and typed.shape is not None and \
                    all(isinstance(d, int) for d in typed.shape) and tuple(typed.shape) == shape
            return tuple(typed.shape) if derived else shape  # type: ignore[union-attr]
        tensor_type = self.graph.types.get(value)
        if tensor_type is None or not shape_is_static(tensor_type.shape):
            producer = self.producer_index.get(value)
            origin = "" if producer is None else \
                f" (output of node '{self.nodes[producer].name}' ({self.nodes[producer].op}))"
            raise ModelError(f"value '{value}'{origin} has no static shape; the OpenCL backend needs "
                             "static shapes\n  hint: bind symbolic input dims (--bind NAME=INT); a "
                             "shape computed from run-time values (axes, pads, sizes given as "
                             "inputs) must come from constants instead")
        # an int stays itself: the symbolic build's `shapes.symint.SymInt` keeps its derivation
        return tuple(d if isinstance(d, int) else int(d)  # type: ignore[arg-type]
                     for d in tensor_type.shape)

    def dtype(self, value: str) -> str:
        if value in self.constants:
            return str(np.asarray(self.constants[value]).dtype)
        tensor_type = self.graph.types.get(value)
        if tensor_type is None:
            raise ModelError(f"value '{value}' has no type")
        return tensor_type.dtype

    def numel(self, value: str) -> int:
        # math.prod of Python ints: exact, and far cheaper than np.prod on a tuple (the
        # planner asks for it thousands of times per graph; the symbolic build per shape)
        return math.prod(self.shape(value))

    def nbytes(self, value: str) -> int:
        return self.numel(value) * np.dtype(self.dtype(value)).itemsize

    def successors(self, index: int) -> list[int]:
        out: list[int] = []
        for value in self.nodes[index].outputs:
            for user in self.consumer_indices.get(value, []):
                if user not in out:
                    out.append(user)
        return out

    def predecessors(self, index: int) -> list[int]:
        out: list[int] = []
        for value in self.data_inputs(self.nodes[index]):
            producer = self.producer_index.get(value)
            if producer is not None and producer not in out:
                out.append(producer)
        return out

    def output_size(self, index: int) -> int:
        """Intermediate-result size (IRS) of a node, in elements."""
        return sum(self.numel(v) for v in self.nodes[index].outputs if v)
