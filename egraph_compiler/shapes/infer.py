"""The shape-inference walk: forward rules per op and RDP value propagation, to a fixpoint.

SoD²'s RDP idea: besides shapes, propagate the *values* of small integer tensors
(Shape → Gather → Concat → Reshape chains) as symbolic dims, so a Reshape whose
target is computed at run time still gets a symbolic output shape. `rdp.solve`
iterates forward and backward transfers, chosen by each op's dynamism class.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace

import numpy as np

from egraph_compiler.ir.dims import Dim, DimExpr
from egraph_compiler.ir.errors import ModelError
from egraph_compiler.ir.graph import Graph, Node, TensorType, Value
from egraph_compiler.shapes import rdp, rules, symbolic, values
from egraph_compiler.shapes.prover import active_ranges

DEFAULT_RANGE = (1, 2**31 - 1)
VALUE_LIMIT = 64  # int tensors with at most this many elements get their values tracked


class Context:
    """What a rule sees: the node, its input types/values/constants, and fresh symbols."""

    def __init__(self, state: _State, node: Node) -> None:
        self.state = state
        self.node = node
        self.attrs = node.attr_dict
        self.where = f"node '{node.name}' ({node.op})"
        self.ranges = state.ranges
        self.assume_valid = state.assume_valid

    def has(self, index: int) -> bool:
        return index < len(self.node.inputs) and bool(self.node.inputs[index])

    def type(self, index: int) -> TensorType:
        name = self.node.inputs[index]
        if name not in self.state.types:
            raise ModelError(f"{self.where}: input {name!r} has no type")
        return self.state.types[name]

    def shape(self, index: int) -> tuple[Dim, ...] | None:
        return self.type(index).shape if self.has(index) else None

    def need_shape(self, index: int) -> tuple[Dim, ...]:
        shape = self.shape(index)
        if shape is None:
            raise _Unknown
        return shape

    def dtype(self, index: int) -> str:
        return self.type(index).dtype

    def value(self, index: int) -> tuple[Dim, ...] | None:
        return self.state.values.get(self.node.inputs[index]) if self.has(index) else None

    def const(self, index: int) -> np.ndarray | None:
        return self.state.graph.constants.get(self.node.inputs[index]) if self.has(index) else None

    def fresh(self) -> Dim:
        return self.state.fresh()

    def broadcast(self, shapes: Sequence[tuple[Dim, ...]]) -> tuple[Dim, ...]:
        return symbolic.broadcast(shapes, self.ranges, self.fresh, self.where, assume_valid=self.assume_valid)

    def error(self, message: str) -> ModelError:
        return ModelError(f"{self.where}: {message}")

    def unknown(self) -> Exception:
        """Raise it where the output shape cannot be told without assuming a valid node."""
        return _Unknown()


class _Unknown(Exception):
    """An input's rank is unknown (or, not assuming a valid node, a dim is): outputs get unknown shapes."""


class _State:
    """``assume_valid``: the nodes are a model's, valid by contract (dims a rule cannot express
    become fresh symbols); False for terms nobody vouches for (a dim not implied becomes unknown)."""

    def __init__(self, graph: Graph, ranges: dict[str, tuple[int, int]], assume_valid: bool = True) -> None:
        self.graph = graph
        self.ranges = ranges
        self.assume_valid = assume_valid
        self.types: dict[str, TensorType] = {}
        self.values: dict[str, tuple[Dim, ...]] = {}
        self.declared = {o.name: o.type for o in graph.outputs}
        self.fresh_count = 0

    def fresh(self) -> Dim:
        if not self.assume_valid:
            raise _Unknown
        while f"d{self.fresh_count}" in self.ranges:
            self.fresh_count += 1
        name = f"d{self.fresh_count}"
        self.ranges[name] = (0, DEFAULT_RANGE[1])
        return DimExpr.symbol(name)

    def seed(self) -> None:
        for value in self.graph.inputs:
            self.types[value.name] = value.type
            for dim in value.type.shape or ():
                if isinstance(dim, DimExpr):
                    for symbol in dim.symbols():
                        self.ranges.setdefault(symbol, DEFAULT_RANGE)
        for name, array in self.graph.constants.items():
            self.types[name] = TensorType(str(array.dtype), tuple(int(d) for d in array.shape))
            if array.dtype.kind in "iub" and array.ndim <= 1 and array.size <= VALUE_LIMIT:
                self.values[name] = tuple(int(v) for v in array.reshape(-1))

    def forward(self, node: Node) -> None:
        ctx = Context(self, node)
        rule = rules.rule_for(node.op)
        if rule is None:
            raise ModelError(f"{ctx.where}: shape inference does not know op {node.op}")
        try:
            out_types = rule(ctx)
        except (ValueError, IndexError, TypeError, KeyError, ZeroDivisionError) as error:
            # Attributes come from the model: a malformed one must read as the model's fault.
            raise ModelError(f"{ctx.where}: cannot infer shapes ({type(error).__name__}: {error})") from None
        except _Unknown:
            dtype = ctx.dtype(0) if ctx.has(0) else "float32"
            out_types = [TensorType(dtype, None)] * len(node.outputs)
        for name, out_type in zip(node.outputs, out_types, strict=False):
            if name:
                declared = self.declared.get(name)
                if out_type.shape is None and declared is not None and declared.shape is not None:
                    out_type = TensorType(out_type.dtype, declared.shape)  # the model's own annotation
                self.types[name] = out_type
        if len(node.outputs) == 1 and node.outputs[0]:
            out_type = self.types[node.outputs[0]]
            if out_type.dtype.startswith(("int", "uint", "bool", "float")) and out_type.shape is not None \
                    and len(out_type.shape) <= 1:
                computed = values.propagate(ctx, out_type)
                if computed is not None and len(computed) <= VALUE_LIMIT:
                    self.values[node.outputs[0]] = computed


