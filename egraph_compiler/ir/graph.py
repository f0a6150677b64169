"""Data-only description of a tensor program: the IR every stage passes forward.

Nothing here imports another dnnr module. A `Graph` is immutable: stages build a
new one (``dataclasses.replace``) instead of editing it in place.

Conventions
- Values are named by strings; a node refers to its inputs and outputs by name.
  An absent optional input is the empty string ``""``.
- ``Graph.nodes`` is in topological order.
- Constants (ONNX initializers and folded ``Constant`` nodes) live in
  ``Graph.constants`` as NumPy arrays, keyed by value name.
- Dims are ints or symbolic expressions (`egraph_compiler.ir.dims.DimExpr`);
  ``TensorType.shape`` is ``None`` when even the rank is unknown.
- Attribute values are hashable: int, float, str, tuples of those, or
  `TensorAttr` for ONNX tensor-valued attributes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from egraph_compiler.ir.dims import Dim

Shape = tuple[Dim, ...]


@dataclass(frozen=True, slots=True)
class TensorAttr:
    """An ONNX tensor-valued attribute, kept hashable (bytes + dtype + shape)."""

    dtype: str
    shape: tuple[int, ...]
    data: bytes

    def to_numpy(self) -> np.ndarray:
        return np.frombuffer(self.data, dtype=self.dtype).reshape(self.shape).copy()

    @staticmethod
    def from_numpy(array: np.ndarray) -> TensorAttr:
        array = np.asarray(array)
        # tobytes() is C-ordered; np.ascontiguousarray would turn a 0-d array into 1-d.
        return TensorAttr(str(array.dtype), tuple(array.shape), array.tobytes(order="C"))


AttrValue = int | float | str | tuple[int, ...] | tuple[float, ...] | tuple[str, ...] | TensorAttr


@dataclass(frozen=True, slots=True)
class TensorType:
    """Element type (NumPy dtype name, e.g. ``float32``) and shape of a value."""

    dtype: str
    shape: Shape | None

    @property
    def rank(self) -> int | None:
        return None if self.shape is None else len(self.shape)


@dataclass(frozen=True, slots=True)
class Value:
    name: str
    type: TensorType


@dataclass(frozen=True, slots=True)
class Node:
    """One operator application. ``attrs`` is sorted by name so nodes hash stably."""

    op: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    attrs: tuple[tuple[str, AttrValue], ...] = ()
    name: str = ""
    domain: str = ""

    def attr(self, key: str, default: AttrValue | None = None) -> AttrValue | None:
        for name, value in self.attrs:
            if name == key:
                return value
        return default

    @property
    def attr_dict(self) -> dict[str, AttrValue]:
        return dict(self.attrs)


@dataclass(frozen=True, slots=True)
class Graph:
    """A whole model: typed inputs/outputs, nodes in topological order, constants.

    ``types`` gives the `TensorType` of every value (inputs, constants and node
    outputs). ``opset`` is the default-domain ONNX opset the graph was written for;
    ``symbols`` maps each symbolic dim name to its inclusive ``(low, high)`` range.
    Operator semantics are ONNX opset-17 semantics whatever ``opset`` the model
    came from (the importer converts), except that compile-time-constant axes,
    splits, slice bounds, pads and clip bounds are held as attributes.
    """

    name: str
    inputs: tuple[Value, ...]
    outputs: tuple[Value, ...]
    nodes: tuple[Node, ...]
    constants: Mapping[str, np.ndarray] = field(default_factory=dict)
    types: Mapping[str, TensorType] = field(default_factory=dict)
    opset: int = 17
    symbols: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    # Values of small integer tensors known at compile time as symbolic vectors,
    # e.g. Shape(x) = (B, S, 768): filled by `shapes` (SoD² RDP value propagation).
    shape_values: Mapping[str, tuple[Dim, ...]] = field(default_factory=dict)

    def producer(self) -> dict[str, Node]:
        """Map every node output name to the node producing it."""
        return {out: node for node in self.nodes for out in node.outputs if out}

    def consumers(self) -> dict[str, list[Node]]:
        """Map every value name to the nodes that read it (in node order)."""
        users: dict[str, list[Node]] = {}
        for node in self.nodes:
            for name in node.inputs:
                if name:
                    users.setdefault(name, []).append(node)
        return users

    def op_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for node in self.nodes:
            counts[node.op] = counts.get(node.op, 0) + 1
        return dict(sorted(counts.items()))