def infer_shapes(graph: Graph, *, symbols: Mapping[str, tuple[int, int]] | None = None,
                 dynamism: Mapping[str, str] | None = None) -> Graph:
    """Return ``graph`` with ``types`` for every value, ``shape_values`` and symbol ranges.

    ``symbols`` overrides the range of named dims (default ``[1, 2**31-1]``); unknown
    dims get fresh symbols ``d0, d1, ...`` with range ``[0, 2**31-1]``. ``dynamism``
    maps each op to the SoD² class its rule-file declaration states (`rdp.solve`; an op
    missing from it is taken as ``shape_determined``, `rdp.UNDECLARED`).
    """
    ranges = dict(graph.symbols)
    ranges.update(symbols or {})
    state = _State(graph, ranges)
    state.seed()
    rdp.solve(state, graph.nodes, dynamism)
    outputs = tuple(Value(o.name, state.types.get(o.name, o.type)) for o in graph.outputs)
    return replace(
        graph,
        outputs=outputs,
        types=dict(state.types),
        shape_values=dict(state.values),
        symbols=dict(sorted(state.ranges.items())),
    )


def infer_node(
    op: str,
    attrs: Mapping[str, object],
    input_types: Sequence[TensorType | None],
    *,
    num_outputs: int = 1,
    values: Mapping[int, tuple[Dim, ...]] | None = None,
    constants: Mapping[int, np.ndarray] | None = None,
    symbols: Mapping[str, tuple[int, int]] | None = None,
) -> tuple[list[TensorType], tuple[Dim, ...] | None]:
    """Types of one op's outputs (and the RDP value of a single small int output).

    For stages that build nodes one at a time (the e-graph): ``input_types[i]`` is None
    for an absent optional input; ``values`` / ``constants`` are keyed by input index.
    """
    names = tuple(f"in{i}" if t is not None else "" for i, t in enumerate(input_types))
    outputs = tuple(f"out{i}" for i in range(num_outputs))
    node = Node(op, names, outputs, tuple(sorted(attrs.items())), name=f"{op}_probe")
    constant_arrays = {f"in{i}": a for i, a in (constants or {}).items()}
    graph = Graph("probe", (), (), (node,), constants=constant_arrays)
    state = _State(graph, dict(symbols or {}))
    for name, tensor_type in zip(names, input_types, strict=True):
        if tensor_type is not None:
            state.types[name] = tensor_type
    for index, value in (values or {}).items():
        state.values[f"in{index}"] = tuple(value)
    for name, array in constant_arrays.items():
        if array.dtype.kind in "iub" and array.ndim <= 1 and array.size <= VALUE_LIMIT:
            state.values.setdefault(name, tuple(int(v) for v in array.reshape(-1)))
    state.forward(node)
    return [state.types[o] for o in outputs], state.values.get(outputs[0])


def infer_term_shape(
    op: str,
    attrs: Mapping[str, object],
    input_shapes: Sequence[tuple[Dim, ...] | None],
    *,
    values: Mapping[int, tuple[Dim, ...]] | None = None,
    num_outputs: int = 1,
    elementwise: bool = False,
) -> tuple[Dim, ...] | None:
    """Output 0's shape of a term nobody vouches for (one a rewrite built), or None when the
    rules cannot tell it without assuming the term valid: no fresh symbol, no broadcast of
    dims other than equal ones and 1s, and a model error (bad attribute, clashing static
    dims) reads as unknown. ``input_shapes[i]`` is None for an absent input; ``values``
    holds known int values by input index; ``elementwise`` broadcasts the inputs of an op
    no rule knows (one the rule files declare one_to_one). Dtypes play no part; dim facts
    are proved under the ranges `prover.using_ranges` activates (the e-graph's graph's).
    """
    rule = rules.rule_for(op) or (rules.SHAPE_FUNCTIONS["broadcast"] if elementwise else None)
    if rule is None:
        return None
    names = tuple(f"in{i}" if shape is not None else "" for i, shape in enumerate(input_shapes))
    node = Node(op, names, tuple(f"out{i}" for i in range(num_outputs)), tuple(sorted(attrs.items())), name=op)
    state = _State(Graph("term", (), (), (node,)), active_ranges(), assume_valid=False)
    for name, shape in zip(names, input_shapes, strict=True):
        if shape is not None:
            state.types[name] = TensorType("float32", shape)  # a placeholder: shapes never depend on it
    for index, value in (values or {}).items():
        if index < len(names) and names[index]:
            state.values[names[index]] = tuple(value)
    try:
        return rule(Context(state, node))[0].shape
    except (_Unknown, ModelError, ValueError, IndexError, TypeError, KeyError, ZeroDivisionError):
        return None


def broadcast_shape(shapes: Sequence[tuple[Dim, ...] | None]) -> tuple[Dim, ...] | None:
    """NumPy broadcasting of shapes not known to broadcast: dims equal or 1, else None."""
    if not shapes or any(shape is None for shape in shapes):
        return None
    return infer_term_shape("Sum", {}, list(shapes))


def input_symbols(graph: Graph) -> set[str]:
    """The symbols of the graph's input dims (``batch``, ``seq``)."""
    return {s for value in graph.inputs for d in value.type.shape or () if isinstance(d, DimExpr)
            for s in d.symbols()}


def _require_input_symbols(graph: Graph, names: Iterable[str], verb: str) -> None:
    known = input_symbols(graph)
    unknown = sorted(set(names) - known)
    if unknown:
        raise ModelError(f"error: cannot {verb} {', '.join(unknown)}: the model's symbolic input dims "
                         f"are {', '.join(sorted(known)) or 'none'}")


def dim_ranges(graph: Graph, given: Mapping[str, tuple[int, int]]) -> dict[str, tuple[int, int]]:
    """The range of every symbolic input dim: ``given`` (``--dim NAME=LO..HI``) over the
    default ``[1, 2**31-1]``. Raises `ModelError` for a name the inputs lack or an empty range."""
    _require_input_symbols(graph, given, "constrain")
    for name, (low, high) in given.items():
        if not 0 <= low <= high:
            raise ModelError(f"error: --dim {name}={low}..{high} is empty or negative (want 0 <= LO <= HI)")
    ranges = {name: graph.symbols.get(name, DEFAULT_RANGE) for name in sorted(input_symbols(graph))}
    ranges.update(given)
    return ranges


def bind_symbols(graph: Graph, values: Mapping[str, int], *, dynamism: Mapping[str, str] | None = None) -> Graph:
    """Specialise symbolic input dims to ints (``{"batch": 2}``) and re-infer shapes.

    For targets that need static shapes; a symbol not in ``values`` stays symbolic.
    Raises `ModelError` naming a symbol the graph does not have.
    """
    _require_input_symbols(graph, values, "bind")
    for name, value in sorted(values.items()):  # the compile assumed the range (shapes, guards)
        low, high = graph.symbols.get(name, DEFAULT_RANGE)
        if not low <= value <= high:
            raise ModelError(f"error: cannot bind {name}={value}: the model was compiled for "
                             f"{name} in {low}..{high} (--dim)")

    def bound(dim: Dim) -> Dim:
        if isinstance(dim, DimExpr) and dim.symbols() <= set(values):
            return dim.evaluate(dict(values))
        return dim

    inputs = tuple(
        Value(v.name, TensorType(v.type.dtype, None if v.type.shape is None
                                 else tuple(bound(d) for d in v.type.shape)))
        for v in graph.inputs
    )
    symbols = {k: r for k, r in graph.symbols.items() if k not in values}
    return infer_shapes(replace(graph, inputs=inputs, types={}, shape_values={}, symbols=symbols), dynamism=dynamism)
